/* SPDX-License-Identifier: MIT */
/*
 * Limits: absurd sizes give a clear error, huge graphs give a correct result,
 * in bounded memory and without overflowing the stack.
 *
 *   - a TensorProto with 2^62 elements (dims 2^31 x 2^31), dims whose
 *     product overflows int64, a byte size that overflows size_t
 *   - a value_info (graph input) shape of 2^62 elements and one whose
 *     product overflows int64
 *   - rank 65 in a TensorProto, in a value_info and through the builder
 *   - subgraphs nested deeper than the importer's limit
 *   - external data that is a named pipe, a folder, a symbolic link out of
 *     the model's folder, shorter than promised, or behind '..'
 *   - a chain of 10^6 nodes (built in memory, in reverse order so that
 *     sorting has real work, then exported and imported again): verifier,
 *     topological sort, shape inference, printers, the default pipeline
 *     (DCE included), export
 *   - a model of 10^6 nodes that all read the same input (a use list of
 *     half a million entries) reduced by a tree of Adds
 *
 * TPF_LIMITS_NODES overrides the 10^6 (for quick runs).  Models are written
 * byte by byte with a small protobuf encoder below, independent of the
 * importer's generated bindings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "tpf-passes.h"

static size_t big_n = 1000000;

/* ------------------------------------------------------------------ protobuf encoder */

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		assert_non_null(b->p);
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, data, n);
	b->n += n;
}

