/* SPDX-License-Identifier: MIT */
/*
 * canonicalize-rmsnorm: every RMSNorm form becomes one ai.tpfuse.RMSNorm
 * node (docs/ops.md):
 *
 *   RMSNormalization (opset 23)                  -> RMSNorm
 *   SimplifiedLayerNormalization (ONNX, ORT)     -> RMSNorm
 *   com.microsoft.SkipSimplifiedLayerNormalization
 *                                                -> Add(input, skip) [+ bias] -> RMSNorm
 *       (the residual sum output is the Add, so the allreduce fusion sees the
 *        same Add -> RMSNorm shape whichever form the exporter wrote)
 *   the decomposed chain
 *       [Cast(float)] x -> Pow(x,2) | Mul(x,x) -> ReduceMean(last axis, keepdims)
 *       -> Add(eps) -> Sqrt -> Div(x, .) | Mul(x, Reciprocal(.)) | Mul(x, Div(1, .))
 *       -> [Cast] -> Mul(gamma | Cast(gamma) | 1 + gamma) -> [Cast]
 *                                                -> RMSNorm
 *
 * The canonical node takes the value before a widening Cast to float (the
 * compute dtype becomes stash_type = FLOAT) and the weight before a Cast, so
 * that a residual Add in bf16 feeds the norm directly.
 *
 * The same chain over x - ReduceMean(x) is a LayerNorm (+ beta after the
 * gamma Mul: its bias); where an AllReduce feeds it (fuse-allreduce-rmsnorm's
 * input) it becomes ONNX LayerNormalization, elsewhere it stays as written.
 */
#include <math.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "canonicalize-rmsnorm"

/* ------------------------------------------------------------------ helpers */

static enum tpf_status set_norm_attrs(struct tpf_node *n, float eps, int64_t axis, int64_t stash,
				      float offset)
{
	enum tpf_status st = tpf_node_set_attr_float(n, "epsilon", eps);
	if (!st)
		st = tpf_node_set_attr_int(n, "axis", axis);
	if (!st)
		st = tpf_node_set_attr_int(n, "stash_type", stash);
	if (!st)
		st = tpf_node_set_attr_float(n, "weight_offset", offset);
	return st;
}

static int output_used(const struct tpf_node *n, size_t i)
{
	return i < n->n_outputs && n->outputs[i] && tpf_value_use_count(n->outputs[i]) != 0;
}

