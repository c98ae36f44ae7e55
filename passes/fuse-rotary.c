/* SPDX-License-Identifier: MIT */
/*
 * fuse-rotary-embedding: the rotate-half rotary embedding exporters write
 * (Hugging Face's apply_rotary_pos_emb) becomes ONNX RotaryEmbedding
 * (opset 23, docs/ops.md):
 *
 *   rot = Concat(Neg(Slice(x, h:)), Slice(x, :h))           (last axis, h = D/2)
 *   y   = Add(Mul(x, cos), Mul(rot, sin))                    (any operand order)
 *       => RotaryEmbedding(x, cos_cache, sin_cache)
 *
 * and partial rotary, where only the first rotary_dim dims of the head turn:
 *
 *   y = Concat(<the above on Slice(X, :r)>, Slice(X, r:))
 *       => RotaryEmbedding(X, ...) {rotary_embedding_dim = r}
 *
 * and the interleaved rotation (GPT-J's rotate_every_two, Cohere's
 * rotate_half), full or partial, where the pairs (x[2i], x[2i+1]) turn:
 *
 *   rot = Reshape(Concat(Unsqueeze(Neg(Slice(x, 1::2)), -1),
 *                        Unsqueeze(Slice(x, 0::2), -1)), x's shape)
 *   y   = Add(Mul(x, cos), Mul(rot, sin))
 *       => RotaryEmbedding(x, cos_cache, sin_cache) {interleaved = 1}
 *
 * whose caches have equal pairs: Cos/Sin of repeat_interleave(f, 2)
 * (Reshape(Expand|Tile(Unsqueeze(f, -1), [1, .., 2]))) becomes Cos(f),
 * repeat_interleave(c[..., :D/2], 2) of a rotate-half cache c (ERNIE 4.5)
 * becomes c's half cache, and constants (or gathered tables) keep the
 * first of each pair.  DeepSeek-V3's interleaved rotation laid out in
 * halves is the rotate-half rotation of the de-interleaved x:
 *
 *   Concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin), x1, x2 = Slice(x, 0::2), Slice(x, 1::2)
 *       => RotaryEmbedding(Concat(x1, x2), c_cos, c_sin)    (cos = Unsqueeze(c_cos, 1))
 *
 * x is [batch, heads, seq, head] (RotaryEmbedding's 4-D layout); cos and
 * sin broadcast as [b, 1, seq, D]: Unsqueeze(c, axes = [1]) of a
 * [b, seq, D] value, or constants.  RotaryEmbedding wants half-width caches
 * [batch, seq, D/2], and a rotate-half cos has equal halves, which the pass
 * proves: either the cache is Cos(Concat(f, f)) (and sin Sin(Concat(f, f))
 * of the same f; an attention scaling Mul by 1 and a Cast to the model's
 * dtype are looked through), whose first half is Cos(f) (Cast alike), or it is a constant whose halves are equal bit for
 * bit, whose first half becomes a new initializer, or it is such a constant
 * table [max_position, D] gathered at position ids (Gather(table, ids),
 * older exports), which becomes RotaryEmbedding's position_ids form with
 * the table's first half.  Where the cache's batch
 * is 1 and x's is not provably 1, the caches are expanded to x's batch
 * (Shape, Concat, Expand; shared by every site when a graph input has x's
 * batch), as
 * RotaryEmbedding's schema and ONNX Runtime require.
 *
 * h is a constant equal to D/2 (D static), or the exporter's computed
 * D / 2 (Div(Gather(Shape(x), 3), 2)).  RotaryEmbedding is an opset-23 op:
 * a model of a default-domain opset from 13 to 22 is raised to 23 (Reduce
 * axes attributes made inputs, tpf_model_raise_opset) when it still
 * verifies there (otherwise the pass leaves it alone and says why).
 */
#include <inttypes.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-rotary-embedding"

/* What check found for the rewrite. */
struct rope_facts {
	struct tpf_value *x;        /* the input of RotaryEmbedding (X for partial) */
	int64_t rot;                /* 0: the whole head */
	struct tpf_value *f;        /* Cos(Concat(f, f)) form, else NULL */
	int64_t cast_to;            /* ... cast to this dtype (0: no Cast) */
	struct tpf_value *cos_c;    /* constant form: the full-width constants */
	struct tpf_value *sin_c;
	struct tpf_value *pos;      /* gathered form: the caches [P, D] read at these positions */
	struct tpf_node *x_slice;   /* partial: Slice(X, :r) and Slice(X, r:) */
	struct tpf_node *pass_slice;
	int interleaved;            /* the pairs form (RotaryEmbedding interleaved = 1) */
};

/* ------------------------------------------------------------ reading Slices */

struct slice_par {
	int64_t start, end, axis, step;
	struct tpf_value *start_v, *end_v; /* when given as inputs */
};

static int one_int(struct tpf_value *v, int64_t *out)
{
	int64_t b[2];
	size_t n = 0;
	if (!v || tpf_pattern_const_ints(v, b, 2, &n) || n != 1)
		return -1;
	*out = b[0];
	return 0;
}

/* One-axis Slice: its parameters (start/end may stay unknown: -1 from
 * one_int, the values are then kept in start_v / end_v). */
static int slice_params(const struct tpf_node *s, struct slice_par *p)
{
	memset(p, 0, sizeof(*p));
	p->step = 1;
	p->start = p->end = INT64_MIN;
	if (s->n_inputs >= 3) {
		p->start_v = s->inputs[1];
		p->end_v = s->inputs[2];
		one_int(p->start_v, &p->start);
		one_int(p->end_v, &p->end);
		if (s->n_inputs > 3 && s->inputs[3]) {
			if (one_int(s->inputs[3], &p->axis))
				return -1;
		} else {
			p->axis = 0;
		}
		if (s->n_inputs > 4 && s->inputs[4] && one_int(s->inputs[4], &p->step))
			return -1;
		return 0;
	}
	const struct tpf_attr *st = tpf_node_attr(s, "starts"), *en = tpf_node_attr(s, "ends"),
	                      *ax = tpf_node_attr(s, "axes");
	if (!st || !en || st->kind != TPF_ATTR_INTS || en->kind != TPF_ATTR_INTS || st->n != 1 ||
	    en->n != 1)
		return -1;
	p->start = st->ints[0];
	p->end = en->ints[0];
	if (ax && (ax->kind != TPF_ATTR_INTS || ax->n != 1))
		return -1;
	p->axis = ax ? ax->ints[0] : 0;
	return 0;
}

/* v is the exporter's computed half of x's last dim:
 * [Unsqueeze(]Div(Gather(Shape(x), last), 2)[)] */
