/* SPDX-License-Identifier: MIT */
/*
 * fuse-attention: the scaled dot-product attention exporters write becomes
 * ONNX Attention (opset 23, docs/ops.md):
 *
 *   scores = MatMul(Q', K^T)             K^T = Transpose(K', perm = [0, 1, 3, 2])
 *   scores = scores * c | scores / c      (scalar constants, any number up to 3)
 *   scores = c * Tanh(scores / c)         (softcap, optional)
 *   scores = scores + mask                (additive mask, optional) or
 *            Where(mask, scores, -inf)    (bool mask)
 *   probs  = Softmax(scores, axis = -1)   (16-bit scores: Cast(Softmax(Cast(s, float)), T),
 *                                          or Cast(Cast(Softmax(s), float), T); or
 *                                          Where(IsNaN(p), 0, p) of the Softmax p)
 *   Y      = MatMul(probs, V')
 *       => Attention(Q, K, V, mask[, past_key, past_value]) {scale, softcap}
 *
 * Q' may be Mul(Q, c) and K^T Mul(Transpose(K), c) or Transpose(Mul(K, c))
 * (torch's sdpa export scales both by sqrt(scale)): the factors multiply
 * into `scale`, which is always set.  K^T may also be transposed through
 * 3-D, Reshape(Transpose(Reshape(K, [-1, T, D]), [0, 2, 1]), [B, H, D, T])
 * (the dynamo exporter's sdpa decomposition; shapes read from constants
 * and Slices of Shape(K); with static shapes the inner Reshape may read
 * K's 5-D repeat_kv expansion directly).  K' and V' may be repeat_kv
 * expansions of [B, Hkv, T, D] values (Reshape(Expand(Unsqueeze(x, 2)))
 * to [B, Hkv * G, T, D]): Attention takes the unexpanded ones (grouped
 * query attention).  When K and V then are both 2-input Concats along
 * axis 2 of 4-D tensors (past, new), the Concats fold into the op's
 * past_key/past_value inputs and present_key/present_value outputs.
 *
 * Refused, with a near-miss reason: a Softmax on another axis, scores (or
 * their scaled, capped, masked forms) used elsewhere, a non-scalar scale,
 * a K^T that is not a Transpose of the last two axes, a mask applied
 * before the scale or the softcap, an inverted Where, a mask that does not
 * broadcast to [B, Hq, S, T], ranks other than 4, heads of Q not a
 * multiple of K's, mixed or non-float dtypes, a K^T Reshape that is not
 * the 3-D transpose, scores cast to float before the mask (fusing would
 * round a float mask to the 16-bit dtype), K expanded inside its 3-D
 * transpose with V not expanded alike.  A model of a default-domain opset
 * from 13 to 22 is raised to 23 when it still verifies there.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-attention"
#define CHAIN_MAX 17

/* What check found for the rewrite. */
struct attn_facts {
	struct tpf_value *q, *k, *v, *mask, *pk, *pv;
	struct tpf_node *kcat, *vcat; /* folded KV Concats */
	double scale, softcap;
	int n_chain;
	struct tpf_node *chain[CHAIN_MAX]; /* nodes the op replaces, consumers first */
};

_Static_assert(sizeof(struct attn_facts) <= TPF_MATCH_FACTS, "attention facts too large");

/* ------------------------------------------------------------ helpers */

static const struct tpf_dim *dim_at(const struct tpf_value *v, int i)
{
	const struct tpf_type *t = &v->type;
	if (t->kind != TPF_TYPE_TENSOR || t->shape.rank <= i || i < 0)
		return NULL;
	return &t->shape.dims[i];
}

static int static_dim(const struct tpf_value *v, int i, int64_t *out)
{
	const struct tpf_dim *d = dim_at(v, i);
	if (!d || d->param || d->value < 0)
		return 0;
	*out = d->value;
	return 1;
}

/* dim i of a and dim j of b: YES, NO or UNKNOWN */
static enum tpf_answer dims_eq(const struct tpf_value *a, int i, const struct tpf_value *b, int j)
{
	const struct tpf_dim *da = dim_at(a, i), *db = dim_at(b, j);
	if (!da || !db)
		return TPF_ANSWER_UNKNOWN;
	return tpf_graph_dims_equal(a->graph, da, db);
}

static int near(double v, double want, enum tpf_dtype t)
{
	double tol = t == TPF_DTYPE_BFLOAT16 ? 8e-3 : t == TPF_DTYPE_FLOAT16 ? 1e-3 : 1e-5;
	return fabs(v - want) <= tol * fabs(want);
}

static const char *chain_add(struct tpf_match *m, struct attn_facts *f, struct tpf_node *n,
                             int single_use, const char *what)
{
	if (single_use) {
		size_t uses = tpf_value_use_count(n->outputs[0]);
		if (uses != 1)
			return tpf_match_reason(m, "'%s' (%s) has %zu uses: it is needed besides the "
			                        "attention",
			                        n->outputs[0]->name, what, uses);
	}
	if (f->n_chain >= CHAIN_MAX)
		return "too many nodes in the attention chain";
	f->chain[f->n_chain++] = n;
	return NULL;
}

/* n = Mul(x, c), Mul(c, x) or Div(x, c) of a constant c: the index of x,
 * -1 when no operand is a constant. */
