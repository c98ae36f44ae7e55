/* SPDX-License-Identifier: MIT */
/* Host-side code both backends share (kernel-host.h): messages,
 * broadcasting, axes, backend and phase names, and the reading of every
 * attribute that the CPU and the CUDA kernel of an op both need. */
#include "kernel-host.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void kvfail(const struct tpf_kernel_call *c, struct tpf_diag *d, const char *fmt, va_list ap)
{
	char msg[512];
	char who[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (c->node)
		tpf_node_describe(c->node, who, sizeof(who));
	else
		snprintf(who, sizeof(who), "kernel");
	tpf_diag_add(d, TPF_SEV_ERROR, "%s: %s", who, msg);
}

enum tpf_status tpf_kfail(const struct tpf_kernel_call *c, enum tpf_status st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kvfail(c, c->diag, fmt, ap);
	va_end(ap);
	return st;
}

enum tpf_status tpf_kfail_to(const struct tpf_kernel_call *c, struct tpf_diag *d, enum tpf_status st,
			     const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kvfail(c, d, fmt, ap);
	va_end(ap);
	return st;
}

int tpf_bcast_init(struct tpf_bcast *b, const struct tpf_ktensor *out,
		   const struct tpf_ktensor *const *ins, int n)
{
	if (n > TPF_BCAST_MAX || out->rank > TPF_KERNEL_MAX_RANK)
		return -1;
	b->rank = out->rank;
	b->n = n;
	for (int d = 0; d < out->rank; d++) {
		b->dims[d] = out->dims[d];
		b->idx[d] = 0;
	}
	for (int k = 0; k < n; k++) {
		const struct tpf_ktensor *t = ins[k];
		int64_t stride = 1;
		b->off[k] = 0;
		if (t->rank > out->rank)
			return -1;
		for (int d = out->rank - 1; d >= 0; d--) {
			int td = d - (out->rank - t->rank);
			if (td < 0) {
				b->strides[k][d] = 0;
				continue;
			}
			int64_t dim = t->dims[td];
			if (dim == out->dims[d]) {
				b->strides[k][d] = dim == 1 ? 0 : stride;
			} else if (dim == 1) {
				b->strides[k][d] = 0;
			} else {
				return -1;
			}
			stride *= dim;
		}
	}
	return 0;
}

void tpf_bcast_next(struct tpf_bcast *b)
{
	for (int d = b->rank - 1; d >= 0; d--) {
		b->idx[d]++;
		for (int k = 0; k < b->n; k++)
			b->off[k] += b->strides[k][d];
		if (b->idx[d] < b->dims[d])
			return;
		for (int k = 0; k < b->n; k++)
			b->off[k] -= b->strides[k][d] * b->dims[d];
		b->idx[d] = 0;
	}
}

int tpf_norm_axis(int64_t axis, int rank)
{
	if (axis < 0)
		axis += rank;
	if (axis < 0 || axis >= rank)
		return -1;
	return (int)axis;
}

int64_t tpf_dims_prod(const int64_t *dims, int from, int to)
{
	int64_t p = 1;
	for (int i = from; i < to; i++)
		p *= dims[i];
	return p;
}

int tpf_kread_ints(const struct tpf_ktensor *t, int64_t *vals, int max)
{
	if (!t || !t->host || !tpf_dtype_is_integral(t->dtype) || t->numel > max)
		return -1;
	for (int64_t i = 0; i < t->numel; i++)
		vals[i] = tpf_elem_load_int(t->dtype, t->host, i);
	return (int)t->numel;
}

size_t tpf_elem_size(enum tpf_dtype t)
{
	unsigned bits = tpf_dtype_bits(t);
	return bits >= 8 ? bits / 8 : 0;
}

int tpf_ktensor_finish(struct tpf_ktensor *t)
{
	int64_t n = 1;
	if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK)
		return -1;
	for (int i = 0; i < t->rank; i++) {
		if (t->dims[i] < 0)
			return -1;
		if (t->dims[i] != 0 && n > INT64_MAX / t->dims[i])
			return -1;
		n *= t->dims[i];
	}
	t->numel = n;
	if (t->dtype == TPF_DTYPE_STRING || tpf_dtype_storage_bytes(t->dtype, (uint64_t)n, &t->nbytes))
		return -1;
	return 0;
}

