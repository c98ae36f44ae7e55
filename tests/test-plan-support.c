/* SPDX-License-Identifier: MIT */
/*
 * The planner on real exports' shapes: one refusal that lists every op the
 * runtime cannot run (each (op, dtype) once, with its count and first
 * node), given when a session is created, before any input exists, and at
 * plan time; sessions keep a plan per input signature (prefill and decode
 * shapes), rebuild only for inputs whose values decide shapes, and give
 * exact results after every switch; Range with float bounds given as
 * inputs; memory checks with clear messages instead of huge allocations;
 * the op knowledge the planner reads from the records and the kernel table;
 * a model lowered for the CPU gives the unlowered model's bits (gated
 * products too, packed or not).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "runtime-internal.h"
#include "tpf-passes.h"
#include "test-util.h"

static size_t count_str(const char *s, const char *sub)
{
	size_t n = 0;
	for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub))
		n++;
	return n;
}

/* ------------------------------------------------------------------ op knowledge */

/* What the plan asks of the op records and the kernel table: the inputs a
 * kernel reads on the host, the collectives, the phases a node runs as. */
static void test_op_knowledge(void **state)
{
	(void)state;
	for (size_t i = 1; i < 5; i++)
		assert_true(tpf_op_host_input(TPF_OP_SLICE, i));
	assert_false(tpf_op_host_input(TPF_OP_SLICE, 0));
	assert_true(tpf_op_host_input(TPF_OP_PAD, 1) && tpf_op_host_input(TPF_OP_PAD, 3));
	assert_false(tpf_op_host_input(TPF_OP_PAD, 2));
	assert_true(tpf_op_host_input(TPF_OP_REDUCE_SUM, 1) && tpf_op_host_input(TPF_OP_TOPK, 1));
	assert_false(tpf_op_host_input(TPF_OP_MATMUL, 1));
	assert_false(tpf_op_host_input(TPF_OP_SLICE, 40));
	assert_true(tpf_op_has_trait(TPF_OP_MS_REDUCE_SCATTER, TPF_OP_TRAIT_COLLECTIVE));
	assert_true(tpf_op_has_trait(TPF_OP_TPF_SHARDED_RMS_NORM, TPF_OP_TRAIT_COLLECTIVE));

	enum tpf_kernel_phase ph[4];
	assert_int_equal(tpf_kernel_phases(TPF_OP_MATMUL, ph, 4), 1);
	assert_int_equal(ph[0], TPF_PHASE_MAIN);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_GATED_ACTIVATION, ph, 4), 1);
	assert_int_equal(ph[0], TPF_PHASE_MAIN);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_SHARDED_RMS_NORM, ph, 4), 2);
	assert_int_equal(ph[0], TPF_PHASE_SUMSQ);
	assert_int_equal(ph[1], TPF_PHASE_NORMALIZE);
	assert_int_equal(tpf_kernel_phases(TPF_OP_MS_ALLGATHER, ph, 4), 1);
	assert_int_equal(ph[0], TPF_PHASE_GATHER_REORDER);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_ALLREDUCE_RMS_NORM, ph, 4), 1);
	assert_int_equal(ph[0], TPF_PHASE_POST_REDUCE);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_MATMUL_TRANS_B, ph, 4), 1);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_MATMUL_FP8, ph, 4), 1);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_GATED_MATMUL, ph, 4), 1);
	assert_int_equal(ph[0], TPF_PHASE_PRODUCT);
	assert_int_equal(tpf_kernel_phases(TPF_OP_MS_ALLREDUCE, ph, 4), 0);
	assert_int_equal(tpf_kernel_phases(TPF_OP_TPF_SHARDED_RMS_NORM, ph, 1), 1);
}

/* The CPU lowering (tpf_lower_for_backend) changes which kernels run, not
 * the bits: a MatMul of a transposed operand (MatMulTransB) and a product
 * of two FP8 dequantizations with power-of-two scales (MatMulFp8) give
 * what the unlowered model gives, which plans and runs as well. */
