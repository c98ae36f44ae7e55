/* SPDX-License-Identifier: MIT */
/* Private to kernels/: what the CPU and the CUDA kernel of Conv, TopK,
 * Attention, the FP8 GEMM, Transpose and CumSum share beyond kernel-host.h:
 * the operand checks and geometry (host; the same nodes are refused with
 * the same message), Conv's index arithmetic, Pad's source index and
 * CumSum's line walk and running sums (host and device). */
#ifndef TPF_OP_GEOMETRY_H
#define TPF_OP_GEOMETRY_H

#include <string.h>

#include "elementwise-ops.h" /* TPF_HD */

/* Returns the status of expr from the calling kernel when it is not TPF_OK. */
#define TPF_KTRY(expr)                                                                             \
	do {                                                                                       \
		enum tpf_status st_ = (expr);                                                      \
		if (st_)                                                                           \
			return st_;                                                                \
	} while (0)

/* ------------------------------------------------------------ Conv */

/* Row-major position pos[0..n) of flat index o in dims[0..n). */
TPF_HD void tpf_unravel(int64_t o, const int64_t *dims, int n, int64_t *pos)
{
	for (int d = n - 1; d >= 0; d--) {
		pos[d] = o % dims[d];
		o /= dims[d];
	}
}

/* The spatial offset in one input channel (dims in[0..sp)) that kernel
 * element kk (row-major over k[]) of output position opos reads, or -1
 * where it falls into the padding. */
TPF_HD int64_t tpf_conv_in_offset(int sp, const int64_t *opos, int64_t kk, const int64_t *k,
				  const int64_t *in, const int64_t *stride, const int64_t *pad,
				  const int64_t *dil)
{
	int64_t kpos[TPF_KERNEL_MAX_RANK], xoff = 0;
	tpf_unravel(kk, k, sp, kpos);
	for (int d = 0; d < sp; d++) {
		int64_t p = opos[d] * stride[d] - pad[d] + kpos[d] * dil[d];
		if (p < 0 || p >= in[d])
			return -1;
		xoff = xoff * in[d] + p;
	}
	return xoff;
}

/* X, W, the optional bias (*b, NULL when absent) and Y: the geometry, and
 * one dtype for all (B of M elements). */
static inline enum tpf_status tpf_conv_operands(const struct tpf_kernel_call *c, struct tpf_conv_geom *g,
						const struct tpf_ktensor **b)
{
	const struct tpf_ktensor *x = &c->in[0];
	*b = c->n_in > 2 && c->in[2].rank >= 0 && c->in[2].data ? &c->in[2] : NULL;
	if (tpf_conv_resolve(c, g))
		return tpf_kfail(c, TPF_ERR_INVALID,
				 "X, W and the output disagree with group, kernel_shape, pads, strides or dilations");
	if (c->in[1].dtype != x->dtype || c->out[0].dtype != x->dtype ||
	    (*b && ((*b)->dtype != x->dtype || (*b)->numel != g->m)))
		return tpf_kfail(c, TPF_ERR_INVALID, "X, W, B and Y must share one dtype (B of M elements)");
	return TPF_OK;
}

/* ------------------------------------------------------------ Pad */

/* The input index along one axis of n elements for output index o with
 * leading pad `begin` and tpf_pad_resolve's mode; -1 for the constant. */
TPF_HD int64_t tpf_pad_source(int64_t o, int64_t begin, int64_t n, int mode)
{
	int64_t i = o - begin;
	if (i >= 0 && i < n)
		return i;
	switch (mode) {
	case 1:
		return i < 0 ? 0 : n - 1;
	case 2: {
		if (n == 1)
			return 0;
		int64_t period = 2 * (n - 1);
		i %= period;
		if (i < 0)
			i += period;
		return i < n ? i : period - i;
	}
	case 3:
		i %= n;
		return i < 0 ? i + n : i;
	default:
		return -1;
	}
}

/* ------------------------------------------------------------ TopK */

/* k (input 1), the axis, `largest`, and x as [outer, len, inner] around
 * the axis. */
struct tpf_topk_args {
	int64_t k, len, outer, inner;
	int ax, largest;
};

