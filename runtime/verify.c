/* SPDX-License-Identifier: MIT */
/* The comparison of `tpfuse run --verify` (tpf_verify_outputs,
 * tpf-runtime.h): the optimized graph's outputs against the unfused graph's.
 * It writes its report to the stream the caller passes and nothing else. */
#include "tpf-runtime.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/*
 * tpf_verify_outputs compares the optimized graph's outputs with the
 * unfused graph's, output by output, on one rank.
 *
 * Every output: each element within its dtype's bound,
 * |got - ref| <= atol + rtol * |ref| (verify_dtype_bound).  The fused kernels
 * do the unfused chain's arithmetic in another order and keep intermediates
 * in registers: the float32 outputs of every example differ by under 1e-6
 * (CPU and CUDA ranks), so 1e-5 leaves room for longer reductions; bfloat16
 * ones by a bf16 step or two of the intermediates; integers not at all.
 *
 * Outputs that a quantizer's result reaches (verify_mark_quantized: a
 * QuantizeLinear or a Cast to an FP8/FP4 type, FP4 dynamic quantization, the
 * fused all-reduce + norm + quantize, followed through every node to the
 * outputs) may also have a bounded fraction of elements beyond the dtype
 * bound.  E4M3 keeps 3 mantissa bits: the codes next to a value v are
 * 2^-4|v| to 2^-3|v| apart and round-to-nearest errs by at most half that.
 * The fused op and the unfused chain hand the quantizer values that differ
 * by the compute dtype's rounding (the unfused chain rounds the norm's
 * result to bfloat16 before quantizing it, the fused kernel quantizes its
 * float32 result), d|v| with d <= 2^-8 in bfloat16.  Two such values get
 * different codes only where a rounding midpoint lies between them: for at
 * most d|v| / 2^-4|v| = 16d = 1/16 of the elements.  A flipped code moves
 * its element by one FP8 step (at most 2^-3 of it, and at most 1/16 of the
 * largest magnitude at that quantizer); the MatMul after it spreads that
 * step over every element that reads it, and the next quantizer sees those
 * moved values, so the share of output elements beyond the dtype bound grows
 * with depth: 22 of 128 at most on the two-layer dense_fp8 example in
 * bfloat16 over 16 input sets, on CPU and CUDA ranks alike.  Hence, for such
 * an output:
 *   - at most VERIFY_FLIP_FRACTION (1/4: four times what one quantizer
 *     flips) of the elements beyond the dtype bound (at least one element);
 *   - each of those within one FP8 step of the output's range,
 *     |got - ref| <= max(atol, amax/16) + max(rtol, 0.13) * |ref|;
 *   - the mean relative error, sum |got - ref| / sum |ref|, at most
 *     rtol + VERIFY_FLIP_FRACTION * 2^-3 (the elements within the bound off
 *     by rtol, the flipped ones by a whole step): 0.061 in bfloat16, where
 *     the example reaches 0.034.
 * A uniform error (a scale, a bias) beyond the dtype bound moves most
 * elements beyond it and fails the count; one confined to a few elements
 * but large on them fails the step or the mean.  float32 models with FP8
 * quantizers flip rarely (d ~ 2^-24; the examples' outputs are bit-exact),
 * but a flip in a large model spreads like one in bfloat16, so they get the
 * same allowance.
 */

/* Share of an output downstream of a quantizer that may lie beyond the
 * dtype bound (see above). */
#define VERIFY_FLIP_FRACTION 0.25

/* |got - ref| <= atol + rtol * |ref| for one element of dtype t. */
static void verify_dtype_bound(enum tpf_dtype t, double *atol, double *rtol)
{
	switch (t) {
	case TPF_DTYPE_FLOAT:
		*atol = 1e-5, *rtol = 1e-5;
		return;
	case TPF_DTYPE_DOUBLE:
		*atol = 1e-9, *rtol = 1e-7;
		return;
	case TPF_DTYPE_FLOAT16:
		*atol = 1e-2, *rtol = 1e-2;
		return;
	case TPF_DTYPE_BFLOAT16:
		*atol = 3e-2, *rtol = 3e-2;
		return;
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
		*atol = 2e-2, *rtol = 0.13; /* one E4M3 code */
		return;
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
		*atol = 2e-2, *rtol = 0.26; /* one E5M2 code */
		return;
	case TPF_DTYPE_FLOAT4E2M1:
		*atol = 0.5, *rtol = 0.34;
		return;
	default:
		*atol = 0, *rtol = 0;
		return;
	}
}

/* 1 for a value of an 8-bit or narrower float type, or of no known type. */
static int verify_narrow_or_unknown(const struct tpf_value *v)
{
	if (v->type.kind != TPF_TYPE_TENSOR || v->type.dtype == TPF_DTYPE_UNDEFINED)
		return 1;
	return tpf_dtype_is_float(v->type.dtype) && tpf_dtype_bits(v->type.dtype) <= 8;
}

/* 1 for a node that rounds a result to an 8-bit or narrower float type (a
 * QuantizeLinear whose output type is unknown counts; a Cast to an unknown
 * type does not).  Its quantized outputs are the narrow ones: the fused
 * norm's residual sum and high-precision norm are computed before it. */
static int verify_is_quantizer(const struct tpf_node *n)
{
	if (n->op == TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE || n->op == TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT)
		return 1;
	if (n->op != TPF_OP_QUANTIZE_LINEAR && n->op != TPF_OP_CAST)
		return 0;
	for (size_t i = 0; i < n->n_outputs; i++) {
		const struct tpf_value *v = n->outputs[i];
		if (v && (n->op == TPF_OP_QUANTIZE_LINEAR || v->type.kind == TPF_TYPE_TENSOR) &&
		    verify_narrow_or_unknown(v))
			return 1;
	}
	return 0;
}

/* 1 when g or a graph nested in it holds a quantizer. */
static int verify_graph_quantizes(const struct tpf_graph *g)
{
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (verify_is_quantizer(n))
			return 1;
		for (size_t a = 0; a < n->n_attrs; a++) {
			const struct tpf_attr *at = &n->attrs[a];
			if (at->g && verify_graph_quantizes(at->g))
				return 1;
			for (size_t k = 0; at->graphs && k < at->n; k++)
				if (at->graphs[k] && verify_graph_quantizes(at->graphs[k]))
					return 1;
		}
	}
	return 0;
}

