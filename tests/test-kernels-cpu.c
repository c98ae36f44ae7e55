/* SPDX-License-Identifier: MIT */
/*
 * CPU reference kernels against straightforward double-precision
 * references: conversions (f16, bf16, every fp8 format, fp4, e8m0) checked
 * exhaustively against a brute-force nearest-value search, elementwise ops
 * with broadcasting, MatMul/Gemm, reductions, Softmax, the norms and fused
 * norms, quantization (per tensor, per axis, blocked, fp8, fp4), data
 * movement, TopK, Where, Attention (GQA with a KV cache; causal after a
 * cached prefix).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-kernels.h"

/* ------------------------------------------------------------------ helpers */

static struct tpf_graph *G;
static struct tpf_diag *D;

static int setup(void **state)
{
	G = tpf_graph_create(NULL);
	D = tpf_diag_create();
	return G && D ? 0 : -1;
}

static int teardown(void **state)
{
	tpf_graph_free(G);
	tpf_diag_free(D);
	return 0;
}

static struct tpf_node *mknode(const char *domain, const char *op, size_t nin, size_t nout)
{
	struct tpf_value *ins[8] = {0};
	struct tpf_node *n = tpf_graph_add_node(G, domain, op, op, ins, nin, nout, NULL);
	assert_non_null(n);
	return n;
}

static void kt(struct tpf_ktensor *t, enum tpf_dtype dt, int rank, const int64_t *dims)
{
	memset(t, 0, sizeof(*t));
	t->dtype = dt;
	t->rank = rank;
	for (int i = 0; i < rank; i++)
		t->dims[i] = dims[i];
	assert_int_equal(tpf_ktensor_finish(t), 0);
	t->data = calloc(t->nbytes ? t->nbytes : 1, 1);
	t->host = t->data;
}

static void kfree(struct tpf_ktensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(t[i].data);
		t[i].data = NULL;
	}
}

static void fill(struct tpf_ktensor *t, const double *v)
{
	for (int64_t i = 0; i < t->numel; i++)
		tpf_elem_store(t->dtype, t->data, i, v[i], 1);
}

/* deterministic values in [-2, 2), representable in bf16 */
static void fill_rand(struct tpf_ktensor *t, unsigned seed)
{
	for (int64_t i = 0; i < t->numel; i++) {
		seed = seed * 1103515245u + 12345u;
		double v = ((seed >> 8) & 0xffff) / 16384.0 - 2.0;
		tpf_elem_store(t->dtype, t->data, i, (double)tpf_bf16_to_f32(tpf_f32_to_bf16((float)v)), 1);
	}
}

static double at(const struct tpf_ktensor *t, int64_t i)
{
	return tpf_elem_load(t->dtype, t->data, i);
}

static enum tpf_status run_phase(struct tpf_node *n, enum tpf_kernel_phase ph, struct tpf_ktensor *in,
				 size_t nin, struct tpf_ktensor *out, size_t nout, int64_t opset)
{
	enum tpf_dtype key = in[0].dtype;
	const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, n->op, ph, key);
	if (!k)
		k = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, ph);
	assert_non_null(k);
	struct tpf_kernel_call c = {.node = n, .opset = opset, .in = in, .n_in = nin, .out = out,
				    .n_out = nout, .rank = 0, .world = 1, .diag = D};
	return k->run(&c);
}

static enum tpf_status run(struct tpf_node *n, struct tpf_ktensor *in, size_t nin, struct tpf_ktensor *out,
			   size_t nout)
{
	return run_phase(n, TPF_PHASE_MAIN, in, nin, out, nout, 23);
}

static double tol_of(enum tpf_dtype t)
{
	switch (t) {
	case TPF_DTYPE_BFLOAT16:
		return 1.0 / 128;
	case TPF_DTYPE_FLOAT16:
		return 1.0 / 1024;
	case TPF_DTYPE_FLOAT:
		return 2e-6;
	default:
		return 1e-12;
	}
}

static void expect_close(double got, double want, enum tpf_dtype t, double scale)
{
	double tol = tol_of(t) * (fabs(want) > scale ? fabs(want) : scale);
	if (!(fabs(got - want) <= tol) && !(isnan(got) && isnan(want))) {
		print_error("got %.9g want %.9g (tol %.3g, %s)\n", got, want, tol, tpf_dtype_name(t));
		fail();
	}
}

/* ------------------------------------------------------------ conversions */

/* Brute force: the finite code nearest to x, ties to the even code; beyond
 * the largest finite value the saturated code.  Codes of FNUZ negative zero
 * and NaN patterns are skipped. */
static uint8_t ref_minifloat(enum tpf_dtype t, double x)
{
	int ncodes = t == TPF_DTYPE_FLOAT4E2M1 ? 16 : 256;
	int best = -1;
	double bestd = INFINITY;
	for (int c = 0; c < ncodes; c++) {
		double v = tpf_minifloat_to_f32(t, (uint8_t)c);
		if (isnan(v) || isinf(v))
			continue;
		if (v == 0 && signbit(v) != signbit(x) && !(t == TPF_DTYPE_FLOAT8E4M3FNUZ || t == TPF_DTYPE_FLOAT8E5M2FNUZ))
			continue;
		double d = fabs(v - x);
		if (d < bestd || (d == bestd && (c & 1) == 0 && (best & 1) == 1)) {
			best = c;
			bestd = d;
		}
	}
	return (uint8_t)best;
}

