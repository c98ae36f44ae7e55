/* SPDX-License-Identifier: MIT */
/* Einsum over the index plan of kernel-host.h.  Sums accumulate in float
 * (double for DOUBLE, int64 for the integer types) and the result is
 * rounded into the output dtype once.  Two inputs run as a batched matrix
 * product: the loops split into batch (both inputs and the output), rows
 * (the first input and the output), columns (the second input and the
 * output) and the summed ones, the inputs gathered into [batch, rows,
 * summed] and [batch, summed, columns] so that the inner loop runs over
 * contiguous memory.  Other input counts run the general loop: for each output
 * element, the sum over the summed loops of the inputs' product. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <stdlib.h>
#include <string.h>

/* The accumulator kinds. */
enum { ES_FLOAT, ES_DOUBLE, ES_INT };

/* Loads x, row-major over size[0..nd) at the offsets the strides give,
 * into dst widened to the accumulator type T (read directly when x is of
 * dtype NATIVE). */
#define ES_GATHER(T, name, LOAD, NATIVE)                                                           \
	static void name(T *dst, const struct tpf_ktensor *x, int nd, const int64_t *size,         \
			 const int64_t *stride)                                                    \
	{                                                                                          \
		int64_t idx[TPF_EINSUM_LOOPS] = {0}, off = 0, rows = 1;                           \
		int64_t len = nd ? size[nd - 1] : 1, st = nd ? stride[nd - 1] : 0;                 \
		const T *src = x->dtype == (NATIVE) ? (const T *)x->data : NULL;                  \
		for (int d = 0; d + 1 < nd; d++)                                                   \
			rows *= size[d];                                                           \
		for (int64_t r = 0; r < rows; r++, dst += len) {                                   \
			if (src)                                                                   \
				for (int64_t j = 0; j < len; j++)                                  \
					dst[j] = src[off + j * st];                                \
			else                                                                       \
				for (int64_t j = 0; j < len; j++)                                  \
					dst[j] = (T)LOAD(x->dtype, x->data, off + j * st);         \
			for (int d = nd - 2; d >= 0; d--) {                                        \
				off += stride[d];                                                  \
				if (++idx[d] < size[d])                                            \
					break;                                                     \
				off -= stride[d] * size[d];                                        \
				idx[d] = 0;                                                        \
			}                                                                          \
		}                                                                                  \
	}
ES_GATHER(float, gather_f, tpf_elem_load, TPF_DTYPE_FLOAT)
ES_GATHER(double, gather_d, tpf_elem_load, TPF_DTYPE_DOUBLE)
ES_GATHER(int64_t, gather_i, tpf_elem_load_int, TPF_DTYPE_INT64)

/* The batched product C[b][m][n] = sum_k A[b][m][k] * B[b][k][n]: a row of
 * C accumulates B's rows in k order, so that each element sums in order
 * and the inner loop runs over contiguous columns. */
#define ES_BMM(T, name)                                                                            \
	static void name(T *restrict C, const T *restrict A, const T *restrict B, int64_t nb,     \
			 int64_t nm, int64_t nn, int64_t nk)                                       \
	{                                                                                          \
		for (int64_t b = 0; b < nb; b++)                                                   \
			for (int64_t m = 0; m < nm; m++) {                                         \
				const T *a = A + (b * nm + m) * nk;                                \
				T *c = C + (b * nm + m) * nn;                                      \
				for (int64_t k = 0; k < nk; k++) {                                 \
					const T *r = B + (b * nk + k) * nn;                        \
					T ak = a[k];                                               \
					for (int64_t n = 0; n < nn; n++)                           \
						c[n] += ak * r[n];                                 \
				}                                                                  \
			}                                                                          \
	}
ES_BMM(float, bmm_f)
ES_BMM(double, bmm_d)
ES_BMM(int64_t, bmm_i)

/* The general loop: out[o] = sum over the summed loops of the product of
 * the inputs (widened, contiguous in their own layout, in X[i]). */
