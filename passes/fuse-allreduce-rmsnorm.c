/* SPDX-License-Identifier: MIT */
/*
 * fuse-allreduce-rmsnorm: a tensor-parallel reduction followed by the
 * residual add and the next RMSNorm becomes one ai.tpfuse.AllReduceRMSNorm
 * (docs/ops.md):
 *
 *   AllReduce(a) -> Add(., residual) -> RMSNorm(., gamma)
 *       => AllReduceRMSNorm(a, gamma, residual) -> (norm_out, residual_out)
 *   AllReduce(a) -> RMSNorm(., gamma)
 *       => AllReduceRMSNorm(a, gamma) -> (norm_out, residual_out = the reduced value)
 *
 * The pattern is local, so it crosses layer boundaries: the reduction that
 * ends a layer lands in the next layer's pre-norm, the last one in the
 * final norm.  Whoever used the Add (the next residual) gets residual_out.
 * Runs on canonical RMSNorm nodes: run canonicalize-rmsnorm first.
 *
 * Mixture-of-experts blocks add the shared expert's output to the reduced
 * routed experts' output before the residual:
 *
 *   Add(Add(AllReduce(a), shared), residual) -> RMSNorm(., gamma)
 *       => s = Add(shared, residual); AllReduceRMSNorm(a, gamma, s)
 *
 * (the shared output is folded into the residual before the fused op; with
 * a sigmoid gate, shared is Mul(Sigmoid(g), e), and fuse-sigmoid-gate then
 * makes the new Add a SigmoidGateAdd).  A shared expert reduced on its own,
 * Add(AllReduce(a), AllReduce(b)), first becomes AllReduce(Add(a, b)): one
 * reduction of the summed partial sums, vLLM's order, which the patterns
 * above then fuse.
 *
 * A row-parallel projection with a bias (gpt-oss's o_proj) adds it once,
 * after the reduction, before the residual:
 *
 *   Add(Add(AllReduce(a), bias), residual) -> RMSNorm(., gamma)
 *       => AllReduceRMSNorm(a, gamma, residual, bias)
 *   Add(AllReduce(a), bias) -> RMSNorm(., gamma)
 *       => AllReduceRMSNorm(a, gamma, , bias)
 *
 * (bias: one value per element of the last dim, broadcast over the rows;
 * the fused op adds it in the same order).  Every pattern also roots at an
 * ONNX LayerNormalization (last axis, float statistics, Mean and InvStdDev
 * unused), which becomes ai.tpfuse.AllReduceLayerNorm with the norm's bias
 * B as input 4, beta.
 *
 * Refused: norm input and gamma (or residual) dtypes that differ, a norm
 * over another axis than the last, a residual that broadcasts, and (with a
 * residual) an AllReduce output with users besides the Add: the fused op
 * does not output the bare reduced value.
 */
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-allreduce-rmsnorm"

/* Why two AllReduce nodes may not be merged into one: another group. */
static const char *allreduces_differ(const struct tpf_node *a, const struct tpf_node *b)
{
	int64_t ga = tpf_node_attr_int(a, "group_size", -1), gb = tpf_node_attr_int(b, "group_size", -1);
	if (ga != gb)
		return "the two AllReduce nodes have different group_size attributes";
	return NULL;
}

/* Whether v holds one value per element of the last dim (`hidden`, known):
 * static dims, all 1 but the last. */
static int covers_last_dim(const struct tpf_value *v, int64_t hidden)
{
	int r = tpf_pattern_rank(v);
	if (r < 1 || hidden < 0)
		return 0;
	for (int i = 0; i < r; i++) {
		const struct tpf_dim *d = &v->type.shape.dims[i];
		if (d->param || d->value != (i == r - 1 ? hidden : 1))
			return 0;
	}
	return 1;
}

/* The bias added to the reduced value: the sum's dtype, broadcast over the
 * rows.  An addend of the reduced value's own shape is left to the shared
 * pattern, which folds it into the residual. */