static inline enum tpf_status tpf_topk_args(const struct tpf_kernel_call *c, struct tpf_topk_args *a)
{
	const struct tpf_ktensor *x = &c->in[0];
	if (c->n_out < 2 || tpf_kread_ints(&c->in[1], &a->k, 1) != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "K must be a known one-element integer tensor");
	a->ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", -1), x->rank);
	if (a->ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis out of range");
	a->largest = (int)tpf_node_attr_int(c->node, "largest", 1);
	a->len = x->dims[a->ax];
	if (a->k < 0 || a->k > a->len)
		return tpf_kfail(c, TPF_ERR_INVALID, "K=%lld out of range [0, %lld]", (long long)a->k,
				 (long long)a->len);
	a->outer = tpf_dims_prod(x->dims, 0, a->ax);
	a->inner = tpf_dims_prod(x->dims, a->ax + 1, x->rank);
	return TPF_OK;
}

/* ------------------------------------------------------------ FP8 GEMM */

/* x [..., K] FLOAT8E4M3FN codes times the transposed weight w [N, K]
 * codes: M (x's rows), N and K. */
static inline enum tpf_status tpf_fp8_gemm_dims(const struct tpf_kernel_call *c, int64_t *M, int64_t *N,
						int64_t *K)
{
	if (c->n_in != 4 || c->n_out != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm expects codes, transposed weight codes and two scales");
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1];
	if (x->dtype != TPF_DTYPE_FLOAT8E4M3FN || w->dtype != TPF_DTYPE_FLOAT8E4M3FN || w->rank != 2 ||
	    x->rank < 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: operands must be FLOAT8E4M3FN, the weight 2-D");
	*N = w->dims[0];
	*K = w->dims[1];
	if (x->dims[x->rank - 1] != *K || *K <= 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "fp8 gemm: K differs (%lld vs %lld)",
				 (long long)x->dims[x->rank - 1], (long long)*K);
	*M = x->numel / *K;
	return TPF_OK;
}

/* ------------------------------------------------------------ Attention */

/* Q, K, V [B, H, S or L, D], the optional mask and past K/V (inputs 3-5),
 * the optional nonpad_kv_seqlen [B] (input 6: the keys of sequence b are
 * its first kvlen[b], the rest are never read), Y and the optional present
 * K/V (outputs 1-2), and the dims: B, Hq, S, D, Hk, L, Dv, P (past length)
 * and T = P + L.  4-D operands only, past K and V together, their shapes
 * consistent, Y [B, Hq, S, Dv]. */
struct tpf_attention_ops {
	const struct tpf_ktensor *q, *k, *v, *mask, *pk, *pv, *kvlen;
	struct tpf_ktensor *y, *prk, *prv;
	int64_t B, Hq, S, D, Hk, L, Dv, P, T;
};

static inline enum tpf_status tpf_attention_operands(const struct tpf_kernel_call *c,
						     struct tpf_attention_ops *o)
{
	const struct tpf_ktensor *in[6] = {NULL};
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < 6 && i < c->n_in; i++)
		in[i] = i < 3 || c->in[i].data ? &c->in[i] : NULL;
	o->q = in[0], o->k = in[1], o->v = in[2], o->mask = in[3], o->pk = in[4], o->pv = in[5];
	o->y = &c->out[0];
	o->prk = c->n_out > 1 && c->out[1].data ? &c->out[1] : NULL;
	o->prv = c->n_out > 2 && c->out[2].data ? &c->out[2] : NULL;
	o->kvlen = c->n_in > 6 && c->in[6].data ? &c->in[6] : NULL;
	if (o->q->rank != 4 || o->k->rank != 4 || o->v->rank != 4 || (o->pk && o->pk->rank != 4) ||
	    (o->pv && o->pv->rank != 4))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "only 4-D Q/K/V are supported");
	if (!!o->pk != !!o->pv)
		return tpf_kfail(c, TPF_ERR_INVALID, "past_key and past_value must come together");
	o->B = o->q->dims[0], o->Hq = o->q->dims[1], o->S = o->q->dims[2], o->D = o->q->dims[3];
	o->Hk = o->k->dims[1], o->L = o->k->dims[2], o->Dv = o->v->dims[3];
	o->P = o->pk ? o->pk->dims[2] : 0;
	o->T = o->P + o->L;
	if (o->Hk <= 0 || o->Hq % o->Hk || o->k->dims[3] != o->D || o->v->dims[1] != o->Hk ||
	    o->v->dims[2] != o->L ||
	    (o->pk && (o->pk->dims[1] != o->Hk || o->pk->dims[3] != o->D || o->pv->dims[2] != o->P ||
		       o->pv->dims[3] != o->Dv)))
		return tpf_kfail(c, TPF_ERR_INVALID, "Q/K/V/past shapes disagree");
	if (o->y->numel != o->B * o->Hq * o->S * o->Dv)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "only the 4-D output layout is supported");
	if (o->kvlen && (o->kvlen->dtype != TPF_DTYPE_INT64 || o->kvlen->numel != o->B))
		return tpf_kfail(c, TPF_ERR_INVALID, "nonpad_kv_seqlen must be int64 [batch]");
	return TPF_OK;
}