#define ES_GENERAL(T, name)                                                                        \
	static void name(T *out, T *const *X, const struct tpf_einsum_plan *p)                     \
	{                                                                                          \
		int no = p->n_out, ns = p->n_loops - no;                                           \
		const int64_t *ssize = p->size + no;                                               \
		for (int64_t o = 0; o < p->out_numel; o++) {                                       \
			int64_t pos[TPF_EINSUM_LOOPS], base[TPF_EINSUM_MAX_OPERANDS] = {0};        \
			int64_t idx[TPF_EINSUM_LOOPS] = {0}, off[TPF_EINSUM_MAX_OPERANDS];         \
			tpf_unravel(o, p->size, no, pos);                                          \
			for (int i = 0; i < p->n_in; i++) {                                        \
				for (int d = 0; d < no; d++)                                       \
					base[i] += pos[d] * p->stride[i][d];                       \
				off[i] = base[i];                                                  \
			}                                                                          \
			T acc = 0;                                                                 \
			for (int64_t s = 0; s < p->sum_numel; s++) {                               \
				T v = X[0][off[0]];                                                \
				for (int i = 1; i < p->n_in; i++)                                  \
					v *= X[i][off[i]];                                         \
				acc += v;                                                          \
				for (int d = ns - 1; d >= 0; d--) {                                \
					for (int i = 0; i < p->n_in; i++)                          \
						off[i] += p->stride[i][no + d];                    \
					if (++idx[d] < ssize[d])                                   \
						break;                                             \
					for (int i = 0; i < p->n_in; i++)                          \
						off[i] -= p->stride[i][no + d] * ssize[d];         \
					idx[d] = 0;                                                \
				}                                                                  \
			}                                                                          \
			out[o] = acc;                                                              \
		}                                                                                  \
	}
ES_GENERAL(float, general_f)
ES_GENERAL(double, general_d)
ES_GENERAL(int64_t, general_i)

static size_t es_size(int kind)
{
	return kind == ES_FLOAT ? sizeof(float) : kind == ES_DOUBLE ? sizeof(double) : sizeof(int64_t);
}

static void es_gather(int kind, void *dst, const struct tpf_ktensor *x, int nd, const int64_t *size,
		      const int64_t *stride)
{
	if (kind == ES_FLOAT)
		gather_f(dst, x, nd, size, stride);
	else if (kind == ES_DOUBLE)
		gather_d(dst, x, nd, size, stride);
	else
		gather_i(dst, x, nd, size, stride);
}

/* Writes the accumulators acc (row-major over the output's loops when
 * stride is NULL, else at the strides given along them) into y. */
static void es_store(int kind, struct tpf_ktensor *y, const void *acc, const struct tpf_einsum_plan *p,
		     const int64_t *stride)
{
	int64_t idx[TPF_EINSUM_LOOPS] = {0}, off = 0;
	int nd = p->n_out;

	for (int64_t o = 0; o < y->numel; o++) {
		int64_t at = stride ? off : o;
		if (kind == ES_FLOAT && y->dtype == TPF_DTYPE_FLOAT)
			((float *)y->data)[o] = ((const float *)acc)[at];
		else if (kind == ES_INT)
			tpf_elem_store_int(y->dtype, y->data, o, ((const int64_t *)acc)[at]);
		else if (kind == ES_DOUBLE)
			tpf_elem_store(y->dtype, y->data, o, ((const double *)acc)[at], 0);
		else
			tpf_elem_store(y->dtype, y->data, o, ((const float *)acc)[at], 0);
		if (!stride)
			continue;
		for (int d = nd - 1; d >= 0; d--) {
			off += stride[d];
			if (++idx[d] < p->size[d])
				break;
			off -= stride[d] * p->size[d];
			idx[d] = 0;
		}
	}
}

/* The general loop: every input widened whole, then summed. */
static enum tpf_status es_general(const struct tpf_kernel_call *c, const struct tpf_einsum_plan *p,
				  int kind)
{
	void *X[TPF_EINSUM_MAX_OPERANDS] = {0}, *acc;
	size_t es = es_size(kind);
	enum tpf_status st = TPF_ERR_NOMEM;
	int i;

	acc = tpf_calloc((size_t)p->out_numel, es);
	for (i = 0; acc && i < p->n_in; i++) {
		const struct tpf_ktensor *x = &c->in[i];
		int64_t one = x->numel, unit = 1;
		X[i] = tpf_calloc(x->numel > 0 ? (size_t)x->numel : 1, es);
		if (!X[i])
			break;
		es_gather(kind, X[i], x, 1, &one, &unit);
	}
	if (acc && i == p->n_in) {
		if (kind == ES_FLOAT)
			general_f(acc, (float *const *)X, p);
		else if (kind == ES_DOUBLE)
			general_d(acc, (double *const *)X, p);
		else
			general_i(acc, (int64_t *const *)X, p);
		es_store(kind, &c->out[0], acc, p, NULL);
		st = TPF_OK;
	}
	for (i = 0; i < p->n_in; i++)
		free(X[i]);
	free(acc);
	return st;
}

