// SPDX-License-Identifier: MIT
// QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked; 8/16/32
// bit integers, int4/uint4, FP8 E4M3/E5M2, FP4 E2M1) and TensorRT's
// TRT_FP4DynamicQuantize.  x / scale in float32, then round to nearest even
// and saturate (integers) or convert (fp8; fp4 rounded and packed in
// software, low nibble first: Hopper has no e2m1 conversion instruction).
#include "cuda-common.cuh"
#include "quant-ops.h"

#include <string.h>

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

// how element i finds its scale element (kernel-host.h)
typedef struct tpf_qmap QMap;

// tpf_qmap_init, and no scale lookups for an empty tensor
int qmap_init(const struct tpf_kernel_call *c, const struct tpf_ktensor *x, const struct tpf_ktensor *s, QMap *m)
{
	if (tpf_qmap_init(c, x, s, m))
		return -1;
	if (m->mode && (m->dim == 0 || m->inner == 0))
		m->mode = 0;
	return 0;
}

struct QArgs {
	int dx, ds, dz, dy, is_int, sat;
	const void *x, *s, *zp;
	void *y;
	double lo, hi;
	int64_t n;
	QMap m;
};

// The quantized value of element i: integer code (is_int) or float value.
__device__ __forceinline__ double quant_value(const QArgs &a, int64_t i)
{
	int64_t si = tpf_qmap_index(&a.m, i);
	float sc = ld_f(a.ds, a.s, si);
	float v = ld_f(a.dx, a.x, i) / sc;
	if (a.is_int) {
		double r = rint((double)v);
		if (a.zp)
			r += (double)ld_i(a.dz, a.zp, si);
		if (isnan(r))
			r = 0;
		return r < a.lo ? a.lo : r > a.hi ? a.hi : r;
	}
	double r = v;
	if (a.zp)
		r += ld_d(a.dz, a.zp, si);
	return r;
}

__global__ void quantize_kernel(QArgs a)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
		double r = quant_value(a, i);
		if (a.is_int)
			st_i(a.dy, a.y, i, (int64_t)r);
		else
			st_d(a.dy, a.y, i, r, a.sat);
	}
}

// Sub-byte outputs (int4, uint4, fp4): one thread per byte.
__global__ void quantize4_kernel(QArgs a)
{
	int64_t nb = (a.n + 1) / 2;
	for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nb; b += (int64_t)gridDim.x * blockDim.x) {
		unsigned code[2] = {0, 0};
		for (int u = 0; u < 2; u++) {
			int64_t i = 2 * b + u;
			if (i >= a.n)
				break;
			double r = quant_value(a, i);
			code[u] = a.is_int ? ((unsigned)(int64_t)r & 0xf) : f_to_e2m1((float)r);
		}
		((uint8_t *)a.y)[b] = (uint8_t)(code[0] | (code[1] << 4));
	}
}

__global__ void dequantize_kernel(QArgs a)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.n; i += (int64_t)gridDim.x * blockDim.x) {
		int64_t si = tpf_qmap_index(&a.m, i);
		float sc = ld_f(a.ds, a.s, si);
		float v;
		if (a.is_int) {
			int64_t q = ld_i(a.dx, a.x, i);
			if (a.zp)
				q -= ld_i(a.dz, a.zp, si);
			v = (float)q * sc;
		} else {
			float q = ld_f(a.dx, a.x, i);
			if (a.zp)
				q -= ld_f(a.dz, a.zp, si);
			v = q * sc;
		}
		st_f(a.dy, a.y, i, v);
	}
}

// One thread per block of `block` elements along the last axis.
__global__ void fp4_dynamic_kernel(int dx, const void *x, int dg, const void *gs, uint8_t *y, int dsc, void *sc,
				   int64_t nblocks, int64_t block)
{
	float g = ld_f(dg, gs, 0);
	for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nblocks;
	     b += (int64_t)gridDim.x * blockDim.x) {
		float amax = 0;
		for (int64_t k = 0; k < block; k++)
			amax = fmaxf(amax, fabsf(ld_f(dx, x, b * block + k)));
		st_f(dsc, sc, b, amax / 6.0f / g);
		float sb = ld_f(dsc, sc, b) * g;
		for (int64_t k = 0; k < block; k += 2) {
			float v0 = ld_f(dx, x, b * block + k), v1 = ld_f(dx, x, b * block + k + 1);
			unsigned lo = f_to_e2m1(sb != 0 ? v0 / sb : 0.f), hi = f_to_e2m1(sb != 0 ? v1 / sb : 0.f);
			y[(b * block + k) / 2] = (uint8_t)(lo | (hi << 4));
		}
	}
}

bool sub_byte(enum tpf_dtype t)
{
	return t == TPF_DTYPE_INT4 || t == TPF_DTYPE_UINT4 || t == TPF_DTYPE_FLOAT4E2M1;
}

bool loadable(enum tpf_dtype t)
{
	return tpfc_float_ok(t) || tpfc_int_ok(t) || sub_byte(t);
}