const char *tpf_backend_name(enum tpf_backend b)
{
	switch (b) {
	case TPF_BACKEND_CPU:
		return "cpu";
	case TPF_BACKEND_CUDA:
		return "cuda";
	default:
		return "?";
	}
}

int tpf_backend_from_name(const char *name, enum tpf_backend *out)
{
	for (int b = 0; b < TPF_BACKEND_COUNT; b++) {
		if (strcmp(name, tpf_backend_name((enum tpf_backend)b)) == 0) {
			*out = (enum tpf_backend)b;
			return 0;
		}
	}
	return -1;
}

const char *tpf_kernel_phase_name(enum tpf_kernel_phase p)
{
	static const char *const names[TPF_PHASE_COUNT] = {
		[TPF_PHASE_MAIN] = "main",
		[TPF_PHASE_POST_REDUCE] = "post-reduce",
		[TPF_PHASE_SUMSQ] = "sumsq",
		[TPF_PHASE_NORMALIZE] = "normalize",
		[TPF_PHASE_GATHER_REORDER] = "gather-reorder",
		[TPF_PHASE_MATMUL_TILED] = "matmul-tiled",
		[TPF_PHASE_PRODUCT] = "product",
	};
	return (unsigned)p < TPF_PHASE_COUNT ? names[p] : "?";
}

/* ------------------------------------------------------------ attributes */

int tpf_reduce_axes(const struct tpf_kernel_call *c, int rank, int *red, int *noop)
{
	int64_t axes[TPF_KERNEL_MAX_RANK];
	int n = 0;
	const struct tpf_attr *aa = tpf_node_attr(c->node, "axes");
	if (noop)
		*noop = 0;
	if (c->n_in > 1 && c->in[1].data) {
		n = tpf_kread_ints(&c->in[1], axes, TPF_KERNEL_MAX_RANK);
		if (n < 0)
			return -1;
	} else if (aa) {
		if (aa->kind != TPF_ATTR_INTS || aa->n > TPF_KERNEL_MAX_RANK)
			return -1;
		for (size_t i = 0; i < aa->n; i++)
			axes[i] = aa->ints[i];
		n = (int)aa->n;
	}
	for (int d = 0; d < rank; d++)
		red[d] = n == 0;
	if (n == 0 && tpf_node_attr_int(c->node, "noop_with_empty_axes", 0)) {
		if (noop)
			*noop = 1;
		for (int d = 0; d < rank; d++)
			red[d] = 0;
		return 0;
	}
	for (int i = 0; i < n; i++) {
		int ax = tpf_norm_axis(axes[i], rank);
		if (ax < 0)
			return -1;
		red[ax] = 1;
	}
	return n;
}

int tpf_softmax_view(const struct tpf_kernel_call *c, const struct tpf_ktensor *x, int64_t *outer,
		     int64_t *len, int64_t *inner)
{
	if (c->opset >= 13) {
		int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", -1), x->rank);
		if (ax < 0)
			return -1;
		*outer = tpf_dims_prod(x->dims, 0, ax);
		*len = x->dims[ax];
		*inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
		return 0;
	}
	int64_t a = tpf_node_attr_int(c->node, "axis", 1);
	int ax = a == x->rank ? x->rank : tpf_norm_axis(a, x->rank);
	if (ax < 0)
		return -1;
	*outer = tpf_dims_prod(x->dims, 0, ax);
	*len = tpf_dims_prod(x->dims, ax, x->rank);
	*inner = 1;
	return 0;
}