static const char *check_bias(struct tpf_match *m, enum tpf_dtype t_sum, int64_t hidden)
{
	struct tpf_value *bias = tpf_match_value(m, "bias");
	struct tpf_node *ar = tpf_match_node(m, "ar");
	if (!bias)
		return NULL;
	if (!tpf_pattern_shapes_differ(bias, ar->outputs[0]))
		return tpf_match_reason(m, "the addend '%s' has the reduced value's shape: a shared "
		                           "output, not a bias",
		                        bias->name);
	enum tpf_dtype t_b = tpf_pattern_dtype(bias);
	if (t_b != t_sum)
		return tpf_match_reason(m, "the bias '%s' is %s, the sum %s", bias->name,
		                        t_b == TPF_DTYPE_UNDEFINED ? "of unknown dtype" : tpf_dtype_name(t_b),
		                        tpf_dtype_name(t_sum));
	if (!covers_last_dim(bias, hidden))
		return tpf_match_reason(m, "the addend '%s' is not a bias of the last dimension "
		                           "(one value per element of it, broadcast over the rows)",
		                        bias->name);
	return NULL;
}

/* A LayerNormalization root: float statistics over the last axis, its
 * Mean and InvStdDev outputs unused, B (beta) of gamma's dtype covering the
 * last dimension. */
static const char *check_layer_norm(struct tpf_match *m, enum tpf_dtype t_g, int64_t hidden)
{
	const struct tpf_node *norm = m->root;
	if (norm->op != TPF_OP_LAYER_NORMALIZATION)
		return NULL;
	for (size_t i = 1; i < norm->n_outputs; i++)
		if (norm->outputs[i] && tpf_value_use_count(norm->outputs[i]))
			return "the norm's Mean or InvStdDev output is used";
	int64_t stash = tpf_node_attr_int(norm, "stash_type", TPF_DTYPE_FLOAT);
	if (stash != TPF_DTYPE_FLOAT)
		return tpf_match_reason(m, "stash_type %lld: the fused norm computes in float",
		                        (long long)stash);
	const struct tpf_value *beta = norm->n_inputs > 2 ? norm->inputs[2] : NULL;
	if (!beta)
		return NULL;
	if (tpf_pattern_dtype(beta) != t_g)
		return tpf_match_reason(m, "beta '%s' and gamma have different dtypes", beta->name);
	int64_t numel = -1;
	if (beta->type.kind == TPF_TYPE_TENSOR && beta->type.shape.rank >= 0)
		numel = tpf_shape_numel(&beta->type.shape);
	if (hidden >= 0 && numel >= 0 && numel != hidden)
		return tpf_match_reason(m, "beta '%s' has %lld elements, the last dimension %lld",
		                        beta->name, (long long)numel, (long long)hidden);
	return NULL;
}