// The zero point (*zp, NULL when absent) of QuantizeLinear /
// DequantizeLinear and the scale map of a cleared *a; it fails when the
// scale and zero point do not fit x.
enum tpf_status qdq_begin(const struct tpf_kernel_call *c, QArgs *a, const struct tpf_ktensor **zp)
{
	*zp = c->n_in > 2 && c->in[2].data ? &c->in[2] : NULL;
	memset(a, 0, sizeof(*a));
	if (qmap_init(c, &c->in[0], &c->in[1], &a->m) || (*zp && (*zp)->numel != c->in[1].numel))
		return tpf_kfail(c, TPF_ERR_INVALID, "scale/zero point shape does not fit x (axis, block_size)");
	return TPF_OK;
}

// The dtypes, data and element count of x, scale, zero point and y in *a.
void qdq_fill(const struct tpf_kernel_call *c, const struct tpf_ktensor *zp, QArgs *a)
{
	a->dx = c->in[0].dtype;
	a->ds = c->in[1].dtype;
	a->dz = zp ? zp->dtype : 0;
	a->dy = c->out[0].dtype;
	a->x = c->in[0].data;
	a->s = c->in[1].data;
	a->zp = zp ? zp->data : NULL;
	a->y = c->out[0].data;
	a->n = c->in[0].numel;
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_quantize_linear)
{
	const struct tpf_ktensor *x = &c->in[0], *s = &c->in[1], *y = &c->out[0], *zp;
	QArgs a;
	if (enum tpf_status st = qdq_begin(c, &a, &zp))
		return st;
	if (zp && zp->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "zero point dtype %s differs from output %s", tpf_dtype_name(zp->dtype),
				 tpf_dtype_name(y->dtype));
	// 2-bit outputs have no CUDA store
	a.is_int = (tpfc_int_ok(y->dtype) || sub_byte(y->dtype)) && tpf_quant_int_range(y->dtype, &a.lo, &a.hi) == 0;
	bool out_ok = a.is_int || y->dtype == TPF_DTYPE_FLOAT4E2M1 || tpfc_float_ok(y->dtype);
	if (!out_ok || !tpfc_float_ok(x->dtype) || !tpfc_float_ok(s->dtype) || (zp && !loadable(zp->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "quantize %s -> %s not supported on cuda", tpf_dtype_name(x->dtype),
				 tpf_dtype_name(y->dtype));
	qdq_fill(c, zp, &a);
	a.sat = (int)tpf_node_attr_int(c->node, "saturate", 1);
	if (!a.n)
		return TPF_OK;
	if (sub_byte(y->dtype))
		quantize4_kernel<<<tpfc_blocks((a.n + 1) / 2, kThreads), kThreads, 0, tpfc_stream(c)>>>(a);
	else
		quantize_kernel<<<tpfc_blocks(a.n, kThreads), kThreads, 0, tpfc_stream(c)>>>(a);
	return tpfc_launched(c, "quantize");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_dequantize_linear)
{
	const struct tpf_ktensor *x = &c->in[0], *s = &c->in[1], *y = &c->out[0], *zp;
	QArgs a;
	if (enum tpf_status st = qdq_begin(c, &a, &zp))
		return st;
	if (!loadable(x->dtype) || !tpfc_float_ok(s->dtype) || !tpfc_float_ok(y->dtype) || (zp && !loadable(zp->dtype)))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dequantize %s -> %s not supported on cuda",
				 tpf_dtype_name(x->dtype), tpf_dtype_name(y->dtype));
	a.is_int = tpf_dtype_is_integral(x->dtype);
	qdq_fill(c, zp, &a);
	if (!a.n)
		return TPF_OK;
	dequantize_kernel<<<tpfc_blocks(a.n, kThreads), kThreads, 0, tpfc_stream(c)>>>(a);
	return tpfc_launched(c, "dequantize");
}

extern "C" TPF_CUDA_KERNEL(tpf_cu_fp4_dynamic_quantize)
{
	const struct tpf_ktensor *x = &c->in[0], *gs = &c->in[1];
	struct tpf_ktensor *y = &c->out[0], *sc = &c->out[1];
	int64_t block = tpf_node_attr_int(c->node, "block_size", 16);
	if (x->rank < 1 || block <= 0 || x->dims[x->rank - 1] % block)
		return tpf_kfail(c, TPF_ERR_INVALID, "last dim must be a multiple of block_size %lld", (long long)block);
	if (sc->numel * block != x->numel || y->numel != x->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output shapes disagree with x");
	if (block % 2 || y->dtype != TPF_DTYPE_FLOAT4E2M1 || !tpfc_float_ok(sc->dtype) || !tpfc_float_ok(x->dtype) ||
	    !tpfc_float_ok(gs->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "fp4 quantize of %s (block %lld) not supported on cuda",
				 tpf_dtype_name(x->dtype), (long long)block);
	if (!sc->numel)
		return TPF_OK;
	fp4_dynamic_kernel<<<tpfc_blocks(sc->numel, 128), 128, 0, tpfc_stream(c)>>>(
		x->dtype, x->data, gs->dtype, gs->data, (uint8_t *)y->data, sc->dtype, sc->data, sc->numel, block);
	return tpfc_launched(c, "fp4 quantize");
}