static void test_half_bf16(void **state)
{
	/* every code decodes and re-encodes to itself (NaNs stay NaN) */
	for (uint32_t h = 0; h < 65536; h++) {
		float f = tpf_f16_to_f32((uint16_t)h);
		if (isnan(f))
			assert_true(isnan(tpf_f16_to_f32(tpf_f32_to_f16(f))));
		else
			assert_int_equal(tpf_f32_to_f16(f), h);
		float b = tpf_bf16_to_f32((uint16_t)h);
		if (isnan(b))
			assert_true(isnan(tpf_bf16_to_f32(tpf_f32_to_bf16(b))));
		else
			assert_int_equal(tpf_f32_to_bf16(b), h);
	}
	/* midpoints between neighbours round to the even one */
	for (uint32_t h = 0; h < 0x7bff; h++) {
		double lo = tpf_f16_to_f32((uint16_t)h), hi = tpf_f16_to_f32((uint16_t)(h + 1));
		float mid = (float)((lo + hi) / 2);
		uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
		assert_int_equal(tpf_f32_to_f16(mid), want);
		assert_int_equal(tpf_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
		assert_int_equal(tpf_f32_to_f16(nextafterf(mid, -INFINITY)), h);
	}
	for (uint32_t h = 0; h < 0x7f7f; h += 7) {
		double lo = tpf_bf16_to_f32((uint16_t)h), hi = tpf_bf16_to_f32((uint16_t)(h + 1));
		float mid = (float)((lo + hi) / 2);
		assert_int_equal(tpf_f32_to_bf16(mid), (h & 1) ? h + 1 : h);
	}
	assert_int_equal(tpf_f32_to_f16(65520.0f), 0x7c00);   /* overflow to inf */
	assert_int_equal(tpf_f32_to_f16(65519.0f), 0x7bff);
	assert_int_equal(tpf_f32_to_bf16(INFINITY), 0x7f80);
}

static void check_minifloat(enum tpf_dtype t)
{
	int ncodes = t == TPF_DTYPE_FLOAT4E2M1 ? 16 : 256;
	double maxv = 0;
	for (int c = 0; c < ncodes; c++) {
		double v = tpf_minifloat_to_f32(t, (uint8_t)c);
		if (!isnan(v) && !isinf(v) && v > maxv)
			maxv = v;
	}
	/* every finite code, the midpoints around it and points just off them */
	for (int c = 0; c < ncodes; c++) {
		double v = tpf_minifloat_to_f32(t, (uint8_t)c);
		if (isnan(v) || isinf(v))
			continue;
		double probes[7];
		int np = 0;
		probes[np++] = v;
		for (int c2 = 0; c2 < ncodes; c2++) {
			double w = tpf_minifloat_to_f32(t, (uint8_t)c2);
			if (isnan(w) || isinf(w) || w <= v)
				continue;
			/* the next larger value */
			int is_next = 1;
			for (int c3 = 0; c3 < ncodes; c3++) {
				double u = tpf_minifloat_to_f32(t, (uint8_t)c3);
				if (!isnan(u) && u > v && u < w)
					is_next = 0;
			}
			if (!is_next)
				continue;
			double mid = (v + w) / 2;
			probes[np++] = mid;
			probes[np++] = nextafterf((float)mid, INFINITY);
			probes[np++] = nextafterf((float)mid, -INFINITY);
			break;
		}
		for (int i = 0; i < np; i++) {
			double x = probes[i];
			uint8_t got = tpf_f64_to_minifloat(t, x, 1);
			uint8_t want = ref_minifloat(t, x);
			if (got != want) {
				print_error("%s: x=%.10g got 0x%02x (%g) want 0x%02x (%g)\n", tpf_dtype_name(t), x,
					    got, tpf_minifloat_to_f32(t, got), want, tpf_minifloat_to_f32(t, want));
				fail();
			}
		}
	}
	/* saturation */
	uint8_t mx = tpf_f64_to_minifloat(t, maxv, 1);
	assert_int_equal(tpf_f64_to_minifloat(t, maxv * 4, 1), mx);
	assert_int_equal(tpf_f64_to_minifloat(t, INFINITY, 1), mx);
	assert_true(tpf_minifloat_to_f32(t, tpf_f64_to_minifloat(t, -INFINITY, 1)) == -maxv);
}

static void test_minifloats(void **state)
{
	check_minifloat(TPF_DTYPE_FLOAT8E4M3FN);
	check_minifloat(TPF_DTYPE_FLOAT8E4M3FNUZ);
	check_minifloat(TPF_DTYPE_FLOAT8E5M2);
	check_minifloat(TPF_DTYPE_FLOAT8E5M2FNUZ);
	check_minifloat(TPF_DTYPE_FLOAT4E2M1);
	/* the ONNX Cast table, saturate = 0 */
	assert_true(isnan(tpf_minifloat_to_f32(TPF_DTYPE_FLOAT8E4M3FN,
					       tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FN, 465, 0))));
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FN, 464, 0), 0x7e);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E5M2, INFINITY, 0), 0x7c);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E5M2, 61440, 0), 0x7c);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E5M2, 61439, 0), 0x7b);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FNUZ, INFINITY, 0), 0x80);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FNUZ, -1e-9, 0), 0x00);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FN, -1e-9, 0), 0x80);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT8E4M3FN, NAN, 1), 0x7f);
	/* fp4: the whole value table and its ties */
	static const double fp4[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
	for (int c = 0; c < 16; c++)
		assert_true(tpf_minifloat_to_f32(TPF_DTYPE_FLOAT4E2M1, (uint8_t)c) ==
			    (c & 8 ? -fp4[c & 7] : fp4[c & 7]));
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 0.25, 1), 0);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 0.75, 1), 2);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 2.5, 1), 4);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 3.5, 1), 6);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 5, 1), 6);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, 100, 0), 7);
	assert_int_equal(tpf_f64_to_minifloat(TPF_DTYPE_FLOAT4E2M1, -100, 1), 15);
	/* e8m0 */
	assert_int_equal(tpf_f64_to_e8m0(1.0, 0, 1), 127);
	assert_int_equal(tpf_f64_to_e8m0(1.5, 0, 1), 128);
	assert_int_equal(tpf_f64_to_e8m0(1.5, 2, 1), 127);
	assert_int_equal(tpf_f64_to_e8m0(1.5, 1, 1), 128);
	assert_true(tpf_minifloat_to_f32(TPF_DTYPE_FLOAT8E8M0, 130) == 8.0f);
	/* packed fp4 element access: low nibble first */
	uint8_t buf[2] = {0};
	tpf_elem_store(TPF_DTYPE_FLOAT4E2M1, buf, 0, 1.0, 1);
	tpf_elem_store(TPF_DTYPE_FLOAT4E2M1, buf, 1, -6.0, 1);
	tpf_elem_store(TPF_DTYPE_FLOAT4E2M1, buf, 2, 0.5, 1);
	assert_int_equal(buf[0], 0xf2);
	assert_int_equal(buf[1], 0x01);
	assert_true(tpf_elem_load(TPF_DTYPE_FLOAT4E2M1, buf, 1) == -6.0);
}

/* ------------------------------------------------------------ elementwise */

static const char *const bin_ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"};

static double ref_bin(const char *op, double a, double b)
{
	if (!strcmp(op, "Add"))
		return a + b;
	if (!strcmp(op, "Sub"))
		return a - b;
	if (!strcmp(op, "Mul"))
		return a * b;
	if (!strcmp(op, "Div"))
		return a / b;
	if (!strcmp(op, "Pow"))
		return pow(fabs(a), b);
	if (!strcmp(op, "Max"))
		return a > b ? a : b;
	return a < b ? a : b;
}

static void test_binary_broadcast(void **state)
{
	static const enum tpf_dtype dts[] = {TPF_DTYPE_FLOAT, TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16,
					     TPF_DTYPE_DOUBLE};
	int64_t da[3] = {2, 3, 4}, db[2] = {1, 4};
	for (size_t o = 0; o < sizeof(bin_ops) / sizeof(bin_ops[0]); o++) {
		for (size_t t = 0; t < 4; t++) {
			struct tpf_ktensor in[2], out[1];
			kt(&in[0], dts[t], 3, da);
			kt(&in[1], dts[t], 2, db);
			kt(&out[0], dts[t], 3, da);
			fill_rand(&in[0], 1);
			fill_rand(&in[1], 2);
			if (!strcmp(bin_ops[o], "Pow"))
				for (int64_t i = 0; i < in[0].numel; i++)
					tpf_elem_store(dts[t], in[0].data, i, fabs(at(&in[0], i)), 1);
			assert_int_equal(run(mknode("", bin_ops[o], 2, 1), in, 2, out, 1), TPF_OK);
			for (int64_t i = 0; i < out[0].numel; i++)
				expect_close(at(&out[0], i), ref_bin(bin_ops[o], at(&in[0], i), at(&in[1], i % 4)),
					     dts[t], 1.0);
			kfree(in, 2);
			kfree(out, 1);
		}
	}
	/* integer arithmetic is exact; division by zero does not trap */
	int64_t d1[1] = {4};
	struct tpf_ktensor in[2], out[1];
	kt(&in[0], TPF_DTYPE_INT64, 1, d1);
	kt(&in[1], TPF_DTYPE_INT64, 1, d1);
	kt(&out[0], TPF_DTYPE_INT64, 1, d1);
	int64_t a[4] = {7, -7, INT64_MAX, 5}, b[4] = {2, 2, 1, 0};
	memcpy(in[0].data, a, sizeof(a));
	memcpy(in[1].data, b, sizeof(b));
	assert_int_equal(run(mknode("", "Div", 2, 1), in, 2, out, 1), TPF_OK);
	assert_int_equal(((int64_t *)out[0].data)[0], 3);
	assert_int_equal(((int64_t *)out[0].data)[1], -3);
	assert_int_equal(((int64_t *)out[0].data)[2], INT64_MAX);
	assert_int_equal(run(mknode("", "Mul", 2, 1), in, 2, out, 1), TPF_OK);
	assert_int_equal(((int64_t *)out[0].data)[0], 14);
	kfree(out, 1);
	kt(&out[0], TPF_DTYPE_BOOL, 1, d1);
	assert_int_equal(run(mknode("", "Greater", 2, 1), in, 2, out, 1), TPF_OK);
	assert_memory_equal(out[0].data, ((uint8_t[]){1, 0, 1, 1}), 4);
	assert_int_equal(run(mknode("", "Equal", 2, 1), in, 2, out, 1), TPF_OK);
	assert_memory_equal(out[0].data, ((uint8_t[]){0, 0, 0, 0}), 4);
	kfree(in, 2);
	kfree(out, 1);
	/* shapes that do not broadcast give an error, not a crash */
	int64_t d3[1] = {3};
	kt(&in[0], TPF_DTYPE_FLOAT, 1, d1);
	kt(&in[1], TPF_DTYPE_FLOAT, 1, d3);
	kt(&out[0], TPF_DTYPE_FLOAT, 1, d1);
	assert_int_equal(run(mknode("", "Add", 2, 1), in, 2, out, 1), TPF_ERR_INVALID);
	kfree(in, 2);
	kfree(out, 1);
}