static void put_varint(struct buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;
	do {
		tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	put(b, tmp, n);
}

static void f_varint(struct buf *b, unsigned field, uint64_t v)
{
	put_varint(b, (uint64_t)field << 3);
	put_varint(b, v);
}

static void f_bytes(struct buf *b, unsigned field, const void *data, size_t n)
{
	put_varint(b, ((uint64_t)field << 3) | 2);
	put_varint(b, n);
	put(b, data, n);
}

static void f_str(struct buf *b, unsigned field, const char *s)
{
	f_bytes(b, field, s, strlen(s));
}

/* Moves `sub` in as a length-delimited field and frees it. */
static void f_msg(struct buf *b, unsigned field, struct buf *sub)
{
	f_bytes(b, field, sub->p, sub->n);
	free(sub->p);
	memset(sub, 0, sizeof(*sub));
}

/* ONNX field numbers (onnx.proto) */
enum {
	MODEL_IR_VERSION = 1, MODEL_GRAPH = 7, MODEL_OPSET = 8,
	OPSET_DOMAIN = 1, OPSET_VERSION = 2,
	GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INIT = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12,
	NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTR = 5,
	ATTR_NAME = 1, ATTR_G = 6, ATTR_TYPE = 20,
	TENSOR_DIMS = 1, TENSOR_DTYPE = 2, TENSOR_NAME = 8, TENSOR_RAW = 9,
	TENSOR_EXTERNAL = 13, TENSOR_LOCATION = 14, ENTRY_KEY = 1, ENTRY_VALUE = 2,
	VI_NAME = 1, VI_TYPE = 2,
	TYPE_TENSOR = 1, TT_ELEM = 1, TT_SHAPE = 2, SHAPE_DIM = 1, DIM_VALUE = 1,
};

/* rank < 0: no shape */
static void value_info(struct buf *g, unsigned field, const char *name, int dtype,
		       const int64_t *dims, int rank)
{
	struct buf shape = {0}, tt = {0}, type = {0}, vi = {0};
	for (int i = 0; i < rank; i++) {
		struct buf dim = {0};
		f_varint(&dim, DIM_VALUE, (uint64_t)dims[i]);
		f_msg(&shape, SHAPE_DIM, &dim);
	}
	f_varint(&tt, TT_ELEM, (uint64_t)dtype);
	if (rank >= 0)
		f_msg(&tt, TT_SHAPE, &shape);
	f_msg(&type, TYPE_TENSOR, &tt);
	f_str(&vi, VI_NAME, name);
	f_msg(&vi, VI_TYPE, &type);
	f_msg(g, field, &vi);
}

static void node1(struct buf *g, const char *op, const char *in0, const char *in1,
		  const char *out)
{
	struct buf n = {0};
	f_str(&n, NODE_INPUT, in0);
	if (in1)
		f_str(&n, NODE_INPUT, in1);
	f_str(&n, NODE_OUTPUT, out);
	f_str(&n, NODE_NAME, out);
	f_str(&n, NODE_OP_TYPE, op);
	f_msg(g, GRAPH_NODE, &n);
}

static void finish_model(struct buf *m, struct buf *graph)
{
	struct buf op = {0};
	f_varint(m, MODEL_IR_VERSION, 10);
	f_str(&op, OPSET_DOMAIN, "");
	f_varint(&op, OPSET_VERSION, 23);
	f_msg(m, MODEL_OPSET, &op);
	f_msg(m, MODEL_GRAPH, graph);
}

/* x (float[4]) + w -> y, where w is an initializer with the given dims and
 * raw bytes. */
static struct buf model_with_initializer(const int64_t *dims, int rank, size_t raw_len)
{
	static const int64_t four = 4;
	struct buf m = {0}, g = {0}, t = {0};
	uint8_t *raw = calloc(1, raw_len ? raw_len : 1);

	assert_non_null(raw);
	for (int i = 0; i < rank; i++)
		f_varint(&t, TENSOR_DIMS, (uint64_t)dims[i]);
	f_varint(&t, TENSOR_DTYPE, 1);
	f_str(&t, TENSOR_NAME, "w");
	f_bytes(&t, TENSOR_RAW, raw, raw_len);
	free(raw);
	f_str(&g, GRAPH_NAME, "g");
	node1(&g, "Add", "x", "w", "y");
	f_msg(&g, GRAPH_INIT, &t);
	value_info(&g, GRAPH_INPUT, "x", 1, &four, 1);
	value_info(&g, GRAPH_OUTPUT, "y", 1, NULL, -1);
	finish_model(&m, &g);
	return m;
}

/* x (float, the given shape) -> Neg -> y */
static struct buf model_with_input_shape(const int64_t *dims, int rank)
{
	struct buf m = {0}, g = {0};
	f_str(&g, GRAPH_NAME, "g");
	node1(&g, "Neg", "x", NULL, "y");
	value_info(&g, GRAPH_INPUT, "x", 1, dims, rank);
	value_info(&g, GRAPH_OUTPUT, "y", 1, NULL, -1);
	finish_model(&m, &g);
	return m;
}

/* x (float[4]) + w -> y, where w's 16 bytes are external data at `location` */
static struct buf model_with_external(const char *location)
{
	static const int64_t four = 4;
	struct buf m = {0}, g = {0}, t = {0}, e = {0};

	f_varint(&t, TENSOR_DIMS, 4);
	f_varint(&t, TENSOR_DTYPE, 1);
	f_str(&t, TENSOR_NAME, "w");
	f_str(&e, ENTRY_KEY, "location");
	f_str(&e, ENTRY_VALUE, location);
	f_msg(&t, TENSOR_EXTERNAL, &e);
	f_str(&e, ENTRY_KEY, "length");
	f_str(&e, ENTRY_VALUE, "16");
	f_msg(&t, TENSOR_EXTERNAL, &e);
	f_varint(&t, TENSOR_LOCATION, 1);
	f_str(&g, GRAPH_NAME, "g");
	node1(&g, "Add", "x", "w", "y");
	f_msg(&g, GRAPH_INIT, &t);
	value_info(&g, GRAPH_INPUT, "x", 1, &four, 1);
	value_info(&g, GRAPH_OUTPUT, "y", 1, NULL, -1);
	finish_model(&m, &g);
	return m;
}

/* ------------------------------------------------------------------ helpers */

static FILE *sink;

static long peak_rss_mb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss / 1024;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int diag_has(const struct tpf_diag *d, const char *word)
{
	for (size_t i = 0; i < d->count; i++)
		if (d->entries[i].severity == TPF_SEV_ERROR && strstr(d->entries[i].text, word))
			return 1;
	return 0;
}

static void print_errors(const struct tpf_diag *d)
{
	tpf_diag_print(d, stderr);
}

/* Loads bytes that must be refused: a non-OK status, no model, an error
 * message containing one of the words (NULL: any error). */
static void expect_refused(struct buf *b, const char *word, const char *word2)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st;

	assert_non_null(d);
	st = tpf_model_load_memory(b->p, b->n, NULL, NULL, &m, d);
	if (st == TPF_OK) {
		/* the import may accept a description and leave the verdict to the verifier */
		st = tpf_model_verify(m, d);
	}
	print_errors(d);
	assert_int_not_equal(st, TPF_OK);
	assert_true(d->error_count > 0);
	if (word)
		assert_true(diag_has(d, word) || (word2 && diag_has(d, word2)));
	tpf_model_free(m);
	tpf_diag_free(d);
	free(b->p);
}