static void test_lowered_same_bits(void **state)
{
	(void)state;
	static const char *text = "ir_version 10\n"
				  "opset \"\" 23\n"
				  "graph \"g\" {\n"
				  "  input %0: f32[2,3,4] \"a\"\n"
				  "  input %1: f32[2,5,4] \"b\"\n"
				  "  input %2: f8e4m3fn[2,16] \"xq\"\n"
				  "  init %3: f8e4m3fn[16,16] \"wq\" = [WEIGHTS]\n"
				  "  init %4: f32[] \"sx\" = 0.25\n"
				  "  init %5: f32[] \"sw\" = 0.125\n"
				  "  %6 = Transpose(%1) {perm=[0, 2, 1]} : f32[2,4,5]  # bt\n"
				  "  %7 = MatMul(%0, %6) : f32[2,3,5]  # scores\n"
				  "  %8 = DequantizeLinear(%2, %4) : f32[2,16]  # dx\n"
				  "  %9 = DequantizeLinear(%3, %5) : f32[16,16]  # dw\n"
				  "  %10 = MatMul(%8, %9) : f32[2,16]  # mm\n"
				  "  output %7: f32[2,3,5] \"scores\"\n"
				  "  output %10: f32[2,16] \"y\"\n"
				  "}\n";
	static const char *const wv[8] = {"0.5", "1.0", "-0.25", "2.0", "0.125", "-1.5", "0.75", "-3.0"};
	char weights[2048] = "", model_text[4096];
	for (int i = 0; i < 256; i++) {
		strcat(weights, i ? ", " : "");
		strcat(weights, wv[(i * 3) % 8]);
	}
	const char *at = strstr(text, "WEIGHTS");
	snprintf(model_text, sizeof(model_text), "%.*s%s%s", (int)(at - text), text, weights, at + 7);
	struct tpf_model *m = parse_model(model_text);
	float a[24], b[40];
	uint8_t xq[32];
	for (int i = 0; i < 24; i++)
		a[i] = (float)((i * 5) % 7) - 3.0f;
	for (int i = 0; i < 40; i++)
		b[i] = (float)((i * 3) % 11) * 0.25f - 1.0f;
	for (int i = 0; i < 32; i++)
		xq[i] = (uint8_t)((i * 7) % 0x70 | (i % 3 ? 0 : 0x80)); /* no NaN codes */
	int64_t ad[3] = {2, 3, 4}, bd[3] = {2, 5, 4}, xd[2] = {2, 16};
	struct tpf_host_tensor in[3] = {host_tensor("a", TPF_DTYPE_FLOAT, 3, ad, a),
					host_tensor("b", TPF_DTYPE_FLOAT, 3, bd, b),
					host_tensor("xq", TPF_DTYPE_FLOAT8E4M3FN, 2, xd, xq)};
	float want[2][32];
	struct tpf_diag *d = tpf_diag_create();
	for (int lowered = 0; lowered < 2; lowered++) {
		if (lowered) {
			assert_int_equal(tpf_lower_for_backend(m, "cpu", NULL, d), TPF_OK);
			assert_int_equal(count_op(m->graph, TPF_OP_TPF_MATMUL_TRANS_B), 1);
			assert_int_equal(count_op(m->graph, TPF_OP_TPF_MATMUL_FP8), 1);
			assert_int_equal(count_op(m->graph, TPF_OP_TRANSPOSE), 0);
			assert_int_equal(count_op(m->graph, TPF_OP_DEQUANTIZE_LINEAR), 0);
			verify_ok(m);
		}
		struct tpf_session *s = NULL;
		const struct tpf_host_tensor *out = NULL;
		size_t n_out = 0;
		if (tpf_session_create(m, &(struct tpf_session_options){0}, &s, d) ||
		    tpf_session_run(s, in, 3, &out, &n_out, d))
			dump_diag(d);
		assert_non_null(s);
		assert_int_equal(n_out, 2);
		if (!lowered) {
			memcpy(want[0], out[0].data, 30 * sizeof(float));
			memcpy(want[1], out[1].data, 32 * sizeof(float));
		} else {
			assert_memory_equal(out[0].data, want[0], 30 * sizeof(float));
			assert_memory_equal(out[1].data, want[1], 32 * sizeof(float));
		}
		tpf_session_free(s);
	}
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* The kernel steps of m's plan for these inputs whose text holds `what`. */
static size_t plan_count(const struct tpf_model *m, const struct tpf_host_tensor *in, size_t n_in,
			 const char *what)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_plan *p = NULL;
	char *text = NULL;
	size_t len = 0;
	if (tpf_plan_build(m, in, n_in, NULL, &p, d))
		dump_diag(d);
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	assert_int_equal(tpf_plan_print(p, f), TPF_OK);
	fclose(f);
	size_t n = count_str(text, what);
	free(text);
	tpf_plan_free(p);
	tpf_diag_free(d);
	return n;
}