static int verify_value_marked(const struct tpf_graph *g, const unsigned char *mark,
			       const struct tpf_value *v)
{
	return v && v->graph == g && v->id < g->n_values && mark[v->id];
}

/* quantized[i] = 1 when graph output i is computed from a quantizer's
 * result: a quantizer's narrow outputs are marked, and every output of a
 * node that reads a marked value (also from inside its subgraphs) or has a
 * quantizer in a subgraph.  Repeats until nothing changes, so the node order
 * does not matter. */
static enum tpf_status verify_mark_quantized(const struct tpf_graph *g, unsigned char *quantized)
{
	unsigned char *mark = tpf_calloc(g->n_values + 1, 1);
	if (!mark)
		return TPF_ERR_NOMEM;
	for (int changed = 1; changed;) {
		changed = 0;
		for (const struct tpf_node *n = g->first; n; n = n->next) {
			int quantizer = verify_is_quantizer(n), q = 0;
			for (size_t i = 0; i < n->n_inputs && !q; i++)
				q = verify_value_marked(g, mark, n->inputs[i]);
			for (size_t i = 0; i < n->n_implicit && !q; i++)
				q = verify_value_marked(g, mark, n->implicit_inputs[i]);
			for (size_t a = 0; a < n->n_attrs && !q; a++) {
				const struct tpf_attr *at = &n->attrs[a];
				q = at->g && verify_graph_quantizes(at->g);
				for (size_t k = 0; at->graphs && k < at->n && !q; k++)
					q = at->graphs[k] && verify_graph_quantizes(at->graphs[k]);
			}
			for (size_t i = 0; i < n->n_outputs && (q || quantizer); i++) {
				const struct tpf_value *v = n->outputs[i];
				if (!v || v->graph != g || v->id >= g->n_values || mark[v->id])
					continue;
				if (q || verify_narrow_or_unknown(v))
					mark[v->id] = 1, changed = 1;
			}
		}
	}
	for (size_t i = 0; i < g->n_outputs; i++)
		quantized[i] = (unsigned char)verify_value_marked(g, mark, g->outputs[i]);
	tpf_free(mark);
	return TPF_OK;
}

struct verify_result {
	int quantized;          /* downstream of a quantizer */
	double atol, rtol;      /* the dtype bound */
	double step_atol, step_rtol; /* quantized: the bound of every element */
	double max_abs, max_rel;
	double mean_rel, mean_rel_cap; /* sum |got - ref| / sum |ref|; quantized: its cap */
	int64_t n, beyond, allowed; /* elements; beyond the dtype bound; how many may be */
	int64_t beyond_step;        /* quantized: beyond one FP8 step */
	int layout_differs;         /* dtype, rank or shape */
	const char *problem;        /* NULL when the output agrees */
};

