/* SPDX-License-Identifier: MIT */
/*
 * Every CUDA kernel of the kernel table against its CPU reference kernel,
 * over shapes and dtypes: the same node, the same inputs; outputs compared
 * with a tolerance stated per case (|gpu - cpu| <= atol + rtol * |cpu|,
 * NaN matching NaN; integer, bool and index outputs exactly; FP8 and FP4
 * outputs by their codes, see codes_match).  GPU output buffers start
 * filled with 0xff bytes, so an element a kernel forgets to write shows as
 * a mismatch.
 *
 * Before any GPU work the FP8/FP4 code comparison checks itself on the host:
 * it must reject codes rounded toward zero and codes of values 5% too large.
 *
 * Usage: test-gpu-kernels [FILTER [--flash]]: FILTER picks the groups whose
 * name it holds (attention, matmul, ...); --flash runs the prompt-attention
 * cases on the flash form of that kernel (TPF_PREFILL_ATTENTION=2).
 *
 * Exit 0 all passed, 1 a mismatch or error, 77 no GPU (skipped).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime-internal.h"
#include "tpf-cuda-runtime.h"
#include "cuda/tpf-cuda.h"

static struct tpf_graph *G;
static struct tpf_diag *D;
static struct tpf_device *DEV;
static int n_pass, n_fail;
static unsigned seed = 12345;

/* ------------------------------------------------------------------ tensors */

enum fill { F_RAND, F_POS, F_INDEX, F_BOOL, F_SMALLINT, F_ZERO };

static double rnd(void)
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) & 0xffff) / 16384.0 - 2.0; /* [-2, 2) */
}

static struct tpf_ktensor T(enum tpf_dtype dt, int rank, ...)
{
	struct tpf_ktensor t;
	va_list ap;
	memset(&t, 0, sizeof(t));
	t.dtype = dt;
	t.rank = rank;
	va_start(ap, rank);
	for (int i = 0; i < rank; i++)
		t.dims[i] = va_arg(ap, int64_t);
	va_end(ap);
	if (tpf_ktensor_finish(&t)) {
		fprintf(stderr, "bad test tensor\n");
		exit(1);
	}
	t.data = calloc(t.nbytes ? t.nbytes : 1, 1);
	t.host = t.data;
	return t;
}

/* fills with bf16-representable values (exact in every float dtype) */
static struct tpf_ktensor fill(struct tpf_ktensor t, enum fill f, int64_t lim)
{
	for (int64_t i = 0; i < t.numel; i++) {
		double v = (double)tpf_bf16_to_f32(tpf_f32_to_bf16((float)rnd()));
		switch (f) {
		case F_POS:
			v = fabs(v) + 0.5;
			break;
		case F_INDEX: {
			seed = seed * 1103515245u + 12345u;
			int64_t k = (int64_t)((seed >> 8) % (unsigned)lim);
			tpf_elem_store_int(t.dtype, t.data, i, (seed >> 20) & 1 ? k - lim : k);
			continue;
		}
		case F_BOOL:
			tpf_elem_store_int(t.dtype, t.data, i, v > 0);
			continue;
		case F_SMALLINT:
			tpf_elem_store_int(t.dtype, t.data, i, (int64_t)floor(v * 5));
			continue;
		case F_ZERO:
			v = 0;
			break;
		default:
			break;
		}
		tpf_elem_store(t.dtype, t.data, i, v, 1);
	}
	return t;
}

#define R(dt, ...) fill(T(dt, __VA_ARGS__), F_RAND, 0)
#define P(dt, ...) fill(T(dt, __VA_ARGS__), F_POS, 0)

static struct tpf_ktensor ints(enum tpf_dtype dt, int n, const int64_t *v)
{
	struct tpf_ktensor t = T(dt, 1, (int64_t)n);
	for (int i = 0; i < n; i++)
		tpf_elem_store_int(dt, t.data, i, v[i]);
	return t;
}

static struct tpf_ktensor scalar_f(enum tpf_dtype dt, double v)
{
	struct tpf_ktensor t = T(dt, 0);
	tpf_elem_store(dt, t.data, 0, v, 1);
	return t;
}

static struct tpf_ktensor omitted(void)
{
	struct tpf_ktensor t;
	memset(&t, 0, sizeof(t));
	t.rank = -1;
	return t;
}

static struct tpf_node *node(const char *domain, const char *op, size_t nin, size_t nout)
{
	struct tpf_value *ins[16] = {0};
	struct tpf_node *n = tpf_graph_add_node(G, domain, op, op, ins, nin, nout, NULL);
	if (!n) {
		fprintf(stderr, "cannot make node %s\n", op);
		exit(1);
	}
	return n;
}

/* ------------------------------------------------------------------ check */

struct tol {
	double atol, rtol;
};

static struct tol tol_for(enum tpf_dtype t, double scale)
{
	struct tol r = {0, 0};
	switch (t) {
	case TPF_DTYPE_FLOAT:
		r.atol = 1e-5 * scale, r.rtol = 1e-5 * scale;
		break;
	case TPF_DTYPE_DOUBLE:
		r.atol = 1e-12 * scale, r.rtol = 1e-12 * scale;
		break;
	case TPF_DTYPE_FLOAT16:
		r.atol = 1e-3 * scale, r.rtol = 1e-3 * scale;
		break;
	case TPF_DTYPE_BFLOAT16:
		r.atol = 8e-3 * scale, r.rtol = 8e-3 * scale;
		break;
	default:
		break; /* exact; FP8/FP4 codes: codes_match */
	}
	return r;
}

/* ------------------------------------------------------- FP8 / FP4 codes */

static int is_minifloat(enum tpf_dtype t)
{
	return t == TPF_DTYPE_FLOAT8E4M3FN || t == TPF_DTYPE_FLOAT8E5M2 || t == TPF_DTYPE_FLOAT4E2M1;
}

/* the code of element i (FP4: two per byte, low nibble first) */
static unsigned code_at(enum tpf_dtype t, const void *data, int64_t i)
{
	const uint8_t *b = data;
	if (t == TPF_DTYPE_FLOAT4E2M1)
		return (b[i / 2] >> (4 * (i & 1))) & 0xfu;
	return b[i];
}

/* Sign-magnitude codes on one integer line: neighbouring representable
 * values are one apart, +0 and -0 both 0. */
static int64_t code_ordinal(enum tpf_dtype t, unsigned code)
{
	unsigned sign = t == TPF_DTYPE_FLOAT4E2M1 ? 0x8u : 0x80u;
	int64_t mag = code & (sign - 1);
	return code & sign ? -mag : mag;
}

/* FP8/FP4 outputs compare by code.  Both backends compute the value to
 * quantize in float32 with the same operations (x / scale, IEEE division,
 * no fast math) and round it to nearest even, so codes agree unless an
 * input to the rounding differs in its last float bits: a fused norm's sum
 * of squares in another order, a block's amax.  A value within those few
 * ulps of a rounding boundary is rare (about 1e-6 of the elements for a
 * 2^-24 relative difference against a 2^-3..2^-4 step), so at least 99.9% of
 * the codes must be identical and the rest one code apart.  NaN must match
 * NaN and infinity itself.  A rounding toward zero moves about half of all
 * codes, a 5% scale error about 40%: both fail (self_check_codes). */
static int codes_match(enum tpf_dtype t, const void *want, const void *got, int64_t n, char *why, size_t whysz)
{
	int64_t off = 0;
	for (int64_t i = 0; i < n; i++) {
		unsigned cw = code_at(t, want, i), cg = code_at(t, got, i);
		double w = tpf_minifloat_to_f32(t, (uint8_t)cw), g = tpf_minifloat_to_f32(t, (uint8_t)cg);
		if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
			if ((isnan(w) && isnan(g)) || w == g)
				continue;
			snprintf(why, whysz, "element %lld: gpu code 0x%02x (%g), cpu 0x%02x (%g)", (long long)i, cg, g, cw,
				 w);
			return 0;
		}
		int64_t d = code_ordinal(t, cw) - code_ordinal(t, cg);
		if (d == 0)
			continue;
		if (d > 1 || d < -1) {
			snprintf(why, whysz, "element %lld: gpu code 0x%02x (%g), cpu 0x%02x (%g): %lld codes apart",
				 (long long)i, cg, g, cw, w, (long long)(d < 0 ? -d : d));
			return 0;
		}
		off++;
	}
	if (off * 1000 > n) {
		snprintf(why, whysz, "%lld of %lld codes one apart (at most 0.1%%)", (long long)off, (long long)n);
		return 0;
	}
	snprintf(why, whysz, "%lld of %lld codes one apart", (long long)off, (long long)n);
	return 1;
}

/* The code comparison rejects what the old value tolerance (0.02 + 13%)
 * let through: every code rounded toward zero, values 5% too large; and
 * accepts one code off in 4096 but not two codes off. */
static int self_check_codes(void)
{
	static const enum tpf_dtype types[] = {TPF_DTYPE_FLOAT8E4M3FN, TPF_DTYPE_FLOAT8E5M2, TPF_DTYPE_FLOAT4E2M1};
	enum { N = 4096 };
	int ok = 1;
	unsigned saved_seed = seed; /* the GPU cases keep their inputs */
	for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
		enum tpf_dtype t = types[k];
		uint8_t ref[N], trunc[N], big[N], one[N], two[N];
		char why[256];
		memset(ref, 0, sizeof(ref));
		memset(trunc, 0, sizeof(trunc));
		memset(big, 0, sizeof(big));
		for (int64_t i = 0; i < N; i++) {
			double v = rnd() * 2.5; /* [-5, 5): several binades of every format */
			tpf_elem_store(t, ref, i, v, 1);
			tpf_elem_store(t, big, i, v * 1.05, 1);
			/* toward zero: the nearest code whose magnitude is not above |v| */
			double r = tpf_elem_load(t, ref, i);
			tpf_elem_store(t, trunc, i, r, 1);
			if (fabs(r) > fabs(v)) {
				unsigned c = code_at(t, ref, i);
				unsigned dn = (c & (t == TPF_DTYPE_FLOAT4E2M1 ? 0x7u : 0x7fu)) ? c - 1 : c;
				if (t == TPF_DTYPE_FLOAT4E2M1) {
					trunc[i / 2] &= (uint8_t)~(0xfu << (4 * (i & 1)));
					trunc[i / 2] |= (uint8_t)(dn << (4 * (i & 1)));
				} else {
					trunc[i] = (uint8_t)dn;
				}
			}
		}
		size_t bytes = t == TPF_DTYPE_FLOAT4E2M1 ? N / 2 : N;
		tpf_elem_store(t, ref, 8, 1.0, 1); /* room above it in every format */
		memcpy(one, ref, bytes);
		memcpy(two, ref, bytes);
		/* element 8: one code up in magnitude (its ordinal moves by one) */
		unsigned c8 = code_at(t, ref, 8);
		unsigned up = c8 + 1, up2 = c8 + 2;
		if (t == TPF_DTYPE_FLOAT4E2M1) {
			one[4] = (uint8_t)((one[4] & 0xf0u) | (up & 0xfu));
			two[4] = (uint8_t)((two[4] & 0xf0u) | (up2 & 0xfu));
		} else {
			one[8] = (uint8_t)up;
			two[8] = (uint8_t)up2;
		}
		int m_same = codes_match(t, ref, ref, N, why, sizeof(why));
		int m_trunc = codes_match(t, ref, trunc, N, why, sizeof(why));
		int m_big = codes_match(t, ref, big, N, why, sizeof(why));
		int m_one = codes_match(t, ref, one, N, why, sizeof(why));
		int m_two = codes_match(t, ref, two, N, why, sizeof(why));
		int good = m_same && !m_trunc && !m_big && m_one && !m_two;
		printf("%s code comparison self-check %-8s identical %s, toward zero %s, x1.05 %s, 1 of %d one code off %s, "
		       "two codes off %s\n",
		       good ? "PASS" : "FAIL", tpf_dtype_name(t), m_same ? "accepted" : "REJECTED",
		       m_trunc ? "ACCEPTED" : "rejected", m_big ? "ACCEPTED" : "rejected", N,
		       m_one ? "accepted" : "REJECTED", m_two ? "ACCEPTED" : "rejected");
		ok &= good;
	}
	seed = saved_seed;
	return ok;
}

static void free_tensors(struct tpf_ktensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].rank >= 0)
			free(t[i].data);
}

/* Runs node n (phase ph) on both backends.  out: NULL to infer the output
 * shapes, else n_out templates (dtype, rank, dims).  scale widens the
 * default tolerance (accumulations). */