static void test_unary_where_cast(void **state)
{
	static const char *const ops[] = {"Sigmoid", "Relu", "Sqrt", "Reciprocal", "Neg", "Exp",
					  "Tanh", "Erf", "Abs", "Sin", "Cos"};
	int64_t d[2] = {3, 5};
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		for (int t = 0; t < 2; t++) {
			enum tpf_dtype dt = t ? TPF_DTYPE_BFLOAT16 : TPF_DTYPE_FLOAT;
			struct tpf_ktensor in[1], out[1];
			kt(&in[0], dt, 2, d);
			kt(&out[0], dt, 2, d);
			fill_rand(&in[0], 3 + (unsigned)o);
			assert_int_equal(run(mknode("", ops[o], 1, 1), in, 1, out, 1), TPF_OK);
			for (int64_t i = 0; i < in[0].numel; i++) {
				double x = at(&in[0], i), w;
				switch (o) {
				case 0: w = 1 / (1 + exp(-x)); break;
				case 1: w = x > 0 ? x : 0; break;
				case 2: w = sqrt(x); break;
				case 3: w = 1 / x; break;
				case 4: w = -x; break;
				case 5: w = exp(x); break;
				case 6: w = tanh(x); break;
				case 7: w = erf(x); break;
				case 8: w = fabs(x); break;
				case 9: w = sin(x); break;
				default: w = cos(x); break;
				}
				expect_close(at(&out[0], i), w, dt, 1e-3);
			}
			kfree(in, 1);
			kfree(out, 1);
		}
	}
	/* Where with broadcasting */
	int64_t dc[1] = {5}, dx[2] = {3, 5}, dy[1] = {1};
	struct tpf_ktensor in[3], out[1];
	kt(&in[0], TPF_DTYPE_BOOL, 1, dc);
	kt(&in[1], TPF_DTYPE_FLOAT, 2, dx);
	kt(&in[2], TPF_DTYPE_FLOAT, 1, dy);
	kt(&out[0], TPF_DTYPE_FLOAT, 2, dx);
	memcpy(in[0].data, ((uint8_t[]){1, 0, 1, 0, 0}), 5);
	fill_rand(&in[1], 9);
	((float *)in[2].data)[0] = 42;
	assert_int_equal(run(mknode("", "Where", 3, 1), in, 3, out, 1), TPF_OK);
	for (int64_t i = 0; i < 15; i++)
		assert_true(at(&out[0], i) == ((i % 5 == 0 || i % 5 == 2) ? at(&in[1], i) : 42.0));
	kfree(in, 3);
	kfree(out, 1);
	/* Cast float -> fp8 with and without saturation, -> int8 truncation */
	int64_t d4[1] = {4};
	kt(&in[0], TPF_DTYPE_FLOAT, 1, d4);
	kt(&out[0], TPF_DTYPE_FLOAT8E4M3FN, 1, d4);
	float xs[4] = {1000.0f, -1000.0f, 0.3f, 17.0f};
	memcpy(in[0].data, xs, sizeof(xs));
	struct tpf_node *cast = mknode("", "Cast", 1, 1);
	tpf_node_set_attr_int(cast, "to", TPF_DTYPE_FLOAT8E4M3FN);
	assert_int_equal(run(cast, in, 1, out, 1), TPF_OK);
	assert_true(at(&out[0], 0) == 448 && at(&out[0], 1) == -448);
	assert_true(at(&out[0], 2) == tpf_minifloat_to_f32(TPF_DTYPE_FLOAT8E4M3FN, ref_minifloat(TPF_DTYPE_FLOAT8E4M3FN, 0.3f)));
	assert_true(at(&out[0], 3) == 16);
	tpf_node_set_attr_int(cast, "saturate", 0);
	assert_int_equal(run(cast, in, 1, out, 1), TPF_OK);
	assert_true(isnan(at(&out[0], 0)));
	kfree(out, 1);
	kt(&out[0], TPF_DTYPE_INT8, 1, d4);
	assert_int_equal(run(cast, in, 1, out, 1), TPF_OK);
	assert_int_equal(((int8_t *)out[0].data)[2], 0);
	assert_int_equal(((int8_t *)out[0].data)[3], 17);
	kfree(in, 1);
	kfree(out, 1);
}

/* ------------------------------------------------------------ matmul */

static void test_matmul_gemm(void **state)
{
	static const enum tpf_dtype dts[] = {TPF_DTYPE_FLOAT, TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16};
	int64_t da[4] = {2, 1, 3, 5}, db[3] = {4, 5, 6}, dy[4] = {2, 4, 3, 6};
	for (int t = 0; t < 3; t++) {
		struct tpf_ktensor in[2], out[1];
		kt(&in[0], dts[t], 4, da);
		kt(&in[1], dts[t], 3, db);
		kt(&out[0], dts[t], 4, dy);
		fill_rand(&in[0], 11);
		fill_rand(&in[1], 12);
		assert_int_equal(run(mknode("", "MatMul", 2, 1), in, 2, out, 1), TPF_OK);
		for (int64_t b0 = 0; b0 < 2; b0++)
			for (int64_t b1 = 0; b1 < 4; b1++)
				for (int64_t m = 0; m < 3; m++)
					for (int64_t n = 0; n < 6; n++) {
						double s = 0;
						for (int64_t k = 0; k < 5; k++)
							s += at(&in[0], (b0 * 3 + m) * 5 + k) * at(&in[1], (b1 * 5 + k) * 6 + n);
						expect_close(at(&out[0], ((b0 * 4 + b1) * 3 + m) * 6 + n), s, dts[t], 1.0);
					}
		kfree(in, 2);
		kfree(out, 1);
	}
	/* 1-D x 2-D */
	int64_t dv[1] = {3}, dm[2] = {3, 2}, do1[1] = {2};
	struct tpf_ktensor in[3], out[1];
	kt(&in[0], TPF_DTYPE_FLOAT, 1, dv);
	kt(&in[1], TPF_DTYPE_FLOAT, 2, dm);
	kt(&out[0], TPF_DTYPE_FLOAT, 1, do1);
	fill(&in[0], (double[]){1, 2, 3});
	fill(&in[1], (double[]){1, 2, 3, 4, 5, 6});
	assert_int_equal(run(mknode("", "MatMul", 2, 1), in, 2, out, 1), TPF_OK);
	assert_true(at(&out[0], 0) == 22 && at(&out[0], 1) == 28);
	kfree(in, 2);
	kfree(out, 1);
	/* Gemm transA transB alpha beta, C broadcast over rows */
	int64_t ga[2] = {4, 3}, gb[2] = {5, 4}, gc[1] = {5}, gy[2] = {3, 5};
	kt(&in[0], TPF_DTYPE_FLOAT, 2, ga);
	kt(&in[1], TPF_DTYPE_FLOAT, 2, gb);
	kt(&in[2], TPF_DTYPE_FLOAT, 1, gc);
	kt(&out[0], TPF_DTYPE_FLOAT, 2, gy);
	fill_rand(&in[0], 21);
	fill_rand(&in[1], 22);
	fill_rand(&in[2], 23);
	struct tpf_node *g = mknode("", "Gemm", 3, 1);
	tpf_node_set_attr_int(g, "transA", 1);
	tpf_node_set_attr_int(g, "transB", 1);
	tpf_node_set_attr_float(g, "alpha", 0.5f);
	tpf_node_set_attr_float(g, "beta", 2.0f);
	assert_int_equal(run(g, in, 3, out, 1), TPF_OK);
	for (int m = 0; m < 3; m++)
		for (int n = 0; n < 5; n++) {
			double s = 0;
			for (int k = 0; k < 4; k++)
				s += at(&in[0], k * 3 + m) * at(&in[1], n * 4 + k);
			expect_close(at(&out[0], m * 5 + n), 0.5 * s + 2 * at(&in[2], n), TPF_DTYPE_FLOAT, 1.0);
		}
	kfree(in, 3);
	kfree(out, 1);
}