/* A packed GatedActivation of a product by a merged gate/up weight [32,
 * 2F]: the lowered GatedMatMul gives the unlowered bits through each of its
 * plans, the product then the activation (the CPU's default), the packed
 * weight's one kernel (TPF_GEMV_TILED=16, and 32 when F is a multiple of
 * 16) and, when F is not, the product packed as a MatMul's then the
 * activation (TPF_GEMV_TILED=32). */
static void gated_same_bits(int F)
{
	static const char *const wv[8] = {"0.5", "0.0625", "-0.25", "0.1875", "0.125", "-0.375", "0.75", "-0.03125"};
	static const char *const tiled[5] = {NULL, "16", NULL, "16", "32"};
	char weights[16384] = "", model_text[20000];
	for (int i = 0; i < 32 * 2 * F; i++) {
		strcat(weights, i ? ", " : "");
		strcat(weights, wv[(i * 5 + i / 7) % 8]);
	}
	snprintf(model_text, sizeof(model_text),
		 "ir_version 10\n"
		 "opset \"\" 23\n"
		 "graph \"g\" {\n"
		 "  input %%0: bf16[3,32] \"x\"\n"
		 "  init %%1: bf16[32,%d] \"w\" = [%s]\n"
		 "  %%2 = MatMul(%%0, %%1) : bf16[3,%d]  # mm\n"
		 "  %%3 = ai.tpfuse.GatedActivation(%%2) {activation=\"gelu_tanh\", packed=1} : bf16[3,%d]  # act\n"
		 "  output %%3: bf16[3,%d] \"y\"\n"
		 "}\n",
		 2 * F, weights, 2 * F, F, F);
	uint16_t x[96], want[96];
	for (int i = 0; i < 96; i++) {
		float v = (float)((i * 7) % 13) * 0.125f - 0.75f;
		uint32_t u;
		memcpy(&u, &v, 4);
		x[i] = (uint16_t)(u >> 16);
	}
	int64_t xd[2] = {3, 32};
	struct tpf_host_tensor in[1] = {host_tensor("x", TPF_DTYPE_BFLOAT16, 2, xd, x)};
	struct tpf_diag *d = tpf_diag_create();
	/* the unlowered model (unpacked, packed), then lowered */
	for (int run = 0; run < 5; run++) {
		struct tpf_model *m = parse_model(model_text);
		if (tiled[run])
			setenv("TPF_GEMV_TILED", tiled[run], 1);
		else
			unsetenv("TPF_GEMV_TILED");
		if (run >= 2) {
			int fold = run == 3 || (run == 4 && F % 16 == 0);
			assert_int_equal(tpf_lower_for_backend(m, "cpu", NULL, d), TPF_OK);
			assert_int_equal(count_op(m->graph, TPF_OP_TPF_GATED_MATMUL), 1);
			assert_int_equal(count_op(m->graph, TPF_OP_MATMUL), 0);
			verify_ok(m);
			assert_int_equal(plan_count(m, in, 1, "cpu.gated-matmul-tiled"), fold);
			assert_int_equal(plan_count(m, in, 1, "cpu.matmul-tiled"), run == 4 && !fold);
			assert_int_equal(plan_count(m, in, 1, "[product]"), run == 2);
		}
		struct tpf_session *s = NULL;
		const struct tpf_host_tensor *out = NULL;
		size_t n_out = 0;
		if (tpf_session_create(m, &(struct tpf_session_options){0}, &s, d) ||
		    tpf_session_run(s, in, 1, &out, &n_out, d))
			dump_diag(d);
		assert_non_null(s);
		assert_int_equal(n_out, 1);
		if (!run)
			memcpy(want, out[0].data, (size_t)(3 * F) * sizeof(uint16_t));
		else
			assert_memory_equal(out[0].data, want, (size_t)(3 * F) * sizeof(uint16_t));
		tpf_session_free(s);
		tpf_model_free(m);
	}
	unsetenv("TPF_GEMV_TILED");
	tpf_diag_free(d);
}

static void test_lowered_gated_same_bits(void **state)
{
	(void)state;
	gated_same_bits(32);
	gated_same_bits(8);
}

/* ------------------------------------------------------------------ refusals */

/* Three kinds of op the CPU runtime cannot run: an unknown op (twice), an
 * ONNX op it has no kernel for (Det) and Sigmoid of int32 (no kernel for
 * the dtype); the nodes after them are supported.  The declared input is
 * 2^40 floats, which nothing may allocate. */
