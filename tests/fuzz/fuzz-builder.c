/* SPDX-License-Identifier: MIT */
/*
 * fuzz-builder: a structure-aware target.  The input bytes are a small
 * program that builds a graph with the IR builder API, so nearly every input
 * is a well-formed model and the fuzzer spends its time in the verifier,
 * shape inference, the passes and export rather than in the protobuf
 * decoder.  The model then goes through fuzz_exercise()
 * (tests/fuzz/fuzz-common.h).
 *
 * Program (bytes are read in order; a missing byte reads as 0 and ends the
 * program after the current instruction):
 *   byte 0: tensor-parallel metadata: 0 none, odd: rank 1 of 2, even: rank 0 of 2
 *   byte 1: N, the length of the op table (builder-ops.h) the program was
 *           written for: a node's op is entry (op byte % N).  The table is
 *           append-only, so a saved program builds the same ops after new
 *           ones are added; N = 0 or past the table's end: nothing is built
 *   then instructions, opcode = byte % 8:
 *     0     graph input:  dtype, rank, one dim byte a dim
 *     1     initializer:  dtype, rank, one dim byte a dim, one value byte
 *     2..5  node:         op, input count, one value byte an input, output count,
 *                         attribute mask, one byte an attribute in the mask
 *     6     graph output: value byte
 *     7     move:         node byte, node byte (moves the first before the second)
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "builder-ops.h"
#include "fuzz-common.h"

#define MAX_VALUES 256
#define MAX_NODES 64
#define MAX_LEAVES 16
#define MAX_INIT_BYTES 4096

struct program {
	const uint8_t *p;
	size_t n, at;
};

static uint8_t next(struct program *pr)
{
	return pr->at < pr->n ? pr->p[pr->at++] : 0;
}

static int done(const struct program *pr)
{
	return pr->at >= pr->n;
}

static const enum tpf_dtype dtypes[] = {
	TPF_DTYPE_FLOAT,   TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16,      TPF_DTYPE_INT64,
	TPF_DTYPE_INT32,   TPF_DTYPE_BOOL,     TPF_DTYPE_FLOAT8E4M3FN, TPF_DTYPE_FLOAT4E2M1,
	TPF_DTYPE_UINT8,   TPF_DTYPE_DOUBLE,   TPF_DTYPE_FLOAT8E8M0,   TPF_DTYPE_INT4,
};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

/* dims: static values, unknown (-1) and one symbol (-2) */
static const int64_t dim_table[] = {1, 2, 4, 8, 16, 3, 0, -1, -2, 2, 4, 8};
#define N_DIMS (sizeof(dim_table) / sizeof(dim_table[0]))

static const float float_table[] = {0.0f, 1.0f, 2.0f, 0.5f, 1e-6f, 1e-5f, -1.0f, 3.0f,
				    448.0f, 1e30f, -0.0f, 0.25f};
#define N_FLOATS (sizeof(float_table) / sizeof(float_table[0]))

static const int64_t int_table[] = {0, -1, 1, 2, 8, 4, -2, 3, 64, INT64_MAX, INT64_MIN, 16};
#define N_INTS (sizeof(int_table) / sizeof(int_table[0]))

struct builder {
	struct tpf_model *m;
	struct tpf_graph *g;
	struct tpf_value *vals[MAX_VALUES];
	size_t n_vals;
	struct tpf_node *nodes[MAX_NODES];
	size_t n_nodes, n_leaves, n_outputs;
	size_t n_ops; /* the op table's length the program was written for */
};

static void keep(struct builder *b, struct tpf_value *v)
{
	if (v && b->n_vals < MAX_VALUES)
		b->vals[b->n_vals++] = v;
}

static int read_shape(struct program *pr, int64_t *dims, const char **sym, int *rank_out)
{
	int rank = next(pr) % 5;
	int any_symbol = 0;

	for (int i = 0; i < rank; i++) {
		dims[i] = dim_table[next(pr) % N_DIMS];
		sym[i] = dims[i] == -2 ? "T" : dims[i] < 0 ? "" : NULL;
		any_symbol |= dims[i] < 0;
	}
	*rank_out = rank;
	return any_symbol;
}