static void check(const char *label, struct tpf_node *n, enum tpf_kernel_phase ph, struct tpf_ktensor *in,
		  size_t n_in, const struct tpf_ktensor *out_tpl, size_t n_out, double scale)
{
	struct tpf_ktensor cin[16], gin[16], cout[16], gout[16];
	void *dptr[32] = {0};
	size_t nd = 0;
	int ok = 1;
	char why[512] = "";
	memset(cout, 0, sizeof(cout));
	for (size_t i = 0; i < n_in; i++)
		cin[i] = in[i];
	if (out_tpl) {
		for (size_t i = 0; i < n_out; i++) {
			cout[i] = out_tpl[i];
			cout[i].data = NULL;
			cout[i].host = NULL;
		}
	} else {
		for (size_t i = 0; i < n_out; i++) {
			cout[i].dtype = TPF_DTYPE_UNDEFINED;
			cout[i].rank = -1;
		}
		struct tpf_kernel_call ic = {.node = n, .opset = 23, .in = cin, .n_in = n_in, .out = cout,
					     .n_out = n_out, .rank = 0, .world = 2, .diag = D};
		if (tpf_rt_infer(n, &ic, D)) {
			snprintf(why, sizeof(why), "shape inference failed");
			ok = 0;
			goto report;
		}
	}
	for (size_t i = 0; i < n_out; i++) {
		if (cout[i].rank < 0 || cout[i].dtype == TPF_DTYPE_UNDEFINED) {
			cout[i].rank = -1;
			cout[i].data = NULL;
			continue;
		}
		tpf_ktensor_finish(&cout[i]);
		cout[i].data = calloc(cout[i].nbytes ? cout[i].nbytes : 1, 1);
		cout[i].host = NULL;
	}
	/* key operand as the runtime picks it */
	const struct tpf_kernel *ka = tpf_kernel_find_any(TPF_BACKEND_CUDA, n->op, ph);
	const struct tpf_kernel *kc_any = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, ph);
	if (!ka || !kc_any) {
		snprintf(why, sizeof(why), "no %s kernel", ka ? "cpu" : "cuda");
		ok = 0;
		goto report;
	}
	enum tpf_dtype key = ka->key_input < 0 ? cout[0].dtype : in[ka->key_input].dtype;
	const struct tpf_kernel *kg = tpf_kernel_find(TPF_BACKEND_CUDA, n->op, ph, key);
	const struct tpf_kernel *kc = tpf_kernel_find(TPF_BACKEND_CPU, n->op, ph, key);
	if (!kg || !kc) {
		snprintf(why, sizeof(why), "no %s kernel for %s", kg ? "cpu" : "cuda", tpf_dtype_name(key));
		ok = 0;
		goto report;
	}
	struct tpf_kernel_call cc = {.node = n, .opset = 23, .in = cin, .n_in = n_in, .out = cout, .n_out = n_out,
				     .rank = 0, .world = 2, .diag = D};
	if (kc->run(&cc)) {
		snprintf(why, sizeof(why), "cpu kernel failed");
		ok = 0;
		goto report;
	}
	/* device copies */
	for (size_t i = 0; i < n_in; i++) {
		gin[i] = in[i];
		if (in[i].rank < 0)
			continue;
		gin[i].data = dptr[nd++] = DEV->alloc(DEV, in[i].nbytes ? in[i].nbytes : 1);
		DEV->upload(DEV, gin[i].data, in[i].data, in[i].nbytes, D);
		gin[i].host = in[i].data; /* as for plan constants */
		/* as the case says; every Attention operand invariant (nothing
		 * writes them: the decode attention may load past K/V early) */
		gin[i].invariant = in[i].invariant || n->op == TPF_OP_ATTENTION;
	}
	for (size_t i = 0; i < n_out; i++) {
		gout[i] = cout[i];
		if (cout[i].rank < 0)
			continue;
		gout[i].data = dptr[nd++] = DEV->alloc(DEV, cout[i].nbytes ? cout[i].nbytes : 1);
		void *poison = malloc(cout[i].nbytes ? cout[i].nbytes : 1);
		memset(poison, 0xff, cout[i].nbytes);
		DEV->upload(DEV, gout[i].data, poison, cout[i].nbytes, D);
		DEV->sync(DEV, D);
		free(poison);
	}
	struct tpf_kernel_call gc = {.node = n, .opset = 23, .in = gin, .n_in = n_in, .out = gout, .n_out = n_out,
				     .stream = DEV->stream, .rank = 0, .world = 2, .diag = D};
	/* workspace as the session gives it */
	if (kg->workspace && (gc.workspace_bytes = kg->workspace(&gc)))
		gc.workspace = dptr[nd++] = DEV->alloc(DEV, gc.workspace_bytes);
	if (kg->run(&gc) || DEV->sync(DEV, D)) {
		snprintf(why, sizeof(why), "cuda kernel failed");
		ok = 0;
		goto report_free;
	}
	double worst = 0;
	char codes[300] = "";
	for (size_t i = 0; i < n_out && ok; i++) {
		if (cout[i].rank < 0)
			continue;
		void *h = malloc(cout[i].nbytes ? cout[i].nbytes : 1);
		DEV->download(DEV, h, gout[i].data, cout[i].nbytes, D);
		if (is_minifloat(cout[i].dtype)) {
			char cw[256];
			if (!codes_match(cout[i].dtype, cout[i].data, h, cout[i].numel, cw, sizeof(cw))) {
				snprintf(why, sizeof(why), "output %zu: %s", i, cw);
				ok = 0;
			} else if (!codes[0]) {
				snprintf(codes, sizeof(codes), "; output %zu: %s", i, cw);
			}
			free(h);
			continue;
		}
		struct tol t = tol_for(cout[i].dtype, scale);
		int integral = tpf_dtype_is_integral(cout[i].dtype);
		for (int64_t e = 0; e < cout[i].numel; e++) {
			double w = integral ? (double)tpf_elem_load_int(cout[i].dtype, cout[i].data, e)
					    : tpf_elem_load(cout[i].dtype, cout[i].data, e);
			double g = integral ? (double)tpf_elem_load_int(cout[i].dtype, h, e)
					    : tpf_elem_load(cout[i].dtype, h, e);
			if (isnan(w) && isnan(g))
				continue;
			double err = fabs(g - w);
			if (!(err <= t.atol + t.rtol * fabs(w))) {
				snprintf(why, sizeof(why), "output %zu element %lld: gpu %.9g cpu %.9g (atol %.2g rtol %.2g)",
					 i, (long long)e, g, w, t.atol, t.rtol);
				ok = 0;
				break;
			}
			if (err > worst)
				worst = err;
		}
		free(h);
	}
	if (ok)
		snprintf(why, sizeof(why), "max abs err %.3g%s", worst, codes);
report_free:
	for (size_t i = 0; i < nd; i++)
		DEV->free(DEV, dptr[i]);
report:
	printf("%s %-58s %s [%s]\n", ok ? "PASS" : "FAIL", label, why, tpf_dtype_name(in[0].dtype));
	if (!ok)
		tpf_diag_print(D, stdout);
	tpf_diag_clear(D);
	ok ? n_pass++ : n_fail++;
	for (size_t i = 0; i < n_out; i++)
		if (cout[i].rank >= 0)
			free(cout[i].data);
	fflush(stdout);
}

/* convenience: main phase, inferred outputs */
#define CHECK(label, n, in, nout, scale) check(label, n, TPF_PHASE_MAIN, in, sizeof(in) / sizeof(in[0]), NULL, nout, scale)

static const enum tpf_dtype FL[] = {TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT16, TPF_DTYPE_BFLOAT16};
#define NFL 3

/* ------------------------------------------------------------------ cases */

/* ai.tpfuse.GatedActivation (kernels/cuda/fused-decode.cu): every
 * activation, two inputs and packed, vectorized widths and not; ONNX
 * RotaryEmbedding: caches per token and by position ids, partial,
 * interleaved, 3-D input. */
static void decode_fusions(enum tpf_dtype dt)
{
	const char *acts[] = {"silu", "gelu", "gelu_tanh", "gelu_tanh"};
	for (int a = 0; a < 4; a++) {
		char lab[128];
		struct tpf_node *n = node("ai.tpfuse", "GatedActivation", 2, 1);
		tpf_node_set_attr_string(n, "activation", acts[a]);
		if (a == 3)
			tpf_node_set_attr_int(n, "cube_as_product", 1);
		struct tpf_ktensor v[2] = {R(dt, 2, 4, 64), R(dt, 2, 4, 64)};
		snprintf(lab, sizeof(lab), "GatedActivation %s%s [4,64] (vectorized)", acts[a],
			 a == 3 ? " cube_as_product" : "");
		CHECK(lab, n, v, 1, 4);
		free_tensors(v, 2);
		struct tpf_ktensor sc[2] = {R(dt, 2, 3, 6), R(dt, 2, 3, 6)};
		snprintf(lab, sizeof(lab), "GatedActivation %s [3,6] (scalar kernel)", acts[a]);
		CHECK(lab, n, sc, 1, 4);
		free_tensors(sc, 2);
		struct tpf_node *p = node("ai.tpfuse", "GatedActivation", 1, 1);
		tpf_node_set_attr_string(p, "activation", acts[a]);
		tpf_node_set_attr_int(p, "packed", 1);
		struct tpf_ktensor pk[1] = {R(dt, 3, 2, 3, 128)};
		snprintf(lab, sizeof(lab), "GatedActivation %s packed [2,3,128]", acts[a]);
		CHECK(lab, p, pk, 1, 4);
		free_tensors(pk, 1);
		struct tpf_ktensor ps[1] = {R(dt, 2, 5, 10)};
		snprintf(lab, sizeof(lab), "GatedActivation %s packed [5,10] (scalar kernel)", acts[a]);
		CHECK(lab, p, ps, 1, 4);
		free_tensors(ps, 1);
	}
	/* RotaryEmbedding: X [B, H, S, D] = [2, 3, 4, 8] */
	struct tpf_node *r = node("", "RotaryEmbedding", 3, 1);
	struct tpf_ktensor r1[3] = {R(dt, 4, 2, 3, 4, 8), R(dt, 3, 2, 4, 4), R(dt, 3, 2, 4, 4)};
	CHECK("RotaryEmbedding caches [2,4,4]", r, r1, 1, 2);
	free_tensors(r1, 3);
	struct tpf_ktensor r2[3] = {R(dt, 4, 2, 3, 4, 8), R(dt, 3, 1, 4, 4), R(dt, 3, 1, 4, 4)};
	CHECK("RotaryEmbedding caches of batch 1", r, r2, 1, 2);
	free_tensors(r2, 3);
	struct tpf_node *rp = node("", "RotaryEmbedding", 4, 1);
	tpf_node_set_attr_int(rp, "rotary_embedding_dim", 4);
	tpf_node_set_attr_int(rp, "interleaved", 1);
	struct tpf_ktensor r3[4] = {R(dt, 4, 2, 3, 4, 8), R(dt, 2, 16, 2), R(dt, 2, 16, 2),
				    T(TPF_DTYPE_INT64, 2, 2, 4)};
	for (int64_t i = 0; i < 8; i++)
		tpf_elem_store_int(TPF_DTYPE_INT64, r3[3].data, i, (i * 5 + 3) % 16);
	CHECK("RotaryEmbedding position_ids, rotary_dim 4, interleaved", rp, r3, 1, 2);
	free_tensors(r3, 4);
	struct tpf_node *r3d = node("", "RotaryEmbedding", 3, 1);
	tpf_node_set_attr_int(r3d, "num_heads", 2);
	struct tpf_ktensor r4[3] = {R(dt, 3, 2, 5, 12), R(dt, 3, 2, 5, 3), R(dt, 3, 2, 5, 3)};
	CHECK("RotaryEmbedding 3-D [2,5,12], 2 heads", r3d, r4, 1, 2);
	free_tensors(r4, 3);
}

static void elementwise(void)
{
	const char *bin[] = {"Add", "Sub", "Mul", "Div"};
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int o = 0; o < 4; o++) {
			char lab[96];
			struct tpf_node *n = node("", bin[o], 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 2, 4, 33), P(dt, 2, 4, 33)};
			snprintf(lab, sizeof(lab), "%s [4,33]x[4,33]", bin[o]);
			CHECK(lab, n, a, 1, 1);
			free_tensors(a, 2);
			struct tpf_ktensor b[2] = {R(dt, 3, 2, 3, 5), P(dt, 1, 5)};
			snprintf(lab, sizeof(lab), "%s [2,3,5]x[5]", bin[o]);
			CHECK(lab, n, b, 1, 1);
			free_tensors(b, 2);
			struct tpf_ktensor c[2] = {R(dt, 3, 2, 1, 4), P(dt, 2, 3, 1)};
			snprintf(lab, sizeof(lab), "%s [2,1,4]x[3,1]", bin[o]);
			CHECK(lab, n, c, 1, 1);
			free_tensors(c, 2);
			struct tpf_ktensor e[2] = {R(dt, 2, 3, 1000), P(dt, 0)};
			snprintf(lab, sizeof(lab), "%s [3,1000]x[]", bin[o]);
			CHECK(lab, n, e, 1, 1);
			free_tensors(e, 2);
		}
		struct tpf_node *pw = node("", "Pow", 2, 1);
		struct tpf_ktensor p2[2] = {R(dt, 2, 5, 7), scalar_f(dt, 2.0)};
		CHECK("Pow x^2", pw, p2, 1, 1);
		free_tensors(p2, 2);
		struct tpf_ktensor p3[2] = {P(dt, 2, 5, 7), R(dt, 1, 7)};
		CHECK("Pow general", pw, p3, 1, 4);
		free_tensors(p3, 2);
		const char *cmp[] = {"Equal", "Greater", "Less"};
		for (int o = 0; o < 3; o++) {
			struct tpf_node *n = node("", cmp[o], 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 2, 6, 8), R(dt, 1, 8)};
			memcpy(a[1].data, a[0].data, a[1].nbytes); /* some equal */
			CHECK(cmp[o], n, a, 1, 1);
			free_tensors(a, 2);
		}
		const char *var[] = {"Max", "Min"};
		for (int o = 0; o < 2; o++) {
			struct tpf_node *n = node("", var[o], 3, 1);
			struct tpf_ktensor a[3] = {R(dt, 2, 4, 9), R(dt, 1, 9), R(dt, 2, 4, 1)};
			CHECK(var[o], n, a, 1, 1);
			free_tensors(a, 3);
		}
		const char *un[] = {"Sigmoid", "Relu", "Sqrt", "Reciprocal", "Neg", "Exp", "Tanh", "Erf", "Abs", "Sin", "Cos"};
		for (int o = 0; o < 11; o++) {
			struct tpf_node *n = node("", un[o], 1, 1);
			int pos = !strcmp(un[o], "Sqrt") || !strcmp(un[o], "Reciprocal");
			struct tpf_ktensor a[1] = {pos ? P(dt, 2, 7, 129) : R(dt, 2, 7, 129)};
			CHECK(un[o], n, a, 1, 2);
			free_tensors(a, 1);
		}
		struct tpf_node *gate = node("ai.tpfuse", "SigmoidGateAdd", 3, 1);
		struct tpf_ktensor g1[3] = {R(dt, 3, 2, 4, 64), R(dt, 3, 2, 4, 1), R(dt, 3, 2, 4, 64)};
		CHECK("SigmoidGateAdd gate [2,4,1] (fused kernel)", gate, g1, 1, 2);
		free_tensors(g1, 3);
		struct tpf_ktensor g2[3] = {R(dt, 2, 8, 64), R(dt, 2, 8, 64), R(dt, 2, 8, 64)};
		CHECK("SigmoidGateAdd gate [8,64] (fused kernel)", gate, g2, 1, 2);
		free_tensors(g2, 3);
		/* the record requires the gate to have final's rank and leading dims
		 * (a rank-1 [H] gate is refused); H = 6 takes the unvectorized kernel */
		struct tpf_ktensor g3[3] = {R(dt, 2, 8, 6), R(dt, 2, 8, 1), R(dt, 2, 8, 6)};
		CHECK("SigmoidGateAdd gate [8,1], H 6 (scalar kernel)", gate, g3, 1, 2);
		free_tensors(g3, 3);
		decode_fusions(dt);
	}
	/* integers and bools */
	struct tpf_node *add = node("", "Add", 2, 1), *div = node("", "Div", 2, 1);
	struct tpf_ktensor ia[2] = {fill(T(TPF_DTYPE_INT64, 2, 3, 5), F_SMALLINT, 0),
				    fill(T(TPF_DTYPE_INT64, 1, 5), F_SMALLINT, 0)};
	CHECK("Add int64", add, ia, 1, 1);
	CHECK("Div int64 (zero divisors give 0)", div, ia, 1, 1);
	free_tensors(ia, 2);
	struct tpf_node *neg = node("", "Neg", 1, 1), *not = node("", "Not", 1, 1);
	struct tpf_ktensor ib[1] = {fill(T(TPF_DTYPE_INT32, 1, 17), F_SMALLINT, 0)};
	CHECK("Neg int32", neg, ib, 1, 1);
	free_tensors(ib, 1);
	struct tpf_ktensor bb[1] = {fill(T(TPF_DTYPE_BOOL, 1, 17), F_BOOL, 0)};
	CHECK("Not bool", not, bb, 1, 1);
	free_tensors(bb, 1);
	struct tpf_node *wh = node("", "Where", 3, 1);
	struct tpf_ktensor w[3] = {fill(T(TPF_DTYPE_BOOL, 2, 4, 1), F_BOOL, 0), R(TPF_DTYPE_BFLOAT16, 2, 4, 10),
				   R(TPF_DTYPE_BFLOAT16, 1, 10)};
	CHECK("Where bf16 broadcast", wh, w, 1, 1);
	free_tensors(w, 3);
	/* casts */
	struct {
		enum tpf_dtype from, to;
		int sat;
	} casts[] = {
		{TPF_DTYPE_FLOAT, TPF_DTYPE_BFLOAT16, 1},   {TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT, 1},
		{TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT16, 1},    {TPF_DTYPE_FLOAT16, TPF_DTYPE_BFLOAT16, 1},
		{TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT8E4M3FN, 1}, {TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT8E5M2, 1},
		{TPF_DTYPE_FLOAT, TPF_DTYPE_INT32, 1},      {TPF_DTYPE_INT64, TPF_DTYPE_FLOAT, 1},
		{TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT4E2M1, 1}, {TPF_DTYPE_INT64, TPF_DTYPE_INT32, 1},
		{TPF_DTYPE_FLOAT8E4M3FN, TPF_DTYPE_FLOAT, 1}, {TPF_DTYPE_DOUBLE, TPF_DTYPE_FLOAT, 1},
		/* 4 and 2 bit integers: out-of-range floats (the inputs reach
		 * +-33) truncated then wrapped, integers wrapped */
		{TPF_DTYPE_FLOAT, TPF_DTYPE_INT4, 1},       {TPF_DTYPE_FLOAT, TPF_DTYPE_UINT4, 1},
		{TPF_DTYPE_FLOAT16, TPF_DTYPE_INT2, 1},     {TPF_DTYPE_BFLOAT16, TPF_DTYPE_UINT2, 1},
		{TPF_DTYPE_INT64, TPF_DTYPE_INT4, 1},       {TPF_DTYPE_INT32, TPF_DTYPE_UINT2, 1},
		{TPF_DTYPE_INT4, TPF_DTYPE_FLOAT, 1},       {TPF_DTYPE_UINT4, TPF_DTYPE_INT64, 1},
		{TPF_DTYPE_INT2, TPF_DTYPE_INT8, 1},        {TPF_DTYPE_UINT2, TPF_DTYPE_FLOAT16, 1},
		{TPF_DTYPE_INT4, TPF_DTYPE_INT2, 1},
	};
	for (size_t i = 0; i < sizeof(casts) / sizeof(casts[0]); i++) {
		char lab[96];
		struct tpf_node *n = node("", "Cast", 1, 1);
		tpf_node_set_attr_int(n, "to", casts[i].to);
		tpf_node_set_attr_int(n, "saturate", casts[i].sat);
		struct tpf_ktensor a[1] = {tpf_dtype_is_integral(casts[i].from)
						   ? fill(T(casts[i].from, 2, 3, 50), F_SMALLINT, 0)
						   : R(casts[i].from, 2, 3, 50)};
		double scale = tpf_dtype_is_integral(casts[i].to) && tpf_dtype_bits(casts[i].to) < 8 ? 33.0 : 3.7;
		for (int64_t e = 0; e < a[0].numel && !tpf_dtype_is_integral(casts[i].from); e++)
			tpf_elem_store(a[0].dtype, a[0].data, e, tpf_elem_load(a[0].dtype, a[0].data, e) * scale, 1);
		snprintf(lab, sizeof(lab), "Cast %s -> %s", tpf_dtype_name(casts[i].from), tpf_dtype_name(casts[i].to));
		CHECK(lab, n, a, 1, 1);
		free_tensors(a, 1);
	}
}