static int const_factor_index(const struct tpf_node *n)
{
	if (!n || n->n_inputs != 2 || !n->inputs[0] || !n->inputs[1])
		return -1;
	if (n->op == TPF_OP_DIV)
		return tpf_value_constant(n->inputs[1]) ? 0 : -1;
	if (n->op != TPF_OP_MUL)
		return -1;
	if (tpf_value_constant(n->inputs[1]))
		return 0;
	if (tpf_value_constant(n->inputs[0]))
		return 1;
	return -1;
}

/* The factor n applies (c, or 1/c for Div); a reason when c is not a
 * usable scalar. */
static const char *factor_of(struct tpf_match *m, const struct tpf_node *n, int xi, double *fac)
{
	struct tpf_value *c = n->inputs[1 - xi];
	double x;
	if (tpf_pattern_const_scalar(c, &x))
		return tpf_match_reason(m, "the scale '%s' of %s '%s' is not a scalar constant",
		                        c->name, n->op_type, n->name ? n->name : "");
	if (!isfinite(x) || x == 0.0)
		return tpf_match_reason(m, "the scale '%s' is %g", c->name, x);
	*fac = n->op == TPF_OP_DIV ? 1.0 / x : x;
	return NULL;
}

/* Scalar factor on the Q or K side: folds it when the node is a Mul by a
 * one-element constant (else x stays as it is: the Mul is part of Q/K). */
static struct tpf_value *q_side(struct tpf_value *x, struct attn_facts *f, double *scale)
{
	struct tpf_node *n = x->producer;
	double c;
	int xi = const_factor_index(n);
	if (xi < 0 || n->op != TPF_OP_MUL || tpf_pattern_const_scalar(n->inputs[1 - xi], &c) ||
	    !isfinite(c) || c == 0.0 || f->n_chain >= CHAIN_MAX)
		return x;
	*scale *= c;
	f->chain[f->n_chain++] = n;
	return n->inputs[xi];
}

/* Whether v leads to a MatMul through scalar scales and a softcap (to
 * tell the scores operand of a mask Add from the mask). */
static int leads_to_matmul(const struct tpf_value *v)
{
	for (int i = 0; i < 8 && v && v->producer; i++) {
		const struct tpf_node *n = v->producer;
		int xi;
		if (n->op == TPF_OP_MATMUL)
			return 1;
		if (n->op == TPF_OP_TANH || n->op == TPF_OP_CAST)
			v = n->inputs[0];
		else if ((xi = const_factor_index(n)) >= 0)
			v = n->inputs[xi];
		else
			return 0;
	}
	return 0;
}

/* Axes of an Unsqueeze (attribute before opset 13, else input). */
static int unsqueeze_axes(const struct tpf_node *u, int64_t *axes, size_t *n)
{
	const struct tpf_attr *a = tpf_node_attr(u, "axes");
	if (a) {
		if (a->kind != TPF_ATTR_INTS || a->n > 4)
			return -1;
		for (size_t i = 0; i < a->n; i++)
			axes[i] = a->ints[i];
		*n = a->n;
		return 0;
	}
	if (u->n_inputs < 2 || !u->inputs[1])
		return -1;
	return tpf_pattern_const_ints(u->inputs[1], axes, 4, n);
}

/* repeat_kv: x = Reshape(Expand(Unsqueeze(base, 2), [B, Hkv, G, T, D]),
 * [B, Hkv * G, T, D]): base and G (nodes[] the three nodes, consumers
 * first), else NULL. */
static struct tpf_value *unrepeat(struct tpf_value *x, int64_t *groups, struct tpf_node **nodes)
{
	struct tpf_node *r = x->producer;
	if (!r || r->op != TPF_OP_RESHAPE || !r->inputs[0])
		return NULL;
	struct tpf_node *e = r->inputs[0]->producer;
	if (!e || e->op != TPF_OP_EXPAND || !e->inputs[0])
		return NULL;
	struct tpf_node *u = e->inputs[0]->producer;
	if (!u || u->op != TPF_OP_UNSQUEEZE || !u->inputs[0])
		return NULL;
	int64_t axes[4];
	size_t na = 0;
	if (unsqueeze_axes(u, axes, &na) || na != 1 || (axes[0] != 2 && axes[0] != -3))
		return NULL;
	struct tpf_value *base = u->inputs[0];
	int64_t hkv, hq, g5;
	if (tpf_pattern_rank(base) != 4 || tpf_pattern_rank(x) != 4 || !static_dim(base, 1, &hkv) ||
	    !static_dim(x, 1, &hq) || hkv <= 0 || hq % hkv)
		return NULL;
	for (int i = 0; i < 4; i++)
		if (i != 1 && dims_eq(base, i, x, i) == TPF_ANSWER_NO)
			return NULL;
	struct tpf_value *ex = e->outputs[0];
	int er = tpf_pattern_rank(ex);
	if (er >= 0) {
		if (er != 5)
			return NULL;
		if (static_dim(ex, 2, &g5) && g5 != hq / hkv)
			return NULL;
		if (dims_eq(ex, 1, base, 1) == TPF_ANSWER_NO || dims_eq(ex, 0, base, 0) == TPF_ANSWER_NO ||
		    dims_eq(ex, 3, base, 2) == TPF_ANSWER_NO || dims_eq(ex, 4, base, 3) == TPF_ANSWER_NO)
			return NULL;
	}
	*groups = hq / hkv;
	nodes[0] = r;
	nodes[1] = e;
	nodes[2] = u;
	return base;
}