static const char *unsupported_model =
	"ir_version 10\n"
	"opset \"\" 21\n"
	"opset \"foo\" 1\n"
	"graph \"g\" {\n"
	"  input %0: f32[1099511627776] \"x\"\n"
	"  input %1: i32[4] \"k\"\n"
	"  init %2: f32[2,2] \"m\" = [1.0, 2.0, 3.0, 4.0]\n"
	"  %3 = foo.Bar(%0) : f32[1099511627776]  # bar_first\n"
	"  %4 = Neg(%3) : f32[1099511627776]  # neg\n"
	"  %5 = foo.Bar(%4) : f32[1099511627776]  # bar_second\n"
	"  %6 = Sigmoid(%1) : i32[4]  # sig_int\n"
	"  %7 = Det(%2) : f32[]  # det\n"
	"  %8 = Neg(%6) : i32[4]  # after_sig\n"
	"  output %5: f32[1099511627776] \"y\"\n"
	"  output %7: f32[] \"z\"\n"
	"  output %8: i32[4] \"w\"\n"
	"}\n";

static void check_listing(const char *msg)
{
	if (!strstr(msg, "foo::Bar (f32): 2 nodes, the first node 'bar_first' (foo::Bar): not supported") ||
	    !strstr(msg, "Sigmoid (i32): 1 node, the first node 'sig_int' (Sigmoid): no cpu kernel for dtype i32") ||
	    !strstr(msg, "Det (f32): 1 node, the first node 'det' (Det)") ||
	    !strstr(msg, "4 nodes of this model (3 kinds of op)"))
		fail_msg("the refusal does not list every op once:\n%s", msg);
	/* each kind once */
	assert_int_equal(count_str(msg, "foo::Bar (f32)"), 1);
	assert_int_equal(count_str(msg, "Sigmoid (i32)"), 1);
	assert_int_equal(count_str(msg, "bar_second"), 0);
	assert_int_equal(count_str(msg, "'neg'"), 0);
}

static void test_refusal_lists_every_op(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(unsupported_model);
	struct tpf_diag *d = tpf_diag_create();
	/* from the graph alone */
	assert_int_equal(tpf_plan_check_model(m, TPF_BACKEND_CPU, d), TPF_ERR_UNSUPPORTED);
	assert_int_equal(d->count, 1);
	check_listing(d->entries[0].text);
	tpf_diag_clear(d);
	/* a session refuses when it is created: no input exists yet */
	struct tpf_session *s = NULL;
	clock_t t0 = clock();
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_ERR_UNSUPPORTED);
	assert_null(s);
	assert_true((double)(clock() - t0) / CLOCKS_PER_SEC < 2.0);
	assert_int_equal(d->count, 1);
	check_listing(d->entries[0].text);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* At plan time, with shapes: the same single error (the unknown op's
 * outputs have no shape; the planner goes on and checks the rest). */
static void test_plan_time_listing(void **state)
{
	(void)state;
	static const char *text = "ir_version 10\n"
				  "opset \"\" 21\n"
				  "opset \"foo\" 1\n"
				  "graph \"g\" {\n"
				  "  input %0: f32[4] \"x\"\n"
				  "  input %1: i32[4] \"k\"\n"
				  "  init %2: f32[2,2] \"m\" = [1.0, 2.0, 3.0, 4.0]\n"
				  "  %3 = foo.Bar(%0) : f32[4]  # bar_first\n"
				  "  %4 = Neg(%3) : f32[4]  # neg\n"
				  "  %5 = foo.Bar(%4) : f32[4]  # bar_second\n"
				  "  %6 = Sigmoid(%1) : i32[4]  # sig_int\n"
				  "  %7 = Det(%2) : f32[]  # det\n"
				  "  %8 = Neg(%6) : i32[4]  # after_sig\n"
				  "  output %5: f32[4] \"y\"\n"
				  "  output %7: f32[] \"z\"\n"
				  "  output %8: i32[4] \"w\"\n"
				  "}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_diag *d = tpf_diag_create();
	float x[4] = {1, 2, 3, 4};
	int32_t k[4] = {1, 2, 3, 4};
	int64_t dims[1] = {4};
	struct tpf_host_tensor in[2] = {host_tensor("x", TPF_DTYPE_FLOAT, 1, dims, x), host_tensor("k", TPF_DTYPE_INT32, 1, dims, k)};
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, in, 2, NULL, &p, d), TPF_ERR_UNSUPPORTED);
	assert_null(p);
	if (d->count != 1)
		dump_diag(d);
	assert_int_equal(d->count, 1);
	const char *msg = d->entries[0].text;
	if (!strstr(msg, "foo::Bar (f32): 2 nodes, the first node 'bar_first'") ||
	    !strstr(msg, "Sigmoid (i32): 1 node, the first node 'sig_int'") || !strstr(msg, "node 'det' (Det)"))
		fail_msg("plan-time refusal:\n%s", msg);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ per-signature plans */

