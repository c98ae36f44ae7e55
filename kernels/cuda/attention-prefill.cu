// SPDX-License-Identifier: MIT
// Attention over a prompt (many query rows) with tensor cores, tiled with
// an online softmax: a block takes 64 query rows of one head, each of its 4
// warps 16 of them, and walks the keys in tiles of 64: the scores of a
// tile (WMMA 16x16x16, float accumulators), the mask, causality and
// nonpad_kv_seqlen applied per tile (no [S, T] mask or score matrix in
// memory), the running max and sum per row, then the tile's probabilities
// times its values (WMMA) added to the rescaled output.  Causal blocks stop
// at the tile of their last row's last key.  float16 and bfloat16, head
// sizes 64 and 128 (values of the same size), GQA (query head h reads KV
// head h / (Hq / Hk)), keys from a past and the new keys (or an in-place
// cache with nonpad_kv_seqlen).  The scores round through the operands'
// dtype where the MatMul -> Mul -> Add chain it stands for rounds (as the
// row kernel does); the probabilities enter the value product unnormalized
// in the operands' dtype and the output is divided by the row's sum at the
// end.  On unless TPF_PREFILL_ATTENTION=0 (attention.cu asks
// tpf_cu_attention_prefill first).
#include "cuda-common.cuh"
#include "kernel-host.h"
#include "op-geometry.h"

#include <mma.h>
#include <string.h>

using namespace tpfc;