/* A 2-input Concat along axis 2 of 4-D past and new K (or V). */
static int kv_concat(const struct tpf_value *x)
{
	const struct tpf_node *c = x->producer;
	if (!c || c->op != TPF_OP_CONCAT || c->n_inputs != 2 || !c->inputs[0] || !c->inputs[1])
		return 0;
	int64_t ax = tpf_node_attr_int(c, "axis", 0);
	return (ax == 2 || ax == -2) && tpf_pattern_rank(c->inputs[0]) == 4 &&
	       tpf_pattern_rank(c->inputs[1]) == 4 && tpf_pattern_rank(x) == 4;
}

static int is_float_type(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16;
}

/* The fill of a bool-mask Where: -inf or the dtype's lowest value. */
static int is_masked_fill(const struct tpf_value *c)
{
	double x;
	if (tpf_pattern_const_scalar(c, &x))
		return 0;
	enum tpf_dtype t = tpf_pattern_dtype(c);
	double lowest = t == TPF_DTYPE_FLOAT16 ? -65504.0 : -3.38e38;
	return isinf(x) ? x < 0 : x <= lowest;
}

/* ------------------------------------------------------------ 3-D K^T */

/* One position of a shape tensor: a dim of K (k_dim >= 0) or a constant. */
struct shape_item {
	int k_dim;
	int64_t value;
};

static int one_const(const struct tpf_value *v, int64_t *out)
{
	int64_t b[2];
	size_t n = 0;
	if (!v || tpf_pattern_const_ints(v, b, 2, &n) || n != 1)
		return -1;
	*out = b[0];
	return 0;
}

/* v = Slice(Shape(k), start, end) along axis 0 with step 1: the dims of k
 * it holds, appended to items. */
static int shape_slice_items(const struct tpf_value *v, const struct tpf_value *k,
                             struct shape_item *items, int *n, int max)
{
	const struct tpf_node *sl = v->producer;
	int64_t s, e, ax = 0, st = 1;
	if (!sl || sl->op != TPF_OP_SLICE || sl->n_inputs < 3 || !sl->inputs[0] ||
	    one_const(sl->inputs[1], &s) || one_const(sl->inputs[2], &e))
		return -1;
	if (sl->n_inputs > 3 && sl->inputs[3] && one_const(sl->inputs[3], &ax))
		return -1;
	if (sl->n_inputs > 4 && sl->inputs[4] && one_const(sl->inputs[4], &st))
		return -1;
	const struct tpf_node *sh = sl->inputs[0]->producer;
	int64_t c[4];
	size_t nc = 0;
	if ((ax != 0 && ax != -1) || st != 1)
		return -1;
	/* Shape(k), or the constant it folded to (static shapes) */
	int folded = !tpf_pattern_const_ints(sl->inputs[0], c, 4, &nc) && nc == 4;
	if (!folded && (!sh || sh->op != TPF_OP_SHAPE || sh->inputs[0] != k ||
	                tpf_node_attr_int(sh, "start", 0) != 0 || tpf_node_attr(sh, "end")))
		return -1;
	s = s < 0 ? (s < -4 ? 0 : s + 4) : (s > 4 ? 4 : s);
	e = e < 0 ? (e < -4 ? 0 : e + 4) : (e > 4 ? 4 : e);
	for (int64_t i = s; i < e; i++) {
		if (*n >= max)
			return -1;
		items[(*n)++] = folded ? (struct shape_item){.k_dim = -1, .value = c[i]}
		                       : (struct shape_item){.k_dim = (int)i};
	}
	return 0;
}

/* The shape a Reshape takes: a constant, or a Concat of constants and
 * Slices of Shape(k).  Returns the number of items, -1 if not readable. */
static int shape_items(const struct tpf_value *shape, const struct tpf_value *k,
                       struct shape_item *items, int max)
{
	int64_t c[8];
	size_t nc = 0;
	int n = 0;
	if (!tpf_pattern_const_ints(shape, c, 8, &nc)) {
		if ((int)nc > max)
			return -1;
		for (size_t i = 0; i < nc; i++)
			items[n++] = (struct shape_item){.k_dim = -1, .value = c[i]};
		return n;
	}
	const struct tpf_node *cat = shape->producer;
	if (!cat || cat->op != TPF_OP_CONCAT)
		return -1;
	for (size_t i = 0; i < cat->n_inputs; i++) {
		struct tpf_value *p = cat->inputs[i];
		if (!p)
			return -1;
		if (!tpf_pattern_const_ints(p, c, 8, &nc)) {
			for (size_t j = 0; j < nc; j++) {
				if (n >= max)
					return -1;
				items[n++] = (struct shape_item){.k_dim = -1, .value = c[j]};
			}
		} else if (shape_slice_items(p, k, items, &n, max)) {
			return -1;
		}
	}
	return n;
}

/* Item i is dim `want` of K (a Slice of Shape(k) when k is given, or a
 * constant equal to the static dim dims[want]). */