enum tpf_status tpf_transpose_perm(const struct tpf_kernel_call *c, int rank, int *perm)
{
	const struct tpf_attr *pa = tpf_node_attr(c->node, "perm");
	if (pa && (pa->kind != TPF_ATTR_INTS || pa->n != (size_t)rank))
		return tpf_kfail(c, TPF_ERR_INVALID, "perm has %zu entries for rank %d", pa->n, rank);
	unsigned seen = 0;
	for (int i = 0; i < rank; i++) {
		perm[i] = pa ? tpf_norm_axis(pa->ints[i], rank) : rank - 1 - i;
		if (perm[i] < 0 || (seen >> perm[i]) & 1)
			return tpf_kfail(c, TPF_ERR_INVALID, "perm entry out of range or repeated");
		seen |= 1u << perm[i];
	}
	return TPF_OK;
}

enum tpf_status tpf_gemm_attrs(const struct tpf_kernel_call *c, struct tpf_gemm_attrs *g)
{
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
	if (a->rank != 2 || b->rank != 2 || y->rank != 2)
		return tpf_kfail(c, TPF_ERR_INVALID, "A, B and Y must be 2-D");
	g->trans_a = tpf_node_attr_int(c->node, "transA", 0) != 0;
	g->trans_b = tpf_node_attr_int(c->node, "transB", 0) != 0;
	g->alpha = tpf_node_attr_float(c->node, "alpha", 1.0f);
	g->beta = tpf_node_attr_float(c->node, "beta", 1.0f);
	g->m = g->trans_a ? a->dims[1] : a->dims[0];
	g->k = g->trans_a ? a->dims[0] : a->dims[1];
	int64_t kb = g->trans_b ? b->dims[1] : b->dims[0];
	g->n = g->trans_b ? b->dims[0] : b->dims[1];
	if (g->k != kb || y->dims[0] != g->m || y->dims[1] != g->n)
		return tpf_kfail(c, TPF_ERR_INVALID, "shapes do not agree (M=%lld K=%lld/%lld N=%lld)",
				 (long long)g->m, (long long)g->k, (long long)kb, (long long)g->n);
	return TPF_OK;
}

void tpf_attention_attrs(const struct tpf_kernel_call *c, int64_t head_dim,
			 struct tpf_attention_attrs *a)
{
	a->scale = tpf_node_attr_float(c->node, "scale", 0.0f);
	if (a->scale == 0.0f)
		a->scale = 1.0f / sqrtf((float)head_dim);
	a->causal = tpf_node_attr_int(c->node, "is_causal", 0) != 0;
	a->softcap = tpf_node_attr_float(c->node, "softcap", 0.0f);
}

int tpf_norm_attrs(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
		   struct tpf_norm_attrs *a)
{
	enum tpf_op op = c->node->op;
	int skip = op == TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION;
	memset(a, 0, sizeof(*a));
	a->epsilon = tpf_node_attr_float(c->node, "epsilon", skip ? 1e-12f : 1e-5f);
	a->weight_offset = tpf_node_attr_float(c->node, "weight_offset", 0.0f);
	a->axis = tpf_norm_axis(skip ? -1 : tpf_node_attr_int(c->node, "axis", -1), x->rank);
	if (op == TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT) {
		a->quant_name = tpf_node_attr_string(c->node, "quant", "fp8");
		a->quant = !strcmp(a->quant_name, "fp8")	   ? TPF_NORM_QUANT_FP8
			   : !strcmp(a->quant_name, "nvfp4")	   ? TPF_NORM_QUANT_NVFP4
			   : !strcmp(a->quant_name, "nvfp4-block") ? TPF_NORM_QUANT_NVFP4_BLOCK
			   : !strcmp(a->quant_name, "fp8-group")   ? TPF_NORM_QUANT_FP8_GROUP
								   : TPF_NORM_QUANT_OTHER;
		a->block_size = tpf_node_attr_int(c->node, "block_size", a->quant == TPF_NORM_QUANT_FP8_GROUP ? 128 : 16);
	}
	if (a->axis < 0)
		return -1;
	a->rows = tpf_dims_prod(x->dims, 0, a->axis);
	a->cols = tpf_dims_prod(x->dims, a->axis, x->rank);
	return 0;
}