/* Creates RMSNorm(x, gamma) replacing `out`; erases what died. */
static enum tpf_status emit_norm(struct tpf_rewriter *rw, struct tpf_match *m, struct tpf_value *x,
				 struct tpf_value *gamma, struct tpf_value *out, float eps,
				 int64_t axis, int64_t stash, float offset)
{
	struct tpf_value *in[2] = {x, gamma};
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_TPF_RMS_NORM, in, 2, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	enum tpf_status st = set_norm_attrs(n, eps, axis, stash, offset);
	if (st)
		return st;
	st = tpf_rewriter_replace(rw, out, n->outputs[0]);
	if (st)
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

/* ------------------------------------------------- RMSNormalization (opset 23) */

/* The canonical norm's gamma must broadcast into x's normalized dims
 * (x.shape[axis:], axis the one the canonical norm will take); a gamma that widens the output (x [8,8,1] with gamma [8])
 * is left to the original op, which states its own result. */
static const char *check_gamma_covers(struct tpf_match *m, size_t gamma_index, int64_t axis)
{
	const struct tpf_node *r = m->root;
	const struct tpf_value *x = r->inputs[0];
	const struct tpf_value *g = r->n_inputs > gamma_index ? r->inputs[gamma_index] : NULL;
	if (!x || !g)
		return "the input or gamma is missing";
	int xr = tpf_pattern_rank(x), gr = tpf_pattern_rank(g);
	if (xr < 0)
		return NULL; /* unknown rank: the op's own rule decides at run time */
	/* (a scalar input too: the canonical norm needs an axis to normalize) */
	const int64_t given = axis;
	if (axis < 0)
		axis += xr;
	if (axis < 0 || axis >= xr)
		return tpf_match_reason(m, "axis %lld is outside the input's rank %d", (long long)given, xr);
	if (gr < 0)
		return NULL; /* gamma's rank unknown: its own rule decides at run time */
	int nr = xr - (int)axis;
	if (gr > nr)
		return tpf_match_reason(m, "gamma '%s' has rank %d, more than the %d normalized dims",
					g->name, gr, nr);
	for (int i = 0; i < gr; i++) {
		const struct tpf_dim *gd = &g->type.shape.dims[gr - 1 - i];
		const struct tpf_dim *xd = &x->type.shape.dims[xr - 1 - i];
		if (gd->param || xd->param || gd->value < 0 || xd->value < 0)
			continue;
		if (gd->value != 1 && gd->value != xd->value)
			return tpf_match_reason(m, "gamma '%s' dim %d is %lld, which does not broadcast "
						   "to the input's %lld",
						g->name, gr - 1 - i, (long long)gd->value,
						(long long)xd->value);
	}
	return NULL;
}

static const char *check_rms_normalization(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_gamma_covers(m, 1, tpf_node_attr_int(m->root, "axis", -1));
}

static enum tpf_status rewrite_rms_normalization(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *r = m->root;
	return emit_norm(rw, m, r->inputs[0], r->inputs[1], r->outputs[0],
			 tpf_node_attr_float(r, "epsilon", 1e-5f), tpf_node_attr_int(r, "axis", -1),
			 tpf_node_attr_int(r, "stash_type", TPF_DTYPE_FLOAT), 0.0f);
}

static const struct tpf_pattern pat_rms_normalization = {
	.name = "rms-normalization",
	.root = TPF_PAT_OP(RMS_NORMALIZATION, "norm", 0, NULL, TPF_PAT_ANY("x"), TPF_PAT_ANY("gamma")),
	.check = check_rms_normalization,
	.rewrite = rewrite_rms_normalization,
};

/* --------------------------------------------- SimplifiedLayerNormalization */

static const char *check_simplified(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	if (output_used(m->root, 1))
		return "the inv_std_var output is used";
	return check_gamma_covers(m, 1, tpf_node_attr_int(m->root, "axis", -1));
}

static const struct tpf_pattern pat_simplified = {
	.name = "simplified-layer-norm",
	.root = TPF_PAT_OP(SIMPLIFIED_LAYER_NORMALIZATION, "norm", 0, NULL, TPF_PAT_ANY("x"),
			   TPF_PAT_ANY("gamma")),
	.check = check_simplified,
	.rewrite = rewrite_rms_normalization,
};

static const struct tpf_pattern pat_ms_simplified = {
	.name = "ms-simplified-layer-norm",
	.root = TPF_PAT_OP(MS_SIMPLIFIED_LAYER_NORMALIZATION, "norm", 0, NULL, TPF_PAT_ANY("x"),
			   TPF_PAT_ANY("gamma")),
	.check = check_simplified,
	.rewrite = rewrite_rms_normalization,
};

/* ------------------------------------------ SkipSimplifiedLayerNormalization */

static const char *check_skip(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	if (output_used(m->root, 1) || output_used(m->root, 2))
		return "the mean or inv_std_var output is used";
	if (tpf_pattern_shapes_differ(m->root->inputs[0], m->root->inputs[1]))
		return "input and skip shapes differ (broadcast skip)";
	/* the op normalizes the last axis (it has no axis attribute; the
	 * rewrite's norm takes -1 whatever the node carries) */
	return check_gamma_covers(m, 2, -1);
}

static enum tpf_status rewrite_skip(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *r = m->root;
	struct tpf_value *sum_out = r->n_outputs > 3 ? r->outputs[3] : NULL;
	struct tpf_value *in[2] = {r->inputs[0], r->inputs[1]};
	enum tpf_status st;

	struct tpf_node *add = tpf_rewriter_create(rw, TPF_OP_ADD, in, 2, 1, NULL);
	if (!add)
		return TPF_ERR_NOMEM;
	struct tpf_value *sum = add->outputs[0];
	if (r->n_inputs > 3 && r->inputs[3]) {
		in[0] = sum;
		in[1] = r->inputs[3];
		struct tpf_node *bias = tpf_rewriter_create(rw, TPF_OP_ADD, in, 2, 1, NULL);
		if (!bias)
			return TPF_ERR_NOMEM;
		sum = bias->outputs[0];
	}
	/* The sums have the input's type. */
	const struct tpf_type *t = sum_out && sum_out->type.kind != TPF_TYPE_NONE
					   ? &sum_out->type
					   : &r->inputs[0]->type;
	if (t->kind != TPF_TYPE_NONE) {
		if ((st = tpf_value_copy_type(add->outputs[0], t)))
			return st;
		if (sum != add->outputs[0] && (st = tpf_value_copy_type(sum, t)))
			return st;
	}
	if (sum_out && (st = tpf_rewriter_replace(rw, sum_out, sum)))
		return st;
	return emit_norm(rw, m, sum, r->inputs[2], r->outputs[0],
			 tpf_node_attr_float(r, "epsilon", 1e-12f), -1, TPF_DTYPE_FLOAT, 0.0f);
}

static const struct tpf_pattern pat_skip_simplified = {
	.name = "skip-simplified-layer-norm",
	.root = TPF_PAT_OP(MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION, "norm", TPF_PNODE_EXTRA_INPUTS, NULL,
			   TPF_PAT_ANY("input"), TPF_PAT_ANY("skip"), TPF_PAT_ANY("gamma")),
	.check = check_skip,
	.rewrite = rewrite_skip,
};

/* ------------------------------------------------------- the decomposed chain */

struct chain_facts {
	double eps;
	struct tpf_value *x_in;   /* the canonical input */
	struct tpf_node *x_cast;  /* the widening Cast looked through, or NULL */
	int64_t stash;
	float offset;
	struct tpf_node *sub, *mu; /* a LayerNorm's x - ReduceMean(x) */
};

/* ReduceMean: keepdims=1, one constant axis (attribute before opset 18,
 * input from 18).  Whether the axis is the last one is checked with the
 * input's rank in check_chain. */
static const char *pred_reduce_mean(const struct tpf_node *n, struct tpf_match *m)
{
	int64_t axes[8];
	size_t count = 0;

	if (tpf_node_attr_int(n, "keepdims", 1) != 1)
		return "keepdims=0 (the chain needs the reduced axis kept)";
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	if (n->n_inputs > 1 && n->inputs[1]) {
		if (tpf_pattern_const_ints(n->inputs[1], axes, 8, &count))
			return "the axes input is not an integer constant";
	} else if (a && a->kind == TPF_ATTR_INTS) {
		count = a->n;
		if (count > 8)
			return "too many axes";
		memcpy(axes, a->ints, count * sizeof(*axes));
	} else {
		return "no axes: it reduces over every axis";
	}
	if (count != 1)
		return tpf_match_reason(m, "reduces over %zu axes, an RMSNorm over one (the last)",
					count);
	return NULL;
}

static int reduce_mean_axis(const struct tpf_node *n, int64_t *axis)
{
	size_t count = 0;
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	if (n->n_inputs > 1 && n->inputs[1])
		return tpf_pattern_const_ints(n->inputs[1], axis, 1, &count) || count != 1 ? -1 : 0;
	if (!a || a->kind != TPF_ATTR_INTS || a->n != 1)
		return -1;
	*axis = a->ints[0];
	return 0;
}

static int is_mean_subtracted(const struct tpf_value *v)
{
	for (int hop = 0; v && v->producer && hop < 2; hop++) {
		const struct tpf_node *p = v->producer;
		if (p->op == TPF_OP_SUB && p->n_inputs == 2 && p->inputs[1] && p->inputs[1]->producer &&
		    p->inputs[1]->producer->op == TPF_OP_REDUCE_MEAN)
			return 1;
		if (p->op != TPF_OP_CAST || !p->n_inputs)
			return 0;
		v = p->inputs[0];
	}
	return 0;
}

static int is_float16ish(enum tpf_dtype t)
{
	return t == TPF_DTYPE_BFLOAT16 || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_FLOAT;
}

/* The chain's constants: epsilon, the exponent 2, the numerator 1 and the
 * 1 of a (1 + gamma) weight. */
static const char *check_chain_constants(struct tpf_match *m, struct chain_facts *f)
{
	struct tpf_value *eps = tpf_match_value(m, "eps"), *c;
	double k;

	if (!tpf_match_value(m, "x") || !tpf_match_value(m, "gamma") || !eps ||
	    !tpf_match_node(m, "mean"))
		return "incomplete match";
	if (tpf_pattern_const_scalar(eps, &f->eps) || !isfinite(f->eps) || f->eps < 0)
		return tpf_match_reason(m, "epsilon '%s' is not a scalar non-negative constant",
					eps->name);
	if ((c = tpf_match_value(m, "two")) && (tpf_pattern_const_scalar(c, &k) || k != 2.0))
		return tpf_match_reason(m, "Pow exponent '%s' is not the constant 2", c->name);
	if ((c = tpf_match_value(m, "one_r")) && (tpf_pattern_const_scalar(c, &k) || k != 1.0))
		return tpf_match_reason(m, "Div numerator '%s' is not the constant 1", c->name);
	f->offset = 0.0f;
	if ((c = tpf_match_value(m, "one"))) {
		if (tpf_pattern_const_scalar(c, &k) || k != 1.0)
			return tpf_match_reason(m, "the constant added to gamma ('%s') is not 1",
						c->name);
		f->offset = 1.0f;
	}
	return NULL;
}

/* The chain over x (the value squared, or for a LayerNorm the input the
 * mean is subtracted from): compute dtype, axis, gamma. */
static const char *check_chain_input(struct tpf_match *m, struct chain_facts *f, struct tpf_value *x)
{
	struct tpf_value *gamma = tpf_match_value(m, "gamma");
	struct tpf_node *mean = tpf_match_node(m, "mean");
	struct tpf_value *out = m->root->outputs[0];

	enum tpf_dtype out_t = tpf_pattern_dtype(out), g_t = tpf_pattern_dtype(gamma);
	if (out_t == TPF_DTYPE_UNDEFINED || g_t == TPF_DTYPE_UNDEFINED)
		return "the output or gamma dtype is unknown";
	if (out_t != g_t)
		return tpf_match_reason(m, "output dtype %s differs from gamma dtype %s",
					tpf_dtype_name(out_t), tpf_dtype_name(g_t));

	/* Look through a widening Cast to float (the compute dtype) when the
	 * value before it has the output's dtype: then input, gamma and output
	 * share one dtype and a residual Add feeds the norm directly. */
	f->x_in = x;
	f->x_cast = NULL;
	f->stash = tpf_pattern_dtype(x);
	struct tpf_node *xc = x->producer;
	if (xc && xc->op == TPF_OP_CAST && xc->n_inputs == 1 && xc->inputs[0] &&
	    tpf_node_attr_int(xc, "to", 0) == TPF_DTYPE_FLOAT &&
	    is_float16ish(tpf_pattern_dtype(xc->inputs[0])) &&
	    tpf_pattern_dtype(xc->inputs[0]) == out_t) {
		f->x_in = xc->inputs[0];
		f->x_cast = xc;
		f->stash = TPF_DTYPE_FLOAT;
	}
	if (f->stash == TPF_DTYPE_UNDEFINED)
		return "the input dtype is unknown";
	if (!tpf_dtype_is_float((enum tpf_dtype)f->stash))
		return tpf_match_reason(m, "the input dtype %s is not a float type",
					tpf_dtype_name((enum tpf_dtype)f->stash));

	/* the reduced axis must be the last one */
	int64_t axis;
	if (reduce_mean_axis(mean, &axis))
		return "ReduceMean axes are not a single constant";
	int rank = tpf_pattern_rank(mean->inputs[0]);
	if (rank < 0)
		rank = tpf_pattern_rank(f->x_in);
	if (axis != -1 && !(rank > 0 && axis == rank - 1))
		return rank > 0 ? tpf_match_reason(m, "ReduceMean over axis %lld, not the last axis "
						      "(rank %d)",
						   (long long)axis, rank)
				: tpf_match_reason(m, "ReduceMean over axis %lld and the rank is unknown",
						   (long long)axis);

	/* gamma must cover exactly the last dimension */
	int64_t hidden = -1;
	if (!tpf_pattern_last_dim(f->x_in, &hidden) && !tpf_pattern_last_dim(x, &hidden) &&
	    !tpf_pattern_last_dim(out, &hidden))
		return "the size of the last dimension is unknown";
	int grank = tpf_pattern_rank(gamma);
	if (grank < 1)
		return tpf_match_reason(m, "gamma '%s' has %s", gamma->name,
					grank < 0 ? "an unknown shape" : "rank 0");
	int xrank = tpf_pattern_rank(f->x_in);
	if (xrank > 0 && grank > xrank)
		return tpf_match_reason(m, "gamma '%s' has rank %d > input rank %d", gamma->name,
					grank, xrank);
	for (int i = 0; i < grank; i++) {
		const struct tpf_dim *dim = &gamma->type.shape.dims[i];
		int64_t want = i == grank - 1 ? hidden : 1;
		if (dim->param || dim->value != want)
			return tpf_match_reason(m, "gamma '%s' dim %d is %s%lld, expected %lld "
						   "(the last dimension)",
						gamma->name, i, dim->param ? dim->param : "",
						dim->param ? 0LL : (long long)dim->value,
						(long long)want);
	}
	return NULL;
}

static const char *check_chain(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct chain_facts *f = (struct chain_facts *)m->facts;
	const char *why = check_chain_constants(m, f);
	if (why)
		return why;
	struct tpf_value *x = tpf_match_value(m, "x");
	if (is_mean_subtracted(x))
		return "the input is mean-subtracted (x - ReduceMean(x)): a LayerNorm, not an RMSNorm";
	return check_chain_input(m, f, x);
}

static enum tpf_status rewrite_chain(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct chain_facts *f = (const struct chain_facts *)m->facts;
	struct tpf_value *gamma = tpf_match_value(m, "gamma");
	enum tpf_status st = emit_norm(rw, m, f->x_in, gamma, m->root->outputs[0], (float)f->eps,
				       -1, f->stash, f->offset);
	if (st)
		return st;
	return tpf_rewriter_erase_if_dead(rw, f->x_cast);
}

/* --------------------------------------------- the decomposed LayerNorm */

/* Whether v is the reduced value an AllReduce gives, or a sum of it with
 * up to two addends (a bias, the residual), maybe widened by a Cast: the
 * input fuse-allreduce-rmsnorm takes with the norm. */
static int reads_allreduce(const struct tpf_value *v, int adds)
{
	const struct tpf_node *p = v ? v->producer : NULL;
	if (p && p->op == TPF_OP_CAST && p->n_inputs == 1)
		p = p->inputs[0] ? p->inputs[0]->producer : NULL;
	if (!p)
		return 0;
	if (p->op == TPF_OP_MS_ALLREDUCE)
		return 1;
	return adds > 0 && p->op == TPF_OP_ADD && p->n_inputs == 2 &&
	       (reads_allreduce(p->inputs[0], adds - 1) || reads_allreduce(p->inputs[1], adds - 1));
}

/* The chain with x = Sub(x0, ReduceMean(x0)) over the last axis: a
 * LayerNorm of x0, without bias (Cohere's) or with one added after gamma
 * (beta, [H], gamma's dtype), which becomes ONNX
 * LayerNormalization (opset 17) where an AllReduce feeds it, so that the
 * all-reduce fusion takes it; elsewhere it stays as written. */
static const char *check_chain_layer_norm(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	struct chain_facts *f = (struct chain_facts *)m->facts;
	const char *why = check_chain_constants(m, f);
	if (why)
		return why;
	struct tpf_value *d = tpf_match_value(m, "x");
	struct tpf_node *sub = d->producer;
	if (!sub || sub->op != TPF_OP_SUB || sub->n_inputs != 2 || !sub->inputs[0] || !sub->inputs[1])
		return "the squared value is not x - ReduceMean(x)";
	struct tpf_node *mu = sub->inputs[1]->producer;
	int64_t axis, vaxis;
	if (!mu || mu->op != TPF_OP_REDUCE_MEAN || !mu->n_inputs || mu->inputs[0] != sub->inputs[0])
		return "the squared value is not x - ReduceMean(x)";
	if (pred_reduce_mean(mu, m) || reduce_mean_axis(mu, &axis) ||
	    reduce_mean_axis(tpf_match_node(m, "mean"), &vaxis))
		return "the mean is not over one constant axis, kept";
	int rank = tpf_pattern_rank(sub->inputs[0]);
	if (axis < 0 && rank > 0)
		axis += rank;
	if (vaxis < 0 && rank > 0)
		vaxis += rank;
	if (axis != vaxis)
		return tpf_match_reason(m, "the mean is over axis %lld, the variance over axis %lld",
					(long long)axis, (long long)vaxis);
	if ((why = check_chain_input(m, f, sub->inputs[0])))
		return why;
	if (f->stash != TPF_DTYPE_FLOAT)
		return tpf_match_reason(m, "the chain computes in %s, not float",
					tpf_dtype_name((enum tpf_dtype)f->stash));
	enum tpf_dtype t_g = tpf_pattern_dtype(tpf_match_value(m, "gamma"));
	if (tpf_pattern_dtype(f->x_in) != t_g)
		return "the input and gamma dtypes differ (LayerNormalization's X and Scale share one)";
	struct tpf_value *beta = tpf_match_value(m, "beta");
	int64_t h = -1, hb = -1;
	if (beta && (tpf_pattern_dtype(beta) != t_g || tpf_pattern_rank(beta) != 1 ||
		     !tpf_pattern_last_dim(beta, &hb) || !tpf_pattern_last_dim(f->x_in, &h) || hb != h))
		return tpf_match_reason(m, "the bias '%s' is not a [H] weight of gamma's dtype",
					beta->name);
	int64_t opset = pc && pc->model ? tpf_model_opset(pc->model, "") : -1;
	if (opset >= 0 && opset < 17)
		return tpf_match_reason(m, "the model's opset %lld has no LayerNormalization (17)",
					(long long)opset);
	if (!reads_allreduce(f->x_in, 2))
		return "no AllReduce feeds the norm: it stays as written";
	f->sub = sub;
	f->mu = mu;
	return NULL;
}

static enum tpf_status rewrite_chain_layer_norm(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct chain_facts *f = (const struct chain_facts *)m->facts;
	struct tpf_value *in[3] = {f->x_in, tpf_match_value(m, "gamma"), tpf_match_value(m, "beta")};
	enum tpf_status st;
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_LAYER_NORMALIZATION, in, in[2] ? 3 : 2, 1,
						 NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_node_set_attr_float(n, "epsilon", (float)f->eps)) ||
	    (st = tpf_node_set_attr_int(n, "axis", -1)) ||
	    (st = tpf_node_set_attr_int(n, "stash_type", TPF_DTYPE_FLOAT)) ||
	    (st = tpf_rewriter_replace(rw, m->root->outputs[0], n->outputs[0])) ||
	    (st = tpf_rewriter_erase_dead(rw, m)) || (st = tpf_rewriter_erase_if_dead(rw, f->sub)) ||
	    (st = tpf_rewriter_erase_if_dead(rw, f->mu)))
		return st;
	return tpf_rewriter_erase_if_dead(rw, f->x_cast);
}