/* Weights packed in column tiles (TPF_PHASE_MATMUL_TILED): pack/unpack
 * round trips with a partial last tile (zeros past N), the tiled MatMul
 * and the folded GatedActivation giving the bits of the unpacked chain,
 * and shapes that do not fit refused. */
static void test_matmul_tiled(void **state)
{
	(void)state;
	const int64_t K = 5, N = 40, F = 32, M = 3;
	for (int tw = 16; tw <= 32; tw += 16) {
		/* pack / unpack, N % tw != 0 with tw = 32 */
		int64_t dw[2] = {K, N}, dp[3] = {(N + tw - 1) / tw, K, tw}, dx[2] = {M, K}, dy[2] = {M, N};
		struct tpf_ktensor w, pk, back, in[2], out[2];
		kt(&w, TPF_DTYPE_BFLOAT16, 2, dw);
		kt(&pk, TPF_DTYPE_BFLOAT16, 3, dp);
		kt(&back, TPF_DTYPE_BFLOAT16, 2, dw);
		fill_rand(&w, 31);
		assert_int_equal(tpf_gemv_packed_bytes(K, N, tw, 2), pk.nbytes);
		memset(pk.data, 0x7f, pk.nbytes);
		tpf_gemv_pack(w.data, pk.data, K, N, tw, 2);
		for (int64_t t = 0; t < dp[0]; t++)
			for (int64_t k = 0; k < K; k++)
				for (int64_t c = 0; c < tw; c++) {
					int64_t n = t * tw + c;
					double v = at(&pk, (t * K + k) * tw + c);
					assert_true(n < N ? v == at(&w, k * N + n) : v == 0.0);
				}
		tpf_gemv_unpack(pk.data, back.data, K, N, tw, 2);
		assert_memory_equal(back.data, w.data, w.nbytes);
		/* the tiled MatMul: the plain MatMul's bits */
		kt(&in[0], TPF_DTYPE_BFLOAT16, 2, dx);
		fill_rand(&in[0], 32);
		in[1] = w;
		kt(&out[0], TPF_DTYPE_BFLOAT16, 2, dy);
		kt(&out[1], TPF_DTYPE_BFLOAT16, 2, dy);
		struct tpf_node *mm = mknode("", "MatMul", 2, 1);
		assert_int_equal(run(mm, in, 2, &out[0], 1), TPF_OK);
		in[1] = pk;
		assert_int_equal(run_phase(mm, TPF_PHASE_MATMUL_TILED, in, 2, &out[1], 1, 23), TPF_OK);
		assert_memory_equal(out[0].data, out[1].data, out[0].nbytes);
		/* a packed weight of another K, or of too few tiles, is refused */
		int64_t bad[3] = {dp[0] - 1, K, tw};
		struct tpf_ktensor pb;
		kt(&pb, TPF_DTYPE_BFLOAT16, 3, bad);
		in[1] = pb;
		assert_int_equal(run_phase(mm, TPF_PHASE_MATMUL_TILED, in, 2, &out[1], 1, 23), TPF_ERR_INVALID);
		kfree(&pb, 1);
		kfree(&out[0], 2);
		kfree(&back, 1);
		kfree(&pk, 1);
		/* the folded GatedActivation: gate/up [K, 2F], F % (tw / 2) == 0 */
		int64_t dg[2] = {K, 2 * F}, dgp[3] = {F / (tw / 2), K, tw}, dgy[2] = {M, 2 * F}, dgo[2] = {M, F};
		struct tpf_ktensor wg, gp, gback, prod, ref, got;
		kt(&wg, TPF_DTYPE_BFLOAT16, 2, dg);
		kt(&gp, TPF_DTYPE_BFLOAT16, 3, dgp);
		kt(&gback, TPF_DTYPE_BFLOAT16, 2, dg);
		fill_rand(&wg, 33);
		tpf_gemv_pack_gated(wg.data, gp.data, K, F, tw, 2);
		for (int64_t k = 0; k < K; k++)
			for (int64_t j = 0; j < F; j++) {
				int64_t t = j / (tw / 2), c = j % (tw / 2);
				assert_true(at(&gp, (t * K + k) * tw + c) == at(&wg, k * 2 * F + j));
				assert_true(at(&gp, (t * K + k) * tw + tw / 2 + c) == at(&wg, k * 2 * F + F + j));
			}
		tpf_gemv_unpack_gated(gp.data, gback.data, K, F, tw, 2);
		assert_memory_equal(gback.data, wg.data, wg.nbytes);
		kt(&prod, TPF_DTYPE_BFLOAT16, 2, dgy);
		kt(&ref, TPF_DTYPE_BFLOAT16, 2, dgo);
		kt(&got, TPF_DTYPE_BFLOAT16, 2, dgo);
		in[1] = wg;
		assert_int_equal(run(mm, in, 2, &prod, 1), TPF_OK);
		static const char *const acts[] = {"silu", "gelu", "gelu_tanh"};
		for (int a = 0; a < 3; a++) {
			struct tpf_node *g = mknode("ai.tpfuse", "GatedActivation", 1, 1);
			tpf_node_set_attr_string(g, "activation", acts[a]);
			tpf_node_set_attr_int(g, "packed", 1);
			assert_int_equal(run(g, &prod, 1, &ref, 1), TPF_OK);
			in[1] = gp;
			memset(got.data, 0, got.nbytes);
			assert_int_equal(run_phase(g, TPF_PHASE_MATMUL_TILED, in, 2, &got, 1, 23), TPF_OK);
			assert_memory_equal(got.data, ref.data, ref.nbytes);
			/* unpacked GatedActivation attributes: refused */
			struct tpf_node *u = mknode("ai.tpfuse", "GatedActivation", 1, 1);
			tpf_node_set_attr_string(u, "activation", acts[a]);
			assert_int_equal(run_phase(u, TPF_PHASE_MATMUL_TILED, in, 2, &got, 1, 23), TPF_ERR_INVALID);
		}
		kfree(&in[0], 1);
		kfree(&w, 1);
		kfree(&wg, 1);
		kfree(&gp, 1);
		kfree(&gback, 1);
		kfree(&prod, 1);
		kfree(&ref, 1);
		kfree(&got, 1);
	}
}

/* ------------------------------------------------------------ reductions */