/* Loads bytes that may be accepted or refused; whatever happens must be
 * consistent: OK and a model that goes through everything, or an error with
 * a message. */
static void expect_clean_outcome(struct buf *b)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st;

	assert_non_null(d);
	st = tpf_model_load_memory(b->p, b->n, NULL, NULL, &m, d);
	if (st == TPF_OK) {
		st = tpf_model_verify(m, d);
		if (st == TPF_OK)
			st = tpf_model_infer_shapes(m, d);
		assert_int_equal(tpf_model_print_text(m, sink), TPF_OK);
		if (st == TPF_OK) {
			void *out = NULL;
			size_t n = 0;
			st = tpf_model_save_memory(m, &out, &n, d);
			tpf_free(out);
		}
	}
	print_errors(d);
	if (st != TPF_OK)
		assert_true(d->error_count > 0);
	tpf_model_free(m);
	tpf_diag_free(d);
	free(b->p);
}

/* ------------------------------------------------------------------ sizes */

static void test_tensor_2_62_elements(void **state)
{
	/* 2^62 float elements: 2^64 bytes, with 16 bytes of data */
	const int64_t dims[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
	struct buf b = model_with_initializer(dims, 2, 16);
	expect_refused(&b, "w", NULL);
}

static void test_tensor_dims_overflow_int64(void **state)
{
	const int64_t a[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
	const int64_t b2[3] = {INT64_MAX, 2, 1};
	const int64_t c[4] = {3037000500, 3037000500, 1, 1}; /* square just above INT64_MAX */
	struct buf b = model_with_initializer(a, 2, 16);
	expect_refused(&b, "w", NULL);
	b = model_with_initializer(b2, 3, 16);
	expect_refused(&b, "w", NULL);
	b = model_with_initializer(c, 4, 16);
	expect_refused(&b, "w", NULL);
}

static void test_tensor_negative_dim(void **state)
{
	const int64_t a[2] = {-1, 4};
	struct buf b = model_with_initializer(a, 2, 16);
	expect_refused(&b, "w", NULL);
}

static void test_value_info_2_62_elements(void **state)
{
	/* a description, not data: accepting it is fine as long as everything
	 * that computes sizes from it checks them */
	const int64_t dims[2] = {(int64_t)1 << 31, (int64_t)1 << 31};
	struct buf b = model_with_input_shape(dims, 2);
	expect_clean_outcome(&b);

	const int64_t one[1] = {(int64_t)1 << 62};
	b = model_with_input_shape(one, 1);
	expect_clean_outcome(&b);
}

static void test_value_info_overflow_int64(void **state)
{
	const int64_t dims[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 7};
	struct buf b = model_with_input_shape(dims, 3);
	expect_clean_outcome(&b);

	struct tpf_shape s = {.rank = 3};
	struct tpf_dim d3[3] = {{(int64_t)1 << 40, NULL, NULL}, {(int64_t)1 << 40, NULL, NULL},
				{7, NULL, NULL}};
	s.dims = d3;
	assert_int_equal(tpf_shape_numel(&s), -1);

	size_t bytes = 0;
	assert_int_not_equal(tpf_dtype_storage_bytes(TPF_DTYPE_FLOAT, (uint64_t)1 << 62, &bytes), 0);
	assert_int_not_equal(tpf_dtype_storage_bytes(TPF_DTYPE_DOUBLE, UINT64_MAX, &bytes), 0);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_INT4, 3, &bytes), 0);
	assert_int_equal(bytes, 2);
}