static int item_is_dim(const struct shape_item *it, const struct tpf_value *k,
                       const int64_t *dims, int want)
{
	if (it->k_dim >= 0)
		return k && it->k_dim == want;
	return dims[want] > 0 && dims[want] == it->value;
}

/* torch's sdpa decomposition: K^T = Reshape(Transpose(Reshape(K, [-1, T, D]),
 * perm = [0, 2, 1]), [B, H, D, T]): K, else NULL (nodes[]: the nodes,
 * consumers first, *n_nodes of them).  With static shapes the inner
 * Reshape may read a repeat_kv expansion Expand(Unsqueeze(x, 2)) of 5-D
 * [B, Hkv, G, T, D] directly (the two Reshapes merged): then x, with
 * *groups = G (else 0). */
static struct tpf_value *k_transposed_3d(struct tpf_value *kt, struct tpf_node **nodes,
                                         int *n_nodes, int64_t *groups)
{
	*groups = 0;
	struct tpf_node *r2 = kt->producer;
	if (!r2 || r2->op != TPF_OP_RESHAPE || r2->n_inputs != 2 || !r2->inputs[0])
		return NULL;
	struct tpf_node *tr = r2->inputs[0]->producer;
	const struct tpf_attr *perm = tr && tr->op == TPF_OP_TRANSPOSE ? tpf_node_attr(tr, "perm") : NULL;
	if (!perm || perm->kind != TPF_ATTR_INTS || perm->n != 3 || perm->ints[0] != 0 ||
	    perm->ints[1] != 2 || perm->ints[2] != 1 || !tr->inputs[0])
		return NULL;
	struct tpf_node *r1 = tr->inputs[0]->producer;
	if (!r1 || r1->op != TPF_OP_RESHAPE || r1->n_inputs != 2 || !r1->inputs[0])
		return NULL;
	struct tpf_value *k = r1->inputs[0], *base = k, *shape_of = k;
	struct tpf_node *e = NULL, *u = NULL;
	int64_t dims[4];
	for (int i = 0; i < 4; i++)
		if (!static_dim(k, i, &dims[i]))
			dims[i] = -1;
	if (tpf_pattern_rank(k) == 5) {
		/* Expand(Unsqueeze(x, axes = [2]), [B, Hkv, G, T, D]), all static */
		int64_t axes[4], d5[5];
		size_t na = 0;
		e = k->producer;
		u = e && e->op == TPF_OP_EXPAND && e->inputs[0] ? e->inputs[0]->producer : NULL;
		if (!u || u->op != TPF_OP_UNSQUEEZE || !u->inputs[0] || unsqueeze_axes(u, axes, &na) ||
		    na != 1 || (axes[0] != 2 && axes[0] != -3))
			return NULL;
		base = u->inputs[0];
		if (tpf_pattern_rank(base) != 4)
			return NULL;
		for (int i = 0; i < 5; i++)
			if (!static_dim(k, i, &d5[i]) || d5[i] <= 0)
				return NULL;
		for (int i = 0; i < 4; i++) {
			int64_t bd;
			if (!static_dim(base, i, &bd) || bd != d5[i < 2 ? i : i + 1])
				return NULL;
		}
		dims[0] = d5[0], dims[1] = d5[1] * d5[2], dims[2] = d5[3], dims[3] = d5[4];
		*groups = d5[2];
		shape_of = NULL; /* Slices of Shape(5-D) are not K's dims */
	} else if (tpf_pattern_rank(k) != 4) {
		return NULL;
	}
	struct shape_item it[8];
	/* [B * H, T, D]: the last two dims of K, the leading ones merged */
	int n = shape_items(r1->inputs[1], k, it, 8);
	int ok1 = n == 3 && it[0].k_dim < 0 && it[0].value == -1 &&
	          item_is_dim(&it[1], shape_of, dims, 2) && item_is_dim(&it[2], shape_of, dims, 3);
	struct tpf_value *o1 = r1->outputs[0];
	int64_t o;
	if (!ok1 && !(tpf_pattern_rank(o1) == 3 &&
	              (shape_of ? dims_eq(o1, 1, k, 2) == TPF_ANSWER_YES
	                        : static_dim(o1, 1, &o) && o == dims[2]) &&
	              (shape_of ? dims_eq(o1, 2, k, 3) == TPF_ANSWER_YES
	                        : static_dim(o1, 2, &o) && o == dims[3])))
		return NULL;
	/* [B, H, D, T] */
	n = shape_items(r2->inputs[1], k, it, 8);
	if (n != 4 || !item_is_dim(&it[0], shape_of, dims, 0) ||
	    !item_is_dim(&it[1], shape_of, dims, 1) || !item_is_dim(&it[2], shape_of, dims, 3) ||
	    !item_is_dim(&it[3], shape_of, dims, 2))
		return NULL;
	nodes[0] = r2;
	nodes[1] = tr;
	nodes[2] = r1;
	*n_nodes = 3;
	if (e) {
		nodes[3] = e;
		nodes[4] = u;
		*n_nodes = 5;
	}
	return base;
}

/* ------------------------------------------------------------ check */

/* From the Softmax input down to MatMul(Q', K^T): mask, softcap, scale. */
static const char *walk_scores(struct tpf_match *m, struct attn_facts *f, struct tpf_value *s,
                               struct tpf_node **qk_out)
{
	struct tpf_node *n = s->producer;
	const char *why;
	int masked = 0, capped = 0;