/* Compares one output (got) with the unfused graph's (ref). */
static void verify_compare(const struct tpf_host_tensor *got, const struct tpf_host_tensor *ref,
			   int quantized, struct verify_result *r)
{
	memset(r, 0, sizeof(*r));
	r->quantized = quantized && tpf_dtype_is_float(ref->dtype);
	verify_dtype_bound(ref->dtype, &r->atol, &r->rtol);
	r->layout_differs = 1;
	if (got->dtype != ref->dtype) {
		r->problem = "the dtypes differ";
		return;
	}
	if (got->rank != ref->rank) {
		r->problem = "the ranks differ";
		return;
	}
	int64_t n = 1;
	for (int i = 0; i < ref->rank; i++) {
		if (got->dims[i] != ref->dims[i]) {
			r->problem = "the shapes differ";
			return;
		}
		n *= ref->dims[i];
	}
	r->layout_differs = 0;
	r->n = n;
	double amax = 0;
	for (int64_t i = 0; r->quantized && i < n; i++) {
		double y = fabs(tpf_elem_load(ref->dtype, ref->data, i));
		amax = y > amax && !isinf(y) ? y : amax;
	}
	r->step_atol = r->atol > amax / 16 ? r->atol : amax / 16;
	r->step_rtol = r->rtol > 0.13 ? r->rtol : 0.13;
	double sum_err = 0, sum_ref = 0;
	for (int64_t i = 0; i < n; i++) {
		double x = tpf_elem_load(got->dtype, got->data, i);
		double y = tpf_elem_load(ref->dtype, ref->data, i);
		if (isnan(x) && isnan(y))
			continue;
		double e = fabs(x - y);
		if (isnan(e) || isinf(e))
			e = x == y ? 0 : INFINITY;
		double rel = e / (fabs(y) > 1e-30 ? fabs(y) : 1e-30);
		r->max_abs = e > r->max_abs ? e : r->max_abs;
		r->max_rel = e > 0 && rel > r->max_rel ? rel : r->max_rel;
		if (!isinf(y)) {
			sum_err += e;
			sum_ref += fabs(y);
		}
		if (!(e <= r->atol + r->rtol * fabs(y)))
			r->beyond++;
		if (!(e <= r->step_atol + r->step_rtol * fabs(y)))
			r->beyond_step++;
	}
	r->mean_rel = sum_err == 0 ? 0 : sum_ref > 0 ? sum_err / sum_ref : INFINITY;
	if (!r->quantized) {
		if (r->beyond)
			r->problem = "elements beyond the dtype bound";
		return;
	}
	r->allowed = (int64_t)floor(VERIFY_FLIP_FRACTION * (double)n);
	r->allowed = r->allowed > 0 ? r->allowed : 1;
	r->mean_rel_cap = r->rtol + VERIFY_FLIP_FRACTION * 0x1p-3; /* one E4M3 step */
	if (r->beyond_step)
		r->problem = "elements beyond one FP8 step";
	else if (r->beyond > r->allowed)
		r->problem = "more elements beyond the dtype bound than quantization explains";
	else if (!(r->mean_rel <= r->mean_rel_cap))
		r->problem = "mean relative error above its cap";
}

int tpf_verify_outputs(const struct tpf_graph *ref_graph, const struct tpf_graph *opt_graph,
		       const struct tpf_host_tensor *ref, size_t n_ref,
		       const struct tpf_host_tensor *got, size_t n_got, int rank, FILE *f)
{
	unsigned char *q_ref = tpf_calloc(ref_graph->n_outputs + 1, 1);
	unsigned char *q_opt = opt_graph ? tpf_calloc(opt_graph->n_outputs + 1, 1) : NULL;
	int rc = 0;
	if (!q_ref || (opt_graph && !q_opt) || verify_mark_quantized(ref_graph, q_ref) ||
	    (opt_graph && verify_mark_quantized(opt_graph, q_opt))) {
		rc = -1;
		goto out;
	}
	if (n_ref != n_got) {
		fprintf(f, "verify: the optimized graph has %zu outputs, the unfused graph %zu: "
			   "MISMATCH\n",
			n_got, n_ref);
		rc = 1;
	}
	for (size_t i = 0; i < n_got && i < n_ref; i++) {
		/* a quantizer on either side counts */
		int quantized = i < ref_graph->n_outputs && q_ref[i];
		for (size_t j = 0; opt_graph && j < opt_graph->n_outputs; j++)
			if (got[i].name && !strcmp(opt_graph->outputs[j]->name, got[i].name))
				quantized |= q_opt[j];
		struct verify_result r;
		verify_compare(&got[i], &ref[i], quantized, &r);
		fprintf(f, "verify: output '%s' %s", got[i].name, tpf_dtype_name(got[i].dtype));
		if (r.layout_differs) {
			fprintf(f, ", the unfused graph's %s of rank %d: MISMATCH: %s",
				tpf_dtype_name(ref[i].dtype), ref[i].rank, r.problem);
		} else {
			fprintf(f, "%s: max abs err %.3g, max rel err %.3g, mean rel err %.3g",
				r.quantized ? " (after a quantizer)" : "", r.max_abs, r.max_rel,
				r.mean_rel);
			if (r.quantized)
				fprintf(f, " (at most %.3g)", r.mean_rel_cap);
			fprintf(f, "; %lld of %lld elements beyond %.3g + %.3g*|ref|",
				(long long)r.beyond, (long long)r.n, r.atol, r.rtol);
			if (r.quantized)
				fprintf(f, " (at most %lld, each within %.3g + %.3g*|ref|)",
					(long long)r.allowed, r.step_atol, r.step_rtol);
			if (r.problem)
				fprintf(f, ": MISMATCH: %s", r.problem);
			else
				fprintf(f, ": ok");
		}
		if (rank >= 0)
			fprintf(f, " [rank %d]", rank);
		fputc('\n', f);
		if (r.problem)
			rc = 1;
	}
out:
	tpf_free(q_ref);
	tpf_free(q_opt);
	return rc;
}