static int is_half_of_last(struct tpf_value *v, const struct tpf_value *x)
{
	struct tpf_node *n = v ? v->producer : NULL;
	int64_t k;
	if (n && (n->op == TPF_OP_UNSQUEEZE || n->op == TPF_OP_RESHAPE))
		n = n->inputs[0] ? n->inputs[0]->producer : NULL;
	if (!n || n->op != TPF_OP_DIV || n->n_inputs != 2 || one_int(n->inputs[1], &k) || k != 2)
		return 0;
	n = n->inputs[0] ? n->inputs[0]->producer : NULL;
	if (!n || n->op != TPF_OP_GATHER || tpf_node_attr_int(n, "axis", 0) != 0 ||
	    one_int(n->inputs[1], &k))
		return 0;
	int r = tpf_pattern_rank(x);
	if (!(k == -1 || (r > 0 && k == r - 1)))
		return 0;
	n = n->inputs[0] ? n->inputs[0]->producer : NULL;
	return n && n->op == TPF_OP_SHAPE && n->inputs[0] == x && !tpf_node_attr(n, "start") &&
	       !tpf_node_attr(n, "end");
}

static int last_axis(int64_t axis, const struct tpf_value *x)
{
	int r = tpf_pattern_rank(x);
	return axis == -1 || (r > 0 && axis == r - 1);
}

/* The one axis of an Unsqueeze (attribute or input); 0 on success. */
static int unsqueeze_axis(const struct tpf_node *n, int64_t *ax)
{
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	if (a && a->kind == TPF_ATTR_INTS && a->n == 1) {
		*ax = a->ints[0];
		return 0;
	}
	return n->n_inputs < 2 ? -1 : one_int(n->inputs[1], ax);
}

/* ------------------------------------------------------------ cos / sin */

/* Looks through an Unsqueeze at axis 1 and a Mul by the constant 1; *unsq
 * set when the Unsqueeze was there. */
static struct tpf_value *scaled_by_one(struct tpf_value *c)
{
	struct tpf_node *n = c ? c->producer : NULL;
	double one;

	if (n && n->op == TPF_OP_MUL && n->n_inputs == 2)
		for (int i = 0; i < 2; i++)
			if (!tpf_pattern_const_scalar(n->inputs[i], &one) && one == 1.0)
				return n->inputs[1 - i];
	return c;
}

/* Looks through an Unsqueeze at axis 1, a Mul by the constant 1 and a
 * Cast (*cast_to: its dtype, else 0); *unsq set when the Unsqueeze was
 * there. */
static struct tpf_value *cache_source(struct tpf_value *c, int *unsq, int64_t *cast_to)
{
	struct tpf_node *n = c->producer;
	int64_t ax;

	*unsq = 0;
	*cast_to = 0;
	if (n && n->op == TPF_OP_UNSQUEEZE) {
		if (unsqueeze_axis(n, &ax) || ax != 1)
			return NULL;
		*unsq = 1;
		c = n->inputs[0];
		n = c->producer;
	}
	c = scaled_by_one(c);
	n = c->producer;
	if (n && n->op == TPF_OP_CAST && n->inputs[0]) {
		*cast_to = tpf_node_attr_int(n, "to", 0);
		c = scaled_by_one(n->inputs[0]);
	}
	return c;
}

/* c = Cos|Sin(Concat(f, f) along the last axis): f, else NULL. */
static struct tpf_value *trig_of_twice(struct tpf_value *c, enum tpf_op op)
{
	struct tpf_node *n = c ? c->producer : NULL;
	if (!n || n->op != op || !n->inputs[0])
		return NULL;
	struct tpf_node *cat = n->inputs[0]->producer;
	if (!cat || cat->op != TPF_OP_CONCAT || cat->n_inputs != 2 || cat->inputs[0] != cat->inputs[1])
		return NULL;
	if (!last_axis(tpf_node_attr_int(cat, "axis", 0), cat->inputs[0]))
		return NULL;
	return cat->inputs[0];
}

/* f when c is the exporters' repeat_interleave(f, 2) along the last axis:
 * Reshape(Expand|Tile(Unsqueeze(f, rank(f)), [1, .., 1, 2]), shape) of
 * f's rank; else NULL. */
static struct tpf_value *repeat_source(struct tpf_value *c)
{
	struct tpf_node *rs = c ? c->producer : NULL;
	int64_t reps[8], ax;
	size_t nr = 0;

	if (!rs || rs->op != TPF_OP_RESHAPE || !rs->inputs[0])
		return NULL;
	struct tpf_node *rep = rs->inputs[0]->producer;
	if (!rep || (rep->op != TPF_OP_EXPAND && rep->op != TPF_OP_TILE) || rep->n_inputs != 2 ||
	    tpf_pattern_const_ints(rep->inputs[1], reps, 8, &nr) || nr < 2 || reps[nr - 1] != 2)
		return NULL;
	for (size_t i = 0; i + 1 < nr; i++)
		if (reps[i] != 1)
			return NULL;
	struct tpf_node *u = rep->inputs[0] ? rep->inputs[0]->producer : NULL;
	if (!u || u->op != TPF_OP_UNSQUEEZE || unsqueeze_axis(u, &ax) || !u->inputs[0])
		return NULL;
	struct tpf_value *f = u->inputs[0];
	int r = tpf_pattern_rank(f);
	if (r < 1 || (size_t)r + 1 != nr || (ax != -1 && ax != r) ||
	    tpf_pattern_rank(rs->outputs[0]) != r)
		return NULL;
	return f;
}

/* c = Cos|Sin(repeat_interleave(f, 2)): f, else NULL. */
static struct tpf_value *trig_of_pairs(struct tpf_value *c, enum tpf_op op)
{
	struct tpf_node *n = c ? c->producer : NULL;
	if (!n || n->op != op || !n->inputs[0])
		return NULL;
	return repeat_source(n->inputs[0]);
}

/* c = repeat_interleave(w[..., :D/2], 2) (ERNIE 4.5 turns a rotate-half
 * cache into an interleaved one so): w, else NULL. */
static struct tpf_value *repeated_first_half(struct tpf_value *c, int64_t d)
{
	struct tpf_value *v = repeat_source(c);
	struct slice_par p;

	if (!v || !v->producer || v->producer->op != TPF_OP_SLICE || slice_params(v->producer, &p))
		return NULL;
	struct tpf_value *w = v->producer->inputs[0];
	if (p.start != 0 || p.step != 1 || !last_axis(p.axis, w) || d < 0 || 2 * p.end != d)
		return NULL;
	return w;
}

/* A float constant whose last dim is 2 * half and whose two halves (il:
 * the two elements of each pair) are equal bit for bit. */