/* ai.tpfuse.MatMulFp8 (matmul-fp8, the lowering of a MatMul of two FP8 dequantizations):
 * E4M3 codes, the weight's codes transposed to [N, K], per-tensor scales of
 * two dtypes; outputs in each float dtype. */
static void fp8_gemms(void)
{
	static const int64_t mkn[][3] = {{1, 64, 128}, {8, 256, 96}, {64, 512, 384}, {5, 32, 16}};
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype odt = FL[d];
		for (int s = 0; s < 4; s++) {
			char lab[96];
			int64_t M = mkn[s][0], K = mkn[s][1], N = mkn[s][2];
			struct tpf_node *n = node("ai.tpfuse", "MatMulFp8", 4, 1);
			struct tpf_ktensor a[4] = {R(TPF_DTYPE_FLOAT8E4M3FN, 2, M, K), R(TPF_DTYPE_FLOAT8E4M3FN, 2, N, K),
						   scalar_f(TPF_DTYPE_FLOAT, 0.5), scalar_f(odt, 0.125)};
			struct tpf_ktensor tpl = T(odt, 2, M, N);
			snprintf(lab, sizeof(lab), "MatMul fp8-gemm %lldx%lldx%lld -> %s", (long long)M, (long long)K,
				 (long long)N, tpf_dtype_name(odt));
			/* Hopper's FP8 MMA keeps fewer accumulator bits between its
			 * promotions to float32: float outputs get 4e-3 (2x H100:
			 * 64x512x384 had one element 1.1e-3 off at 0.13, a few
			 * accumulator ulps of its K = 512 products) */
			check(lab, n, TPF_PHASE_MAIN, a, 4, &tpl, 1, odt == TPF_DTYPE_FLOAT ? 400 : 2);
			free_tensors(a, 4);
			free_tensors(&tpl, 1);
		}
	}
}

/* ai.tpfuse.MatMulTransB (matmul-bt): operand 1 stored with its last two axes swapped. */
static void matmuls_bt(void)
{
	static const int64_t shp[][4] = {{1, 1, 64, 48}, {6, 1, 128, 257}, {4, 5, 16, 7}};
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int s = 0; s < 3; s++) {
			char lab[96];
			int64_t B = shp[s][0], M = shp[s][1], K = shp[s][2], N = shp[s][3];
			struct tpf_node *n = node("ai.tpfuse", "MatMulTransB", 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 3, B, M, K), R(dt, 3, B, N, K)};
			struct tpf_ktensor tpl = T(dt, 3, B, M, N);
			snprintf(lab, sizeof(lab), "MatMul matmul-bt [%lld,%lld,%lld] x [%lld,%lld,%lld]^T", (long long)B,
				 (long long)M, (long long)K, (long long)B, (long long)N, (long long)K);
			check(lab, n, TPF_PHASE_MAIN, a, 2, &tpl, 1, dt == TPF_DTYPE_FLOAT ? 20 : 2);
			free_tensors(a, 2);
			free_tensors(&tpl, 1);
		}
		struct tpf_node *n = node("ai.tpfuse", "MatMulTransB", 2, 1);
		struct tpf_ktensor a[2] = {R(dt, 2, 5, 32), R(dt, 3, 3, 9, 32)};
		struct tpf_ktensor tpl = T(dt, 3, 3, 5, 9);
		check("MatMul matmul-bt [5,32] x [3,9,32]^T (A broadcast)", n, TPF_PHASE_MAIN, a, 2, &tpl, 1, 4);
		free_tensors(a, 2);
		free_tensors(&tpl, 1);
	}
}

/* MatMul of a few rows by a 2-D weight in bfloat16 / float16: the small-M
 * kernels (kernels/cuda/gemv.cu) take up to 16 rows with N % 8 == 0 and
 * K >= 256: one row the FMA kernel, 2..16 rows with K % 16 == 0 the
 * tensor-core kernel (64-column blocks where N / 64 fills the SMs, else
 * 32-column ones), 2..8 rows with another K the FMA kernel; the other cases
 * here are their edges, run by cuBLASLt.  Column tiles of 16 and 32 and
 * blocks of 32 and 64 columns, partial last tiles and blocks (N 40, 4104),
 * K not a multiple of 8 or 16 (A's rows read element-wise, a partial chunk
 * of W rows), rows rounded up to the next kernel (3, 5, 12).  Sums of K
 * products of inputs in [-2, 2) accumulate in float32 in another order than
 * the CPU's: the tolerance grows with K. */
static void gemv_matmuls(void)
{
	static const int64_t mkn[][3] = {
		{1, 256, 32},   {3, 256, 32},   {8, 256, 32},	 {1, 4096, 4104}, {3, 4096, 4104}, {8, 4096, 4104},
		{1, 1000, 3072}, {5, 1000, 3072}, {8, 1000, 3072}, {1, 1003, 48},   {3, 1003, 48},   {8, 1003, 40},
		{2, 2048, 4096}, {4, 7168, 512}, {16, 1000, 48}, {17, 1000, 48},  {9, 256, 32},	  {3, 256, 36},
		{3, 128, 64},   {12, 2048, 4096}, {16, 4096, 14336}, {8, 4096, 14336}, {2, 4096, 3072}, {16, 256, 40},
		{10, 4096, 4104}, {4, 1000, 3072},
	};
	static const enum tpf_dtype dts[] = {TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16};
	for (int d = 0; d < 2; d++) {
		enum tpf_dtype dt = dts[d];
		for (size_t s = 0; s < sizeof(mkn) / sizeof(mkn[0]); s++) {
			char lab[96];
			int64_t M = mkn[s][0], K = mkn[s][1], N = mkn[s][2];
			int small = K >= 256 && N % 8 == 0 && (M <= 8 || (M <= 16 && K % 16 == 0));
			struct tpf_node *n = node("", "MatMul", 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 2, M, K), R(dt, 2, K, N)};
			/* also with W invariant (an initializer in a run): the
			 * small-M kernels then load its first rows before waiting
			 * for the previous kernel */
			for (int inv = 0; inv < (small ? 2 : 1); inv++) {
				a[1].invariant = inv;
				snprintf(lab, sizeof(lab), "MatMul %lldx%lldx%lld (%s%s)", (long long)M, (long long)K,
					 (long long)N, small ? "small-M kernel" : "cuBLASLt", inv ? ", W invariant" : "");
				CHECK(lab, n, a, 1, 2.0 + (double)K / 2048);
			}
			free_tensors(a, 2);
		}
		/* the weight packed in column tiles (matmul-tiled): every shape
		 * the plan packs for (the tile width the kernel asks for this
		 * GPU), W invariant or not; partial last tiles (N 4104, 40) */
		static const int64_t tiled[][3] = {{1, 4096, 4104}, {1, 1000, 3072}, {3, 1003, 40}, {1, 256, 14336},
						   {1, 7168, 4096}, {8, 1000, 48}, {5, 4100, 1032}};
		for (size_t s = 0; s < sizeof(tiled) / sizeof(tiled[0]); s++) {
			int64_t M = tiled[s][0], K = tiled[s][1], N = tiled[s][2];
			int tw = tpf_cuda_gemv_tile_cols(dt, M, K, N);
			char lab[112];
			if (!tw) {
				snprintf(lab, sizeof(lab), "MatMul %lldx%lldx%lld: no tile width", (long long)M,
					 (long long)K, (long long)N);
				printf("FAIL %-58s tpf_cuda_gemv_tile_cols gave 0 for a shape of the FMA kernel\n", lab);
				n_fail++;
				continue;
			}
			struct tpf_node *n = node("", "MatMul", 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 2, M, K), R(dt, 3, (N + tw - 1) / tw, K, (int64_t)tw)};
			struct tpf_ktensor tpl = T(dt, 2, M, N);
			for (int inv = 0; inv < 2; inv++) {
				a[1].invariant = inv;
				snprintf(lab, sizeof(lab), "MatMul matmul-tiled %lldx%lldx%lld (%d-column tiles%s)",
					 (long long)M, (long long)K, (long long)N, tw, inv ? ", W invariant" : "");
				check(lab, n, TPF_PHASE_MATMUL_TILED, a, 2, &tpl, 1, 2.0 + (double)K / 2048);
			}
			free_tensors(a, 2);
			free_tensors(&tpl, 1);
		}
		/* a packed GatedActivation of such a product (gated-matmul-tiled:
		 * the gate/up weight packed by tpf_gemv_pack_gated, the
		 * activation in the GEMV's epilogue), every activation */
		static const int64_t gmkf[][3] = {{1, 4096, 7168}, {1, 1000, 1536}, {3, 1003, 32}, {8, 1000, 48}};
		static const char *const gacts[] = {"silu", "gelu", "gelu_tanh", "gelu_tanh"};
		for (size_t s = 0; s < sizeof(gmkf) / sizeof(gmkf[0]); s++) {
			int64_t M = gmkf[s][0], K = gmkf[s][1], F = gmkf[s][2];
			int tw = tpf_cuda_gemv_tile_cols(dt, M, K, 2 * F);
			char lab[112];
			if (!tw || F % (tw / 2)) {
				printf("FAIL %-58s no tile width for a gated %lldx%lldx%lld product\n", "gated-matmul-tiled",
				       (long long)M, (long long)K, (long long)(2 * F));
				n_fail++;
				continue;
			}
			struct tpf_ktensor a[2] = {R(dt, 2, M, K), R(dt, 3, F / (tw / 2), K, (int64_t)tw)};
			struct tpf_ktensor tpl = T(dt, 2, M, F);
			for (int ai = 0; ai < 4; ai++) {
				struct tpf_node *n = node("ai.tpfuse", "GatedActivation", 1, 1);
				tpf_node_set_attr_string(n, "activation", gacts[ai]);
				tpf_node_set_attr_int(n, "packed", 1);
				if (ai == 3)
					tpf_node_set_attr_int(n, "cube_as_product", 1);
				a[1].invariant = ai & 1;
				snprintf(lab, sizeof(lab), "gated-matmul-tiled %s%s %lldx%lldx%lld (%d-col tiles)", gacts[ai],
					 ai == 3 ? " cube" : "", (long long)M, (long long)K, (long long)F, tw);
				check(lab, n, TPF_PHASE_MATMUL_TILED, a, 2, &tpl, 1, 4.0 + (double)K / 1024);
			}
			free_tensors(a, 2);
			free_tensors(&tpl, 1);
		}
		struct tpf_node *n = node("", "MatMul", 2, 1);
		struct tpf_ktensor b1[2] = {R(dt, 3, 2, 4, 4096), R(dt, 2, 4096, 3072)};
		CHECK("MatMul [2,4,4096]x[4096,3072] (8 rows, small-M kernel)", n, b1, 1, 4);
		free_tensors(b1, 2);
		struct tpf_ktensor b2[2] = {R(dt, 4, 2, 1, 3, 1003), R(dt, 2, 1003, 136)};
		CHECK("MatMul [2,1,3,1003]x[1003,136] (6 rows, small-M kernel)", n, b2, 1, 2.5);
		free_tensors(b2, 2);
		struct tpf_ktensor b3[2] = {R(dt, 1, 4096), R(dt, 2, 4096, 64)};
		CHECK("MatMul [4096]x[4096,64] (small-M kernel)", n, b3, 1, 4);
		free_tensors(b3, 2);
		struct tpf_ktensor b4[2] = {R(dt, 3, 3, 3, 512), R(dt, 2, 512, 64)};
		CHECK("MatMul [3,3,512]x[512,64] (9 rows, small-M kernel)", n, b4, 1, 2.25);
		free_tensors(b4, 2);
		struct tpf_ktensor b5[2] = {R(dt, 3, 2, 1, 512), R(dt, 3, 2, 512, 64)};
		CHECK("MatMul [2,1,512]x[2,512,64] (batched W, cuBLASLt)", n, b5, 1, 2.25);
		free_tensors(b5, 2);
	}
}

