// SPDX-License-Identifier: MIT
// ONNX Attention (opset 23) on the GPU, the subset the CPU reference
// supports: 4-D Q [B, Hq, S, D], K/V [B, Hkv, L, D] (grouped query
// attention), optional attn_mask (bool or additive), past_key/past_value in
// front of K/V, is_causal, scale, softcap; present_key/present_value.
// One block per query row; the row's scores live in shared memory, float32.
#include "cuda-common.cuh"
#include "op-geometry.h"

#include <string.h>

using namespace tpfc;

namespace {

struct AttnArgs {
	const void *q, *k, *v, *mask, *pk, *pv;
	void *y, *prk, *prv;
	int dq, dk, dv, dm, dpk, dpv, dy, dprk, dprv;
	int64_t B, Hq, S, D, Hk, L, Dv, P, T;
	int64_t mstride[4];
	float scale, softcap;
	int causal, mask_bool;
};

__device__ __forceinline__ float kv_load(const AttnArgs &a, bool is_k, int64_t b, int64_t h, int64_t j, int64_t d)
{
	int64_t dd = is_k ? a.D : a.Dv;
	if (j < a.P)
		return is_k ? ld_f(a.dpk, a.pk, ((b * a.Hk + h) * a.P + j) * dd + d)
			    : ld_f(a.dpv, a.pv, ((b * a.Hk + h) * a.P + j) * dd + d);
	return is_k ? ld_f(a.dk, a.k, ((b * a.Hk + h) * a.L + j - a.P) * dd + d)
		    : ld_f(a.dv, a.v, ((b * a.Hk + h) * a.L + j - a.P) * dd + d);
}

__global__ void attention_kernel(AttnArgs a)
{
	extern __shared__ float sc[];
	__shared__ float red[33];
	int64_t row = blockIdx.x; // (b, h, s)
	int64_t s = row % a.S, h = (row / a.S) % a.Hq, b = row / (a.S * a.Hq);
	int64_t hk = h / (a.Hq / a.Hk);
	float mx = -INFINITY;
	for (int64_t j = threadIdx.x; j < a.T; j += blockDim.x) {
		float acc = 0;
		for (int64_t d = 0; d < a.D; d++)
			acc += ld_f(a.dq, a.q, ((b * a.Hq + h) * a.S + s) * a.D + d) * kv_load(a, true, b, hk, j, d);
		acc *= a.scale;
		if (a.softcap > 0)
			acc = a.softcap * tanhf(acc / a.softcap);
		if (a.mask) {
			int64_t off = b * a.mstride[0] + h * a.mstride[1] + s * a.mstride[2] + j * a.mstride[3];
			if (a.mask_bool) {
				if (!((const uint8_t *)a.mask)[off])
					acc = -INFINITY;
			} else {
				acc += ld_f(a.dm, a.mask, off);
			}
		}
		if (a.causal && j > s + a.P)
			acc = -INFINITY;
		sc[j] = acc;
		mx = acc > mx ? acc : mx;
	}
	// block max
	for (int o = 16; o > 0; o >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
	if (lane == 0)
		red[warp] = mx;
	__syncthreads();
	if (threadIdx.x == 0) {
		float m = red[0];
		for (int w = 1; w < nw; w++)
			m = fmaxf(m, red[w]);
		red[32] = m;
	}
	__syncthreads();
	mx = red[32];
	__syncthreads();
	float sum = 0;
	for (int64_t j = threadIdx.x; j < a.T; j += blockDim.x) {
		float e = mx == -INFINITY ? 0.f : expf(sc[j] - mx);
		sc[j] = e;
		sum += e;
	}
	for (int o = 16; o > 0; o >>= 1)
		sum += __shfl_xor_sync(0xffffffffu, sum, o);
	if (lane == 0)
		red[warp] = sum;
	__syncthreads();
	if (threadIdx.x == 0) {
		float t = 0;
		for (int w = 0; w < nw; w++)
			t += red[w];
		red[32] = t;
	}
	__syncthreads();
	sum = red[32];
	for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
		float acc = 0;
		for (int64_t j = 0; j < a.T; j++)
			acc += sc[j] * kv_load(a, false, b, hk, j, d);
		st_f(a.dy, a.y, ((b * a.Hq + h) * a.S + s) * a.Dv + d, sum > 0 ? acc / sum : 0.f);
	}
}

__global__ void present_kernel(AttnArgs a)
{
	int64_t nk = a.B * a.Hk * a.T * a.D, nv = a.B * a.Hk * a.T * a.Dv;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nk + nv;
	     i += (int64_t)gridDim.x * blockDim.x) {
		bool is_k = i < nk;
		int64_t r = is_k ? i : i - nk, dd = is_k ? a.D : a.Dv;
		int64_t d = r % dd, j = (r / dd) % a.T, h = (r / (dd * a.T)) % a.Hk, b = r / (dd * a.T * a.Hk);
		if (is_k && a.prk)
			st_f(a.dprk, a.prk, r, kv_load(a, true, b, h, j, d));
		if (!is_k && a.prv)
			st_f(a.dprv, a.prv, r, kv_load(a, false, b, h, j, d));
	}
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_attention)
{
	AttnArgs a;
	struct tpf_attention_ops o;
	enum tpf_status chk = tpf_attention_operands(c, &o);
	if (chk)
		return chk;
	const struct tpf_ktensor *q = o.q, *k = o.k, *v = o.v, *mask = o.mask, *pk = o.pk, *pv = o.pv;
	memset(&a, 0, sizeof(a));
	a.B = o.B, a.Hq = o.Hq, a.S = o.S, a.D = o.D, a.Hk = o.Hk, a.L = o.L, a.Dv = o.Dv, a.P = o.P, a.T = o.T;
	for (size_t i = 0; i < c->n_in; i++)
		if (c->in[i].data && i != 3 && !tpfc_float_ok(c->in[i].dtype))
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda",
					 tpf_dtype_name(c->in[i].dtype));
	if (a.T * (int64_t)sizeof(float) > 200 * 1024)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "%lld keys exceed the shared-memory score row", (long long)a.T);
	struct tpf_attention_attrs at;
	tpf_attention_attrs(c, a.D, &at);
	a.scale = at.scale;
	a.causal = at.causal;
	a.softcap = at.softcap;
	if (mask) {
		struct tpf_ktensor full;
		memset(&full, 0, sizeof(full));
		full.rank = 4;
		full.dims[0] = a.B, full.dims[1] = a.Hq, full.dims[2] = a.S, full.dims[3] = a.T;
		struct tpf_bcast it;
		const struct tpf_ktensor *mv[1] = {mask};
		if (tpf_bcast_init(&it, &full, mv, 1))
			return tpf_kfail(c, TPF_ERR_INVALID, "attn_mask does not broadcast to [B, H, S, T]");
		for (int d = 0; d < 4; d++)
			a.mstride[d] = it.strides[0][d];
		a.mask = mask->data;
		a.dm = mask->dtype;
		a.mask_bool = mask->dtype == TPF_DTYPE_BOOL;
		if (!a.mask_bool && !tpfc_float_ok(mask->dtype))
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "mask dtype %s not supported", tpf_dtype_name(mask->dtype));
	}
	a.q = q->data, a.k = k->data, a.v = v->data;
	a.dq = q->dtype, a.dk = k->dtype, a.dv = v->dtype;
	if (pk) {
		a.pk = pk->data, a.pv = pv->data;
		a.dpk = pk->dtype, a.dpv = pv->dtype;
	}
	a.y = o.y->data;
	a.dy = o.y->dtype;
	if (o.prk) {
		a.prk = o.prk->data;
		a.dprk = o.prk->dtype;
	}
	if (o.prv) {
		a.prv = o.prv->data;
		a.dprv = o.prv->dtype;
	}
	cudaStream_t st = tpfc_stream(c);
	int64_t rows = a.B * a.Hq * a.S;
	if (rows > 0 && a.Dv > 0) {
		size_t shmem = (size_t)(a.T > 0 ? a.T : 1) * sizeof(float);
		if (shmem > 48 * 1024)
			cudaFuncSetAttribute(attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
		if (rows > INT32_MAX)
			return tpf_kfail(c, TPF_ERR_LIMIT, "too many query rows");
		attention_kernel<<<(unsigned)rows, 128, shmem, st>>>(a);
		enum tpf_status e = tpfc_launched(c, "attention");
		if (e)
			return e;
	}
	if (o.prk || o.prv) {
		int64_t n = a.B * a.Hk * a.T * (a.D + a.Dv);
		if (n > 0) {
			present_kernel<<<tpfc_blocks(n, 256), 256, 0, st>>>(a);
			return tpfc_launched(c, "attention present");
		}
	}
	return TPF_OK;
}
