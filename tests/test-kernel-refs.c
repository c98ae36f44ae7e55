/* SPDX-License-Identifier: MIT */
/*
 * The CPU half of the GPU kernel comparison (tests/gpu/test-gpu-kernels.c)
 * for the fused and quantizing cases: the same nodes, attributes and inputs,
 * run through the runtime's shape inference (tpf_rt_infer) and the CPU
 * kernel exactly as that test does before it touches a device, so a change
 * to an op record or a CPU kernel that breaks them fails here without a GPU.
 * Cases: ai.tpfuse.SigmoidGateAdd (gate [B,S,1], same shape, [R,1] with
 * H = 6), ai.tpfuse.RMSNorm (X, gamma) with weight_offset, the residual
 * form of that kernel body (AllReduceRMSNorm's post-reduce phase), the
 * post-reduce phases with a bias and of AllReduceLayerNorm against the
 * unfused kernels (bit for bit), and
 * QuantizeLinear per tensor to FLOAT8E4M3FN (the zero point gives the
 * output's dtype) and AllReduceRMSNormQuant's "fp8-group" post-reduce
 * phase against the formula, in float, float16 and bfloat16.  The nodes are the forms
 * their records accept: a gate has final's rank (a rank-1 gate is refused),
 * RMSNorm has two inputs and one output, and a node lists every operand the
 * call binds (the runtime infers from the node's operands: a QuantizeLinear
 * node of two inputs called with a zero point gives uint8).
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

#include "runtime-internal.h"
#include "test-util.h"

static unsigned seed = 12345;

static double rnd(void)
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) & 0xffff) / 16384.0 - 2.0; /* [-2, 2) */
}

/* A zeroed tensor of dtype dt and rank dims, read as int64_t from ap. */
static struct tpf_ktensor vtensor(enum tpf_dtype dt, int rank, va_list ap)
{
	int64_t d[TPF_KERNEL_MAX_RANK] = {0};
	for (int i = 0; i < rank; i++)
		d[i] = va_arg(ap, int64_t);
	return zero_ktensor(dt, rank, d);
}

/* T(dtype, rank, dims as int64_t...): a zeroed tensor. */
static struct tpf_ktensor T(enum tpf_dtype dt, int rank, ...)
{
	va_list ap;
	va_start(ap, rank);
	struct tpf_ktensor t = vtensor(dt, rank, ap);
	va_end(ap);
	return t;
}

/* As T, filled with random values that bfloat16 holds exactly. */
static struct tpf_ktensor R(enum tpf_dtype dt, int rank, ...)
{
	va_list ap;
	va_start(ap, rank);
	struct tpf_ktensor t = vtensor(dt, rank, ap);
	va_end(ap);
	for (int64_t i = 0; i < t.numel; i++)
		tpf_elem_store(dt, t.data, i, (double)tpf_bf16_to_f32(tpf_f32_to_bf16((float)rnd())), 1);
	return t;
}

static struct tpf_ktensor scalar_f(enum tpf_dtype dt, double v)
{
	struct tpf_ktensor t = T(dt, 0);
	tpf_elem_store(dt, t.data, 0, v, 1);
	return t;
}

static void free_tensors(struct tpf_ktensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].data);
}

static struct tpf_node *node(const char *domain, const char *op, size_t nin, size_t nout)
{
	struct tpf_value *ins[16] = {0};
	struct tpf_node *n = tpf_graph_add_node(kernel_graph, domain, op, op, ins, nin, nout, NULL);
	assert_non_null(n);
	return n;
}

/* What test-gpu-kernels.c's check() does on the host: infer the outputs
 * (rank 0 of 2), find the CPU kernel keyed as the runtime keys it, run it.
 * Returns the outputs (caller frees) in out. */