/* Two small-M products in a row, y2 = (x W1) W2, on one stream without a
 * synchronization between them: the second is launched as a programmatic
 * dependent of the first, which lets it start at once, so every read of
 * its A (the first's output) must wait for the first to finish
 * (griddepcontrol.wait).  y1 is poisoned (all ones: NaN) before each
 * chain; y2 is checked against the CPU product of the y1 the GPU wrote, so
 * a read of A before the wait shows as NaN or a wrong sum.  Three chains a
 * shape: one row (the FMA kernel), 8 and 16 rows (the tensor-core kernel),
 * Llama-3-8B's up and down projections. */
static void gemv_chains(void)
{
	static const int64_t mkn[][3] = {{1, 4096, 14336}, {8, 4096, 14336}, {16, 4096, 14336}, {16, 4096, 6144}};
	static const enum tpf_dtype dts[] = {TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT16};
	for (int d = 0; d < 2; d++)
		for (size_t s = 0; s < sizeof(mkn) / sizeof(mkn[0]); s++) {
			enum tpf_dtype dt = dts[d];
			int64_t M = mkn[s][0], K = mkn[s][1], N = mkn[s][2];
			char lab[96], why[256] = "";
			snprintf(lab, sizeof(lab), "MatMul chain %lldx%lldx%lld then x%lld (dependent launch)",
				 (long long)M, (long long)K, (long long)N, (long long)K);
			struct tpf_node *n = node("", "MatMul", 2, 1);
			struct tpf_ktensor x = R(dt, 2, M, K), w1 = R(dt, 2, K, N), w2 = R(dt, 2, N, K);
			struct tpf_ktensor y1 = T(dt, 2, M, N), y2 = T(dt, 2, M, K), want = T(dt, 2, M, K);
			const struct tpf_kernel *kg = tpf_kernel_find(TPF_BACKEND_CUDA, n->op, TPF_PHASE_MAIN, dt);
			const struct tpf_kernel *kc = tpf_kernel_find(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN, dt);
			int ok = kg && kc;
			double worst = 0;
			if (!ok)
				snprintf(why, sizeof(why), "no kernel");
			void *dx = DEV->alloc(DEV, x.nbytes), *dw1 = DEV->alloc(DEV, w1.nbytes),
			     *dw2 = DEV->alloc(DEV, w2.nbytes), *dy1 = DEV->alloc(DEV, y1.nbytes),
			     *dy2 = DEV->alloc(DEV, y2.nbytes);
			void *poison = malloc(y1.nbytes);
			memset(poison, 0xff, y1.nbytes);
			DEV->upload(DEV, dx, x.data, x.nbytes, D);
			DEV->upload(DEV, dw1, w1.data, w1.nbytes, D);
			DEV->upload(DEV, dw2, w2.data, w2.nbytes, D);
			for (int rep = 0; rep < 3 && ok; rep++) {
				DEV->upload(DEV, dy1, poison, y1.nbytes, D);
				DEV->sync(DEV, D);
				struct tpf_ktensor gi1[2] = {x, w1}, go1[1] = {y1}, gi2[2] = {y1, w2}, go2[1] = {y2};
				gi1[0].data = dx, gi1[1].data = dw1, go1[0].data = dy1;
				gi2[0].data = dy1, gi2[1].data = dw2, go2[0].data = dy2;
				gi2[0].host = go1[0].host = go2[0].host = NULL; /* written on the device */
				gi1[0].invariant = 1, gi1[1].invariant = 1, gi2[0].invariant = 0, gi2[1].invariant = 1;
				struct tpf_kernel_call c1 = {.node = n, .opset = 23, .in = gi1, .n_in = 2, .out = go1,
							     .n_out = 1, .stream = DEV->stream, .world = 1, .diag = D};
				struct tpf_kernel_call c2 = c1;
				c2.in = gi2, c2.out = go2;
				if (kg->run(&c1) || kg->run(&c2) || DEV->sync(DEV, D)) {
					snprintf(why, sizeof(why), "cuda kernel failed");
					ok = 0;
					break;
				}
				DEV->download(DEV, y1.data, dy1, y1.nbytes, D);
				DEV->download(DEV, y2.data, dy2, y2.nbytes, D);
				struct tpf_ktensor ci[2] = {y1, w2}, co[1] = {want};
				struct tpf_kernel_call cc = {.node = n, .opset = 23, .in = ci, .n_in = 2, .out = co,
							     .n_out = 1, .world = 1, .diag = D};
				if (kc->run(&cc)) {
					snprintf(why, sizeof(why), "cpu kernel failed");
					ok = 0;
					break;
				}
				/* the sums' float32 rounding in another order: up to
				 * about N ulps of the largest term (y1 is large: sums
				 * of K products), where a value cancels to near 0 */
				double ya = 0, wa = 0;
				for (int64_t e = 0; e < y1.numel; e++)
					ya = fmax(ya, fabs(tpf_elem_load(dt, y1.data, e)));
				for (int64_t e = 0; e < w2.numel; e++)
					wa = fmax(wa, fabs(tpf_elem_load(dt, w2.data, e)));
				struct tol t = tol_for(dt, 2.0 + (double)N / 2048);
				const double sum_tol = ldexp((double)N * ya * wa, -22);
				for (int64_t e = 0; e < y2.numel && ok; e++) {
					double w = tpf_elem_load(dt, want.data, e), g = tpf_elem_load(dt, y2.data, e);
					double err = fabs(g - w);
					if (!(err <= t.atol + sum_tol + t.rtol * fabs(w))) {
						snprintf(why, sizeof(why),
							 "chain %d: element %lld: gpu %.6g, cpu from the gpu's y1 %.6g", rep,
							 (long long)e, g, w);
						ok = 0;
					} else if (err > worst) {
						worst = err;
					}
				}
			}
			if (ok)
				snprintf(why, sizeof(why), "max abs err %.3g", worst);
			printf("%s %-58s %s [%s]\n", ok ? "PASS" : "FAIL", lab, why, tpf_dtype_name(dt));
			if (!ok)
				tpf_diag_print(D, stdout);
			tpf_diag_clear(D);
			ok ? n_pass++ : n_fail++;
			void *dp[] = {dx, dw1, dw2, dy1, dy2};
			for (int i = 0; i < 5; i++)
				DEV->free(DEV, dp[i]);
			free(poison);
			struct tpf_ktensor all[] = {x, w1, w2, y1, y2, want};
			free_tensors(all, 6);
			fflush(stdout);
		}
}

static void matmuls(void)
{
	fp8_gemms();
	matmuls_bt();
	gemv_matmuls();
	gemv_chains();
	static const int64_t mkn[][3] = {{1, 64, 128}, {8, 256, 96}, {64, 512, 384}, {3, 7, 5}};
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int s = 0; s < 4; s++) {
			char lab[96];
			struct tpf_node *n = node("", "MatMul", 2, 1);
			struct tpf_ktensor a[2] = {R(dt, 2, mkn[s][0], mkn[s][1]), R(dt, 2, mkn[s][1], mkn[s][2])};
			snprintf(lab, sizeof(lab), "MatMul %lldx%lldx%lld", (long long)mkn[s][0], (long long)mkn[s][1],
				 (long long)mkn[s][2]);
			CHECK(lab, n, a, 1, dt == TPF_DTYPE_FLOAT ? 20 : 2);
			free_tensors(a, 2);
		}
		struct tpf_node *n = node("", "MatMul", 2, 1);
		struct tpf_ktensor b1[2] = {R(dt, 4, 2, 3, 5, 16), R(dt, 4, 2, 3, 16, 7)};
		CHECK("MatMul batched [2,3,5,16]x[2,3,16,7]", n, b1, 1, 4);
		free_tensors(b1, 2);
		struct tpf_ktensor b2[2] = {R(dt, 3, 3, 5, 16), R(dt, 2, 16, 7)};
		CHECK("MatMul [3,5,16]x[16,7] (batches folded)", n, b2, 1, 4);
		free_tensors(b2, 2);
		struct tpf_ktensor b3[2] = {R(dt, 2, 5, 16), R(dt, 3, 3, 16, 7)};
		CHECK("MatMul [5,16]x[3,16,7] (A broadcast)", n, b3, 1, 4);
		free_tensors(b3, 2);
		struct tpf_ktensor b4[2] = {R(dt, 4, 2, 1, 5, 16), R(dt, 4, 1, 3, 16, 7)};
		CHECK("MatMul [2,1,5,16]x[1,3,16,7] (mixed)", n, b4, 1, 4);
		free_tensors(b4, 2);
		struct tpf_ktensor b5[2] = {R(dt, 1, 16), R(dt, 2, 16, 7)};
		CHECK("MatMul [16]x[16,7]", n, b5, 1, 4);
		free_tensors(b5, 2);
		struct tpf_ktensor b6[2] = {R(dt, 3, 2, 5, 16), R(dt, 1, 16)};
		CHECK("MatMul [2,5,16]x[16]", n, b6, 1, 4);
		free_tensors(b6, 2);
		for (int t = 0; t < 4; t++) {
			char lab[96];
			struct tpf_node *g = node("", "Gemm", 3, 1);
			int ta = t & 1, tb = t >> 1;
			tpf_node_set_attr_int(g, "transA", ta);
			tpf_node_set_attr_int(g, "transB", tb);
			tpf_node_set_attr_float(g, "alpha", 0.5f);
			tpf_node_set_attr_float(g, "beta", 2.0f);
			struct tpf_ktensor a[3] = {ta ? R(dt, 2, 24, 9) : R(dt, 2, 9, 24), tb ? R(dt, 2, 40, 24) : R(dt, 2, 24, 40),
						   R(dt, 1, 40)};
			snprintf(lab, sizeof(lab), "Gemm transA=%d transB=%d alpha/beta, C [40]", ta, tb);
			CHECK(lab, g, a, 1, 4);
			free_tensors(a, 3);
		}
	}
}

static void reductions(void)
{
	const char *ops[] = {"ReduceMean", "ReduceSum", "ReduceMax"};
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int o = 0; o < 3; o++) {
			char lab[96];
			struct tpf_node *n = node("", ops[o], 2, 1);
			int64_t ax1[] = {-1}, ax2[] = {0, 2};
			struct tpf_ktensor a[2] = {R(dt, 3, 3, 4, 100), ints(TPF_DTYPE_INT64, 1, ax1)};
			snprintf(lab, sizeof(lab), "%s axes [-1]", ops[o]);
			CHECK(lab, n, a, 1, 4);
			free_tensors(a, 2);
			struct tpf_ktensor b[2] = {R(dt, 3, 3, 4, 100), ints(TPF_DTYPE_INT64, 2, ax2)};
			snprintf(lab, sizeof(lab), "%s axes [0,2]", ops[o]);
			CHECK(lab, n, b, 1, 4);
			free_tensors(b, 2);
			struct tpf_node *m = node("", ops[o], 1, 1);
			tpf_node_set_attr_int(m, "keepdims", 0);
			struct tpf_ktensor c[1] = {R(dt, 2, 17, 31)};
			snprintf(lab, sizeof(lab), "%s all axes", ops[o]);
			CHECK(lab, m, c, 1, 8);
			free_tensors(c, 1);
		}
		int64_t lens[] = {7, 300, 2048};
		for (int l = 0; l < 3; l++) {
			char lab[96];
			struct tpf_node *n = node("", "Softmax", 1, 1);
			struct tpf_ktensor a[1] = {R(dt, 3, 2, 3, lens[l])};
			snprintf(lab, sizeof(lab), "Softmax axis -1 len %lld", (long long)lens[l]);
			CHECK(lab, n, a, 1, 2);
			free_tensors(a, 1);
		}
		struct tpf_node *sm = node("", "Softmax", 1, 1);
		tpf_node_set_attr_int(sm, "axis", 1);
		struct tpf_ktensor s1[1] = {R(dt, 3, 2, 9, 5)};
		CHECK("Softmax axis 1 (strided)", sm, s1, 1, 2);
		free_tensors(s1, 1);
		for (int largest = 0; largest < 2; largest++) {
			struct tpf_node *n = node("", "TopK", 2, 2);
			tpf_node_set_attr_int(n, "largest", largest);
			int64_t k[] = {2};
			struct tpf_ktensor a[2] = {R(dt, 2, 6, 4), ints(TPF_DTYPE_INT64, 1, k)};
			/* ties */
			memcpy((char *)a[0].data + a[0].nbytes / 2, a[0].data, a[0].nbytes / 2);
			CHECK(largest ? "TopK k=2 largest" : "TopK k=2 smallest", n, a, 2, 1);
			free_tensors(a, 2);
		}
		struct tpf_node *tk = node("", "TopK", 2, 2);
		tpf_node_set_attr_int(tk, "axis", 0);
		int64_t k5[] = {5};
		struct tpf_ktensor t2[2] = {R(dt, 2, 300, 3), ints(TPF_DTYPE_INT64, 1, k5)};
		CHECK("TopK k=5 axis 0 of 300", tk, t2, 2, 1);
		free_tensors(t2, 2);
		struct tpf_node *am = node("", "ArgMax", 1, 1);
		tpf_node_set_attr_int(am, "axis", 1);
		struct tpf_ktensor a1[1] = {R(dt, 3, 3, 40, 2)};
		CHECK("ArgMax axis 1", am, a1, 1, 1);
		free_tensors(a1, 1);
		struct tpf_node *ar = node("", "ArgMax", 1, 1);
		tpf_node_set_attr_int(ar, "axis", -1);
		tpf_node_set_attr_int(ar, "keepdims", 0);
		struct tpf_ktensor a2[1] = {R(dt, 3, 3, 2, 5001)};
		CHECK("ArgMax of rows of 5001 (a block a row)", ar, a2, 1, 1);
		free_tensors(a2, 1);
		struct tpf_node *al = node("", "ArgMax", 1, 1);
		tpf_node_set_attr_int(al, "axis", 1);
		tpf_node_set_attr_int(al, "select_last_index", 1);
		struct tpf_ktensor a3[1] = {R(dt, 2, 4, 3000)};
		CHECK("ArgMax last index, rows of 3000", al, a3, 1, 1);
		free_tensors(a3, 1);
	}
	struct tpf_node *n = node("", "ReduceSum", 1, 1);
	struct tpf_ktensor a[1] = {fill(T(TPF_DTYPE_INT64, 2, 5, 9), F_SMALLINT, 0)};
	CHECK("ReduceSum int64", n, a, 1, 1);
	free_tensors(a, 1);
}

