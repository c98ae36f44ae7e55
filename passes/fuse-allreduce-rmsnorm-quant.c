/* SPDX-License-Identifier: MIT */
/*
 * fuse-allreduce-rmsnorm-quant: an ai.tpfuse.AllReduceRMSNorm whose norm
 * output is quantized becomes one ai.tpfuse.AllReduceRMSNormQuant
 * (docs/ops.md) that writes the quantized data directly:
 *
 *   QuantizeLinear(norm_out, scalar scale, FLOAT8E4M3FN zero point)   quant="fp8"
 *   trt::TRT_FP4DynamicQuantize(norm_out, global scale)               quant="nvfp4"
 *       (FP4 E2M1 data + FP8 E4M3 scales of 16-element blocks)
 *   QuantizeLinear(norm_out, block scales, FLOAT4E2M1 zero point,
 *                  block_size=16, last axis)                          quant="nvfp4-block"
 *
 * Every quantizer of the same norm output with the same scale and settings
 * shares the one quantized output.  The high-precision norm is still
 * emitted (output 3) only when other consumers read it.  Run after
 * fuse-allreduce-rmsnorm.
 */
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-allreduce-rmsnorm-quant"

enum quant_kind { QUANT_FP8, QUANT_NVFP4, QUANT_NVFP4_BLOCK, QUANT_KIND_COUNT };

static const char *const quant_names[QUANT_KIND_COUNT] = {"fp8", "nvfp4", "nvfp4-block"};

struct quant_facts {
	enum quant_kind kind;
};

/* The zero point's dtype, or the output_dtype attribute when it is absent. */
static enum tpf_dtype quant_out_dtype(const struct tpf_node *q)
{
	if (q->n_inputs > 2 && q->inputs[2])
		return tpf_pattern_dtype(q->inputs[2]);
	return (enum tpf_dtype)tpf_node_attr_int(q, "output_dtype", TPF_DTYPE_UINT8);
}

static const char *zero_point_ok(const struct tpf_node *q, struct tpf_match *m)
{
	double z;
	if (q->n_inputs > 2 && q->inputs[2] &&
	    (tpf_pattern_const_scalar(q->inputs[2], &z) || z != 0.0)) {
		const struct tpf_tensor *t = tpf_value_constant(q->inputs[2]);
		if (!t)
			return "the zero point is not a constant";
		/* a blocked zero point: every element must be zero */
		const unsigned char *p = t->data;
		for (size_t i = 0; p && i < t->nbytes; i++)
			if ((p[i] & (t->dtype == TPF_DTYPE_FLOAT4E2M1 ? 0x77 : 0x7f)) != 0)
				return tpf_match_reason(m, "the zero point '%s' is not 0",
				                        q->inputs[2]->name);
		if (!p && t->nbytes)
			return "the zero point has no data";
	}
	return NULL;
}

static const char *pred_fp8(const struct tpf_node *q, struct tpf_match *m)
{
	enum tpf_dtype t = quant_out_dtype(q);
	if (t != TPF_DTYPE_FLOAT8E4M3FN)
		return tpf_match_reason(m, "quantizes to %s, not %s", tpf_dtype_name(t),
		                        tpf_dtype_name(TPF_DTYPE_FLOAT8E4M3FN));
	if (tpf_node_attr_int(q, "block_size", 0) != 0)
		return "blocked FP8 quantization";
	return zero_point_ok(q, m);
}

static int last_axis(const struct tpf_node *q, int64_t axis)
{
	int r = tpf_pattern_rank(q->inputs[0]);
	return axis == -1 || (r > 0 && axis == r - 1);
}

static const char *pred_fp4_block(const struct tpf_node *q, struct tpf_match *m)
{
	enum tpf_dtype t = quant_out_dtype(q);
	if (t != TPF_DTYPE_FLOAT4E2M1)
		return tpf_match_reason(m, "quantizes to %s, not %s", tpf_dtype_name(t),
		                        tpf_dtype_name(TPF_DTYPE_FLOAT4E2M1));
	int64_t bs = tpf_node_attr_int(q, "block_size", 0);
	if (bs != 16)
		return tpf_match_reason(m, "block_size %lld, NVFP4 uses 16", (long long)bs);
	if (!last_axis(q, tpf_node_attr_int(q, "axis", 1)))
		return "the blocks do not run along the last axis";
	return zero_point_ok(q, m);
}