namespace {

constexpr int kRows = 64;    // query rows of a block
constexpr int kKeys = 64;    // keys of a tile
constexpr int kWarps = 4;    // 16 rows each
constexpr int kThreads = kWarps * 32;

struct PrefillArgs {
	const void *q, *k, *v, *pk, *pv, *mask;
	void *y;
	int dt, dm;
	int64_t B, Hq, Hk, S, D, L, P, T;
	const int64_t *kvlen;
	int64_t mstride[4];
	float scale, softcap;
	int causal, mask_bool;
};

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Key (or value) row j of KV head hk of sequence b: the past's first P,
// then the new keys.
template <typename T>
__device__ __forceinline__ const T *kv_row(const PrefillArgs &a, const void *past, const void *cur, int64_t b,
					   int64_t hk, int64_t j)
{
	if (j < a.P)
		return (const T *)past + ((b * a.Hk + hk) * a.P + j) * a.D;
	return (const T *)cur + ((b * a.Hk + hk) * a.L + (j - a.P)) * a.D;
}

// A tile of kKeys rows of D elements into shared memory, LD elements
// apart (zeros past nkeys).
template <typename T, int D, int LD = D>
__device__ __forceinline__ void load_tile(const PrefillArgs &a, const void *past, const void *cur, T *dst,
					  int64_t b, int64_t hk, int64_t k0, int64_t nkeys)
{
	constexpr int kVec = 8; // elements of 16 bytes
	for (int i = threadIdx.x; i < kKeys * D / kVec; i += kThreads) {
		int r = i / (D / kVec), c = (i % (D / kVec)) * kVec;
		int64_t j = k0 + r;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (j < nkeys)
			v = *(const uint4 *)(kv_row<T>(a, past, cur, b, hk, j) + c);
		*(uint4 *)(dst + r * LD + c) = v;
	}
}

// Declares nkeys, the keys of sequence b (nonpad_kv_seqlen, else all T),
// and last, the end of those a block of query rows from q0 may see
// (causal: its last row's).  A macro: the kernels keep the code generation
// of these statements written in place (an inline function taking them
// changed the tiled kernel's register allocation).
#define TPF_PREFILL_KEY_RANGE(a, b, q0, nkeys, last)                                       \
	int64_t nkeys = (a).T;                                                             \
	if ((a).kvlen) {                                                                   \
		int64_t n_ = (a).kvlen[b];                                                 \
		nkeys = n_ < 0 ? 0 : n_ < (a).T ? n_ : (a).T;                              \
	}                                                                                  \
	int64_t last = nkeys;                                                              \
	if ((a).causal) {                                                                  \
		int64_t qlast_ = (q0) + kRows - 1 < (a).S ? (q0) + kRows - 1 : (a).S - 1;  \
		int64_t lim_ = qlast_ + ((a).kvlen ? nkeys - (a).S : (a).P) + 1;           \
		last = lim_ < last ? (lim_ < 0 ? 0 : lim_) : last;                         \
	}

// The score of query s (head h, sequence b) and key j from the raw dot
// product, rounded as the unfused chain rounds; -inf where dropped.
__device__ __forceinline__ float score_of(const PrefillArgs &a, float acc, int64_t b, int64_t h, int64_t s, int64_t j,
					  int64_t nkeys)
{
	if (j >= nkeys)
		return -INFINITY;
	acc = round_through(a.dt, round_through(a.dt, acc) * a.scale);
	if (a.softcap > 0)
		acc = round_through(a.dt, a.softcap * round_through(a.dt, tanhf(round_through(a.dt, acc / a.softcap))));
	if (a.mask) {
		int64_t off = b * a.mstride[0] + h * a.mstride[1] + s * a.mstride[2] + j * a.mstride[3];
		if (a.mask_bool) {
			if (!((const uint8_t *)a.mask)[off])
				return -INFINITY;
		} else {
			acc = round_through(a.dt, acc + ld_f(a.dm, a.mask, off));
		}
	}
	if (a.causal && j > s + (a.kvlen ? nkeys - a.S : a.P))
		return -INFINITY;
	return acc;
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) prefill_kernel(PrefillArgs a)
{
	using namespace nvcuda;
	extern __shared__ __align__(16) unsigned char smem[];
	T *qs = (T *)smem;                 // [kRows][D]
	T *ks = qs + kRows * D;            // [kKeys][D]
	T *vs = ks + kKeys * D;            // [kKeys][D]
	float *sf = (float *)(vs + kKeys * D); // per warp [16][kKeys] scores, then [16][D] value products
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	float *wsf = sf + warp * 16 * (D > kKeys ? D : kKeys);
	float *wo = sf + kWarps * 16 * (D > kKeys ? D : kKeys) + warp * 16 * D; // [16][D] output
	T *wp = (T *)(sf + kWarps * 16 * (D > kKeys ? D : kKeys) + kWarps * 16 * D) + warp * 16 * kKeys;

	const int64_t bh = blockIdx.y, b = bh / a.Hq, h = bh % a.Hq, hk = h / (a.Hq / a.Hk);
	const int64_t q0 = (int64_t)blockIdx.x * kRows;
	// the keys of this sequence and the end of those any row of this block may see
	TPF_PREFILL_KEY_RANGE(a, b, q0, nkeys, last)
	// the block's queries
	const T *qg = (const T *)a.q + (b * a.Hq + h) * a.S * D;
	for (int i = threadIdx.x; i < kRows * D / 8; i += kThreads) {
		int r = i / (D / 8), c = (i % (D / 8)) * 8;
		uint4 v = make_uint4(0, 0, 0, 0);
		if (q0 + r < a.S)
			v = *(const uint4 *)(qg + (q0 + r) * D + c);
		*(uint4 *)(qs + r * D + c) = v;
	}
	for (int i = lane; i < 16 * D; i += 32)
		wo[i] = 0.f;
	// each row's running max and sum, held by its two lanes
	const int r = lane >> 1, half = lane & 1;
	const int64_t s = q0 + warp * 16 + r;
	float m = -INFINITY, l = 0.f;

	for (int64_t k0 = 0; k0 < last; k0 += kKeys) {
		__syncthreads(); // the previous tile is read
		load_tile<T, D>(a, a.pk, a.k, ks, b, hk, k0, last);
		load_tile<T, D>(a, a.pv, a.v, vs, b, hk, k0, last);
		__syncthreads();
		// scores [16][kKeys] = Q_w K^T
		for (int n = 0; n < kKeys / 16; n++) {
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
			wmma::fill_fragment(acc, 0.f);
			for (int kk = 0; kk < D / 16; kk++) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
				wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
				wmma::load_matrix_sync(fa, qs + warp * 16 * D + kk * 16, D);
				wmma::load_matrix_sync(fb, ks + n * 16 * D + kk * 16, D);
				wmma::mma_sync(acc, fa, fb, acc);
			}
			wmma::store_matrix_sync(wsf + n * 16, acc, kKeys, wmma::mem_row_major);
		}
		__syncwarp();
		// the online softmax: a row's two lanes take half the tile each
		float mx = -INFINITY, sc[kKeys / 2];
#pragma unroll
		for (int c = 0; c < kKeys / 2; c++) {
			int col = half * (kKeys / 2) + c;
			float v = s < a.S && k0 + col < last ? score_of(a, wsf[r * kKeys + col], b, h, s, k0 + col, nkeys)
						      : -INFINITY;
			sc[c] = v;
			mx = fmaxf(mx, v);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		const float mn = fmaxf(m, mx);
		const float alpha = mn == -INFINITY ? 1.f : __expf(m - mn);
		float sum = 0.f;
#pragma unroll
		for (int c = 0; c < kKeys / 2; c++) {
			float p = sc[c] == -INFINITY ? 0.f : __expf(sc[c] - mn);
			T pt = from_f<T>(p);
			wp[r * kKeys + half * (kKeys / 2) + c] = pt;
			sum += to_f<T>(pt);
		}
		sum += __shfl_xor_sync(0xffffffffu, sum, 1);
		l = l * alpha + sum;
		m = mn;
		__syncwarp();
		// this tile's values: [16][D] = P_w V
		for (int n = 0; n < D / 16; n++) {
			wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
			wmma::fill_fragment(acc, 0.f);
			for (int kk = 0; kk < kKeys / 16; kk++) {
				wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
				wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
				wmma::load_matrix_sync(fa, wp + kk * 16, kKeys);
				wmma::load_matrix_sync(fb, vs + kk * 16 * D + n * 16, D);
				wmma::mma_sync(acc, fa, fb, acc);
			}
			wmma::store_matrix_sync(wsf + n * 16, acc, D, wmma::mem_row_major);
		}
		__syncwarp();
		for (int c = half * (D / 2); c < (half + 1) * (D / 2); c++)
			wo[r * D + c] = wo[r * D + c] * alpha + wsf[r * D + c];
		__syncwarp();
	}
	if (s < a.S) {
		T *yg = (T *)a.y + ((b * a.Hq + h) * a.S + s) * D;
		const float inv = l > 0 ? 1.f / l : 0.f;
		for (int c = half * (D / 2); c < (half + 1) * (D / 2); c++)
			yg[c] = from_f<T>(wo[r * D + c] * inv);
	}
}

// ------------------------------------------------------------ flash kernel
// TPF_PREFILL_ATTENTION=2: the same computation with the scores, the
// probabilities and the output in registers (the flash-attention-2
// arrangement on mma.sync m16n8k16).  A block: 4 warps, 16 query rows a
// warp; the keys and values of a 64-key tile in shared memory (rows padded
// by 8 elements against bank conflicts; 35 KB at head 128, so several
// blocks an SM).  A lane (g = lane / 4, c = lane % 4) holds its warp's
// query rows g and g + 8 as the A fragments of the score product, and the
// output columns 2c, 2c + 1 of each 8-column tile of those rows.  The
// score fragments of a tile become, rounded to T, the A fragments of the
// value product (keys 16j..16j+15: the 8-key score tiles 2j and 2j + 1).
// The scores, the mask, causality and nonpad_kv_seqlen and the rounding
// follow score_of as in prefill_kernel; the running max and sum of a row
// are kept by its four lanes alike (shuffles over lanes c).
constexpr int kPad = 8;

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) prefill_flash_kernel(PrefillArgs a)
{
	constexpr int DP = D + kPad;
	constexpr int NK = D / 16;    // k steps of the scores
	constexpr int NO = D / 8;     // 8-column tiles of the output
	constexpr int NS = kKeys / 8; // 8-key tiles of the scores
	extern __shared__ __align__(16) unsigned char smem[];
	T *ks = (T *)smem;     // [kKeys][DP]
	T *vs = ks + kKeys * DP; // [kKeys][DP]
	const unsigned short *vu = (const unsigned short *)vs;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;

	const int64_t bh = blockIdx.y, b = bh / a.Hq, h = bh % a.Hq, hk = h / (a.Hq / a.Hk);
	const int64_t q0 = (int64_t)blockIdx.x * kRows;
	TPF_PREFILL_KEY_RANGE(a, b, q0, nkeys, last)
	// this lane's two query rows and their A fragments
	const int64_t s0 = q0 + warp * 16 + g, s1 = s0 + 8;
	const T *qg = (const T *)a.q + (b * a.Hq + h) * a.S * D;
	uint32_t qf[NK][4];
#pragma unroll
	for (int kk = 0; kk < NK; kk++) {
		const int col = kk * 16 + 2 * c;
		qf[kk][0] = s0 < a.S ? *(const uint32_t *)(qg + s0 * D + col) : 0u;
		qf[kk][1] = s1 < a.S ? *(const uint32_t *)(qg + s1 * D + col) : 0u;
		qf[kk][2] = s0 < a.S ? *(const uint32_t *)(qg + s0 * D + col + 8) : 0u;
		qf[kk][3] = s1 < a.S ? *(const uint32_t *)(qg + s1 * D + col + 8) : 0u;
	}
	float o[NO][4];
#pragma unroll
	for (int n = 0; n < NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

	for (int64_t k0 = 0; k0 < last; k0 += kKeys) {
		__syncthreads(); // the previous tile is read
		load_tile<T, D, D + kPad>(a, a.pk, a.k, ks, b, hk, k0, last);
		load_tile<T, D, D + kPad>(a, a.pv, a.v, vs, b, hk, k0, last);
		__syncthreads();
		float sc[NS][4];
#pragma unroll
		for (int n = 0; n < NS; n++) {
			sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
			const T *krow = ks + (n * 8 + g) * DP + 2 * c;
#pragma unroll
			for (int kk = 0; kk < NK; kk++)
				mma16816<T>(sc[n], qf[kk], *(const uint32_t *)(krow + kk * 16),
					    *(const uint32_t *)(krow + kk * 16 + 8));
		}
		float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
		for (int n = 0; n < NS; n++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const int64_t s = e < 2 ? s0 : s1, j = k0 + n * 8 + 2 * c + (e & 1);
				float v = s < a.S && j < last ? score_of(a, sc[n][e], b, h, s, j, nkeys) : -INFINITY;
				sc[n][e] = v;
				if (e < 2)
					mx0 = fmaxf(mx0, v);
				else
					mx1 = fmaxf(mx1, v);
			}
#pragma unroll
		for (int x = 1; x <= 2; x <<= 1) {
			mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, x));
			mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, x));
		}
		const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
		const float al0 = mn0 == -INFINITY ? 1.f : __expf(m0 - mn0);
		const float al1 = mn1 == -INFINITY ? 1.f : __expf(m1 - mn1);
		float sum0 = 0.f, sum1 = 0.f;
		uint32_t pa[kKeys / 16][4];