static const char *const_halves_equal(const struct tpf_value *v, int64_t half, int il)
{
	const struct tpf_tensor *t = tpf_value_constant(v);
	if (!t || !t->data || t->rank < 1)
		return il ? "is neither Cos/Sin of a repeat_interleave nor a constant"
		          : "is neither Cos/Sin(Concat(f, f)) nor a constant";
	if (t->dims[t->rank - 1] != 2 * half)
		return "is a constant whose last dim is not the head size";
	size_t esz = tpf_dtype_bits(t->dtype) / 8;
	int64_t rows = tpf_tensor_numel(t) / (2 * half);
	const unsigned char *p = t->data;
	if (!esz || tpf_dtype_bits(t->dtype) % 8)
		return "is a constant of a sub-byte dtype";
	for (int64_t r = 0; r < rows; r++) {
		const unsigned char *row = p + (size_t)(2 * r * half) * esz;
		if (!il && memcmp(row, row + (size_t)half * esz, (size_t)half * esz))
			return "is a constant whose two halves differ (not a rotate-half cache)";
		for (int64_t i = 0; il && i < half; i++)
			if (memcmp(row + (size_t)(2 * i) * esz, row + (size_t)(2 * i + 1) * esz, esz))
				return "is a constant whose pairs differ (not an interleaved cache)";
	}
	return NULL;
}

/* ------------------------------------------------------------ check */

/* rot = Concat(Neg(Slice(x, h:)), Slice(x, :h)), h = D/2 */
static const char *check_rotate_half(struct tpf_match *m, struct tpf_value *x, int64_t d)
{
	struct tpf_node *hi = tpf_match_node(m, "hi"), *lo = tpf_match_node(m, "lo");
	struct tpf_node *cat = tpf_match_node(m, "rot");
	struct slice_par ph, pl;

	if (!hi || !lo || !cat)
		return "incomplete match";
	if (cat->n_inputs != 2 || !last_axis(tpf_node_attr_int(cat, "axis", 0), x))
		return "the rotate-half Concat is not along the last axis";
	if (slice_params(hi, &ph) || slice_params(lo, &pl))
		return "a rotate-half Slice has parameters that are not constant";
	if (!last_axis(ph.axis, x) || !last_axis(pl.axis, x))
		return "a rotate-half Slice is not along the last axis";
	if (ph.step != 1 || pl.step != 1)
		return "a rotate-half Slice has a step other than 1";
	int r = tpf_pattern_rank(x);
	if (r >= 0 && r != 4)
		return tpf_match_reason(m, "x '%s' has rank %d; RotaryEmbedding takes [batch, heads, "
		                        "seq, head]", x->name, r);
	/* lo = x[:h], hi = x[h:] */
	if (pl.start != 0)
		return "the second half of rotate_half does not start at 0";
	int structural = pl.end == INT64_MIN && is_half_of_last(pl.end_v, x) && ph.start == INT64_MIN &&
	                 is_half_of_last(ph.start_v, x);
	int64_t h = pl.end;
	if (!structural) {
		if (h == INT64_MIN || ph.start != h)
			return "the rotate-half split point is neither a constant nor D / 2 of x";
		if (d < 0)
			return tpf_match_reason(m, "x '%s' has no static head size to check the split "
			                        "point %" PRId64 " against",
			                        x->name, h);
		if (2 * h != d)
			return tpf_match_reason(m, "the split point %" PRId64 " is not half the head size "
			                        "%" PRId64,
			                        h, d);
	}
	if (ph.end != INT64_MIN && d >= 0 ? ph.end < d : (ph.end == INT64_MIN || ph.end < INT32_MAX))
		return "the first half of rotate_half does not run to the end of the head";
	return NULL;
}

/* Slice(x, start::2) along the last axis, to the end of the head. */
static int every_other(const struct tpf_node *s, const struct tpf_value *x, int64_t start,
                       int64_t d)
{
	struct slice_par p;
	return !slice_params(s, &p) && p.start == start && p.step == 2 && last_axis(p.axis, x) &&
	       p.end != INT64_MIN && (d >= 0 ? p.end >= d : p.end >= INT32_MAX);
}

/* Reshape(stack [b, h, s, D/2, 2], shape) gives x's shape [b, h, s, D]: a
 * constant shape of x's dims (0 copying one, -1 last), or an output type
 * whose dims are x's. */
static int merges_pairs(struct tpf_graph *g, const struct tpf_node *rs, const struct tpf_value *x)
{
	const struct tpf_type *xt = &x->type, *yt = &rs->outputs[0]->type;
	int64_t sh[5];
	size_t n = 0;

	if (xt->kind != TPF_TYPE_TENSOR || xt->shape.rank != 4)
		return 0;
	if (!tpf_pattern_const_ints(rs->inputs[1], sh, 5, &n) && n == 4) {
		int zero_copies = !tpf_node_attr_int(rs, "allowzero", 0), same = 1;
		for (size_t i = 0; i < n && same; i++) {
			const struct tpf_dim want = {sh[i], NULL, NULL};
			if ((sh[i] == 0 && zero_copies) || (sh[i] == -1 && i == 3))
				continue;
			same = sh[i] > 0 &&
			       tpf_graph_dims_equal(g, &xt->shape.dims[i], &want) == TPF_ANSWER_YES;
		}
		if (same)
			return 1;
	}
	if (yt->kind != TPF_TYPE_TENSOR || yt->shape.rank != 4)
		return 0;
	for (int i = 0; i < 4; i++)
		if (tpf_graph_dims_equal(g, &xt->shape.dims[i], &yt->shape.dims[i]) != TPF_ANSWER_YES)
			return 0;
	return 1;
}

/* rot = Reshape(Concat(Unsqueeze(Neg(x[..., 1::2]), -1), Unsqueeze(x[..., ::2], -1)),
 * x's shape): the pairs (x[2i], x[2i+1]) become (-x[2i+1], x[2i]) */
static const char *check_pairs(struct tpf_match *m, struct tpf_value *x, int64_t d)
{
	struct tpf_node *odd = tpf_match_node(m, "odd"), *even = tpf_match_node(m, "even");
	struct tpf_node *stack = tpf_match_node(m, "stack"), *flat = tpf_match_node(m, "flat");
	struct tpf_node *un = tpf_match_node(m, "u_neg"), *ue = tpf_match_node(m, "u_even");
	int64_t ca = tpf_node_attr_int(stack, "axis", 0), an, ae;

	if (!odd || !even || !stack || !flat || !un || !ue)
		return "incomplete match";
	int r = tpf_pattern_rank(x);
	if (r != 4)
		return tpf_match_reason(m, "x '%s' has rank %d; RotaryEmbedding takes [batch, heads, "
		                        "seq, head]", x->name, r);
	if (stack->n_inputs != 2 || unsqueeze_axis(un, &an) || unsqueeze_axis(ue, &ae) ||
	    (ca != -1 && ca != 4) || (an != -1 && an != 4) || (ae != -1 && ae != 4))
		return "the pairs are not stacked along a new last axis";
	if (!every_other(odd, x, 1, d) || !every_other(even, x, 0, d))
		return "the interleaved Slices are not x[..., 1::2] (negated) and x[..., ::2]";
	if (d >= 0 && d % 2)
		return tpf_match_reason(m, "head size %" PRId64 " is odd", d);
	if (flat->n_inputs != 2 || !merges_pairs(m->root->graph, flat, x))
		return "the stacked pairs are not reshaped back to x's shape";
	return NULL;
}