static void norms(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		int64_t cols[] = {64, 50, 4096};
		for (int c = 0; c < 3; c++) {
			char lab[96];
			struct tpf_node *n = node("", "RMSNormalization", 2, 1);
			tpf_node_set_attr_float(n, "epsilon", 1e-5f);
			struct tpf_ktensor a[2] = {R(dt, 3, 2, 3, cols[c]), R(dt, 1, cols[c])};
			snprintf(lab, sizeof(lab), "RMSNormalization cols %lld", (long long)cols[c]);
			CHECK(lab, n, a, 1, 2);
			free_tensors(a, 2);
		}
		struct tpf_node *sl = node("", "SimplifiedLayerNormalization", 2, 2);
		struct tpf_ktensor s1[2] = {R(dt, 2, 5, 64), R(dt, 1, 64)};
		CHECK("SimplifiedLayerNormalization + inv_std", sl, s1, 2, 2);
		free_tensors(s1, 2);
		struct tpf_node *sk = node("com.microsoft", "SkipSimplifiedLayerNormalization", 3, 4);
		tpf_node_set_attr_float(sk, "epsilon", 1e-6f);
		struct tpf_ktensor k1[3] = {R(dt, 3, 2, 4, 128), R(dt, 3, 2, 4, 128), R(dt, 1, 128)};
		check("SkipSimplifiedLayerNormalization (fused kernel)", sk, TPF_PHASE_MAIN, k1, 3,
		      (struct tpf_ktensor[]){k1[0], omitted(), omitted(), k1[0]}, 4, 2);
		check("SkipSimplifiedLayerNormalization + mean, inv_std", sk, TPF_PHASE_MAIN, k1, 3, NULL, 4, 2);
		free_tensors(k1, 3);
		struct tpf_node *sb = node("com.microsoft", "SkipSimplifiedLayerNormalization", 4, 4);
		struct tpf_ktensor k2[4] = {R(dt, 2, 3, 40), R(dt, 1, 40), R(dt, 1, 40), R(dt, 1, 40)};
		CHECK("SkipSimplifiedLayerNormalization bias, skip [40]", sb, k2, 4, 2);
		free_tensors(k2, 4);
		struct tpf_node *ln = node("", "LayerNormalization", 3, 3);
		struct tpf_ktensor l1[3] = {R(dt, 2, 6, 96), R(dt, 1, 96), R(dt, 1, 96)};
		CHECK("LayerNormalization + mean, inv_std", ln, l1, 3, 2);
		free_tensors(l1, 3);
		/* ai.tpfuse.RMSNorm is (X, gamma) -> Y (ir/ops/tpfuse.c); the residual
		 * form of the same kernel body is AllReduceRMSNorm's post-reduce phase */
		for (int v = 0; v < 2; v++) {
			struct tpf_node *tn = node("ai.tpfuse", "RMSNorm", 2, 1);
			tpf_node_set_attr_float(tn, "epsilon", 1e-6f);
			tpf_node_set_attr_float(tn, "weight_offset", 1.0f);
			int64_t h = v ? 72 : 256;
			struct tpf_ktensor t1[2] = {R(dt, 2, 4, h), R(dt, 1, h)};
			CHECK(v ? "ai.tpfuse.RMSNorm (1+gamma), generic" : "ai.tpfuse.RMSNorm (1+gamma), fused", tn, t1, 1, 2);
			free_tensors(t1, 2);
			struct tpf_node *rn = node("ai.tpfuse", "AllReduceRMSNorm", 3, 2);
			tpf_node_set_attr_float(rn, "epsilon", 1e-6f);
			tpf_node_set_attr_float(rn, "weight_offset", 1.0f);
			struct tpf_ktensor t2[3] = {R(dt, 2, 4, h), R(dt, 1, h), R(dt, 2, 4, h)};
			check(v ? "AllReduceRMSNorm post-reduce residual, (1+gamma), generic"
				: "AllReduceRMSNorm post-reduce residual, (1+gamma), fused",
			      rn, TPF_PHASE_POST_REDUCE, t2, 3, (struct tpf_ktensor[]){t2[0], t2[0]}, 2, 2);
			free_tensors(t2, 3);
		}
		struct tpf_node *ar = node("ai.tpfuse", "AllReduceRMSNorm", 3, 2);
		struct tpf_ktensor r1[3] = {R(dt, 2, 3, 128), R(dt, 1, 128), R(dt, 2, 3, 128)};
		check("AllReduceRMSNorm post-reduce", ar, TPF_PHASE_POST_REDUCE, r1, 3, (struct tpf_ktensor[]){r1[0], r1[0]}, 2,
		      2);
		free_tensors(r1, 3);
		/* a bias after the reduction (input 3), added before the residual:
		 * the generic row kernel */
		struct tpf_node *ab = node("ai.tpfuse", "AllReduceRMSNorm", 4, 2);
		struct tpf_ktensor b1[4] = {R(dt, 2, 3, 128), R(dt, 1, 128), R(dt, 2, 3, 128), R(dt, 1, 128)};
		check("AllReduceRMSNorm post-reduce bias, residual", ab, TPF_PHASE_POST_REDUCE, b1, 4,
		      (struct tpf_ktensor[]){b1[0], b1[0]}, 2, 2);
		check("AllReduceRMSNorm post-reduce bias, no residual", ab, TPF_PHASE_POST_REDUCE,
		      (struct tpf_ktensor[]){b1[0], b1[1], omitted(), b1[3]}, 4,
		      (struct tpf_ktensor[]){b1[0], b1[0]}, 2, 2);
		free_tensors(b1, 4);
		/* AllReduceLayerNorm(x, gamma[, residual][, bias][, beta]) */
		struct tpf_node *al = node("ai.tpfuse", "AllReduceLayerNorm", 5, 2);
		tpf_node_set_attr_float(al, "epsilon", 1e-5f);
		struct tpf_ktensor l2[5] = {R(dt, 2, 3, 128), R(dt, 1, 128), R(dt, 2, 3, 128), R(dt, 1, 128),
					    R(dt, 1, 128)};
		check("AllReduceLayerNorm post-reduce residual, bias, beta", al, TPF_PHASE_POST_REDUCE, l2, 5,
		      (struct tpf_ktensor[]){l2[0], l2[0]}, 2, 2);
		check("AllReduceLayerNorm post-reduce residual, beta", al, TPF_PHASE_POST_REDUCE,
		      (struct tpf_ktensor[]){l2[0], l2[1], l2[2], omitted(), l2[4]}, 5,
		      (struct tpf_ktensor[]){l2[0], l2[0]}, 2, 2);
		free_tensors(l2, 5);
		struct tpf_node *ap = node("ai.tpfuse", "AllReduceLayerNorm", 2, 1);
		struct tpf_ktensor l3[2] = {R(dt, 2, 5, 40), R(dt, 1, 40)};
		check("AllReduceLayerNorm post-reduce plain, hidden 40", ap, TPF_PHASE_POST_REDUCE, l3, 2,
		      (struct tpf_ktensor[]){l3[0]}, 1, 2);
		free_tensors(l3, 2);
		struct tpf_node *aq = node("ai.tpfuse", "AllReduceRMSNormQuant", 4, 4);
		struct tpf_ktensor q1[4] = {R(dt, 2, 3, 128), R(dt, 1, 128), scalar_f(TPF_DTYPE_FLOAT, 0.02), R(dt, 2, 3, 128)};
		struct tpf_ktensor qo[4] = {T(TPF_DTYPE_FLOAT8E4M3FN, 2, 3, 128), q1[0], omitted(), q1[0]};
		free(qo[0].data);
		check("AllReduceRMSNormQuant post-reduce fp8 (+norm)", aq, TPF_PHASE_POST_REDUCE, q1, 4, qo, 4, 2);
		struct tpf_node *a4 = node("ai.tpfuse", "AllReduceRMSNormQuant", 4, 4);
		tpf_node_set_attr_string(a4, "quant", "nvfp4");
		struct tpf_ktensor q4o[4] = {T(TPF_DTYPE_FLOAT4E2M1, 2, 3, 128), q1[0], T(TPF_DTYPE_FLOAT8E4M3FN, 2, 3, 8),
					     omitted()};
		free(q4o[0].data);
		free(q4o[2].data);
		check("AllReduceRMSNormQuant post-reduce nvfp4", a4, TPF_PHASE_POST_REDUCE, q1, 4, q4o, 4, 2);
		struct tpf_node *ag = node("ai.tpfuse", "AllReduceRMSNormQuant", 4, 4);
		tpf_node_set_attr_string(ag, "quant", "fp8-group");
		tpf_node_set_attr_int(ag, "block_size", 64);
		struct tpf_ktensor qgo[4] = {T(TPF_DTYPE_FLOAT8E4M3FN, 2, 3, 128), q1[0], T(TPF_DTYPE_FLOAT, 2, 3, 2),
					     q1[0]};
		free(qgo[0].data);
		free(qgo[2].data);
		check("AllReduceRMSNormQuant post-reduce fp8-group 64 (+norm)", ag, TPF_PHASE_POST_REDUCE, q1, 4, qgo, 4, 2);
		free_tensors(q1, 4);
		for (int fast = 0; fast < 2; fast++) {
			char lab[96];
			struct tpf_node *sh = node("ai.tpfuse", "ShardedRMSNorm", 4, 2);
			int64_t fd[2] = {fast ? 512 : 44, fast ? 128 : 12};
			tpf_node_set_attr_ints(sh, "full_dims", fd, 2);
			int64_t w0 = fd[0] / 2, w1 = fd[1] / 2;
			struct tpf_ktensor x[4] = {R(dt, 2, 3, w0), R(dt, 2, 3, w1), R(dt, 1, w0), R(dt, 1, w1)};
			struct tpf_ktensor so[1] = {T(TPF_DTYPE_FLOAT, 2, 3, 2)};
			free(so[0].data);
			snprintf(lab, sizeof(lab), "ShardedRMSNorm sumsq (%s)", fast ? "fused kernel" : "generic");
			check(lab, sh, TPF_PHASE_SUMSQ, x, 4, so, 1, 4);
			struct tpf_ktensor xn[5] = {x[0], x[1], x[2], x[3], P(TPF_DTYPE_FLOAT, 2, 3, 2)};
			snprintf(lab, sizeof(lab), "ShardedRMSNorm normalize (%s)", fast ? "fused kernel" : "generic");
			check(lab, sh, TPF_PHASE_NORMALIZE, xn, 5, (struct tpf_ktensor[]){x[0], x[1]}, 2, 2);
			free_tensors(xn, 5);
		}
	}
}