/* y = x * (Range(0, T) as float)[T, 1] + Gather(table, ids): a mask-like
 * shape computation (Shape, Gather, Range, Unsqueeze, Cast) and a lookup
 * whose indices are a small integer input that decides no shape. */
static const char *cache_model =
	"ir_version 10\n"
	"opset \"\" 21\n"
	"graph \"g\" {\n"
	"  input %0: f32[T,4] \"x\"\n"
	"  input %1: i64[T] \"ids\"\n"
	"  init %2: i64[] \"zero\" = 0\n"
	"  init %3: i64[] \"one\" = 1\n"
	"  init %4: i64[1] \"axis1\" = [1]\n"
	"  init %5: f32[3,4] \"table\" = [0.5, 1.0, 1.5, 2.0, -1.0, -2.0, -3.0, -4.0, 10.0, 20.0, 30.0, 40.0]\n"
	"  %6 = Shape(%0)\n"
	"  %7 = Gather(%6, %2) {axis=0}\n"
	"  %8 = Range(%2, %7, %3)\n"
	"  %9 = Unsqueeze(%8, %4)\n"
	"  %10 = Cast(%9) {to=1}\n"
	"  %11 = Mul(%0, %10)\n"
	"  %12 = Gather(%5, %1) {axis=0}\n"
	"  %13 = Add(%11, %12)\n"
	"  output %13: f32[T,4] \"y\"\n"
	"}\n";

static const float table[3][4] = {{0.5f, 1, 1.5f, 2}, {-1, -2, -3, -4}, {10, 20, 30, 40}};

static void run_cache_case(struct tpf_session *s, int64_t T, unsigned seed, struct tpf_diag *d)
{
	float x[64 * 4];
	int64_t ids[64];
	for (int64_t i = 0; i < T * 4; i++)
		x[i] = (float)((i * 7 + seed) % 13) - 6.5f;
	for (int64_t t = 0; t < T; t++)
		ids[t] = (t + seed) % 3;
	int64_t xd[2] = {T, 4}, id[1] = {T};
	struct tpf_host_tensor in[2] = {host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, x), host_tensor("ids", TPF_DTYPE_INT64, 1, id, ids)};
	const struct tpf_host_tensor *out;
	size_t n_out;
	enum tpf_status st = tpf_session_run(s, in, 2, &out, &n_out, d);
	if (st)
		dump_diag(d);
	assert_int_equal(st, TPF_OK);
	assert_int_equal(n_out, 1);
	assert_int_equal(out[0].rank, 2);
	assert_int_equal(out[0].dims[0], T);
	const float *y = out[0].data;
	for (int64_t t = 0; t < T; t++)
		for (int c = 0; c < 4; c++) {
			float want = x[t * 4 + c] * (float)t + table[ids[t]][c];
			if (y[t * 4 + c] != want)
				fail_msg("T=%lld seed %u: y[%lld,%d] = %.9g, expected %.9g", (long long)T, seed, (long long)t, c,
					 (double)y[t * 4 + c], (double)want);
		}
}