/* sqrt(mean(x^2) + eps) */
static const struct tpf_pnode p_rms = TPF_PNODE_OP_INIT(
	SQRT, NULL, 0, NULL,
	TPF_PAT_OP(ADD, "add_eps", TPF_PNODE_COMMUTE, NULL,
		   TPF_PAT_OP(REDUCE_MEAN, "mean", TPF_PNODE_EXTRA_INPUTS, pred_reduce_mean,
			      TPF_PAT_ALT(TPF_PAT_OP(POW, "pow", 0, NULL, TPF_PAT_ANY("x"),
						     TPF_PAT_CONST("two")),
					  TPF_PAT_OP(MUL, "square", 0, NULL, TPF_PAT_ANY("x"),
						     TPF_PAT_ANY("x")))),
		   TPF_PAT_CONST("eps")));

/* x / rms, as Div or as Mul by a reciprocal, optionally cast */
static const struct tpf_pnode p_normed = {
	.kind = TPF_PNODE_ALT,
	.flags = TPF_PNODE_OPT_CAST,
	.cast_name = "norm_cast",
	.operands = (const struct tpf_pnode *const[]){
		TPF_PAT_OP(DIV, "div", 0, NULL, TPF_PAT_ANY("x"), &p_rms),
		TPF_PAT_OP(MUL, "scale", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x"),
			   TPF_PAT_ALT(TPF_PAT_OP(RECIPROCAL, "recip", 0, NULL, &p_rms),
				       TPF_PAT_OP(DIV, "recip", 0, NULL, TPF_PAT_CONST("one_r"), &p_rms))),
		NULL,
	},
};