static void test_rank_65(void **state)
{
	int64_t dims[TPF_MAX_RANK + 1];
	for (int i = 0; i <= TPF_MAX_RANK; i++)
		dims[i] = 1;

	struct buf b = model_with_input_shape(dims, TPF_MAX_RANK + 1);
	expect_refused(&b, "rank", "dims");
	b = model_with_initializer(dims, TPF_MAX_RANK + 1, 4);
	expect_refused(&b, "rank", "dims");

	/* rank 64 is fine */
	b = model_with_input_shape(dims, TPF_MAX_RANK);
	expect_clean_outcome(&b);

	/* the builder refuses it too */
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	assert_null(tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, TPF_MAX_RANK + 1, dims));
	assert_null(tpf_tensor_create(m->graph->arena, "t", TPF_DTYPE_FLOAT, TPF_MAX_RANK + 1,
				      dims, NULL, 4));
	tpf_model_free(m);
}

/* If nodes nested `depth` deep, each then/else branch holding the next. */
static struct buf nested_if_graph(int depth)
{
	struct buf g = {0};
	f_str(&g, GRAPH_NAME, "g");
	if (depth == 0) {
		node1(&g, "Neg", "x", NULL, "y");
		value_info(&g, GRAPH_OUTPUT, "y", 1, NULL, -1);
		return g;
	}
	struct buf then_g = nested_if_graph(depth - 1);
	struct buf a = {0}, n = {0};
	f_str(&a, ATTR_NAME, "then_branch");
	f_varint(&a, ATTR_TYPE, 5);
	f_msg(&a, ATTR_G, &then_g);
	f_str(&n, NODE_INPUT, "c");
	f_str(&n, NODE_OUTPUT, "y");
	f_str(&n, NODE_OP_TYPE, "If");
	f_msg(&n, NODE_ATTR, &a);
	struct buf else_g = {0};
	f_str(&else_g, GRAPH_NAME, "e");
	node1(&else_g, "Neg", "x", NULL, "y");
	value_info(&else_g, GRAPH_OUTPUT, "y", 1, NULL, -1);
	memset(&a, 0, sizeof(a));
	f_str(&a, ATTR_NAME, "else_branch");
	f_varint(&a, ATTR_TYPE, 5);
	f_msg(&a, ATTR_G, &else_g);
	f_msg(&n, NODE_ATTR, &a);
	f_msg(&g, GRAPH_NODE, &n);
	value_info(&g, GRAPH_OUTPUT, "y", 1, NULL, -1);
	return g;
}

static struct buf nested_if_model(int depth)
{
	static const int64_t four = 4;
	struct buf m = {0}, g = nested_if_graph(depth);
	value_info(&g, GRAPH_INPUT, "x", 1, &four, 1);
	value_info(&g, GRAPH_INPUT, "c", 9, NULL, 0);
	finish_model(&m, &g);
	return m;
}

