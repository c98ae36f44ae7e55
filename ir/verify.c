/* SPDX-License-Identifier: MIT */
/*
 * The verifier: IR invariants (single definitions, unique names, producer
 * and use lists that agree with the node operands, acyclic and topologically
 * ordered node lists, every operand defined), arity from ops.def, attribute
 * kinds and values, and dtype agreement for known ops.  Subgraphs and
 * function bodies are verified recursively.
 *
 * Every problem is reported, not only the first; messages about a node start
 * with "node 'NAME' (OP): ".  The work is linear in the number of nodes,
 * values and operands: lookups go through hash tables built per graph.
 */
#include "tpf-ir.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* Nesting of subgraphs deeper than this is reported instead of followed. */
#define VERIFY_MAX_DEPTH 256

/* ------------------------------------------------------------------ tables */

/* Open addressing map from a pointer to a 1-based index (0: absent). */
struct ptr_map {
	const void **keys;
	uint32_t *vals;
	size_t cap; /* power of two, or 0 */
	size_t count;
};

static size_t ptr_hash(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)x;
}

static int ptr_map_alloc(struct ptr_map *m, size_t cap)
{
	m->keys = tpf_calloc(cap, sizeof(*m->keys));
	m->vals = tpf_calloc(cap, sizeof(*m->vals));
	if (!m->keys || !m->vals) {
		tpf_free(m->keys);
		tpf_free(m->vals);
		m->keys = NULL;
		m->vals = NULL;
		return -1;
	}
	m->cap = cap;
	m->count = 0;
	return 0;
}

static int ptr_map_init(struct ptr_map *m, size_t expected)
{
	size_t cap = 16;

	while (cap / 2 < expected) {
		if (cap > SIZE_MAX / 4)
			return -1;
		cap <<= 1;
	}
	return ptr_map_alloc(m, cap);
}

static void ptr_map_free(struct ptr_map *m)
{
	tpf_free(m->keys);
	tpf_free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = 0;
}

static uint32_t ptr_map_get(const struct ptr_map *m, const void *p)
{
	size_t i;

	if (!m->cap || !p)
		return 0;
	for (i = ptr_hash(p) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->keys[i])
			return 0;
		if (m->keys[i] == p)
			return m->vals[i];
	}
}

/* Returns 1 if p was already present (value unchanged), 0 when added, -1 on OOM. */
static int ptr_map_put(struct ptr_map *m, const void *p, uint32_t v)
{
	size_t i;

	if (m->count + 1 > m->cap / 2) {
		struct ptr_map bigger;
		size_t k;

		if (m->cap > SIZE_MAX / 4 || ptr_map_alloc(&bigger, m->cap ? m->cap * 2 : 16))
			return -1;
		for (k = 0; k < m->cap; k++) {
			if (!m->keys[k])
				continue;
			for (i = ptr_hash(m->keys[k]) & (bigger.cap - 1); bigger.keys[i];
			     i = (i + 1) & (bigger.cap - 1))
				;
			bigger.keys[i] = m->keys[k];
			bigger.vals[i] = m->vals[k];
			bigger.count++;
		}
		ptr_map_free(m);
		*m = bigger;
	}
	for (i = ptr_hash(p) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == p)
			return 1;
	m->keys[i] = p;
	m->vals[i] = v;
	m->count++;
	return 0;
}

/* Open addressing set of strings, each remembering an owner pointer. */
struct name_set {
	const char **keys;
	const void **owners;
	size_t cap;
};

static size_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return (size_t)(h ^ (h >> 29));
}

static int name_set_init(struct name_set *s, size_t expected)
{
	size_t cap = 16;

	while (cap / 2 < expected) {
		if (cap > SIZE_MAX / 4)
			return -1;
		cap <<= 1;
	}
	s->keys = tpf_calloc(cap, sizeof(*s->keys));
	s->owners = tpf_calloc(cap, sizeof(*s->owners));
	if (!s->keys || !s->owners) {
		tpf_free(s->keys);
		tpf_free(s->owners);
		s->keys = NULL;
		s->owners = NULL;
		return -1;
	}
	s->cap = cap;
	return 0;
}

static void name_set_free(struct name_set *s)
{
	tpf_free(s->keys);
	tpf_free(s->owners);
	s->keys = NULL;
	s->owners = NULL;
	s->cap = 0;
}

/* Adds name; returns the earlier owner when the name was present, else NULL.
 * The set never holds more than `expected` names (the caller sizes it). */
static const void *name_set_add(struct name_set *s, const char *name, const void *owner)
{
	size_t i;

	for (i = str_hash(name) & (s->cap - 1); s->keys[i]; i = (i + 1) & (s->cap - 1))
		if (strcmp(s->keys[i], name) == 0)
			return s->owners[i];
	s->keys[i] = name;
	s->owners[i] = owner;
	return NULL;
}

/* ------------------------------------------------------------------ context */

struct verify_ctx {
	struct tpf_diag *d;
	const struct tpf_model *m; /* may be NULL */
	int64_t opset;             /* ONNX default domain; -1 when unknown */
	int64_t world;             /* tp_world_size from metadata; -1 when unknown */
	int in_function;           /* attribute references allowed, no types */
	int nomem;
	size_t errors;
	const struct tpf_node *onnx_node; /* first node of the ONNX domain seen */
};

/* Per-graph state, kept while subgraphs of the graph are verified. */
struct graph_state {
	const struct tpf_graph *g;
	const struct graph_state *parent;
	int depth;
	char where[320];    /* appended to messages: which subgraph */
	struct ptr_map pos; /* node -> 1-based position in the node list */
	const struct tpf_node **order;
	size_t n;
	uint8_t *vflags; /* by value id */
};

enum {
	VF_LISTED_INPUT = 1,
	VF_LISTED_INIT = 2,
};

static const char *vname(const struct tpf_value *v)
{
	return v && v->name ? v->name : "?";
}

static const char *gname(const struct tpf_graph *g)
{
	return g && g->name ? g->name : "";
}

static void node_error(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void node_error(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *fmt, ...)
{
	char desc[256], msg[1024];
	va_list ap;

	tpf_node_describe(n, desc, sizeof(desc));
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(c->d, TPF_SEV_ERROR, "%s: %s%s", desc, msg, s ? s->where : "");
	c->errors++;
}

static void graph_error(struct verify_ctx *c, const struct graph_state *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void graph_error(struct verify_ctx *c, const struct graph_state *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(c->d, TPF_SEV_ERROR, "graph '%s': %s%s", gname(s->g), msg, s->where);
	c->errors++;
}

static void oom(struct verify_ctx *c)
{
	if (!c->nomem)
		tpf_diag_add(c->d, TPF_SEV_ERROR, "verifier: out of memory");
	c->nomem = 1;
}

/* ------------------------------------------------------------------ type helpers */

static const struct tpf_value *resolve_outer(const struct tpf_value *v)
{
	int depth = 0;

	while (v && v->kind == TPF_VALUE_OUTER && v->outer && depth++ < VERIFY_MAX_DEPTH)
		v = v->outer;
	return v;
}

static const struct tpf_type *tensor_type(const struct tpf_value *v)
{
	v = resolve_outer(v);
	if (!v || v->type.kind != TPF_TYPE_TENSOR)
		return NULL;
	return &v->type;
}

static enum tpf_dtype value_dtype(const struct tpf_value *v)
{
	const struct tpf_type *t = tensor_type(v);

	if (!t || !tpf_dtype_is_valid((int)t->dtype))
		return TPF_DTYPE_UNDEFINED;
	return t->dtype;
}

/* Rank when the shape is known and well formed, else -1. */
static int value_rank(const struct tpf_value *v)
{
	const struct tpf_type *t = tensor_type(v);

	if (!t || t->shape.rank < 0 || t->shape.rank > TPF_MAX_RANK ||
	    (t->shape.rank > 0 && !t->shape.dims))
		return -1;
	return t->shape.rank;
}

/* Static extent of dim i (rank known), or -1. */
static int64_t value_dim(const struct tpf_value *v, int i)
{
	const struct tpf_type *t = tensor_type(v);
	const struct tpf_dim *dim;

	if (value_rank(v) <= i || i < 0)
		return -1;
	dim = &t->shape.dims[i];
	if (dim->param || dim->value < 0)
		return -1;
	return dim->value;
}

static const struct tpf_value *input_at(const struct tpf_node *n, size_t i)
{
	return i < n->n_inputs && n->inputs ? n->inputs[i] : NULL;
}

static const struct tpf_value *output_at(const struct tpf_node *n, size_t i)
{
	return i < n->n_outputs && n->outputs ? n->outputs[i] : NULL;
}

static enum tpf_dtype in_dtype(const struct tpf_node *n, size_t i)
{
	return value_dtype(input_at(n, i));
}

static enum tpf_dtype out_dtype(const struct tpf_node *n, size_t i)
{
	return value_dtype(output_at(n, i));
}

static const char *dt_name(enum tpf_dtype t)
{
	const char *s = tpf_dtype_name(t);

	return s ? s : "?";
}

#define DT_BIT(t) (1u << (t))
#define DT_SIGNED_INTS                                                                    \
	(DT_BIT(TPF_DTYPE_INT8) | DT_BIT(TPF_DTYPE_INT16) | DT_BIT(TPF_DTYPE_INT32) |              \
	 DT_BIT(TPF_DTYPE_INT64))
#define DT_FLOATS                                                                                  \
	(DT_BIT(TPF_DTYPE_FLOAT) | DT_BIT(TPF_DTYPE_FLOAT16) | DT_BIT(TPF_DTYPE_BFLOAT16) |        \
	 DT_BIT(TPF_DTYPE_DOUBLE))
#define DT_INDEX (DT_BIT(TPF_DTYPE_INT32) | DT_BIT(TPF_DTYPE_INT64))

static int is_onnx_domain(const char *domain)
{
	return !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
}

static const char *attr_kind_name(enum tpf_attr_kind k)
{
	static const char *const names[TPF_ATTR_KIND_COUNT] = {
	    "UNDEFINED",      "FLOAT",      "INT",         "STRING",  "TENSOR", "GRAPH",
	    "FLOATS",         "INTS",       "STRINGS",     "TENSORS", "GRAPHS", "SPARSE_TENSOR",
	    "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS",
	};

	if ((int)k < 0 || k >= TPF_ATTR_KIND_COUNT)
		return "invalid";
	return names[k];
}

/* --------------------------------------------------------------- dtype checks */

/* Inputs [first, last) that have a known dtype must share it. */
static void check_same_dtype(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n, size_t first, size_t last)
{
	enum tpf_dtype ref = TPF_DTYPE_UNDEFINED;
	size_t ref_i = 0, i;

	for (i = first; i < last && i < n->n_inputs; i++) {
		enum tpf_dtype dt = in_dtype(n, i);

		if (!dt)
			continue;
		if (!ref) {
			ref = dt;
			ref_i = i;
		} else if (dt != ref) {
			node_error(c, s, n,
			           "input %zu '%s' is %s but input %zu '%s' is %s; expected the "
			           "same dtype",
			           i, vname(input_at(n, i)), dt_name(dt), ref_i,
			           vname(input_at(n, ref_i)), dt_name(ref));
		}
	}
}

static void check_in_dtype(struct verify_ctx *c, const struct graph_state *s,
                           const struct tpf_node *n, size_t i, uint32_t allowed,
                           const char *expected)
{
	enum tpf_dtype dt = in_dtype(n, i);

	if (dt && !(DT_BIT(dt) & allowed))
		node_error(c, s, n, "input %zu '%s' is %s; expected %s", i, vname(input_at(n, i)),
		           dt_name(dt), expected);
}

static void check_out_dtype(struct verify_ctx *c, const struct graph_state *s,
                            const struct tpf_node *n, size_t j, enum tpf_dtype expected,
                            const char *why)
{
	enum tpf_dtype dt = out_dtype(n, j);

	if (dt && expected && dt != expected)
		node_error(c, s, n, "output %zu '%s' is %s; expected %s (%s)", j,
		           vname(output_at(n, j)), dt_name(dt), dt_name(expected), why);
}

/* Output j must be one of two dtypes (ops whose output type follows either input). */
static void check_out_dtype2(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n, size_t j, enum tpf_dtype a, enum tpf_dtype b)
{
	enum tpf_dtype dt = out_dtype(n, j);

	if (!dt || !a || !b || dt == a || dt == b)
		return;
	if (a == b)
		node_error(c, s, n, "output %zu '%s' is %s; expected %s", j, vname(output_at(n, j)),
		           dt_name(dt), dt_name(a));
	else
		node_error(c, s, n, "output %zu '%s' is %s; expected %s or %s", j,
		           vname(output_at(n, j)), dt_name(dt), dt_name(a), dt_name(b));
}

/* Every present output has the dtype of input 0. */
static void check_outs_like_input(struct verify_ctx *c, const struct graph_state *s,
                                  const struct tpf_node *n, size_t in)
{
	enum tpf_dtype dt = in_dtype(n, in);
	size_t j;

	if (!dt)
		return;
	for (j = 0; j < n->n_outputs; j++)
		check_out_dtype(c, s, n, j, dt, "the dtype of the input");
}

/* Static numpy broadcasting of the inputs [first, last). */
static void check_broadcast(struct verify_ctx *c, const struct graph_state *s,
                            const struct tpf_node *n, size_t first, size_t last)
{
	int64_t res[TPF_MAX_RANK];
	size_t from[TPF_MAX_RANK];
	int rank = 0, k;
	size_t i;

	for (i = first; i < last && i < n->n_inputs; i++) {
		const struct tpf_value *v = input_at(n, i);
		int r = value_rank(v);

		if (r < 0)
			continue;
		while (rank < r) {
			/* shift existing dims right to make room on the left */
			memmove(res + 1, res, (size_t)rank * sizeof(*res));
			memmove(from + 1, from, (size_t)rank * sizeof(*from));
			res[0] = 1;
			from[0] = i;
			rank++;
		}
		for (k = 0; k < r; k++) {
			int64_t d = value_dim(v, k);
			int pos = rank - r + k;

			if (d < 0 || d == 1)
				continue;
			if (res[pos] == 1 || res[pos] < 0) {
				res[pos] = d;
				from[pos] = i;
			} else if (res[pos] != d) {
				node_error(c, s, n,
				           "inputs %zu '%s' and %zu '%s' cannot broadcast: "
				           "dimension %d from the right is %" PRId64
				           " and %" PRId64,
				           from[pos], vname(input_at(n, from[pos])), i, vname(v),
				           r - k, res[pos], d);
				return;
			}
		}
	}
}

/* Normalizes an axis for rank r; 0 ok, -1 out of range. */
static int norm_axis(int64_t axis, int r, int64_t *out)
{
	if (axis < -(int64_t)r || axis >= (int64_t)r)
		return -1;
	*out = axis < 0 ? axis + r : axis;
	return 0;
}

static void check_axis_attr(struct verify_ctx *c, const struct graph_state *s,
                            const struct tpf_node *n, const char *attr, int64_t dflt, int rank)
{
	const struct tpf_attr *a = tpf_node_attr(n, attr);
	int64_t axis = dflt, dummy;

	if (a && (a->kind != TPF_ATTR_INT || a->ref_attr_name))
		return;
	if (a)
		axis = a->i;
	if (rank >= 0 && norm_axis(axis, rank, &dummy))
		node_error(c, s, n, "attribute '%s' = %" PRId64 " is out of range for rank %d",
		           attr, axis, rank);
}

static int attr_int(const struct tpf_node *n, const char *name, int64_t *out)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);

	if (!a || a->kind != TPF_ATTR_INT || a->ref_attr_name)
		return 0;
	*out = a->i;
	return 1;
}