/* The caches: Cos/Sin of one angle tensor f whose halves (pairs) are
 * equal, a gathered constant table or constants of equal halves (pairs). */
static const char *check_caches(struct tpf_match *m, struct rope_facts *f, struct tpf_value *cos,
                                struct tpf_value *sin, int64_t d)
{
	int il = f->interleaved;
	struct tpf_value *wc = il ? repeated_first_half(cos, d) : NULL;
	struct tpf_value *ws = wc ? repeated_first_half(sin, d) : NULL;
	if (ws) {
		/* the first half of a rotate-half cache, each element twice: that
		 * cache's half is the interleaved one */
		f->interleaved = 0;
		const char *why = check_caches(m, f, wc, ws, d);
		f->interleaved = 1;
		return why;
	}
	int uc, us;
	int64_t cc, sc;
	struct tpf_value *cs = cache_source(cos, &uc, &cc), *ss = cache_source(sin, &us, &sc);
	if (!cs || !ss || uc != us || cc != sc)
		return "cos and sin are not broadcast the same way (Unsqueeze at axis 1 of [b, seq, D])";
	struct tpf_value *fc = il ? trig_of_pairs(cs, TPF_OP_COS) : trig_of_twice(cs, TPF_OP_COS);
	struct tpf_value *fs = il ? trig_of_pairs(ss, TPF_OP_SIN) : trig_of_twice(ss, TPF_OP_SIN);
	if (fc || fs) {
		if (fc != fs)
			return il ? "cos and sin are not Cos and Sin of one repeat_interleave(f, 2)"
			          : "cos and sin are not Cos and Sin of one Concat(f, f)";
		if (!uc)
			return "the Cos/Sin caches are not unsqueezed at the heads axis";
		if (tpf_pattern_rank(fc) >= 0 && tpf_pattern_rank(fc) != 3)
			return tpf_match_reason(m, "the angles '%s' have rank %d; expected [b, seq, D/2]",
			                        fc->name, tpf_pattern_rank(fc));
		f->f = fc;
		f->cast_to = cc;
	} else if (cs->producer && cs->producer->op == TPF_OP_GATHER) {
		/* Gather(table [P, D], position_ids [b, seq]) of constant tables */
		struct tpf_node *gc = cs->producer, *gs = ss->producer;
		if (!gs || gs->op != TPF_OP_GATHER || gc->inputs[1] != gs->inputs[1])
			return "cos and sin are not gathered at the same positions";
		if (tpf_node_attr_int(gc, "axis", 0) != 0 || tpf_node_attr_int(gs, "axis", 0) != 0)
			return "the caches are gathered along another axis than the positions";
		if (!uc || cc)
			return "gathered caches must be unsqueezed at the heads axis, without a Cast";
		if (d < 0)
			return "gathered caches need a static head size";
		struct tpf_value *pos = gc->inputs[1];
		if (tpf_pattern_dtype(pos) != TPF_DTYPE_INT64 ||
		    (tpf_pattern_rank(pos) >= 0 && tpf_pattern_rank(pos) != 2))
			return "the position ids are not int64 [batch, seq]";
		const char *why = const_halves_equal(gc->inputs[0], d / 2, il);
		if (!why)
			why = const_halves_equal(gs->inputs[0], d / 2, il);
		if (why)
			return tpf_match_reason(m, "the gathered cos/sin table %s", why);
		const struct tpf_tensor *tc = tpf_value_constant(gc->inputs[0]),
		                        *ts = tpf_value_constant(gs->inputs[0]);
		if (tc->rank != 2 || ts->rank != 2 || tc->dtype != ts->dtype ||
		    tc->dims[0] != ts->dims[0])
			return "the gathered cos/sin tables are not both [max_position, D]";
		f->cos_c = gc->inputs[0];
		f->sin_c = gs->inputs[0];
		f->pos = pos;
	} else {
		if (cc)
			return "constant caches behind a Cast";
		if (d < 0)
			return "constant caches need a static head size";
		const char *why = const_halves_equal(cs, d / 2, il);
		if (!why)
			why = const_halves_equal(ss, d / 2, il);
		if (why)
			return tpf_match_reason(m, "the cos/sin cache %s", why);
		const struct tpf_tensor *tc = tpf_value_constant(cs), *ts = tpf_value_constant(ss);
		int rk = tc->rank + (uc ? 1 : 0);
		if (tc->rank != ts->rank || tc->dtype != ts->dtype ||
		    memcmp(tc->dims, ts->dims, (size_t)tc->rank * sizeof(int64_t)))
			return "the cos and sin constants differ in shape or dtype";
		/* [.., seq, D] broadcast as [b, 1, seq, D] */
		int64_t one_ax = uc ? 1 : (tc->rank >= 3 ? tc->dims[tc->rank - 3] : 1);
		if (rk > 4 || one_ax != 1 || (rk == 4 && !uc && tc->dims[1] != 1))
			return "the constant caches do not broadcast as [b, 1, seq, D]";
		f->cos_c = cs;
		f->sin_c = ss;
	}
	return NULL;
}

static const char *check_core(struct tpf_match *m, struct rope_facts *f)
{
	struct tpf_value *x = tpf_match_value(m, "x"), *cos = tpf_match_value(m, "cos"),
	                 *sin = tpf_match_value(m, "sin");
	const char *why;
	int64_t d = -1;

	if (!x || !cos || !sin)
		return "incomplete match";
	tpf_pattern_last_dim(x, &d);
	f->interleaved = tpf_match_node(m, "stack") != NULL;
	why = f->interleaved ? check_pairs(m, x, d) : check_rotate_half(m, x, d);
	if (why || (why = check_caches(m, f, cos, sin, d)))
		return why;
	enum tpf_dtype tx = tpf_pattern_dtype(x), tcos = tpf_pattern_dtype(cos),
	               tsin = tpf_pattern_dtype(sin), ty = tpf_pattern_dtype(m->root->outputs[0]);
	if (tx == TPF_DTYPE_UNDEFINED || tcos == TPF_DTYPE_UNDEFINED)
		return "the dtype of x or cos is unknown";
	if (tx != tcos || tx != tsin || (ty != TPF_DTYPE_UNDEFINED && ty != tx))
		return tpf_match_reason(m, "mixed dtypes: x %s, cos %s, sin %s", tpf_dtype_name(tx),
		                        tpf_dtype_name(tcos), tpf_dtype_name(tsin));
	if (tx != TPF_DTYPE_FLOAT && tx != TPF_DTYPE_FLOAT16 && tx != TPF_DTYPE_BFLOAT16)
		return tpf_match_reason(m, "dtype %s: RotaryEmbedding takes float, float16 or bfloat16",
		                        tpf_dtype_name(tx));
	f->x = x;
	return NULL;
}