#pragma unroll
		for (int n = 0; n < NS; n++) {
			float p[4];
#pragma unroll
			for (int e = 0; e < 4; e++) {
				const float mn = e < 2 ? mn0 : mn1;
				p[e] = sc[n][e] == -INFINITY ? 0.f : to_f<T>(from_f<T>(__expf(sc[n][e] - mn)));
			}
			sum0 += p[0] + p[1];
			sum1 += p[2] + p[3];
			pa[n / 2][(n & 1) * 2 + 0] = Bits<T>::pack(p[0], p[1]);
			pa[n / 2][(n & 1) * 2 + 1] = Bits<T>::pack(p[2], p[3]);
		}
#pragma unroll
		for (int x = 1; x <= 2; x <<= 1) {
			sum0 += __shfl_xor_sync(0xffffffffu, sum0, x);
			sum1 += __shfl_xor_sync(0xffffffffu, sum1, x);
		}
		l0 = l0 * al0 + sum0;
		l1 = l1 * al1 + sum1;
		m0 = mn0;
		m1 = mn1;
#pragma unroll
		for (int n = 0; n < NO; n++) {
			o[n][0] *= al0;
			o[n][1] *= al0;
			o[n][2] *= al1;
			o[n][3] *= al1;
		}
		// O += P V: B fragment (keys 2c, 2c + 1 and 2c + 8, 2c + 9 of the
		// 16-key step; output column g of the 8-column tile)