int64_t tpf_sharded_full_dim(const struct tpf_kernel_call *c, size_t i, int64_t local)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, "full_dims");
	if (a && a->kind == TPF_ATTR_INTS && i < a->n)
		return a->ints[i];
	int64_t fs = tpf_node_attr_int(c->node, "full_dim", 0);
	if (fs > 0)
		return fs;
	return local * (c->world > 0 ? c->world : 1);
}

float tpf_sharded_epsilon(const struct tpf_kernel_call *c, size_t i)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, "epsilons");
	if (a && a->kind == TPF_ATTR_FLOATS && i < a->n)
		return a->floats[i];
	return tpf_node_attr_float(c->node, "epsilon", 1e-5f);
}

int tpf_sharded_part(const struct tpf_kernel_call *c, size_t i, int64_t *start, int64_t *end)
{
	const struct tpf_attr *as = tpf_node_attr(c->node, "part_starts");
	const struct tpf_attr *ae = tpf_node_attr(c->node, "part_ends");
	if (!as || !ae || as->kind != TPF_ATTR_INTS || ae->kind != TPF_ATTR_INTS || i >= as->n ||
	    i >= ae->n)
		return -1;
	*start = as->ints[i];
	*end = ae->ints[i];
	return 0;
}

int tpf_sharded_parts_own(const struct tpf_kernel_call *c, size_t n)
{
	for (size_t p = 0; p < n; p++) {
		const struct tpf_ktensor *x = &c->in[p];
		int64_t d = x->rank ? x->dims[x->rank - 1] : 1, s, e;
		if (tpf_sharded_part(c, p, &s, &e) || s != (int64_t)c->rank * d || e - s != d)
			return 0;
	}
	return 1;
}

enum tpf_status tpf_sharded_tokens(const struct tpf_kernel_call *c, size_t p, int64_t *rows,
				   int64_t *cols)
{
	const struct tpf_ktensor *x = &c->in[p];
	int64_t d = x->rank ? x->dims[x->rank - 1] : 1, r = d ? x->numel / d : 0;
	if (*rows >= 0 && r != *rows)
		return tpf_kfail(c, TPF_ERR_INVALID, "inputs have different token counts");
	*rows = r;
	*cols = d;
	return TPF_OK;
}

enum tpf_status tpf_sharded_gathered_part(const struct tpf_kernel_call *c, size_t p, int world,
					  struct tpf_sharded_gathered *gp)
{
	const struct tpf_ktensor *g = &c->in[p], *y = &c->out[p];
	if (tpf_sharded_part(c, p, &gp->start, &gp->end))
		return tpf_kfail(c, TPF_ERR_INVALID, "no part_starts/part_ends entry for tensor %zu", p);
	gp->w = gp->end - gp->start;
	gp->rows = gp->w > 0 ? y->numel / gp->w : 0;
	gp->d = gp->rows > 0 ? g->numel / ((int64_t)world * gp->rows) : 0;
	gp->full = gp->d * world;
	return TPF_OK;
}

int tpf_qmap_init(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
		  const struct tpf_ktensor *s, struct tpf_qmap *m)
{
	int64_t block = tpf_node_attr_int(c->node, "block_size", 0);
	memset(m, 0, sizeof(*m));
	if (s->numel == 1 && block <= 0)
		return 0;
	int ax = tpf_norm_axis(tpf_node_attr_int(c->node, "axis", 1), x->rank);
	if (ax < 0)
		return -1;
	m->dim = x->dims[ax];
	m->inner = tpf_dims_prod(x->dims, ax + 1, x->rank);
	if (block <= 0) {
		if (s->rank != 1 || s->numel != m->dim)
			return -1;
		m->mode = 1;
		return 0;
	}
	if (s->rank != x->rank)
		return -1;
	m->mode = 2;
	m->block = block;
	m->sdim = s->dims[ax];
	if (m->sdim != (m->dim + block - 1) / block)
		return -1;
	for (int d = 0; d < x->rank; d++)
		if (d != ax && s->dims[d] != x->dims[d])
			return -1;
	return 0;
}

