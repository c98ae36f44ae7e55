/* SPDX-License-Identifier: MIT */
/*
 * kv-cache-in-place: a language model's KV cache written in place, as
 * ONNX Runtime GenAI's past_present_share_buffer keeps it.
 *
 * A model with KV-cache I/O (tpf_kv_io_find) whose attention is fused
 * (fuse-attention: Attention(Q, K, V, mask, past_key, past_value) ->
 * Y, present_key, present_value) appends each step's keys and values to
 * a copy of the past.  This pass rewrites every layer into
 *
 *   present_key   = TensorScatter(past_key, K, past_sequence_length) {axis=2}
 *   present_value = TensorScatter(past_value, V, past_sequence_length) {axis=2}
 *   Y = Attention(Q, present_key, present_value, mask,
 *                 nonpad_kv_seqlen = past_sequence_length + sequence)
 *
 * (ONNX opset 24): past and present are one buffer of a fixed maximum
 * length (the symbol "max_sequence"), the step's keys are written at each
 * sequence's length, a new input `past_sequence_length` [batch] (int64)
 * says how many positions each sequence already holds, and the attention
 * reads only the valid prefix.  `attention_mask` becomes [batch,
 * max_sequence] (zeros past the valid prefix).  Every shape of a decode
 * step is then the same at every position: one plan, one CUDA graph.  A
 * runtime keeps the caches on the device between steps
 * (tpf_session_keep_inputs).
 *
 * The mask: exporters compute the attention mask from the past length,
 * read from a past's shape (P = Shape(past)[2]) and the total length
 * T = P + sequence.  In the rewritten graph P is the data
 * max(past_sequence_length) and T the cache length L (Shape(past)[2] of
 * the cache): the mask is then computed over all L key columns, its first
 * T columns exactly as before (a column's mask depends on its key index,
 * its attention_mask entry and the query positions P + i), and the
 * columns past T are never read (nonpad_kv_seqlen).  That holds when T
 * serves only as an extent (the limit of Range(0, T), dims of a Reshape
 * or Expand shape) and P only as a value (not a shape).  Refused, with a
 * near-miss reason: no KV-cache I/O; a present not made by a fused
 * Attention from its past along axis 2; a past read by anything but its
 * Attention and Shape; T or P used otherwise; a model already in place.
 * All layers are rewritten or none.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "kv-cache-in-place"
#define MAX_SYMBOL "max_sequence"

struct inplace {
	struct tpf_graph *g;
	struct tpf_pass_context *ctx;
	struct tpf_kv_io io;
	struct tpf_node **attn; /* one per pair's Attention (each listed once) */
	size_t n_attn;
	struct tpf_value **p, **t; /* past lengths read from shapes; totals P + S */
	size_t n_p, n_t;
	const char *past_sym, *total_sym, *present_sym; /* the symbols the rewrite retires */
	char why[512];
};