static const char *check_fusion(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_node *norm = m->root;
	struct tpf_node *ar = tpf_match_node(m, "ar");
	struct tpf_value *a = tpf_match_value(m, "a"), *gamma = tpf_match_value(m, "gamma");
	struct tpf_value *residual = tpf_match_value(m, "residual");
	struct tpf_value *x = norm->inputs[0];

	if (!ar || !a || !gamma)
		return "incomplete match";
	if (norm->op == TPF_OP_TPF_RMS_NORM && norm->n_inputs > 2)
		return "the norm already adds a residual (fuse-residual-rmsnorm)";
	int rank = tpf_pattern_rank(x);
	if (rank < 0)
		rank = tpf_pattern_rank(a);
	int64_t axis = tpf_node_attr_int(norm, "axis", -1);
	if (axis != -1 && !(rank > 0 && axis == rank - 1))
		return tpf_match_reason(m, "the norm is over axis %lld, not the last axis",
		                        (long long)axis);

	enum tpf_dtype t_x = tpf_pattern_dtype(ar->outputs[0]);
	if (t_x == TPF_DTYPE_UNDEFINED)
		t_x = tpf_pattern_dtype(a);
	enum tpf_dtype t_g = tpf_pattern_dtype(gamma);
	if (t_x == TPF_DTYPE_UNDEFINED || t_g == TPF_DTYPE_UNDEFINED)
		return "the dtype of the norm input or of gamma is unknown";
	/* gamma may have its own float type (a float16 model whose norm
	 * weights stay float32): the fused op reads it in the compute type;
	 * the norm's output must be the reduced dtype, as norm_out is */
	if (!tpf_dtype_is_float(t_g))
		return tpf_match_reason(m, "gamma dtype %s is not a float type", tpf_dtype_name(t_g));
	enum tpf_dtype t_y = tpf_pattern_dtype(norm->outputs[0]);
	if (tpf_match_node(m, "ar_cast") && !residual)
		return "a Cast between the AllReduce and the norm without a residual Add";
	enum tpf_dtype t_s = t_x;
	if (residual)
		t_s = tpf_pattern_dtype(residual);
	if (t_y != t_s && t_y != t_g)
		return tpf_match_reason(m, "the norm gives %s from the sum %s and gamma %s "
		                           "(norm_out has the sum's or gamma's dtype)",
		                        t_y == TPF_DTYPE_UNDEFINED ? "an unknown dtype" : tpf_dtype_name(t_y),
		                        tpf_dtype_name(t_s), tpf_dtype_name(t_g));
	/* a widening Cast between the reduction and the residual Add (a float32
	 * residual stream of a float16 model): the sum has the Cast's type */
	struct tpf_node *ar_cast = tpf_match_node(m, "ar_cast");
	enum tpf_dtype t_sum = t_x;
	if (ar_cast) {
		t_sum = tpf_pattern_dtype(ar_cast->outputs[0]);
		if (!((t_x == TPF_DTYPE_FLOAT16 || t_x == TPF_DTYPE_BFLOAT16) &&
		      t_sum == TPF_DTYPE_FLOAT))
			return tpf_match_reason(m, "the Cast after the AllReduce goes from %s to %s, "
			                           "not from float16/bfloat16 to float",
			                        tpf_dtype_name(t_x), tpf_dtype_name(t_sum));
	}
	struct tpf_value *shared = tpf_match_value(m, "shared");
	if (shared) {
		/* an AllReduce of its own merges with this one first */
		struct tpf_node *sp = shared->producer;
		if (sp && sp->op == TPF_OP_MS_ALLREDUCE && tpf_value_use_count(shared) == 1 &&
		    !allreduces_differ(ar, sp))
			return "the shared addend is an AllReduce of its own: the two reductions "
			       "merge into one first";
		enum tpf_dtype t_sh = tpf_pattern_dtype(shared);
		if (t_sh != t_sum)
			return tpf_match_reason(m, "the shared addend '%s' is %s, the sum %s",
			                        shared->name,
			                        t_sh == TPF_DTYPE_UNDEFINED ? "of unknown dtype"
			                                                    : tpf_dtype_name(t_sh),
			                        tpf_dtype_name(t_sum));
		if (tpf_pattern_shapes_differ(shared, ar->outputs[0]))
			return tpf_match_reason(m,
			                        "the shared addend '%s' and the reduced value have "
			                        "different shapes (broadcast add)",
			                        shared->name);
	}
	if (residual) {
		enum tpf_dtype t_r = tpf_pattern_dtype(residual);
		if (t_r != t_sum)
			return tpf_match_reason(
			    m, "residual dtype %s differs from the reduced dtype %s",
			    tpf_dtype_name(t_r), tpf_dtype_name(t_sum));
		if (tpf_pattern_shapes_differ(residual, ar->outputs[0]))
			return tpf_match_reason(
			    m,
			    "residual '%s' and the reduced value have different "
			    "shapes (broadcast add)",
			    residual->name);
	}
	/* gamma covers the last dimension exactly */
	int64_t hidden = -1, numel = -1;
	if (gamma->type.kind == TPF_TYPE_TENSOR && gamma->type.shape.rank >= 0)
		numel = tpf_shape_numel(&gamma->type.shape);
	if ((tpf_pattern_last_dim(x, &hidden) || tpf_pattern_last_dim(a, &hidden)) && numel >= 0 &&
	    numel != hidden)
		return tpf_match_reason(m, "gamma '%s' has %lld elements, the last dimension %lld",
		                        gamma->name, (long long)numel, (long long)hidden);
	const char *why = check_bias(m, t_sum, hidden);
	return why ? why : check_layer_norm(m, t_g, hidden);
}

