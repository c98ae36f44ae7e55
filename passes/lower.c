/* SPDX-License-Identifier: MIT */
/*
 * Lowering to a backend: rewrites into the backend ops (ir/ops/backend.c,
 * docs/ops.md) that a backend's kernels run directly, run by the pipelines
 * lower-cpu and lower-cuda (tpf_lower_for_backend) on a model about to be
 * planned.  What depends on the concrete shapes of a run (the small-M
 * kernels of few rows, packed weights) stays the plan's choice of kernel.
 *
 *   lower-matmul-transb      MatMul(A, Transpose(B)), the Transpose swapping
 *                            the last two axes of B, a float dtype
 *       => ai.tpfuse.MatMulTransB(A, B)   (B read transposed: no copy of
 *                                          B, attention's K^T over a KV cache)
 *   lower-matmul-transb-int  the same of a 32- or 64-bit integer dtype, which
 *                            only the CPU's kernel runs (lower-cpu)
 *   lower-matmul-fp8         MatMul(DequantizeLinear(xq, sx), DequantizeLinear(wq, sw))
 *                            of FLOAT8E4M3FN codes, per-tensor scales
 *       => ai.tpfuse.MatMulFp8(xq, wq, sx, sw)   (the product on the codes)
 *   lower-gated-matmul       GatedActivation(MatMul(x, W)), packed = 1, W a
 *                            constant [K, 2F] (gate/up merged) of float,
 *                            float16 or bfloat16, the product read only by
 *                            the activation
 *       => ai.tpfuse.GatedMatMul(x, W)   (the activation's attributes; the
 *                                         plan packs W for the fused kernel
 *                                         when the rows are few, else two
 *                                         kernels)
 *
 * The Transpose and the dequantizations go when no other node reads them.
 * Refused, with a near-miss reason: a perm other than the swap of the last
 * two axes (or none), a B whose rank is not the perm's, a dtype unknown or
 * not the pass's; for fp8, a blockwise dequantization, a scale that is not
 * a positive float scalar constant (or an output_dtype other than its
 * dtype), a zero point that is not a zero constant, codes of another
 * dtype, a weight that is not a constant [K, N] with K and N multiples of
 * 16, dequantizations to two dtypes; for gated products, an unpacked
 * activation, a weight that is not a constant [K, 2F] or of another dtype.
 * TPF_FP8_GEMM=0 turns lower-matmul-fp8 off (the products dequantize, then
 * multiply), TPF_GEMV_GATED=0 lower-gated-matmul (the product, then the
 * activation).
 */
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

/* perm is given and swaps the last two axes only. */
static const char *pred_swap_last_two(const struct tpf_node *t, struct tpf_match *m)
{
	const struct tpf_attr *perm = tpf_node_attr(t, "perm");
	if (!perm || perm->kind != TPF_ATTR_INTS)
		return "no perm (the axes reversed)";
	size_t r = perm->n;
	int swap = r >= 2 && perm->ints[r - 2] == (int64_t)r - 1 && perm->ints[r - 1] == (int64_t)r - 2;
	for (size_t i = 0; swap && i + 2 < r; i++)
		swap = perm->ints[i] == (int64_t)i;
	(void)m;
	return swap ? NULL : "its perm does not swap the last two axes only";
}

static int is_float(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16 ||
	       t == TPF_DTYPE_DOUBLE;
}

static int is_product_int(enum tpf_dtype t)
{
	return t == TPF_DTYPE_INT32 || t == TPF_DTYPE_INT64 || t == TPF_DTYPE_UINT32 ||
	       t == TPF_DTYPE_UINT64;
}

/* B's dtype is one the pass's kernels take (ints: the integer pass). */
static const char *check_transb(struct tpf_match *m, int ints)
{
	struct tpf_value *b = tpf_match_value(m, "b");
	const struct tpf_attr *perm = tpf_node_attr(tpf_match_node(m, "t"), "perm");
	int r = tpf_pattern_rank(b);
	if (r >= 0 && (size_t)r != perm->n)
		return tpf_match_reason(m, "'%s' has rank %d, the perm %zu axes", b->name, r, perm->n);
	enum tpf_dtype dt = tpf_pattern_dtype(b);
	if (dt == TPF_DTYPE_UNDEFINED)
		return tpf_match_reason(m, "the dtype of '%s' is unknown", b->name);
	if (ints ? !is_product_int(dt) : !is_float(dt))
		return tpf_match_reason(m, "dtype %s is not %s", tpf_dtype_name(dt),
					ints ? "a 32- or 64-bit integer type" : "a float type");
	return NULL;
}