static const char *pred_trt_fp4(const struct tpf_node *q, struct tpf_match *m)
{
	int64_t bs = tpf_node_attr_int(q, "block_size", 16);
	if (bs != 16)
		return tpf_match_reason(m, "block_size %lld, NVFP4 uses 16", (long long)bs);
	if (!last_axis(q, tpf_node_attr_int(q, "axis", -1)))
		return "the blocks do not run along the last axis";
	int64_t st = tpf_node_attr_int(q, "scale_type", TPF_DTYPE_FLOAT8E4M3FN);
	if (st != TPF_DTYPE_FLOAT8E4M3FN)
		return tpf_match_reason(m, "block scales of dtype %s, not %s",
		                        tpf_dtype_name((enum tpf_dtype)st),
		                        tpf_dtype_name(TPF_DTYPE_FLOAT8E4M3FN));
	return NULL;
}

static int same_constant(const struct tpf_value *a, const struct tpf_value *b)
{
	if (a == b)
		return 1;
	if (!a || !b)
		return 0;
	const struct tpf_tensor *x = tpf_value_constant(a), *y = tpf_value_constant(b);
	if (!x || !y || x->dtype != y->dtype || x->rank != y->rank || x->nbytes != y->nbytes)
		return 0;
	for (int i = 0; i < x->rank; i++)
		if (x->dims[i] != y->dims[i])
			return 0;
	return x->nbytes == 0 || (x->data && y->data && !memcmp(x->data, y->data, x->nbytes));
}

static int same_int_attr(const struct tpf_node *a, const struct tpf_node *b, const char *name,
			 int64_t dflt)
{
	return tpf_node_attr_int(a, name, dflt) == tpf_node_attr_int(b, name, dflt);
}

/* Whether quantizer `o` computes exactly what the matched root does. */
static int equivalent_quantizer(const struct tpf_node *root, const struct tpf_node *o)
{
	if (o == root)
		return 1;
	if (o->op != root->op || o->n_inputs != root->n_inputs || o->n_outputs != root->n_outputs ||
	    o->inputs[0] != root->inputs[0])
		return 0;
	for (size_t i = 1; i < o->n_inputs; i++)
		if (!same_constant(o->inputs[i], root->inputs[i]))
			return 0;
	return same_int_attr(o, root, "axis", root->op == TPF_OP_QUANTIZE_LINEAR ? 1 : -1) &&
	       same_int_attr(o, root, "block_size", root->op == TPF_OP_QUANTIZE_LINEAR ? 0 : 16) &&
	       same_int_attr(o, root, "saturate", 1) && same_int_attr(o, root, "output_dtype", 0) &&
	       same_int_attr(o, root, "scale_type", TPF_DTYPE_FLOAT8E4M3FN);
}