/* The root of both chains: gamma * normed, a Cast after it allowed. */
#define GAMMA_MUL_F(gamma, fl)                                                                     \
	(&(const struct tpf_pnode){                                                                \
	    .kind = TPF_PNODE_OP,                                                                  \
	    .op = TPF_OP_MUL,                                                                      \
	    .name = "gamma_mul",                                                                   \
	    .flags = TPF_PNODE_COMMUTE | (fl),                                                     \
	    .cast_name = "out_cast",                                                               \
	    .operands = (const struct tpf_pnode *const[]){(gamma), &p_normed, NULL},               \
	})
#define GAMMA_MUL(gamma) GAMMA_MUL_F(gamma, TPF_PNODE_OPT_CAST)

static const struct tpf_pattern pat_chain_gemma = {
	.name = "decomposed-gemma",
	.root = GAMMA_MUL(TPF_PAT_OP(ADD, "gemma_add", TPF_PNODE_COMMUTE, NULL, TPF_PAT_CONST("one"),
				     TPF_PAT_ANY_F("gamma", TPF_PNODE_OPT_CAST))),
	.check = check_chain,
	.rewrite = rewrite_chain,
	.explain_min_nodes = 3,
};

static const struct tpf_pattern pat_chain = {
	.name = "decomposed",
	.root = GAMMA_MUL(TPF_PAT_ANY_F("gamma", TPF_PNODE_OPT_CAST)),
	.check = check_chain,
	.rewrite = rewrite_chain,
	.explain_min_nodes = 3,
};