static void test_plan_per_signature(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(cache_model);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_OK);
	size_t builds;
	/* prefill (T = 7), then decode steps (T = 1) with new ids each time,
	 * prefill again: two plans, each built once */
	run_cache_case(s, 7, 0, d);
	assert_int_equal(tpf_session_plan_count(s, &builds), 1);
	assert_int_equal(builds, 1);
	for (unsigned step = 1; step <= 4; step++)
		run_cache_case(s, 1, step, d);
	assert_int_equal(tpf_session_plan_count(s, &builds), 2);
	assert_int_equal(builds, 2);
	run_cache_case(s, 7, 5, d);
	run_cache_case(s, 1, 6, d);
	assert_int_equal(tpf_session_plan_count(s, &builds), 2);
	assert_int_equal(builds, 2);
	/* more signatures than the session keeps (T = 7 among them: kept): the
	 * least recently used go (T = 1 first), results stay exact */
	for (int64_t T = 2; T <= 12; T++)
		run_cache_case(s, T, (unsigned)T, d);
	assert_int_equal(tpf_session_plan_count(s, &builds), 8);
	assert_int_equal(builds, 12);
	run_cache_case(s, 12, 1, d); /* kept */
	run_cache_case(s, 7, 3, d);  /* kept */
	assert_int_equal(tpf_session_plan_count(s, &builds), 8);
	assert_int_equal(builds, 12);
	run_cache_case(s, 1, 2, d); /* evicted: built again */
	tpf_session_plan_count(s, &builds);
	assert_int_equal(builds, 13);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* The plans of a session share one copy of each constant derived from the
 * model: a weight packed in column tiles is packed once (the same host
 * bytes in every plan), and a device keeps one copy of it however many
 * plans read it, also after the plans that made it went (TPF_CPU_COPY_
 * CONSTANTS=1 makes the CPU backend copy constants as a device does).  A
 * Constant's scalar (value_float) is the model's too: the IR makes its
 * tensor once, so every plan reads the same bytes and the model's arena
 * does not grow with the plans.  A plan's folded values (the row index
 * below) stay the plan's own. */
enum { SH_K = 8, SH_N = 20 };

static char *shared_model_text(void)
{
	size_t cap = 8192, len = 0;
	char *t = malloc(cap);
	assert_non_null(t);
	len += (size_t)snprintf(t + len, cap - len,
				"ir_version 10\nopset \"\" 21\ngraph \"g\" {\n"
				"  input %%0: f32[T,%d] \"x\"\n  init %%1: f32[%d,%d] \"w\" = [",
				SH_K, SH_K, SH_N);
	for (int i = 0; i < SH_K * SH_N; i++)
		len += (size_t)snprintf(t + len, cap - len, "%s%d.0", i ? ", " : "", (i * 5) % 7 - 3);
	len += (size_t)snprintf(t + len, cap - len,
				"]\n  init %%2: i64[] \"zero\" = 0\n  init %%3: i64[] \"one\" = 1\n"
				"  init %%4: i64[1] \"axis1\" = [1]\n"
				"  %%5 = MatMul(%%0, %%1)  # mm\n"
				"  %%6 = Shape(%%0)\n  %%7 = Gather(%%6, %%2) {axis=0}\n"
				"  %%8 = Range(%%2, %%7, %%3)\n  %%9 = Unsqueeze(%%8, %%4)\n"
				"  %%10 = Cast(%%9) {to=1}\n  %%11 = Mul(%%5, %%10)\n"
				"  %%12 = Constant() {value_float=2.0}\n  %%13 = Mul(%%11, %%12)  # scale\n"
				"  output %%13: f32[T,%d] \"y\"\n}\n",
				SH_N);
	assert_true(len < cap);
	return t;
}

static void run_shared_case(struct tpf_session *s, int64_t T, struct tpf_diag *d)
{
	float x[16 * SH_K];
	for (int64_t i = 0; i < T * SH_K; i++)
		x[i] = (float)((i * 3 + T) % 5) - 2.0f;
	int64_t xd[2] = {T, SH_K};
	struct tpf_host_tensor in[1] = {host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, x)};
	const struct tpf_host_tensor *out;
	size_t n_out;
	enum tpf_status st = tpf_session_run(s, in, 1, &out, &n_out, d);
	if (st)
		dump_diag(d);
	assert_int_equal(st, TPF_OK);
	assert_int_equal(out[0].dims[0], T);
	const float *y = out[0].data;
	for (int64_t t = 0; t < T; t++)
		for (int j = 0; j < SH_N; j++) {
			float sum = 0; /* small integers: exact in any order */
			for (int k = 0; k < SH_K; k++)
				sum += x[t * SH_K + k] * (float)((k * SH_N + j) * 5 % 7 - 3);
			if (y[t * SH_N + j] != sum * (float)t * 2.0f)
				fail_msg("T=%lld: y[%lld,%d] = %g, expected %g", (long long)T, (long long)t, j,
					 (double)y[t * SH_N + j], (double)(sum * (float)t * 2.0f));
		}
}

/* One session over T = 1, 2, 3, 1, then 4 to 12 (T = 1, 2 and 3 are
 * evicted: the session keeps 8 plans) and 1, 2 again: checks the results
 * and what the plans share; returns the (device, derived) byte counts. */