/* ------------------------------------------------------------------ attributes */

struct attr_rule {
	enum tpf_op op;
	const char *name;
	enum tpf_attr_kind kind;
	int required;
};

static const struct attr_rule attr_rules[] = {
    {TPF_OP_ARGMAX, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_ARGMAX, "keepdims", TPF_ATTR_INT, 0},
    {TPF_OP_ARGMAX, "select_last_index", TPF_ATTR_INT, 0},
    {TPF_OP_CAST, "to", TPF_ATTR_INT, 1},
    {TPF_OP_CAST, "saturate", TPF_ATTR_INT, 0},
    {TPF_OP_CONCAT, "axis", TPF_ATTR_INT, 1},
    {TPF_OP_CONSTANT_OF_SHAPE, "value", TPF_ATTR_TENSOR, 0},
    {TPF_OP_DEQUANTIZE_LINEAR, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_DEQUANTIZE_LINEAR, "block_size", TPF_ATTR_INT, 0},
    {TPF_OP_DEQUANTIZE_LINEAR, "output_dtype", TPF_ATTR_INT, 0},
    {TPF_OP_GATHER, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_GATHER_ELEMENTS, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_GEMM, "alpha", TPF_ATTR_FLOAT, 0},
    {TPF_OP_GEMM, "beta", TPF_ATTR_FLOAT, 0},
    {TPF_OP_GEMM, "transA", TPF_ATTR_INT, 0},
    {TPF_OP_GEMM, "transB", TPF_ATTR_INT, 0},
    {TPF_OP_LAYER_NORMALIZATION, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_LAYER_NORMALIZATION, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_LAYER_NORMALIZATION, "stash_type", TPF_ATTR_INT, 0},
    {TPF_OP_QUANTIZE_LINEAR, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_QUANTIZE_LINEAR, "block_size", TPF_ATTR_INT, 0},
    {TPF_OP_QUANTIZE_LINEAR, "output_dtype", TPF_ATTR_INT, 0},
    {TPF_OP_QUANTIZE_LINEAR, "saturate", TPF_ATTR_INT, 0},
    {TPF_OP_QUANTIZE_LINEAR, "precision", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_MAX, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_REDUCE_MAX, "keepdims", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_MAX, "noop_with_empty_axes", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_MEAN, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_REDUCE_MEAN, "keepdims", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_MEAN, "noop_with_empty_axes", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_SUM, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_REDUCE_SUM, "keepdims", TPF_ATTR_INT, 0},
    {TPF_OP_REDUCE_SUM, "noop_with_empty_axes", TPF_ATTR_INT, 0},
    {TPF_OP_RESHAPE, "allowzero", TPF_ATTR_INT, 0},
    {TPF_OP_RMS_NORMALIZATION, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_RMS_NORMALIZATION, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_RMS_NORMALIZATION, "stash_type", TPF_ATTR_INT, 0},
    {TPF_OP_SCATTER_ELEMENTS, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_SCATTER_ELEMENTS, "reduction", TPF_ATTR_STRING, 0},
    {TPF_OP_SHAPE, "start", TPF_ATTR_INT, 0},
    {TPF_OP_SHAPE, "end", TPF_ATTR_INT, 0},
    {TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION, "stash_type", TPF_ATTR_INT, 0},
    {TPF_OP_SLICE, "starts", TPF_ATTR_INTS, 0},
    {TPF_OP_SLICE, "ends", TPF_ATTR_INTS, 0},
    {TPF_OP_SLICE, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_SOFTMAX, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_SPLIT, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_SPLIT, "split", TPF_ATTR_INTS, 0},
    {TPF_OP_SPLIT, "num_outputs", TPF_ATTR_INT, 0},
    {TPF_OP_SQUEEZE, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_TOPK, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_TOPK, "largest", TPF_ATTR_INT, 0},
    {TPF_OP_TOPK, "sorted", TPF_ATTR_INT, 0},
    {TPF_OP_TOPK, "k", TPF_ATTR_INT, 0},
    {TPF_OP_TRANSPOSE, "perm", TPF_ATTR_INTS, 0},
    {TPF_OP_UNSQUEEZE, "axes", TPF_ATTR_INTS, 0},
    {TPF_OP_IF, "then_branch", TPF_ATTR_GRAPH, 1},
    {TPF_OP_IF, "else_branch", TPF_ATTR_GRAPH, 1},
    {TPF_OP_LOOP, "body", TPF_ATTR_GRAPH, 1},
    {TPF_OP_SCAN, "body", TPF_ATTR_GRAPH, 1},
    {TPF_OP_SCAN, "num_scan_inputs", TPF_ATTR_INT, 1},
    {TPF_OP_MS_ALLREDUCE, "group_size", TPF_ATTR_INT, 0},
    {TPF_OP_MS_ALLGATHER, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_MS_ALLGATHER, "group_size", TPF_ATTR_INT, 0},
    {TPF_OP_MS_ALLTOALL, "group_size", TPF_ATTR_INT, 0},
    {TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION, "stash_type", TPF_ATTR_INT, 0},
    {TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE, "axis", TPF_ATTR_INT, 0},
    {TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE, "block_size", TPF_ATTR_INT, 0},
    {TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE, "scale_type", TPF_ATTR_INT, 0},
    {TPF_OP_TPF_RMS_NORM, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_TPF_ALLREDUCE_RMS_NORM, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT, "epsilon", TPF_ATTR_FLOAT, 0},
    {TPF_OP_TPF_SHARDED_RMS_NORM, "epsilon", TPF_ATTR_FLOAT, 0},
};

static void check_attr_rules(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n)
{
	size_t i;

	for (i = 0; i < sizeof(attr_rules) / sizeof(attr_rules[0]); i++) {
		const struct attr_rule *r = &attr_rules[i];
		const struct tpf_attr *a;

		if (r->op != n->op)
			continue;
		a = tpf_node_attr(n, r->name);
		if (!a) {
			if (r->required)
				node_error(c, s, n, "missing required attribute '%s' (%s)", r->name,
				           attr_kind_name(r->kind));
			continue;
		}
		if (a->ref_attr_name && c->in_function)
			continue;
		if (a->kind != r->kind)
			node_error(c, s, n, "attribute '%s' is %s; expected %s", r->name,
			           attr_kind_name(a->kind), attr_kind_name(r->kind));
	}
}