/* A LayerNorm with a bias: gamma * normed + beta, a Cast after it allowed. */
static const struct tpf_pattern pat_chain_layer_norm_beta = {
	.name = "decomposed-layernorm-bias",
	.root = &(const struct tpf_pnode){
	    .kind = TPF_PNODE_OP,
	    .op = TPF_OP_ADD,
	    .name = "beta_add",
	    .flags = TPF_PNODE_COMMUTE | TPF_PNODE_OPT_CAST,
	    .cast_name = "out_cast",
	    .operands = (const struct tpf_pnode *const[]){
		GAMMA_MUL_F(TPF_PAT_ANY_F("gamma", TPF_PNODE_OPT_CAST), 0),
		TPF_PAT_ANY_F("beta", TPF_PNODE_OPT_CAST), NULL},
	},
	.check = check_chain_layer_norm,
	.rewrite = rewrite_chain_layer_norm,
	.explain_min_nodes = 4,
};

static const struct tpf_pattern pat_chain_layer_norm = {
	.name = "decomposed-layernorm",
	.root = GAMMA_MUL(TPF_PAT_ANY_F("gamma", TPF_PNODE_OPT_CAST)),
	.check = check_chain_layer_norm,
	.rewrite = rewrite_chain_layer_norm,
	.explain_min_nodes = 3,
};

