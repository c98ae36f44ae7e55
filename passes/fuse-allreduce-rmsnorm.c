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
 * Refused: norm input and gamma (or residual) dtypes that differ, a norm
 * over another axis than the last, a residual that broadcasts, and (with a
 * residual) an AllReduce output with users besides the Add: the fused op
 * does not output the bare reduced value.
 */
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-allreduce-rmsnorm"

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
	int64_t hidden, numel = -1;
	if (gamma->type.kind == TPF_TYPE_TENSOR && gamma->type.shape.rank >= 0)
		numel = tpf_shape_numel(&gamma->type.shape);
	if ((tpf_pattern_last_dim(x, &hidden) || tpf_pattern_last_dim(a, &hidden)) && numel >= 0 &&
	    numel != hidden)
		return tpf_match_reason(m, "gamma '%s' has %lld elements, the last dimension %lld",
		                        gamma->name, (long long)numel, (long long)hidden);
	return NULL;
}

static enum tpf_status copy_attr(struct tpf_node *dst, const struct tpf_node *src, const char *name)
{
	const struct tpf_attr *a = tpf_node_attr(src, name);
	return a ? tpf_node_add_attr(dst, a) : TPF_OK;
}

static enum tpf_status rewrite_fusion(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *norm = m->root;
	struct tpf_node *ar = tpf_match_node(m, "ar");
	struct tpf_node *add = tpf_match_node(m, "add");
	struct tpf_value *residual = tpf_match_value(m, "residual");
	struct tpf_value *in[3] = {tpf_match_value(m, "a"), tpf_match_value(m, "gamma"), residual};
	/* the value other users keep reading: the sum, or the bare reduction */
	struct tpf_value *sum = add ? add->outputs[0] : ar->outputs[0];
	/* with the reduction widened into the residual's type, residual_out is
	 * always written: the kernels round the sum to its buffer's type */
	int need_sum = tpf_value_use_count(sum) > 1 || tpf_match_node(m, "ar_cast");
	enum tpf_status st;

	struct tpf_node *f = tpf_rewriter_create(rw, TPF_OP_TPF_ALLREDUCE_RMS_NORM, in,
	                                         residual ? 3 : 2, need_sum ? 2 : 1, NULL);
	if (!f)
		return TPF_ERR_NOMEM;
	static const char *const attrs[] = {"epsilon", "axis", "stash_type", "weight_offset",
	                                    "output_type"};
	for (size_t i = 0; i < sizeof(attrs) / sizeof(attrs[0]); i++)
		if ((st = copy_attr(f, norm, attrs[i])))
			return st;
	if ((st = copy_attr(f, ar, "group_size")))
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

static const struct tpf_pattern pat_residual = {
	.name = "allreduce-residual-rmsnorm",
	.root = TPF_PAT_OP(TPF_RMS_NORM, "norm", 0, NULL,
			   TPF_PAT_OP(ADD, "add", TPF_PNODE_COMMUTE | TPF_PNODE_MULTI_USE, NULL,
				      &(const struct tpf_pnode){
					  .kind = TPF_PNODE_OP,
					  .op = TPF_OP_MS_ALLREDUCE,
					  .name = "ar",
					  .flags = TPF_PNODE_OPT_CAST,
					  .cast_name = "ar_cast",
					  .operands = (const struct tpf_pnode *const[]){TPF_PAT_ANY("a"),
											NULL},
				      },
				      TPF_PAT_ANY("residual")),
			   TPF_PAT_ANY("gamma")),
	.check = check_fusion,
	.rewrite = rewrite_fusion,
	.explain_min_nodes = 2,
};

static const struct tpf_pattern pat_plain = {
	.name = "allreduce-rmsnorm",
	.root = TPF_PAT_OP(TPF_RMS_NORM, "norm", 0, NULL,
			   TPF_PAT_OP(MS_ALLREDUCE, "ar", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("a")),
			   TPF_PAT_ANY("gamma")),
	.check = check_fusion,
	.rewrite = rewrite_fusion,
	.explain_min_nodes = 2,
};

/* The pass's counters are these patterns' names. */
static const struct tpf_pattern *const patterns[] = {&pat_residual, &pat_plain, NULL};

/* Whether v reaches a norm the patterns root at: RMSNorm(v) or
 * RMSNorm(Add(v, .)). */
static const struct tpf_node *norm_after(const struct tpf_value *v)
{
	for (size_t i = 0; i < v->n_uses; i++) {
		const struct tpf_node *u = v->uses[i].node;
		if (u->op == TPF_OP_TPF_RMS_NORM && v->uses[i].index == 0)
			return u;
		if (u->op == TPF_OP_ADD && u->n_outputs && u->outputs[0])
			for (size_t j = 0; j < u->outputs[0]->n_uses; j++)
				if (u->outputs[0]->uses[j].node->op == TPF_OP_TPF_RMS_NORM &&
				    u->outputs[0]->uses[j].index == 0)
					return u->outputs[0]->uses[j].node;
	}
	return NULL;
}

/* --explain never leaves an AllReduce silent: one that no norm follows
 * (the patterns had no root to start from) gets a line naming what reads
 * it instead; one that a norm follows has that norm's near-miss line. */
static void explain_unfused(const struct tpf_graph *g, FILE *f)
{
	char buf[160], ubuf[160];

	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (n->op != TPF_OP_MS_ALLREDUCE || !n->n_outputs || !n->outputs[0])
			continue;
		const struct tpf_value *v = n->outputs[0];
		const struct tpf_node *norm = norm_after(v);
		if (norm) {
			fprintf(f, "unfused: %s at %s: the norm %s after it did not match (its near-miss "
				   "line says why)\n",
				PASS_NAME, tpf_node_describe(n, buf, sizeof(buf)),
				tpf_node_describe(norm, ubuf, sizeof(ubuf)));
			continue;
		}
		if (!v->n_uses) {
			fprintf(f, "unfused: %s at %s: %s\n", PASS_NAME,
				tpf_node_describe(n, buf, sizeof(buf)),
				tpf_value_use_count(v) ? "the reduced value is a graph output, no "
							 "norm reads it"
						       : "nothing reads the reduced value");
			continue;
		}
		const struct tpf_node *u = v->uses[0].node;
		fprintf(f, "unfused: %s at %s: the reduced value feeds %s (and %zu other uses), "
			   "not an RMSNorm or a residual Add into one\n",
			PASS_NAME, tpf_node_describe(n, buf, sizeof(buf)),
			tpf_node_describe(u, ubuf, sizeof(ubuf)), v->n_uses - 1);
	}
}

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	enum tpf_status st = tpf_pattern_run(m, &tpf_pass_fuse_allreduce_rmsnorm, ctx, changed, d);
	if (!st && ctx && ctx->explain && m && m->graph)
		explain_unfused(m->graph, ctx->explain);
	return st;
}

const struct tpf_pass tpf_pass_fuse_allreduce_rmsnorm = {
	.name = PASS_NAME,
	.summary = "AllReduce [+ residual Add] + RMSNorm into ai.tpfuse.AllReduceRMSNorm",
	.run = run,
	.patterns = patterns,
};