/* Kinds and pointers of every attribute, names unique.  Returns 0 when the
 * attributes can be looked up by name (every name present). */
static int check_attrs_generic(struct verify_ctx *c, const struct graph_state *s,
                               const struct tpf_node *n)
{
	struct name_set names = {0};
	size_t i, j;
	int use_set = n->n_attrs > 16;

	int unnamed = 0;

	if (n->n_attrs && !n->attrs) {
		node_error(c, s, n, "has %zu attributes but no attribute array", n->n_attrs);
		return -1;
	}
	if (use_set && name_set_init(&names, n->n_attrs)) {
		oom(c);
		return -1;
	}
	for (i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];
		int bad = 0;

		if (!a->name || !*a->name) {
			node_error(c, s, n, "attribute %zu has no name", i);
			unnamed |= !a->name;
			continue;
		}
		if (use_set) {
			if (name_set_add(&names, a->name, a))
				node_error(c, s, n, "attribute '%s' appears more than once",
				           a->name);
		} else {
			for (j = 0; j < i; j++)
				if (n->attrs[j].name && strcmp(n->attrs[j].name, a->name) == 0) {
					node_error(c, s, n, "attribute '%s' appears more than once",
					           a->name);
					break;
				}
		}
		if (a->ref_attr_name) {
			if (!c->in_function)
				node_error(
				    c, s, n,
				    "attribute '%s' refers to caller attribute '%s' outside a "
				    "function",
				    a->name, a->ref_attr_name);
			continue;
		}
		switch (a->kind) {
		case TPF_ATTR_FLOAT:
		case TPF_ATTR_INT:
			break;
		case TPF_ATTR_STRING:
			bad = !a->s && a->s_len;
			break;
		case TPF_ATTR_TENSOR:
			bad = !a->t;
			break;
		case TPF_ATTR_GRAPH:
			bad = !a->g;
			break;
		case TPF_ATTR_FLOATS:
			bad = a->n && !a->floats;
			break;
		case TPF_ATTR_INTS:
			bad = a->n && !a->ints;
			break;
		case TPF_ATTR_STRINGS:
			bad = a->n && !a->strings;
			break;
		case TPF_ATTR_TENSORS:
			bad = a->n && !a->tensors;
			if (!bad)
				for (j = 0; j < a->n; j++)
					bad |= !a->tensors[j];
			break;
		case TPF_ATTR_GRAPHS:
			bad = a->n && !a->graphs;
			if (!bad)
				for (j = 0; j < a->n; j++)
					bad |= !a->graphs[j];
			break;
		case TPF_ATTR_SPARSE_TENSOR:
		case TPF_ATTR_TYPE_PROTO:
			break;
		case TPF_ATTR_SPARSE_TENSORS:
		case TPF_ATTR_TYPE_PROTOS:
			bad = a->n && !a->blobs;
			break;
		default:
			node_error(c, s, n, "attribute '%s' has invalid kind %d", a->name,
			           (int)a->kind);
			continue;
		}
		if (bad)
			node_error(c, s, n, "attribute '%s' (%s) has no value", a->name,
			           attr_kind_name(a->kind));
	}
	if (use_set)
		name_set_free(&names);
	return unnamed ? -1 : 0;
}

/* --------------------------------------------------------------- op semantics */

/* The input count an op accepts at the model's opset (forms that moved from
 * attributes to inputs). */
static void op_arity(const struct verify_ctx *c, const struct tpf_node *n, int *min_in, int *max_in)
{
	const struct tpf_op_info *info = tpf_op_info(n->op);
	int64_t v = c->opset;

	*min_in = info->min_inputs;
	*max_in = info->max_inputs;
	/* Attention gained nonpad_kv_seqlen (a 7th input) in opset 24. */
	if (n->op == TPF_OP_ATTENTION && *max_in >= 0 && *max_in < 7 && (v <= 0 || v >= 24))
		*max_in = 7;
	if (v <= 0)
		return;
	switch (n->op) {
	case TPF_OP_SLICE:
		if (v < 10)
			*min_in = *max_in = 1;
		break;
	case TPF_OP_TOPK:
		if (v < 10)
			*min_in = *max_in = 1;
		break;
	case TPF_OP_UNSQUEEZE:
		if (v < 13)
			*min_in = *max_in = 1;
		else
			*min_in = *max_in = 2;
		break;
	case TPF_OP_SQUEEZE:
	case TPF_OP_SPLIT:
	case TPF_OP_REDUCE_SUM:
		if (v < 13)
			*min_in = *max_in = 1;
		break;
	case TPF_OP_REDUCE_MEAN:
	case TPF_OP_REDUCE_MAX:
		if (v < 18)
			*min_in = *max_in = 1;
		break;
	default:
		break;
	}
}

/* An attribute that moved to an input at opset `since` must not appear from then on. */
static void check_attr_moved(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n, const char *attr, int64_t since)
{
	if (c->opset >= since && tpf_node_attr(n, attr))
		node_error(c, s, n,
		           "attribute '%s' is not allowed from opset %" PRId64
		           " (the model imports opset %" PRId64 "; it is an input)",
		           attr, since, c->opset);
}

static int valid_dtype_attr(int64_t v)
{
	return v > 0 && v < TPF_DTYPE_COUNT && tpf_dtype_is_valid((int)v);
}

static void check_dtype_attr(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n, const char *attr, int zero_ok)
{
	int64_t v;

	if (!attr_int(n, attr, &v))
		return;
	if (zero_ok && v == 0)
		return;
	if (!valid_dtype_attr(v))
		node_error(c, s, n, "attribute '%s' = %" PRId64 " is not a valid tensor dtype",
		           attr, v);
}

static void check_group_size(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n)
{
	int64_t gs;

	if (!attr_int(n, "group_size", &gs))
		return;
	if (gs <= 0)
		node_error(c, s, n, "attribute 'group_size' = %" PRId64 "; expected > 0", gs);
	else if (c->world > 0 && gs != c->world)
		node_error(c, s, n,
		           "attribute 'group_size' = %" PRId64
		           " differs from the model's tp_world_size %" PRId64,
		           gs, c->world);
}

static void check_perm(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n)
{
	const struct tpf_attr *a = tpf_node_attr(n, "perm");
	uint8_t seen[TPF_MAX_RANK];
	int rank = value_rank(input_at(n, 0));
	size_t i;

	if (!a || a->kind != TPF_ATTR_INTS || a->ref_attr_name)
		return;
	if (a->n > TPF_MAX_RANK) {
		node_error(c, s, n, "attribute 'perm' has %zu entries; at most %d supported", a->n,
		           TPF_MAX_RANK);
		return;
	}
	if (rank >= 0 && a->n != (size_t)rank) {
		node_error(c, s, n, "attribute 'perm' has %zu entries but the input has rank %d",
		           a->n, rank);
		return;
	}
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < a->n; i++) {
		int64_t p = a->ints[i];

		if (p < 0 || p >= (int64_t)a->n || seen[p]) {
			node_error(c, s, n, "attribute 'perm' is not a permutation of 0..%zu",
			           a->n ? a->n - 1 : 0);
			return;
		}
		seen[p] = 1;
	}
}

static void check_matmul_dims(struct verify_ctx *c, const struct graph_state *s,
                              const struct tpf_node *n)
{
	const struct tpf_value *a = input_at(n, 0), *b = input_at(n, 1);
	int ra = value_rank(a), rb = value_rank(b);
	int64_t ka, kb;

	if (ra == 0 || rb == 0) {
		node_error(c, s, n, "%s input is a scalar; MatMul needs rank >= 1",
		           ra == 0 ? "first" : "second");
		return;
	}
	if (ra < 0 || rb < 0)
		return;
	ka = value_dim(a, ra - 1);
	kb = value_dim(b, rb == 1 ? 0 : rb - 2);
	if (ka >= 0 && kb >= 0 && ka != kb)
		node_error(c, s, n,
		           "inner dimensions differ: '%s' has %" PRId64
		           " columns, '%s' has %" PRId64 " rows",
		           vname(a), ka, vname(b), kb);
	if (ra > 2 && rb > 2) {
		/* batch dims broadcast, aligned from the right */
		int i, nb = (ra > rb ? ra : rb) - 2;

		for (i = 1; i <= nb; i++) {
			int64_t x = ra - 2 - i >= 0 ? value_dim(a, ra - 2 - i) : 1;
			int64_t y = rb - 2 - i >= 0 ? value_dim(b, rb - 2 - i) : 1;

			if (x > 1 && y > 1 && x != y) {
				node_error(c, s, n,
				           "batch dimensions cannot broadcast: %" PRId64
				           " and %" PRId64,
				           x, y);
				break;
			}
		}
	}
}

static int count_constant_values(const struct tpf_node *n)
{
	static const char *const names[] = {"value",         "value_float", "value_floats",
	                                    "value_int",     "value_ints",  "value_string",
	                                    "value_strings", "sparse_value"};
	size_t i;
	int count = 0;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		count += tpf_node_attr(n, names[i]) != NULL;
	return count;
}

static void check_quantize(struct verify_ctx *c, const struct graph_state *s,
                           const struct tpf_node *n)
{
	enum tpf_dtype zp = in_dtype(n, 2), expected = TPF_DTYPE_UNDEFINED;
	int64_t od = 0;
	int has_od = attr_int(n, "output_dtype", &od) && od != 0;

	check_in_dtype(c, s, n, 0, DT_FLOATS | DT_BIT(TPF_DTYPE_INT32), "a float type or int32");
	if (has_od && zp && valid_dtype_attr(od) && (enum tpf_dtype)od != zp)
		node_error(c, s, n,
		           "attribute 'output_dtype' is %s but zero point '%s' is %s; they must "
		           "agree",
		           dt_name((enum tpf_dtype)od), vname(input_at(n, 2)), dt_name(zp));
	if (zp)
		expected = zp;
	else if (has_od && valid_dtype_attr(od))
		expected = (enum tpf_dtype)od;
	else if (!input_at(n, 2) && !has_od)
		expected = TPF_DTYPE_UINT8;
	if (expected)
		check_out_dtype(c, s, n, 0, expected,
		                zp       ? "the zero point's dtype"
		                : has_od ? "attribute 'output_dtype'"
		                         : "the default uint8");
}

static void check_dequantize(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n)
{
	enum tpf_dtype expected;
	int64_t od = 0;

	check_same_dtype(c, s, n, 0, 1);
	if (input_at(n, 2)) {
		enum tpf_dtype x = in_dtype(n, 0), zp = in_dtype(n, 2);

		if (x && zp && x != zp)
			node_error(c, s, n,
			           "zero point '%s' is %s but input '%s' is %s; expected the same "
			           "dtype",
			           vname(input_at(n, 2)), dt_name(zp), vname(input_at(n, 0)),
			           dt_name(x));
	}
	if (attr_int(n, "output_dtype", &od) && od != 0) {
		if (valid_dtype_attr(od))
			check_out_dtype(c, s, n, 0, (enum tpf_dtype)od, "attribute 'output_dtype'");
		return;
	}
	if (c->opset > 0 && c->opset < 19)
		expected = TPF_DTYPE_FLOAT;
	else
		expected = in_dtype(n, 1);
	check_out_dtype(c, s, n, 0, expected, "the scale's dtype");
}