	/* the mask */
	if (n && n->op == TPF_OP_ADD && n->n_inputs == 2) {
		int si = leads_to_matmul(n->inputs[0]) ? 0 : leads_to_matmul(n->inputs[1]) ? 1 : -1;
		if (si < 0)
			return tpf_match_reason(m, "neither operand of the Add '%s' before the Softmax "
			                        "is MatMul(Q, K^T) (scaled)",
			                        n->name ? n->name : "");
		if ((why = chain_add(m, f, n, 1, "the masked scores")))
			return why;
		f->mask = n->inputs[1 - si];
		s = n->inputs[si];
		masked = 1;
	} else if (n && n->op == TPF_OP_WHERE && n->n_inputs == 3) {
		if (is_masked_fill(n->inputs[1]) && !is_masked_fill(n->inputs[2]))
			return "the Where before the Softmax keeps the scores where the mask is false (an "
			       "inverted bool mask)";
		if (!is_masked_fill(n->inputs[2]))
			return tpf_match_reason(m, "the Where '%s' before the Softmax does not fill with "
			                        "-inf",
			                        n->name ? n->name : "");
		if (tpf_pattern_dtype(n->inputs[0]) != TPF_DTYPE_BOOL)
			return "the Where's condition is not bool";
		if ((why = chain_add(m, f, n, 1, "the masked scores")))
			return why;
		f->mask = n->inputs[0];
		s = n->inputs[1];
		masked = 1;
	}
	/* the softcap: c * Tanh(s / c) */
	n = s->producer;
	int ci = const_factor_index(n);
	if (ci >= 0 && n->op == TPF_OP_MUL && n->inputs[ci]->producer &&
	    n->inputs[ci]->producer->op == TPF_OP_TANH) {
		struct tpf_node *t = n->inputs[ci]->producer;
		struct tpf_node *d = t->inputs[0] ? t->inputs[0]->producer : NULL;
		int di = const_factor_index(d);
		double c, inv;
		if (di < 0)
			return "the softcap's Tanh does not take the scores divided by a constant";
		if ((why = factor_of(m, n, ci, &c)) || (why = factor_of(m, d, di, &inv)))
			return why;
		if (c <= 0 || !near(inv * c, 1.0, tpf_pattern_dtype(n->inputs[1 - ci])))
			return tpf_match_reason(m, "softcap: Tanh(s * %g) * %g is not c * Tanh(s / c)",
			                        inv, c);
		if ((why = chain_add(m, f, n, 1, "the capped scores")) ||
		    (why = chain_add(m, f, t, 1, "the softcap's Tanh")) ||
		    (why = chain_add(m, f, d, 1, "the softcap's quotient")))
			return why;
		f->softcap = c;
		s = d->inputs[di];
		capped = 1;
	}
	/* the scale */
	for (int i = 0; i < 3; i++) {
		n = s->producer;
		int xi = const_factor_index(n);
		double c;
		if (xi < 0)
			break;
		if ((why = factor_of(m, n, xi, &c)) || (why = chain_add(m, f, n, 1, "the scaled scores")))
			return why;
		f->scale *= c;
		s = n->inputs[xi];
	}
	n = s->producer;
	if (n && (n->op == TPF_OP_ADD || n->op == TPF_OP_WHERE))
		return tpf_match_reason(m, "the %s '%s' is applied to the scores before the %s",
		                        n->op == TPF_OP_ADD && masked ? "Add" : n->op_type,
		                        n->name ? n->name : "",
		                        capped ? "softcap" : "scale");
	if (n && n->op == TPF_OP_TANH)
		return "a Tanh on the scores that is not a softcap c * Tanh(s / c)";
	if (n && n->op == TPF_OP_CAST)
		return tpf_match_reason(m, "the scores are cast to %s before the %s (a wider mask or "
		                        "Softmax on 16-bit scores)",
		                        tpf_dtype_name((enum tpf_dtype)tpf_node_attr_int(n, "to", 0)),
		                        masked ? "mask" : capped ? "softcap" : "Softmax");
	if (!n || n->op != TPF_OP_MATMUL || n->n_inputs != 2)
		return tpf_match_reason(m, "the scores '%s' do not come from MatMul(Q, K^T)", s->name);
	if ((why = chain_add(m, f, n, 1, "the scores")))
		return why;
	*qk_out = n;
	return NULL;
}

/* The Softmax: its NaN guard, one user for each node of the probabilities,
 * the last axis. */