int tpf_scatter_reduction(const struct tpf_kernel_call *c, const char **name)
{
	const char *red = tpf_node_attr_string(c->node, "reduction", "none");
	if (name)
		*name = red;
	return !strcmp(red, "none")  ? TPF_SCATTER_NONE
	       : !strcmp(red, "add") ? TPF_SCATTER_ADD
	       : !strcmp(red, "mul") ? TPF_SCATTER_MUL
	       : !strcmp(red, "max") ? TPF_SCATTER_MAX
	       : !strcmp(red, "min") ? TPF_SCATTER_MIN
				     : -1;
}

/* ------------------------------------------------------------ Conv, Pad */

int tpf_conv_resolve(const struct tpf_kernel_call *c, struct tpf_conv_geom *g)
{
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1];
	const struct tpf_ktensor *y = &c->out[0];
	memset(g, 0, sizeof(*g));
	if (x->rank < 3 || x->rank > TPF_KERNEL_MAX_RANK || w->rank != x->rank || y->rank != x->rank)
		return -1;
	g->sp = x->rank - 2;
	g->group = tpf_node_attr_int(c->node, "group", 1);
	g->n = x->dims[0];
	g->c = x->dims[1];
	g->m = w->dims[0];
	if (g->group < 1 || g->m % g->group || w->dims[1] * g->group != g->c || y->dims[1] != g->m ||
	    y->dims[0] != g->n)
		return -1;
	const char *auto_pad = tpf_node_attr_string(c->node, "auto_pad", "NOTSET");
	const struct tpf_attr *ks = tpf_node_attr(c->node, "kernel_shape");
	const struct tpf_attr *pads = tpf_node_attr(c->node, "pads");
	const struct tpf_attr *st = tpf_node_attr(c->node, "strides");
	const struct tpf_attr *dl = tpf_node_attr(c->node, "dilations");
	if ((ks && ks->n != (size_t)g->sp) || (pads && pads->n != 2 * (size_t)g->sp) ||
	    (st && st->n != (size_t)g->sp) || (dl && dl->n != (size_t)g->sp))
		return -1;
	for (int i = 0; i < g->sp; i++) {
		g->in[i] = x->dims[2 + i];
		g->k[i] = w->dims[2 + i];
		if (ks && ks->ints[i] != g->k[i])
			return -1;
		g->stride[i] = st ? st->ints[i] : 1;
		g->dil[i] = dl ? dl->ints[i] : 1;
		g->out[i] = y->dims[2 + i];
		if (g->stride[i] < 1 || g->dil[i] < 1 || g->k[i] < 1)
			return -1;
		int64_t span = g->dil[i] * (g->k[i] - 1) + 1;
		if (!strcmp(auto_pad, "SAME_UPPER") || !strcmp(auto_pad, "SAME_LOWER")) {
			int64_t o = (g->in[i] + g->stride[i] - 1) / g->stride[i];
			int64_t total = (o - 1) * g->stride[i] + span - g->in[i];
			total = total < 0 ? 0 : total;
			g->pad[i] = !strcmp(auto_pad, "SAME_UPPER") ? total / 2 : total - total / 2;
		} else if (!strcmp(auto_pad, "VALID")) {
			g->pad[i] = 0;
		} else {
			g->pad[i] = pads ? pads->ints[i] : 0;
		}
		if (g->pad[i] < 0)
			return -1;
	}
	return 0;
}