static void movement(void)
{
	enum tpf_dtype dts[] = {TPF_DTYPE_BFLOAT16, TPF_DTYPE_FLOAT, TPF_DTYPE_INT64, TPF_DTYPE_UINT8};
	for (int d = 0; d < 4; d++) {
		enum tpf_dtype dt = dts[d];
		struct tpf_node *tr = node("", "Transpose", 1, 1);
		int64_t perm[] = {0, 2, 1, 3};
		tpf_node_set_attr_ints(tr, "perm", perm, 4);
		struct tpf_ktensor a[1] = {R(dt, 4, 2, 3, 5, 7)};
		CHECK("Transpose [0,2,1,3]", tr, a, 1, 1);
		struct tpf_node *t2 = node("", "Transpose", 1, 1);
		CHECK("Transpose reversed", t2, a, 1, 1);
		struct tpf_node *rs = node("", "Reshape", 2, 1);
		int64_t shp[] = {6, 35};
		struct tpf_ktensor r[2] = {a[0], ints(TPF_DTYPE_INT64, 2, shp)};
		CHECK("Reshape (copy)", rs, r, 1, 1);
		free(r[1].data);
		struct tpf_node *sl = node("", "Slice", 5, 1);
		int64_t st[] = {1, -1}, en[] = {5, -6}, ax[] = {2, 3}, sp[] = {2, -2};
		struct tpf_ktensor s[5] = {a[0], ints(TPF_DTYPE_INT64, 2, st), ints(TPF_DTYPE_INT64, 2, en),
					   ints(TPF_DTYPE_INT64, 2, ax), ints(TPF_DTYPE_INT64, 2, sp)};
		CHECK("Slice steps 2 and -2", sl, s, 1, 1);
		for (int i = 1; i < 5; i++)
			free(s[i].data);
		struct tpf_node *sp2 = node("", "Split", 2, 2);
		tpf_node_set_attr_int(sp2, "axis", 3);
		int64_t parts[] = {3, 4};
		struct tpf_ktensor p[2] = {a[0], ints(TPF_DTYPE_INT64, 2, parts)};
		CHECK("Split axis 3 [3,4]", sp2, p, 2, 1);
		free(p[1].data);
		/* merged q/k/v of 8 decode tokens: whole 16-byte pieces (one launch
		 * for every output) */
		struct tpf_node *sp3 = node("", "Split", 2, 3);
		tpf_node_set_attr_int(sp3, "axis", 2);
		int64_t qkv[] = {256, 64, 64};
		struct tpf_ktensor q3[2] = {R(dt, 3, 8, 1, 384), ints(TPF_DTYPE_INT64, 3, qkv)};
		CHECK("Split axis 2 [8,1,384] -> 256/64/64 (16-byte pieces)", sp3, q3, 3, 1);
		free_tensors(q3, 2);
		struct tpf_node *cc = node("", "Concat", 3, 1);
		tpf_node_set_attr_int(cc, "axis", 1);
		struct tpf_ktensor c[3] = {a[0], R(dt, 4, 2, 1, 5, 7), R(dt, 4, 2, 4, 5, 7)};
		CHECK("Concat axis 1", cc, c, 1, 1);
		free(c[1].data);
		free(c[2].data);
		/* a KV cache append: whole 16-byte blocks (the vector path) */
		struct tpf_node *kv = node("", "Concat", 2, 1);
		tpf_node_set_attr_int(kv, "axis", 2);
		struct tpf_ktensor k2[2] = {R(dt, 4, 3, 2, 24, 32), R(dt, 4, 3, 2, 1, 32)};
		CHECK("Concat axis 2 [3,2,24,32]+[3,2,1,32] (16-byte blocks)", kv, k2, 1, 1);
		free_tensors(k2, 2);
		struct tpf_node *ex = node("", "Expand", 2, 1);
		int64_t es[] = {4, 2, 3, 5, 7};
		struct tpf_ktensor e[2] = {R(dt, 3, 3, 1, 7), ints(TPF_DTYPE_INT64, 5, es)};
		CHECK("Expand [3,1,7] -> [4,2,3,5,7]", ex, e, 1, 1);
		free_tensors(e, 2);
		struct tpf_node *ga = node("", "Gather", 2, 1);
		tpf_node_set_attr_int(ga, "axis", 1);
		struct tpf_ktensor g[2] = {a[0], fill(T(TPF_DTYPE_INT64, 2, 2, 4), F_INDEX, 3)};
		CHECK("Gather axis 1 (negative indices)", ga, g, 1, 1);
		free(g[1].data);
		struct tpf_node *ge = node("", "GatherElements", 2, 1);
		tpf_node_set_attr_int(ge, "axis", 2);
		struct tpf_ktensor gg[2] = {a[0], fill(T(TPF_DTYPE_INT64, 4, 2, 3, 4, 7), F_INDEX, 5)};
		CHECK("GatherElements axis 2", ge, gg, 1, 1);
		free(gg[1].data);
		struct tpf_node *gr = node("com.microsoft", "AllGather", 1, 1);
		tpf_node_set_attr_int(gr, "axis", 2);
		struct tpf_ktensor gi[1] = {R(dt, 1, 2 * 3 * 6 * 7)};
		struct tpf_ktensor go[1] = {T(dt, 4, 2, 3, 6, 7)};
		check("AllGather reorder (axis 2, world 2)", gr, TPF_PHASE_GATHER_REORDER, gi, 1, go, 1, 1);
		free_tensors(gi, 1);
		free_tensors(go, 1);
		free_tensors(a, 1);
	}
	for (int d = 0; d < 2; d++) {
		enum tpf_dtype dt = d ? TPF_DTYPE_FLOAT : TPF_DTYPE_BFLOAT16;
		const char *red[] = {"none", "add"};
		for (int m = 0; m < 2; m++) {
			char lab[96];
			struct tpf_node *sc = node("", "ScatterElements", 3, 1);
			tpf_node_set_attr_int(sc, "axis", 1);
			tpf_node_set_attr_string(sc, "reduction", red[m]);
			/* distinct indices per row for "none" (duplicates are order-dependent) */
			struct tpf_ktensor ix = T(TPF_DTYPE_INT64, 2, 4, 2);
			for (int64_t i = 0; i < 8; i++)
				((int64_t *)ix.data)[i] = m ? (i * 3) % 5 - (i & 1) * 5 : (i % 2) * 2 + (i / 2) % 2;
			struct tpf_ktensor s[3] = {R(dt, 2, 4, 5), ix, R(dt, 2, 4, 2)};
			snprintf(lab, sizeof(lab), "ScatterElements reduction %s", red[m]);
			CHECK(lab, sc, s, 1, 1);
			free_tensors(s, 3);
		}
	}
	struct tpf_node *sh = node("", "Shape", 1, 1);
	struct tpf_ktensor s1[1] = {R(TPF_DTYPE_FLOAT, 3, 2, 3, 4)};
	CHECK("Shape", sh, s1, 1, 1);
	free_tensors(s1, 1);
	struct tpf_node *pk = node("ai.tpfuse", "Pack", 2, 1);
	int64_t segs[] = {0, 0, 0, 6, 1, 2, 6, 10, 0, 6, 16, 4};
	tpf_node_set_attr_ints(pk, "segments", segs, 12);
	struct tpf_ktensor pin[2] = {R(TPF_DTYPE_BFLOAT16, 1, 10), R(TPF_DTYPE_BFLOAT16, 1, 12)};
	check("Pack 3 segments", pk, TPF_PHASE_MAIN, pin, 2, (struct tpf_ktensor[]){T(TPF_DTYPE_BFLOAT16, 1, 20)}, 1, 1);
	free_tensors(pin, 2);
	struct tpf_node *up = node("ai.tpfuse", "Unpack", 1, 2);
	int64_t usegs[] = {0, 0, 0, 6, 1, 6, 0, 10, 0, 16, 6, 4};
	tpf_node_set_attr_ints(up, "segments", usegs, 12);
	struct tpf_ktensor uin[1] = {R(TPF_DTYPE_BFLOAT16, 1, 20)};
	check("Unpack 3 segments", up, TPF_PHASE_MAIN, uin, 1,
	      (struct tpf_ktensor[]){T(TPF_DTYPE_BFLOAT16, 1, 10), T(TPF_DTYPE_BFLOAT16, 1, 10)}, 2, 1);
	free_tensors(uin, 1);
}

/* Mask, guard and lookup ops of real exports (kernels/cuda/indexing.cu,
 * spatial.cu and the elementwise additions): logic and order comparisons,
 * Mod, IsNaN / IsInf, Clip, Floor/Ceil/Log/Softplus, Range, Flatten,
 * GatherND, ScatterND, OneHot, Tile, Trilu, CumSum, Size, Pad, Conv. */
static void indexing(void)
{
	const char *logic[] = {"And", "Or", "Xor"};
	for (int o = 0; o < 3; o++) {
		struct tpf_node *n = node("", logic[o], 2, 1);
		struct tpf_ktensor a[2] = {fill(T(TPF_DTYPE_BOOL, 3, 2, 3, 5), F_BOOL, 0),
					   fill(T(TPF_DTYPE_BOOL, 2, 1, 5), F_BOOL, 0)};
		CHECK(logic[o], n, a, 1, 1);
		free_tensors(a, 2);
	}
	const char *order[] = {"LessOrEqual", "GreaterOrEqual"};
	enum tpf_dtype odt[] = {TPF_DTYPE_INT64, TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT16, TPF_DTYPE_UINT64};
	for (int o = 0; o < 2; o++)
		for (int d = 0; d < 4; d++) {
			char lab[96];
			struct tpf_node *n = node("", order[o], 2, 1);
			int integral = tpf_dtype_is_integral(odt[d]);
			struct tpf_ktensor a[2] = {integral ? fill(T(odt[d], 2, 4, 9), F_SMALLINT, 0) : R(odt[d], 2, 4, 9),
						   integral ? fill(T(odt[d], 1, 9), F_SMALLINT, 0) : R(odt[d], 1, 9)};
			memcpy(a[1].data, a[0].data, a[1].nbytes); /* some equal */
			snprintf(lab, sizeof(lab), "%s [4,9]x[9]", order[o]);
			CHECK(lab, n, a, 1, 1);
			free_tensors(a, 2);
		}
	for (int f = 0; f < 2; f++) {
		enum tpf_dtype mdt[] = {TPF_DTYPE_INT64, TPF_DTYPE_INT32, TPF_DTYPE_FLOAT, TPF_DTYPE_FLOAT16};
		for (int d = 0; d < 4; d++) {
			char lab[96];
			struct tpf_node *n = node("", "Mod", 2, 1);
			tpf_node_set_attr_int(n, "fmod", f);
			int integral = tpf_dtype_is_integral(mdt[d]);
			struct tpf_ktensor a[2] = {integral ? fill(T(mdt[d], 2, 5, 8), F_SMALLINT, 0) : R(mdt[d], 2, 5, 8),
						   integral ? fill(T(mdt[d], 1, 8), F_SMALLINT, 0) : P(mdt[d], 1, 8)};
			for (int64_t e = 0; e < a[1].numel && !integral; e++) /* mixed signs */
				if (e & 1)
					tpf_elem_store(mdt[d], a[1].data, e, -tpf_elem_load(mdt[d], a[1].data, e), 1);
			snprintf(lab, sizeof(lab), "Mod fmod=%d", f);
			CHECK(lab, n, a, 1, 1);
			free_tensors(a, 2);
		}
	}
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		const char *un[] = {"Floor", "Ceil", "Log", "Softplus", "IsNaN", "IsInf"};
		for (int o = 0; o < 6; o++) {
			struct tpf_node *n = node("", un[o], 1, 1);
			struct tpf_ktensor a[1] = {!strcmp(un[o], "Log") ? P(dt, 2, 7, 33) : R(dt, 2, 7, 33)};
			for (int64_t e = 0; e < a[0].numel && o >= 4; e += 5) /* NaN, inf, -inf */
				tpf_elem_store(dt, a[0].data, e, e % 3 == 0 ? NAN : e % 3 == 1 ? INFINITY : -INFINITY, 0);
			if (!strcmp(un[o], "IsInf"))
				tpf_node_set_attr_int(n, "detect_negative", 0);
			CHECK(un[o], n, a, 1, 2);
			free_tensors(a, 1);
		}
		struct tpf_node *cl = node("", "Clip", 3, 1);
		struct tpf_ktensor c[3] = {R(dt, 2, 6, 10), scalar_f(dt, -0.5), scalar_f(dt, 0.75)};
		CHECK("Clip [-0.5, 0.75]", cl, c, 1, 1);
		struct tpf_ktensor c2[3] = {c[0], omitted(), c[2]};
		CHECK("Clip max only", cl, c2, 1, 1);
		free_tensors(c, 3);
	}
	struct tpf_node *cli = node("", "Clip", 3, 1);
	struct tpf_ktensor ci[3] = {fill(T(TPF_DTYPE_INT64, 1, 40), F_SMALLINT, 0), ints(TPF_DTYPE_INT64, 1, (int64_t[]){-3}),
				    ints(TPF_DTYPE_INT64, 1, (int64_t[]){4})};
	ci[1].rank = ci[2].rank = 0;
	CHECK("Clip int64 [-3, 4]", cli, ci, 1, 1);
	free_tensors(ci, 3);
	/* Einsum: the Mamba-2 chunked scan's forms, a trace, three operands, int64 */
	for (int d = 0; d < NFL; d++) {
		const char *eqs[] = {"bclhn,bcshn->bclsh", "bzch,bzhpn->bchpn", "ii->", "ij,jk,k->i"};
		struct tpf_ktensor e[4][3] = {
			{R(FL[d], 5, 1, 2, 8, 4, 16), R(FL[d], 5, 1, 2, 8, 4, 16), omitted()},
			{R(FL[d], 4, 1, 3, 3, 4), R(FL[d], 5, 1, 3, 4, 16, 16), omitted()},
			{R(FL[d], 2, 9, 9), omitted(), omitted()},
			{R(FL[d], 2, 5, 6), R(FL[d], 2, 6, 7), R(FL[d], 1, 7)}};
		const int n_in[] = {2, 2, 1, 3};
		for (int k = 0; k < 4; k++) {
			char lab[96];
			struct tpf_node *en = node("", "Einsum", n_in[k], 1);
			tpf_node_set_attr_string(en, "equation", eqs[k]);
			snprintf(lab, sizeof(lab), "Einsum %s", eqs[k]);
			check(lab, en, TPF_PHASE_MAIN, e[k], (size_t)n_in[k], NULL, 1, 4);
			free_tensors(e[k], n_in[k]);
		}
	}
	struct tpf_node *ei = node("", "Einsum", 2, 1);
	tpf_node_set_attr_string(ei, "equation", "bij,bjk->bik");
	struct tpf_ktensor eia[2] = {fill(T(TPF_DTYPE_INT64, 3, 2, 3, 4), F_SMALLINT, 0),
				     fill(T(TPF_DTYPE_INT64, 3, 2, 4, 5), F_SMALLINT, 0)};
	CHECK("Einsum int64 bij,bjk->bik", ei, eia, 1, 1);
	free_tensors(eia, 2);
	/* Range: int64 (a mask's positions) and float */
	struct tpf_node *rg = node("", "Range", 3, 1);
	struct tpf_ktensor ri[3] = {ints(TPF_DTYPE_INT64, 1, (int64_t[]){-7}), ints(TPF_DTYPE_INT64, 1, (int64_t[]){40}),
				    ints(TPF_DTYPE_INT64, 1, (int64_t[]){3})};
	for (int k = 0; k < 3; k++) {
		ri[k].rank = 0;
		tpf_ktensor_finish(&ri[k]);
	}
	CHECK("Range int64 -7..40 step 3", rg, ri, 1, 1);
	free_tensors(ri, 3);
	struct tpf_ktensor rf[3] = {scalar_f(TPF_DTYPE_FLOAT, 10), scalar_f(TPF_DTYPE_FLOAT, -2), scalar_f(TPF_DTYPE_FLOAT, -0.75)};
	check("Range float 10..-2 step -0.75", rg, TPF_PHASE_MAIN, rf, 3,
	      (struct tpf_ktensor[]){T(TPF_DTYPE_FLOAT, 1, 16)}, 1, 1);
	free_tensors(rf, 3);
	enum tpf_dtype dts[] = {TPF_DTYPE_BOOL, TPF_DTYPE_FLOAT16, TPF_DTYPE_FLOAT, TPF_DTYPE_INT64};
	for (int d = 0; d < 4; d++) {
		enum tpf_dtype dt = dts[d];
		struct tpf_ktensor x = dt == TPF_DTYPE_BOOL ? fill(T(dt, 3, 3, 4, 5), F_BOOL, 0)
				       : dt == TPF_DTYPE_INT64 ? fill(T(dt, 3, 3, 4, 5), F_SMALLINT, 0)
							       : R(dt, 3, 3, 4, 5);
		struct tpf_node *fl = node("", "Flatten", 1, 1);
		tpf_node_set_attr_int(fl, "axis", 2);
		struct tpf_ktensor f1[1] = {x};
		CHECK("Flatten axis 2 (copy)", fl, f1, 1, 1);
		/* GatherND: whole rows, single elements, batch_dims 1 */
		struct tpf_node *gn = node("", "GatherND", 2, 1);
		struct tpf_ktensor g1[2] = {x, fill(T(TPF_DTYPE_INT64, 3, 2, 3, 2), F_INDEX, 3)};
		CHECK("GatherND [3,4,5] by [2,3,2] (rows)", gn, g1, 1, 1);
		free(g1[1].data);
		struct tpf_ktensor g2[2] = {x, fill(T(TPF_DTYPE_INT64, 2, 7, 3), F_INDEX, 3)};
		CHECK("GatherND [3,4,5] by [7,3] (elements)", gn, g2, 1, 1);
		free(g2[1].data);
		struct tpf_node *gb = node("", "GatherND", 2, 1);
		tpf_node_set_attr_int(gb, "batch_dims", 1);
		struct tpf_ktensor g3[2] = {x, fill(T(TPF_DTYPE_INT64, 3, 3, 2, 1), F_INDEX, 4)};
		CHECK("GatherND batch_dims 1", gb, g3, 1, 1);
		free(g3[1].data);
		/* ScatterND: distinct rows for "none" */
		struct tpf_node *sn = node("", "ScatterND", 3, 1);
		struct tpf_ktensor si = ints(TPF_DTYPE_INT64, 4, (int64_t[]){2, 1, -3, 3});
		si.rank = 2;
		si.dims[0] = 2;
		si.dims[1] = 2;
		tpf_ktensor_finish(&si);
		struct tpf_ktensor s1[3] = {x, si,
					    dt == TPF_DTYPE_BOOL ? fill(T(dt, 2, 2, 5), F_BOOL, 0)
					    : dt == TPF_DTYPE_INT64 ? fill(T(dt, 2, 2, 5), F_SMALLINT, 0)
								    : R(dt, 2, 2, 5)};
		CHECK("ScatterND rows (none)", sn, s1, 1, 1);
		if (dt != TPF_DTYPE_BOOL) {
			const char *red[] = {"add", "mul", "max", "min"};
			for (int m = 0; m < 4; m++) {
				char lab[96];
				struct tpf_node *sr = node("", "ScatterND", 3, 1);
				tpf_node_set_attr_string(sr, "reduction", red[m]);
				/* the same element twice: reductions in tuple order */
				struct tpf_ktensor ei = ints(TPF_DTYPE_INT64, 9, (int64_t[]){0, 1, 2, 2, 3, 4, 0, 1, 2});
				ei.rank = 2;
				ei.dims[0] = 3;
				ei.dims[1] = 3;
				tpf_ktensor_finish(&ei);
				struct tpf_ktensor s2[3] = {x, ei,
							    dt == TPF_DTYPE_INT64 ? fill(T(dt, 1, 3), F_SMALLINT, 0) : R(dt, 1, 3)};
				snprintf(lab, sizeof(lab), "ScatterND elements (%s, a repeated index)", red[m]);
				CHECK(lab, sr, s2, 1, 2);
				free(ei.data);
				free(s2[2].data);
			}
		}
		free(si.data);
		free(s1[2].data);
		/* Tile, Trilu */
		struct tpf_node *ti = node("", "Tile", 2, 1);
		struct tpf_ktensor t1[2] = {x, ints(TPF_DTYPE_INT64, 3, (int64_t[]){2, 1, 3})};
		CHECK("Tile [2,1,3]", ti, t1, 1, 1);
		free(t1[1].data);
		for (int up = 0; up < 2; up++) {
			struct tpf_node *tr = node("", "Trilu", 2, 1);
			tpf_node_set_attr_int(tr, "upper", up);
			struct tpf_ktensor k = ints(TPF_DTYPE_INT64, 1, (int64_t[]){up ? -1 : 2});
			k.rank = 0;
			tpf_ktensor_finish(&k);
			struct tpf_ktensor tl[2] = {x, k};
			CHECK(up ? "Trilu upper k=-1" : "Trilu lower k=2", tr, tl, 1, 1);
			free(k.data);
		}
		/* OneHot: values of this dtype, int64 indices (some negative, some out of range) */
		if (dt != TPF_DTYPE_BOOL) {
			struct tpf_node *oh = node("", "OneHot", 3, 1);
			tpf_node_set_attr_int(oh, "axis", 1);
			struct tpf_ktensor dp = ints(TPF_DTYPE_INT64, 1, (int64_t[]){5});
			dp.rank = 0;
			tpf_ktensor_finish(&dp);
			struct tpf_ktensor vals = T(dt, 1, 2);
			tpf_elem_store(dt, vals.data, 0, -1, 1);
			tpf_elem_store(dt, vals.data, 1, 3, 1);
			struct tpf_ktensor o1[3] = {fill(T(TPF_DTYPE_INT64, 2, 3, 4), F_INDEX, 7), dp, vals};
			CHECK("OneHot axis 1 depth 5", oh, o1, 1, 1);
			free_tensors(o1, 3);
		}
		/* CumSum over each axis, exclusive and reverse */
		if (dt != TPF_DTYPE_BOOL)
			for (int ax = 0; ax < 3; ax++) {
				char lab[96];
				struct tpf_node *cs = node("", "CumSum", 2, 1);
				tpf_node_set_attr_int(cs, "exclusive", ax == 1);
				tpf_node_set_attr_int(cs, "reverse", ax != 0);
				struct tpf_ktensor axt = ints(TPF_DTYPE_INT32, 1, (int64_t[]){ax - 3});
				axt.rank = 0;
				tpf_ktensor_finish(&axt);
				struct tpf_ktensor c1[2] = {x, axt};
				snprintf(lab, sizeof(lab), "CumSum axis %d%s%s", ax - 3, ax == 1 ? " exclusive" : "",
					 ax ? " reverse" : "");
				CHECK(lab, cs, c1, 1, 2);
				free(axt.data);
			}
		struct tpf_node *sz = node("", "Size", 1, 1);
		struct tpf_ktensor z1[1] = {x};
		CHECK("Size", sz, z1, 1, 1);
		/* Pad: every mode, pads before and after, a crop */
		const char *modes[] = {"constant", "edge", "reflect", "wrap"};
		for (int m = 0; m < 4; m++) {
			char lab[96];
			struct tpf_node *pd = node("", "Pad", 3, 1);
			tpf_node_set_attr_string(pd, "mode", modes[m]);
			struct tpf_ktensor cv = T(dt, 0);
			tpf_elem_store(dt, cv.data, 0, 1, 1);
			struct tpf_ktensor p1[3] = {x, ints(TPF_DTYPE_INT64, 6, (int64_t[]){1, 0, 2, 0, 3, -1}), cv};
			snprintf(lab, sizeof(lab), "Pad %s [1,0,2 | 0,3,-1]", modes[m]);
			CHECK(lab, pd, p1, 1, 1);
			free(p1[1].data);
			free(cv.data);
		}
		free_tensors(&x, 1);
	}
	/* Conv: the depthwise causal conv1d of linear attention layers, a
	 * grouped 2-D conv with strides, dilations and SAME_UPPER pads */
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		struct tpf_node *cv = node("", "Conv", 3, 1);
		tpf_node_set_attr_int(cv, "group", 16);
		tpf_node_set_attr_ints(cv, "pads", (int64_t[]){3, 3}, 2);
		tpf_node_set_attr_ints(cv, "kernel_shape", (int64_t[]){4}, 1);
		struct tpf_ktensor c1[3] = {R(dt, 3, 2, 16, 9), R(dt, 3, 16, 1, 4), R(dt, 1, 16)};
		CHECK("Conv depthwise 1-D, pads 3 (causal conv)", cv, c1, 1, 2);
		free_tensors(c1, 3);
		struct tpf_node *c2n = node("", "Conv", 2, 1);
		tpf_node_set_attr_int(c2n, "group", 2);
		tpf_node_set_attr_string(c2n, "auto_pad", "SAME_UPPER");
		tpf_node_set_attr_ints(c2n, "strides", (int64_t[]){2, 1}, 2);
		tpf_node_set_attr_ints(c2n, "dilations", (int64_t[]){1, 2}, 2);
		struct tpf_ktensor c2[2] = {R(dt, 4, 1, 4, 7, 8), R(dt, 4, 6, 2, 3, 3)};
		CHECK("Conv 2-D group 2, strides, dilations, SAME_UPPER", c2n, c2, 1, 4);
		free_tensors(c2, 2);
	}
}