/* The element strides of o's mask broadcast to [B, Hq, S, T]; -1 when it
 * does not broadcast. */
static inline int tpf_attention_mask_strides(const struct tpf_attention_ops *o, int64_t strides[4])
{
	struct tpf_ktensor full;
	memset(&full, 0, sizeof(full));
	full.rank = 4;
	full.dims[0] = o->B, full.dims[1] = o->Hq, full.dims[2] = o->S, full.dims[3] = o->T;
	struct tpf_bcast it;
	const struct tpf_ktensor *mv[1] = {o->mask};
	if (tpf_bcast_init(&it, &full, mv, 1))
		return -1;
	for (int d = 0; d < 4; d++)
		strides[d] = it.strides[0][d];
	return 0;
}

/* ------------------------------------------------------------ TensorScatter */

/* TensorScatter's cache [B, mid..., L, inner...] along `axis`, the update
 * with S positions there: rows of `inner` elements of es bytes. */
struct tpf_tscatter_geom {
	int64_t B, mid, L, S, inner;
	size_t es;
	int circular;
};

static inline enum tpf_status tpf_tensor_scatter_geometry(const struct tpf_kernel_call *c,
							  struct tpf_tscatter_geom *g)
{
	const struct tpf_ktensor *x = &c->in[0], *up = &c->in[1], *y = &c->out[0];
	const struct tpf_ktensor *wi = c->n_in > 2 && c->in[2].data ? &c->in[2] : NULL;
	int ax = tpf_norm_axis(c->node ? tpf_node_attr_int(c->node, "axis", -2) : -2, x->rank);
	const char *mode = c->node ? tpf_node_attr_string(c->node, "mode", "linear") : "linear";
	memset(g, 0, sizeof(*g));
	if (ax < 1 || up->rank != x->rank || up->dtype != x->dtype || y->nbytes != x->nbytes)
		return tpf_kfail(c, TPF_ERR_INVALID, "past_cache, update and present_cache disagree (rank, dtype, axis)");
	for (int a = 0; a < x->rank; a++)
		if (a != ax && up->dims[a] != x->dims[a])
			return tpf_kfail(c, TPF_ERR_INVALID, "update dim %d is %lld; expected %lld", a,
					 (long long)up->dims[a], (long long)x->dims[a]);
	if (wi && (wi->dtype != TPF_DTYPE_INT64 || wi->numel != x->dims[0]))
		return tpf_kfail(c, TPF_ERR_INVALID, "write_indices must be int64 [batch]");
	g->B = x->dims[0];
	g->mid = tpf_dims_prod(x->dims, 1, ax);
	g->L = x->dims[ax];
	g->S = up->dims[ax];
	g->inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	g->es = tpf_elem_size(x->dtype);
	g->circular = !strcmp(mode, "circular");
	if (!g->es)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte)", tpf_dtype_name(x->dtype));
	if (g->S > g->L)
		return tpf_kfail(c, TPF_ERR_INVALID, "the update's %lld positions exceed the cache's %lld",
				 (long long)g->S, (long long)g->L);
	return TPF_OK;
}

/* ------------------------------------------------------------ Transpose */

/* For each axis d of Transpose's output, the stride in X (contiguous) of
 * the axis it reads, perm[d]; the output must have X's dims in perm order. */
