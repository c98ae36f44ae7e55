/* SPDX-License-Identifier: MIT */
/*
 * fuse-residual-rmsnorm: the residual add before an RMSNorm goes into the
 * norm, which then also gives the sum (docs/ops.md, ai.tpfuse.RMSNorm):
 *
 *   RMSNorm(Add(x, residual), gamma)
 *       => RMSNorm(x, gamma, residual) -> (Y, residual_out = the sum)
 *
 * One kernel reads x and the residual, writes the sum for the next residual
 * add and the normalized row: a decoder layer on one device (or any norm
 * whose residual add no AllReduce precedes) launches one kernel where it
 * launched two, and reads the sum once.  The kernels round the sum to its
 * dtype before normalizing, as the Add does, so the result is the unfused
 * graph's.  It runs after fuse-allreduce-rmsnorm, which takes the adds an
 * AllReduce feeds, and fuse-sigmoid-gate, whose gate Add must stay an Add.
 *
 * Refused: addends of another dtype than each other or than the sum, an
 * addend that broadcasts (the fused norm adds elementwise), a sum whose
 * shape is unknown, and norms that already carry a residual.
 */
#include "pattern.h"

#define PASS_NAME "fuse-residual-rmsnorm"

static const char *check_residual(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_node *add = tpf_match_node(m, "add");
	if (!add || add->n_inputs != 2 || !add->inputs[0] || !add->inputs[1])
		return "incomplete match";
	struct tpf_value *x = add->inputs[0], *r = add->inputs[1], *sum = add->outputs[0];
	enum tpf_dtype tx = tpf_pattern_dtype(x), tr = tpf_pattern_dtype(r), ts = tpf_pattern_dtype(sum);
	if (tx == TPF_DTYPE_UNDEFINED || tr == TPF_DTYPE_UNDEFINED)
		return "the dtype of an addend is unknown";
	if (!tpf_dtype_is_float(tx))
		return tpf_match_reason(m, "the sum is %s, not a float type", tpf_dtype_name(tx));
	if (tx != tr || (ts != TPF_DTYPE_UNDEFINED && ts != tx))
		return tpf_match_reason(m, "the addends are %s and %s, the sum %s: the fused norm adds "
		                           "in one dtype",
		                        tpf_dtype_name(tx), tpf_dtype_name(tr),
		                        ts == TPF_DTYPE_UNDEFINED ? "of unknown dtype" : tpf_dtype_name(ts));
	if (tpf_pattern_rank(x) < 1 || tpf_pattern_rank(sum) < 0)
		return "the sum's shape is unknown";
	if (tpf_pattern_shapes_differ(x, sum) || tpf_pattern_shapes_differ(r, sum))
		return tpf_match_reason(m, "'%s' + '%s' broadcasts: the fused norm adds elementwise", x->name,
		                        r->name);
	return NULL;
}

static enum tpf_status rewrite_residual(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *norm = m->root, *add = tpf_match_node(m, "add");
	struct tpf_value *sum = add->outputs[0];
	struct tpf_value *in[3] = {add->inputs[0], norm->inputs[1], add->inputs[1]};
	/* the next residual add (or an output: use counts include them) keeps
	 * reading the sum */
	int need_sum = tpf_value_use_count(sum) > 1;
	enum tpf_status st;
	struct tpf_node *f = tpf_rewriter_create(rw, TPF_OP_TPF_RMS_NORM, in, 3, need_sum ? 2 : 1, NULL);
	if (!f)
		return TPF_ERR_NOMEM;
	static const char *const attrs[] = {"epsilon", "axis", "stash_type", "weight_offset", "output_type", NULL};
	if ((st = tpf_rewriter_copy_attrs(f, norm, attrs)))
		return st;
	if ((st = tpf_rewriter_replace(rw, norm->outputs[0], f->outputs[0])))
		return st;
	if (need_sum && (st = tpf_rewriter_replace(rw, sum, f->outputs[1])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_residual = {
	.name = "residual-rmsnorm",
	.root = TPF_PAT_OP(TPF_RMS_NORM, "norm", 0, NULL,
			   TPF_PAT_OP(ADD, "add", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("x"), TPF_PAT_ANY("r")),
			   TPF_PAT_ANY("gamma")),
	.check = check_residual,
	.rewrite = rewrite_residual,
	.explain_min_nodes = 2,
};

static const struct tpf_pattern *const patterns[] = {&pat_residual, NULL};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_fuse_residual_rmsnorm, ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_residual_rmsnorm = {
	.name = PASS_NAME,
	.summary = "residual Add + RMSNorm into ai.tpfuse.RMSNorm(x, gamma, residual), which also "
	           "gives the sum",
	.run = run,
	.patterns = patterns,
};