static void run_cpu(const char *label, struct tpf_node *n, struct tpf_ktensor *in, size_t n_in,
		    struct tpf_ktensor *out, size_t n_out)
{
	for (size_t i = 0; i < n_out; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		out[i].dtype = TPF_DTYPE_UNDEFINED;
		out[i].rank = -1;
	}
	struct tpf_kernel_call ic = {.node = n, .opset = 23, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
				     .rank = 0, .world = 2, .diag = kernel_diag};
	if (tpf_rt_infer(n, &ic, kernel_diag)) {
		printf("%s [%s]: shape inference failed\n", label, tpf_dtype_name(in[0].dtype));
		tpf_diag_print(kernel_diag, stdout);
		fail_msg("%s: shape inference failed", label);
	}
	for (size_t i = 0; i < n_out; i++) {
		if (out[i].rank < 0 || out[i].dtype == TPF_DTYPE_UNDEFINED) {
			out[i].rank = -1;
			out[i].data = NULL;
			continue;
		}
		assert_int_equal(tpf_ktensor_finish(&out[i]), 0);
		out[i].data = calloc(out[i].nbytes ? out[i].nbytes : 1, 1);
		out[i].host = NULL;
	}
	const struct tpf_kernel *ka = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN);
	if (!ka)
		fail_msg("%s: no cpu kernel", label);
	enum tpf_dtype key = ka->key_input < 0 ? out[0].dtype : in[ka->key_input].dtype;
	const struct tpf_kernel *kc = tpf_kernel_find(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN, key);
	if (!kc)
		fail_msg("%s: no cpu kernel for %s", label, tpf_dtype_name(key));
	struct tpf_kernel_call cc = {.node = n, .opset = 23, .in = in, .n_in = n_in, .out = out, .n_out = n_out,
				     .rank = 0, .world = 2, .diag = kernel_diag};
	if (kc->run(&cc)) {
		printf("%s [%s]: cpu kernel failed\n", label, tpf_dtype_name(in[0].dtype));
		tpf_diag_print(kernel_diag, stdout);
		fail_msg("%s: cpu kernel failed", label);
	}
	tpf_diag_clear(kernel_diag);
}

static const enum tpf_dtype FL[] = {TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT16, TPF_DTYPE_BFLOAT16};
#define NFL 3

static double tol(enum tpf_dtype dt)
{
	return dt == TPF_DTYPE_FLOAT ? 1e-5 : dt == TPF_DTYPE_FLOAT16 ? 4e-3 : 3e-2;
}

/* Y = final + sigmoid(gate) * shared, gate broadcast against final */
static void gate_case(const char *label, struct tpf_node *n, struct tpf_ktensor *in)
{
	struct tpf_ktensor out[1];
	run_cpu(label, n, in, 3, out, 1);
	assert_int_equal(out[0].dtype, in[0].dtype);
	assert_int_equal(out[0].rank, in[0].rank);
	for (int i = 0; i < in[0].rank; i++)
		assert_int_equal(out[0].dims[i], in[0].dims[i]);
	/* the reference: ONNX broadcasting of each input against the output */
	for (int64_t e = 0; e < out[0].numel; e++) {
		double v[3];
		for (int k = 0; k < 3; k++) {
			int64_t rem = e, off = 0, stride = 1;
			for (int d = out[0].rank - 1, dk = in[k].rank - 1; d >= 0; d--, dk--) {
				int64_t idx = rem % out[0].dims[d];
				rem /= out[0].dims[d];
				if (dk >= 0) {
					off += (in[k].dims[dk] == 1 ? 0 : idx) * stride;
					stride *= in[k].dims[dk];
				}
			}
			v[k] = tpf_elem_load(in[k].dtype, in[k].data, off);
		}
		/* inputs: final, gate, shared */
		double want = v[0] + v[2] / (1.0 + exp(-v[1]));
		double got = tpf_elem_load(out[0].dtype, out[0].data, e);
		if (fabs(got - want) > tol(out[0].dtype) * (1 + fabs(want)))
			fail_msg("%s: element %lld got %g want %g", label, (long long)e, got, want);
	}
	free(out[0].data);
}