/* Number of outputs/inputs a body graph must have versus its node. */
static void check_body(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *attr, size_t want_inputs, size_t want_outputs)
{
	const struct tpf_attr *a = tpf_node_attr(n, attr);
	const struct tpf_graph *b;

	if (!a || a->kind != TPF_ATTR_GRAPH || !a->g)
		return;
	b = a->g;
	if (want_inputs != (size_t)-1 && b->n_inputs != want_inputs)
		node_error(c, s, n, "subgraph '%s' has %zu inputs; expected %zu", attr, b->n_inputs,
		           want_inputs);
	if (want_outputs != (size_t)-1 && b->n_outputs != want_outputs)
		node_error(c, s, n, "subgraph '%s' has %zu outputs; expected %zu", attr,
		           b->n_outputs, want_outputs);
}

static void check_op_semantics(struct verify_ctx *c, const struct graph_state *s,
                               const struct tpf_node *n)
{
	int64_t v;
	int r0 = value_rank(input_at(n, 0));

	check_attr_rules(c, s, n);
	switch (n->op) {
	case TPF_OP_ADD:
	case TPF_OP_SUB:
	case TPF_OP_MUL:
	case TPF_OP_DIV:
	case TPF_OP_MAX:
	case TPF_OP_MIN:
		check_same_dtype(c, s, n, 0, n->n_inputs);
		check_outs_like_input(c, s, n, 0);
		check_broadcast(c, s, n, 0, n->n_inputs);
		break;
	case TPF_OP_POW:
		check_outs_like_input(c, s, n, 0);
		check_broadcast(c, s, n, 0, 2);
		break;
	case TPF_OP_EQUAL:
	case TPF_OP_GREATER:
	case TPF_OP_LESS:
		check_same_dtype(c, s, n, 0, 2);
		check_out_dtype(c, s, n, 0, TPF_DTYPE_BOOL, "comparisons produce bool");
		check_broadcast(c, s, n, 0, 2);
		break;
	case TPF_OP_WHERE:
		check_in_dtype(c, s, n, 0, DT_BIT(TPF_DTYPE_BOOL), "bool");
		check_same_dtype(c, s, n, 1, 3);
		check_outs_like_input(c, s, n, 1);
		check_broadcast(c, s, n, 0, 3);
		break;
	case TPF_OP_NOT:
		check_in_dtype(c, s, n, 0, DT_BIT(TPF_DTYPE_BOOL), "bool");
		check_out_dtype(c, s, n, 0, TPF_DTYPE_BOOL, "Not produces bool");
		break;
	case TPF_OP_ABS:
	case TPF_OP_COS:
	case TPF_OP_ERF:
	case TPF_OP_EXP:
	case TPF_OP_IDENTITY:
	case TPF_OP_NEG:
	case TPF_OP_RECIPROCAL:
	case TPF_OP_RELU:
	case TPF_OP_SIGMOID:
	case TPF_OP_SIN:
	case TPF_OP_SQRT:
	case TPF_OP_TANH:
	case TPF_OP_MS_ALLREDUCE:
	case TPF_OP_MS_ALLTOALL:
		check_outs_like_input(c, s, n, 0);
		if (n->op == TPF_OP_MS_ALLREDUCE || n->op == TPF_OP_MS_ALLTOALL)
			check_group_size(c, s, n);
		/* ONNX type constraints of the unary math ops */
		if (n->op == TPF_OP_SIGMOID || n->op == TPF_OP_SQRT || n->op == TPF_OP_EXP ||
		    n->op == TPF_OP_TANH || n->op == TPF_OP_RECIPROCAL || n->op == TPF_OP_SIN ||
		    n->op == TPF_OP_COS)
			check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
		else if (n->op == TPF_OP_RELU)
			check_in_dtype(c, s, n, 0, DT_FLOATS | DT_SIGNED_INTS,
				       "a float or signed integer type");
		break;
	case TPF_OP_SOFTMAX:
		check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
		check_outs_like_input(c, s, n, 0);
		check_axis_attr(c, s, n, "axis", -1, r0);
		break;
	case TPF_OP_MATMUL:
		check_same_dtype(c, s, n, 0, 2);
		check_outs_like_input(c, s, n, 0);
		check_matmul_dims(c, s, n);
		break;
	case TPF_OP_GEMM:
		check_same_dtype(c, s, n, 0, 3);
		check_outs_like_input(c, s, n, 0);
		break;
	case TPF_OP_CAST:
		if (attr_int(n, "to", &v)) {
			if (!valid_dtype_attr(v))
				node_error(
				    c, s, n,
				    "attribute 'to' = %" PRId64 " is not a valid tensor dtype", v);
			else
				check_out_dtype(c, s, n, 0, (enum tpf_dtype)v, "attribute 'to'");
		}
		break;
	case TPF_OP_RESHAPE:
	case TPF_OP_EXPAND:
		check_in_dtype(c, s, n, 1, DT_BIT(TPF_DTYPE_INT64), "int64");
		check_outs_like_input(c, s, n, 0);
		break;
	case TPF_OP_TRANSPOSE:
		check_outs_like_input(c, s, n, 0);
		check_perm(c, s, n);
		break;
	case TPF_OP_SLICE:
		check_same_dtype(c, s, n, 1, 5);
		check_in_dtype(c, s, n, 1, DT_INDEX, "int32 or int64");
		check_in_dtype(c, s, n, 2, DT_INDEX, "int32 or int64");
		check_in_dtype(c, s, n, 3, DT_INDEX, "int32 or int64");
		check_in_dtype(c, s, n, 4, DT_INDEX, "int32 or int64");
		check_outs_like_input(c, s, n, 0);
		if (c->opset > 0 && c->opset < 10) {
			if (!tpf_node_attr(n, "starts") || !tpf_node_attr(n, "ends"))
				node_error(c, s, n,
				           "needs attributes 'starts' and 'ends' before opset 10");
		} else {
			check_attr_moved(c, s, n, "starts", 10);
			check_attr_moved(c, s, n, "ends", 10);
			check_attr_moved(c, s, n, "axes", 10);
		}
		break;
	case TPF_OP_SPLIT: {
		const struct tpf_attr *sp = tpf_node_attr(n, "split");

		check_in_dtype(c, s, n, 1, DT_BIT(TPF_DTYPE_INT64), "int64");
		check_outs_like_input(c, s, n, 0);
		check_axis_attr(c, s, n, "axis", 0, r0);
		check_attr_moved(c, s, n, "split", 13);
		if (attr_int(n, "num_outputs", &v)) {
			if (c->opset > 0 && c->opset < 18)
				node_error(c, s, n,
				           "attribute 'num_outputs' needs opset 18 (the model "
				           "imports %" PRId64 ")",
				           c->opset);
			if (v != (int64_t)n->n_outputs)
				node_error(c, s, n,
				           "attribute 'num_outputs' = %" PRId64
				           " but the node has %zu outputs",
				           v, n->n_outputs);
			if (input_at(n, 1))
				node_error(c, s, n,
				           "attribute 'num_outputs' and input 'split' are both "
				           "given");
		}
		if (sp && sp->kind == TPF_ATTR_INTS && sp->n != n->n_outputs)
			node_error(c, s, n,
			           "attribute 'split' has %zu entries but the node has %zu outputs",
			           sp->n, n->n_outputs);
		break;
	}
	case TPF_OP_CONCAT: {
		size_t i;
		int rank = -1;

		check_same_dtype(c, s, n, 0, n->n_inputs);
		check_outs_like_input(c, s, n, 0);
		for (i = 0; i < n->n_inputs; i++) {
			int r = value_rank(input_at(n, i));

			if (r < 0)
				continue;
			if (rank < 0) {
				rank = r;
			} else if (r != rank) {
				node_error(
				    c, s, n,
				    "input %zu '%s' has rank %d but earlier inputs have rank "
				    "%d",
				    i, vname(input_at(n, i)), r, rank);
				break;
			}
		}
		if (rank >= 0)
			check_axis_attr(c, s, n, "axis", 0, rank);
		break;
	}
	case TPF_OP_GATHER:
	case TPF_OP_GATHER_ELEMENTS:
		check_in_dtype(c, s, n, 1, DT_INDEX, "int32 or int64");
		check_outs_like_input(c, s, n, 0);
		check_axis_attr(c, s, n, "axis", 0, r0);
		if (n->op == TPF_OP_GATHER_ELEMENTS) {
			int r1 = value_rank(input_at(n, 1));

			if (r0 >= 0 && r1 >= 0 && r0 != r1)
				node_error(
				    c, s, n,
				    "data has rank %d but indices have rank %d; expected the "
				    "same rank",
				    r0, r1);
		}
		break;
	case TPF_OP_SCATTER_ELEMENTS:
		check_in_dtype(c, s, n, 1, DT_INDEX, "int32 or int64");
		check_same_dtype(c, s, n, 0, 1);
		if (in_dtype(n, 0) && in_dtype(n, 2) && in_dtype(n, 0) != in_dtype(n, 2))
			node_error(c, s, n,
			           "updates are %s but data is %s; expected the same dtype",
			           dt_name(in_dtype(n, 2)), dt_name(in_dtype(n, 0)));
		check_outs_like_input(c, s, n, 0);
		break;
	case TPF_OP_SQUEEZE:
	case TPF_OP_UNSQUEEZE:
		check_in_dtype(c, s, n, 1, DT_BIT(TPF_DTYPE_INT64), "int64");
		check_outs_like_input(c, s, n, 0);
		check_attr_moved(c, s, n, "axes", 13);
		if (n->op == TPF_OP_UNSQUEEZE && c->opset > 0 && c->opset < 13 &&
		    !tpf_node_attr(n, "axes"))
			node_error(c, s, n, "missing required attribute 'axes' before opset 13");
		break;
	case TPF_OP_REDUCE_MAX:
	case TPF_OP_REDUCE_MEAN:
	case TPF_OP_REDUCE_SUM:
		check_in_dtype(c, s, n, 1, DT_BIT(TPF_DTYPE_INT64), "int64");
		check_outs_like_input(c, s, n, 0);
		check_attr_moved(c, s, n, "axes", n->op == TPF_OP_REDUCE_SUM ? 13 : 18);
		break;
	case TPF_OP_ARGMAX:
		check_out_dtype(c, s, n, 0, TPF_DTYPE_INT64, "ArgMax produces int64");
		check_axis_attr(c, s, n, "axis", 0, r0);
		break;
	case TPF_OP_SHAPE:
		check_out_dtype(c, s, n, 0, TPF_DTYPE_INT64, "Shape produces int64");
		break;
	case TPF_OP_CONSTANT_OF_SHAPE: {
		const struct tpf_attr *a = tpf_node_attr(n, "value");
		enum tpf_dtype dt = TPF_DTYPE_FLOAT;

		check_in_dtype(c, s, n, 0, DT_BIT(TPF_DTYPE_INT64), "int64");
		if (a && a->kind == TPF_ATTR_TENSOR && a->t) {
			if (tpf_tensor_numel(a->t) != 1)
				node_error(c, s, n,
				           "attribute 'value' must hold exactly one element");
			dt = a->t->dtype;
		}
		check_out_dtype(c, s, n, 0, dt, "the dtype of attribute 'value'");
		break;
	}
	case TPF_OP_CONSTANT: {
		const struct tpf_attr *a = tpf_node_attr(n, "value");
		int count = count_constant_values(n);

		if (count != 1 && !c->in_function)
			node_error(c, s, n,
			           "has %d value attributes; expected exactly one of value, "
			           "value_float(s), value_int(s), value_string(s), sparse_value",
			           count);
		if (a && a->kind != TPF_ATTR_TENSOR && !a->ref_attr_name)
			node_error(c, s, n, "attribute 'value' is %s; expected TENSOR",
			           attr_kind_name(a->kind));
		else if (a && a->t)
			check_out_dtype(c, s, n, 0, a->t->dtype, "the dtype of attribute 'value'");
		break;
	}
	case TPF_OP_RMS_NORMALIZATION:
	case TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION:
	case TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION:
		/* X (T) and scale (V) may differ; Y follows the spec's V, and
		 * tools that give Y the type of X are accepted too. */
		check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type");
		check_in_dtype(c, s, n, 1, DT_FLOATS, "a float type");
		check_out_dtype2(c, s, n, 0, in_dtype(n, 1) ? in_dtype(n, 1) : in_dtype(n, 0),
		                 in_dtype(n, 0) ? in_dtype(n, 0) : in_dtype(n, 1));
		check_axis_attr(c, s, n, "axis", -1, r0);
		check_dtype_attr(c, s, n, "stash_type", 0);
		if (n->n_outputs > 1 && out_dtype(n, 1) && !(DT_BIT(out_dtype(n, 1)) & DT_FLOATS))
			node_error(c, s, n, "output 1 '%s' is %s; expected float or double",
			           vname(output_at(n, 1)), dt_name(out_dtype(n, 1)));
		break;
	case TPF_OP_LAYER_NORMALIZATION: {
		int64_t stash = TPF_DTYPE_FLOAT;

		check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type");
		check_same_dtype(c, s, n, 0, 3);
		check_out_dtype(c, s, n, 0, in_dtype(n, 0), "the dtype of X");
		check_axis_attr(c, s, n, "axis", -1, r0);
		check_dtype_attr(c, s, n, "stash_type", 0);
		attr_int(n, "stash_type", &stash);
		if (valid_dtype_attr(stash)) {
			check_out_dtype(c, s, n, 1, (enum tpf_dtype)stash,
			                "attribute 'stash_type'");
			check_out_dtype(c, s, n, 2, (enum tpf_dtype)stash,
			                "attribute 'stash_type'");
		}
		break;
	}
	case TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION:
		check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type");
		check_same_dtype(c, s, n, 0, 4);
		check_out_dtype(c, s, n, 0, in_dtype(n, 0), "the dtype of the input");
		check_out_dtype(c, s, n, 1, TPF_DTYPE_FLOAT, "mean is float");
		check_out_dtype(c, s, n, 2, TPF_DTYPE_FLOAT, "inv_std_var is float");
		check_out_dtype(c, s, n, 3, in_dtype(n, 0), "the dtype of the input");
		break;
	case TPF_OP_QUANTIZE_LINEAR:
		check_dtype_attr(c, s, n, "output_dtype", 1);
		check_quantize(c, s, n);
		break;
	case TPF_OP_DEQUANTIZE_LINEAR:
		check_dtype_attr(c, s, n, "output_dtype", 1);
		check_dequantize(c, s, n);
		break;
	case TPF_OP_TOPK:
		check_in_dtype(c, s, n, 1, DT_BIT(TPF_DTYPE_INT64), "int64");
		check_out_dtype(c, s, n, 0, in_dtype(n, 0), "the dtype of the input");
		check_out_dtype(c, s, n, 1, TPF_DTYPE_INT64, "indices are int64");
		check_axis_attr(c, s, n, "axis", -1, r0);
		if (c->opset > 0 && c->opset < 10 && !tpf_node_attr(n, "k"))
			node_error(c, s, n, "missing required attribute 'k' before opset 10");
		break;
	case TPF_OP_MS_ALLGATHER:
		check_outs_like_input(c, s, n, 0);
		check_group_size(c, s, n);
		check_axis_attr(c, s, n, "axis", 0, r0);
		break;
	case TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE: {
		int64_t st = TPF_DTYPE_FLOAT8E4M3FN;

		check_in_dtype(c, s, n, 0, DT_FLOATS, "a float type");
		check_out_dtype(c, s, n, 0, TPF_DTYPE_FLOAT4E2M1, "NVFP4 data is float4e2m1");
		check_dtype_attr(c, s, n, "scale_type", 0);
		attr_int(n, "scale_type", &st);
		if (valid_dtype_attr(st))
			check_out_dtype(c, s, n, 1, (enum tpf_dtype)st, "attribute 'scale_type'");
		if (attr_int(n, "block_size", &v) && v <= 0)
			node_error(c, s, n, "attribute 'block_size' = %" PRId64 "; expected > 0",
			           v);
		check_axis_attr(c, s, n, "axis", -1, r0);
		break;
	}
	case TPF_OP_IF:
		check_in_dtype(c, s, n, 0, DT_BIT(TPF_DTYPE_BOOL), "bool");
		check_body(c, s, n, "then_branch", 0, n->n_outputs);
		check_body(c, s, n, "else_branch", 0, n->n_outputs);
		break;
	case TPF_OP_LOOP:
		/* body: (iteration, condition, carried...) -> (condition, carried..., scans...) */
		check_body(c, s, n, "body", n->n_inputs, n->n_outputs + 1);
		break;
	case TPF_OP_SCAN:
		if (c->opset > 0 && c->opset < 9)
			check_body(c, s, n, "body", n->n_inputs ? n->n_inputs - 1 : 0,
			           n->n_outputs);
		else
			check_body(c, s, n, "body", n->n_inputs, n->n_outputs);
		break;
	default:
		break;
	}
}

