/* SPDX-License-Identifier: MIT */
/* MatMul (batched, broadcast, numpy 1-D rules) and Gemm.  Operands are
 * widened to float32 once (float64 for DOUBLE and integer types), products
 * accumulate in that type, results are rounded once into the output dtype. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <stdlib.h>
#include <string.h>

static void *widen(const struct tpf_ktensor *t, int wide);

/* Widens t into a fresh array of float (wide == 0) or double (wide == 1);
 * with swap, each [R, C] matrix of the last two axes is written as [C, R]. */
static void *widen_as(const struct tpf_ktensor *t, int wide, int swap)
{
	if (swap && t->rank >= 2) {
		int64_t R = t->dims[t->rank - 2], C = t->dims[t->rank - 1];
		size_t es = wide ? sizeof(double) : sizeof(float);
		size_t n = t->numel > 0 ? (size_t)t->numel : 1;
		char *p = tpf_calloc(n, es);
		if (!p)
			return NULL;
		int64_t rc = R * C; /* numel > 0 implies rc > 0 */
		for (int64_t i = 0; i < t->numel; i++) {
			int64_t mat = i / rc, r = i % rc / C, c = i % C;
			int64_t o = mat * rc + c * R + r;
			double v = tpf_elem_load(t->dtype, t->data, i);
			if (wide)
				((double *)p)[o] = v;
			else
				((float *)p)[o] = (float)v;
		}
		return p;
	}
	return widen(t, wide);
}

/* Widens t into a fresh array of float (wide == 0) or double (wide == 1). */
static void *widen(const struct tpf_ktensor *t, int wide)
{
	size_t es = wide ? sizeof(double) : sizeof(float);
	size_t n = t->numel > 0 ? (size_t)t->numel : 1;
	void *p = tpf_calloc(n, es);
	if (!p)
		return NULL;
	if (wide) {
		double *d = p;
		for (int64_t i = 0; i < t->numel; i++)
			d[i] = tpf_elem_load(t->dtype, t->data, i);
	} else if (t->dtype == TPF_DTYPE_FLOAT) {
		memcpy(p, t->data, (size_t)t->numel * sizeof(float));
	} else {
		float *f = p;
		for (int64_t i = 0; i < t->numel; i++)
			f[i] = (float)tpf_elem_load(t->dtype, t->data, i);
	}
	return p;
}

static int wants_double(enum tpf_dtype t)
{
	return t == TPF_DTYPE_DOUBLE || tpf_dtype_is_integral(t);
}

/* s[0..N) = row pa (K elements) times the K x N matrix pb, accumulated in
 * type T (float32 or double), k outer so that pb is read row by row. */
#define ROW_TIMES(T, pa, pb, s, K, N)                                                              \
	do {                                                                                       \
		const T *pa_ = (pa), *pb_ = (pb);                                                  \
		for (int64_t n_ = 0; n_ < (N); n_++)                                               \
			(s)[n_] = 0;                                                               \
		for (int64_t k_ = 0; k_ < (K); k_++) {                                             \
			T av_ = pa_[k_];                                                           \
			const T *row_ = pb_ + k_ * (N);                                            \
			for (int64_t n_ = 0; n_ < (N); n_++)                                       \
				(s)[n_] += av_ * row_[n_];                                         \
		}                                                                                  \
	} while (0)