static void test_nesting_depth(void **state)
{
	/* shallow nesting works; very deep nesting is refused by the importer's
	 * depth limit before anything recursive sees it */
	struct buf b = nested_if_model(5);
	expect_clean_outcome(&b);
	b = nested_if_model(20);
	expect_clean_outcome(&b);
	b = nested_if_model(1000);
	expect_refused(&b, "deep", "depth");
}

/* ------------------------------------------------------------------ hostile files */

static char tmp_dir[1024];

static void write_bytes(const char *path, const struct buf *b)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
	assert_int_equal(fclose(f), 0);
}

static void load_file_expect(const char *path, const char *word)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;

	assert_non_null(d);
	/* a load that blocks forever ends the test here */
	alarm(30);
	enum tpf_status st = tpf_model_load_file(path, NULL, &m, d);
	alarm(0);
	print_errors(d);
	assert_int_not_equal(st, TPF_OK);
	assert_null(m);
	assert_true(diag_has(d, word));
	tpf_diag_free(d);
}

/* External data that is a named pipe, a folder, a link out of the model's
 * folder, or shorter than promised: an error, never a blocked read. */
static void test_external_data_files(void **state)
{
	const char *base = getenv("TPF_TEST_TMP");
	char model[1200], target[1200], outside[1200];
	struct buf b;

	snprintf(tmp_dir, sizeof(tmp_dir), "%s/limits-XXXXXX", base && *base ? base : "/tmp");
	if (base && *base)
		mkdir(base, 0777);
	assert_non_null(mkdtemp(tmp_dir));
	snprintf(model, sizeof(model), "%s/model.onnx", tmp_dir);

	snprintf(target, sizeof(target), "%s/pipe.bin", tmp_dir);
	assert_int_equal(mkfifo(target, 0600), 0);
	b = model_with_external("pipe.bin");
	write_bytes(model, &b);
	free(b.p);
	load_file_expect(model, "regular file");
	unlink(target);

	snprintf(target, sizeof(target), "%s/dir.bin", tmp_dir);
	assert_int_equal(mkdir(target, 0700), 0);
	b = model_with_external("dir.bin");
	write_bytes(model, &b);
	free(b.p);
	load_file_expect(model, "regular file");
	rmdir(target);

	snprintf(outside, sizeof(outside), "%s-outside.bin", tmp_dir);
	FILE *f = fopen(outside, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite("0123456789abcdef", 1, 16, f), 16);
	fclose(f);
	snprintf(target, sizeof(target), "%s/link.bin", tmp_dir);
	assert_int_equal(symlink(outside, target), 0);
	b = model_with_external("link.bin");
	write_bytes(model, &b);
	free(b.p);
	load_file_expect(model, "outside");
	unlink(target);
	unlink(outside);

	snprintf(target, sizeof(target), "%s/short.bin", tmp_dir);
	f = fopen(target, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite("01234567", 1, 8, f), 8);
	fclose(f);
	b = model_with_external("short.bin");
	write_bytes(model, &b);
	free(b.p);
	load_file_expect(model, "past its end");
	unlink(target);

	/* the model file itself a named pipe */
	snprintf(target, sizeof(target), "%s/pipe.onnx", tmp_dir);
	assert_int_equal(mkfifo(target, 0600), 0);
	load_file_expect(target, "regular file");
	unlink(target);

	b = model_with_external("../escape.bin");
	write_bytes(model, &b);
	free(b.p);
	load_file_expect(model, "..");

	unlink(model);
	rmdir(tmp_dir);
}

/* ------------------------------------------------------------------ huge graphs */

/* Everything a graph goes through; each stage must succeed.  Returns the
 * exported bytes (tpf_malloc'ed) when `out` is given. */
static void run_everything(struct tpf_model *m, const char *label, void **out, size_t *out_n)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options po = {.passes = "default"};
	double t0 = now_s(), t;
	void *bytes = NULL;
	size_t n = 0;

	assert_non_null(d);
	d->max_entries = 32;
	po.ctx.rank = -1;