#pragma unroll
		for (int j = 0; j < kKeys / 16; j++) {
			const unsigned short *v0 = vu + (j * 16 + 2 * c) * DP + g;
#pragma unroll
			for (int n = 0; n < NO; n++) {
				const unsigned short *vc = v0 + n * 8;
				uint32_t b0 = (uint32_t)vc[0] | ((uint32_t)vc[DP] << 16);
				uint32_t b1 = (uint32_t)vc[8 * DP] | ((uint32_t)vc[9 * DP] << 16);
				mma16816<T>(o[n], pa[j], b0, b1);
			}
		}
	}
	T *yg = (T *)a.y + (b * a.Hq + h) * a.S * D;
	const float inv0 = l0 > 0 ? 1.f / l0 : 0.f, inv1 = l1 > 0 ? 1.f / l1 : 0.f;
#pragma unroll
	for (int n = 0; n < NO; n++) {
		const int col = n * 8 + 2 * c;
		if (s0 < a.S)
			*(uint32_t *)(yg + s0 * D + col) = Bits<T>::pack(o[n][0] * inv0, o[n][1] * inv0);
		if (s1 < a.S)
			*(uint32_t *)(yg + s1 * D + col) = Bits<T>::pack(o[n][2] * inv1, o[n][3] * inv1);
	}
}