static const char *check_common(struct tpf_match *m, enum quant_kind kind)
{
	struct quant_facts *f = (struct quant_facts *)m->facts;
	struct tpf_node *q = m->root;
	struct tpf_value *scale = tpf_match_value(m, "scale");

	f->kind = kind;
	if (!scale)
		return "incomplete match";
	/* the quantizing op's norm_out has the input's dtype (a norm given in
	 * gamma's dtype stays an AllReduceRMSNorm) */
	struct tpf_node *fused = tpf_match_node(m, "fused");
	enum tpf_dtype t_in = fused ? tpf_pattern_dtype(fused->inputs[0]) : TPF_DTYPE_UNDEFINED;
	enum tpf_dtype t_norm = fused ? tpf_pattern_dtype(fused->outputs[0]) : TPF_DTYPE_UNDEFINED;
	if (t_in != t_norm)
		return tpf_match_reason(m, "the norm is %s, the reduced value %s: the quantizing op "
					   "normalizes in the reduced value's dtype",
					tpf_dtype_name(t_norm), tpf_dtype_name(t_in));
	if (fused && fused->n_inputs > 2 && fused->inputs[2] &&
	    tpf_pattern_dtype(fused->inputs[2]) != t_in)
		return tpf_match_reason(m, "the residual is %s, the reduced value %s: the quantizing "
					   "op sums in the reduced value's dtype",
					tpf_dtype_name(tpf_pattern_dtype(fused->inputs[2])),
					tpf_dtype_name(t_in));
	if (fused && fused->n_inputs > 3 && fused->inputs[3])
		return "the fused norm adds a bias after the reduction: the quantizing op has no "
		       "bias input";
	if (kind == QUANT_FP8) {
		const struct tpf_tensor *t = tpf_value_constant(scale);
		if (!t || tpf_tensor_numel(t) != 1)
			return tpf_match_reason(
			    m, "scale '%s' is not a scalar (per-channel or blocked)", scale->name);
	}
	if (q->n_outputs < (kind == QUANT_NVFP4 ? 2u : 1u) || !q->outputs[0])
		return "the quantizer has fewer outputs than expected";
	return NULL;
}

static const char *check_fp8(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_common(m, QUANT_FP8);
}

static const char *check_nvfp4(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_common(m, QUANT_NVFP4);
}

static const char *check_nvfp4_block(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_common(m, QUANT_NVFP4_BLOCK);
}

enum { OUT_Y, OUT_RESIDUAL, OUT_Y_SCALE, OUT_NORM, OUT_COUNT };

static enum tpf_status rewrite_quant(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct quant_facts *f = (const struct quant_facts *)m->facts;
	struct tpf_node *q = m->root, *fused = tpf_match_node(m, "fused");
	struct tpf_value *norm_out = fused->outputs[0];
	struct tpf_value *res_out = fused->n_outputs > 1 ? fused->outputs[1] : NULL;
	struct tpf_value *residual = fused->n_inputs > 2 ? fused->inputs[2] : NULL;
	struct tpf_value *in[4] = {fused->inputs[0], fused->inputs[1], tpf_match_value(m, "scale"),
	                           residual};
	enum tpf_status st = TPF_OK;
	struct tpf_node **group = NULL;
	size_t n_group = 0;

	/* the quantizers that share the output, in use order */
	group = tpf_malloc((norm_out->n_uses + 1) * sizeof(*group));
	if (!group)
		return TPF_ERR_NOMEM;
	size_t other_uses = tpf_value_use_count(norm_out) - norm_out->n_uses; /* graph outputs */
	for (size_t i = 0; i < norm_out->n_uses; i++) {
		struct tpf_node *u = norm_out->uses[i].node;
		int dup = 0;
		for (size_t j = 0; j < n_group; j++)
			dup |= group[j] == u;
		if (dup)
			continue;
		if (norm_out->uses[i].index == 0 && equivalent_quantizer(q, u))
			group[n_group++] = u;
		else
			other_uses++;
	}

	const char *names[OUT_COUNT] = {NULL, "", "", ""};
	size_t n_out = 1;
	if (res_out && tpf_value_use_count(res_out)) {
		names[OUT_RESIDUAL] = NULL;
		n_out = OUT_RESIDUAL + 1;
	}
	if (f->kind == QUANT_NVFP4) {
		names[OUT_Y_SCALE] = NULL;
		n_out = OUT_Y_SCALE + 1;
	}
	if (other_uses) {
		names[OUT_NORM] = NULL;
		n_out = OUT_NORM + 1;
	}
	struct tpf_node *nf = tpf_rewriter_create(rw, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT, in,
	                                          residual ? 4 : 3, n_out, names);
	if (!nf) {
		st = TPF_ERR_NOMEM;
		goto out_free_group;
	}
	static const char *const attrs[] = {"epsilon", "axis", "stash_type", "weight_offset",
	                                    "group_size", NULL};
	if ((st = tpf_rewriter_copy_attrs(nf, fused, attrs)))
		goto out_free_group;
	if ((st = tpf_node_set_attr_string(nf, "quant", quant_names[f->kind])))
		goto out_free_group;
	if (f->kind == QUANT_FP8) {
		st = tpf_node_set_attr_int(nf, "saturate", tpf_node_attr_int(q, "saturate", 1));
	} else {
		st = tpf_node_set_attr_int(nf, "block_size", 16);
	}
	if (st)
		goto out_free_group;

	/* types first: the replaced values hand theirs over */
	for (size_t i = 0; i < n_group; i++) {
		if ((st = tpf_rewriter_replace(rw, group[i]->outputs[0], nf->outputs[OUT_Y])))
			goto out_free_group;
		if (f->kind == QUANT_NVFP4 && group[i]->n_outputs > 1 && group[i]->outputs[1] &&
		    (st = tpf_rewriter_replace(rw, group[i]->outputs[1], nf->outputs[OUT_Y_SCALE])))
			goto out_free_group;
	}
	if (n_out > OUT_RESIDUAL && nf->outputs[OUT_RESIDUAL] &&
	    (st = tpf_rewriter_replace(rw, res_out, nf->outputs[OUT_RESIDUAL])))
		goto out_free_group;
	if (other_uses && (st = tpf_rewriter_replace(rw, norm_out, nf->outputs[OUT_NORM])))
		goto out_free_group;
	for (size_t i = 0; i < n_group; i++)
		if ((st = tpf_rewriter_erase_if_dead(rw, group[i])))
			goto out_free_group;
	st = tpf_rewriter_erase_dead(rw, m);

out_free_group:
	tpf_free(group);
	return st;
}

