/* SPDX-License-Identifier: MIT */
/*
 * `tpfuse run --verify` must be able to fail.  tpf_verify_outputs is the
 * comparison the command runs (it returns 0, or 1 on a mismatch) and prints
 * one line per output.
 *
 * - A faulty rewrite: the default pipeline fuses AllReduce + Add + RMSNorm
 *   + QuantizeLinear (FP8) into AllReduceRMSNormQuant; that graph verifies.
 *   Then the test breaks the fused node the way a wrong fusion would (its
 *   quantization scale 19% off, its epsilon replaced) and the same
 *   comparison must report the mismatch, in float32 and bfloat16; the
 *   float32 epsilon error stays within one FP8 step of the output's range,
 *   which every float output of a quantizing graph used to be allowed.
 * - The tolerances on perturbed outputs of the unfused graph: outputs no
 *   quantizer reaches keep the dtype bound (float32 1e-5) even in a graph
 *   that quantizes; outputs after an FP8 quantizer tolerate a few elements
 *   one FP8 step off (rounding flips) but not a uniform 19% scale, a
 *   uniform bias, too many flips, an element off by more than a step, or a
 *   mean relative error above the cap.
 * - Which outputs count as after a quantizer (FP8 Cast yes, float16 Cast
 *   no), and outputs whose number, dtype or shape differ.
 */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-passes.h"
#include "tpf-runtime.h"

enum { T = 8, H = 64, VERIFY_MISMATCH = 1 };

static const int64_t dims_th[2] = {T, H};

/* ------------------------------------------------------------------ helpers */

static struct tpf_value *init_of(struct tpf_graph *g, const char *name, enum tpf_dtype dt, int rank,
				 const int64_t *dims, const double *vals, int64_t n)
{
	size_t esz = tpf_dtype_bits(dt) / 8;
	unsigned char *buf = calloc((size_t)n + 1, esz);
	assert_non_null(buf);
	for (int64_t i = 0; i < n; i++)
		tpf_elem_store(dt, buf, i, vals[i], 1);
	struct tpf_value *v =
		tpf_graph_add_initializer(g, name, dt, rank, dims, buf, (size_t)n * esz);
	free(buf);
	assert_non_null(v);
	return v;
}

static struct tpf_node *add_node(struct tpf_graph *g, const char *domain, const char *op,
				 const char *name, struct tpf_value **in, size_t n_in,
				 const char *out)
{
	const char *outs[1] = {out};
	struct tpf_node *n =
		tpf_graph_add_node(g, domain, op, name, in, n_in, 1, out ? outs : NULL);
	assert_non_null(n);
	return n;
}

/*
 * x, residual -> AllReduce -> Add (output 'sum') -> RMSNormalization ->
 * QuantizeLinear (E4M3, per-tensor scale) -> DequantizeLinear -> MatMul W
 * (output 'y').  'sum' is computed before the quantizer, 'y' after it.
 */
static struct tpf_model *fp8_block(enum tpf_dtype dt)
{
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	struct tpf_graph *g = m->graph;
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, TPF_MS_DOMAIN, 1), TPF_OK);
	struct tpf_value *x = tpf_graph_add_input(g, "x", dt, 2, dims_th);
	struct tpf_value *res = tpf_graph_add_input(g, "residual", dt, 2, dims_th);
	assert_non_null(x);
	assert_non_null(res);
	static double gamma[H], w[H * H];
	for (int i = 0; i < H; i++)
		gamma[i] = 0.75 + (double)(i % 5) / 8;
	for (int i = 0; i < H * H; i++)
		w[i] = (double)((i * 37) % 17 - 8) / 64;
	int64_t dh = H, dhh[2] = {H, H};
	double scale = 1.0 / 64, zero = 0;
	struct tpf_value *gv = init_of(g, "gamma", dt, 1, &dh, gamma, H);
	struct tpf_value *wv = init_of(g, "w", dt, 2, dhh, w, H * H);
	struct tpf_value *sc = init_of(g, "scale", dt, 0, NULL, &scale, 1);
	struct tpf_value *zp = init_of(g, "zp", TPF_DTYPE_FLOAT8E4M3FN, 0, NULL, &zero, 1);

	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", &x, 1, NULL);
	struct tpf_value *add_in[2] = {ar->outputs[0], res};
	struct tpf_node *add = add_node(g, "", "Add", "add", add_in, 2, "sum");
	struct tpf_value *norm_in[2] = {add->outputs[0], gv};
	struct tpf_node *norm = add_node(g, "", "RMSNormalization", "norm", norm_in, 2, NULL);
	assert_int_equal(tpf_node_set_attr_float(norm, "epsilon", 1e-6f), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(norm, "axis", -1), TPF_OK);
	struct tpf_value *q_in[3] = {norm->outputs[0], sc, zp};
	struct tpf_node *q = add_node(g, "", "QuantizeLinear", "quant", q_in, 3, NULL);
	struct tpf_value *dq_in[3] = {q->outputs[0], sc, zp};
	struct tpf_node *dq = add_node(g, "", "DequantizeLinear", "dequant", dq_in, 3, NULL);
	struct tpf_value *mm_in[2] = {dq->outputs[0], wv};
	struct tpf_node *mm = add_node(g, "", "MatMul", "proj", mm_in, 2, "y");
	assert_int_equal(tpf_graph_add_output(g, add->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, mm->outputs[0]), TPF_OK);
	struct tpf_diag *d = tpf_diag_create();
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	assert_int_equal(tpf_model_infer_shapes(m, d), TPF_OK);
	tpf_diag_free(d);
	return m;
}