static void test_sigmoid_gate_add(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		struct tpf_node *gate = node("ai.tpfuse", "SigmoidGateAdd", 3, 1);
		struct tpf_ktensor g1[3] = {R(dt, 3, 2, 4, 64), R(dt, 3, 2, 4, 1), R(dt, 3, 2, 4, 64)};
		gate_case("SigmoidGateAdd gate [2,4,1]", gate, g1);
		free_tensors(g1, 3);
		struct tpf_ktensor g2[3] = {R(dt, 2, 8, 64), R(dt, 2, 8, 64), R(dt, 2, 8, 64)};
		gate_case("SigmoidGateAdd gate [8,64]", gate, g2);
		free_tensors(g2, 3);
		struct tpf_ktensor g3[3] = {R(dt, 2, 8, 6), R(dt, 2, 8, 1), R(dt, 2, 8, 6)};
		gate_case("SigmoidGateAdd gate [8,1], H 6", gate, g3);
		free_tensors(g3, 3);
	}
}

/* Y = X / rms(X) * (1 + gamma) */
static void test_rmsnorm(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int v = 0; v < 2; v++) {
			struct tpf_node *tn = node("ai.tpfuse", "RMSNorm", 2, 1);
			tpf_node_set_attr_float(tn, "epsilon", 1e-6f);
			tpf_node_set_attr_float(tn, "weight_offset", 1.0f);
			int64_t h = v ? 72 : 256;
			struct tpf_ktensor t1[2] = {R(dt, 2, 4, h), R(dt, 1, h)};
			struct tpf_ktensor out[1];
			run_cpu("ai.tpfuse.RMSNorm (1+gamma)", tn, t1, 2, out, 1);
			assert_int_equal(out[0].dtype, dt);
			assert_int_equal(out[0].rank, 2);
			assert_int_equal(out[0].dims[0], 4);
			assert_int_equal(out[0].dims[1], h);
			for (int64_t r = 0; r < 4; r++) {
				double ss = 0;
				for (int64_t c = 0; c < h; c++) {
					double x = tpf_elem_load(dt, t1[0].data, r * h + c);
					ss += x * x;
				}
				double inv = 1.0 / sqrt(ss / (double)h + 1e-6);
				for (int64_t c = 0; c < h; c++) {
					double want = tpf_elem_load(dt, t1[0].data, r * h + c) * inv *
						      (1.0 + tpf_elem_load(dt, t1[1].data, c));
					double got = tpf_elem_load(dt, out[0].data, r * h + c);
					if (fabs(got - want) > 2 * tol(dt) * (1 + fabs(want)))
						fail_msg("RMSNorm [%s] h %lld: y[%lld,%lld] got %g want %g", tpf_dtype_name(dt),
							 (long long)h, (long long)r, (long long)c, got, want);
				}
			}
			free_tensors(out, 1);
			free_tensors(t1, 2);
		}
	}
}

/* AllReduceRMSNorm's post-reduce phase (the residual form of the same
 * kernel body): outputs as the GPU test gives them, x's shape and dtype;
 * s = x + residual, y = s / rms(s) * (1 + gamma) */