/* bt: b is stored with its last two axes swapped ([..., N, K]). */
static enum tpf_status matmul(const struct tpf_kernel_call *c, int bt)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = TPF_OK;
	void *wa = NULL, *wb = NULL, *acc = NULL;
	if (a->rank < 1 || b->rank < 1 || (bt && b->rank < 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands must have rank >= 1 (a transposed one >= 2)");
	int64_t M = a->rank == 1 ? 1 : a->dims[a->rank - 2];
	int64_t K = a->dims[a->rank - 1];
	int64_t Kb = b->rank == 1 ? b->dims[0] : b->dims[b->rank - (bt ? 1 : 2)];
	int64_t N = b->rank == 1 ? 1 : b->dims[b->rank - (bt ? 2 : 1)];
	if (K != Kb)
		return tpf_kfail(c, TPF_ERR_INVALID, "inner dimensions differ (%lld vs %lld)",
				 (long long)K, (long long)Kb);
	/* batch shapes as broadcast views (data unused) */
	struct tpf_ktensor ba = {0}, bb = {0}, by = {0};
	ba.rank = a->rank > 2 ? a->rank - 2 : 0;
	bb.rank = b->rank > 2 ? b->rank - 2 : 0;
	for (int i = 0; i < ba.rank; i++)
		ba.dims[i] = a->dims[i];
	for (int i = 0; i < bb.rank; i++)
		bb.dims[i] = b->dims[i];
	by.rank = ba.rank > bb.rank ? ba.rank : bb.rank;
	int64_t batches = 1;
	for (int i = 0; i < by.rank; i++) {
		int ia = i - (by.rank - ba.rank), ib = i - (by.rank - bb.rank);
		int64_t da = ia >= 0 ? ba.dims[ia] : 1, db = ib >= 0 ? bb.dims[ib] : 1;
		by.dims[i] = da == 1 ? db : da;
		batches *= by.dims[i];
	}
	if (batches * M * N != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output has %lld elements, expected %lld",
				 (long long)y->numel, (long long)(batches * M * N));
	const struct tpf_ktensor *views[2] = {&ba, &bb};
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, &by, views, 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "batch dimensions do not broadcast");
	int wide = wants_double(a->dtype) || wants_double(y->dtype);
	wa = widen(a, wide);
	wb = widen_as(b, wide, bt);
	acc = tpf_calloc(N > 0 ? (size_t)N : 1, wide ? sizeof(double) : sizeof(float));
	if (!wa || !wb || !acc) {
		st = tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	for (int64_t bt = 0; bt < batches; bt++, tpf_bcast_next(&it)) {
		int64_t oa = it.off[0] * M * K, ob = it.off[1] * K * N;
		for (int64_t m = 0; m < M; m++) {
			int64_t yo = (bt * M + m) * N;
			if (wide) {
				double *s = acc;
				ROW_TIMES(double, (const double *)wa + oa + m * K, (const double *)wb + ob, s, K, N);
				for (int64_t n = 0; n < N; n++)
					tpf_elem_store(y->dtype, y->data, yo + n, s[n], 1);
			} else {
				float *s = acc;
				ROW_TIMES(float, (const float *)wa + oa + m * K, (const float *)wb + ob, s, K, N);
				if (y->dtype == TPF_DTYPE_FLOAT)
					memcpy((float *)y->data + yo, s, (size_t)N * sizeof(float));
				else
					for (int64_t n = 0; n < N; n++)
						tpf_elem_store(y->dtype, y->data, yo + n, s[n], 1);
			}
		}
	}
out_free:
	tpf_free(wa);
	tpf_free(wb);
	tpf_free(acc);
	return st;
}

TPF_CPU_KERNEL(tpf_cpu_matmul)
{
	return matmul(c, 0);
}

TPF_CPU_KERNEL(tpf_cpu_matmul_bt)
{
	return matmul(c, 1);
}

/* The packed weight of a matmul-tiled call unpacked to [K, N] (freed by
 * the caller); TPF_OK or a message. */
static enum tpf_status unpacked_weight(const struct tpf_kernel_call *c, const struct tpf_tiled_geom *g, int gated,
				       struct tpf_ktensor *w)
{
	const struct tpf_ktensor *b = &c->in[1];
	*w = *b;
	w->rank = 2;
	w->dims[0] = g->K;
	w->dims[1] = g->N;
	if (tpf_ktensor_finish(w) || !w->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "packed weight has no elements");
	w->data = tpf_malloc(w->nbytes);
	if (!w->data)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	size_t es = w->nbytes / (size_t)w->numel;
	if (gated)
		tpf_gemv_unpack_gated(b->data, w->data, g->K, g->N / 2, (int)g->tw, es);
	else
		tpf_gemv_unpack(b->data, w->data, g->K, g->N, (int)g->tw, es);
	return TPF_OK;
}

/* Operand 1 packed in column tiles [T, K, TW] (TPF_PHASE_MATMUL_TILED):
 * unpacked to [K, N] and multiplied as a plain MatMul, so the result is
 * the same bits as the unpacked product's. */
TPF_CPU_KERNEL(tpf_cpu_matmul_tiled)
{
	struct tpf_tiled_geom g;
	struct tpf_ktensor in[2] = {c->in[0]};
	enum tpf_status st = tpf_tiled_geom(c, 0, &g);
	if (st || (st = unpacked_weight(c, &g, 0, &in[1])))
		return st;
	struct tpf_kernel_call cc = *c;
	cc.in = in;
	st = matmul(&cc, 0);
	tpf_free(in[1].data);
	return st;
}

/* GatedActivation (packed) of MatMul(A, W), the merged gate/up weight
 * packed by tpf_gemv_pack_gated (the GatedActivation's matmul-tiled phase):
 * W unpacked, the product rounded to T as the MatMul stores it, then the
 * gated activation: the same bits as the two kernels of the unfused plan. */
TPF_CPU_KERNEL(tpf_cpu_gated_matmul_tiled)
{
	if (!tpf_node_attr_int(c->node, "packed", 0))
		return tpf_kfail(c, TPF_ERR_INVALID, "expects a packed GatedActivation (packed = 1)");
	struct tpf_tiled_geom g;
	struct tpf_ktensor in[2] = {c->in[0]}, t = c->out[0];
	enum tpf_status st = tpf_tiled_geom(c, 1, &g);
	if (st || (st = unpacked_weight(c, &g, 1, &in[1])))
		return st;
	t.dims[t.rank - 1] = g.N; /* the product, [..., 2F] */
	t.data = NULL;
	if (tpf_ktensor_finish(&t) || !(t.data = tpf_malloc(t.nbytes ? t.nbytes : 1))) {
		st = tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
		goto out;
	}
	struct tpf_kernel_call mc = *c;
	mc.in = in;
	mc.out = &t;
	if ((st = matmul(&mc, 0)))
		goto out;
	struct tpf_kernel_call gc = *c;
	gc.in = &t;
	gc.n_in = 1;
	st = tpf_cpu_gated_activation(&gc);
out:
	tpf_free(in[1].data);
	tpf_free(t.data);
	return st;
}

TPF_CPU_KERNEL(tpf_cpu_gemm)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1];
	const struct tpf_ktensor *cc = c->n_in > 2 && c->in[2].data ? &c->in[2] : NULL;
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = TPF_OK;
	double *wa = NULL, *wb = NULL;
	struct tpf_gemm_attrs g;
	if ((st = tpf_gemm_attrs(c, &g)))
		return st;
	int ta = g.trans_a, tb = g.trans_b;
	double alpha = g.alpha, beta = g.beta;
	int64_t M = g.m, K = g.k, N = g.n;
	struct tpf_bcast it;
	const struct tpf_ktensor *views[1] = {cc};
	if (cc && tpf_bcast_init(&it, y, views, 1))
		return tpf_kfail(c, TPF_ERR_INVALID, "C does not broadcast to (M, N)");
	int wide = wants_double(y->dtype);
	wa = widen(a, 1);
	wb = widen(b, 1);
	if (!wa || !wb) {
		st = tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
		goto out_free;
	}
	for (int64_t m = 0; m < M; m++) {
		for (int64_t n = 0; n < N; n++) {
			double sd = 0;
			float sf = 0;
			for (int64_t k = 0; k < K; k++) {
				double av = ta ? wa[k * M + m] : wa[m * K + k];
				double bv = tb ? wb[n * K + k] : wb[k * N + n];
				if (wide)
					sd += av * bv;
				else
					sf += (float)av * (float)bv;
			}
			double r = alpha * (wide ? sd : (double)sf);
			if (cc) {
				r += beta * tpf_elem_load(cc->dtype, cc->data, it.off[0]);
				tpf_bcast_next(&it);
			}
			tpf_elem_store(y->dtype, y->data, m * N + n, r, 1);
		}
	}