static void optimize(struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options po = {.passes = "default"};
	po.ctx.rank = -1;
	po.ctx.world_size = -1;
	assert_int_equal(tpf_pipeline_run(m, &po, d), TPF_OK);
	tpf_diag_free(d);
}

static struct tpf_node *find_op(const struct tpf_graph *g, enum tpf_op op)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == op)
			return n;
	return NULL;
}

/* Inputs for fp8_block: values of both signs and several magnitudes. */
struct block_inputs {
	unsigned char x[T * H * 4], res[T * H * 4];
	struct tpf_host_tensor t[2];
};

static void make_inputs(struct block_inputs *b, enum tpf_dtype dt)
{
	for (int i = 0; i < T * H; i++) {
		tpf_elem_store(dt, b->x, i, sin(0.37 * i) * (1 + (i % 7)) / 4, 1);
		tpf_elem_store(dt, b->res, i, cos(0.11 * i) / 2, 1);
	}
	const char *names[2] = {"x", "residual"};
	void *data[2] = {b->x, b->res};
	for (int k = 0; k < 2; k++) {
		memset(&b->t[k], 0, sizeof(b->t[k]));
		b->t[k].name = names[k];
		b->t[k].dtype = dt;
		b->t[k].rank = 2;
		b->t[k].dims[0] = T;
		b->t[k].dims[1] = H;
		b->t[k].data = data[k];
		b->t[k].nbytes = (size_t)T * H * (tpf_dtype_bits(dt) / 8);
	}
}

/* Runs m on b's inputs; a tpf_malloc'ed copy of the outputs. */
static struct tpf_host_tensor *run_model(const struct tpf_model *m, struct block_inputs *b,
					 size_t *n_out)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	enum tpf_status st = tpf_session_create(m, NULL, &s, d);
	const struct tpf_host_tensor *out = NULL;
	if (!st)
		st = tpf_session_run(s, b->t, 2, &out, n_out, d);
	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	struct tpf_host_tensor *copy = tpf_calloc(*n_out + 1, sizeof(*copy));
	assert_non_null(copy);
	for (size_t i = 0; i < *n_out; i++) {
		copy[i] = out[i];
		copy[i].name = tpf_strdup(out[i].name);
		copy[i].data = tpf_malloc(out[i].nbytes + 1);
		assert_non_null(copy[i].data);
		memcpy(copy[i].data, out[i].data, out[i].nbytes);
	}
	tpf_session_free(s);
	tpf_diag_free(d);
	return copy;
}

/* The comparison as the command runs it; *text gets what it printed. */
static int verify(const struct tpf_model *ref_m, const struct tpf_model *opt_m,
		  const struct tpf_host_tensor *ref, size_t n_ref,
		  const struct tpf_host_tensor *got, size_t n_got, char **text)
{
	size_t len = 0;
	FILE *f = open_memstream(text, &len);
	assert_non_null(f);
	int rc = tpf_verify_outputs(ref_m->graph, opt_m ? opt_m->graph : NULL, ref, n_ref, got, n_got,
				    -1, f);
	fclose(f);
	print_message("%s", *text);
	return rc;
}