static void test_reduce_softmax_topk(void **state)
{
	int64_t dx[3] = {2, 3, 4}, dr[3] = {2, 1, 4};
	static const char *const ops[] = {"ReduceMean", "ReduceSum", "ReduceMax"};
	for (int o = 0; o < 3; o++) {
		struct tpf_ktensor in[2], out[1];
		int64_t one = 1;
		kt(&in[0], TPF_DTYPE_BFLOAT16, 3, dx);
		kt(&in[1], TPF_DTYPE_INT64, 1, &one);
		((int64_t *)in[1].data)[0] = -2;
		kt(&out[0], TPF_DTYPE_BFLOAT16, 3, dr);
		fill_rand(&in[0], 31);
		assert_int_equal(run(mknode("", ops[o], 2, 1), in, 2, out, 1), TPF_OK);
		for (int a = 0; a < 2; a++)
			for (int c = 0; c < 4; c++) {
				double s = 0, mx = -INFINITY;
				for (int b = 0; b < 3; b++) {
					double v = at(&in[0], (a * 3 + b) * 4 + c);
					s += v;
					mx = v > mx ? v : mx;
				}
				double w = o == 0 ? s / 3 : o == 1 ? s : mx;
				expect_close(at(&out[0], a * 4 + c), w, TPF_DTYPE_BFLOAT16, 1.0);
			}
		kfree(in, 2);
		kfree(out, 1);
	}
	/* softmax over axis 1 */
	struct tpf_ktensor in[2], out[2];
	kt(&in[0], TPF_DTYPE_FLOAT, 3, dx);
	kt(&out[0], TPF_DTYPE_FLOAT, 3, dx);
	fill_rand(&in[0], 41);
	struct tpf_node *sm = mknode("", "Softmax", 1, 1);
	tpf_node_set_attr_int(sm, "axis", 1);
	assert_int_equal(run(sm, in, 1, out, 1), TPF_OK);
	for (int a = 0; a < 2; a++)
		for (int c = 0; c < 4; c++) {
			double s = 0;
			for (int b = 0; b < 3; b++)
				s += exp(at(&in[0], (a * 3 + b) * 4 + c));
			for (int b = 0; b < 3; b++)
				expect_close(at(&out[0], (a * 3 + b) * 4 + c), exp(at(&in[0], (a * 3 + b) * 4 + c)) / s,
					     TPF_DTYPE_FLOAT, 1.0);
		}
	kfree(out, 1);
	/* TopK k=2 along the last axis, ties keep the lower index */
	int64_t one = 1, dk[3] = {2, 3, 2};
	kt(&in[1], TPF_DTYPE_INT64, 1, &one);
	((int64_t *)in[1].data)[0] = 2;
	kt(&out[0], TPF_DTYPE_FLOAT, 3, dk);
	kt(&out[1], TPF_DTYPE_INT64, 3, dk);
	((float *)in[0].data)[0] = 1, ((float *)in[0].data)[1] = 5, ((float *)in[0].data)[2] = 5,
	((float *)in[0].data)[3] = 0;
	assert_int_equal(run(mknode("", "TopK", 2, 2), in, 2, out, 2), TPF_OK);
	assert_true(at(&out[0], 0) == 5 && at(&out[0], 1) == 5);
	assert_int_equal(((int64_t *)out[1].data)[0], 1);
	assert_int_equal(((int64_t *)out[1].data)[1], 2);
	for (int r = 1; r < 6; r++) {
		double best = -INFINITY;
		for (int k = 0; k < 4; k++)
			best = fmax(best, at(&in[0], r * 4 + k));
		assert_true(at(&out[0], r * 2) == best);
	}
	kfree(in, 2);
	kfree(out, 2);
}

/* ------------------------------------------------------------ norms */

static void ref_rms(const double *x, int64_t rows, int64_t cols, const double *g, double eps,
		    double off, double *y)
{
	for (int64_t r = 0; r < rows; r++) {
		double ss = 0;
		for (int64_t k = 0; k < cols; k++)
			ss += x[r * cols + k] * x[r * cols + k];
		double inv = 1 / sqrt(ss / cols + eps);
		for (int64_t k = 0; k < cols; k++)
			y[r * cols + k] = x[r * cols + k] * inv * (g[k] + off);
	}
}

static void test_norms(void **state)
{
	static const enum tpf_dtype dts[] = {TPF_DTYPE_FLOAT, TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16};
	int64_t dx[2] = {3, 8}, dg[1] = {8};
	double x[24], r[24], s[24], g[8], y[24];
	for (int t = 0; t < 3; t++) {
		struct tpf_ktensor in[4], out[4];
		kt(&in[0], dts[t], 2, dx);
		kt(&in[1], dts[t], 1, dg);
		kt(&in[2], dts[t], 2, dx);
		kt(&out[0], dts[t], 2, dx);
		kt(&out[1], dts[t], 2, dx);
		fill_rand(&in[0], 51);
		fill_rand(&in[1], 52);
		fill_rand(&in[2], 53);
		for (int i = 0; i < 24; i++) {
			x[i] = at(&in[0], i);
			r[i] = at(&in[2], i);
		}
		for (int i = 0; i < 8; i++)
			g[i] = at(&in[1], i);
		/* RMSNormalization */
		struct tpf_node *n = mknode("", "RMSNormalization", 2, 1);
		tpf_node_set_attr_float(n, "epsilon", 1e-5f);
		assert_int_equal(run(n, in, 2, out, 1), TPF_OK);
		ref_rms(x, 3, 8, g, 1e-5, 0, y);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
		/* ai.tpfuse.RMSNorm with residual and Gemma offset */
		n = mknode(TPF_DOMAIN, "RMSNorm", 3, 2);
		tpf_node_set_attr_float(n, "epsilon", 1e-6f);
		tpf_node_set_attr_float(n, "weight_offset", 1.0f);
		assert_int_equal(run(n, in, 3, out, 2), TPF_OK);
		for (int i = 0; i < 24; i++) {
			s[i] = at(&out[1], i);
			expect_close(s[i], x[i] + r[i], dts[t], 1.0);
		}
		ref_rms(s, 3, 8, g, 1e-6, 1.0, y);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
		/* AllReduceRMSNorm post-reduce phase equals the same */
		n = mknode(TPF_DOMAIN, "AllReduceRMSNorm", 3, 2);
		tpf_node_set_attr_float(n, "epsilon", 1e-6f);
		tpf_node_set_attr_float(n, "weight_offset", 1.0f);
		assert_int_equal(run_phase(n, TPF_PHASE_POST_REDUCE, in, 3, out, 2, 1), TPF_OK);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
		/* SkipSimplifiedLayerNormalization(input, skip, gamma) */
		struct tpf_ktensor sin[3] = {in[0], in[2], in[1]};
		struct tpf_ktensor sout[4] = {out[0], {0}, {0}, out[1]};
		n = mknode(TPF_MS_DOMAIN, "SkipSimplifiedLayerNormalization", 3, 4);
		tpf_node_set_attr_float(n, "epsilon", 1e-6f);
		assert_int_equal(run(n, sin, 3, sout, 4), TPF_OK);
		ref_rms(s, 3, 8, g, 1e-6, 0, y);
		for (int i = 0; i < 24; i++) {
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
			expect_close(at(&out[1], i), s[i], dts[t], 1.0);
		}
		/* ShardedRMSNorm with one rank: sumsq then normalize == RMSNorm */
		int64_t dss[2] = {3, 1};
		struct tpf_ktensor ss[1];
		kt(&ss[0], TPF_DTYPE_FLOAT, 2, dss);
		n = mknode(TPF_DOMAIN, "ShardedRMSNorm", 2, 1);
		tpf_node_set_attr_float(n, "epsilon", 1e-5f);
		assert_int_equal(run_phase(n, TPF_PHASE_SUMSQ, in, 2, ss, 1, 1), TPF_OK);
		struct tpf_ktensor nin[3] = {in[0], in[1], ss[0]};
		assert_int_equal(run_phase(n, TPF_PHASE_NORMALIZE, nin, 3, out, 1, 1), TPF_OK);
		ref_rms(x, 3, 8, g, 1e-5, 0, y);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
		kfree(ss, 1);
		/* Q and K in one ShardedRMSNorm (the two share one exchange of
		 * [rows, 2] sums): each is normalized by its own sum of squares */
		int64_t dss2[2] = {3, 2};
		kt(&ss[0], TPF_DTYPE_FLOAT, 2, dss2);
		n = mknode(TPF_DOMAIN, "ShardedRMSNorm", 4, 2);
		tpf_node_set_attr_float(n, "epsilon", 1e-5f);
		struct tpf_ktensor qk[5] = {in[0], in[2], in[1], in[1], ss[0]};
		assert_int_equal(run_phase(n, TPF_PHASE_SUMSQ, qk, 4, ss, 1, 1), TPF_OK);
		assert_int_equal(run_phase(n, TPF_PHASE_NORMALIZE, qk, 5, out, 2, 1), TPF_OK);
		ref_rms(x, 3, 8, g, 1e-5, 0, y);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), y[i], dts[t], 1.0);
		ref_rms(r, 3, 8, g, 1e-5, 0, y);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[1], i), y[i], dts[t], 1.0);
		kfree(ss, 1);
		/* LayerNormalization with bias */
		n = mknode("", "LayerNormalization", 3, 1);
		struct tpf_ktensor lin[3] = {in[0], in[1], in[1]};
		assert_int_equal(run(n, lin, 3, out, 1), TPF_OK);
		for (int rr = 0; rr < 3; rr++) {
			double m = 0, v = 0;
			for (int k = 0; k < 8; k++)
				m += x[rr * 8 + k] / 8;
			for (int k = 0; k < 8; k++)
				v += (x[rr * 8 + k] - m) * (x[rr * 8 + k] - m) / 8;
			for (int k = 0; k < 8; k++)
				expect_close(at(&out[0], rr * 8 + k), (x[rr * 8 + k] - m) / sqrt(v + 1e-5) * g[k] + g[k],
					     dts[t], 1.0);
		}
		/* SigmoidGateAdd(final, gate [3,1], shared) */
		int64_t dgate[2] = {3, 1};
		struct tpf_ktensor gin[3];
		gin[0] = in[0];
		kt(&gin[1], dts[t], 2, dgate);
		gin[2] = in[2];
		fill_rand(&gin[1], 54);
		assert_int_equal(run(mknode(TPF_DOMAIN, "SigmoidGateAdd", 3, 1), gin, 3, out, 1), TPF_OK);
		for (int i = 0; i < 24; i++)
			expect_close(at(&out[0], i), x[i] + r[i] / (1 + exp(-at(&gin[1], i / 8))), dts[t], 1.0);
		kfree(&gin[1], 1);
		kfree(in, 3);
		kfree(out, 2);
	}
}