int tpf_pad_resolve(const struct tpf_kernel_call *c, int64_t *begin, int *mode)
{
	const struct tpf_ktensor *x = &c->in[0], *y = &c->out[0];
	int64_t pads[2 * TPF_KERNEL_MAX_RANK], axes[TPF_KERNEL_MAX_RANK];
	int np, na = x->rank;
	const char *m = tpf_node_attr_string(c->node, "mode", "constant");
	*mode = !strcmp(m, "constant") ? 0 : !strcmp(m, "edge") ? 1 : !strcmp(m, "reflect") ? 2
		: !strcmp(m, "wrap") ? 3 : -1;
	if (*mode < 0 || y->rank != x->rank)
		return -1;
	const struct tpf_attr *pa = tpf_node_attr(c->node, "pads");
	if (pa && c->n_in < 2) {
		if (pa->n > 2 * TPF_KERNEL_MAX_RANK)
			return -1;
		np = (int)pa->n;
		for (int i = 0; i < np; i++)
			pads[i] = pa->ints[i];
	} else {
		np = c->n_in > 1 ? tpf_kread_ints(&c->in[1], pads, 2 * TPF_KERNEL_MAX_RANK) : -1;
	}
	for (int i = 0; i < na; i++)
		axes[i] = i;
	if (c->n_in > 3 && c->in[3].rank >= 0 && (c->in[3].host || c->in[3].data)) {
		na = tpf_kread_ints(&c->in[3], axes, TPF_KERNEL_MAX_RANK);
		if (na < 0)
			return -1;
	}
	if (np < 0 || np != 2 * na)
		return -1;
	for (int d = 0; d < x->rank; d++)
		begin[d] = 0;
	for (int i = 0; i < na; i++) {
		int a = tpf_norm_axis(axes[i], x->rank);
		if (a < 0)
			return -1;
		begin[a] = pads[i];
		if (x->dims[a] + pads[i] + pads[na + i] != y->dims[a])
			return -1;
	}
	for (int d = 0; d < x->rank; d++)
		if (y->dims[d] && !x->dims[d] && *mode)
			return -1; /* edge, reflect, wrap of an empty axis */
	return 0;
}

/* ------------------------------------------------------------ packed weights */

enum tpf_status tpf_tiled_geom(const struct tpf_kernel_call *c, int gated, struct tpf_tiled_geom *g)
{
	const char *what = gated ? "gate/up weight" : "weight";
	if (c->n_in != 2 || c->n_out != 1 || c->in[1].rank != 3 || c->in[0].rank < 1 || c->out[0].rank < 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects A, a %s packed as [tiles, K, 16 or 32] and one output",
				 what);
	const struct tpf_ktensor *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
	const int64_t T = b->dims[0], K = b->dims[1], TW = b->dims[2], out = y->dims[y->rank - 1];
	const int64_t per = gated ? TW / 2 : TW; /* output columns a tile holds */
	if ((TW != 16 && TW != 32) || a->dims[a->rank - 1] != K || (gated && out % per) ||
	    (out + per - 1) / per != T || a->dtype != b->dtype || y->dtype != a->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID,
				 "packed %s [%lld, %lld, %lld] does not fit A [..., %lld] and output [..., %lld]", what,
				 (long long)T, (long long)K, (long long)TW, (long long)a->dims[a->rank - 1],
				 (long long)out);
	const int64_t rows = K ? a->numel / K : 0;
	if (rows * out != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output has %lld elements, expected %lld", (long long)y->numel,
				 (long long)(rows * out));
	g->rows = rows;
	g->K = K;
	g->N = gated ? 2 * out : out;
	g->tw = TW;
	return TPF_OK;
}

size_t tpf_gemv_packed_bytes(int64_t K, int64_t N, int tw, size_t es)
{
	return (size_t)((N + tw - 1) / tw) * (size_t)K * (size_t)tw * es;
}

void tpf_gemv_pack(const void *w, void *packed, int64_t K, int64_t N, int tw, size_t es)
{
	const char *src = w;
	char *dst = packed;
	/* row by row: W is read in order (weights are large, often mapped) */
	for (int64_t k = 0; k < K; k++)
		for (int64_t t = 0; t * tw < N; t++) {
			size_t cols = (size_t)(N - t * tw < tw ? N - t * tw : tw);
			char *d = dst + ((size_t)t * (size_t)K + (size_t)k) * (size_t)tw * es;
			memcpy(d, src + ((size_t)k * (size_t)N + (size_t)t * (size_t)tw) * es, cols * es);
			if (cols < (size_t)tw)
				memset(d + cols * es, 0, ((size_t)tw - cols) * es);
		}
}