/* ------------------------------------------- Cast -> RMSNorm(float) -> Cast */

/* The norm of a float16/bfloat16 model computed in float32 (norm weights
 * kept in float32): Cast(x, float) -> RMSNorm(., gamma) -> Cast(., T).  The
 * canonical norm takes x itself (its compute type, stash_type, is the
 * float32 the chain widened to) and gives T: the same values, since the
 * widening Cast is exact and the norm's float32 result rounded to T is what
 * the final Cast rounds. */
struct casts_facts {
	int64_t stash;
};

static const char *check_norm_casts(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct casts_facts *f = (struct casts_facts *)m->facts;
	struct tpf_node *norm = tpf_match_node(m, "norm"), *in_cast = tpf_match_node(m, "in_cast");
	struct tpf_value *x = tpf_match_value(m, "x"), *gamma = tpf_match_value(m, "gamma");

	if (!norm || !in_cast || !x || !gamma)
		return "incomplete match";
	enum tpf_dtype t_in = tpf_pattern_dtype(x), t_wide = tpf_pattern_dtype(in_cast->outputs[0]);
	enum tpf_dtype t_out = tpf_pattern_dtype(m->root->outputs[0]);
	enum tpf_dtype t_norm = tpf_pattern_dtype(norm->outputs[0]);
	int64_t stash = tpf_node_attr_int(norm, "stash_type", TPF_DTYPE_FLOAT);
	if (t_in == TPF_DTYPE_UNDEFINED || t_out == TPF_DTYPE_UNDEFINED)
		return "the dtype before the first Cast or after the last is unknown";
	if (t_in != t_out)
		return tpf_match_reason(m, "the norm reads %s and is cast to %s: not one activation "
					   "dtype",
					tpf_dtype_name(t_in), tpf_dtype_name(t_out));
	if (t_in != TPF_DTYPE_FLOAT16 && t_in != TPF_DTYPE_BFLOAT16)
		return tpf_match_reason(m, "the activation dtype %s is not float16 or bfloat16",
					tpf_dtype_name(t_in));
	/* the widening Cast must be exact and the norm must compute in
	 * (at least) the widened type, which must be what it outputs */
	if (t_wide != TPF_DTYPE_FLOAT || t_norm != TPF_DTYPE_FLOAT)
		return tpf_match_reason(m, "the norm runs in %s and gives %s, not float",
					tpf_dtype_name(t_wide), tpf_dtype_name(t_norm));
	if (stash != TPF_DTYPE_FLOAT && stash != TPF_DTYPE_DOUBLE)
		return tpf_match_reason(m, "the norm's stash_type %lld is narrower than float",
					(long long)stash);
	if (!tpf_dtype_is_float(tpf_pattern_dtype(gamma)))
		return "gamma is not a float type";
	f->stash = stash;
	return NULL;
}

static enum tpf_status rewrite_norm_casts(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct casts_facts *f = (const struct casts_facts *)m->facts;
	struct tpf_node *norm = tpf_match_node(m, "norm");
	struct tpf_value *x = tpf_match_value(m, "x"), *gamma = tpf_match_value(m, "gamma");
	struct tpf_value *in[2] = {x, gamma};
	enum tpf_status st;

	/* emit_norm's steps, with the output type recorded: the norm gives X's
	 * type, not gamma's, which the record could not tell otherwise */
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_TPF_RMS_NORM, in, 2, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = set_norm_attrs(n, tpf_node_attr_float(norm, "epsilon", 1e-5f),
				 tpf_node_attr_int(norm, "axis", -1), f->stash,
				 tpf_node_attr_float(norm, "weight_offset", 0.0f))) ||
	    (st = tpf_node_set_attr_int(n, "output_type", tpf_pattern_dtype(x))) ||
	    (st = tpf_rewriter_replace(rw, m->root->outputs[0], n->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_norm_casts = {
	.name = "cast-rmsnorm-cast",
	.root = TPF_PAT_OP(CAST, "out_cast", 0, NULL,
			   TPF_PAT_OP(TPF_RMS_NORM, "norm", 0, NULL,
				      TPF_PAT_OP(CAST, "in_cast", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("x")),
				      TPF_PAT_ANY("gamma"))),
	.check = check_norm_casts,
	.rewrite = rewrite_norm_casts,
	.explain_min_nodes = 2,
};

/* ------------------------------------------------------------------ the pass */

/* Tried in this order at each node; the names are the pass's counters. */
static const struct tpf_pattern *const patterns[] = {
	&pat_rms_normalization, &pat_simplified,  &pat_ms_simplified,
	&pat_skip_simplified,   &pat_chain_gemma, &pat_chain,
	&pat_chain_layer_norm_beta, &pat_chain_layer_norm, &pat_norm_casts, NULL,
};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_canonicalize_rmsnorm, ctx, changed, d);
}

const struct tpf_pass tpf_pass_canonicalize_rmsnorm = {
	.name = PASS_NAME,
	.summary = "rewrite every RMSNorm form (ONNX, ORT contrib, decomposed, Gemma) into "
		   "ai.tpfuse.RMSNorm",
	.run = run,
	.patterns = patterns,
};

/* ================================================= canonicalize-allgather
 *
 * A last-axis all-gather as TorchScript exports it from a custom op that
 * gathers on axis 0:
 *
 *   Unsqueeze(x, [0]) -> AllGather(axis = 0) -> Transpose(perm = [1, ..., r-1, 0, r])
 *       -> Reshape([d0, ..., d(r-2), W * d(r-1)])
 *       => AllGather(x, axis = -1)
 *
 * (x of rank r; the Transpose puts the W gathered copies next to the last
 * axis, the Reshape merges them into it).  The Reshape's sizes may be
 * computed at run time from shapes (Shape -> Gather -> Unsqueeze -> Concat):
 * a size read from a dim of a Shape's input stands for that dim, and a
 * leading one must be the input's own (the same parameter or static size).
 * The fusions then see one AllGather on the last axis. */