static void shared_constants_case(const char *tiled, const char *copy, size_t *device, size_t *derived)
{
	char *text = shared_model_text();
	struct tpf_model *m = parse_model(text);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	if (tiled)
		setenv("TPF_GEMV_TILED", tiled, 1);
	if (copy)
		setenv("TPF_CPU_COPY_CONSTANTS", copy, 1);
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_OK);
	const void *w_host = NULL, *w_data = NULL, *c_host = NULL;
	size_t dev0 = 0, der0 = 0, arena0 = 0;
	static const int64_t Ts[] = {1, 2, 3, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2};
	for (size_t k = 0; k < sizeof(Ts) / sizeof(Ts[0]); k++) {
		run_shared_case(s, Ts[k], d);
		const struct tpf_ktensor *w = tpf_session_bound_input(s, "mm", 1);
		const struct tpf_ktensor *c = tpf_session_bound_input(s, "scale", 1);
		assert_non_null(w);
		assert_non_null(c);
		if (!k) {
			w_host = w->host;
			w_data = w->data;
			c_host = c->host;
			tpf_session_constant_bytes(s, &dev0, &der0);
			arena0 = tpf_arena_bytes(m->graph->arena);
		}
		/* every plan reads the same weight and scalar bytes, on the host
		 * and the device */
		assert_ptr_equal(w->host, w_host);
		assert_ptr_equal(w->data, w_data);
		assert_ptr_equal(c->host, c_host);
		assert_true(*(const float *)c->host == 2.0f);
		assert_int_equal(tpf_arena_bytes(m->graph->arena), arena0);
		tpf_session_constant_bytes(s, device, derived);
		assert_int_equal(*device, dev0);
		assert_int_equal(*derived, der0);
	}
	size_t builds;
	assert_int_equal(tpf_session_plan_count(s, &builds), 8);
	assert_int_equal(builds, 14);
	tpf_session_free(s);
	unsetenv("TPF_GEMV_TILED");
	unsetenv("TPF_CPU_COPY_CONSTANTS");
	tpf_diag_free(d);
	tpf_model_free(m);
	free(text);
}

static void test_constants_shared_between_plans(void **state)
{
	(void)state;
	size_t dev, der;
	const size_t w_bytes = SH_K * SH_N * sizeof(float);
	const size_t packed = 2 * SH_K * 16 * sizeof(float); /* two 16-column tiles, the second padded */
	/* kernels read the model's bytes: nothing copied, nothing derived */
	shared_constants_case(NULL, NULL, &dev, &der);
	assert_int_equal(dev, 0);
	assert_int_equal(der, 0);
	/* one device copy of the weight and of the Constant's scalar for every
	 * plan; the plans' folded row index is not among them */
	shared_constants_case(NULL, "1", &dev, &der);
	assert_int_equal(dev, w_bytes + sizeof(float));
	assert_int_equal(der, 0);
	/* packed once: the product reads only the packed copy, whose device
	 * copy is the only one */
	shared_constants_case("16", NULL, &dev, &der);
	assert_int_equal(dev, 0);
	assert_int_equal(der, packed);
	shared_constants_case("16", "1", &dev, &der);
	assert_int_equal(dev, packed + sizeof(float));
	assert_int_equal(der, packed);
}

/* An input whose values decide a shape (a Reshape target) keys the plan by
 * its values; one that only feeds data (the ids above) does not. */