/* The printed line of output `name`, copied into buf. */
static const char *line_of(const char *text, const char *name, char *buf, size_t size)
{
	char key[128];
	snprintf(key, sizeof(key), "verify: output '%s' ", name);
	const char *p = strstr(text, key);
	if (!p)
		fail_msg("no verify line for output '%s' in:\n%s", name, text);
	size_t n = strcspn(p, "\n");
	if (n >= size)
		n = size - 1;
	memcpy(buf, p, n);
	buf[n] = 0;
	return buf;
}

static void expect_line(const char *text, const char *name, const char *needle)
{
	char buf[1024];
	const char *line = line_of(text, name, buf, sizeof(buf));
	if (!strstr(line, needle))
		fail_msg("output '%s': expected '%s' in: %s", name, needle, line);
}

static void expect_no_line_text(const char *text, const char *name, const char *needle)
{
	char buf[1024];
	const char *line = line_of(text, name, buf, sizeof(buf));
	if (strstr(line, needle))
		fail_msg("output '%s': did not expect '%s' in: %s", name, needle, line);
}

static struct tpf_host_tensor *copy_outputs(const struct tpf_host_tensor *src, size_t n)
{
	struct tpf_host_tensor *a = tpf_calloc(n + 1, sizeof(*a));
	assert_non_null(a);
	for (size_t i = 0; i < n; i++) {
		a[i] = src[i];
		a[i].name = tpf_strdup(src[i].name);
		a[i].data = tpf_malloc(src[i].nbytes + 1);
		assert_non_null(a[i].data);
		memcpy(a[i].data, src[i].data, src[i].nbytes);
	}
	return a;
}

static int64_t numel(const struct tpf_host_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++)
		n *= t->dims[i];
	return n;
}

static double absmax(const struct tpf_host_tensor *t)
{
	double m = 0;
	for (int64_t i = 0; i < numel(t); i++) {
		double v = fabs(tpf_elem_load(t->dtype, t->data, i));
		m = v > m ? v : m;
	}
	return m;
}

/* ------------------------------------------------------------------ a faulty rewrite */

static void faulty_rewrite(enum tpf_dtype dt)
{
	struct tpf_model *ref_m = fp8_block(dt), *opt_m = fp8_block(dt);
	optimize(opt_m);
	struct tpf_node *fused = find_op(opt_m->graph, TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT);
	assert_non_null(fused); /* the rewrite under test happened */
	assert_null(find_op(opt_m->graph, TPF_OP_QUANTIZE_LINEAR));

	struct block_inputs in;
	make_inputs(&in, dt);
	size_t n_ref, n_opt;
	struct tpf_host_tensor *ref = run_model(ref_m, &in, &n_ref);
	struct tpf_host_tensor *got = run_model(opt_m, &in, &n_opt);
	char *text = NULL;

	/* the correct fusion verifies; 'y' is after the quantizer, 'sum' not */
	assert_int_equal(verify(ref_m, opt_m, ref, n_ref, got, n_opt, &text), 0);
	expect_line(text, "sum", ": ok");
	expect_no_line_text(text, "sum", "after a quantizer");
	expect_line(text, "y", "(after a quantizer)");
	expect_line(text, "y", ": ok");
	free(text);
	tpf_host_tensors_release(got, n_opt);

	/* the fused node quantizes with a scale 19% too large (the
	 * dequantization keeps the right one): 'y' comes out 16% small */
	struct tpf_value *scale = NULL;
	for (size_t i = 0; i < fused->n_inputs; i++)
		if (fused->inputs[i] && !strcmp(fused->inputs[i]->name, "scale"))
			scale = fused->inputs[i];
	assert_non_null(scale);
	double wrong = 1.19 / 64;
	struct tpf_value *bad_scale = init_of(opt_m->graph, "scale_wrong", dt, 0, NULL, &wrong, 1);
	for (size_t i = 0; i < fused->n_inputs; i++)
		if (fused->inputs[i] == scale)
			assert_int_equal(tpf_node_set_input(fused, i, bad_scale), TPF_OK);
	got = run_model(opt_m, &in, &n_opt);
	assert_int_equal(verify(ref_m, opt_m, ref, n_ref, got, n_opt, &text), VERIFY_MISMATCH);
	expect_line(text, "y", "MISMATCH");
	expect_line(text, "sum", ": ok");
	free(text);
	tpf_host_tensors_release(got, n_opt);

	/* back to the right scale, but the fused norm's epsilon is 1e-2
	 * instead of 1e-6: 'y' moves by about 1%, in float32 within one FP8
	 * step of the range everywhere (the allowance every output of a
	 * quantizing graph had), yet beyond the dtype bound almost everywhere;
	 * in bfloat16 1% is within the dtype bound, so there it is 0.5 */
	for (size_t i = 0; i < fused->n_inputs; i++)
		if (fused->inputs[i] == bad_scale)
			assert_int_equal(tpf_node_set_input(fused, i, scale), TPF_OK);
	got = run_model(opt_m, &in, &n_opt);
	assert_int_equal(verify(ref_m, opt_m, ref, n_ref, got, n_opt, &text), 0);
	free(text);
	tpf_host_tensors_release(got, n_opt);
	int f32 = dt == TPF_DTYPE_FLOAT;
	assert_int_equal(tpf_node_set_attr_float(fused, "epsilon", f32 ? 1e-2f : 0.5f), TPF_OK);
	got = run_model(opt_m, &in, &n_opt);
	assert_int_equal(verify(ref_m, opt_m, ref, n_ref, got, n_opt, &text), VERIFY_MISMATCH);
	expect_line(text, "y", f32 ? "MISMATCH: more elements beyond the dtype bound" : "MISMATCH");
	expect_line(text, "sum", ": ok");
	free(text);
	tpf_host_tensors_release(got, n_opt);

	tpf_host_tensors_release(ref, n_ref);
	tpf_model_free(ref_m);
	tpf_model_free(opt_m);
}