struct gather_facts {
	int64_t world;
};

static int unsqueeze_axes(const struct tpf_node *n, int64_t *axes, size_t max, size_t *count)
{
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	if (n->n_inputs > 1 && n->inputs[1])
		return tpf_pattern_const_ints(n->inputs[1], axes, max, count);
	if (!a || a->kind != TPF_ATTR_INTS || a->n > max)
		return -1;
	memcpy(axes, a->ints, a->n * sizeof(*axes));
	*count = a->n;
	return 0;
}

/* One element of a shape computed at run time: a number, or a dim of some
 * tensor (the Shape it was read from), known only symbolically. */
struct shape_elem {
	int64_t value;		   /* when dim is NULL */
	const struct tpf_dim *dim; /* a dim of a Shape's input */
};

#define SHAPE_ELEMS (TPF_MAX_RANK + 1)

static int shape_elems(const struct tpf_value *v, struct shape_elem *e, size_t *n, int depth);

/* Shape(x)[start:end] (Shape's own start/end attributes), as dims. */
static int shape_of_elems(const struct tpf_node *p, struct shape_elem *e, size_t *n)
{
	const struct tpf_value *x = p->n_inputs ? p->inputs[0] : NULL;
	if (!x || x->type.kind != TPF_TYPE_TENSOR || x->type.shape.rank < 0)
		return -1;
	int64_t r = x->type.shape.rank;
	int64_t a = tpf_node_attr_int(p, "start", 0), b = tpf_node_attr_int(p, "end", r);
	a = a < 0 ? a + r : a;
	b = b < 0 ? b + r : b > r ? r : b;
	if (a < 0 || b - a > SHAPE_ELEMS)
		return -1;
	*n = 0;
	for (int64_t i = a; i < b; i++) {
		const struct tpf_dim *d = &x->type.shape.dims[i];
		e[(*n)++] = d->param || d->value < 0 ? (struct shape_elem){0, d}
						     : (struct shape_elem){d->value, NULL};
	}
	return 0;
}

/* Gather(elements, constant indices) over axis 0. */
static int gather_elems(const struct tpf_node *p, struct shape_elem *e, size_t *n, int depth)
{
	struct shape_elem src[SHAPE_ELEMS];
	int64_t idx[SHAPE_ELEMS];
	size_t ns, ni;
	if (p->n_inputs != 2 || tpf_node_attr_int(p, "axis", 0) != 0 ||
	    shape_elems(p->inputs[0], src, &ns, depth + 1) ||
	    tpf_pattern_const_ints(p->inputs[1], idx, SHAPE_ELEMS, &ni))
		return -1;
	for (size_t i = 0; i < ni; i++) {
		int64_t k = idx[i] < 0 ? idx[i] + (int64_t)ns : idx[i];
		if (k < 0 || k >= (int64_t)ns)
			return -1;
		e[i] = src[k];
	}
	*n = ni;
	return 0;
}

/* The elements of a 0-D or 1-D integer value computed from shapes:
 * constants, Shape, Gather of constant indices, Concat, and the
 * Unsqueeze/Squeeze/Reshape/Cast/Identity that carry them; 0 on success. */
static int shape_elems(const struct tpf_value *v, struct shape_elem *e, size_t *n, int depth)
{
	int64_t vals[SHAPE_ELEMS];
	const struct tpf_node *p = v ? v->producer : NULL;

	if (!v || depth > 8)
		return -1;
	if (!tpf_pattern_const_ints(v, vals, SHAPE_ELEMS, n)) {
		for (size_t i = 0; i < *n; i++)
			e[i] = (struct shape_elem){vals[i], NULL};
		return 0;
	}
	if (!p || !p->n_inputs)
		return -1;
	switch (p->op) {
	case TPF_OP_SHAPE:
		return shape_of_elems(p, e, n);
	case TPF_OP_GATHER:
		return gather_elems(p, e, n, depth);
	case TPF_OP_UNSQUEEZE:
	case TPF_OP_SQUEEZE:
	case TPF_OP_RESHAPE:
	case TPF_OP_CAST:
	case TPF_OP_IDENTITY:
		return shape_elems(p->inputs[0], e, n, depth + 1);
	case TPF_OP_CONCAT: {
		size_t total = 0, k;
		for (size_t i = 0; i < p->n_inputs; i++) {
			if (total >= SHAPE_ELEMS ||
			    shape_elems(p->inputs[i], e + total, &k, depth + 1) ||
			    k > SHAPE_ELEMS - total)
				return -1;
			total += k;
		}
		*n = total;
		return 0;
	}
	default:
		return -1;
	}
}

/* Whether a symbolic element is dim `want` (the same parameter, or the same
 * static size). */
static int elem_is_dim(const struct shape_elem *e, const struct tpf_dim *want)
{
	if (!e->dim)
		return !want->param && want->value >= 0 && e->value == want->value;
	return e->dim->param && want->param && strcmp(e->dim->param, want->param) == 0;
}

/* The Reshape's target (elements computed at compile time, or dims read
 * from shapes) keeps x's leading dims and merges the W copies into the
 * last. */