/* ------------------------------------------------------------------ graphs */

static int is_ancestor(const struct tpf_graph *a, const struct tpf_graph *g)
{
	const struct tpf_graph *p;
	int depth = 0;

	if (!a)
		return 0;
	for (p = g->parent; p && depth < VERIFY_MAX_DEPTH; p = p->parent, depth++)
		if (p == a)
			return 1;
	return 0;
}

static int value_registered(const struct tpf_graph *g, const struct tpf_value *v)
{
	return v->graph == g && g->values && v->id < g->n_values && g->values[v->id] == v;
}

/* NULL when v is a definition visible in s->g; else why not. */
static const char *undefined_reason(const struct graph_state *s, const struct tpf_value *v)
{
	const struct tpf_graph *g = s->g;

	if (!value_registered(g, v)) {
		if (is_ancestor(v->graph, g))
			return "belongs to an enclosing graph and is used without an outer-scope "
			       "reference";
		return "belongs to another graph";
	}
	switch (v->kind) {
	case TPF_VALUE_NODE_OUTPUT:
		if (!v->producer)
			return "is not defined: no node produces it and it is not a graph input "
			       "or initializer";
		if (!ptr_map_get(&s->pos, v->producer))
			return "names a producer that is not in the graph's node list";
		if (v->producer_index < 0 || (size_t)v->producer_index >= v->producer->n_outputs ||
		    !v->producer->outputs || v->producer->outputs[v->producer_index] != v)
			return "is not among the outputs of the node recorded as its producer";
		return NULL;
	case TPF_VALUE_GRAPH_INPUT:
		if (!(s->vflags[v->id] & VF_LISTED_INPUT))
			return "is marked as a graph input but is not listed among the graph's "
			       "inputs";
		return NULL;
	case TPF_VALUE_INITIALIZER:
		if (!v->init)
			return "is marked as an initializer but has no tensor";
		if (!(s->vflags[v->id] & (VF_LISTED_INIT | VF_LISTED_INPUT)))
			return "is marked as an initializer but is not listed among the graph's "
			       "initializers";
		return NULL;
	case TPF_VALUE_OUTER:
		if (!g->parent)
			return "is an outer-scope reference in a graph that has no enclosing graph";
		if (!v->outer || !is_ancestor(v->outer->graph, g))
			return "is an outer-scope reference to no value of an enclosing graph";
		if (!value_registered(v->outer->graph, v->outer))
			return "is an outer-scope reference to a value removed from its graph";
		return NULL;
	default:
		return "has an invalid value kind";
	}
}

static void check_type_sane(struct verify_ctx *c, const struct graph_state *s,
                            const struct tpf_value *v)
{
	const struct tpf_type *t = &v->type;

	if (t->kind == TPF_TYPE_NONE || t->kind == TPF_TYPE_OPAQUE)
		return;
	if (t->kind != TPF_TYPE_TENSOR) {
		graph_error(c, s, "value '%s' has an invalid type kind %d", vname(v), (int)t->kind);
		return;
	}
	if (t->dtype != TPF_DTYPE_UNDEFINED && !tpf_dtype_is_valid((int)t->dtype))
		graph_error(c, s, "value '%s' has an invalid dtype %d", vname(v), (int)t->dtype);
	if (t->shape.rank < -1 || t->shape.rank > TPF_MAX_RANK)
		graph_error(c, s, "value '%s' has rank %d; supported ranks are 0..%d", vname(v),
		            t->shape.rank, TPF_MAX_RANK);
	else if (t->shape.rank > 0 && !t->shape.dims)
		graph_error(c, s, "value '%s' has rank %d but no dims", vname(v), t->shape.rank);
}