#define STAGE(name, call)                                                                   \
	do {                                                                                \
		enum tpf_status st_ = (call);                                               \
		t = now_s();                                                                \
		printf("%s: %-10s %6.2f s  peak rss %ld MiB\n", label, name, t - t0,         \
		       peak_rss_mb());                                                      \
		fflush(stdout);                                                             \
		t0 = t;                                                                     \
		if (st_ != TPF_OK)                                                          \
			print_errors(d);                                                    \
		assert_int_equal(st_, TPF_OK);                                              \
	} while (0)
	STAGE("toposort", tpf_graph_toposort(m->graph, d));
	STAGE("verify", tpf_model_verify(m, d));
	STAGE("infer", tpf_model_infer_shapes(m, d));
	STAGE("print", tpf_model_print_text(m, sink));
	STAGE("dot", tpf_model_print_dot(m, sink));
	STAGE("pipeline", tpf_pipeline_run(m, &po, d));
	STAGE("verify", tpf_model_verify(m, d));
	STAGE("export", tpf_model_save_memory(m, &bytes, &n, d));
#undef STAGE
	if (out) {
		*out = bytes;
		*out_n = n;
	} else {
		tpf_free(bytes);
	}
	tpf_diag_free(d);
}

/* x -> Neg -> Neg -> ... (n nodes) -> y.  Nodes are inserted each before the
 * previous one, so the list starts in exactly the wrong order. */
static struct tpf_model *build_reverse_chain(size_t n)
{
	static const int64_t dims[2] = {2, 4};
	struct tpf_model *m = tpf_model_create();
	struct tpf_value *v;
	struct tpf_node *prev = NULL;

	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	v = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, 2, dims);
	assert_non_null(v);
	for (size_t i = 0; i < n; i++) {
		struct tpf_node *nd =
			tpf_graph_insert_node(m->graph, prev, "", "Neg", NULL, &v, 1, 1, NULL);
		assert_non_null(nd);
		v = nd->outputs[0];
		prev = nd;
	}
	assert_int_equal(tpf_graph_add_output(m->graph, v), TPF_OK);
	return m;
}

static void test_deep_chain(void **state)
{
	struct tpf_model *m = build_reverse_chain(big_n);
	struct tpf_diag *d = tpf_diag_create();
	void *bytes = NULL;
	size_t n = 0;

	assert_non_null(d);
	assert_int_equal(m->graph->first->op, TPF_OP_NEG);
	/* the verifier sees the wrong order before anything sorts it */
	assert_int_not_equal(tpf_model_verify(m, d), TPF_OK);
	tpf_diag_free(d);

	run_everything(m, "chain (builder)", &bytes, &n);
	assert_int_equal(tpf_graph_count_nodes(m->graph, 1), big_n);
	tpf_model_free(m);

	/* the same chain through protobuf bytes */
	d = tpf_diag_create();
	assert_non_null(d);
	m = NULL;
	enum tpf_status st = tpf_model_load_memory(bytes, n, NULL, NULL, &m, d);
	if (st)
		print_errors(d);
	assert_int_equal(st, TPF_OK);
	tpf_free(bytes);
	tpf_diag_free(d);
	assert_int_equal(tpf_graph_count_nodes(m->graph, 1), big_n);
	run_everything(m, "chain (imported)", NULL, NULL);
	tpf_model_free(m);
}

/* A chain of Identity nodes: the clean-up pass removes all of them, one
 * replace-uses after another, leaving x -> y. */
static void test_deep_identity_chain(void **state)
{
	static const int64_t dims[1] = {4};
	struct tpf_model *m = tpf_model_create();
	struct tpf_value *v;

	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	v = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, 1, dims);
	assert_non_null(v);
	for (size_t i = 0; i < big_n; i++) {
		struct tpf_node *nd =
			tpf_graph_add_node(m->graph, "", i % 2 ? "Identity" : "Neg", NULL, &v, 1, 1,
					   NULL);
		assert_non_null(nd);
		v = nd->outputs[0];
	}
	assert_int_equal(tpf_graph_add_output(m->graph, v), TPF_OK);
	run_everything(m, "neg/identity chain", NULL, NULL);
	assert_int_equal(tpf_graph_count_nodes(m->graph, 1), big_n / 2);
	tpf_model_free(m);
}