static enum tpf_status rewrite_fusion(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *norm = m->root;
	struct tpf_node *ar = tpf_match_node(m, "ar");
	struct tpf_node *add = tpf_match_node(m, "add");
	struct tpf_value *residual = tpf_match_value(m, "residual");
	struct tpf_value *bias = tpf_match_value(m, "bias");
	struct tpf_value *beta = norm->op == TPF_OP_LAYER_NORMALIZATION && norm->n_inputs > 2
	                             ? norm->inputs[2]
	                             : NULL;
	struct tpf_value *in[5] = {tpf_match_value(m, "a"), tpf_match_value(m, "gamma"), residual, bias,
	                           beta};
	size_t n_in = beta ? 5 : bias ? 4 : residual ? 3 : 2;
	/* the value other users keep reading: the sum, or the bare reduction */
	struct tpf_value *sum = add ? add->outputs[0] : ar->outputs[0];
	/* with the reduction widened into the residual's type, residual_out is
	 * always written: the kernels round the sum to its buffer's type */
	int need_sum = tpf_value_use_count(sum) > 1 || tpf_match_node(m, "ar_cast");
	enum tpf_status st;

	/* MoE: the shared expert's output joins the residual before the fused
	 * op, which adds it to the reduced routed output */
	struct tpf_value *shared = tpf_match_value(m, "shared");
	if (shared) {
		struct tpf_value *sin[2] = {shared, residual};
		struct tpf_node *sa = tpf_rewriter_create(rw, TPF_OP_ADD, sin, 2, 1, NULL);
		if (!sa)
			return TPF_ERR_NOMEM;
		if (residual->type.kind != TPF_TYPE_NONE &&
		    (st = tpf_value_copy_type(sa->outputs[0], &residual->type)))
			return st;
		in[2] = sa->outputs[0];
	}

	enum tpf_op op = norm->op == TPF_OP_LAYER_NORMALIZATION ? TPF_OP_TPF_ALLREDUCE_LAYER_NORM
	                                                         : TPF_OP_TPF_ALLREDUCE_RMS_NORM;
	struct tpf_node *f = tpf_rewriter_create(rw, op, in, n_in, need_sum ? 2 : 1, NULL);
	if (!f)
		return TPF_ERR_NOMEM;
	static const char *const attrs[] = {"epsilon", "axis", "stash_type", "weight_offset",
	                                    "output_type", NULL};
	static const char *const group[] = {"group_size", NULL};
	if ((st = tpf_rewriter_copy_attrs(f, norm, attrs)) || (st = tpf_rewriter_copy_attrs(f, ar, group)))
		return st;
	/* a norm given in gamma's type rather than the sum's says so */
	enum tpf_dtype t_y = tpf_pattern_dtype(norm->outputs[0]);
	enum tpf_dtype t_sum = tpf_pattern_dtype(residual ? residual : ar->outputs[0]);
	if (t_y != TPF_DTYPE_UNDEFINED && t_y != t_sum &&
	    (st = tpf_node_set_attr_int(f, "output_type", t_y)))
		return st;
	if ((st = tpf_rewriter_replace(rw, norm->outputs[0], f->outputs[0])))
		return st;
	if (need_sum && (st = tpf_rewriter_replace(rw, sum, f->outputs[1])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

/* The ar node of the residual patterns: an AllReduce, maybe widened by a
 * Cast ("ar_cast"). */
#define AR_OPT_CAST                                                                                \
	(&(const struct tpf_pnode){                                                                \
	    .kind = TPF_PNODE_OP,                                                                  \
	    .op = TPF_OP_MS_ALLREDUCE,                                                             \
	    .name = "ar",                                                                          \
	    .flags = TPF_PNODE_OPT_CAST,                                                           \
	    .cast_name = "ar_cast",                                                                \
	    .operands = (const struct tpf_pnode *const[]){TPF_PAT_ANY("a"), NULL},                 \
	})

/* The fused patterns of one norm op: NORM(x, gamma) (LayerNormalization's
 * B rides along as an extra input), x one of the sums below. */
#define NORM_OF(NORM, x)                                                                           \
	TPF_PAT_OP(NORM, "norm", TPF_PNODE_EXTRA_INPUTS, NULL, x, TPF_PAT_ANY("gamma"))
/* the residual Add, whose sum other users may read (the next residual) */
#define RESIDUAL_ADD(x)                                                                            \
	TPF_PAT_OP(ADD, "add", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL, x,                   \
		   TPF_PAT_ANY("residual"))
/* the reduced value plus another addend, named `what` */
#define AR_PLUS(node, what) TPF_PAT_OP(ADD, node, TPF_PNODE_COMMUTE, NULL, AR_OPT_CAST, TPF_PAT_ANY(what))
#define FUSION(nm, rt, min)                                                                        \
	{.name = (nm), .root = (rt), .check = check_fusion, .rewrite = rewrite_fusion,             \
	 .explain_min_nodes = (min)}

#define NORM_PATTERNS(NORM, nm)                                                                    \
	static const struct tpf_pattern pat_residual_##nm =                                        \
	    FUSION("allreduce-residual-" #nm, NORM_OF(NORM, RESIDUAL_ADD(AR_OPT_CAST)), 2);        \
	static const struct tpf_pattern pat_bias_residual_##nm = FUSION(                           \
	    "allreduce-bias-residual-" #nm, NORM_OF(NORM, RESIDUAL_ADD(AR_PLUS("add_bias", "bias"))), 4); \
	static const struct tpf_pattern pat_shared_##nm = FUSION(                                  \
	    "allreduce-shared-residual-" #nm,                                                      \
	    NORM_OF(NORM, RESIDUAL_ADD(AR_PLUS("add_shared", "shared"))), 4);                      \
	static const struct tpf_pattern pat_bias_##nm = FUSION(                                    \
	    "allreduce-bias-" #nm,                                                                 \
	    NORM_OF(NORM, TPF_PAT_OP(ADD, "add", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL,    \
				     AR_OPT_CAST, TPF_PAT_ANY("bias"))),                           \
	    3);                                                                                    \
	static const struct tpf_pattern pat_plain_##nm = FUSION(                                   \
	    "allreduce-" #nm,                                                                      \
	    NORM_OF(NORM, TPF_PAT_OP(MS_ALLREDUCE, "ar", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("a"))), \
	    2)

NORM_PATTERNS(TPF_RMS_NORM, rmsnorm);
NORM_PATTERNS(LAYER_NORMALIZATION, layernorm);

/* Add(AllReduce(a), AllReduce(b)) => AllReduce(Add(a, b)): the shared
 * expert's reduction merged into the routed experts' (one exchange). */
static const char *check_merge(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_node *a1 = tpf_match_node(m, "ar1"), *a2 = tpf_match_node(m, "ar2");
	struct tpf_value *x = tpf_match_value(m, "x"), *y = tpf_match_value(m, "y");
	if (!a1 || !a2 || !x || !y)
		return "incomplete match";
	const char *why = allreduces_differ(a1, a2);
	if (why)
		return why;
	enum tpf_dtype tx = tpf_pattern_dtype(x), ty = tpf_pattern_dtype(y);
	if (tx == TPF_DTYPE_UNDEFINED || tx != ty)
		return tpf_match_reason(m, "the partial sums have dtypes %s and %s",
		                        tpf_dtype_name(tx), tpf_dtype_name(ty));
	return NULL;
}

static enum tpf_status rewrite_merge(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *a1 = tpf_match_node(m, "ar1");
	struct tpf_value *out = m->root->outputs[0];
	struct tpf_value *in[2] = {tpf_match_value(m, "x"), tpf_match_value(m, "y")};
	enum tpf_status st;

	struct tpf_node *sum = tpf_rewriter_create(rw, TPF_OP_ADD, in, 2, 1, NULL);
	if (!sum)
		return TPF_ERR_NOMEM;
	if (out->type.kind != TPF_TYPE_NONE &&
	    (st = tpf_value_copy_type(sum->outputs[0], &out->type)))
		return st;
	struct tpf_node *ar = tpf_rewriter_create(rw, TPF_OP_MS_ALLREDUCE, sum->outputs, 1, 1, NULL);
	if (!ar)
		return TPF_ERR_NOMEM;
	static const char *const group[] = {"group_size", NULL};
	if ((st = tpf_rewriter_copy_attrs(ar, a1, group)))
		return st;
	if ((st = tpf_rewriter_replace(rw, out, ar->outputs[0])))
		return st;
	if ((st = tpf_rewriter_erase_dead(rw, m)))
		return st;
	/* the norm after the residual Add roots the fusion: look at it again */
	return tpf_rewriter_revisit_users(rw, ar->outputs[0]);
}

static const struct tpf_pattern pat_merge = {
	.name = "allreduce-add-allreduce",
	.root = TPF_PAT_OP(ADD, "sum", 0, NULL, TPF_PAT_OP(MS_ALLREDUCE, "ar1", 0, NULL, TPF_PAT_ANY("x")),
			   TPF_PAT_OP(MS_ALLREDUCE, "ar2", 0, NULL, TPF_PAT_ANY("y"))),
	.check = check_merge,
	.rewrite = rewrite_merge,
	.explain_min_nodes = 3,
};

/* The pass's counters are these patterns' names. */
static const struct tpf_pattern *const patterns[] = {
	&pat_residual_rmsnorm,   &pat_bias_residual_rmsnorm,   &pat_shared_rmsnorm,
	&pat_bias_rmsnorm,       &pat_plain_rmsnorm,           &pat_merge,
	&pat_residual_layernorm, &pat_bias_residual_layernorm, &pat_shared_layernorm,
	&pat_bias_layernorm,     &pat_plain_layernorm,         NULL};

/* A norm spelling canonicalize-rmsnorm turns into the canonical one (left
 * as it was: its near-miss line says why). */
static int is_norm_form(enum tpf_op op)
{
	return op == TPF_OP_RMS_NORMALIZATION || op == TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION ||
	       op == TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION ||
	       op == TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION;
}

/* The norms the patterns root at. */
static int is_fused_norm(enum tpf_op op)
{
	return op == TPF_OP_TPF_RMS_NORM || op == TPF_OP_LAYER_NORMALIZATION;
}

/* Whether v reaches a norm the patterns root at, or a spelling of one:
 * NORM(v), NORM(Add(v, .)) or NORM(Add(Add(v, shared or bias), .)). */
static const struct tpf_node *norm_after_depth(const struct tpf_value *v, int adds)
{
	for (size_t i = 0; i < v->n_uses; i++) {
		const struct tpf_node *u = v->uses[i].node;
		if ((is_fused_norm(u->op) || is_norm_form(u->op)) && v->uses[i].index == 0)
			return u;
		if (adds > 0 && u->op == TPF_OP_ADD && u->n_outputs && u->outputs[0]) {
			const struct tpf_node *n = norm_after_depth(u->outputs[0], adds - 1);
			if (n)
				return n;
		}
	}
	return NULL;
}

static const struct tpf_node *norm_after(const struct tpf_value *v)
{
	return norm_after_depth(v, 2);
}

/* --explain never leaves an AllReduce silent: one that no norm follows
 * (the patterns had no root to start from) gets a line naming what reads
 * it instead; one that a norm follows has that norm's near-miss line. */
static int explain_norm(FILE *f, const char *pass, const struct tpf_node *n)
{
	char buf[160], ubuf[160];
	const struct tpf_node *norm = norm_after(n->outputs[0]);

	if (!norm)
		return 0;
	if (!is_fused_norm(norm->op))
		fprintf(f, "unfused: %s at %s: the norm %s after it is not canonical "
			   "(canonicalize-rmsnorm's near-miss line says why)\n",
			pass, tpf_node_describe(n, buf, sizeof(buf)),
			tpf_node_describe(norm, ubuf, sizeof(ubuf)));
	else
		fprintf(f, "unfused: %s at %s: the norm %s after it did not match (its near-miss "
			   "line says why)\n",
			pass, tpf_node_describe(n, buf, sizeof(buf)),
			tpf_node_describe(norm, ubuf, sizeof(ubuf)));
	return 1;
}

static const struct tpf_unfused_explain unfused = {
	.pass = PASS_NAME,
	.op = TPF_OP_MS_ALLREDUCE,
	.value = "reduced",
	.reader = "norm",
	.wanted = "an RMSNorm, a LayerNormalization or a residual Add into one",
	.norm_line = explain_norm,
};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	enum tpf_status st = tpf_pattern_run(m, &tpf_pass_fuse_allreduce_rmsnorm, ctx, changed, d);
	if (!st && ctx && ctx->explain && m && m->graph)
		tpf_pattern_explain_unfused(m, ctx->explain, &unfused);
	return st;
}

const struct tpf_pass tpf_pass_fuse_allreduce_rmsnorm = {
	.name = PASS_NAME,
	.summary = "AllReduce [+ bias] [+ residual Add] + RMSNorm or LayerNormalization into "
	           "ai.tpfuse.AllReduceRMSNorm or AllReduceLayerNorm",
	.run = run,
	.patterns = patterns,
};