void tpf_gemv_unpack(const void *packed, void *w, int64_t K, int64_t N, int tw, size_t es)
{
	const char *src = packed;
	char *dst = w;
	for (int64_t t = 0; t * tw < N; t++) {
		size_t cols = (size_t)(N - t * tw < tw ? N - t * tw : tw);
		for (int64_t k = 0; k < K; k++)
			memcpy(dst + ((size_t)k * (size_t)N + (size_t)t * (size_t)tw) * es,
			       src + ((size_t)t * (size_t)K + (size_t)k) * (size_t)tw * es, cols * es);
	}
}

void tpf_gemv_pack_gated(const void *w, void *packed, int64_t K, int64_t F, int tw, size_t es)
{
	const char *src = w;
	char *dst = packed;
	const size_t h = (size_t)tw / 2;
	for (int64_t k = 0; k < K; k++)
		for (int64_t t = 0; t * (int64_t)h < F; t++) {
			char *d = dst + ((size_t)t * (size_t)K + (size_t)k) * (size_t)tw * es;
			const char *row = src + (size_t)k * 2 * (size_t)F * es;
			memcpy(d, row + (size_t)t * h * es, h * es);
			memcpy(d + h * es, row + ((size_t)F + (size_t)t * h) * es, h * es);
		}
}

void tpf_gemv_unpack_gated(const void *packed, void *w, int64_t K, int64_t F, int tw, size_t es)
{
	const char *src = packed;
	char *dst = w;
	const size_t h = (size_t)tw / 2;
	for (int64_t t = 0; t * (int64_t)h < F; t++)
		for (int64_t k = 0; k < K; k++) {
			const char *d = src + ((size_t)t * (size_t)K + (size_t)k) * (size_t)tw * es;
			char *row = dst + (size_t)k * 2 * (size_t)F * es;
			memcpy(row + (size_t)t * h * es, d, h * es);
			memcpy(row + ((size_t)F + (size_t)t * h) * es, d + h * es, h * es);
		}
}

/* ------------------------------------------------------------ Einsum */

/* The equation over the inputs' ranks and the size of every label
 * (size-1 dims broadcast); failures are reported into d. */
static enum tpf_status einsum_sizes(const struct tpf_kernel_call *c, struct tpf_diag *d,
				    struct tpf_einsum *e, int64_t *size)
{
	const char *eq = tpf_node_attr_string(c->node, "equation", NULL);
	int ranks[TPF_EINSUM_MAX_OPERANDS];
	char err[160];

	if (!eq || c->n_in < 1 || c->n_in > TPF_EINSUM_MAX_OPERANDS || c->n_out != 1)
		return tpf_kfail_to(c, d, TPF_ERR_INVALID, "needs an equation and 1 to %d inputs",
				    TPF_EINSUM_MAX_OPERANDS);
	for (size_t i = 0; i < c->n_in; i++)
		ranks[i] = c->in[i].rank;
	if (tpf_einsum_parse(eq, (int)c->n_in, ranks, e, err, sizeof(err)))
		return tpf_kfail_to(c, d, TPF_ERR_INVALID, "equation '%s': %s", eq, err);
	for (int l = 0; l < e->n_labels; l++)
		size[l] = 1;
	for (int i = 0; i < e->n_in; i++)
		for (int k = 0; k < e->rank[i]; k++) {
			int l = e->label[i][k];
			int64_t n = c->in[i].dims[k];
			if (n == 1)
				continue;
			if (size[l] != 1 && size[l] != n)
				return tpf_kfail_to(c, d, TPF_ERR_INVALID,
						    "subscript '%c' is %" PRId64 " in one input and %" PRId64
						    " in input %d",
						    e->name[l], size[l], n, i);
			size[l] = n;
		}
	return TPF_OK;
}