static int refuse(struct inplace *c, const struct tpf_node *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Records the near-miss reason (the first one); returns 0. */
static int refuse(struct inplace *c, const struct tpf_node *at, const char *fmt, ...)
{
	if (c->why[0])
		return 0;
	char who[200] = "";
	if (at)
		snprintf(who, sizeof(who), "%s: ", tpf_node_describe(at, (char[160]){0}, 160));
	va_list ap;
	va_start(ap, fmt);
	size_t n = (size_t)snprintf(c->why, sizeof(c->why), "%s", who);
	if (n < sizeof(c->why))
		vsnprintf(c->why + n, sizeof(c->why) - n, fmt, ap);
	va_end(ap);
	return 0;
}

static int push(struct inplace *c, struct tpf_value ***list, size_t *n, struct tpf_value *v)
{
	for (size_t i = 0; i < *n; i++)
		if ((*list)[i] == v)
			return 1;
	struct tpf_value **grown = tpf_realloc(*list, (*n + 1) * sizeof(**list));
	if (!grown)
		return 0;
	*list = grown;
	(*list)[(*n)++] = v;
	return 1;
}

static const struct tpf_kv_pair *pair_of_present(const struct inplace *c, const struct tpf_value *v)
{
	for (size_t i = 0; i < c->io.n_pairs; i++)
		if (c->io.pairs[i].present == v)
			return &c->io.pairs[i];
	return NULL;
}

/* A constant integer scalar (or one-element tensor) equal to want. */
static int const_is(const struct tpf_value *v, int64_t want)
{
	int64_t x;
	size_t n;
	return v && !tpf_pattern_const_ints(v, &x, 1, &n) && n == 1 && x == want;
}

/* Each pair's present comes from a fused Attention reading its past. */
static int check_attention(struct inplace *c)
{
	for (size_t i = 0; i < c->io.n_pairs; i++) {
		const struct tpf_kv_pair *pr = &c->io.pairs[i];
		struct tpf_node *n = pr->present->producer;
		if (pr->axis != 2)
			return refuse(c, NULL, "input '%s': the cache grows along axis %d, not 2", pr->past->name,
				      pr->axis);
		if (!n || n->op != TPF_OP_ATTENTION)
			return refuse(c, n, "output '%s' is not made by a fused Attention (run the default "
				      "pipeline first)", pr->present->name);
		const struct tpf_kv_pair *pk = n->n_outputs >= 3 ? pair_of_present(c, n->outputs[1]) : NULL;
		const struct tpf_kv_pair *pv = n->n_outputs >= 3 ? pair_of_present(c, n->outputs[2]) : NULL;
		if (n->n_inputs < 6 || !pk || !pv || n->inputs[4] != pk->past || n->inputs[5] != pv->past ||
		    (n->n_inputs > 6 && n->inputs[6]) ||
		    (n->n_outputs > 3 && n->outputs[3] && tpf_value_use_count(n->outputs[3])))
			return refuse(c, n, "its past and present key and value are not the model's cache "
				      "inputs and outputs");
		int seen = 0;
		for (size_t k = 0; k < c->n_attn; k++)
			seen |= c->attn[k] == n;
		if (!seen)
			c->attn[c->n_attn++] = n;
	}
	return 1;
}

/* Shape(past): what reads the past's length becomes a P. */
static int scan_shape(struct inplace *c, struct tpf_node *sh)
{
	int64_t start = tpf_node_attr_int(sh, "start", 0), end = tpf_node_attr_int(sh, "end", 4);
	start = start < 0 ? start + 4 : start;
	end = end < 0 ? end + 4 : end > 4 ? 4 : end;
	if (end <= 2 || start >= 3)
		return 1; /* the other dims stay */
	if (start == 2 && end == 3)
		return push(c, &c->p, &c->n_p, sh->outputs[0]) || refuse(c, sh, "out of memory");
	if (start != 0 || end != 4)
		return refuse(c, sh, "a slice of the past's shape holds its length among other dims");
	const struct tpf_value *v = sh->outputs[0];
	for (size_t u = 0; u < v->n_uses; u++) {
		struct tpf_node *g = v->uses[u].node;
		if (!g || g->op != TPF_OP_GATHER || v->uses[u].index != 0 || tpf_node_attr_int(g, "axis", 0))
			return refuse(c, g, "reads the past's whole shape (expected Gather of one dim)");
		if ((const_is(g->inputs[1], 2) || const_is(g->inputs[1], -2)) &&
		    !push(c, &c->p, &c->n_p, g->outputs[0]))
			return refuse(c, g, "out of memory");
		int64_t idx;
		size_t n;
		if (tpf_pattern_const_ints(g->inputs[1], &idx, 1, &n) || n != 1)
			return refuse(c, g, "gathers an index of the past's shape that is not a constant");
	}
	return 1;
}

static int passes_through(const struct tpf_node *n, int index)
{
	switch (n->op) {
	case TPF_OP_SQUEEZE:
	case TPF_OP_UNSQUEEZE:
	case TPF_OP_CAST:
	case TPF_OP_IDENTITY:
		return index == 0;
	case TPF_OP_RESHAPE:
		return index == 0;
	default:
		return 0;
	}
}

/* The values a P flows into unchanged (Squeeze, Cast, ...) are Ps too. */
static int close_p(struct inplace *c)
{
	for (size_t i = 0; i < c->n_p; i++) {
		const struct tpf_value *v = c->p[i];
		for (size_t u = 0; u < v->n_uses; u++) {
			const struct tpf_node *n = v->uses[u].node;
			if (n && n->n_outputs && n->outputs[0] && passes_through(n, v->uses[u].index) &&
			    !push(c, &c->p, &c->n_p, n->outputs[0]))
				return refuse(c, n, "out of memory");
		}
	}
	return 1;
}

static int is_p(const struct inplace *c, const struct tpf_value *v)
{
	for (size_t i = 0; i < c->n_p; i++)
		if (c->p[i] == v)
			return 1;
	return 0;
}

static int one_element(const struct tpf_value *v)
{
	const struct tpf_shape *s = &v->type.shape;
	return v->type.kind == TPF_TYPE_TENSOR && (s->rank == 0 || (s->rank == 1 && s->dims[0].value == 1 &&
								  !s->dims[0].param));
}

/* An Add of a P and another one-element value (the sequence length) is a
 * total length T. */
static int is_total(const struct inplace *c, const struct tpf_node *n)
{
	if (n->op != TPF_OP_ADD || n->n_inputs != 2 || !n->inputs[0] || !n->inputs[1] || n->n_outputs != 1 ||
	    !n->outputs[0] || !one_element(n->outputs[0]))
		return 0;
	int a = is_p(c, n->inputs[0]), b = is_p(c, n->inputs[1]);
	return a != b && one_element(n->inputs[a ? 1 : 0]);
}

/* A ConstantOfShape of a positive value. */
static int positive_fill(const struct tpf_value *v)
{
	const struct tpf_node *p = v ? v->producer : NULL;
	const struct tpf_attr *a = p && p->op == TPF_OP_CONSTANT_OF_SHAPE ? tpf_node_attr(p, "value") : NULL;
	return a && a->kind == TPF_ATTR_TENSOR && a->t && a->t->dtype == TPF_DTYPE_INT64 && a->t->data &&
	       tpf_tensor_numel(a->t) == 1 && *(const int64_t *)a->t->data > 0;
}

/* A constant whose values are all 0 or below. */
static int nonpositive(const struct tpf_value *v)
{
	int64_t x[8];
	size_t n;
	const struct tpf_node *p = v ? v->producer : NULL;
	if (p && p->op == TPF_OP_MUL && p->n_inputs == 2) /* ConstantOfShape(1) * -1 */
		return (nonpositive(p->inputs[0]) && positive_fill(p->inputs[1])) ||
		       (nonpositive(p->inputs[1]) && positive_fill(p->inputs[0]));
	if (!v || tpf_pattern_const_ints(v, x, 8, &n) || !n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (x[i] > 0)
			return 0;
	return 1;
}

/* T serves only as an extent: through Squeeze/Unsqueeze/Reshape/Cast/
 * Concat into the limit of Range(0, T), or a shape operand. */
static int extent_only(struct inplace *c, const struct tpf_value *v, int depth)
{
	for (size_t u = 0; u < v->n_uses; u++) {
		const struct tpf_node *n = v->uses[u].node;
		int i = v->uses[u].index;
		if (!n)
			return refuse(c, NULL, "the total length '%s' is a graph output", v->name);
		if (!n->n_outputs || !n->outputs[0])
			return refuse(c, n, "uses the total length and has no output");
		if (depth < 8 && (passes_through(n, i) || n->op == TPF_OP_CONCAT)) {
			if (!extent_only(c, n->outputs[0], depth + 1))
				return 0;
			continue;
		}
		if (depth < 8 && n->op == TPF_OP_WHERE && i >= 1) {
			if (!extent_only(c, n->outputs[0], depth + 1))
				return 0;
			continue;
		}
		if (n->op == TPF_OP_EQUAL && nonpositive(n->inputs[1 - i]))
			continue; /* a sign test (an Expand shape's -1 entries): alike for T and L */
		if ((n->op == TPF_OP_RANGE && i == 1 && const_is(n->inputs[0], 0)) ||
		    ((n->op == TPF_OP_EXPAND || n->op == TPF_OP_RESHAPE) && i == 1) ||
		    (n->op == TPF_OP_CONSTANT_OF_SHAPE && i == 0))
			continue;
		return refuse(c, n, "uses the total length (past + new) as a value, not as an extent");
	}
	return 1;
}

/* A P serves only as a value: no shape operand reads it. */
static int value_only(struct inplace *c)
{
	for (size_t k = 0; k < c->n_p; k++) {
		const struct tpf_value *v = c->p[k];
		for (size_t u = 0; u < v->n_uses; u++) {
			const struct tpf_node *n = v->uses[u].node;
			int i = v->uses[u].index;
			if (!n)
				return refuse(c, NULL, "the past length '%s' is a graph output", v->name);
			if (passes_through(n, i) || is_total(c, n))
				continue;
			if (n->op == TPF_OP_RANGE || n->op == TPF_OP_CONCAT || n->op == TPF_OP_CONSTANT_OF_SHAPE ||
			    n->op == TPF_OP_SLICE || n->op == TPF_OP_TILE ||
			    ((n->op == TPF_OP_EXPAND || n->op == TPF_OP_RESHAPE) && i == 1))
				return refuse(c, n, "uses the past length as a shape");
		}
	}
	return 1;
}

/* Everything the rewrite needs holds (c->why says what does not). */
static int analyse(struct inplace *c)
{
	struct tpf_graph *g = c->g;
	for (size_t i = 0; i < g->n_inputs; i++)
		if (!strcmp(g->inputs[i]->name, "past_sequence_length"))
			return refuse(c, NULL, "the model's cache is in place already");
	if (!check_attention(c))
		return 0;
	for (size_t i = 0; i < c->io.n_pairs; i++) {
		const struct tpf_value *past = c->io.pairs[i].past;
		size_t readers = 0;
		for (size_t u = 0; u < past->n_uses; u++) {
			struct tpf_node *n = past->uses[u].node;
			if (n && n->op == TPF_OP_ATTENTION) {
				if (++readers > 1)
					return refuse(c, n, "input '%s' is read by more than one Attention", past->name);
				continue;
			}
			if (!n || n->op != TPF_OP_SHAPE)
				return refuse(c, n, "reads input '%s' (expected its Attention and Shape only)",
					      past->name);
			if (!scan_shape(c, n))
				return 0;
		}
	}
	if (!close_p(c) || !value_only(c))
		return 0;
	for (size_t k = 0; k < c->n_p; k++) {
		const struct tpf_value *v = c->p[k];
		for (size_t u = 0; u < v->n_uses; u++) {
			struct tpf_node *n = v->uses[u].node;
			if (n && is_total(c, n) && !push(c, &c->t, &c->n_t, n->outputs[0]))
				return refuse(c, n, "out of memory");
		}
	}
	for (size_t k = 0; k < c->n_t; k++)
		if (!extent_only(c, c->t[k], 0))
			return 0;
	return 1;
}

/* ------------------------------------------------------------ the rewrite */

static struct tpf_node *add(struct inplace *c, struct tpf_node *before, const char *op,
			    struct tpf_value *const *in, size_t n_in, const char *name)
{
	struct tpf_node *n = tpf_graph_insert_node(c->g, before, "", op, tpf_graph_unique_name(c->g, name), in,
						   n_in, 1, NULL);
	if (n) {
		n->origin_pass = PASS_NAME;
		n->origin_pattern = "cache-in-place";
	}
	return n;
}

static struct tpf_value *i64_const(struct inplace *c, const char *name, int rank, int64_t v)
{
	int64_t one = 1;
	return tpf_graph_add_initializer(c->g, tpf_graph_unique_name(c->g, name), TPF_DTYPE_INT64, rank,
					 rank ? &one : NULL, &v, sizeof(v));
}

/* Symbol MAX_SYMBOL at dim `axis` of v's type. */
static void set_max_dim(struct inplace *c, struct tpf_value *v, int axis)
{
	if (v->type.kind == TPF_TYPE_TENSOR && v->type.shape.rank > axis) {
		v->type.shape.dims[axis].param = tpf_arena_strdup(c->g->arena, MAX_SYMBOL);
		v->type.shape.dims[axis].value = -1;
	}
}

/* Replaces every use of each of list[0..n) by `scalar` (rank 0) or `vec`
 * (its one-element vector). */
static enum tpf_status replace_all(struct tpf_value **list, size_t n, struct tpf_value *scalar,
				   struct tpf_value *vec)
{
	enum tpf_status st = TPF_OK;
	for (size_t i = 0; i < n && !st; i++)
		st = tpf_value_replace_uses(list[i], list[i]->type.shape.rank == 0 ? scalar : vec);
	return st;
}

/* One layer: the cache writes and the attention reading the caches. */
static enum tpf_status rewrite_attention(struct inplace *c, struct tpf_node *n, struct tpf_value *psl,
					 struct tpf_value *nonpad)
{
	struct tpf_value *axis_in[3];
	struct tpf_value *present[2];
	for (int kv = 0; kv < 2; kv++) {
		axis_in[0] = n->inputs[4 + kv];
		axis_in[1] = n->inputs[1 + kv];
		axis_in[2] = psl;
		struct tpf_node *ts = add(c, n, "TensorScatter", axis_in, 3, kv ? "present_value_write" : "present_key_write");
		if (!ts || tpf_node_set_attr_int(ts, "axis", 2))
			return TPF_ERR_NOMEM;
		struct tpf_value *old = n->outputs[1 + kv];
		const char *name = old->name;
		enum tpf_status st;
		if ((st = tpf_value_rename(old, tpf_graph_unique_name(c->g, "present_replaced"))) ||
		    (st = tpf_value_rename(ts->outputs[0], name)) ||
		    (st = tpf_value_copy_type(ts->outputs[0], &old->type)) ||
		    (st = tpf_value_replace_uses(old, ts->outputs[0])))
			return st;
		set_max_dim(c, ts->outputs[0], 2);
		present[kv] = ts->outputs[0];
	}
	struct tpf_value *in[7] = {n->inputs[0], present[0], present[1], n->n_inputs > 3 ? n->inputs[3] : NULL,
				   NULL, NULL, nonpad};
	struct tpf_node *at = tpf_graph_insert_node(c->g, n, "", "Attention", n->name, in, 7, 1, NULL);
	if (!at)
		return TPF_ERR_NOMEM;
	at->origin_pass = PASS_NAME;
	at->origin_pattern = "cache-in-place";
	enum tpf_status st;
	for (size_t a = 0; a < n->n_attrs; a++)
		if ((st = tpf_node_add_attr(at, &n->attrs[a])))
			return st;
	const char *y = n->outputs[0]->name;
	if ((st = tpf_value_rename(n->outputs[0], tpf_graph_unique_name(c->g, "attention_replaced"))) ||
	    (st = tpf_value_rename(at->outputs[0], y)) || (st = tpf_value_copy_type(at->outputs[0], &n->outputs[0]->type)) ||
	    (st = tpf_value_replace_uses(n->outputs[0], at->outputs[0])))
		return st;
	return tpf_graph_erase_node(c->g, n);
}

/* The old past and total lengths named in the types of the values the
 * nodes compute: unknown now (inference finds them again). */
static void forget_lengths(struct inplace *c)
{
	const char *old[3] = {c->past_sym, c->total_sym, c->present_sym};
	for (struct tpf_node *n = c->g->first; n; n = n->next)
		for (size_t o = 0; o < n->n_outputs; o++) {
			struct tpf_value *v = n->outputs[o];
			if (!v || v->type.kind != TPF_TYPE_TENSOR)
				continue;
			for (int a = 0; a < v->type.shape.rank; a++)
				for (int k = 0; k < 3; k++)
					if (v->type.shape.dims[a].param && old[k] && !strcmp(v->type.shape.dims[a].param, old[k]) &&
					    strcmp(old[k], MAX_SYMBOL)) {
						v->type.shape.dims[a].param = NULL;
						v->type.shape.dims[a].value = -1;
					}
		}
}

static enum tpf_status rewrite(struct inplace *c, struct tpf_model *m, struct tpf_diag *d)
{
	struct tpf_graph *g = c->g;
	struct tpf_value *ids = g->inputs[c->io.input_ids];
	c->past_sym = c->io.pairs[0].past->type.shape.dims[2].param;
	c->present_sym = c->io.pairs[0].present->type.shape.dims[2].param;
	c->total_sym = g->inputs[c->io.attention_mask]->type.shape.dims[1].param;
	const char *batch = ids->type.shape.dims[0].param ? ids->type.shape.dims[0].param : "batch";
	const char *dims[1] = {batch};
	struct tpf_value *psl = tpf_graph_add_input_sym(g, "past_sequence_length", TPF_DTYPE_INT64, 1, dims);
	if (!psl)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	struct tpf_node *first = g->first;
	/* P: the largest past length (the batch's sequences agree in the
	 * exporters' masks); L: the cache length; the sequence length S */
	struct tpf_value *axes0 = i64_const(c, "kv_axes0", 1, 0);
	struct tpf_value *pin[1] = {psl};
	struct tpf_node *pmax = add(c, first, "ReduceMax", pin, 1, "past_length");
	struct tpf_value *past0 = (struct tpf_value *)c->io.pairs[0].past;
	struct tpf_node *lvec = add(c, first, "Shape", &past0, 1, "cache_length");
	struct tpf_node *svec = add(c, first, "Shape", &ids, 1, "sequence_length");
	if (!axes0 || !pmax || !lvec || !svec || tpf_node_set_attr_int(pmax, "keepdims", 0) ||
	    tpf_node_set_attr_int(lvec, "start", 2) || tpf_node_set_attr_int(lvec, "end", 3) ||
	    tpf_node_set_attr_int(svec, "start", 1) || tpf_node_set_attr_int(svec, "end", 2))
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	struct tpf_value *pv_in[2] = {pmax->outputs[0], axes0}, *lv_in[2] = {lvec->outputs[0], axes0};
	struct tpf_node *pvec = add(c, first, "Unsqueeze", pv_in, 2, "past_length_vector");
	struct tpf_node *lsc = add(c, first, "Squeeze", lv_in, 2, "cache_length_scalar");
	struct tpf_value *np_in[2] = {psl, svec->outputs[0]};
	struct tpf_node *nonpad = add(c, first, "Add", np_in, 2, "kv_valid_length");
	if (!pvec || !lsc || !nonpad)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st;
	if ((st = replace_all(c->t, c->n_t, lsc->outputs[0], lvec->outputs[0])))
		return tpf_diag_fail(d, st, "%s: cannot replace the total length", PASS_NAME);
	/* only the P read straight from a shape: the rest follow from them */
	for (size_t i = 0; i < c->n_p; i++) {
		struct tpf_node *src = c->p[i]->producer;
		if (src && (src->op == TPF_OP_SHAPE || src->op == TPF_OP_GATHER) &&
		    (st = replace_all(&c->p[i], 1, pmax->outputs[0], pvec->outputs[0])))
			return tpf_diag_fail(d, st, "%s: cannot replace the past length", PASS_NAME);
	}
	for (size_t i = 0; i < c->n_attn; i++)
		if ((st = rewrite_attention(c, c->attn[i], psl, nonpad->outputs[0])))
			return tpf_diag_fail(d, st, "%s: cannot rewrite the attention", PASS_NAME);
	for (size_t i = 0; i < c->io.n_pairs; i++)
		set_max_dim(c, (struct tpf_value *)c->io.pairs[i].past, 2);
	set_max_dim(c, g->inputs[c->io.attention_mask], 1);
	if (tpf_model_opset(m, "") < 24 && (st = tpf_model_set_opset(m, "", 24)))
		return tpf_diag_fail(d, st, "%s: cannot raise the opset to 24", PASS_NAME);
	if ((st = tpf_graph_toposort(g, d)))
		return st;
	forget_lengths(c);
	return tpf_graph_infer_shapes(g, m, d);
}

static enum tpf_status run_inplace(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				   struct tpf_diag *d)
{
	struct inplace c = {.g = m->graph, .ctx = ctx};
	enum tpf_status st = TPF_OK;
	struct tpf_diag *quiet = tpf_diag_create();
	if (!quiet)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	if (tpf_kv_io_find(c.g, &c.io, quiet)) {
		refuse(&c, NULL, "no KV-cache I/O (%s)", quiet->count ? quiet->entries[0].text : "?");
	} else if ((c.attn = tpf_calloc(c.io.n_pairs + 1, sizeof(*c.attn))) == NULL) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	} else if (analyse(&c)) {
		st = rewrite(&c, m, d);
		if (!st) {
			*changed = 1;
			if (ctx && ctx->stats)
				tpf_pass_stats_add(ctx->stats, PASS_NAME, "caches-in-place", (int64_t)c.io.n_pairs);
		}
	}
	if (!st && c.why[0] && ctx && ctx->explain)
		fprintf(ctx->explain, "near-miss: %s: %s\n", PASS_NAME, c.why);
	tpf_diag_free(quiet);
	tpf_kv_io_release(&c.io);
	tpf_free(c.attn);
	tpf_free(c.p);
	tpf_free(c.t);
	return st;
}

static const char *const inplace_counters[] = {"caches-in-place", NULL};

const struct tpf_pass tpf_pass_kv_cache_in_place = {
	.name = PASS_NAME,
	.summary = "KV cache written in place: past and present one buffer of a maximum length (TensorScatter), "
		   "attention reading the valid prefix (opset 24)",
	.run = run_inplace,
	.counters = inplace_counters,
};