/* The dtype tests run at: their state (main's table names each run). */
static enum tpf_dtype f32 = TPF_DTYPE_FLOAT, bf16 = TPF_DTYPE_BFLOAT16;

static void test_faulty_rewrite(void **state)
{
	faulty_rewrite(*(const enum tpf_dtype *)*state);
}

/* ------------------------------------------------------------------ tolerances */

enum perturbation {
	NONE,
	SCALE,       /* every element times (1 + a) */
	BIAS,        /* every element plus a */
	STEP_EVERY,  /* every k-th element (k = a) one E4M3 step (1/8 of it) away from zero */
	ONE_ELEMENT, /* element 3 plus a times the output's absmax */
};

/* A copy of outs with output `which` perturbed. */
static struct tpf_host_tensor *perturbed(const struct tpf_host_tensor *outs, size_t n, size_t which,
					 enum perturbation p, double a)
{
	struct tpf_host_tensor *c = copy_outputs(outs, n);
	struct tpf_host_tensor *t = &c[which];
	double amax = absmax(t);
	for (int64_t i = 0; i < numel(t); i++) {
		double v = tpf_elem_load(t->dtype, t->data, i);
		switch (p) {
		case NONE:
			break;
		case SCALE:
			v *= 1 + a;
			break;
		case BIAS:
			v += a;
			break;
		case STEP_EVERY:
			if (i % (int64_t)a == 0)
				v *= 1.125;
			break;
		case ONE_ELEMENT:
			if (i == 3)
				v += a * amax;
			break;
		}
		tpf_elem_store(t->dtype, t->data, i, v, 1);
	}
	return c;
}

static int check(const struct tpf_model *m, const struct tpf_host_tensor *ref, size_t n,
		 size_t which, enum perturbation p, double a, const char *name, const char *needle)
{
	struct tpf_host_tensor *got = perturbed(ref, n, which, p, a);
	char *text = NULL;
	int rc = verify(m, NULL, ref, n, got, n, &text);
	expect_line(text, name, needle);
	free(text);
	tpf_host_tensors_release(got, n);
	return rc;
}