template <int D> size_t shmem_bytes()
{
	const int sw = D > kKeys ? D : kKeys;
	return (size_t)(kRows + 2 * kKeys) * D * 2 + (size_t)kWarps * 16 * (sw + D) * sizeof(float) +
	       (size_t)kWarps * 16 * kKeys * 2;
}

// kernel<T, D> on a block of kRows query rows per (sequence, head) pair;
// flash: the flash form, whose shared memory is the padded K/V tiles only
template <typename T, int D>
enum tpf_status launch(const struct tpf_kernel_call *c, const PrefillArgs &a, bool flash)
{
	void (*kernel)(PrefillArgs) = flash ? prefill_flash_kernel<T, D> : prefill_kernel<T, D>;
	const size_t sh = flash ? (size_t)2 * kKeys * (D + kPad) * sizeof(T) : shmem_bytes<D>();
	cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh);
	if (e != cudaSuccess)
		return tpfc_cuda_fail(c, "prefill attention shared memory", e);
	dim3 grid((unsigned)((a.S + kRows - 1) / kRows), (unsigned)(a.B * a.Hq));
	kernel<<<grid, kThreads, sh, tpfc_stream(c)>>>(a);
	return tpfc_launched(c, flash ? "prefill attention (flash)" : "prefill attention");
}

bool aligned16(const void *p)
{
	return !((uintptr_t)p & 15);
}

} // namespace

// 1 when the call is the prefill kernel's (and it ran: *st says how), 0
// when another kernel is to run it.
extern "C" int tpf_cu_attention_prefill(const struct tpf_kernel_call *c, const struct tpf_attention_ops *o,
					enum tpf_status *st)
{
	static const int which = (int)tpf_env_int("TPF_PREFILL_ATTENTION", 1);
	if (!which || o->S < kRows || (o->D != 64 && o->D != 128) || o->Dv != o->D || o->T <= 0 ||
	    o->B * o->Hq > 65535 || (o->S + kRows - 1) / kRows > INT32_MAX)
		return 0;
	enum tpf_dtype t = o->q->dtype;
	if (t != TPF_DTYPE_FLOAT16 && t != TPF_DTYPE_BFLOAT16)
		return 0;
	const struct tpf_ktensor *same[] = {o->k, o->v, o->pk, o->pv, o->y};
	for (const struct tpf_ktensor *x : same)
		if (x && (x->dtype != t || !aligned16(x->data)))
			return 0;
	if (!aligned16(o->q->data))
		return 0;
	PrefillArgs a;
	memset(&a, 0, sizeof(a));
	a.q = o->q->data, a.k = o->k->data, a.v = o->v->data, a.y = o->y->data;
	a.pk = o->pk ? o->pk->data : nullptr, a.pv = o->pv ? o->pv->data : nullptr;
	a.dt = t;
	a.B = o->B, a.Hq = o->Hq, a.Hk = o->Hk, a.S = o->S, a.D = o->D, a.L = o->L, a.P = o->P, a.T = o->T;
	a.kvlen = o->kvlen ? (const int64_t *)o->kvlen->data : nullptr;
	struct tpf_attention_attrs at;
	tpf_attention_attrs(c, a.D, &at);
	a.scale = at.scale, a.causal = at.causal, a.softcap = at.softcap;
	if (o->mask) {
		const struct tpf_ktensor *mask = o->mask;
		if ((mask->dtype != TPF_DTYPE_BOOL && !tpfc_float_ok(mask->dtype)) ||
		    tpf_attention_mask_strides(o, a.mstride))
			return 0;
		a.mask = mask->data, a.dm = mask->dtype, a.mask_bool = mask->dtype == TPF_DTYPE_BOOL;
	}
	const bool flash = which == 2;
	if (t == TPF_DTYPE_FLOAT16)
		*st = o->D == 64 ? launch<__half, 64>(c, a, flash) : launch<__half, 128>(c, a, flash);
	else
		*st = o->D == 64 ? launch<__nv_bfloat16, 64>(c, a, flash) : launch<__nv_bfloat16, 128>(c, a, flash);
	return 1;
}