static void test_allreduce_rmsnorm_post_residual(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int v = 0; v < 2; v++) {
			struct tpf_node *rn = node("ai.tpfuse", "AllReduceRMSNorm", 3, 2);
			tpf_node_set_attr_float(rn, "epsilon", 1e-6f);
			tpf_node_set_attr_float(rn, "weight_offset", 1.0f);
			int64_t h = v ? 72 : 256;
			struct tpf_ktensor in[3] = {R(dt, 2, 4, h), R(dt, 1, h), R(dt, 2, 4, h)};
			struct tpf_ktensor out[2] = {T(dt, 2, 4, h), T(dt, 2, 4, h)};
			const struct tpf_kernel *k =
				tpf_kernel_find(TPF_BACKEND_CPU, rn->op, TPF_PHASE_POST_REDUCE, in[0].dtype);
			assert_non_null(k);
			struct tpf_kernel_call cc = {.node = rn, .opset = 23, .in = in, .n_in = 3, .out = out,
						     .n_out = 2, .rank = 0, .world = 2, .diag = kernel_diag};
			if (k->run(&cc)) {
				tpf_diag_print(kernel_diag, stdout);
				fail_msg("AllReduceRMSNorm post-reduce [%s]: cpu kernel failed", tpf_dtype_name(dt));
			}
			for (int64_t r = 0; r < 4; r++) {
				double ss = 0, sv[256];
				for (int64_t c = 0; c < h; c++) {
					/* the sum is rounded to its dtype before the norm */
					sv[c] = tpf_elem_load(dt, out[1].data, r * h + c);
					double want = tpf_elem_load(dt, in[0].data, r * h + c) +
						      tpf_elem_load(dt, in[2].data, r * h + c);
					if (fabs(sv[c] - want) > tol(dt) * (1 + fabs(want)))
						fail_msg("AllReduceRMSNorm [%s]: sum[%lld,%lld] got %g want %g",
							 tpf_dtype_name(dt), (long long)r, (long long)c, sv[c], want);
					ss += sv[c] * sv[c];
				}
				double inv = 1.0 / sqrt(ss / (double)h + 1e-6);
				for (int64_t c = 0; c < h; c++) {
					double want = sv[c] * inv * (1.0 + tpf_elem_load(dt, in[1].data, c));
					double got = tpf_elem_load(dt, out[0].data, r * h + c);
					if (fabs(got - want) > 2 * tol(dt) * (1 + fabs(want)))
						fail_msg("AllReduceRMSNorm [%s] h %lld: y[%lld,%lld] got %g want %g",
							 tpf_dtype_name(dt), (long long)h, (long long)r, (long long)c, got,
							 want);
				}
			}
			tpf_diag_clear(kernel_diag);
			free_tensors(out, 2);
			free_tensors(in, 3);
		}
	}
}

/* The post-reduce phases with a bias (AllReduceRMSNorm) and of
 * AllReduceLayerNorm against the unfused kernels they stand for, bit for
 * bit in every dtype: Add(x, bias) -> Add(., residual) -> RMSNormalization
 * or LayerNormalization(., gamma, beta). */
static void test_allreduce_norm_post_bias(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int layer = 0; layer < 2; layer++) {
			const char *op = layer ? "AllReduceLayerNorm" : "AllReduceRMSNorm";
			size_t nin = layer ? 5 : 4;
			struct tpf_node *f = node("ai.tpfuse", op, nin, 2);
			tpf_node_set_attr_float(f, "epsilon", 1e-5f);
			struct tpf_ktensor in[5] = {R(dt, 2, 4, 64), R(dt, 1, 64), R(dt, 2, 4, 64), R(dt, 1, 64),
						    R(dt, 1, 64)};
			struct tpf_ktensor out[2] = {T(dt, 2, 4, 64), T(dt, 2, 4, 64)};
			const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, f->op, TPF_PHASE_POST_REDUCE, dt);
			assert_non_null(k);
			struct tpf_kernel_call cc = {.node = f, .opset = 23, .in = in, .n_in = nin, .out = out,
						     .n_out = 2, .rank = 0, .world = 2, .diag = kernel_diag};
			if (k->run(&cc)) {
				tpf_diag_print(kernel_diag, stdout);
				fail_msg("%s post-reduce [%s]: cpu kernel failed", op, tpf_dtype_name(dt));
			}
			struct tpf_ktensor b[1], sum[1], y[1];
			run_cpu("Add bias", node("", "Add", 2, 1), (struct tpf_ktensor[]){in[0], in[3]}, 2, b, 1);
			run_cpu("Add residual", node("", "Add", 2, 1), (struct tpf_ktensor[]){b[0], in[2]}, 2, sum, 1);
			struct tpf_node *n = node("", layer ? "LayerNormalization" : "RMSNormalization", layer ? 3 : 2, 1);
			tpf_node_set_attr_float(n, "epsilon", 1e-5f);
			run_cpu("norm", n, (struct tpf_ktensor[]){sum[0], in[1], in[4]}, layer ? 3 : 2, y, 1);
			if (memcmp(out[1].data, sum[0].data, sum[0].nbytes) || memcmp(out[0].data, y[0].data, y[0].nbytes))
				fail_msg("%s post-reduce [%s]: not the unfused kernels' bits", op, tpf_dtype_name(dt));
			free_tensors(b, 1);
			free_tensors(sum, 1);
			free_tensors(y, 1);
			free_tensors(out, 2);
			free_tensors(in, 5);
		}
	}
}