static const char *check_probabilities(struct tpf_match *m, const struct tpf_node *sm)
{
	/* the Softmax and its Casts are marked MULTI_USE so that a second
	 * user is reported here */
	struct tpf_node *guard = tpf_match_node(m, "nan_guard");
	if (guard) {
		/* Where(IsNaN(p), 0, p): a fully masked row gives 0, as Attention's */
		double z;
		if (tpf_match_value(m, "p_nan") != sm->outputs[0])
			return "the NaN guard tests another value than the Softmax's output";
		if (tpf_pattern_const_scalar(tpf_match_value(m, "zero"), &z) || z != 0.0)
			return "the NaN guard does not replace NaN by 0";
	}
	for (size_t i = 1; i < m->n_nodes; i++) {
		size_t uses = tpf_value_use_count(m->nodes[i]->outputs[0]);
		if (guard && m->nodes[i] == sm && uses == 2)
			continue; /* IsNaN and the Where of the guard */
		if (uses != 1)
			return tpf_match_reason(m, "'%s' (the probabilities) has %zu uses: it is needed "
			                        "besides the attention",
			                        m->nodes[i]->outputs[0]->name, uses);
	}
	/* Softmax along the last axis (opset >= 13; the pass does not run below) */
	int r = tpf_pattern_rank(sm->inputs[0]);
	int64_t ax = tpf_node_attr_int(sm, "axis", -1);
	if (!(ax == -1 || (r > 0 && ax == r - 1)))
		return tpf_match_reason(m, "the Softmax '%s' is along axis %" PRId64 ", not the last",
		                        sm->name ? sm->name : "", ax);
	return NULL;
}

/* K from K^T: a Transpose of the last two axes, or K transposed through 3-D
 * (*g3: the times K is expanded inside it, 0 when not). */
static const char *match_k(struct tpf_match *m, struct attn_facts *f, struct tpf_value *kt,
                           struct tpf_value **k_out, int64_t *g3)
{
	struct tpf_node *tr = kt->producer, *t3[5];
	const struct tpf_attr *perm = tr && tr->op == TPF_OP_TRANSPOSE ? tpf_node_attr(tr, "perm") : NULL;
	struct tpf_value *kx;
	int n3 = 0;
	if ((kx = k_transposed_3d(kt, t3, &n3, g3))) {
		if (f->n_chain + n3 > CHAIN_MAX)
			return "too many nodes in the attention chain";
		for (int i = 0; i < n3; i++)
			f->chain[f->n_chain++] = t3[i];
	} else {
		if (tr && tr->op == TPF_OP_RESHAPE)
			return tpf_match_reason(m, "K^T '%s' is a Reshape but not K transposed through 3-D "
			                        "(Reshape(Transpose(Reshape(K, [-1, T, D]), [0, 2, 1]), "
			                        "[B, H, D, T]))",
			                        kt->name);
		if (!tr || tr->op != TPF_OP_TRANSPOSE)
			return tpf_match_reason(m, "K^T '%s' is not a Transpose", kt->name);
		if (!perm || perm->kind != TPF_ATTR_INTS || perm->n != 4 || perm->ints[0] != 0 ||
		    perm->ints[1] != 1 || perm->ints[2] != 3 || perm->ints[3] != 2)
			return tpf_match_reason(m, "K^T '%s' is a Transpose that does not swap exactly "
			                        "the last two axes of a 4-D K",
			                        kt->name);
		if (f->n_chain >= CHAIN_MAX)
			return "too many nodes in the attention chain";
		f->chain[f->n_chain++] = tr;
		kx = tr->inputs[0];
	}
	*k_out = kx;
	return NULL;
}

/* Ranks, heads and dtypes of Q, K, V and the past K and V; *t_out gets
 * Q's dtype. */
static const char *check_operands(struct tpf_match *m, const struct attn_facts *f,
                                  struct tpf_value *out, struct tpf_value *scores,
                                  enum tpf_dtype *t_out)
{
	struct tpf_value *q = f->q, *kx = f->k, *vx = f->v;
	struct tpf_value *const all[] = {q, kx, vx, f->pk, f->pv};
	static const char *const names[] = {"Q", "K", "V", "past_key", "past_value"};
	for (int i = 0; i < 5; i++) {
		if (!all[i])
			continue;
		int rk4 = tpf_pattern_rank(all[i]);
		if (rk4 < 0)
			return tpf_match_reason(m, "%s '%s' has an unknown rank", names[i], all[i]->name);
		if (rk4 != 4)
			return tpf_match_reason(m, "%s '%s' has rank %d; Attention takes [batch, heads, "
			                        "seq, head]",
			                        names[i], all[i]->name, rk4);
	}
	int64_t hq, hk, hv;
	if (dims_eq(q, 1, kx, 1) != TPF_ANSWER_YES) {
		if (!static_dim(q, 1, &hq) || !static_dim(kx, 1, &hk))
			return tpf_match_reason(m, "the heads of Q '%s' and K '%s' are not known",
			                        q->name, kx->name);
		if (hk <= 0 || hq % hk)
			return tpf_match_reason(m, "Q has %" PRId64 " heads, not a multiple of K's %" PRId64,
			                        hq, hk);
	}
	if (dims_eq(kx, 1, vx, 1) != TPF_ANSWER_YES &&
	    !(static_dim(kx, 1, &hk) && static_dim(vx, 1, &hv) && hk == hv))
		return tpf_match_reason(m, "K '%s' and V '%s' do not have the same (known) heads",
		                        kx->name, vx->name);
	if (dims_eq(q, 3, kx, 3) == TPF_ANSWER_NO || dims_eq(kx, 2, vx, 2) == TPF_ANSWER_NO)
		return "the head sizes of Q and K or the lengths of K and V differ";
	enum tpf_dtype t = tpf_pattern_dtype(q);
	if (!is_float_type(t))
		return tpf_match_reason(m, "Q is %s: Attention takes float, float16 or bfloat16",
		                        tpf_dtype_name(t));
	for (int i = 1; i < 5; i++)
		if (all[i] && tpf_pattern_dtype(all[i]) != t)
			return tpf_match_reason(m, "mixed dtypes: Q %s, %s %s", tpf_dtype_name(t), names[i],
			                        tpf_dtype_name(tpf_pattern_dtype(all[i])));
	enum tpf_dtype to = tpf_pattern_dtype(out), ts = tpf_pattern_dtype(scores);
	if ((to != TPF_DTYPE_UNDEFINED && to != t) || (ts != TPF_DTYPE_UNDEFINED && ts != t))
		return tpf_match_reason(m, "mixed dtypes: Q %s, scores %s, output %s",
		                        tpf_dtype_name(t), tpf_dtype_name(ts), tpf_dtype_name(to));
	*t_out = t;
	return NULL;
}