static const char *check_full(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_core(m, (struct rope_facts *)m->facts);
}

/* Concat(rope(Slice(X, :r)), Slice(X, r:)) */
static const char *check_partial(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct rope_facts *f = (struct rope_facts *)m->facts;
	struct tpf_value *x = tpf_match_value(m, "x"), *pass = tpf_match_value(m, "pass");
	struct slice_par a, b;
	const char *why;

	if (!x || !pass || !x->producer || !pass->producer)
		return "the rotated and passed parts are not Slices of one input";
	struct tpf_node *sa = x->producer, *sb = pass->producer;
	if (sa->op != TPF_OP_SLICE || sb->op != TPF_OP_SLICE || sa->inputs[0] != sb->inputs[0])
		return "the rotated and passed parts are not Slices of one input";
	struct tpf_value *X = sa->inputs[0];
	if (!last_axis(tpf_node_attr_int(m->root, "axis", 0), X))
		return "the partial-rotary Concat is not along the last axis";
	if (slice_params(sa, &a) || slice_params(sb, &b) || a.start != 0 || a.end == INT64_MIN ||
	    b.start != a.end || !last_axis(a.axis, X) || !last_axis(b.axis, X) || a.step != 1 ||
	    b.step != 1)
		return "the partial-rotary Slices are not X[..., :r] and X[..., r:] with constant r";
	int64_t d = -1;
	tpf_pattern_last_dim(X, &d);
	if (b.end == INT64_MIN || (d >= 0 ? b.end < d : b.end < INT32_MAX))
		return "the passed part does not run to the end of the head";
	if ((why = check_core(m, f)))
		return why;
	if (d >= 0 && (a.end <= 0 || a.end > d || a.end % 2))
		return tpf_match_reason(m, "rotary dim %" PRId64 " of head %" PRId64, a.end, d);
	if (d < 0)
		return "partial rotary needs a static head size";
	f->x = X;
	f->rot = a.end == d ? 0 : a.end;
	f->x_slice = sa;
	f->pass_slice = sb;
	return NULL;
}

/* DeepSeek-V3's apply_rotary_pos_emb_interleave: the pairs of x turn and
 * the result is laid out in halves,
 *   Concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin), x1, x2 = x[..., 0::2], x[..., 1::2],
 * which is the rotate-half rotation of Concat(x1, x2); cos and sin are
 * Unsqueeze(c, 1) of the half caches c [b, seq, D/2] themselves. */
static const char *check_split(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct rope_facts *f = (struct rope_facts *)m->facts;
	struct tpf_value *x1 = tpf_match_value(m, "x1"), *x2 = tpf_match_value(m, "x2");
	struct tpf_value *cos = tpf_match_value(m, "cos"), *sin = tpf_match_value(m, "sin");
	struct tpf_value *half[2] = {NULL, NULL};
	int64_t d = -1, ax;

	if (!x1 || !x2 || !cos || !sin || !x1->producer || !x2->producer ||
	    x1->producer->op != TPF_OP_SLICE || x2->producer->op != TPF_OP_SLICE ||
	    x1->producer->inputs[0] != x2->producer->inputs[0])
		return "the two parts are not Slices of one input";
	struct tpf_value *x = x1->producer->inputs[0];
	if (tpf_pattern_rank(x) != 4)
		return tpf_match_reason(m, "x '%s' has rank %d; RotaryEmbedding takes [batch, heads, "
		                        "seq, head]", x->name, tpf_pattern_rank(x));
	tpf_pattern_last_dim(x, &d);
	if (!last_axis(tpf_node_attr_int(m->root, "axis", 0), x))
		return "the halves are not concatenated along the last axis";
	if (!every_other(x1->producer, x, 0, d) || !every_other(x2->producer, x, 1, d))
		return "the parts are not x[..., 0::2] and x[..., 1::2]";
	for (int i = 0; i < 2; i++) {
		struct tpf_node *u = (i ? sin : cos)->producer;
		if (!u || u->op != TPF_OP_UNSQUEEZE || unsqueeze_axis(u, &ax) || ax != 1 ||
		    tpf_pattern_rank(u->inputs[0]) != 3)
			return "cos and sin are not Unsqueeze(c, 1) of caches [b, seq, D/2]";
		half[i] = u->inputs[0];
		int64_t hd = -1;
		if (tpf_pattern_last_dim(half[i], &hd) && d >= 0 && 2 * hd != d)
			return tpf_match_reason(m, "the caches' last dim %" PRId64 " is not half the head "
			                        "size %" PRId64, hd, d);
	}
	enum tpf_dtype tx = tpf_pattern_dtype(x), tc = tpf_pattern_dtype(half[0]),
	               ts = tpf_pattern_dtype(half[1]);
	if (tx == TPF_DTYPE_UNDEFINED || tx != tc || tx != ts)
		return tpf_match_reason(m, "mixed or unknown dtypes: x %s, cos %s, sin %s",
		                        tpf_dtype_name(tx), tpf_dtype_name(tc), tpf_dtype_name(ts));
	if (tx != TPF_DTYPE_FLOAT && tx != TPF_DTYPE_FLOAT16 && tx != TPF_DTYPE_BFLOAT16)
		return tpf_match_reason(m, "dtype %s: RotaryEmbedding takes float, float16 or bfloat16",
		                        tpf_dtype_name(tx));
	f->x = x;
	f->cos_c = half[0];
	f->sin_c = half[1];
	return NULL;
}

/* ------------------------------------------------------------ rewrite */

static struct tpf_node *find_user(const struct tpf_value *v, enum tpf_op op, int index)
{
	for (size_t u = 0; u < v->n_uses; u++) {
		struct tpf_node *n = v->uses[u].node;
		if (n && !n->erased && n->op == op && v->uses[u].index == index &&
		    n->origin_pass && !strcmp(n->origin_pass, PASS_NAME))
			return n;
	}
	return NULL;
}

/* Cos(f) or Sin(f), made once. */
static struct tpf_value *trig_half(struct tpf_rewriter *rw, struct tpf_value *f, enum tpf_op op)
{
	struct tpf_node *n = find_user(f, op, 0);
	if (n)
		return n->outputs[0];
	n = tpf_rewriter_create(rw, op, &f, 1, 1, NULL);
	if (!n || tpf_value_copy_type(n->outputs[0], &f->type))
		return NULL;
	return n->outputs[0];
}

/* Gives a created node the name "<name>_<suffix>": the rewriter names
 * every node it creates at one root "<root>/<Op>", and the cos and sin
 * chains make two of each. */