/* ------------------------------------------------------------ quantization */

static void test_quant(void **state)
{
	int64_t dx[2] = {2, 32}, one = 1, dax[1] = {32}, dbl[2] = {2, 2};
	struct tpf_ktensor in[3], out[2];
	kt(&in[0], TPF_DTYPE_FLOAT, 2, dx);
	fill_rand(&in[0], 61);
	((float *)in[0].data)[0] = 1000; /* saturates */
	/* per tensor int8 with zero point */
	kt(&in[1], TPF_DTYPE_FLOAT, 0, NULL);
	kt(&in[2], TPF_DTYPE_INT8, 0, NULL);
	((float *)in[1].data)[0] = 0.02f;
	((int8_t *)in[2].data)[0] = 3;
	kt(&out[0], TPF_DTYPE_INT8, 2, dx);
	assert_int_equal(run(mknode("", "QuantizeLinear", 3, 1), in, 3, out, 1), TPF_OK);
	for (int i = 0; i < 64; i++) {
		double q = nearbyint((float)at(&in[0], i) / 0.02f) + 3;
		q = q < -128 ? -128 : q > 127 ? 127 : q;
		assert_true(at(&out[0], i) == q);
	}
	/* and back */
	struct tpf_ktensor dq_in[3] = {out[0], in[1], in[2]};
	struct tpf_ktensor dq_out[1];
	kt(&dq_out[0], TPF_DTYPE_FLOAT, 2, dx);
	assert_int_equal(run(mknode("", "DequantizeLinear", 3, 1), dq_in, 3, dq_out, 1), TPF_OK);
	for (int i = 0; i < 64; i++)
		assert_true(at(&dq_out[0], i) == (float)((at(&out[0], i) - 3) * 0.02f));
	kfree(in + 1, 2);
	kfree(out, 1);
	kfree(dq_out, 1);
	/* per axis uint8 (axis 1) */
	kt(&in[1], TPF_DTYPE_FLOAT, 1, dax);
	for (int i = 0; i < 32; i++)
		((float *)in[1].data)[i] = 0.01f * (float)(i + 1);
	kt(&out[0], TPF_DTYPE_UINT8, 2, dx);
	struct tpf_node *q = mknode("", "QuantizeLinear", 2, 1);
	assert_int_equal(run(q, in, 2, out, 1), TPF_OK);
	for (int i = 0; i < 64; i++) {
		double v = nearbyint((float)at(&in[0], i) / (0.01f * (float)(i % 32 + 1)));
		v = v < 0 ? 0 : v > 255 ? 255 : v;
		assert_true(at(&out[0], i) == v);
	}
	kfree(in + 1, 1);
	kfree(out, 1);
	/* blocked fp4 (block 16 along axis 1), zero point fp4 zeros */
	kt(&in[1], TPF_DTYPE_FLOAT, 2, dbl);
	for (int i = 0; i < 4; i++)
		((float *)in[1].data)[i] = 0.25f * (float)(i + 1);
	kt(&out[0], TPF_DTYPE_FLOAT4E2M1, 2, dx);
	q = mknode("", "QuantizeLinear", 2, 1);
	tpf_node_set_attr_int(q, "block_size", 16);
	assert_int_equal(run(q, in, 2, out, 1), TPF_OK);
	for (int i = 0; i < 64; i++) {
		float sc = 0.25f * (float)((i / 32) * 2 + (i % 32) / 16 + 1);
		double want = tpf_minifloat_to_f32(TPF_DTYPE_FLOAT4E2M1,
						   ref_minifloat(TPF_DTYPE_FLOAT4E2M1, (float)at(&in[0], i) / sc));
		assert_true(at(&out[0], i) == want);
	}
	kfree(in + 1, 1);
	kfree(out, 1);
	/* fp8 per tensor */
	kt(&in[1], TPF_DTYPE_FLOAT, 1, &one);
	((float *)in[1].data)[0] = 0.5f;
	kt(&out[0], TPF_DTYPE_FLOAT8E4M3FN, 2, dx);
	q = mknode("", "QuantizeLinear", 2, 1);
	assert_int_equal(run(q, in, 2, out, 1), TPF_OK);
	assert_true(at(&out[0], 0) == 448);
	for (int i = 1; i < 64; i++)
		assert_true(at(&out[0], i) ==
			    tpf_minifloat_to_f32(TPF_DTYPE_FLOAT8E4M3FN,
						 ref_minifloat(TPF_DTYPE_FLOAT8E4M3FN, (float)at(&in[0], i) / 0.5f)));
	kfree(out, 1);
	/* TRT FP4 dynamic quantize: dequantized values are within half a step */
	int64_t dsc[2] = {2, 2};
	kt(&out[0], TPF_DTYPE_FLOAT4E2M1, 2, dx);
	kt(&out[1], TPF_DTYPE_FLOAT8E4M3FN, 2, dsc);
	((float *)in[0].data)[0] = 1.5f;
	assert_int_equal(run(mknode("trt", "TRT_FP4DynamicQuantize", 2, 2), in, 2, out, 2), TPF_OK);
	for (int b = 0; b < 4; b++) {
		double amax = 0;
		for (int k = 0; k < 16; k++)
			amax = fmax(amax, fabs(at(&in[0], b * 16 + k)));
		double sb = at(&out[1], b) * 0.5;
		assert_true(fabs(sb - amax / 6) <= amax / 6 / 8);
		for (int k = 0; k < 16; k++)
			assert_true(fabs(at(&out[0], b * 16 + k) * sb - at(&in[0], b * 16 + k)) <= sb * 1.0 + 1e-6);
	}
	kfree(in, 2);
	kfree(out, 2);
}