out_free:
	tpf_free(wa);
	tpf_free(wb);
	return st;
}

/* ai.tpfuse.MatMulFp8 (kernels.def): xq [..., K] and wt [N, K] are
 * FLOAT8E4M3FN codes, the scales known scalars.  Products of the exact code
 * values accumulate in float32 in the order of the MatMul above, then one
 * multiply by x_scale * w_scale and one rounding: with power-of-two scales
 * exactly what dequantizing first and multiplying gives. */
TPF_CPU_KERNEL(tpf_cpu_matmul_fp8)
{
	int64_t M = 0, N = 0, K = 0;
	TPF_KTRY(tpf_fp8_gemm_dims(c, &M, &N, &K));
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1], *sx = &c->in[2], *sw = &c->in[3];
	struct tpf_ktensor *y = &c->out[0];
	if (y->numel != M * N || !tpf_dtype_is_float(y->dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: output must be float [..., %lld]", (long long)N);
	if (sx->numel != 1 || sw->numel != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: the scales must be scalars");
	float lut[256];
	for (int i = 0; i < 256; i++)
		lut[i] = tpf_minifloat_to_f32(TPF_DTYPE_FLOAT8E4M3FN, (uint8_t)i);
	float alpha = (float)(tpf_elem_load(sx->dtype, sx->data, 0) * tpf_elem_load(sw->dtype, sw->data, 0));
	float *xa = tpf_calloc((size_t)K, sizeof(float));
	if (!xa)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
	const uint8_t *xq = x->data, *wt = w->data;
	for (int64_t m = 0; m < M; m++) {
		for (int64_t k = 0; k < K; k++)
			xa[k] = lut[xq[m * K + k]];
		for (int64_t n = 0; n < N; n++) {
			const uint8_t *row = wt + n * K;
			float s = 0;
			for (int64_t k = 0; k < K; k++)
				s += xa[k] * lut[row[k]];
			tpf_elem_store(y->dtype, y->data, m * N + n, (double)(s * alpha), 1);
		}
	}
	tpf_free(xa);
	return TPF_OK;
}