static void check_initializer(struct verify_ctx *c, const struct graph_state *s,
                              const struct tpf_value *v)
{
	const struct tpf_tensor *t = v->init;
	int i;

	if (!t)
		return;
	if (!tpf_dtype_is_valid((int)t->dtype) || t->dtype == TPF_DTYPE_UNDEFINED) {
		graph_error(c, s, "initializer '%s' has an invalid dtype %d", vname(v),
		            (int)t->dtype);
		return;
	}
	if (t->rank < 0 || t->rank > TPF_MAX_RANK || (t->rank > 0 && !t->dims)) {
		graph_error(c, s, "initializer '%s' has an invalid rank %d", vname(v), t->rank);
		return;
	}
	for (i = 0; i < t->rank; i++)
		if (t->dims[i] < 0) {
			graph_error(c, s, "initializer '%s' has negative dimension %" PRId64,
			            vname(v), t->dims[i]);
			return;
		}
	if (t->data && t->dtype != TPF_DTYPE_STRING) {
		int64_t numel = tpf_tensor_numel(t);
		size_t want;

		if (numel < 0 || tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &want))
			graph_error(c, s, "initializer '%s': element count overflows", vname(v));
		else if (want != t->nbytes)
			graph_error(c, s,
			            "initializer '%s' holds %zu bytes; %s[%" PRId64
			            " elements] needs %zu",
			            vname(v), t->nbytes, dt_name(t->dtype), numel, want);
	}
	if (v->type.kind == TPF_TYPE_TENSOR) {
		const struct tpf_type *ty = &v->type;
		int ok = !ty->dtype || ty->dtype == t->dtype;

		if (ok && ty->shape.rank >= 0) {
			ok = ty->shape.rank == t->rank && (t->rank == 0 || ty->shape.dims);
			for (i = 0; ok && i < t->rank; i++) {
				const struct tpf_dim *d = &ty->shape.dims[i];

				if (!d->param && d->value >= 0 && d->value != t->dims[i])
					ok = 0;
			}
		}
		if (!ok)
			graph_error(c, s,
			            "initializer '%s': its declared type disagrees with the "
			            "tensor's dtype or shape",
			            vname(v));
	}
}

/* Short label of a node for cycle paths. */
static const char *node_label(const struct tpf_node *n)
{
	if (n->name && *n->name)
		return n->name;
	return n->op_type ? n->op_type : "?";
}

struct edge {
	uint32_t src, dst; /* 0-based positions */
	int slot;          /* input index, or -1-k for implicit input k */
	const struct tpf_value *v;
};

static enum tpf_status verify_graph(struct verify_ctx *c, const struct tpf_graph *g,
                                    const struct graph_state *parent, const char *where);

static void verify_subgraphs(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n)
{
	size_t i, j;

	for (i = 0; i < n->n_attrs && n->attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];
		size_t count;
		struct tpf_graph *const *gs;
		struct tpf_graph *one;

		if (a->ref_attr_name)
			continue;
		if (a->kind == TPF_ATTR_GRAPH && a->g) {
			one = a->g;
			gs = &one;
			count = 1;
		} else if (a->kind == TPF_ATTR_GRAPHS && a->graphs) {
			gs = a->graphs;
			count = a->n;
		} else {
			continue;
		}
		for (j = 0; j < count; j++) {
			const struct tpf_graph *sub = gs[j];
			char desc[200], where[320];

			if (!sub)
				continue;
			if (sub->parent != s->g)
				node_error(c, s, n,
				           "subgraph '%s' does not record this node's graph as its "
				           "parent",
				           a->name ? a->name : "?");
			if (sub->owner != n)
				node_error(c, s, n,
				           "subgraph '%s' does not record this node as its owner",
				           a->name ? a->name : "?");
			if (s->depth + 1 >= VERIFY_MAX_DEPTH) {
				node_error(c, s, n, "subgraphs nest deeper than %d levels",
				           VERIFY_MAX_DEPTH);
				continue;
			}
			tpf_node_describe(n, desc, sizeof(desc));
			snprintf(where, sizeof(where), " (in subgraph '%.64s' of %.128s)%.100s",
			         a->name ? a->name : "?", desc, s->where);
			verify_graph(c, sub, s, where);
		}
	}
}

/* An outer-scope value used in a subgraph must be produced before the node
 * of the enclosing graph that holds the subgraph. */
static void check_outer_order(struct verify_ctx *c, const struct graph_state *s,
                              const struct tpf_value *v)
{
	const struct tpf_value *t = v->outer;
	const struct graph_state *anc;
	const struct tpf_graph *gg = s->g;
	const struct tpf_node *holder;
	uint32_t pp, ph;
	int depth = 0;

	if (!t || t->kind != TPF_VALUE_NODE_OUTPUT || !t->producer)
		return;
	for (anc = s->parent; anc && anc->g != t->graph; anc = anc->parent)
		;
	if (!anc)
		return;
	while (gg && gg->parent != t->graph && depth++ < VERIFY_MAX_DEPTH)
		gg = gg->parent;
	if (!gg || !gg->owner)
		return;
	holder = gg->owner;
	pp = ptr_map_get(&anc->pos, t->producer);
	ph = ptr_map_get(&anc->pos, holder);
	if (pp && ph && pp >= ph) {
		char desc[256];

		tpf_node_describe(t->producer, desc, sizeof(desc));
		node_error(c, anc, holder,
		           "a subgraph uses '%s', which is produced by later %s; nodes are not in "
		           "topological order",
		           vname(t), desc);
	}
}

/* The node holding a subgraph lists every value of its own graph that the
 * subgraph refers to among its implicit inputs (captures). */
static void check_capture(struct verify_ctx *c, const struct graph_state *s,
                          const struct tpf_value *v)
{
	const struct tpf_node *owner = s->g->owner;
	size_t k;

	if (!owner || v->outer->graph != s->g->parent || owner->graph != s->g->parent)
		return;
	if (owner->n_implicit > 256)
		return; /* keep the check linear; large capture lists are rare */
	for (k = 0; k < owner->n_implicit && owner->implicit_inputs; k++)
		if (owner->implicit_inputs[k] == v->outer)
			return;
	graph_error(c, s,
	            "outer-scope value '%s' is not among the captures of the node holding "
	            "this subgraph",
	            vname(v));
}

static void check_operand(struct verify_ctx *c, const struct graph_state *s,
                          const struct tpf_node *n, const char *what, size_t i,
                          const struct tpf_value *v)
{
	const char *why = undefined_reason(s, v);

	if (why)
		node_error(c, s, n, "%s %zu '%s' %s", what, i, vname(v), why);
}

static void report_cycles(struct verify_ctx *c, const struct graph_state *s,
                          const struct edge *edges, size_t n_edges, const uint8_t *done)
{
	uint32_t *pred = NULL, *visit = NULL;
	size_t e, k;
	uint32_t walk = 0;

	pred = tpf_malloc(s->n * sizeof(*pred));
	visit = tpf_calloc(s->n, sizeof(*visit));
	if (!pred || !visit) {
		oom(c);
		goto out_free;
	}
	for (k = 0; k < s->n; k++)
		pred[k] = UINT32_MAX;
	for (e = 0; e < n_edges; e++)
		if (!done[edges[e].src] && !done[edges[e].dst] && pred[edges[e].dst] == UINT32_MAX)
			pred[edges[e].dst] = edges[e].src;
	for (k = 0; k < s->n; k++) {
		uint32_t cur = (uint32_t)k;
		char path[512];
		size_t len = 0, steps = 0;
		uint32_t x;

		if (done[k] || visit[k])
			continue;
		walk++;
		while (cur != UINT32_MAX && !visit[cur]) {
			visit[cur] = walk;
			cur = pred[cur];
		}
		if (cur == UINT32_MAX || visit[cur] != walk)
			continue;
		/* cur is on a cycle; follow producers back around it */
		path[0] = '\0';
		x = cur;
		do {
			int w = snprintf(path + len, sizeof(path) - len, "%s'%s'",
			                 len ? " <- " : "", node_label(s->order[x]));

			if (w < 0 || (size_t)w >= sizeof(path) - len) {
				len = sizeof(path) - 1;
				break;
			}
			len += (size_t)w;
			x = pred[x];
		} while (x != cur && x != UINT32_MAX && ++steps < 16);
		if (x == cur && len < sizeof(path) - 1)
			snprintf(path + len, sizeof(path) - len, " <- '%s'",
			         node_label(s->order[cur]));
		else if (len < sizeof(path) - 5)
			snprintf(path + len, sizeof(path) - len, " ...");
		node_error(c, s, s->order[cur], "is on a cycle (each reads the next): %s", path);
	}
out_free:
	tpf_free(pred);
	tpf_free(visit);
}

/* Kahn's algorithm over the operand edges: reports cycles, then operands
 * produced later in the list by nodes that are not on or after a cycle. */
static void check_order(struct verify_ctx *c, const struct graph_state *s, const struct edge *edges,
                        size_t n_edges)
{
	uint32_t *indeg = NULL, *start = NULL, *adj = NULL, *queue = NULL;
	uint8_t *done = NULL;
	size_t e, k, head = 0, tail = 0, n = s->n;
	int any_left = 0;

	if (!n)
		return;
	indeg = tpf_calloc(n, sizeof(*indeg));
	start = tpf_calloc(n + 1, sizeof(*start));
	adj = tpf_malloc((n_edges ? n_edges : 1) * sizeof(*adj));
	queue = tpf_malloc(n * sizeof(*queue));
	done = tpf_calloc(n, 1);
	if (!indeg || !start || !adj || !queue || !done) {
		oom(c);
		goto out_free;
	}
	for (e = 0; e < n_edges; e++) {
		indeg[edges[e].dst]++;
		start[edges[e].src + 1]++;
	}
	for (k = 0; k < n; k++)
		start[k + 1] += start[k];
	{
		uint32_t *fill = queue; /* reuse as a cursor array before the queue runs */

		for (k = 0; k < n; k++)
			fill[k] = start[k];
		for (e = 0; e < n_edges; e++)
			adj[fill[edges[e].src]++] = edges[e].dst;
	}
	for (k = 0; k < n; k++)
		if (!indeg[k])
			queue[tail++] = (uint32_t)k;
	while (head < tail) {
		uint32_t x = queue[head++];

		done[x] = 1;
		for (e = start[x]; e < start[x + 1]; e++)
			if (--indeg[adj[e]] == 0)
				queue[tail++] = adj[e];
	}
	for (k = 0; k < n; k++)
		any_left |= !done[k];
	if (any_left)
		report_cycles(c, s, edges, n_edges, done);
	for (e = 0; e < n_edges; e++) {
		const struct edge *ed = &edges[e];
		char desc[256];

		if (ed->src < ed->dst || !done[ed->src])
			continue;
		tpf_node_describe(s->order[ed->src], desc, sizeof(desc));
		if (ed->slot >= 0)
			node_error(c, s, s->order[ed->dst],
			           "input %d '%s' is produced by later %s; nodes are not in "
			           "topological order",
			           ed->slot, vname(ed->v), desc);
		else
			node_error(c, s, s->order[ed->dst],
			           "subgraph input '%s' is produced by later %s; nodes are not in "
			           "topological order",
			           vname(ed->v), desc);
	}
out_free:
	tpf_free(indeg);
	tpf_free(start);
	tpf_free(adj);
	tpf_free(queue);
	tpf_free(done);
}

/* Use lists: every use names a real operand slot, once; every operand slot
 * of a value of this graph appears in the value's use list. */