static inline enum tpf_status tpf_transpose_strides(const struct tpf_kernel_call *c, int64_t *src_strides)
{
	const struct tpf_ktensor *x = &c->in[0], *y = &c->out[0];
	int perm[TPF_KERNEL_MAX_RANK];
	int64_t xs[TPF_KERNEL_MAX_RANK], s = 1;

	TPF_KTRY(tpf_transpose_perm(c, x->rank, perm));
	for (int d = x->rank - 1; d >= 0; d--) {
		xs[d] = s;
		s *= x->dims[d];
	}
	for (int d = 0; d < x->rank; d++) {
		if (y->dims[d] != x->dims[perm[d]])
			return tpf_kfail(c, TPF_ERR_INVALID, "output shape does not match the perm");
		src_strides[d] = xs[perm[d]];
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ CumSum */

/* CumSum as lines: outer x inner lines of len elements, each summed in
 * order (reverse: from its end), the element itself left out (exclusive)
 * or not. */
struct tpf_cumsum_geom {
	int64_t outer, len, inner;
	int excl, rev;
};

/* The lines of X along `axis` (the axis input's value); Y must be X's size
 * and dtype. */
static inline enum tpf_status tpf_cumsum_geometry(const struct tpf_kernel_call *c, int64_t axis,
						  struct tpf_cumsum_geom *g)
{
	const struct tpf_ktensor *x = &c->in[0], *y = &c->out[0];
	int ax = tpf_norm_axis(axis, x->rank);

	if (ax < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "axis %lld is out of range for rank %d", (long long)axis,
				 x->rank);
	if (x->numel != y->numel || x->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "output differs from the input in size or dtype");
	g->outer = tpf_dims_prod(x->dims, 0, ax);
	g->len = x->dims[ax];
	g->inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	g->excl = tpf_node_attr_int(c->node, "exclusive", 0) != 0;
	g->rev = tpf_node_attr_int(c->node, "reverse", 0) != 0;
	return TPF_OK;
}

/* The flat index of step s (0 <= s < len) of line l (0 <= l < outer * inner). */
TPF_HD int64_t tpf_cumsum_index(const struct tpf_cumsum_geom *g, int64_t l, int64_t s)
{
	int64_t o = l / g->inner, in = l - o * g->inner;
	int64_t j = g->rev ? g->len - 1 - s : s;
	return (o * g->len + j) * g->inner + in;
}

/* A line's running sums: integers wrap in int64; floats sum in float32,
 * and in double for DOUBLE. */
struct tpf_cumsum_acc {
	int64_t i;
	float f;
	double d;
};

/* Adds element value v to the integer sum: the value to store for it. */
TPF_HD int64_t tpf_cumsum_add_i(struct tpf_cumsum_acc *a, int64_t v, int excl)
{
	int64_t before = a->i;
	a->i = (int64_t)((uint64_t)a->i + (uint64_t)v);
	return excl ? before : a->i;
}

/* Adds element value v to the float sums: the value to store for it (the
 * double sum when dbl, else the float32 one). */
TPF_HD double tpf_cumsum_add_f(struct tpf_cumsum_acc *a, double v, int excl, int dbl)
{
	double before = dbl ? a->d : a->f;
	a->d += v;
	a->f += (float)v;
	return excl ? before : dbl ? a->d : a->f;
}

/* ------------------------------------------------------------ Pack, Unpack */

/* One (operand, source offset, destination offset, length) quad of
 * `segments`: the tensors it copies between and its element offsets. */
struct tpf_segment {
	const struct tpf_ktensor *from;
	struct tpf_ktensor *to;
	int64_t src, dst, len;
};

/* The quad at a->ints[s] of Pack (pack) or Unpack. */
static inline enum tpf_status tpf_segment_at(const struct tpf_kernel_call *c, const struct tpf_attr *a,
					     size_t s, int pack, struct tpf_segment *g)
{
	int64_t k = a->ints[s];
	size_t nk = pack ? c->n_in : c->n_out;

	g->src = a->ints[s + 1];
	g->dst = a->ints[s + 2];
	g->len = a->ints[s + 3];
	if (k < 0 || (size_t)k >= nk || g->src < 0 || g->dst < 0 || g->len < 0)
		return tpf_kfail(c, TPF_ERR_INVALID, "segment %zu out of range", s / 4);
	g->from = pack ? &c->in[k] : &c->in[0];
	g->to = pack ? &c->out[0] : &c->out[k];
	return TPF_OK;
}

/* The quad's tensors are of dtype dt and hold its elements. */
static inline enum tpf_status tpf_segment_check(const struct tpf_kernel_call *c, const struct tpf_segment *g,
						size_t s, enum tpf_dtype dt)
{
	if (g->from->dtype != dt || g->to->dtype != dt || g->src + g->len > g->from->numel ||
	    g->dst + g->len > g->to->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "segment %zu exceeds its tensors", s / 4);
	return TPF_OK;
}

/* ------------------------------------------------------------ Range */

/* start, limit and delta: scalars of the output's dtype. */
static inline enum tpf_status tpf_range_operands(const struct tpf_kernel_call *c)
{
	enum tpf_dtype dt = c->out[0].dtype;

	for (int k = 0; k < 3; k++)
		if (c->in[k].numel != 1 || c->in[k].dtype != dt)
			return tpf_kfail(c, TPF_ERR_INVALID, "%s must be a scalar of dtype %s",
					 k == 0 ? "start" : k == 1 ? "limit" : "delta", tpf_dtype_name(dt));
	return TPF_OK;
}

#endif /* TPF_OP_GEOMETRY_H */