#define FUSED_OPERAND                                                                              \
	TPF_PAT_OP(TPF_ALLREDUCE_RMS_NORM, "fused", TPF_PNODE_MULTI_USE | TPF_PNODE_EXTRA_INPUTS,  \
		   NULL, TPF_PAT_ANY("a"), TPF_PAT_ANY("gamma"))

static const struct tpf_pattern pat_fp8 = {
	.name = "fp8",
	.root = TPF_PAT_OP(QUANTIZE_LINEAR, "q", TPF_PNODE_EXTRA_INPUTS, pred_fp8, FUSED_OPERAND,
			   TPF_PAT_CONST("scale")),
	.check = check_fp8,
	.rewrite = rewrite_quant,
	.explain_min_nodes = 2,
};

static const struct tpf_pattern pat_nvfp4 = {
	.name = "nvfp4",
	.root = TPF_PAT_OP(TRT_FP4_DYNAMIC_QUANTIZE, "q", 0, pred_trt_fp4, FUSED_OPERAND,
			   TPF_PAT_CONST("scale")),
	.check = check_nvfp4,
	.rewrite = rewrite_quant,
	.explain_min_nodes = 2,
};

static const struct tpf_pattern pat_nvfp4_block = {
	.name = "nvfp4-block",
	.root = TPF_PAT_OP(QUANTIZE_LINEAR, "q", TPF_PNODE_EXTRA_INPUTS, pred_fp4_block, FUSED_OPERAND,
			   TPF_PAT_CONST("scale")),
	.check = check_nvfp4_block,
	.rewrite = rewrite_quant,
	.explain_min_nodes = 2,
};

/* The pass's counters are these patterns' names. */
static const struct tpf_pattern *const patterns[] = {&pat_fp8, &pat_nvfp4, &pat_nvfp4_block, NULL};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_fuse_allreduce_rmsnorm_quant, ctx, changed, d);
}

const struct tpf_pass tpf_pass_fuse_allreduce_rmsnorm_quant = {
	.name = PASS_NAME,
	.summary = "AllReduceRMSNorm + FP8 or NVFP4 quantize into ai.tpfuse.AllReduceRMSNormQuant",
	.run = run,
	.patterns = patterns,
};