/* ------------------------------------------------------------ data movement */

static void test_movement(void **state)
{
	int64_t dx[3] = {2, 3, 4};
	struct tpf_ktensor in[5], out[3];
	kt(&in[0], TPF_DTYPE_BFLOAT16, 3, dx);
	fill_rand(&in[0], 71);
	/* Transpose perm (2, 0, 1) */
	int64_t dt[3] = {4, 2, 3};
	kt(&out[0], TPF_DTYPE_BFLOAT16, 3, dt);
	struct tpf_node *n = mknode("", "Transpose", 1, 1);
	tpf_node_set_attr_ints(n, "perm", (int64_t[]){2, 0, 1}, 3);
	assert_int_equal(run(n, in, 1, out, 1), TPF_OK);
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 3; b++)
			for (int c = 0; c < 4; c++)
				assert_true(at(&out[0], (c * 2 + a) * 3 + b) == at(&in[0], (a * 3 + b) * 4 + c));
	kfree(out, 1);
	/* Slice axis 2 from -1 backwards with step -2, axis 1 [1, 100) */
	int64_t two = 2, ds[3] = {2, 2, 2};
	kt(&in[1], TPF_DTYPE_INT64, 1, &two);
	kt(&in[2], TPF_DTYPE_INT64, 1, &two);
	kt(&in[3], TPF_DTYPE_INT64, 1, &two);
	kt(&in[4], TPF_DTYPE_INT64, 1, &two);
	memcpy(in[1].data, (int64_t[]){-1, 1}, 16);
	memcpy(in[2].data, (int64_t[]){-100, 100}, 16);
	memcpy(in[3].data, (int64_t[]){2, 1}, 16);
	memcpy(in[4].data, (int64_t[]){-2, 1}, 16);
	kt(&out[0], TPF_DTYPE_BFLOAT16, 3, ds);
	assert_int_equal(run(mknode("", "Slice", 5, 1), in, 5, out, 1), TPF_OK);
	for (int a = 0; a < 2; a++)
		for (int b = 0; b < 2; b++)
			for (int c = 0; c < 2; c++)
				assert_true(at(&out[0], (a * 2 + b) * 2 + c) == at(&in[0], (a * 3 + b + 1) * 4 + 3 - 2 * c));
	kfree(out, 1);
	kfree(in + 1, 4);
	/* Split axis 2 into 1 + 3, then Concat back */
	int64_t d1[3] = {2, 3, 1}, d3[3] = {2, 3, 3};
	kt(&out[0], TPF_DTYPE_BFLOAT16, 3, d1);
	kt(&out[1], TPF_DTYPE_BFLOAT16, 3, d3);
	n = mknode("", "Split", 1, 2);
	tpf_node_set_attr_int(n, "axis", 2);
	assert_int_equal(run(n, in, 1, out, 2), TPF_OK);
	kt(&out[2], TPF_DTYPE_BFLOAT16, 3, dx);
	n = mknode("", "Concat", 2, 1);
	tpf_node_set_attr_int(n, "axis", -1);
	assert_int_equal(run(n, out, 2, &out[2], 1), TPF_OK);
	assert_memory_equal(out[2].data, in[0].data, in[0].nbytes);
	kfree(out, 3);
	/* Gather axis 1 with a negative index */
	int64_t di[2] = {2, 2}, dg[4] = {2, 2, 2, 4};
	kt(&in[1], TPF_DTYPE_INT64, 2, di);
	memcpy(in[1].data, (int64_t[]){0, -1, 2, 1}, 32);
	kt(&out[0], TPF_DTYPE_BFLOAT16, 4, dg);
	n = mknode("", "Gather", 2, 1);
	tpf_node_set_attr_int(n, "axis", 1);
	assert_int_equal(run(n, in, 2, out, 1), TPF_OK);
	static const int idx[4] = {0, 2, 2, 1};
	for (int a = 0; a < 2; a++)
		for (int j = 0; j < 4; j++)
			for (int c = 0; c < 4; c++)
				assert_true(at(&out[0], (a * 4 + j) * 4 + c) == at(&in[0], (a * 3 + idx[j]) * 4 + c));
	kfree(out, 1);
	memcpy(in[1].data, (int64_t[]){0, 3, 2, 1}, 32);
	assert_int_equal(run(n, in, 2, (kt(&out[0], TPF_DTYPE_BFLOAT16, 4, dg), out), 1), TPF_ERR_INVALID);
	kfree(out, 1);
	kfree(in + 1, 1);
	/* GatherElements / ScatterElements(add) along axis 2 */
	int64_t de[3] = {2, 3, 2};
	kt(&in[1], TPF_DTYPE_INT64, 3, de);
	for (int i = 0; i < 12; i++)
		((int64_t *)in[1].data)[i] = (i * 3) % 4;
	kt(&out[0], TPF_DTYPE_BFLOAT16, 3, de);
	n = mknode("", "GatherElements", 2, 1);
	tpf_node_set_attr_int(n, "axis", 2);
	assert_int_equal(run(n, in, 2, out, 1), TPF_OK);
	for (int i = 0; i < 12; i++)
		assert_true(at(&out[0], i) == at(&in[0], (i / 2) * 4 + (i * 3) % 4));
	struct tpf_ktensor sin[3] = {in[0], in[1], out[0]};
	kt(&out[1], TPF_DTYPE_BFLOAT16, 3, dx);
	n = mknode("", "ScatterElements", 3, 1);
	tpf_node_set_attr_int(n, "axis", 2);
	tpf_node_set_attr_string(n, "reduction", "add");
	assert_int_equal(run(n, sin, 3, &out[1], 1), TPF_OK);
	for (int r = 0; r < 6; r++)
		for (int c = 0; c < 4; c++) {
			double w = at(&in[0], r * 4 + c);
			for (int k = 0; k < 2; k++)
				if ((((r * 2 + k) * 3) % 4) == c)
					w += at(&out[0], r * 2 + k);
			expect_close(at(&out[1], r * 4 + c), w, TPF_DTYPE_BFLOAT16, 1.0);
		}
	kfree(out, 2);
	kfree(in + 1, 1);
	/* Expand [2,3,4] -> [2,2,3,4] */
	int64_t dxp[4] = {2, 2, 3, 4};
	kt(&out[0], TPF_DTYPE_BFLOAT16, 4, dxp);
	assert_int_equal(run(mknode("", "Expand", 1, 1), in, 1, out, 1), TPF_OK);
	assert_memory_equal(out[0].data, in[0].data, in[0].nbytes);
	assert_memory_equal((char *)out[0].data + in[0].nbytes, in[0].data, in[0].nbytes);
	kfree(out, 1);
	/* AllGather reorder: 2 ranks' [2,3,4] chunks -> [2,3,8] along axis 2 */
	int64_t dgat[3] = {2, 3, 8}, dflat[1] = {48};
	kt(&in[1], TPF_DTYPE_BFLOAT16, 1, dflat);
	memcpy(in[1].data, in[0].data, in[0].nbytes);
	for (int i = 0; i < 24; i++)
		tpf_elem_store(TPF_DTYPE_BFLOAT16, in[1].data, 24 + i, -at(&in[0], i), 1);
	kt(&out[0], TPF_DTYPE_BFLOAT16, 3, dgat);
	n = mknode(TPF_MS_DOMAIN, "AllGather", 1, 1);
	tpf_node_set_attr_int(n, "axis", -1);
	const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, n->op, TPF_PHASE_GATHER_REORDER,
						     TPF_DTYPE_BFLOAT16);
	assert_non_null(k);
	struct tpf_kernel_call call = {.node = n, .in = &in[1], .n_in = 1, .out = out, .n_out = 1,
				       .world = 2, .diag = D};
	assert_int_equal(k->run(&call), TPF_OK);
	for (int r = 0; r < 6; r++)
		for (int c = 0; c < 8; c++)
			assert_true(at(&out[0], r * 8 + c) == (c < 4 ? 1 : -1) * at(&in[0], r * 4 + c % 4));
	kfree(out, 1);
	kfree(in, 2);
}