static void tolerances(enum tpf_dtype dt)
{
	struct tpf_model *m = fp8_block(dt);
	struct block_inputs in;
	make_inputs(&in, dt);
	size_t n;
	struct tpf_host_tensor *ref = run_model(m, &in, &n);
	assert_int_equal(n, 2);
	assert_string_equal(ref[0].name, "sum");
	assert_string_equal(ref[1].name, "y");
	double atol = dt == TPF_DTYPE_FLOAT ? 1e-5 : 3e-2;

	/* identical: ok */
	assert_int_equal(check(m, ref, n, 1, NONE, 0, "y", "0 of 512 elements beyond"), 0);

	/* 'sum' is computed before the quantizer: the dtype bound holds
	 * although the graph quantizes (float32: 3e-5 relative fails; the
	 * former 1e-3 would have passed it, the former FP8 allowance too) */
	if (dt == TPF_DTYPE_FLOAT)
		assert_int_equal(check(m, ref, n, 0, SCALE, 3e-5, "sum", "MISMATCH"),
				 VERIFY_MISMATCH);
	assert_int_equal(check(m, ref, n, 0, SCALE, 0.19, "sum", "MISMATCH"), VERIFY_MISMATCH);

	/* 'y' after the quantizer: a uniform 19% scale, a uniform bias of
	 * twice the dtype's atol */
	assert_int_equal(check(m, ref, n, 1, SCALE, 0.19, "y",
			       "MISMATCH: more elements beyond the dtype bound"),
			 VERIFY_MISMATCH);
	assert_int_equal(check(m, ref, n, 1, SCALE, -0.19, "y", "MISMATCH"), VERIFY_MISMATCH);
	assert_int_equal(check(m, ref, n, 1, BIAS, 2 * atol, "y", "MISMATCH"), VERIFY_MISMATCH);
	assert_int_equal(check(m, ref, n, 1, BIAS, -2 * atol, "y", "MISMATCH"), VERIFY_MISMATCH);
	/* rounding flips: one element in 16 one FP8 step off passes, one in 2
	 * does not */
	assert_int_equal(check(m, ref, n, 1, STEP_EVERY, 16, "y", ": ok"), 0);
	assert_int_equal(check(m, ref, n, 1, STEP_EVERY, 2, "y", "MISMATCH"), VERIFY_MISMATCH);
	/* a single element off by a quarter of the output's range: more than
	 * one FP8 step */
	assert_int_equal(check(m, ref, n, 1, ONE_ELEMENT, 0.25, "y",
			       "MISMATCH: elements beyond one FP8 step"),
			 VERIFY_MISMATCH);
	/* within the dtype bound everywhere: ok */
	assert_int_equal(check(m, ref, n, 1, BIAS, atol / 4, "y", ": ok"), 0);

	tpf_host_tensors_release(ref, n);
	tpf_model_free(m);
}

static void test_tolerances(void **state)
{
	tolerances(*(const enum tpf_dtype *)*state);
}

/* x -> Cast(to) -> Cast(float) -> output 'y'; x -> Neg -> output 'plain'. */
static struct tpf_model *cast_model(enum tpf_dtype to)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	int64_t d = 256;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, &d);
	struct tpf_node *c1 = add_node(g, "", "Cast", "narrow", &x, 1, NULL);
	assert_int_equal(tpf_node_set_attr_int(c1, "to", to), TPF_OK);
	struct tpf_node *c2 = add_node(g, "", "Cast", "widen", &c1->outputs[0], 1, "y");
	assert_int_equal(tpf_node_set_attr_int(c2, "to", TPF_DTYPE_FLOAT), TPF_OK);
	struct tpf_node *neg = add_node(g, "", "Neg", "neg", &x, 1, "plain");
	assert_int_equal(tpf_graph_add_output(g, c2->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, neg->outputs[0]), TPF_OK);
	struct tpf_diag *dg = tpf_diag_create();
	assert_int_equal(tpf_model_infer_shapes(m, dg), TPF_OK);
	tpf_diag_free(dg);
	return m;
}

/* Synthetic outputs: 'y' and 'plain' all ones, f32[256]. */
static struct tpf_host_tensor *ones(size_t *n)
{
	static float one[256];
	for (int i = 0; i < 256; i++)
		one[i] = 1.0f;
	struct tpf_host_tensor t[2] = {
		{.name = "y", .dtype = TPF_DTYPE_FLOAT, .rank = 1, .dims = {256}, .data = one,
		 .nbytes = sizeof(one)},
		{.name = "plain", .dtype = TPF_DTYPE_FLOAT, .rank = 1, .dims = {256}, .data = one,
		 .nbytes = sizeof(one)},
	};
	*n = 2;
	return copy_outputs(t, 2);
}