static void check_uses(struct verify_ctx *c, const struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t *offset = NULL, total = 0, i, k;
	uint8_t *seen = NULL;

	offset = tpf_malloc((s->n + 1) * sizeof(*offset));
	if (!offset) {
		oom(c);
		return;
	}
	for (k = 0; k < s->n; k++) {
		const struct tpf_node *n = s->order[k];

		offset[k] = total;
		if (tpf_add_size(total, n->n_inputs, &total) ||
		    tpf_add_size(total, n->n_implicit, &total)) {
			oom(c);
			goto out_free;
		}
	}
	offset[s->n] = total;
	seen = tpf_calloc(total ? total : 1, 1);
	if (!seen) {
		oom(c);
		goto out_free;
	}
	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];
		size_t u;

		if (!v || !value_registered(g, v))
			continue;
		if (v->n_uses && !v->uses) {
			graph_error(c, s, "value '%s' has %zu uses but no use array", vname(v),
			            v->n_uses);
			continue;
		}
		for (u = 0; u < v->n_uses; u++) {
			const struct tpf_use *use = &v->uses[u];
			const struct tpf_node *n = use->node;
			uint32_t pos = n ? ptr_map_get(&s->pos, n) : 0;
			size_t slot;

			if (!pos) {
				graph_error(c, s,
				            "value '%s' lists a use by a node that is not in this "
				            "graph's node list",
				            vname(v));
				continue;
			}
			if (use->index >= 0) {
				if ((size_t)use->index >= n->n_inputs || !n->inputs ||
				    n->inputs[use->index] != v) {
					node_error(
					    c, s, n,
					    "value '%s' lists a use as input %d, but the node "
					    "does not read it there",
					    vname(v), use->index);
					continue;
				}
				slot = offset[pos - 1] + (size_t)use->index;
			} else {
				size_t imp = (size_t)(-(int64_t)use->index - 1);

				if (imp >= n->n_implicit || !n->implicit_inputs ||
				    n->implicit_inputs[imp] != v) {
					node_error(
					    c, s, n,
					    "value '%s' lists a use as subgraph capture %zu, "
					    "but the node does not capture it there",
					    vname(v), imp);
					continue;
				}
				slot = offset[pos - 1] + n->n_inputs + imp;
			}
			if (seen[slot])
				node_error(c, s, n, "value '%s' lists the same use twice",
				           vname(v));
			seen[slot] = 1;
		}
	}
	for (k = 0; k < s->n; k++) {
		const struct tpf_node *n = s->order[k];

		for (i = 0; i < n->n_inputs && n->inputs; i++) {
			const struct tpf_value *v = n->inputs[i];

			if (v && value_registered(g, v) && !seen[offset[k] + i])
				node_error(c, s, n,
				           "input %zu '%s' is missing from the value's use list", i,
				           vname(v));
		}
		for (i = 0; i < n->n_implicit && n->implicit_inputs; i++) {
			const struct tpf_value *v = n->implicit_inputs[i];

			if (v && value_registered(g, v) && !seen[offset[k] + n->n_inputs + i])
				node_error(
				    c, s, n,
				    "subgraph capture '%s' is missing from the value's use list",
				    vname(v));
		}
	}
out_free:
	tpf_free(offset);
	tpf_free(seen);
}

static void check_arity(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n)
{
	const struct tpf_op_info *info = tpf_op_info(n->op);
	int min_in, max_in;
	size_t i;

	if (!info)
		return;
	if (!is_onnx_domain(n->domain) || !is_onnx_domain(info->domain)) {
		if (!n->domain || !info->domain || strcmp(n->domain, info->domain) != 0 ||
		    !n->op_type || strcmp(n->op_type, info->name) != 0)
			node_error(c, s, n, "op is recorded as %s::%s but the node says %s::%s",
			           info->domain, info->name, n->domain ? n->domain : "",
			           n->op_type ? n->op_type : "");
	} else if (!n->op_type || strcmp(n->op_type, info->name) != 0) {
		node_error(c, s, n, "op is recorded as %s but the node says %s", info->name,
		           n->op_type ? n->op_type : "");
	}
	op_arity(c, n, &min_in, &max_in);
	if (n->n_inputs < (size_t)min_in || (max_in >= 0 && n->n_inputs > (size_t)max_in)) {
		char opset[64] = "";

		if (min_in != info->min_inputs || max_in != info->max_inputs)
			snprintf(opset, sizeof(opset), " at opset %" PRId64, c->opset);
		if (max_in < 0)
			node_error(c, s, n, "has %zu inputs; expected at least %d%s", n->n_inputs,
			           min_in, opset);
		else if (min_in == max_in)
			node_error(c, s, n, "has %zu inputs; expected %d%s", n->n_inputs, min_in,
			           opset);
		else
			node_error(c, s, n, "has %zu inputs; expected %d to %d%s", n->n_inputs,
			           min_in, max_in, opset);
	}
	if (n->n_outputs < (size_t)info->min_outputs ||
	    (info->max_outputs >= 0 && n->n_outputs > (size_t)info->max_outputs)) {
		if (info->max_outputs < 0)
			node_error(c, s, n, "has %zu outputs; expected at least %d", n->n_outputs,
			           info->min_outputs);
		else if (info->min_outputs == info->max_outputs)
			node_error(c, s, n, "has %zu outputs; expected %d", n->n_outputs,
			           info->min_outputs);
		else
			node_error(c, s, n, "has %zu outputs; expected %d to %d", n->n_outputs,
			           info->min_outputs, info->max_outputs);
	}
	/* Loop's trip count and condition may both be omitted, and so may
	 * sequence_lens, the first input of Scan before opset 9. */
	if (n->op != TPF_OP_LOOP && !(n->op == TPF_OP_SCAN && c->opset > 0 && c->opset < 9) &&
	    n->inputs)
		for (i = 0; i < n->n_inputs && i < (size_t)min_in; i++)
			if (!n->inputs[i])
				node_error(c, s, n, "required input %zu is missing", i);
}