/* QuantizeLinear(x, scale, zero point of FLOAT8E4M3FN): saturating e4m3 codes */
static void test_quantize_fp8(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		struct tpf_node *q = node("", "QuantizeLinear", 3, 1);
		struct tpf_ktensor a[3] = {R(dt, 2, 8, 64), scalar_f(dt, 0.01), T(TPF_DTYPE_FLOAT8E4M3FN, 0)};
		struct tpf_ktensor out[1];
		run_cpu("QuantizeLinear per tensor -> fp8 e4m3", q, a, 3, out, 1);
		assert_int_equal(out[0].dtype, TPF_DTYPE_FLOAT8E4M3FN);
		assert_int_equal(out[0].rank, 2);
		assert_int_equal(out[0].dims[0], 8);
		assert_int_equal(out[0].dims[1], 64);
		double sc = tpf_elem_load(dt, a[1].data, 0);
		for (int64_t e = 0; e < out[0].numel; e++) {
			double want = tpf_elem_load(dt, a[0].data, e) / sc;
			want = want > 448 ? 448 : want < -448 ? -448 : want;
			double got = tpf_elem_load(TPF_DTYPE_FLOAT8E4M3FN, out[0].data, e);
			/* e4m3: 3 mantissa bits, round to nearest: within half a step */
			if (fabs(got - want) > fabs(want) / 16 + 1e-3)
				fail_msg("QuantizeLinear fp8 [%s]: element %lld got %g want %g", tpf_dtype_name(dt),
					 (long long)e, got, want);
		}
		free(out[0].data);
		free_tensors(a, 3);
	}
}

/* AllReduceRMSNormQuant "fp8-group" post-reduce: the norm (kept in output
 * 3, rounded to its dtype) per group of 64: float32 scale max(amax / 448,
 * floor), codes within half an e4m3 step of norm / scale; a group of
 * zeros takes the floor.  The same node as test-gpu-kernels.c's case. */