enum tpf_status tpf_einsum_form(const struct tpf_kernel_call *c, struct tpf_diag *d)
{
	struct tpf_einsum e;
	int64_t size[TPF_EINSUM_MAX_LABELS];
	int n = 0;
	enum tpf_status st = einsum_sizes(c, d, &e, size);

	if (st)
		return st;
	for (int l = 0; l < e.n_labels; l++)
		n += size[l] != 1;
	if (n > TPF_EINSUM_LOOPS)
		return tpf_kfail_to(c, d, TPF_ERR_UNSUPPORTED,
				    "the equation has %d subscripts of more than one element; at most %d run",
				    n, TPF_EINSUM_LOOPS);
	return TPF_OK;
}

/* Loop order: the output's labels, then the summed ones by decreasing
 * largest stride; labels of one element are left out. */
static int einsum_loops(const struct tpf_einsum *e, const int64_t *size,
			int64_t (*lstride)[TPF_EINSUM_MAX_LABELS], int *loop, int *n_out)
{
	int n = 0, in_out[TPF_EINSUM_MAX_LABELS] = {0};
	int64_t key[TPF_EINSUM_MAX_LABELS];

	for (int k = 0; k < e->out_rank; k++) {
		in_out[e->out[k]] = 1;
		if (size[e->out[k]] != 1)
			loop[n++] = e->out[k];
	}
	*n_out = n;
	for (int l = 0; l < e->n_labels; l++) {
		if (in_out[l] || size[l] == 1)
			continue;
		key[l] = 0;
		for (int i = 0; i < e->n_in; i++)
			key[l] = lstride[i][l] > key[l] ? lstride[i][l] : key[l];
		int j = n++;
		for (; j > *n_out && key[loop[j - 1]] < key[l]; j--)
			loop[j] = loop[j - 1];
		loop[j] = l;
	}
	return n;
}

enum tpf_status tpf_einsum_plan(const struct tpf_kernel_call *c, struct tpf_einsum_plan *p)
{
	int loop[TPF_EINSUM_MAX_LABELS];
	int64_t size[TPF_EINSUM_MAX_LABELS], lstride[TPF_EINSUM_MAX_OPERANDS][TPF_EINSUM_MAX_LABELS];
	const struct tpf_ktensor *y = &c->out[0];
	struct tpf_einsum e;
	enum tpf_status st = einsum_sizes(c, c->diag, &e, size);

	if (st)
		return st;
	for (int i = 0; i < e.n_in; i++)
		if (c->in[i].dtype != y->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "input %d is not of the output's dtype", i);
	if (y->rank != e.out_rank)
		return tpf_kfail(c, TPF_ERR_INVALID, "the output has rank %d; the equation gives %d",
				 y->rank, e.out_rank);
	for (int k = 0; k < e.out_rank; k++)
		if (y->dims[k] != size[e.out[k]])
			return tpf_kfail(c, TPF_ERR_INVALID,
					 "output dim %d is %" PRId64 "; the equation gives %" PRId64, k,
					 y->dims[k], size[e.out[k]]);
	memset(lstride, 0, sizeof(lstride));
	for (int i = 0; i < e.n_in; i++) {
		int64_t step = 1;
		for (int d = e.rank[i] - 1; d >= 0; d--) {
			if (c->in[i].dims[d] != 1)
				lstride[i][e.label[i][d]] += step;
			step *= c->in[i].dims[d];
		}
	}
	int n = einsum_loops(&e, size, lstride, loop, &p->n_out);
	if (n > TPF_EINSUM_LOOPS)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "the equation has %d loops; at most %d run", n,
				 TPF_EINSUM_LOOPS);
	p->n_in = e.n_in;
	p->n_loops = n;
	p->out_numel = y->numel;
	p->sum_numel = 1;
	for (int k = 0; k < n; k++) {
		p->size[k] = size[loop[k]];
		for (int i = 0; i < e.n_in; i++)
			p->stride[i][k] = lstride[i][loop[k]];
		if (k >= p->n_out)
			p->sum_numel *= p->size[k];
	}
	return TPF_OK;
}