static void quant(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		/* three operands: the zero point's dtype gives the output's */
		struct tpf_node *q = node("", "QuantizeLinear", 3, 1);
		struct tpf_ktensor qz8 = T(TPF_DTYPE_FLOAT8E4M3FN, 0);
		struct tpf_ktensor a[3] = {R(dt, 2, 8, 64), scalar_f(dt, 0.01), qz8};
		CHECK("QuantizeLinear per tensor -> fp8 e4m3 (saturating)", q, a, 1, 1);
		struct tpf_node *dq = node("", "DequantizeLinear", 2, 1);
		struct tpf_ktensor qx = fill(T(TPF_DTYPE_FLOAT8E4M3FN, 2, 8, 64), F_RAND, 0);
		struct tpf_ktensor b[2] = {qx, scalar_f(dt, 0.37)};
		CHECK("DequantizeLinear fp8 per tensor", dq, b, 1, 1);
		free_tensors(a, 3);
		free(b[1].data);
		struct tpf_node *qa = node("", "QuantizeLinear", 3, 1);
		tpf_node_set_attr_int(qa, "axis", 1);
		struct tpf_ktensor c[3] = {R(dt, 3, 2, 6, 5), P(dt, 1, 6), fill(T(TPF_DTYPE_INT8, 1, 6), F_SMALLINT, 0)};
		for (int64_t e = 0; e < c[1].numel; e++)
			tpf_elem_store(dt, c[1].data, e, tpf_elem_load(dt, c[1].data, e) / 64, 1);
		CHECK("QuantizeLinear per axis -> int8 with zero point", qa, c, 1, 1);
		struct tpf_node *da = node("", "DequantizeLinear", 3, 1);
		tpf_node_set_attr_int(da, "axis", 1);
		struct tpf_ktensor cd[3] = {fill(T(TPF_DTYPE_INT8, 3, 2, 6, 5), F_SMALLINT, 0), c[1], c[2]};
		CHECK("DequantizeLinear per axis int8 with zero point", da, cd, 1, 1);
		free(cd[0].data);
		free_tensors(c, 3);
		const enum tpf_dtype sub[] = {TPF_DTYPE_FLOAT4E2M1, TPF_DTYPE_INT4};
		for (int s = 0; s < 2; s++) {
			char lab[96];
			struct tpf_node *qb = node("", "QuantizeLinear", 3, 1);
			tpf_node_set_attr_int(qb, "axis", 1);
			tpf_node_set_attr_int(qb, "block_size", 16);
			struct tpf_ktensor zp = T(sub[s], 2, 4, 2);
			struct tpf_ktensor e[3] = {R(dt, 2, 4, 32), P(dt, 2, 4, 2), zp};
			for (int64_t i = 0; i < e[1].numel; i++)
				tpf_elem_store(dt, e[1].data, i, tpf_elem_load(dt, e[1].data, i) / 3, 1);
			snprintf(lab, sizeof(lab), "QuantizeLinear blocked 16 -> %s", tpf_dtype_name(sub[s]));
			CHECK(lab, qb, e, 1, 1);
			struct tpf_node *db = node("", "DequantizeLinear", 2, 1);
			tpf_node_set_attr_int(db, "axis", 1);
			tpf_node_set_attr_int(db, "block_size", 16);
			struct tpf_ktensor qf = T(sub[s], 2, 4, 32);
			for (int64_t i = 0; i < (int64_t)qf.nbytes; i++)
				((uint8_t *)qf.data)[i] = (uint8_t)(i * 37 + 11);
			struct tpf_ktensor f[2] = {qf, e[1]};
			snprintf(lab, sizeof(lab), "DequantizeLinear blocked 16 %s", tpf_dtype_name(sub[s]));
			CHECK(lab, db, f, 1, 1);
			free(qf.data);
			free_tensors(e, 3);
		}
		struct tpf_node *f4 = node("trt", "TRT_FP4DynamicQuantize", 2, 2);
		tpf_node_set_attr_int(f4, "block_size", 16);
		struct tpf_ktensor g[2] = {R(dt, 2, 4, 64), scalar_f(TPF_DTYPE_FLOAT, 0.05)};
		check("TRT_FP4DynamicQuantize block 16", f4, TPF_PHASE_MAIN, g, 2,
		      (struct tpf_ktensor[]){T(TPF_DTYPE_FLOAT4E2M1, 2, 4, 64), T(TPF_DTYPE_FLOAT8E4M3FN, 2, 4, 4)}, 2, 1);
		free_tensors(g, 2);
	}
}

/* The split-KV decode kernels: query groups of 1 to 16 rows, KV split over
 * blocks (partial results combined from the workspace), present K/V written
 * by the same kernel, masks, causal, softcap, head sizes 32 to 256, value
 * sizes that leave lanes idle (96) or split into partial pieces (90), and a
 * batch whose (batch, KV head) groups exceed a grid dimension (the row
 * kernel).  bf16/fp16 with head size 64 or 128 and at least 4 group rows
 * take the tensor-core kernel (8 rows: 16/4 heads, the causal softcap case,
 * the bool-mask case; 16 rows: the grouped spelling, the additive-mask
 * case, the head-128 prefill in row chunks), everything else the float
 * kernel (16/8 heads: 2 rows). */
/* Attention with past key/value and no mask (n carries the attributes):
 * sz = {B, Hq, Hk, S (query tokens), L (new key/value tokens), D, Dv, P}. */
static void check_past(const char *label, struct tpf_node *n, enum tpf_dtype dt, const int64_t *sz)
{
	int64_t B = sz[0], Hq = sz[1], Hk = sz[2], S = sz[3], L = sz[4], D = sz[5], Dv = sz[6], P = sz[7];
	struct tpf_ktensor a[6] = {R(dt, 4, B, Hq, S, D), R(dt, 4, B, Hk, L, D), R(dt, 4, B, Hk, L, Dv),
				   omitted(),		   R(dt, 4, B, Hk, P, D), R(dt, 4, B, Hk, P, Dv)};
	check(label, n, TPF_PHASE_MAIN, a, 6, NULL, 3, 4);
	free_tensors(a, 6);
}