static enum tpf_status verify_graph(struct verify_ctx *c, const struct tpf_graph *g,
                                    const struct graph_state *parent, const char *where)
{
	struct graph_state st;
	struct graph_state *s = &st;
	struct name_set names = {0};
	struct edge *edges = NULL;
	size_t cap_order = 0, n_edges = 0, cap_edges = 0, i, k;
	const struct tpf_node *n, *prev = NULL;
	size_t errors_before = c->errors;

	memset(s, 0, sizeof(*s));
	s->g = g;
	s->parent = parent;
	s->depth = parent ? parent->depth + 1 : 0;
	snprintf(s->where, sizeof(s->where), "%s", where ? where : "");
	if (!g) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "graph is missing%s", s->where);
		c->errors++;
		return TPF_ERR_VERIFY;
	}
	if ((g->n_values && !g->values) || (g->n_inputs && !g->inputs) ||
	    (g->n_outputs && !g->outputs) || (g->n_initializers && !g->initializers)) {
		graph_error(c, s, "value, input, output or initializer arrays are missing");
		return TPF_ERR_VERIFY;
	}

	/* Node list: positions, links, ownership. */
	if (ptr_map_init(&s->pos, g->n_nodes + 1)) {
		oom(c);
		goto out_free;
	}
	for (n = g->first; n; n = n->next) {
		int r;

		if (ptr_map_get(&s->pos, n)) {
			graph_error(c, s, "the node list loops back to an earlier node");
			break;
		}
		if (s->n >= UINT32_MAX - 1) {
			graph_error(c, s, "too many nodes");
			break;
		}
		if (s->n == cap_order) {
			size_t cap = cap_order ? cap_order * 2 : 64;
			const struct tpf_node **o;

			if (cap > SIZE_MAX / sizeof(*o)) {
				oom(c);
				goto out_free;
			}
			o = tpf_realloc(s->order, cap * sizeof(*o));
			if (!o) {
				oom(c);
				goto out_free;
			}
			s->order = o;
			cap_order = cap;
		}
		s->order[s->n++] = n;
		r = ptr_map_put(&s->pos, n, (uint32_t)s->n);
		if (r < 0) {
			oom(c);
			goto out_free;
		}
		if (n->prev != prev)
			node_error(c, s, n, "its previous-node link disagrees with the node list");
		if (n->graph != g)
			node_error(c, s, n,
			           "is in this graph's node list but records another graph");
		if (n->erased)
			node_error(c, s, n, "is marked erased but is still in the node list");
		if ((n->n_inputs && !n->inputs) || (n->n_outputs && !n->outputs) ||
		    (n->n_implicit && !n->implicit_inputs))
			node_error(c, s, n, "has operand counts but no operand arrays");
		prev = n;
	}
	if (prev != g->last)
		graph_error(c, s, "the last-node link disagrees with the node list");
	if (s->n != g->n_nodes)
		graph_error(c, s, "records %zu nodes but its node list holds %zu", g->n_nodes,
		            s->n);

	/* Values: registry, names, listings. */
	s->vflags = tpf_calloc(g->n_values ? g->n_values : 1, 1);
	if (!s->vflags || name_set_init(&names, g->n_values)) {
		oom(c);
		goto out_free;
	}
	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];
		const struct tpf_value *other;

		if (!v)
			continue;
		if (v->id != i || v->graph != g) {
			graph_error(c, s, "value '%s' is registered at id %zu but records id %u%s",
			            vname(v), i, v->id, v->graph != g ? " and another graph" : "");
			continue;
		}
		if (!v->name) {
			graph_error(c, s, "value %zu has no name", i);
			continue;
		}
		other = name_set_add(&names, v->name, v);
		if (other)
			graph_error(c, s, "value name '%s' is defined twice", v->name);
		check_type_sane(c, s, v);
	}
	for (i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];

		if (!v) {
			graph_error(c, s, "graph input %zu is missing", i);
			continue;
		}
		if (!value_registered(g, v)) {
			graph_error(c, s, "graph input %zu '%s' is not a value of this graph", i,
			            vname(v));
			continue;
		}
		if (s->vflags[v->id] & VF_LISTED_INPUT)
			graph_error(c, s, "graph input '%s' is listed twice", vname(v));
		s->vflags[v->id] |= VF_LISTED_INPUT;
		if (v->kind != TPF_VALUE_GRAPH_INPUT && v->kind != TPF_VALUE_INITIALIZER)
			graph_error(c, s,
			            "graph input '%s' is also defined elsewhere (as a node output "
			            "or outer reference)",
			            vname(v));
		if (!v->is_graph_input)
			graph_error(c, s, "graph input '%s' is not flagged as a graph input",
			            vname(v));
	}
	for (i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];

		if (!v) {
			graph_error(c, s, "initializer %zu is missing", i);
			continue;
		}
		if (!value_registered(g, v)) {
			graph_error(c, s, "initializer %zu '%s' is not a value of this graph", i,
			            vname(v));
			continue;
		}
		if (s->vflags[v->id] & VF_LISTED_INIT)
			graph_error(c, s, "initializer '%s' is listed twice", vname(v));
		s->vflags[v->id] |= VF_LISTED_INIT;
		if (v->kind != TPF_VALUE_INITIALIZER)
			graph_error(c, s, "initializer '%s' is also defined elsewhere", vname(v));
		else if (!v->init)
			graph_error(c, s, "initializer '%s' has no tensor", vname(v));
		check_initializer(c, s, v);
	}
	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];

		if (!v || !value_registered(g, v))
			continue;
		if (v->is_graph_input && !(s->vflags[i] & VF_LISTED_INPUT))
			graph_error(c, s, "value '%s' is flagged as a graph input but not listed",
			            vname(v));
		if (v->kind == TPF_VALUE_NODE_OUTPUT && v->producer) {
			const char *why = undefined_reason(s, v);

			if (why)
				graph_error(c, s, "value '%s' %s", vname(v), why);
		} else if (v->kind == TPF_VALUE_OUTER) {
			const char *why = undefined_reason(s, v);

			if (why) {
				graph_error(c, s, "value '%s' %s", vname(v), why);
			} else {
				check_outer_order(c, s, v);
				check_capture(c, s, v);
			}
		}
	}

	/* Nodes: definitions, operands, semantics, subgraphs. */
	for (k = 0; k < s->n; k++) {
		size_t need;
		int attrs_ok;

		n = s->order[k];
		if (n->n_outputs && n->outputs) {
			for (i = 0; i < n->n_outputs; i++) {
				const struct tpf_value *v = n->outputs[i];

				if (!v)
					continue;
				if (!value_registered(g, v)) {
					node_error(c, s, n,
					           "output %zu '%s' is not a value of this graph",
					           i, vname(v));
				} else if (v->kind == TPF_VALUE_GRAPH_INPUT ||
				           v->kind == TPF_VALUE_INITIALIZER) {
					node_error(c, s, n,
					           "output %zu '%s' redefines a graph input or "
					           "initializer",
					           i, vname(v));
				} else if (v->kind != TPF_VALUE_NODE_OUTPUT) {
					node_error(c, s, n,
					           "output %zu '%s' redefines an outer-scope value",
					           i, vname(v));
				} else if (v->producer != n) {
					if (v->producer) {
						char desc[256];

						tpf_node_describe(v->producer, desc, sizeof(desc));
						node_error(c, s, n,
						           "output %zu '%s' is also produced by %s",
						           i, vname(v), desc);
					} else {
						node_error(
						    c, s, n,
						    "output %zu '%s' does not record this node as "
						    "its producer",
						    i, vname(v));
					}
				} else if (v->producer_index != (int)i) {
					node_error(
					    c, s, n,
					    "output %zu '%s' records output index %d (defined "
					    "twice by this node?)",
					    i, vname(v), v->producer_index);
				}
			}
		}
		if (is_onnx_domain(n->domain) && !c->onnx_node)
			c->onnx_node = n;
		if (n->op != TPF_OP_UNKNOWN)
			check_arity(c, s, n);
		else if (n->op_type &&
		         tpf_op_lookup(n->domain ? n->domain : "", n->op_type) != TPF_OP_UNKNOWN)
			node_error(c, s, n, "names a known op but is recorded as an unknown op");
		attrs_ok = check_attrs_generic(c, s, n) == 0;

		need = n_edges;
		if (tpf_add_size(need, n->n_inputs, &need) ||
		    tpf_add_size(need, n->n_implicit, &need)) {
			oom(c);
			goto out_free;
		}
		if (need > cap_edges) {
			size_t cap = cap_edges ? cap_edges : 256;
			struct edge *ne;

			while (cap < need) {
				if (cap > SIZE_MAX / 2 / sizeof(*ne)) {
					oom(c);
					goto out_free;
				}
				cap *= 2;
			}
			ne = tpf_realloc(edges, cap * sizeof(*ne));
			if (!ne) {
				oom(c);
				goto out_free;
			}
			edges = ne;
			cap_edges = cap;
		}
		for (i = 0; i < n->n_inputs && n->inputs; i++) {
			const struct tpf_value *v = n->inputs[i];

			if (!v)
				continue;
			check_operand(c, s, n, "input", i, v);
			if (value_registered(g, v) && v->kind == TPF_VALUE_NODE_OUTPUT) {
				uint32_t p = ptr_map_get(&s->pos, v->producer);

				if (p)
					edges[n_edges++] =
					    (struct edge){p - 1, (uint32_t)k, (int)i, v};
			}
		}
		for (i = 0; i < n->n_implicit && n->implicit_inputs; i++) {
			const struct tpf_value *v = n->implicit_inputs[i];

			if (!v) {
				node_error(c, s, n, "subgraph capture %zu is missing", i);
				continue;
			}
			check_operand(c, s, n, "subgraph capture", i, v);
			if (value_registered(g, v) && v->kind == TPF_VALUE_NODE_OUTPUT) {
				uint32_t p = ptr_map_get(&s->pos, v->producer);

				if (p)
					edges[n_edges++] =
					    (struct edge){p - 1, (uint32_t)k, -1 - (int)i, v};
			}
		}
		if (attrs_ok) {
			check_op_semantics(c, s, n);
			verify_subgraphs(c, s, n);
		}
		if (c->nomem)
			goto out_free;
	}

	check_uses(c, s);
	check_order(c, s, edges, n_edges);

	for (i = 0; i < g->n_outputs; i++) {
		const struct tpf_value *v = g->outputs[i];
		const char *why;

		if (!v) {
			graph_error(c, s, "graph output %zu is missing", i);
			continue;
		}
		why = undefined_reason(s, v);
		if (why)
			graph_error(c, s, "graph output %zu '%s' %s", i, vname(v), why);
	}

out_free:
	ptr_map_free(&s->pos);
	name_set_free(&names);
	tpf_free(s->order);
	tpf_free(s->vflags);
	tpf_free(edges);
	if (c->nomem)
		return TPF_ERR_NOMEM;
	return c->errors > errors_before ? TPF_ERR_VERIFY : TPF_OK;
}

/* ------------------------------------------------------------------ entry points */

static int64_t metadata_world(const struct tpf_model *m)
{
	const char *s = m ? tpf_model_metadata(m, "tp_world_size") : NULL;
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	v = strtoll(s, &end, 10);
	if (*end || v <= 0)
		return -1;
	return (int64_t)v;
}

static int64_t default_opset(const struct tpf_model *m)
{
	int64_t v = tpf_model_opset(m, "");

	if (v < 0)
		v = tpf_model_opset(m, "ai.onnx");
	return v;
}

enum tpf_status tpf_graph_verify(const struct tpf_graph *g, struct tpf_diag *d)
{
	struct verify_ctx c;

	memset(&c, 0, sizeof(c));
	c.d = d;
	c.opset = -1;
	c.world = -1;
	return verify_graph(&c, g, NULL, "");
}

static void verify_function(struct verify_ctx *c, const struct tpf_function *f)
{
	char where[320];
	size_t i;
	int64_t fopset = -1;
	const struct tpf_node *saved = c->onnx_node;

	snprintf(where, sizeof(where), " (in function '%s%s%s')",
	         f->domain && *f->domain ? f->domain : "", f->domain && *f->domain ? "::" : "",
	         f->name ? f->name : "?");
	if (!f->name || !*f->name) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "model: function has no name%s", where);
		c->errors++;
	}
	if (!f->body) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "model: function has no body%s", where);
		c->errors++;
		return;
	}
	for (i = 0; i < f->n_opsets && f->opsets; i++)
		if (is_onnx_domain(f->opsets[i].domain))
			fopset = f->opsets[i].version;
	c->opset = fopset > 0 ? fopset : default_opset(c->m);
	c->in_function = 1;
	c->onnx_node = NULL;
	verify_graph(c, f->body, NULL, where);
	if (c->onnx_node && fopset <= 0 && default_opset(c->m) <= 0) {
		char desc[256];

		tpf_node_describe(c->onnx_node, desc, sizeof(desc));
		tpf_diag_add(c->d, TPF_SEV_ERROR,
		             "model: function uses ONNX-domain ops (%s) but imports no opset for "
		             "the default domain%s",
		             desc, where);
		c->errors++;
	}
	c->in_function = 0;
	c->onnx_node = saved;
	c->opset = default_opset(c->m);
}

enum tpf_status tpf_model_verify(const struct tpf_model *m, struct tpf_diag *d)
{
	struct verify_ctx c;
	size_t i, j;

	memset(&c, 0, sizeof(c));
	c.d = d;
	c.opset = -1;
	c.world = -1;
	if (!m) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: no model given");
		return TPF_ERR_INVALID;
	}
	c.m = m;
	c.opset = default_opset(m);
	c.world = metadata_world(m);
	if (m->ir_version <= 0) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: ir_version is missing");
		c.errors++;
	}
	for (i = 0; i < m->n_opsets && m->opsets; i++) {
		const char *di = m->opsets[i].domain ? m->opsets[i].domain : "";

		if (m->opsets[i].version <= 0) {
			tpf_diag_add(d, TPF_SEV_ERROR,
			             "model: opset import for domain '%s' has version %" PRId64, di,
			             m->opsets[i].version);
			c.errors++;
		}
		for (j = 0; j < i; j++) {
			const char *dj = m->opsets[j].domain ? m->opsets[j].domain : "";

			if (strcmp(di, dj) == 0 || (is_onnx_domain(di) && is_onnx_domain(dj))) {
				tpf_diag_add(d, TPF_SEV_ERROR,
				             "model: domain '%s' is imported more than once", di);
				c.errors++;
				break;
			}
		}
	}
	if (!m->graph) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: has no graph");
		c.errors++;
	} else {
		if (m->graph->parent) {
			tpf_diag_add(d, TPF_SEV_ERROR, "model: main graph records a parent graph");
			c.errors++;
		}
		verify_graph(&c, m->graph, NULL, "");
		if (c.onnx_node && c.opset <= 0) {
			char desc[256];

			tpf_node_describe(c.onnx_node, desc, sizeof(desc));
			tpf_diag_add(d, TPF_SEV_ERROR,
			             "model: has ONNX-domain nodes (first: %s) but no opset import "
			             "for the default domain",
			             desc);
			c.errors++;
		}
	}
	for (i = 0; i < m->n_functions && m->functions && !c.nomem; i++) {
		const struct tpf_function *f = &m->functions[i];

		for (j = 0; j < i; j++) {
			const struct tpf_function *o = &m->functions[j];

			if (f->name && o->name && strcmp(f->name, o->name) == 0 &&
			    strcmp(f->domain ? f->domain : "", o->domain ? o->domain : "") == 0 &&
			    strcmp(f->overload ? f->overload : "",
			           o->overload ? o->overload : "") == 0) {
				tpf_diag_add(d, TPF_SEV_ERROR,
				             "model: function '%s%s%s' is defined more than once",
				             f->domain && *f->domain ? f->domain : "",
				             f->domain && *f->domain ? "::" : "", f->name);
				c.errors++;
				break;
			}
		}
		verify_function(&c, f);
	}
	if (c.nomem)
		return TPF_ERR_NOMEM;
	return c.errors ? TPF_ERR_VERIFY : TPF_OK;
}