static const char *check_gather_target(struct tpf_match *m, const struct gather_facts *f,
				       const struct tpf_value *x, const struct shape_elem *sym,
				       size_t n_target, int r)
{
	if (n_target != (size_t)r)
		return tpf_match_reason(m, "the Reshape gives rank %zu, not the input's %d", n_target,
					r);
	int allowzero = (int)tpf_node_attr_int(m->root, "allowzero", 0);
	int64_t last = -2;
	if (tpf_pattern_last_dim(x, &last) && !__builtin_mul_overflow(last, f->world, &last)) {
	} else {
		last = -2;
	}
	int minus = 0;
	for (int i = 0; i < r; i++) {
		int64_t t = sym[i].value;
		const struct tpf_dim *xd =
		    x->type.kind == TPF_TYPE_TENSOR ? &x->type.shape.dims[i] : NULL;
		if (sym[i].dim) {
			if (i < r - 1 && xd && elem_is_dim(&sym[i], xd))
				continue;
			return tpf_match_reason(m, "the Reshape's dim %d is the size %s%s, not the "
						   "input's %s",
						i, sym[i].dim->param ? "" : "unknown",
						sym[i].dim->param ? sym[i].dim->param : "",
						i < r - 1 ? "dim" : "last dim times the world size");
		}
		if (t == -1) {
			minus++;
			continue;
		}
		if (i < r - 1) {
			if (t == 0 && !allowzero)
				continue;
			if (xd && !xd->param && xd->value == t)
				continue;
			return tpf_match_reason(m, "the Reshape's dim %d is %lld, not the input's", i,
						(long long)t);
		}
		if (t != last)
			return tpf_match_reason(m, "the Reshape's last dim is %lld, not %lld x the "
						   "input's last",
						(long long)t, (long long)f->world);
	}
	if (minus > 1)
		return "the Reshape has more than one -1";
	if (minus == 1 && (sym[r - 1].dim || sym[r - 1].value != -1) && last < 0)
		return "the Reshape's sizes cannot be proven to merge the copies into the last axis";
	return NULL;
}

static const char *check_gather(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	struct gather_facts *f = (struct gather_facts *)m->facts;
	struct tpf_node *unsq = tpf_match_node(m, "unsq"), *ag = tpf_match_node(m, "ag");
	struct tpf_node *tr = tpf_match_node(m, "tr");
	struct tpf_value *x = tpf_match_value(m, "x"), *shape = tpf_match_value(m, "shape");
	int64_t axes[TPF_MAX_RANK + 1];
	size_t n_axes = 0, n_target = 0;

	if (!unsq || !ag || !tr || !x || !shape)
		return "incomplete match";
	if (unsqueeze_axes(unsq, axes, TPF_MAX_RANK, &n_axes) || n_axes != 1 || axes[0] != 0)
		return "the Unsqueeze does not insert axis 0 alone";
	if (tpf_node_attr_int(ag, "axis", 0) != 0)
		return "the AllGather is not over the inserted axis 0";
	int r = tpf_pattern_rank(x);
	if (r < 1 || r >= TPF_MAX_RANK)
		return "the rank of the gathered input is unknown";
	const struct tpf_attr *gs = tpf_node_attr(ag, "group_size");
	f->world = gs && gs->kind == TPF_ATTR_INT ? gs->i : pc->world_size;
	if (f->world <= 0)
		return "the world size is unknown (no group_size, --world-size or tp_world_size)";
	const struct tpf_attr *perm = tpf_node_attr(tr, "perm");
	if (!perm || perm->kind != TPF_ATTR_INTS || perm->n != (size_t)r + 1)
		return "the Transpose has no perm of the gathered rank";
	for (int i = 0; i <= r; i++) {
		int64_t want = i < r - 1 ? i + 1 : i == r - 1 ? 0 : r;
		if (perm->ints[i] != want)
			return tpf_match_reason(m, "the Transpose's perm[%d] is %lld, expected %lld "
						   "(the gathered copies next to the last axis)",
						i, (long long)perm->ints[i], (long long)want);
	}
	struct shape_elem sym[SHAPE_ELEMS];
	if (shape_elems(shape, sym, &n_target, 0))
		return "the Reshape's shape is not known at compile time (nor read from shapes)";
	return check_gather_target(m, f, x, sym, n_target, r);
}

static enum tpf_status rewrite_gather(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct gather_facts *f = (const struct gather_facts *)m->facts;
	struct tpf_value *x = tpf_match_value(m, "x");
	enum tpf_status st;
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_MS_ALLGATHER, &x, 1, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_node_set_attr_int(n, "axis", -1)) ||
	    (st = tpf_node_set_attr_int(n, "group_size", f->world)) ||
	    (st = tpf_rewriter_replace(rw, m->root->outputs[0], n->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_gather_last = {
	.name = "allgather-last-axis",
	.root = TPF_PAT_OP(
	    RESHAPE, "reshape", 0, NULL,
	    TPF_PAT_OP(TRANSPOSE, "tr", 0, NULL,
		       TPF_PAT_OP(MS_ALLGATHER, "ag", 0, NULL,
				  TPF_PAT_OP(UNSQUEEZE, "unsq", TPF_PNODE_EXTRA_INPUTS, NULL,
					     TPF_PAT_ANY("x")))),
	    TPF_PAT_ANY("shape")),
	.check = check_gather,
	.rewrite = rewrite_gather,
	.explain_min_nodes = 3,
};

static const struct tpf_pattern *const gather_patterns[] = {&pat_gather_last, NULL};

static enum tpf_status run_gather(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				  struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_canonicalize_allgather, ctx, changed, d);
}

const struct tpf_pass tpf_pass_canonicalize_allgather = {
	.name = "canonicalize-allgather",
	.summary = "Unsqueeze(0) -> AllGather(axis 0) -> Transpose -> Reshape into one AllGather "
		   "on the last axis",
	.run = run_gather,
	.patterns = gather_patterns,
};