/* Two inputs as a batched product.  Groups: 0 batch, 1 rows, 2 columns,
 * 3 summed.  The loops of each group in the plan's order. */
struct es_groups {
	int n[4], loop[4][TPF_EINSUM_LOOPS];
	int64_t numel[4];
};

static void es_group(const struct tpf_einsum_plan *p, struct es_groups *g)
{
	memset(g, 0, sizeof(*g));
	for (int k = 0; k < 4; k++)
		g->numel[k] = 1;
	for (int l = 0; l < p->n_loops; l++) {
		int a = p->stride[0][l] != 0, b = p->stride[1][l] != 0;
		int k = l >= p->n_out ? 3 : a && b ? 0 : a ? 1 : b ? 2 : 0;
		g->loop[k][g->n[k]++] = l;
		g->numel[k] *= p->size[l];
	}
}

/* Input i gathered as [batch, rows, summed] (i 0) or [batch, summed,
 * columns] (i 1). */
static void *es_pack(int kind, const struct tpf_ktensor *x, const struct tpf_einsum_plan *p,
		     const struct es_groups *g, int i)
{
	const int order[3] = {0, i ? 3 : 1, i ? 2 : 3};
	int64_t size[TPF_EINSUM_LOOPS], stride[TPF_EINSUM_LOOPS];
	int nd = 0;
	size_t n = (size_t)(g->numel[0] * g->numel[1 + i] * g->numel[3]);
	void *dst = tpf_calloc(n ? n : 1, es_size(kind));

	if (!dst)
		return NULL;
	for (int k = 0; k < 3; k++)
		for (int j = 0; j < g->n[order[k]]; j++) {
			int l = g->loop[order[k]][j];
			size[nd] = p->size[l];
			stride[nd++] = p->stride[i][l];
		}
	es_gather(kind, dst, x, nd, size, stride);
	return dst;
}

static enum tpf_status es_product(const struct tpf_kernel_call *c, const struct tpf_einsum_plan *p,
				  int kind)
{
	struct es_groups g;
	int64_t cstride[TPF_EINSUM_LOOPS], st = 1;
	enum tpf_status status = TPF_ERR_NOMEM;

	es_group(p, &g);
	/* the product's strides along the output's loops: [batch, rows, columns] */
	for (int k = 2; k >= 0; k--)
		for (int j = g.n[k] - 1; j >= 0; j--) {
			cstride[g.loop[k][j]] = st;
			st *= p->size[g.loop[k][j]];
		}
	void *A = es_pack(kind, &c->in[0], p, &g, 0);
	void *B = A ? es_pack(kind, &c->in[1], p, &g, 1) : NULL;
	void *C = B ? tpf_calloc(p->out_numel > 0 ? (size_t)p->out_numel : 1, es_size(kind)) : NULL;
	if (C) {
		int64_t nb = g.numel[0], nm = g.numel[1], nn = g.numel[2], nk = g.numel[3];
		if (kind == ES_FLOAT)
			bmm_f(C, A, B, nb, nm, nn, nk);
		else if (kind == ES_DOUBLE)
			bmm_d(C, A, B, nb, nm, nn, nk);
		else
			bmm_i(C, A, B, nb, nm, nn, nk);
		es_store(kind, &c->out[0], C, p, cstride);
		status = TPF_OK;
	}
	free(A);
	free(B);
	free(C);
	return status;
}

TPF_CPU_KERNEL(tpf_cpu_einsum)
{
	struct tpf_einsum_plan p;
	enum tpf_dtype t = c->out[0].dtype;
	int kind = tpf_dtype_is_integral(t) ? ES_INT : t == TPF_DTYPE_DOUBLE ? ES_DOUBLE : ES_FLOAT;

	TPF_KTRY(tpf_einsum_plan(c, &p));
	if (p.out_numel == 0)
		return TPF_OK;
	if (p.n_in == 2)
		return es_product(c, &p, kind);
	return es_general(c, &p, kind);
}