static int suffix_name(struct tpf_rewriter *rw, struct tpf_node *n, const char *suffix)
{
	char buf[256];

	snprintf(buf, sizeof(buf), "%s_%s", n->name ? n->name : "", suffix);
	const char *nm = tpf_arena_strdup(rw->graph->arena, buf);
	if (!nm)
		return -1;
	n->name = nm;
	return 0;
}

/* Cast(v, to), made once. */
static struct tpf_value *cast_of(struct tpf_rewriter *rw, struct tpf_value *v, int64_t to)
{
	struct tpf_node *n;
	for (size_t u = 0; u < v->n_uses; u++) {
		n = v->uses[u].node;
		if (n && !n->erased && n->op == TPF_OP_CAST && n->origin_pass &&
		    !strcmp(n->origin_pass, PASS_NAME) && tpf_node_attr_int(n, "to", 0) == to)
			return n->outputs[0];
	}
	n = tpf_rewriter_create(rw, TPF_OP_CAST, &v, 1, 1, NULL);
	if (!n || tpf_node_set_attr_int(n, "to", to) || tpf_value_copy_type(n->outputs[0], &v->type) ||
	    suffix_name(rw, n, v->producer && v->producer->op == TPF_OP_SIN ? "sin" : "cos"))
		return NULL;
	n->outputs[0]->type.dtype = (enum tpf_dtype)to;
	return n->outputs[0];
}

/* The first half (il: the first of each pair) of a constant cache as a
 * [b, seq, D/2] initializer (a position table: [P, D/2]). */
static struct tpf_value *const_half(struct tpf_rewriter *rw, struct tpf_value *c, int table, int il)
{
	const struct tpf_tensor *t = tpf_value_constant(c);
	int64_t d = t->dims[t->rank - 1], half = d / 2;
	int64_t rows = tpf_tensor_numel(t) / d;
	size_t esz = tpf_dtype_bits(t->dtype) / 8;
	int64_t seq = t->rank >= 2 ? t->dims[t->rank - 2] : 1;
	int64_t dims[3] = {seq ? rows / seq : 0, seq, half};
	unsigned char *buf = tpf_malloc((size_t)(rows * half) * esz + 1);
	if (!buf)
		return NULL;
	const unsigned char *src = t->data;
	for (int64_t r = 0; r < rows; r++)
		for (int64_t i = 0; i < (il ? half : 1); i++)
			memcpy(buf + (size_t)(r * half + i) * esz,
			       src + (size_t)(r * d + (il ? 2 * i : 0)) * esz, (il ? 1 : (size_t)half) * esz);
	char base[160];
	snprintf(base, sizeof(base), "%s.half", c->name);
	const char *nm = tpf_graph_unique_name(rw->graph, base);
	int64_t tdims[2] = {rows, half};
	struct tpf_value *v = nm ? tpf_graph_add_initializer(rw->graph, nm, t->dtype, table ? 2 : 3,
	                                                     table ? tdims : dims, buf,
	                                                     (size_t)(rows * half) * esz)
	                         : NULL;
	tpf_free(buf);
	return v;
}

/* [batch, 1, ..] (n_ones 1s) of v: Concat(Shape(v){start 0, end 1}, [1, ..]),
 * made once for v and n_ones. */
static struct tpf_value *batch_shape(struct tpf_rewriter *rw, struct tpf_value *v, int64_t n_ones)
{
	for (size_t u = 0; u < v->n_uses; u++) {
		struct tpf_node *sh = v->uses[u].node;
		if (!sh || sh->erased || sh->op != TPF_OP_SHAPE || !sh->origin_pass ||
		    strcmp(sh->origin_pass, PASS_NAME))
			continue;
		struct tpf_value *o = sh->outputs[0];
		for (size_t k = 0; k < o->n_uses; k++) {
			struct tpf_node *cat = o->uses[k].node;
			const struct tpf_tensor *ones;
			if (cat && !cat->erased && cat->op == TPF_OP_CONCAT && o->uses[k].index == 0 &&
			    cat->n_inputs == 2 && (ones = tpf_value_constant(cat->inputs[1])) &&
			    ones->rank == 1 && ones->dims[0] == n_ones)
				return cat->outputs[0];
		}
	}
	struct tpf_node *sh = tpf_rewriter_create(rw, TPF_OP_SHAPE, &v, 1, 1, NULL);
	if (!sh || tpf_node_set_attr_int(sh, "start", 0) || tpf_node_set_attr_int(sh, "end", 1))
		return NULL;
	int64_t n1 = 1, ones[2] = {1, 1}, n3 = n_ones + 1;
	tpf_value_set_type(sh->outputs[0], TPF_DTYPE_INT64, 1, &n1);
	const char *nm = tpf_graph_unique_name(rw->graph, "rotary_cache_ones");
	struct tpf_value *c11 = nm ? tpf_graph_add_initializer(rw->graph, nm, TPF_DTYPE_INT64, 1, &n_ones,
	                                                       ones, (size_t)n_ones * sizeof(int64_t))
	                           : NULL;
	if (!c11)
		return NULL;
	struct tpf_value *cat_in[2] = {sh->outputs[0], c11};
	struct tpf_node *cat = tpf_rewriter_create(rw, TPF_OP_CONCAT, cat_in, 2, 1, NULL);
	if (!cat || tpf_node_set_attr_int(cat, "axis", 0))
		return NULL;
	tpf_value_set_type(cat->outputs[0], TPF_DTYPE_INT64, 1, &n3);
	return cat->outputs[0];
}

/* cache [1, seq, D/2] (crank 3; position ids [1, seq]: crank 2) expanded to x's batch when that is not provably 1
 * (reusing an expansion of the same cache for a batch dim equal to x's). */