static void test_attention(void **state)
{
	/* decode: Q [1,4,1,8], past K/V [1,2,5,8] + new K/V [1,2,1,8], GQA 2:1 */
	int64_t dq[4] = {1, 4, 1, 8}, dk[4] = {1, 2, 1, 8}, dp[4] = {1, 2, 5, 8}, dpr[4] = {1, 2, 6, 8};
	struct tpf_ktensor in[6], out[3];
	kt(&in[0], TPF_DTYPE_FLOAT, 4, dq);
	kt(&in[1], TPF_DTYPE_FLOAT, 4, dk);
	kt(&in[2], TPF_DTYPE_FLOAT, 4, dk);
	memset(&in[3], 0, sizeof(in[3]));
	kt(&in[4], TPF_DTYPE_FLOAT, 4, dp);
	kt(&in[5], TPF_DTYPE_FLOAT, 4, dp);
	for (int i = 0; i < 6; i++)
		if (in[i].data)
			fill_rand(&in[i], 80 + (unsigned)i);
	kt(&out[0], TPF_DTYPE_FLOAT, 4, dq);
	kt(&out[1], TPF_DTYPE_FLOAT, 4, dpr);
	kt(&out[2], TPF_DTYPE_FLOAT, 4, dpr);
	assert_int_equal(run(mknode("", "Attention", 6, 3), in, 6, out, 3), TPF_OK);
	for (int h = 0; h < 4; h++) {
		int hk = h / 2;
		double sc[6], mx = -INFINITY, sum = 0;
		for (int j = 0; j < 6; j++) {
			double s = 0;
			for (int d = 0; d < 8; d++) {
				double kv = j < 5 ? at(&in[4], (hk * 5 + j) * 8 + d) : at(&in[1], hk * 8 + d);
				s += at(&in[0], h * 8 + d) * kv;
			}
			sc[j] = s / sqrt(8.0);
			mx = fmax(mx, sc[j]);
		}
		for (int j = 0; j < 6; j++)
			sum += (sc[j] = exp(sc[j] - mx));
		for (int d = 0; d < 8; d++) {
			double acc = 0;
			for (int j = 0; j < 6; j++)
				acc += sc[j] * (j < 5 ? at(&in[5], (hk * 5 + j) * 8 + d) : at(&in[2], hk * 8 + d));
			expect_close(at(&out[0], h * 8 + d), acc / sum, TPF_DTYPE_FLOAT, 1e-2);
		}
	}
	assert_true(at(&out[1], 5 * 8) == at(&in[1], 0));
	kfree(in, 6);
	kfree(out, 3);
}

/* is_causal with a KV cache: query s of S new tokens sees the P cached keys
 * and the new keys up to its own position, j <= s + P (prefill after a
 * cached prefix, or a speculative decode step). */
static void test_attention_causal_past(void **state)
{
	(void)state;
	enum { S = 3, L = 3, P = 4, TT = P + L, DH = 4 };
	int64_t dq[4] = {1, 2, S, DH}, dk[4] = {1, 1, L, DH}, dp[4] = {1, 1, P, DH},
		dpr[4] = {1, 1, TT, DH};
	struct tpf_ktensor in[6], out[3];
	kt(&in[0], TPF_DTYPE_FLOAT, 4, dq);
	kt(&in[1], TPF_DTYPE_FLOAT, 4, dk);
	kt(&in[2], TPF_DTYPE_FLOAT, 4, dk);
	memset(&in[3], 0, sizeof(in[3]));
	kt(&in[4], TPF_DTYPE_FLOAT, 4, dp);
	kt(&in[5], TPF_DTYPE_FLOAT, 4, dp);
	for (int i = 0; i < 6; i++)
		if (in[i].data)
			fill_rand(&in[i], 180 + (unsigned)i);
	kt(&out[0], TPF_DTYPE_FLOAT, 4, dq);
	kt(&out[1], TPF_DTYPE_FLOAT, 4, dpr);
	kt(&out[2], TPF_DTYPE_FLOAT, 4, dpr);
	struct tpf_node *n = mknode("", "Attention", 6, 3);
	assert_int_equal(tpf_node_set_attr_int(n, "is_causal", 1), TPF_OK);
	assert_int_equal(run(n, in, 6, out, 3), TPF_OK);
	for (int h = 0; h < 2; h++)
		for (int s = 0; s < S; s++) {
			double sc[TT], mx = -INFINITY, sum = 0;
			int seen = s + P + 1; /* keys 0 .. s + P */
			for (int j = 0; j < seen; j++) {
				double acc = 0;
				for (int d = 0; d < DH; d++) {
					double kv = j < P ? at(&in[4], j * DH + d)
							  : at(&in[1], (j - P) * DH + d);
					acc += at(&in[0], (h * S + s) * DH + d) * kv;
				}
				sc[j] = acc / sqrt((double)DH);
				mx = fmax(mx, sc[j]);
			}
			for (int j = 0; j < seen; j++)
				sum += (sc[j] = exp(sc[j] - mx));
			for (int d = 0; d < DH; d++) {
				double acc = 0;
				for (int j = 0; j < seen; j++)
					acc += sc[j] * (j < P ? at(&in[5], j * DH + d)
							      : at(&in[2], (j - P) * DH + d));
				expect_close(at(&out[0], (h * S + s) * DH + d), acc / sum,
					     TPF_DTYPE_FLOAT, 1e-2);
			}
		}
	kfree(in, 6);
	kfree(out, 3);
}

static void test_table(void **state)
{
	size_t n;
	const struct tpf_kernel *const *list = tpf_kernel_list(&n);
	assert_true(n > 50);
	for (size_t i = 0; i < n; i++) {
		assert_non_null(list[i]->run);
		assert_non_null(list[i]->name);
	}
	assert_non_null(tpf_kernel_find(TPF_BACKEND_CPU, TPF_OP_MATMUL, TPF_PHASE_MAIN, TPF_DTYPE_BFLOAT16));
	assert_null(tpf_kernel_find(TPF_BACKEND_CPU, TPF_OP_SOFTMAX, TPF_PHASE_MAIN, TPF_DTYPE_INT64));
	assert_null(tpf_kernel_find(TPF_BACKEND_CPU, TPF_OP_IF, TPF_PHASE_MAIN, TPF_DTYPE_FLOAT));
	enum tpf_backend b;
	assert_int_equal(tpf_backend_from_name("cpu", &b), 0);
	assert_int_equal(b, TPF_BACKEND_CPU);
	assert_int_not_equal(tpf_backend_from_name("tpu", &b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_half_bf16),
		cmocka_unit_test(test_minifloats),
		cmocka_unit_test(test_binary_broadcast),
		cmocka_unit_test(test_unary_where_cast),
		cmocka_unit_test(test_matmul_gemm),
		cmocka_unit_test(test_matmul_tiled),
		cmocka_unit_test(test_reduce_softmax_topk),
		cmocka_unit_test(test_norms),
		cmocka_unit_test(test_quant),
		cmocka_unit_test(test_movement),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_attention_causal_past),
		cmocka_unit_test(test_table),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
