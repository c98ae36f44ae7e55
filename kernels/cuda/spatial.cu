// SPDX-License-Identifier: MIT
// Spatial ops on the GPU: Conv (direct convolution, one thread per output
// element, the sum in the CPU reference's order: float32, double for
// DOUBLE) and Pad (one thread per output element; the constant read on the
// device when it is an input).  Geometry and pads come from the host code
// both backends share (kernel-host.h).
#include "cuda-common.cuh"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

struct ConvArgs {
	int sp, dt, has_b;
	int64_t c, m, group;
	int64_t in[kMaxRank], k[kMaxRank], out[kMaxRank];
	int64_t pad[kMaxRank], stride[kMaxRank], dil[kMaxRank];
	int64_t in_sp, out_sp, k_sp;
};

__global__ void conv_kernel(ConvArgs a, const void *x, const void *w, const void *b, void *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t o = i % a.out_sp, t = i / a.out_sp, m = t % a.m, nb = t / a.m;
		int64_t cg = a.c / a.group, mg = a.m / a.group, grp = m / mg;
		int64_t opos[kMaxRank];
		tpf_unravel(o, a.out, a.sp, opos);
		float facc = 0;
		double dacc = 0;
		bool dbl = a.dt == TPF_DTYPE_DOUBLE;
		for (int64_t ci = 0; ci < cg; ci++) {
			int64_t xc = nb * a.c + grp * cg + ci, wc = m * cg + ci;
			for (int64_t kk = 0; kk < a.k_sp; kk++) {
				int64_t xoff = tpf_conv_in_offset(a.sp, opos, kk, a.k, a.in, a.stride, a.pad, a.dil);
				if (xoff < 0)
					continue;
				if (dbl) {
					dacc += ld_d(a.dt, x, xc * a.in_sp + xoff) * ld_d(a.dt, w, wc * a.k_sp + kk);
				} else {
					// no contraction into an FMA: the CPU rounds the product first
					facc = __fadd_rn(facc, __fmul_rn(ld_f(a.dt, x, xc * a.in_sp + xoff),
									 ld_f(a.dt, w, wc * a.k_sp + kk)));
				}
			}
		}
		if (a.has_b) {
			if (dbl)
				dacc += ld_d(a.dt, b, m);
			else
				facc = __fadd_rn(facc, ld_f(a.dt, b, m));
		}
		if (dbl)
			st_d(a.dt, y, i, dacc);
		else
			st_f(a.dt, y, i, facc);
	}
}

struct PadArgs {
	int rank, mode, es;
	int64_t xdims[kMaxRank], ydims[kMaxRank], begin[kMaxRank];
	uint64_t cbits; // the constant when it is not a device operand
};

__global__ void pad_kernel(PadArgs a, const void *x, const void *cval, void *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t rem = i, src = 0, mul = 1;
		bool inside = true;
		for (int d = a.rank - 1; d >= 0; d--) {
			int64_t o = rem % a.ydims[d];
			rem /= a.ydims[d];
			int64_t s = tpf_pad_source(o, a.begin[d], a.xdims[d], a.mode);
			if (s < 0)
				inside = false;
			src += s * mul;
			mul *= a.xdims[d];
		}
		if (inside)
			tpf_copy_elem(y, i, x, src, a.es);
		else if (cval)
			tpf_copy_elem(y, i, cval, 0, a.es);
		else
			tpf_copy_elem(y, i, &a.cbits, 0, a.es);
	}
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_conv)
{
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1], *b;
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_conv_geom g;
	TPF_KTRY(tpf_conv_operands(c, &g, &b));
	if (!tpfc_float_ok(x->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda", tpf_dtype_name(x->dtype));
	if (!y->numel)
		return TPF_OK;
	ConvArgs a;
	memset(&a, 0, sizeof(a));
	a.sp = g.sp;
	a.dt = x->dtype;
	a.has_b = b != NULL;
	a.c = g.c;
	a.m = g.m;
	a.group = g.group;
	for (int d = 0; d < g.sp; d++) {
		a.in[d] = g.in[d];
		a.k[d] = g.k[d];
		a.out[d] = g.out[d];
		a.pad[d] = g.pad[d];
		a.stride[d] = g.stride[d];
		a.dil[d] = g.dil[d];
	}
	a.in_sp = tpf_dims_prod(g.in, 0, g.sp);
	a.out_sp = tpf_dims_prod(g.out, 0, g.sp);
	a.k_sp = tpf_dims_prod(g.k, 0, g.sp);
	conv_kernel<<<tpfc_blocks(y->numel, kThreads), kThreads, 0, tpfc_stream(c)>>>(a, x->data, w->data,
										     b ? b->data : NULL, y->data, y->numel);
	return tpfc_launched(c, "conv");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_pad)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	size_t es = tpf_elem_size(x->dtype);
	if (!es || es > 8)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte or wide)", tpf_dtype_name(x->dtype));
	PadArgs a;
	memset(&a, 0, sizeof(a));
	if (tpf_pad_resolve(c, a.begin, &a.mode))
		return tpf_kfail(c, TPF_ERR_INVALID, "pads, axes, mode or the output shape do not agree");
	const void *cval = NULL;
	if (c->n_in > 2 && c->in[2].rank >= 0 && c->in[2].data) {
		if (c->in[2].dtype != x->dtype || c->in[2].numel != 1)
			return tpf_kfail(c, TPF_ERR_INVALID, "constant_value must be one element of the input's dtype");
		cval = c->in[2].data;
	} else if (c->n_in < 2) {
		tpf_elem_store(x->dtype, &a.cbits, 0, tpf_node_attr_float(c->node, "value", 0), 1);
	}
	if (!y->numel)
		return TPF_OK;
	a.rank = x->rank;
	a.es = (int)es;
	for (int d = 0; d < x->rank; d++) {
		a.xdims[d] = x->dims[d];
		a.ydims[d] = y->dims[d];
	}
	pad_kernel<<<tpfc_blocks(y->numel, kThreads), kThreads, 0, tpfc_stream(c)>>>(a, x->data, cval, y->data, y->numel);
	return tpfc_launched(c, "pad");
}