/* The Casts around a 16-bit Softmax, and the mask's dtype and broadcast to
 * the scores of qk. */
static const char *check_casts_mask(struct tpf_match *m, const struct attn_facts *f,
                                    const struct tpf_node *qk, enum tpf_dtype t)
{
	struct tpf_node *cu = tpf_match_node(m, "cast_up"), *cb = tpf_match_node(m, "cast_back");
	struct tpf_node *ru = tpf_match_node(m, "rt_up"), *rb = tpf_match_node(m, "rt_back");
	if (cb && ((cu && tpf_node_attr_int(cu, "to", 0) != TPF_DTYPE_FLOAT) ||
	           tpf_node_attr_int(cb, "to", 0) != t))
		return "the Softmax's Casts are not to float and back to the scores' dtype";
	if (ru && ((tpf_node_attr_int(ru, "to", 0) != TPF_DTYPE_FLOAT &&
	            tpf_node_attr_int(ru, "to", 0) != TPF_DTYPE_DOUBLE) ||
	           tpf_node_attr_int(rb, "to", 0) != t))
		return "the Casts after the Softmax are not a widening round trip";
	if (!f->mask)
		return NULL;
	enum tpf_dtype tm = tpf_pattern_dtype(f->mask);
	if (tm != TPF_DTYPE_BOOL && tm != t)
		return tpf_match_reason(m, "the mask '%s' is %s, the scores %s", f->mask->name,
		                        tpf_dtype_name(tm), tpf_dtype_name(t));
	int mr = tpf_pattern_rank(f->mask);
	struct tpf_value *sc = qk->outputs[0];
	if (mr > 4)
		return tpf_match_reason(m, "the mask '%s' has rank %d", f->mask->name, mr);
	for (int i = 0; i < mr; i++) {
		int j = 4 - mr + i;
		int64_t md, sd;
		if (static_dim(f->mask, i, &md) && md != 1 && static_dim(sc, j, &sd) && md != sd)
			return tpf_match_reason(m, "the mask '%s' does not broadcast to [B, Hq, S, T] "
			                        "(dim %d is %" PRId64 ", the scores' %" PRId64 ")",
			                        f->mask->name, j, md, sd);
		if (dims_eq(f->mask, i, sc, j) == TPF_ANSWER_NO && !(static_dim(f->mask, i, &md) &&
		                                                    md == 1))
			return tpf_match_reason(m, "the mask '%s' does not broadcast to [B, Hq, S, T] "
			                        "(dim %d)",
			                        f->mask->name, j);
	}
	return NULL;
}

static const char *check_attention(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct attn_facts *f = (struct attn_facts *)m->facts;
	struct tpf_node *sm = tpf_match_node(m, "softmax");
	struct tpf_value *scores = tpf_match_value(m, "scores"), *vx = tpf_match_value(m, "v");
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_node *qk = NULL;
	const char *why;

	if (!sm || !scores || !vx)
		return "incomplete match";
	f->scale = 1.0;
	if ((why = check_probabilities(m, sm)) || (why = walk_scores(m, f, scores, &qk)))
		return why;

	/* Q and K^T */
	struct tpf_value *q = q_side(qk->inputs[0], f, &f->scale);
	struct tpf_value *kt = qk->inputs[1];
	kt = q_side(kt, f, &f->scale);
	struct tpf_value *kx = NULL;
	int64_t g3 = 0;
	if ((why = match_k(m, f, kt, &kx, &g3)))
		return why;
	if (!g3)
		kx = q_side(kx, f, &f->scale);

	/* repeat_kv on K and V (both or neither) */
	struct tpf_node *rk[3], *rv[3];
	int64_t gk = 0, gv = 0;
	struct tpf_value *kb = g3 ? NULL : unrepeat(kx, &gk, rk), *vb = unrepeat(vx, &gv, rv);
	if (g3) {
		/* K came unexpanded out of its 3-D transpose: V must be expanded alike */
		if (!vb || gv != g3 || f->n_chain + 3 > CHAIN_MAX)
			return tpf_match_reason(m, "K is expanded %" PRId64 " times inside its 3-D "
			                        "transpose, V '%s' not the same way",
			                        g3, vx->name);
		for (int i = 0; i < 3; i++)
			f->chain[f->n_chain++] = rv[i];
		vx = vb;
	} else if (kb && vb && gk == gv && f->n_chain + 6 <= CHAIN_MAX) {
		for (int i = 0; i < 3; i++)
			f->chain[f->n_chain++] = rk[i];
		for (int i = 0; i < 3; i++)
			f->chain[f->n_chain++] = rv[i];
		kx = kb;
		vx = vb;
	}
	/* the KV cache Concats */
	if (kv_concat(kx) && kv_concat(vx)) {
		f->kcat = kx->producer;
		f->vcat = vx->producer;
		f->pk = f->kcat->inputs[0];
		f->pv = f->vcat->inputs[0];
		kx = f->kcat->inputs[1];
		vx = f->vcat->inputs[1];
	}
	f->q = q;
	f->k = kx;
	f->v = vx;

	enum tpf_dtype t = TPF_DTYPE_UNDEFINED;
	if ((why = check_operands(m, f, out, scores, &t)))
		return why;
	return check_casts_mask(m, f, qk, t);
}