static struct tpf_value *batch_expand(struct tpf_rewriter *rw, struct tpf_value *cache,
                                      struct tpf_value *x, const char *which, int crank)
{
	const struct tpf_type *ct = &cache->type, *xt = &x->type;
	const struct tpf_dim one = {1, NULL, NULL};
	if (ct->kind == TPF_TYPE_TENSOR && ct->shape.rank == crank && xt->kind == TPF_TYPE_TENSOR &&
	    xt->shape.rank >= 1) {
		if (tpf_graph_dims_equal(rw->graph, &ct->shape.dims[0], &xt->shape.dims[0]) ==
		    TPF_ANSWER_YES)
			return cache;
	}
	if (xt->kind == TPF_TYPE_TENSOR && xt->shape.rank >= 1 &&
	    tpf_graph_dims_equal(rw->graph, &xt->shape.dims[0], &one) == TPF_ANSWER_YES)
		return cache;
	/* The batch comes from a graph input of x's batch when there is one
	 * (every site of the graph can share that expansion), else from x. */
	struct tpf_value *bsrc = x;
	for (size_t i = 0; i < rw->graph->n_inputs && xt->kind == TPF_TYPE_TENSOR &&
	                   xt->shape.rank >= 1; i++) {
		struct tpf_value *in = rw->graph->inputs[i];
		if (in->type.kind == TPF_TYPE_TENSOR && in->type.shape.rank >= 1 &&
		    tpf_graph_dims_equal(rw->graph, &in->type.shape.dims[0], &xt->shape.dims[0]) ==
		        TPF_ANSWER_YES) {
			bsrc = in;
			break;
		}
	}
	/* an expansion of this cache made from the same batch source */
	for (size_t u = 0; u < cache->n_uses; u++) {
		struct tpf_node *e = cache->uses[u].node;
		if (!e || e->erased || e->op != TPF_OP_EXPAND || cache->uses[u].index != 0 ||
		    !e->origin_pass || strcmp(e->origin_pass, PASS_NAME))
			continue;
		struct tpf_node *cat = e->inputs[1]->producer;
		struct tpf_node *sh = cat && cat->n_inputs ? cat->inputs[0]->producer : NULL;
		if (sh && sh->op == TPF_OP_SHAPE && sh->inputs[0] == bsrc)
			return e->outputs[0];
	}
	struct tpf_value *shp = batch_shape(rw, bsrc, crank - 1);
	if (!shp)
		return NULL;
	struct tpf_value *e_in[2] = {cache, shp};
	struct tpf_node *e = tpf_rewriter_create(rw, TPF_OP_EXPAND, e_in, 2, 1, NULL);
	if (!e || suffix_name(rw, e, which))
		return NULL;
	if (ct->kind == TPF_TYPE_TENSOR && ct->shape.rank == crank && xt->kind == TPF_TYPE_TENSOR &&
	    xt->shape.rank >= 1) {
		if (tpf_value_copy_type(e->outputs[0], ct))
			return NULL;
		e->outputs[0]->type.shape.dims[0] = xt->shape.dims[0];
	}
	return e->outputs[0];
}

static enum tpf_status erase_chain(struct tpf_rewriter *rw, struct tpf_value *v, int depth)
{
	struct tpf_node *n = v ? v->producer : NULL;
	enum tpf_status st;
	if (!n || n->erased || depth > 4 || tpf_value_use_count(v))
		return TPF_OK;
	struct tpf_value *ins[4] = {0};
	size_t k = n->n_inputs < 4 ? n->n_inputs : 4;
	for (size_t i = 0; i < k; i++)
		ins[i] = n->inputs[i];
	if ((st = tpf_rewriter_erase_if_dead(rw, n)))
		return st;
	for (size_t i = 0; i < k; i++)
		if (ins[i] && ins[i]->producer && (st = erase_chain(rw, ins[i], depth + 1)))
			return st;
	return TPF_OK;
}

static enum tpf_status rewrite_rope(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct rope_facts *f = (struct rope_facts *)m->facts;
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_value *cos = tpf_match_value(m, "cos"), *sin = tpf_match_value(m, "sin");
	struct tpf_node *flat = tpf_match_node(m, "flat"), *stack = tpf_match_node(m, "stack");
	/* the pairs form: TorchScript's flatten reads the stack's shape */
	struct tpf_value *flat_shape = flat ? flat->inputs[1] : NULL;
	struct tpf_value *stacked = stack ? stack->outputs[0] : NULL;
	struct tpf_value *ch, *sh;
	enum tpf_status st;

	if (f->f) {
		ch = trig_half(rw, f->f, TPF_OP_COS);
		sh = ch ? trig_half(rw, f->f, TPF_OP_SIN) : NULL;
		if (f->cast_to && ch && sh) {
			ch = cast_of(rw, ch, f->cast_to);
			sh = ch ? cast_of(rw, sh, f->cast_to) : NULL;
		}
	} else {
		ch = const_half(rw, f->cos_c, f->pos != NULL, f->interleaved);
		sh = ch ? const_half(rw, f->sin_c, f->pos != NULL, f->interleaved) : NULL;
	}
	if (!ch || !sh)
		return TPF_ERR_NOMEM;
	struct tpf_value *pos = NULL;
	if (f->pos) {
		pos = batch_expand(rw, f->pos, f->x, "positions", 2);
	} else {
		ch = batch_expand(rw, ch, f->x, "cos", 3);
		sh = ch ? batch_expand(rw, sh, f->x, "sin", 3) : NULL;
	}
	if (!ch || !sh || (f->pos && !pos))
		return TPF_ERR_NOMEM;
	struct tpf_value *in[4] = {f->x, ch, sh, pos};
	struct tpf_node *n =
	    tpf_rewriter_create(rw, TPF_OP_ROTARY_EMBEDDING, in, pos ? 4 : 3, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if (f->rot && (st = tpf_node_set_attr_int(n, "rotary_embedding_dim", f->rot)))
		return st;
	if (f->interleaved && (st = tpf_node_set_attr_int(n, "interleaved", 1)))
		return st;
	if ((st = tpf_value_copy_type(n->outputs[0],
	                              out->type.kind != TPF_TYPE_NONE ? &out->type : &f->x->type)))
		return st;
	if ((st = tpf_rewriter_replace(rw, out, n->outputs[0])))
		return st;
	if ((st = tpf_rewriter_erase_dead(rw, m)))
		return st;
	if (f->x_slice && (st = tpf_rewriter_erase_if_dead(rw, f->x_slice)))
		return st;
	if (f->pass_slice && (st = tpf_rewriter_erase_if_dead(rw, f->pass_slice)))
		return st;
	if (flat_shape && ((st = erase_chain(rw, flat_shape, 0)) || (st = erase_chain(rw, stacked, 0))))
		return st;
	static const char *const pairs[] = {"u_neg", "u_even", "neg", "odd", "even"};
	for (size_t i = 0; flat_shape && i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		struct tpf_node *n = tpf_match_node(m, pairs[i]);
		if (n && !n->erased && (st = tpf_rewriter_erase_if_dead(rw, n)))
			return st;
	}
	/* the full-width caches once no site reads them */
	if ((st = erase_chain(rw, cos, 0)))
		return st;
	return erase_chain(rw, sin, 0);
}

/* RotaryEmbedding(Concat(x1, x2), c, s): the rotate-half rotation of the
 * de-interleaved x. */
static enum tpf_status rewrite_split(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct rope_facts *f = (struct rope_facts *)m->facts;
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_value *cos = tpf_match_value(m, "cos"), *sin = tpf_match_value(m, "sin");
	struct tpf_value *parts[2] = {tpf_match_value(m, "x1"), tpf_match_value(m, "x2")};
	enum tpf_status st;

	struct tpf_node *cat = tpf_rewriter_create(rw, TPF_OP_CONCAT, parts, 2, 1, NULL);
	if (!cat || tpf_node_set_attr_int(cat, "axis", -1) ||
	    tpf_value_copy_type(cat->outputs[0], &f->x->type) || suffix_name(rw, cat, "halves"))
		return TPF_ERR_NOMEM;
	struct tpf_value *ch = batch_expand(rw, f->cos_c, f->x, "cos", 3);
	struct tpf_value *sh = ch ? batch_expand(rw, f->sin_c, f->x, "sin", 3) : NULL;
	struct tpf_value *in[3] = {cat->outputs[0], ch, sh};
	struct tpf_node *n = sh ? tpf_rewriter_create(rw, TPF_OP_ROTARY_EMBEDDING, in, 3, 1, NULL)
	                        : NULL;
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_value_copy_type(n->outputs[0],
	                              out->type.kind != TPF_TYPE_NONE ? &out->type : &f->x->type)) ||
	    (st = tpf_rewriter_replace(rw, out, n->outputs[0])) ||
	    (st = tpf_rewriter_erase_dead(rw, m)) || (st = erase_chain(rw, cos, 0)))
		return st;
	return erase_chain(rw, sin, 0);
}