static const char *check_transb_float(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_transb(m, 0);
}

static const char *check_transb_int(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	return check_transb(m, 1);
}

/* The match's root becomes the backend op `op` of these inputs (and of
 * the root's attributes when `attrs`); the matched nodes nothing else
 * reads go. */
static enum tpf_status rewrite_as(struct tpf_rewriter *rw, struct tpf_match *m, enum tpf_op op,
				  struct tpf_value *const *in, size_t n_in, int attrs)
{
	struct tpf_value *out = m->root->outputs[0];
	enum tpf_status st;
	struct tpf_node *n = tpf_rewriter_create(rw, op, in, n_in, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; attrs && i < m->root->n_attrs; i++)
		if ((st = tpf_node_add_attr(n, &m->root->attrs[i])))
			return st;
	if (out->type.kind != TPF_TYPE_NONE && (st = tpf_value_copy_type(n->outputs[0], &out->type)))
		return st;
	if ((st = tpf_rewriter_replace(rw, out, n->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static enum tpf_status rewrite_transb(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *in[2] = {tpf_match_value(m, "a"), tpf_match_value(m, "b")};
	return rewrite_as(rw, m, TPF_OP_TPF_MATMUL_TRANS_B, in, 2, 0);
}

#define TRANSB_ROOT                                                                                \
	TPF_PAT_OP(MATMUL, "mm", 0, NULL, TPF_PAT_ANY("a"),                                        \
		   TPF_PAT_OP(TRANSPOSE, "t", TPF_PNODE_MULTI_USE, pred_swap_last_two, TPF_PAT_ANY("b")))

static const struct tpf_pattern pat_transb = {
	.name = "matmul-transb",
	.root = TRANSB_ROOT,
	.check = check_transb_float,
	.rewrite = rewrite_transb,
};

static const struct tpf_pattern pat_transb_int = {
	.name = "matmul-transb-int",
	.root = TRANSB_ROOT,
	.check = check_transb_int,
	.rewrite = rewrite_transb,
};

static const struct tpf_pattern *const transb_patterns[] = {&pat_transb, NULL};
static const struct tpf_pattern *const transb_int_patterns[] = {&pat_transb_int, NULL};

static enum tpf_status run_transb(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				  struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_lower_matmul_transb, ctx, changed, d);
}

static enum tpf_status run_transb_int(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				      struct tpf_diag *d)
{
	return tpf_pattern_run(m, &tpf_pass_lower_matmul_transb_int, ctx, changed, d);
}

const struct tpf_pass tpf_pass_lower_matmul_transb = {
	.name = "lower-matmul-transb",
	.summary = "MatMul(A, Transpose(B)) of floats into ai.tpfuse.MatMulTransB (backend op)",
	.run = run_transb,
	.patterns = transb_patterns,
};

const struct tpf_pass tpf_pass_lower_matmul_transb_int = {
	.name = "lower-matmul-transb-int",
	.summary = "MatMul(A, Transpose(B)) of integers into ai.tpfuse.MatMulTransB (the CPU's kernel)",
	.run = run_transb_int,
	.patterns = transb_int_patterns,
};

/* ------------------------------------------------------------ fp8 products */

static int is_scale_float(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT || t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16;
}

static int64_t numel_of(const struct tpf_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->dims[i];
	return n;
}

/* The dequantization bound to dq_name (codes, scale: its operands' names)
 * is one an fp8 product reads: NULL and *dt its output dtype, else why
 * not. */
static const char *check_fp8_dq(struct tpf_match *m, const char *dq_name, const char *codes,
				const char *scale, enum tpf_dtype *dt)
{
	const struct tpf_node *dq = tpf_match_node(m, dq_name);
	const struct tpf_value *s = tpf_match_value(m, scale), *x = tpf_match_value(m, codes);
	const struct tpf_tensor *st = tpf_value_constant(s);
	double sv;
	if (tpf_node_attr_int(dq, "block_size", 0) != 0)
		return tpf_match_reason(m, "'%s' dequantizes blockwise", dq->name);
	if (!st || numel_of(st) != 1 || tpf_pattern_const_scalar(s, &sv))
		return tpf_match_reason(m, "the scale '%s' is not a scalar", s->name);
	if (!is_scale_float(st->dtype))
		return tpf_match_reason(m, "the scale '%s' is %s", s->name, tpf_dtype_name(st->dtype));
	int64_t odt = tpf_node_attr_int(dq, "output_dtype", 0);
	if (odt && odt != (int64_t)st->dtype)
		return tpf_match_reason(m, "'%s' has an output_dtype other than its scale's", dq->name);
	if (!(sv > 0 && sv < 1e30))
		return tpf_match_reason(m, "the scale '%s' is %g", s->name, sv);
	enum tpf_dtype xdt;
	if (dq->n_inputs > 2 && dq->inputs[2]) {
		/* the codes' dtype is the zero point's (the spec makes them equal) */
		const struct tpf_tensor *zt = tpf_value_constant(dq->inputs[2]);
		if (!zt || (!zt->data && zt->nbytes))
			return tpf_match_reason(m, "the zero point of '%s' is not a constant", dq->name);
		for (size_t b = 0; b < zt->nbytes; b++)
			if (((const uint8_t *)zt->data)[b])
				return tpf_match_reason(m, "the zero point of '%s' is not zero", dq->name);
		xdt = zt->dtype;
	} else {
		xdt = tpf_pattern_dtype(x);
	}
	if (xdt != TPF_DTYPE_FLOAT8E4M3FN)
		return tpf_match_reason(m, "the codes '%s' are %s, not f8e4m3fn", x->name,
					xdt == TPF_DTYPE_UNDEFINED ? "of unknown dtype" : tpf_dtype_name(xdt));
	*dt = st->dtype;
	return NULL;
}

static const char *check_fp8(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	enum tpf_dtype a, b;
	const char *why;
	(void)pc;
	if ((why = check_fp8_dq(m, "dx", "xq", "sx", &a)) || (why = check_fp8_dq(m, "dw", "wq", "sw", &b)))
		return why;
	const struct tpf_value *wq = tpf_match_value(m, "wq");
	const struct tpf_tensor *w = tpf_value_constant(wq);
	if (!w || w->rank != 2 || w->dims[0] % 16 || w->dims[1] % 16 || numel_of(w) == 0)
		return tpf_match_reason(m, "the weight '%s' is not [K, N] with K and N multiples of 16",
					wq->name);
	if (a != b)
		return tpf_match_reason(m, "the operands dequantize to %s and %s", tpf_dtype_name(a),
					tpf_dtype_name(b));
	return NULL;
}

static enum tpf_status rewrite_fp8(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *in[4] = {tpf_match_value(m, "xq"), tpf_match_value(m, "wq"), tpf_match_value(m, "sx"),
				   tpf_match_value(m, "sw")};
	return rewrite_as(rw, m, TPF_OP_TPF_MATMUL_FP8, in, 4, 0);
}

#define FP8_DQ(nm, codes, scale)                                                                   \
	TPF_PAT_OP(DEQUANTIZE_LINEAR, nm, TPF_PNODE_MULTI_USE | TPF_PNODE_EXTRA_INPUTS, NULL, codes, scale)

static const struct tpf_pattern pat_fp8 = {
	.name = "matmul-fp8",
	.root = TPF_PAT_OP(MATMUL, "mm", 0, NULL, FP8_DQ("dx", TPF_PAT_ANY("xq"), TPF_PAT_CONST("sx")),
			   FP8_DQ("dw", TPF_PAT_CONST("wq"), TPF_PAT_CONST("sw"))),
	.check = check_fp8,
	.rewrite = rewrite_fp8,
};

static const struct tpf_pattern *const fp8_patterns[] = {&pat_fp8, NULL};

static enum tpf_status run_fp8(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			       struct tpf_diag *d)
{
	/* TPF_FP8_GEMM (kernels/env.c's table): "0" off, "1" or unset on */
	const char *env = getenv("TPF_FP8_GEMM");
	if (env && !strcmp(env, "0"))
		return TPF_OK;
	return tpf_pattern_run(m, &tpf_pass_lower_matmul_fp8, ctx, changed, d);
}

const struct tpf_pass tpf_pass_lower_matmul_fp8 = {
	.name = "lower-matmul-fp8",
	.summary = "MatMul of two FLOAT8E4M3FN dequantizations into ai.tpfuse.MatMulFp8 (backend op)",
	.run = run_fp8,
	.patterns = fp8_patterns,
};

/* ------------------------------------------------------------ gated products */

/* packed = 1: one input, the merged gate/up product. */
static const char *pred_packed(const struct tpf_node *g, struct tpf_match *m)
{
	(void)m;
	return tpf_node_attr_int(g, "packed", 0) == 1 ? NULL : "it is not packed (two inputs, gate and up)";
}

/* W is a constant [K, 2F] of a dtype the gated kernels take. */
static const char *check_gated(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	const struct tpf_value *wv = tpf_match_value(m, "w");
	const struct tpf_tensor *w = tpf_value_constant(wv);
	(void)pc;
	if (!w || w->rank != 2 || w->dims[1] % 2 || numel_of(w) == 0)
		return tpf_match_reason(m, "the weight '%s' is not a constant [K, 2F]", wv->name);
	if (!is_scale_float(w->dtype))
		return tpf_match_reason(m, "the weight '%s' is %s, not float, float16 or bfloat16", wv->name,
					tpf_dtype_name(w->dtype));
	return NULL;
}

/* The activation, root of the match, becomes GatedMatMul(x, W) with its
 * attributes; the MatMul goes. */
static enum tpf_status rewrite_gated(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *in[2] = {tpf_match_value(m, "x"), tpf_match_value(m, "w")};
	return rewrite_as(rw, m, TPF_OP_TPF_GATED_MATMUL, in, 2, 1);
}

static const struct tpf_pattern pat_gated = {
	.name = "gated-matmul",
	.root = TPF_PAT_OP(TPF_GATED_ACTIVATION, "act", 0, pred_packed,
			   TPF_PAT_OP(MATMUL, "mm", 0, NULL, TPF_PAT_ANY("x"), TPF_PAT_ANY("w"))),
	.check = check_gated,
	.rewrite = rewrite_gated,
};

static const struct tpf_pattern *const gated_patterns[] = {&pat_gated, NULL};

static enum tpf_status run_gated(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				 struct tpf_diag *d)
{
	/* TPF_GEMV_GATED (kernels/env.c's table): "0" off, "1" or unset on */
	const char *env = getenv("TPF_GEMV_GATED");
	if (env && !strcmp(env, "0"))
		return TPF_OK;
	return tpf_pattern_run(m, &tpf_pass_lower_gated_matmul, ctx, changed, d);
}

const struct tpf_pass tpf_pass_lower_gated_matmul = {
	.name = "lower-gated-matmul",
	.summary = "GatedActivation (packed) of MatMul(x, W), W a constant [K, 2F], into ai.tpfuse.GatedMatMul",
	.run = run_gated,
	.patterns = gated_patterns,
};

/* ------------------------------------------------------------ the entry point */

enum tpf_status tpf_lower_for_backend(struct tpf_model *m, const char *backend, struct tpf_pass_context *ctx,
				      struct tpf_diag *d)
{
	struct tpf_pipeline_options po = {0};
	if (!backend || (strcmp(backend, "cpu") && strcmp(backend, "cuda")))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "no lowering for backend '%s' (cpu, cuda)",
				     backend ? backend : "(none)");
	po.passes = strcmp(backend, "cpu") ? "lower-cuda" : "lower-cpu";
	if (ctx)
		po.ctx = *ctx;
	/* the pipeline's "matched nothing" notes say nothing about a model
	 * about to run: only errors and warnings reach d */
	struct tpf_diag *own = tpf_diag_create();
	if (!own)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = tpf_pipeline_run(m, &po, own);
	for (size_t i = 0; i < own->count; i++)
		if (own->entries[i].severity != TPF_SEV_NOTE)
			tpf_diag_add(d, own->entries[i].severity, "%s", own->entries[i].text);
	tpf_diag_free(own);
	return st;
}