/* ------------------------------------------------------------ rewrite */

static enum tpf_status rewrite_attention(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct attn_facts *f = (struct attn_facts *)m->facts;
	struct tpf_value *out = m->root->outputs[0];
	enum tpf_status st;

	struct tpf_value *in[6] = {f->q, f->k, f->v, f->mask, f->pk, f->pv};
	size_t n_in = f->pk ? 6 : f->mask ? 4 : 3;
	size_t n_out = f->kcat ? 3 : 1;
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_ATTENTION, in, n_in, n_out, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_node_set_attr_float(n, "scale", (float)f->scale)))
		return st;
	if (f->softcap > 0 && (st = tpf_node_set_attr_float(n, "softcap", (float)f->softcap)))
		return st;
	if ((st = tpf_value_copy_type(n->outputs[0], &out->type)))
		return st;
	if (f->kcat) {
		if ((st = tpf_value_copy_type(n->outputs[1], &f->kcat->outputs[0]->type)) ||
		    (st = tpf_value_copy_type(n->outputs[2], &f->vcat->outputs[0]->type)))
			return st;
	}
	if ((st = tpf_rewriter_replace(rw, out, n->outputs[0])))
		return st;
	if (f->kcat && ((st = tpf_rewriter_replace(rw, f->kcat->outputs[0], n->outputs[1])) ||
	                (st = tpf_rewriter_replace(rw, f->vcat->outputs[0], n->outputs[2]))))
		return st;
	if ((st = tpf_rewriter_erase_dead(rw, m)))
		return st;
	for (int i = 0; i < f->n_chain; i++)
		if ((st = tpf_rewriter_erase_if_dead(rw, f->chain[i])))
			return st;
	if (f->kcat && ((st = tpf_rewriter_erase_if_dead(rw, f->kcat)) ||
	                (st = tpf_rewriter_erase_if_dead(rw, f->vcat))))
		return st;
	return TPF_OK;
}

/* ------------------------------------------------------------ patterns */

#define MU TPF_PNODE_MULTI_USE
/* the scores, or Cast(scores) (bound as "cast_up") */
#define SCORES_OPT_CAST                                                                            \
	(&(const struct tpf_pnode){.kind = TPF_PNODE_VALUE, .name = "scores",                      \
	                           .flags = TPF_PNODE_OPT_CAST, .cast_name = "cast_up"})
#define SOFTMAX_OF(S) TPF_PAT_OP(SOFTMAX, "softmax", MU, NULL, S)

static const struct tpf_pattern pat_attention = {
    .name = "attention",
    .root = TPF_PAT_OP(
        MATMUL, "out", 0, NULL,
        TPF_PAT_ALT(TPF_PAT_OP(CAST, "cast_back", MU, NULL, SOFTMAX_OF(SCORES_OPT_CAST)),
                    TPF_PAT_OP(CAST, "rt_back", MU, NULL,
                               TPF_PAT_OP(CAST, "rt_up", MU, NULL, SOFTMAX_OF(TPF_PAT_ANY("scores")))),
                    TPF_PAT_OP(WHERE, "nan_guard", MU, NULL,
                               TPF_PAT_OP(IS_NAN, "isnan", MU, NULL, TPF_PAT_ANY("p_nan")),
                               TPF_PAT_CONST("zero"), SOFTMAX_OF(TPF_PAT_ANY("scores"))),
                    SOFTMAX_OF(TPF_PAT_ANY("scores"))),
        TPF_PAT_ANY("v")),
    .check = check_attention,
    .rewrite = rewrite_attention,
    .explain_min_nodes = 2,
};

static const struct tpf_pattern *const patterns[] = {&pat_attention, NULL};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	*changed = 0;
	/* every form has a Softmax: without one there is nothing to do (and no
	 * reason to verify the model at opset 23) */
	int has_softmax = m->graph->n_children > 0 || m->n_functions > 0;
	for (struct tpf_node *n = m->graph->first; n && !has_softmax; n = n->next)
		has_softmax = n->op == TPF_OP_SOFTMAX;
	if (!has_softmax)
		return TPF_OK;
	return tpf_pattern_run_opset23(m, &tpf_pass_fuse_attention, "Attention", ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_attention = {
    .name = PASS_NAME,
    .summary = "MatMul-scale-mask-Softmax-MatMul attention (GQA, KV cache, softcap) into ONNX "
               "Attention",
    .run = run,
    .patterns = patterns,
};