/* ------------------------------------------------------------ patterns */

#define ROPE_CORE                                                                                  \
	TPF_PAT_OP(                                                                                \
	    ADD, "add", TPF_PNODE_COMMUTE, NULL,                                                   \
	    TPF_PAT_OP(MUL, "mul_cos", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x"),                  \
	               TPF_PAT_ANY("cos")),                                                        \
	    TPF_PAT_OP(MUL, "mul_sin", TPF_PNODE_COMMUTE, NULL,                                    \
	               TPF_PAT_OP(CONCAT, "rot", 0, NULL,                                          \
	                          TPF_PAT_OP(NEG, "neg", 0, NULL,                                  \
	                                     TPF_PAT_OP(SLICE, "hi", TPF_PNODE_EXTRA_INPUTS, NULL, \
	                                                TPF_PAT_ANY("x"))),                        \
	                          TPF_PAT_OP(SLICE, "lo", TPF_PNODE_EXTRA_INPUTS, NULL,            \
	                                     TPF_PAT_ANY("x"))),                                   \
	               TPF_PAT_ANY("sin")))

/* x * cos + Reshape(stack([-x[..., 1::2], x[..., ::2]], -1), shape) * sin */
#define ROPE_PAIRS                                                                                 \
	TPF_PAT_OP(                                                                                \
	    ADD, "add", TPF_PNODE_COMMUTE, NULL,                                                   \
	    TPF_PAT_OP(MUL, "mul_cos", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x"),                  \
	               TPF_PAT_ANY("cos")),                                                        \
	    TPF_PAT_OP(                                                                            \
	        MUL, "mul_sin", TPF_PNODE_COMMUTE, NULL,                                           \
	        TPF_PAT_OP(                                                                        \
	            RESHAPE, "flat", TPF_PNODE_EXTRA_INPUTS, NULL,                                 \
	            TPF_PAT_OP(CONCAT, "stack", TPF_PNODE_MULTI_USE, NULL,                         \
	                       TPF_PAT_OP(UNSQUEEZE, "u_neg", TPF_PNODE_EXTRA_INPUTS, NULL,        \
	                                  TPF_PAT_OP(NEG, "neg", 0, NULL,                          \
	                                             TPF_PAT_OP(SLICE, "odd",                      \
	                                                        TPF_PNODE_EXTRA_INPUTS, NULL,      \
	                                                        TPF_PAT_ANY("x")))),               \
	                       TPF_PAT_OP(UNSQUEEZE, "u_even", TPF_PNODE_EXTRA_INPUTS, NULL,       \
	                                  TPF_PAT_OP(SLICE, "even", TPF_PNODE_EXTRA_INPUTS, NULL,  \
	                                             TPF_PAT_ANY("x"))))),                         \
	        TPF_PAT_ANY("sin")))

static const struct tpf_pattern pat_pairs_partial = {
    .name = "interleaved-partial",
    .root = TPF_PAT_OP(CONCAT, "out", 0, NULL, ROPE_PAIRS, TPF_PAT_ANY("pass")),
    .check = check_partial,
    .rewrite = rewrite_rope,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern pat_pairs = {
    .name = "interleaved",
    .root = ROPE_PAIRS,
    .check = check_full,
    .rewrite = rewrite_rope,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern pat_partial = {
    .name = "rotate-half-partial",
    .root = TPF_PAT_OP(CONCAT, "out", 0, NULL, ROPE_CORE, TPF_PAT_ANY("pass")),
    .check = check_partial,
    .rewrite = rewrite_rope,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern pat_full = {
    .name = "rotate-half",
    .root = ROPE_CORE,
    .check = check_full,
    .rewrite = rewrite_rope,
    .explain_min_nodes = 4,
};

/* Concat(x1 * cos - x2 * sin, x2 * cos + x1 * sin) */
static const struct tpf_pattern pat_split = {
    .name = "interleaved-to-halves",
    .root = TPF_PAT_OP(
        CONCAT, "out", 0, NULL,
        TPF_PAT_OP(SUB, "real", 0, NULL,
                   TPF_PAT_OP(MUL, "x1_cos", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x1"),
                              TPF_PAT_ANY("cos")),
                   TPF_PAT_OP(MUL, "x2_sin", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x2"),
                              TPF_PAT_ANY("sin"))),
        TPF_PAT_OP(ADD, "imag", TPF_PNODE_COMMUTE, NULL,
                   TPF_PAT_OP(MUL, "x2_cos", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x2"),
                              TPF_PAT_ANY("cos")),
                   TPF_PAT_OP(MUL, "x1_sin", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x1"),
                              TPF_PAT_ANY("sin")))),
    .check = check_split,
    .rewrite = rewrite_split,
    .explain_min_nodes = 5,
};

static const struct tpf_pattern *const patterns[] = {&pat_partial, &pat_full, &pat_pairs_partial,
                                                     &pat_pairs, &pat_split, NULL};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	*changed = 0;
	/* every form negates half of x: without a Neg there is nothing to do
	 * (and no reason to verify the model at opset 23) */
	int has_neg = m->graph->n_children > 0 || m->n_functions > 0;
	for (struct tpf_node *n = m->graph->first; n && !has_neg; n = n->next)
		has_neg = n->op == TPF_OP_NEG || n->op == TPF_OP_SUB;
	if (!has_neg)
		return TPF_OK;
	return tpf_pattern_run_opset23(m, &tpf_pass_fuse_rotary_embedding, "RotaryEmbedding", ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_rotary_embedding = {
    .name = PASS_NAME,
    .summary = "rotary embeddings (rotate-half or interleaved, full or partial) into ONNX RotaryEmbedding",
    .run = run,
    .patterns = patterns,
};