static void add_leaf(struct builder *b, struct program *pr, int initializer)
{
	enum tpf_dtype dt = dtypes[next(pr) % N_DTYPES];
	int64_t dims[4];
	const char *sym[4];
	char name[32];
	int rank;
	int symbolic = read_shape(pr, dims, sym, &rank);
	struct tpf_value *v = NULL;

	if (b->n_leaves >= MAX_LEAVES)
		return;
	snprintf(name, sizeof(name), "%s%zu", initializer ? "w" : "x", b->n_leaves++);
	if (!initializer) {
		if (symbolic) {
			char text[4][24];
			const char *sdims[4];
			for (int i = 0; i < rank; i++) {
				if (sym[i]) {
					sdims[i] = sym[i];
				} else {
					snprintf(text[i], sizeof(text[i]), "%lld", (long long)dims[i]);
					sdims[i] = text[i];
				}
			}
			v = tpf_graph_add_input_sym(b->g, name, dt, rank, sdims);
		} else {
			v = tpf_graph_add_input(b->g, name, dt, rank, dims);
		}
		keep(b, v);
		return;
	}

	/* initializers need static dims: unknown ones become 1 */
	uint64_t count = 1;
	for (int i = 0; i < rank; i++) {
		if (dims[i] < 0)
			dims[i] = 1;
		count *= (uint64_t)dims[i];
	}
	size_t nbytes = 0;
	if (tpf_dtype_storage_bytes(dt, count, &nbytes) || nbytes > MAX_INIT_BYTES)
		return;
	uint8_t data[MAX_INIT_BYTES];
	uint8_t pick = next(pr);
	if (dt == TPF_DTYPE_FLOAT) {
		for (size_t i = 0; i + 4 <= nbytes; i += 4)
			memcpy(data + i, &float_table[(pick + i / 4) % N_FLOATS], 4);
	} else if (dt == TPF_DTYPE_INT64) {
		for (size_t i = 0; i + 8 <= nbytes; i += 8)
			memcpy(data + i, &int_table[(pick + i / 8) % N_INTS], 8);
	} else {
		memset(data, pick, nbytes);
	}
	keep(b, tpf_graph_add_initializer(b->g, name, dt, rank, dims, data, nbytes));
}

static struct tpf_value *pick_value(struct builder *b, uint8_t byte)
{
	if (byte == 0xff || !b->n_vals)
		return NULL; /* an omitted optional input */
	return b->vals[byte % b->n_vals];
}

static void set_attrs(struct tpf_node *n, struct program *pr)
{
	uint8_t mask = next(pr);

	if (mask & 1)
		tpf_node_set_attr_float(n, "epsilon", float_table[next(pr) % N_FLOATS]);
	if (mask & 2)
		tpf_node_set_attr_int(n, "axis", int_table[next(pr) % N_INTS]);
	if (mask & 4)
		tpf_node_set_attr_int(n, "to", (int64_t)dtypes[next(pr) % N_DTYPES]);
	if (mask & 8)
		tpf_node_set_attr_int(n, "group_size", next(pr) % 4);
	if (mask & 16)
		tpf_node_set_attr_int(n, "keepdims", next(pr) % 2);
	if (mask & 32)
		tpf_node_set_attr_int(n, "stash_type", int_table[next(pr) % N_INTS]);
	if (mask & 64)
		tpf_node_set_attr_int(n, "block_size", int_table[next(pr) % N_INTS]);
	if (mask & 128) {
		uint8_t k = next(pr);
		int64_t ints[4];
		for (int i = 0; i < k % 5; i++)
			ints[i] = int_table[next(pr) % N_INTS];
		tpf_node_set_attr_ints(n, (k & 0x80) ? "axes" : "perm", ints, k % 5);
	}
}