/* ~n nodes: n/2 Neg nodes all reading x, reduced pairwise by Adds. */
static void test_wide_model(void **state)
{
	static const int64_t dims[1] = {4};
	struct tpf_model *m = tpf_model_create();
	struct tpf_value *x, **level;
	size_t leaves = big_n / 2, count;

	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	x = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, 1, dims);
	assert_non_null(x);
	level = malloc(leaves * sizeof(*level));
	assert_non_null(level);
	for (size_t i = 0; i < leaves; i++) {
		struct tpf_node *nd = tpf_graph_add_node(m->graph, "", "Neg", NULL, &x, 1, 1, NULL);
		assert_non_null(nd);
		level[i] = nd->outputs[0];
	}
	assert_int_equal(tpf_value_use_count(x), leaves);
	for (count = leaves; count > 1;) {
		size_t next = 0;
		for (size_t i = 0; i + 1 < count; i += 2) {
			struct tpf_value *in[2] = {level[i], level[i + 1]};
			struct tpf_node *nd =
				tpf_graph_add_node(m->graph, "", "Add", NULL, in, 2, 1, NULL);
			assert_non_null(nd);
			level[next++] = nd->outputs[0];
		}
		if (count % 2)
			level[next++] = level[count - 1];
		count = next;
	}
	assert_int_equal(tpf_graph_add_output(m->graph, level[0]), TPF_OK);
	free(level);
	size_t nodes = tpf_graph_count_nodes(m->graph, 1);
	assert_true(nodes >= big_n - 2);

	/* the model as built, for the import below (a use list of half a
	 * million entries through the importer) */
	void *bytes = NULL;
	size_t n = 0;
	struct tpf_diag *d = tpf_diag_create();
	assert_non_null(d);
	assert_int_equal(tpf_model_save_memory(m, &bytes, &n, d), TPF_OK);
	run_everything(m, "wide", NULL, NULL);
	/* the default pipeline's cse merges the equal Negs (half a million
	 * drops from one use list) and then the equal Adds of every level */
	size_t after = tpf_graph_count_nodes(m->graph, 1);
	assert_true(after < 64);
	tpf_model_free(m);

	m = NULL;
	assert_int_equal(tpf_model_load_memory(bytes, n, NULL, NULL, &m, d), TPF_OK);
	tpf_free(bytes);
	tpf_diag_free(d);
	assert_int_equal(tpf_graph_count_nodes(m->graph, 1), nodes);
	run_everything(m, "wide (imported)", NULL, NULL);
	tpf_model_free(m);
}

int main(void)
{
	const char *env = getenv("TPF_LIMITS_NODES");
	if (env && *env)
		big_n = (size_t)strtoull(env, NULL, 10);
	if (big_n < 16)
		big_n = 16;
	sink = fopen("/dev/null", "w");
	if (!sink)
		return 1;

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tensor_2_62_elements),
		cmocka_unit_test(test_tensor_dims_overflow_int64),
		cmocka_unit_test(test_tensor_negative_dim),
		cmocka_unit_test(test_value_info_2_62_elements),
		cmocka_unit_test(test_value_info_overflow_int64),
		cmocka_unit_test(test_rank_65),
		cmocka_unit_test(test_nesting_depth),
		cmocka_unit_test(test_external_data_files),
		cmocka_unit_test(test_deep_chain),
		cmocka_unit_test(test_deep_identity_chain),
		cmocka_unit_test(test_wide_model),
	};
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	fclose(sink);
	return rc;
}