static void test_which_outputs_and_mean(void **state)
{
	(void)state;
	size_t n;
	struct tpf_host_tensor *ref = ones(&n);
	char *text = NULL;

	/* an FP8 Cast marks what it reaches, a float16 Cast does not */
	struct tpf_model *fp8 = cast_model(TPF_DTYPE_FLOAT8E4M3FN);
	struct tpf_model *f16 = cast_model(TPF_DTYPE_FLOAT16);
	assert_int_equal(verify(fp8, NULL, ref, n, ref, n, &text), 0);
	expect_line(text, "y", "(after a quantizer)");
	expect_no_line_text(text, "plain", "after a quantizer");
	expect_line(text, "plain", "0 of 256 elements beyond 1e-05 + 1e-05*|ref|: ok");
	free(text);
	assert_int_equal(verify(f16, NULL, ref, n, ref, n, &text), 0);
	expect_no_line_text(text, "y", "after a quantizer");
	free(text);

	/* a quarter of the elements 18% off: each within one FP8 step of the
	 * range (1/16 + 0.13), no more of them than allowed, but a mean
	 * relative error of 0.045 is above the cap (0.031 in float32) */
	struct tpf_host_tensor *got = copy_outputs(ref, n);
	for (int i = 0; i < 256; i += 4)
		((float *)got[0].data)[i] = 1.18f;
	assert_int_equal(verify(fp8, NULL, ref, n, got, n, &text), VERIFY_MISMATCH);
	expect_line(text, "y", "64 of 256 elements beyond");
	expect_line(text, "y", "MISMATCH: mean relative error above its cap");
	free(text);
	/* one in eight of them: the mean stays under the cap */
	for (int i = 0; i < 256; i += 8)
		((float *)got[0].data)[i] = 1.0f;
	assert_int_equal(verify(fp8, NULL, ref, n, got, n, &text), 0);
	free(text);
	/* the same error on an output no quantizer reaches */
	assert_int_equal(verify(f16, NULL, ref, n, got, n, &text), VERIFY_MISMATCH);
	expect_line(text, "y", "32 of 256 elements beyond 1e-05 + 1e-05*|ref|: MISMATCH");
	free(text);
	tpf_host_tensors_release(got, n);

	/* NaN where the reference has a number */
	got = copy_outputs(ref, n);
	((float *)got[1].data)[7] = NAN;
	assert_int_equal(verify(f16, NULL, ref, n, got, n, &text), VERIFY_MISMATCH);
	expect_line(text, "plain", "MISMATCH");
	free(text);
	tpf_host_tensors_release(got, n);

	/* another shape, another dtype, another number of outputs */
	got = copy_outputs(ref, n);
	got[1].dims[0] = 128;
	assert_int_equal(verify(f16, NULL, ref, n, got, n, &text), VERIFY_MISMATCH);
	expect_line(text, "plain", "MISMATCH: the shapes differ");
	free(text);
	got[1].dims[0] = 256;
	got[1].dtype = TPF_DTYPE_INT32;
	assert_int_equal(verify(f16, NULL, ref, n, got, n, &text), VERIFY_MISMATCH);
	expect_line(text, "plain", "MISMATCH: the dtypes differ");
	free(text);
	got[1].dtype = TPF_DTYPE_FLOAT;
	assert_int_equal(verify(f16, NULL, ref, n, got, 1, &text), VERIFY_MISMATCH);
	assert_non_null(
		strstr(text, "the optimized graph has 1 outputs, the unfused graph 2: MISMATCH"));
	free(text);
	tpf_host_tensors_release(got, n);

	tpf_host_tensors_release(ref, n);
	tpf_model_free(fp8);
	tpf_model_free(f16);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		{"test_faulty_rewrite_f32", test_faulty_rewrite, NULL, NULL, &f32},
		{"test_faulty_rewrite_bf16", test_faulty_rewrite, NULL, NULL, &bf16},
		{"test_tolerances_f32", test_tolerances, NULL, NULL, &f32},
		{"test_tolerances_bf16", test_tolerances, NULL, NULL, &bf16},
		cmocka_unit_test(test_which_outputs_and_mean),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