static void add_node(struct builder *b, struct program *pr)
{
	/* by name, from the pinned table: not by enum tpf_op, whose order changes */
	const struct builder_op *bo = &builder_ops[next(pr) % b->n_ops];
	enum tpf_op op = tpf_op_lookup(bo->domain, bo->type);
	const char *domain = bo->domain, *type = bo->type;
	int min_in = 0, max_in = 3, min_out = 1, max_out = 2;
	struct tpf_value *ins[8];
	char name[32];

	if (b->n_nodes >= MAX_NODES)
		return;
	if (op != TPF_OP_UNKNOWN) {
		const struct tpf_op_info *info = tpf_op_info(op);
		min_in = info->min_inputs;
		max_in = info->max_inputs < 0 ? min_in + 3 : info->max_inputs;
		min_out = info->min_outputs;
		max_out = info->max_outputs < 0 ? min_out + 3 : info->max_outputs;
	}
	/* arity is mostly right, sometimes off by one to reach the verifier's checks */
	uint8_t nb = next(pr);
	int n_in = min_in + (max_in > min_in ? nb % (max_in - min_in + 1) : 0);
	if ((nb & 0xf0) == 0xf0)
		n_in = n_in ? n_in - 1 : n_in + 1;
	if (n_in > 8)
		n_in = 8;
	for (int i = 0; i < n_in; i++)
		ins[i] = pick_value(b, next(pr));
	uint8_t ob = next(pr);
	int n_out = min_out + (max_out > min_out ? ob % (max_out - min_out + 1) : 0);
	if (n_out > 4)
		n_out = 4;

	snprintf(name, sizeof(name), "n%zu", b->n_nodes);
	struct tpf_node *n =
		tpf_graph_add_node(b->g, domain, type, name, ins, (size_t)n_in, (size_t)n_out, NULL);
	if (!n)
		return;
	b->nodes[b->n_nodes++] = n;
	set_attrs(n, pr);
	if (op == TPF_OP_CONSTANT) {
		float f = float_table[next(pr) % N_FLOATS];
		struct tpf_tensor *t =
			tpf_tensor_create(b->g->arena, NULL, TPF_DTYPE_FLOAT, 0, NULL, &f, sizeof(f));
		if (t)
			tpf_node_set_attr_tensor(n, "value", t);
	}
	for (size_t i = 0; i < n->n_outputs; i++)
		keep(b, n->outputs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct program pr = {.p = data, .n = size};
	struct builder b = {0};

	b.m = tpf_model_create();
	if (!b.m)
		return 0;
	b.g = b.m->graph;
	if (tpf_model_set_opset(b.m, "", 23) || tpf_model_set_opset(b.m, TPF_MS_DOMAIN, 1) ||
	    tpf_model_set_opset(b.m, TPF_DOMAIN, 1) || tpf_model_set_opset(b.m, "trt", 1))
		goto out_free_model;
	uint8_t tp = next(&pr);
	b.n_ops = next(&pr);
	if (!b.n_ops || b.n_ops > N_BUILDER_OPS)
		goto out_free_model;
	if (tp) {
		if (tpf_model_set_metadata(b.m, "tp_world_size", "2") ||
		    tpf_model_set_metadata(b.m, "tp_rank", (tp & 1) ? "1" : "0"))
			goto out_free_model;
	}

	while (!done(&pr)) {
		uint8_t op = next(&pr) % 8;
		switch (op) {
		case 0:
			add_leaf(&b, &pr, 0);
			break;
		case 1:
			add_leaf(&b, &pr, 1);
			break;
		case 6: {
			struct tpf_value *v = pick_value(&b, next(&pr));
			if (v && tpf_graph_add_output(b.g, v) == TPF_OK)
				b.n_outputs++;
			break;
		}
		case 7: {
			uint8_t x = next(&pr), y = next(&pr);
			if (b.n_nodes > 1) {
				struct tpf_node *a = b.nodes[x % b.n_nodes], *c = b.nodes[y % b.n_nodes];
				if (a != c)
					tpf_graph_move_node_before(b.g, a, c);
			}
			break;
		}
		default:
			add_node(&b, &pr);
			break;
		}
	}
	/* a graph with no output is dead code: keep the last value */
	if (!b.n_outputs && b.n_vals)
		tpf_graph_add_output(b.g, b.vals[b.n_vals - 1]);

	fuzz_exercise(b.m);
	return 0;

out_free_model:
	tpf_model_free(b.m);
	return 0;
}