static void attention_decode(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		if (dt == TPF_DTYPE_DOUBLE)
			continue;
		/* Llama-3-8B at TP2: 16 query heads over 4 KV heads, past 1024 */
		check_past("Attention decode 16/4 heads of 128, past 1024 (split KV)", node("", "Attention", 6, 3), dt,
			   (const int64_t[]){1, 16, 4, 1, 1, 128, 128, 1024});
		/* the same at batch 8: 32 (batch, KV head) groups, several
		 * 16-key tiles a warp (8 splits of up to 9 tiles on 132 SMs) */
		check_past("Attention decode batch 8, 16/4 heads of 128, past 1024 (split KV)", node("", "Attention", 6, 3),
			   dt, (const int64_t[]){8, 16, 4, 1, 1, 128, 128, 1024});
		/* 16 query heads over 8 KV heads: 2 rows a group, the float kernel
		 * for every dtype */
		check_past("Attention decode 16/8 heads of 128, past 256 (2 rows)", node("", "Attention", 6, 3), dt,
			   (const int64_t[]){1, 16, 8, 1, 1, 128, 128, 256});
		/* the grouped spelling: a KV head's G query heads as its sequence */
		struct tpf_node *g = node("", "Attention", 6, 3);
		tpf_node_set_attr_float(g, "scale", 0.0883883f);
		check_past("Attention decode grouped rows 4, batch 2, past 299", g, dt,
			   (const int64_t[]){2, 4, 4, 4, 1, 128, 128, 299});
		/* 2 new tokens, causal, bool mask, 8 rows a group, head size 64 */
		struct tpf_node *m = node("", "Attention", 6, 3);
		tpf_node_set_attr_int(m, "is_causal", 1);
		struct tpf_ktensor mk = fill(T(TPF_DTYPE_BOOL, 4, 1, 1, 2, 42), F_BOOL, 0);
		struct tpf_ktensor c[6] = {R(dt, 4, 1, 8, 2, 64), R(dt, 4, 1, 2, 2, 64), R(dt, 4, 1, 2, 2, 64), mk,
					   R(dt, 4, 1, 2, 40, 64), R(dt, 4, 1, 2, 40, 64)};
		CHECK("Attention decode 2 tokens causal + bool mask, 8 rows, D 64", m, c, 3, 4);
		free_tensors(c, 6);
		/* everything the score epilogue applies on the tensor-core path
		 * (bf16/fp16, head size 128, 8 rows): 2 new tokens, causal,
		 * softcap 2, past and new keys in one 16-key tile */
		struct tpf_node *cs = node("", "Attention", 6, 3);
		tpf_node_set_attr_int(cs, "is_causal", 1);
		tpf_node_set_attr_float(cs, "softcap", 2.0f);
		check_past("Attention decode causal softcap 2, 2 tokens, 8 rows, head 128, past 333", cs, dt,
			   (const int64_t[]){2, 8, 2, 2, 2, 128, 128, 333});
		/* one KV head for 16 query heads, additive mask, no past */
		struct tpf_node *q = node("", "Attention", 4, 1);
		struct tpf_ktensor e[4] = {R(dt, 4, 1, 16, 1, 64), R(dt, 4, 1, 1, 200, 64), R(dt, 4, 1, 1, 200, 64),
					   R(dt, 4, 1, 16, 1, 200)};
		CHECK("Attention decode 16 rows one KV head, additive mask", q, e, 1, 4);
		free_tensors(e, 4);
		/* head size 256, Dv 256: 8 value columns a lane */
		check_past("Attention decode head size 256, past 77", node("", "Attention", 6, 3), dt,
			   (const int64_t[]){1, 2, 1, 1, 1, 256, 256, 77});
		/* head size 96 (Phi-3): 4 value columns a lane, lanes 24-31 idle */
		check_past("Attention decode head size 96, past 300 (idle value lanes)", node("", "Attention", 6, 3), dt,
			   (const int64_t[]){2, 8, 2, 1, 1, 96, 96, 300});
		/* value size 90: rows not a whole number of 4-column pieces, every
		 * value read and written element by element; additive mask */
		struct tpf_node *v9 = node("", "Attention", 6, 3);
		struct tpf_ktensor v9a[6] = {R(dt, 4, 1, 4, 1, 64), R(dt, 4, 1, 2, 1, 64), R(dt, 4, 1, 2, 1, 90),
					     R(dt, 4, 1, 4, 1, 45), R(dt, 4, 1, 2, 44, 64), R(dt, 4, 1, 2, 44, 90)};
		CHECK("Attention decode value size 90, additive mask, past 44 (element-wise values)", v9, v9a, 3, 4);
		free_tensors(v9a, 6);
		/* more than 65535 (batch, KV head) groups: the row kernel */
		struct tpf_node *bg = node("", "Attention", 3, 1);
		struct tpf_ktensor bga[3] = {R(dt, 4, 8200, 16, 1, 32), R(dt, 4, 8200, 8, 3, 32),
					     R(dt, 4, 8200, 8, 3, 32)};
		CHECK("Attention decode 8200 x 8 KV heads (row kernel)", bg, bga, 1, 4);
		free_tensors(bga, 3);
		/* a prefill chunk over more keys than the row kernel's shared
		 * memory holds: the split kernel in chunks of 16 query rows (40
		 * rows: 3 chunks), present written once */
		struct tpf_node *lp = node("", "Attention", 6, 3);
		tpf_node_set_attr_int(lp, "is_causal", 1);
		check_past("Attention prefill 20 tokens over 51320 keys (row chunks)", lp, dt,
			   (const int64_t[]){1, 2, 1, 20, 20, 32, 32, 51300});
		/* the same at head size 128: bf16/fp16 on the tensor-core kernel,
		 * 16 rows a chunk */
		struct tpf_node *lq = node("", "Attention", 6, 3);
		tpf_node_set_attr_int(lq, "is_causal", 1);
		check_past("Attention prefill 20 tokens over 51320 keys, head 128 (row chunks)", lq, dt,
			   (const int64_t[]){1, 2, 1, 20, 20, 128, 128, 51300});
	}
}

/* An in-place cache's attention: K and V hold max keys, each sequence
 * reads its first nonpad_kv_seqlen of them (the keys after are garbage the
 * kernels must not read into the result). */
static void attention_nonpad(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		if (dt == TPF_DTYPE_DOUBLE)
			continue;
		const int64_t shapes[][6] = {{2, 16, 4, 1, 128, 1280}, {3, 8, 8, 1, 64, 300}, {2, 4, 2, 5, 96, 77}};
		const char *labels[] = {"Attention nonpad_kv_seqlen 16/4 heads of 128, cache 1280 (split KV)",
					"Attention nonpad_kv_seqlen 8/8 heads of 64, cache 300, additive mask",
					"Attention nonpad_kv_seqlen 5 tokens, head 96, cache 77"};
		const int64_t lens[][3] = {{700, 1280, 0}, {1, 150, 299}, {5, 77, 0}};
		for (int c = 0; c < 3; c++) {
			int64_t B = shapes[c][0], Hq = shapes[c][1], Hk = shapes[c][2], S = shapes[c][3], D = shapes[c][4],
				L = shapes[c][5];
			struct tpf_node *n = node("", "Attention", 7, 1);
			struct tpf_ktensor a[7] = {R(dt, 4, B, Hq, S, D), R(dt, 4, B, Hk, L, D), R(dt, 4, B, Hk, L, D),
						   c == 1 ? R(dt, 4, B, 1, S, L) : omitted(), omitted(), omitted(),
						   ints(TPF_DTYPE_INT64, (int)B, lens[c])};
			check(labels[c], n, TPF_PHASE_MAIN, a, 7, NULL, 1, 4);
			free_tensors(a, 7);
		}
	}
}

/* TensorScatter: a decode step's keys (one position) and a prefill's (9)
 * written into a cache of 64 at each sequence's index, linear and
 * circular (wrapping); rows of 3 bytes go byte by byte. */
static void tensor_scatter(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		for (int c = 0; c < 3; c++) {
			int64_t S = c ? 9 : 1;
			struct tpf_node *n = node("", "TensorScatter", 3, 1);
			tpf_node_set_attr_int(n, "axis", 2);
			if (c == 2)
				tpf_node_set_attr_string(n, "mode", "circular");
			struct tpf_ktensor a[3] = {R(dt, 4, 2, 4, 64, 128), R(dt, 4, 2, 4, S, 128),
						   ints(TPF_DTYPE_INT64, 2, c == 2 ? (int64_t[]){60, 3} : (int64_t[]){0, 55})};
			CHECK(c == 0 ? "TensorScatter one position" : c == 1 ? "TensorScatter 9 positions"
									  : "TensorScatter circular",
			      n, a, 1, 1);
			free_tensors(a, 3);
		}
	}
	struct tpf_node *n = node("", "TensorScatter", 3, 1);
	struct tpf_ktensor b[3] = {fill(T(TPF_DTYPE_INT8, 3, 2, 10, 3), F_SMALLINT, 0),
				   fill(T(TPF_DTYPE_INT8, 3, 2, 2, 3), F_SMALLINT, 0), ints(TPF_DTYPE_INT64, 2, (int64_t[]){4, 8})};
	CHECK("TensorScatter rows of 3 bytes", n, b, 1, 1);
	free_tensors(b, 3);
}

/* The tiled tensor-core prefill kernel (attention-prefill.cu, on in this
 * program: TPF_PREFILL_ATTENTION=1): 64 query rows a block, keys in tiles
 * of 64 (partial tiles at both ends), causal blocks stopping early. */
static void attention_prefill(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		if (dt != TPF_DTYPE_FLOAT16 && dt != TPF_DTYPE_BFLOAT16)
			continue;
		struct tpf_node *c1 = node("", "Attention", 3, 1);
		tpf_node_set_attr_int(c1, "is_causal", 1);
		struct tpf_ktensor a1[3] = {R(dt, 4, 2, 8, 200, 128), R(dt, 4, 2, 2, 200, 128), R(dt, 4, 2, 2, 200, 128)};
		CHECK("Attention prefill tiled: causal, GQA 8/2, head 128, 200 tokens", c1, a1, 1, 4);
		free_tensors(a1, 3);
		struct tpf_node *c2 = node("", "Attention", 6, 3);
		tpf_node_set_attr_int(c2, "is_causal", 1);
		check_past("Attention prefill tiled: causal after a past of 37, head 64, 100 tokens", c2, dt,
			   (const int64_t[]){1, 4, 4, 100, 100, 64, 64, 37});
		struct tpf_node *c3 = node("", "Attention", 4, 1);
		struct tpf_ktensor a3[4] = {R(dt, 4, 1, 4, 130, 128), R(dt, 4, 1, 2, 130, 128), R(dt, 4, 1, 2, 130, 128),
					    R(dt, 4, 1, 1, 130, 130)};
		CHECK("Attention prefill tiled: additive mask, head 128, 130 tokens", c3, a3, 1, 4);
		free_tensors(a3, 4);
		struct tpf_node *c4 = node("", "Attention", 7, 1);
		tpf_node_set_attr_int(c4, "is_causal", 1);
		const int64_t lens[2] = {150, 96};
		struct tpf_ktensor a4[7] = {R(dt, 4, 2, 4, 96, 64), R(dt, 4, 2, 2, 300, 64), R(dt, 4, 2, 2, 300, 64),
					    omitted(), omitted(), omitted(), ints(TPF_DTYPE_INT64, 2, lens)};
		check("Attention prefill tiled: 96 tokens into a cache of 300 (nonpad 150, 96), causal", c4,
		      TPF_PHASE_MAIN, a4, 7, NULL, 1, 4);
		free_tensors(a4, 7);
	}
}

static void attention(void)
{
	for (int d = 0; d < NFL; d++) {
		enum tpf_dtype dt = FL[d];
		struct tpf_node *n = node("", "Attention", 6, 3);
		struct tpf_ktensor a[6] = {R(dt, 4, 2, 4, 1, 16), R(dt, 4, 2, 2, 1, 16), R(dt, 4, 2, 2, 1, 16),
					   omitted(), R(dt, 4, 2, 2, 7, 16), R(dt, 4, 2, 2, 7, 16)};
		CHECK("Attention decode GQA 4/2 heads, past 7", n, a, 3, 4);
		struct tpf_node *c = node("", "Attention", 4, 1);
		tpf_node_set_attr_int(c, "is_causal", 1);
		struct tpf_ktensor b[4] = {R(dt, 4, 1, 2, 5, 8), R(dt, 4, 1, 2, 5, 8), R(dt, 4, 1, 2, 5, 8),
					   R(dt, 4, 1, 1, 5, 5)};
		CHECK("Attention prefill causal + additive mask", c, b, 1, 4);
		free_tensors(a, 6);
		free_tensors(b, 4);
		/* scores up to ~16 against a cap of 2: the tanh is not a no-op */
		struct tpf_node *sc = node("", "Attention", 3, 1);
		tpf_node_set_attr_float(sc, "softcap", 2.0f);
		struct tpf_ktensor s3[3] = {R(dt, 4, 1, 2, 3, 16), R(dt, 4, 1, 2, 6, 16), R(dt, 4, 1, 2, 6, 16)};
		CHECK("Attention softcap 2", sc, s3, 1, 4);
		free_tensors(s3, 3);
	}
	attention_decode();
	attention_nonpad();
	attention_prefill();
	tensor_scatter();
}

int main(int argc, char **argv)
{
	D = tpf_diag_create();
	G = tpf_graph_create(NULL);
	if (!D || !G)
		return 1;
	if (!self_check_codes())
		return 1;
	/* the prefill kernel's cases; --flash (after the filter): its flash form */
	setenv("TPF_PREFILL_ATTENTION", argc > 2 && !strcmp(argv[2], "--flash") ? "2" : "1", argc > 2);
	if (tpf_device_create_cuda(0, &DEV, D)) {
		printf("no GPU: skipped (");
		tpf_diag_print(D, stdout);
		printf(")\n");
		return 77;
	}
	const char *only = argc > 1 ? argv[1] : "";
	if (!*only || strstr(only, "elementwise"))
		elementwise();
	if (!*only || strstr(only, "matmul"))
		matmuls();
	if (!*only || strstr(only, "reduce"))
		reductions();
	if (!*only || strstr(only, "norm"))
		norms();
	if (!*only || strstr(only, "movement"))
		movement();
	if (!*only || strstr(only, "indexing"))
		indexing();
	if (!*only || strstr(only, "quant"))
		quant();
	if (!*only || strstr(only, "attention"))
		attention();
	printf("%d passed, %d failed\n", n_pass, n_fail);
	tpf_device_free(DEV);
	tpf_graph_free(G);
	tpf_diag_free(D);
	return n_fail ? 1 : 0;
}