static void test_fp8_group(void **state)
{
	(void)state;
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		struct tpf_node *ag = node("ai.tpfuse", "AllReduceRMSNormQuant", 4, 4);
		tpf_node_set_attr_string(ag, "quant", "fp8-group");
		tpf_node_set_attr_int(ag, "block_size", 64);
		const double floor_v = 1e-4;
		struct tpf_ktensor in[4] = {R(dt, 2, 3, 128), R(dt, 1, 128), scalar_f(TPF_DTYPE_FLOAT, floor_v),
					    R(dt, 2, 3, 128)};
		/* row 2's second group: zeros in the input and the residual */
		for (int64_t c = 64; c < 128; c++) {
			tpf_elem_store(dt, in[0].data, 2 * 128 + c, 0.0, 1);
			tpf_elem_store(dt, in[3].data, 2 * 128 + c, 0.0, 1);
		}
		struct tpf_ktensor out[4] = {T(TPF_DTYPE_FLOAT8E4M3FN, 2, 3, 128), T(dt, 2, 3, 128),
					     T(TPF_DTYPE_FLOAT, 2, 3, 2), T(dt, 2, 3, 128)};
		const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, ag->op, TPF_PHASE_POST_REDUCE, dt);
		assert_non_null(k);
		struct tpf_kernel_call cc = {.node = ag, .opset = 23, .in = in, .n_in = 4, .out = out, .n_out = 4,
					     .rank = 0, .world = 2, .diag = kernel_diag};
		if (k->run(&cc)) {
			tpf_diag_print(kernel_diag, stdout);
			fail_msg("fp8-group [%s]: cpu kernel failed", tpf_dtype_name(dt));
		}
		for (int64_t g = 0; g < 6; g++) {
			double amax = 0;
			for (int64_t i = 0; i < 64; i++)
				amax = fmax(amax, fabs(tpf_elem_load(dt, out[3].data, g * 64 + i)));
			double want_s = fmax(amax / 448.0, floor_v);
			double got_s = ((float *)out[2].data)[g];
			if (fabs(got_s - want_s) > 1e-6 * want_s)
				fail_msg("fp8-group [%s]: scale %lld got %g want %g", tpf_dtype_name(dt), (long long)g,
					 got_s, want_s);
			if (g == 5 && got_s != (float)floor_v)
				fail_msg("fp8-group [%s]: a group of zeros takes the floor, got %g", tpf_dtype_name(dt), got_s);
			for (int64_t i = 0; i < 64; i++) {
				double want = tpf_elem_load(dt, out[3].data, g * 64 + i) / got_s;
				double got = tpf_elem_load(TPF_DTYPE_FLOAT8E4M3FN, out[0].data, g * 64 + i);
				if (fabs(got) > 448 || fabs(got - want) > fabs(want) / 16 + 1e-3)
					fail_msg("fp8-group [%s]: element %lld got %g want %g", tpf_dtype_name(dt),
						 (long long)(g * 64 + i), got, want);
			}
		}
		tpf_diag_clear(kernel_diag);
		free_tensors(out, 4);
		free_tensors(in, 4);
	}
}

/* What the records refuse or decide, so the GPU test's nodes stay valid:
 * a rank-1 gate; a QuantizeLinear node of two operands called with a zero
 * point infers from its own operands (uint8). */
static void test_node_forms(void **state)
{
	(void)state;
	enum tpf_dtype dt = TPF_DTYPE_FLOAT;
	struct tpf_node *gate = node("ai.tpfuse", "SigmoidGateAdd", 3, 1);
	struct tpf_ktensor g[3] = {R(dt, 2, 8, 6), R(dt, 1, 6), R(dt, 2, 8, 6)};
	struct tpf_ktensor out[1] = {{.dtype = TPF_DTYPE_UNDEFINED, .rank = -1}};
	struct tpf_kernel_call ic = {.node = gate, .opset = 23, .in = g, .n_in = 3, .out = out, .n_out = 1,
				     .rank = 0, .world = 2, .diag = kernel_diag};
	assert_int_not_equal(tpf_rt_infer(gate, &ic, kernel_diag), TPF_OK);
	tpf_diag_clear(kernel_diag);
	free_tensors(g, 3);

	struct tpf_node *q = node("", "QuantizeLinear", 2, 1);
	struct tpf_ktensor a[3] = {R(dt, 2, 8, 64), scalar_f(dt, 0.01), T(TPF_DTYPE_FLOAT8E4M3FN, 0)};
	struct tpf_ktensor qo[1] = {{.dtype = TPF_DTYPE_UNDEFINED, .rank = -1}};
	struct tpf_kernel_call qc = {.node = q, .opset = 23, .in = a, .n_in = 3, .out = qo, .n_out = 1,
				     .rank = 0, .world = 2, .diag = kernel_diag};
	assert_int_equal(tpf_rt_infer(q, &qc, kernel_diag), TPF_OK);
	assert_int_equal(qo[0].dtype, TPF_DTYPE_UINT8);
	tpf_diag_clear(kernel_diag);
	free_tensors(a, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sigmoid_gate_add, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_rmsnorm, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_allreduce_rmsnorm_post_residual, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_allreduce_norm_post_bias, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_quantize_fp8, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_fp8_group, kernel_setup, kernel_teardown),
		cmocka_unit_test_setup_teardown(test_node_forms, kernel_setup, kernel_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