static void test_value_dependent_inputs(void **state)
{
	(void)state;
	static const char *text = "ir_version 10\n"
				  "opset \"\" 21\n"
				  "graph \"g\" {\n"
				  "  input %0: f32[16] \"x\"\n"
				  "  input %1: i64[2] \"shape\"\n"
				  "  %2 = Reshape(%0, %1)\n"
				  "  output %2: f32[?,?] \"y\"\n"
				  "}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_OK);
	float x[16];
	for (int i = 0; i < 16; i++)
		x[i] = (float)i;
	int64_t shapes[3][2] = {{2, 8}, {4, 4}, {2, 8}};
	int64_t xd[1] = {16}, sd[1] = {2};
	size_t builds;
	for (int k = 0; k < 3; k++) {
		struct tpf_host_tensor in[2] = {host_tensor("x", TPF_DTYPE_FLOAT, 1, xd, x),
						host_tensor("shape", TPF_DTYPE_INT64, 1, sd, shapes[k])};
		const struct tpf_host_tensor *out;
		size_t n_out;
		assert_int_equal(tpf_session_run(s, in, 2, &out, &n_out, d), TPF_OK);
		assert_int_equal(out[0].dims[0], shapes[k][0]);
		assert_int_equal(out[0].dims[1], shapes[k][1]);
		assert_memory_equal(out[0].data, x, sizeof(x));
	}
	assert_int_equal(tpf_session_plan_count(s, &builds), 2);
	assert_int_equal(builds, 2);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Range of float bounds given as inputs: the length comes from the values
 * (ONNX's test_range_float_type_positive_delta, and a new limit). */
static void test_float_range_inputs(void **state)
{
	(void)state;
	static const char *text = "ir_version 10\n"
				  "opset \"\" 21\n"
				  "graph \"g\" {\n"
				  "  input %0: f32[] \"start\"\n"
				  "  input %1: f32[] \"limit\"\n"
				  "  input %2: f32[] \"delta\"\n"
				  "  %3 = Range(%0, %1, %2)\n"
				  "  output %3: f32[?] \"y\"\n"
				  "}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_OK);
	float lim[2] = {5, 9.5f};
	for (int k = 0; k < 2; k++) {
		float start = 1, delta = 2;
		struct tpf_host_tensor in[3] = {host_tensor("start", TPF_DTYPE_FLOAT, 0, NULL, &start),
						host_tensor("limit", TPF_DTYPE_FLOAT, 0, NULL, &lim[k]),
						host_tensor("delta", TPF_DTYPE_FLOAT, 0, NULL, &delta)};
		const struct tpf_host_tensor *out;
		size_t n_out;
		enum tpf_status st = tpf_session_run(s, in, 3, &out, &n_out, d);
		if (st)
			dump_diag(d);
		assert_int_equal(st, TPF_OK);
		int64_t n = k ? 5 : 2;
		assert_int_equal(out[0].dims[0], n);
		for (int64_t i = 0; i < n; i++)
			assert_true(((const float *)out[0].data)[i] == 1.0f + 2.0f * (float)i);
	}
	size_t builds;
	tpf_session_plan_count(s, &builds);
	assert_int_equal(builds, 2);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ memory */

static void test_memory_checks(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	size_t avail = 0;
	assert_int_equal(tpf_memory_available(TPF_BACKEND_CPU, &avail), 0);
	assert_true(avail > 0);
	assert_int_equal(tpf_memory_check(TPF_BACKEND_CPU, 1024, "a kilobyte", d), TPF_OK);
	assert_int_equal(tpf_memory_check(TPF_BACKEND_CPU, SIZE_MAX / 2, "the inputs", d), TPF_ERR_NOMEM);
	assert_non_null(strstr(d->entries[0].text, "the inputs: "));
	assert_non_null(strstr(d->entries[0].text, "of host memory available"));
	tpf_diag_clear(d);
	/* a plan whose arena cannot exist: a clear error, no allocation */
	static const char *text = "ir_version 10\n"
				  "opset \"\" 21\n"
				  "graph \"g\" {\n"
				  "  input %0: f32[1] \"x\"\n"
				  "  init %1: i64[2] \"big\" = [1048576, 1048576]\n"
				  "  %2 = Expand(%0, %1)\n"
				  "  output %2: f32[1048576,1048576] \"y\"\n"
				  "}\n";
	struct tpf_model *m = parse_model(text);
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, &(struct tpf_session_options){0}, &s, d), TPF_OK);
	float x = 1;
	int64_t xd[1] = {1};
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 1, xd, &x);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_ERR_NOMEM);
	int found = 0;
	for (size_t i = 0; i < d->count; i++)
		found |= strstr(d->entries[i].text, "the plan's buffers and constants: 4.0 TiB needed") != NULL;
	if (!found)
		dump_diag(d);
	assert_true(found);
	tpf_session_free(s);
	tpf_model_free(m);
	tpf_diag_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_op_knowledge),
		cmocka_unit_test(test_lowered_same_bits),
		cmocka_unit_test(test_lowered_gated_same_bits),
		cmocka_unit_test(test_refusal_lists_every_op),
		cmocka_unit_test(test_plan_time_listing),
		cmocka_unit_test(test_plan_per_signature),
		cmocka_unit_test(test_constants_shared_between_plans),
		cmocka_unit_test(test_value_dependent_inputs),
		cmocka_unit_test(test_float_range_inputs),
		cmocka_unit_test(test_memory_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
