// SPDX-License-Identifier: MIT
// ONNX Attention (opset 23) on the GPU, the subset the CPU reference
// supports: 4-D Q [B, Hq, S, D], K/V [B, Hkv, L, D] (grouped query
// attention), optional attn_mask (bool or additive), past_key/past_value in
// front of K/V, is_causal, scale, softcap; present_key/present_value.
//
// Three kernels:
// - decode (split KV, "flash-decoding"): the query rows that share a KV head
//   (G = Hq / Hk heads times S positions, at most 16 rows) are one group; the
//   group's keys are cut into chunks of 32 and spread over `splits` blocks, so
//   a decode step's few heads still fill the GPU (as many splits as the SMs
//   hold blocks at once).  Each block reads every key and value row of its
//   chunks once for all the group's query rows; its four warps each take 8
//   keys of every chunk (four lanes a key for the scores, a lane up to 8
//   columns of every key for the values, vector loads), keep their own
//   running softmax (max, sum, output) in registers, and are merged at the
//   end; present_key/present_value are written from the rows read.  With
//   several splits a combine kernel merges the blocks' partial results from
//   the call's workspace.  Float32 throughout, one rounding of Y.
//   A prefill whose keys do not fit the row kernel's shared memory runs here
//   too, its query rows in chunks of 16.
// - decode on tensor cores: the same split and partial results for
//   bf16/fp16 with head size = value size = 64 or 128 (the common decode
//   case), the scores and the weighted values as mma.sync products (below,
//   "tensor-core decode kernel").
// - rows (everything else: long query groups, head sizes the decode kernel
//   does not take, no workspace): one block per query row, the row's scores in
//   shared memory, float32.
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
	const int64_t *kvlen; // nonpad_kv_seqlen [B], or null
	int64_t mstride[4];
	float scale, softcap;
	int causal, mask_bool;
};

// The keys sequence b reads: all T, or its nonpad_kv_seqlen (an in-place
// cache's valid prefix; the keys after it are never loaded).
template <typename A>
__device__ __forceinline__ int64_t keys_of(const A &a, int64_t b)
{
	if (!a.kvlen)
		return a.T;
	const int64_t n = a.kvlen[b];
	return n < 0 ? 0 : n < a.T ? n : a.T;
}

// Score acc of key j for the query of head h at position s (batch b),
// rounded by rnd (to the operands' dtype) where the MatMul/Mul/Tanh/Add
// chain it replaces rounds (the CPU reference does the same), -inf where
// the mask or causality drops it.  A: AttnArgs or DecArgs (the same
// scale, softcap, mask and causality fields).
template <typename A, typename R>
__device__ __forceinline__ float masked_score(const A &a, R rnd, float acc, int64_t b, int64_t h, int64_t s,
					      int64_t j)
{
	acc = rnd(rnd(acc) * a.scale);
	if (a.softcap > 0)
		acc = rnd(a.softcap * rnd(tanhf(rnd(acc / a.softcap))));
	if (a.mask) {
		int64_t off = b * a.mstride[0] + h * a.mstride[1] + s * a.mstride[2] + j * a.mstride[3];
		if (a.mask_bool) {
			if (!((const uint8_t *)a.mask)[off])
				acc = -INFINITY;
		} else {
			acc = rnd(acc + ld_f(a.dm, a.mask, off));
		}
	}
	// causal: bottom-right aligned with nonpad_kv_seqlen (query s sits at
	// kvlen[b] - S + s), else after the past
	if (a.causal && j > s + (a.kvlen ? a.kvlen[b] - a.S : a.P))
		acc = -INFINITY;
	return acc;
}

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
	const int64_t T = keys_of(a, b);
	float mx = -INFINITY;
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
		float acc = 0;
		for (int64_t d = 0; d < a.D; d++)
			acc += ld_f(a.dq, a.q, ((b * a.Hq + h) * a.S + s) * a.D + d) * kv_load(a, true, b, hk, j, d);
		acc = masked_score(a, [&](float v) { return round_through(a.dq, v); }, acc, b, h, s, j);
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
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x) {
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
	// the probabilities rounded as a Softmax output
	for (int64_t j = threadIdx.x; j < T; j += blockDim.x)
		sc[j] = sum > 0 ? round_through(a.dq, sc[j] / sum) : 0.f;
	__syncthreads();
	for (int64_t d = threadIdx.x; d < a.Dv; d += blockDim.x) {
		float acc = 0;
		for (int64_t j = 0; j < T; j++)
			acc += sc[j] * kv_load(a, false, b, hk, j, d);
		st_f(a.dy, a.y, ((b * a.Hq + h) * a.S + s) * a.Dv + d, acc);
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


// ------------------------------------------------------------ decode kernel

constexpr int kDecThreads = 128;
constexpr int kKeyThreads = 4;                         // threads per key (score phase)
constexpr int kChunk = kDecThreads / kKeyThreads;       // keys per chunk
constexpr int kMaxGroupRows = 16;

struct DecArgs {
	const void *q, *k, *v, *mask, *pk, *pv;
	void *y, *prk, *prv;
	float *part;    // [splits][rows][Dv] unnormalized outputs, then [splits][rows][2] (max, sum)
	int dm, mask_bool;
	int64_t B, Hq, S, D, Hk, L, Dv, P, T, G, R;
	const int64_t *kvlen; // nonpad_kv_seqlen [B], or null
	int64_t mstride[4];
	int splits, chunks_per_split, row_chunks;
	float scale, softcap;
	int causal;
	// past K/V rows are loaded before the dependent-launch wait (the
	// tensor-core kernel launched as a dependent, past K/V invariant)
	int kv_pre;
};

constexpr int kKVec = 4; // key vectors a thread loads before it computes

// A 16-byte vector read once (not kept in L1).
template <typename T> __device__ __forceinline__ uint4 ldg_stream(const T *p)
{
	return __ldcs((const uint4 *)p);
}

template <typename T> struct Vec16 {
	static constexpr int n = 16 / sizeof(T);
};

// The VN elements of a 16-byte vector as floats (registers, no local copy).
template <typename T> __device__ __forceinline__ float vec_elem(const uint4 &v, int i);
template <> __device__ __forceinline__ float vec_elem<float>(const uint4 &v, int i)
{
	unsigned w = i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
	return __uint_as_float(w);
}
template <> __device__ __forceinline__ float vec_elem<__half>(const uint4 &v, int i)
{
	unsigned w = (i >> 1) == 0 ? v.x : (i >> 1) == 1 ? v.y : (i >> 1) == 2 ? v.z : v.w;
	return __half2float(__ushort_as_half((unsigned short)(i & 1 ? w >> 16 : w & 0xffffu)));
}
template <> __device__ __forceinline__ float vec_elem<__nv_bfloat16>(const uint4 &v, int i)
{
	unsigned w = (i >> 1) == 0 ? v.x : (i >> 1) == 1 ? v.y : (i >> 1) == 2 ? v.z : v.w;
	return __uint_as_float(i & 1 ? w & 0xffff0000u : w << 16);
}

// v rounded to T (a store and a load).
template <typename T> __device__ __forceinline__ float rt(float v)
{
	return Cvt<T>::in(Cvt<T>::out(v));
}

// Row j of K (is_k) or V for KV head (b, hk): past rows first.
template <typename T>
__device__ __forceinline__ const T *dec_row(const DecArgs &a, bool is_k, int64_t b, int64_t hk, int64_t j)
{
	int64_t dd = is_k ? a.D : a.Dv;
	if (j < a.P)
		return (const T *)(is_k ? a.pk : a.pv) + ((b * a.Hk + hk) * a.P + j) * dd;
	return (const T *)(is_k ? a.k : a.v) + ((b * a.Hk + hk) * a.L + j - a.P) * dd;
}

// Blocks an SM should hold (registers capped to fit): the splits of a
// decode step are sized to the resident blocks, one wave.
template <int RB> struct DecMinBlocks {
	static constexpr int value = RB <= 4 ? 4 : 2;
};

constexpr int kDecWarps = kDecThreads / 32;
constexpr int kWarpKeys = 32 / kKeyThreads; // keys a warp takes of each chunk

// Up to DVL elements of T from p as 32-bit words (16-bit elements two a
// word, low half first; one 16-bit element in the low half of a word).
// A whole piece (n == DVL) of a row whose length is a multiple of DVL is
// one vector access (vec; p aligned to DVL * sizeof(T)), else element by
// element, n of them.  FULL: every piece whole and vec (no checks).
template <typename T, int DVL, bool FULL> struct VPiece {
	static constexpr int bytes = DVL * (int)sizeof(T);
	static constexpr int words = bytes < 4 ? 1 : bytes / 4;
	uint32_t w[words];
	__device__ __forceinline__ void load(const T *p, int n, bool vec)
	{
		if (FULL || (n == DVL && vec)) {
			const uint32_t *q = (const uint32_t *)p;
			if constexpr (bytes == 2) {
				w[0] = __ldcs((const unsigned short *)p);
			} else if constexpr (words == 1) {
				w[0] = __ldcs(q);
			} else if constexpr (words == 2) {
				uint2 v = __ldcs((const uint2 *)q);
				w[0] = v.x, w[1] = v.y;
			} else {
#pragma unroll
				for (int i = 0; i < words; i += 4) {
					uint4 v = __ldcs((const uint4 *)q + i / 4);
					w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
				}
			}
		} else {
			zero();
#pragma unroll
			for (int i = 0; i < DVL; i++) {
				if (i >= n)
					break;
				if constexpr (sizeof(T) == 4)
					w[i] = __ldcs((const uint32_t *)p + i);
				else
					w[i / 2] |= (uint32_t)__ldcs((const unsigned short *)p + i) << (16 * (i & 1));
			}
		}
	}
	__device__ __forceinline__ void store(T *p, int n, bool vec) const
	{
		if (FULL || (n == DVL && vec)) {
			if constexpr (bytes == 2) {
				*(unsigned short *)p = (unsigned short)w[0];
			} else {
				uint32_t *q = (uint32_t *)p;
#pragma unroll
				for (int i = 0; i < words; i++)
					q[i] = w[i];
			}
		} else {
#pragma unroll
			for (int i = 0; i < DVL; i++) {
				if (i >= n)
					break;
				if constexpr (sizeof(T) == 4)
					((uint32_t *)p)[i] = w[i];
				else
					((unsigned short *)p)[i] = (unsigned short)(w[i / 2] >> (16 * (i & 1)));
			}
		}
	}
	__device__ __forceinline__ float elem(int i) const
	{
		if constexpr (sizeof(T) == 4) {
			return __uint_as_float(w[i]);
		} else {
			uint4 u = make_uint4(w[i / 2], 0, 0, 0);
			return vec_elem<T>(u, i & 1);
		}
	}
	__device__ __forceinline__ void zero()
	{
#pragma unroll
		for (int i = 0; i < words; i++)
			w[i] = 0u;
	}
};

// Grid (splits, B * Hk, row chunks).  A group of more than 16 rows (a
// prefill too long for the row kernel's shared-memory scores) is cut into
// chunks of RB = 16 rows, blockIdx.z the chunk; only chunk 0 writes present.
// RB: rows of the group rounded up (the padding rows' queries are zero and
// their results never stored).
// Each warp runs on its own: of every 32-key chunk of the block's share it
// takes 8 keys, four lanes a key for the scores (every fourth 16-byte vector
// of the row each) and a lane DVL columns of every key for the values (DVL
// the power of two at least Dv / 32; lanes past Dv idle), with
// its own running softmax in registers (shuffles, no block barrier in the
// loop); the four warps' states are merged at the end.
template <typename T, int RB, int DVL, bool FULL>
__global__ void __launch_bounds__(kDecThreads, DecMinBlocks<RB>::value) decode_attention_kernel(DecArgs a)
{
	extern __shared__ float dsm[];
	const int D = (int)a.D, QP = D + D / 32; // query rows padded a word every 32
	float *qs = dsm;                         // [RB][QP]
	float *wm = qs + RB * QP;                // [warps][RB] running max
	float *wl = wm + kDecWarps * RB;         // [warps][RB] running sum
	float *ob = wl + kDecWarps * RB;         // [RB][Dv] merged outputs
	constexpr int VN = Vec16<T>::n;
	// launched as a programmatic dependent (TPF_PDL_ATTENTION): the
	// combine kernel may start now, nothing is read before the previous
	// kernel has finished
	pdl_trigger();
	pdl_wait();
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const int64_t grp = blockIdx.y, b = grp / a.Hk, hk = grp % a.Hk;
	const int64_t r0 = (int64_t)blockIdx.z * RB; // this chunk's first row of the group
	const bool writes_present = blockIdx.z == 0;
	// the group's query rows r = g * S + s, head hk * G + g
	for (int i = tid; i < RB * D; i += kDecThreads) {
		int r = i / D, d = i % D;
		float v = 0.f;
		if (r0 + r < a.R) {
			int64_t g = (r0 + r) / a.S, s = (r0 + r) % a.S;
			v = Cvt<T>::in(((const T *)a.q)[((b * a.Hq + hk * a.G + g) * a.S + s) * a.D + d]);
		}
		qs[r * QP + d + d / 32] = v;
	}
	// per row: the query position and head, for the mask and causality
	int rs[RB], rh[RB]; // (checked on the host: S and Hq fit an int)
#pragma unroll
	for (int r = 0; r < RB; r++) {
		int64_t rr = r0 + r < a.R ? r0 + r : 0;
		rs[r] = (int)(rr % a.S);
		rh[r] = (int)(hk * a.G + rr / a.S);
	}
	__syncthreads();
	float m[RB], l[RB], acc[RB][DVL];
#pragma unroll
	for (int r = 0; r < RB; r++) {
		m[r] = -INFINITY;
		l[r] = 0.f;
#pragma unroll
		for (int i = 0; i < DVL; i++)
			acc[r][i] = 0.f;
	}
	const int64_t nkeys = keys_of(a, b);
	const int64_t nchunks = (nkeys + kChunk - 1) / kChunk;
	const int64_t c0 = (int64_t)blockIdx.x * a.chunks_per_split;
	const int64_t c1 = min(nchunks, c0 + a.chunks_per_split);
	const int kk = lane / kKeyThreads, part = lane % kKeyThreads;
	// the lane's vectors of a key row: i * 4 + part (i < nv), so that the
	// four lanes of a key read 64 contiguous bytes per load
	const int nv = D / (kKeyThreads * VN); // whole (checked on the host)
	// the lane's value columns: nval of them from lane * DVL (FULL: Dv is
	// 32 * DVL, all of them); vector accesses where the pieces are aligned
	const int nval = FULL ? DVL : (int)max((int64_t)0, min((int64_t)DVL, a.Dv - (int64_t)lane * DVL));
	const bool vvec = FULL || a.Dv % DVL == 0;
	T *const prk = a.prk && writes_present ? (T *)a.prk : nullptr;
	T *const prv = a.prv && writes_present ? (T *)a.prv : nullptr;
	for (int64_t ch = c0; ch < c1; ch++) {
		const int64_t jw = ch * kChunk + warp * kWarpKeys; // the warp's first key
		if (jw >= nkeys)
			break;
		const int64_t j = jw + kk;
		const int jn = (int)min((int64_t)kWarpKeys, nkeys - jw);
		// every load first: the lane's first kKVec key vectors, its columns of the warp's keys
		const T *kr = j < nkeys ? dec_row<T>(a, true, b, hk, j) : nullptr;
		uint4 kraw[kKVec];
#pragma unroll
		for (int u = 0; u < kKVec; u++)
			if (kr && u < nv)
				kraw[u] = ldg_stream(kr + (u * kKeyThreads + part) * VN);
		VPiece<T, DVL, FULL> vp[kWarpKeys];
#pragma unroll
		for (int t = 0; t < kWarpKeys; t++) {
			if (t < jn && (FULL || nval > 0))
				vp[t].load(dec_row<T>(a, false, b, hk, jw + t) + lane * DVL, nval, vvec);
			else
				vp[t].zero();
		}
		// scores: four lanes a key, each a quarter of D
		float sc[RB];
#pragma unroll
		for (int r = 0; r < RB; r++)
			sc[r] = 0.f;
		if (kr) {
			T *pk = prk ? prk + ((b * a.Hk + hk) * a.T + j) * a.D : nullptr;
			for (int i0 = 0; i0 < nv; i0 += kKVec) {
				uint4 raw[kKVec];
#pragma unroll
				for (int u = 0; u < kKVec; u++)
					if (i0 + u < nv)
						raw[u] = i0 == 0 ? kraw[u]
								 : ldg_stream(kr + ((i0 + u) * kKeyThreads + part) * VN);
#pragma unroll
				for (int u = 0; u < kKVec; u++) {
					if (i0 + u >= nv)
						break;
					const int d = ((i0 + u) * kKeyThreads + part) * VN;
					if (pk)
						*(uint4 *)(pk + d) = raw[u];
					const int qo = d + d / 32; // VN <= 8 elements never cross a 32 boundary
#pragma unroll
					for (int t = 0; t < VN; t++) {
						float kv = vec_elem<T>(raw[u], t);
#pragma unroll
						for (int r = 0; r < RB; r++)
							sc[r] += qs[r * QP + qo + t] * kv;
					}
				}
			}
		}
#pragma unroll
		for (int r = 0; r < RB; r++) {
			sc[r] += __shfl_xor_sync(0xffffffffu, sc[r], 1);
			sc[r] += __shfl_xor_sync(0xffffffffu, sc[r], 2);
		}
		// the running softmax of each row over the warp's 8 keys
#pragma unroll
		for (int r = 0; r < RB; r++) {
			float x = -INFINITY;
			if (j < nkeys && r0 + r < a.R)
				x = masked_score(a, [](float v) { return rt<T>(v); }, sc[r], b, rh[r], rs[r], j);
			float cm = x;
			cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 4));
			cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 8));
			cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 16));
			const float mn = fmaxf(m[r], cm);
			const float p = mn == -INFINITY ? 0.f : __expf(x - mn);
			float ps = p;
			ps += __shfl_xor_sync(0xffffffffu, ps, 4);
			ps += __shfl_xor_sync(0xffffffffu, ps, 8);
			ps += __shfl_xor_sync(0xffffffffu, ps, 16);
			const float al = m[r] == -INFINITY ? (mn == -INFINITY ? 1.f : 0.f) : __expf(m[r] - mn);
			l[r] = l[r] * al + ps;
			m[r] = mn;
#pragma unroll
			for (int i = 0; i < DVL; i++)
				acc[r][i] *= al;
			// values: the probability of key t from its first lane
#pragma unroll
			for (int t = 0; t < kWarpKeys; t++) {
				const float pt = __shfl_sync(0xffffffffu, p, t * kKeyThreads);
#pragma unroll
				for (int i = 0; i < DVL; i++)
					acc[r][i] += pt * vp[t].elem(i);
			}
		}
		if (prv) {
#pragma unroll
			for (int t = 0; t < kWarpKeys; t++)
				if (t < jn && (FULL || nval > 0))
					vp[t].store(prv + ((b * a.Hk + hk) * a.T + jw + t) * a.Dv + lane * DVL, nval, vvec);
		}
	}
	// merge the warps: each one's state rescaled to the block's max
	if (lane == 0)
#pragma unroll
		for (int r = 0; r < RB; r++) {
			wm[warp * RB + r] = m[r];
			wl[warp * RB + r] = l[r];
		}
	__syncthreads();
	float bm[RB], bl[RB];
#pragma unroll
	for (int r = 0; r < RB; r++) {
		bm[r] = -INFINITY;
		for (int w = 0; w < kDecWarps; w++)
			bm[r] = fmaxf(bm[r], wm[w * RB + r]);
		bl[r] = 0.f;
		for (int w = 0; w < kDecWarps; w++) {
			float mw = wm[w * RB + r];
			bl[r] += mw == -INFINITY ? 0.f : wl[w * RB + r] * __expf(mw - bm[r]);
		}
	}
	for (int w = 0; w < kDecWarps; w++) {
		if (warp == w)
#pragma unroll
			for (int r = 0; r < RB; r++) {
				const float sw = m[r] == -INFINITY ? 0.f : __expf(m[r] - bm[r]);
#pragma unroll
				for (int i = 0; i < DVL; i++) {
					if (!FULL && i >= nval)
						break;
					float *o = ob + r * a.Dv + lane * DVL + i;
					*o = (w ? *o : 0.f) + acc[r][i] * sw;
				}
			}
		__syncthreads();
	}
	// results: Y directly with one split, else this split's partial
	const int64_t rows = a.B * a.Hq * a.S;
	for (int i = tid; i < RB * (int)a.Dv; i += kDecThreads) {
		const int r = i / (int)a.Dv, d = i % (int)a.Dv;
		if (r0 + r >= a.R)
			continue;
		const int64_t g = (r0 + r) / a.S, s = (r0 + r) % a.S;
		const int64_t row = (b * a.Hq + hk * a.G + g) * a.S + s;
		float bl_r = 0.f, bm_r = -INFINITY;
#pragma unroll
		for (int q = 0; q < RB; q++)
			if (q == r)
				bl_r = bl[q], bm_r = bm[q];
		if (a.splits == 1) {
			((T *)a.y)[row * a.Dv + d] = Cvt<T>::out(bl_r > 0 ? ob[i] / bl_r : 0.f);
		} else {
			a.part[((int64_t)blockIdx.x * rows + row) * a.Dv + d] = ob[i];
			if (d == 0) {
				float *ml = a.part + (int64_t)a.splits * rows * a.Dv;
				ml[((int64_t)blockIdx.x * rows + row) * 2] = bm_r;
				ml[((int64_t)blockIdx.x * rows + row) * 2 + 1] = bl_r;
			}
		}
	}
}

// One block a query row: the splits' partial results rescaled to the largest
// max and summed.  A thread a split for the weights (splits <= threads).
template <typename T>
__global__ void __launch_bounds__(kDecThreads) decode_combine_kernel(DecArgs a)
{
	__shared__ float w[kDecThreads];
	__shared__ float red[kDecThreads / 32];
	pdl_trigger(); // the output projection's GEMV may start loading its weight
	pdl_wait();
	const int64_t rows = a.B * a.Hq * a.S, row = blockIdx.x;
	const float *ml = a.part + (int64_t)a.splits * rows * a.Dv;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	// the first kPre splits' values of the thread's first column, read
	// while the weights are worked out
	constexpr int kPre = 16;
	float pre[kPre];
#pragma unroll
	for (int sp = 0; sp < kPre; sp++)
		pre[sp] = sp < a.splits && tid < a.Dv ? a.part[((int64_t)sp * rows + row) * a.Dv + tid] : 0.f;
	float m = tid < a.splits ? ml[((int64_t)tid * rows + row) * 2] : -INFINITY;
	float l = tid < a.splits ? ml[((int64_t)tid * rows + row) * 2 + 1] : 0.f;
	float mx = m;
	for (int o = 16; o > 0; o >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
	if (lane == 0)
		red[warp] = mx;
	__syncthreads();
	mx = red[0];
	for (int k = 1; k < kDecThreads / 32; k++)
		mx = fmaxf(mx, red[k]);
	float wt = m == -INFINITY ? 0.f : __expf(m - mx);
	w[tid] = wt;
	float lt = l * wt;
	for (int o = 16; o > 0; o >>= 1)
		lt += __shfl_xor_sync(0xffffffffu, lt, o);
	__syncthreads();
	if (lane == 0)
		red[warp] = lt;
	__syncthreads();
	float L = 0.f;
	for (int k = 0; k < kDecThreads / 32; k++)
		L += red[k];
	for (int64_t d = tid; d < a.Dv; d += kDecThreads) {
		float o = 0.f;
		int sp = 0;
		if (d == tid)
#pragma unroll
			for (; sp < kPre; sp++)
				o += sp < a.splits ? pre[sp] * w[sp] : 0.f;
#pragma unroll 8
		for (; sp < a.splits; sp++)
			o += a.part[((int64_t)sp * rows + row) * a.Dv + d] * w[sp];
		((T *)a.y)[row * a.Dv + d] = Cvt<T>::out(L > 0 ? o / L : 0.f);
	}
}

// ------------------------------------------------------------ tensor-core decode kernel
//
// The decode kernel's work on tensor cores (bf16/fp16, head size = value
// size = 64 or 128, the common decode case): the scores and the weighted
// values are two mma.sync m16n8k16 products per 16 keys, the group's query
// rows the mma's 16 rows (8 or 16 of them used).  The operands come from
// global memory straight into registers; the layouts of the mma fragments
// are met by permuting what the products sum over, which leaves them
// unchanged:
// - scores S = Q K^T: the sum runs over the head dims, so lane (g, c)
//   (g = lane / 4, c = lane % 4) holds the 16-byte pieces c, c + 4, ... of
//   its query rows and of key g of each 8-key half (the four lanes of a key
//   read 64 contiguous bytes a load); the mma's k pairs are consecutive
//   words of those pieces.
// - values O += P V: the sum runs over the keys, and the output columns may
//   be stored in any order, so lane (g, c) loads the 16-byte pieces g, g + 8
//   of keys 2c, 2c + 1, 2c + 8, 2c + 9 of the tile (eight lanes read 128
//   contiguous bytes of a key a load) and pairs two keys' elements of a
//   column with a byte permute.
// - P: the score fragments of the two 8-key halves are the A fragment of the
//   value product (the probabilities rounded to T: the CPU reference rounds
//   the normalized ones).
// A block's share of the keys is a run of 16-key tiles (splits as for the
// float kernel, in tiles); its warps take TP tiles at a time in turn (all
// their loads in flight before the first product; the first step's before
// the query rows'), each with its own running softmax; the four warps are
// merged in shared memory; partial results and the combine kernel as for
// the float kernel.
constexpr int kMmaTile = 16; // keys of a tile

// Tiles a warp loads at once: two with 8 query rows of head size 64, else
// one.  Two tiles of head size 128 need more than the 255 registers a
// thread may have: the compiler spilled to local memory (Nsight Compute on
// 2x H100, Llama-3-8B shapes at batch 1: 8,088 spill requests, one
// instruction issued every 10.5 cycles, 12.5 us a call).
template <int D, int MR> struct MmaTiles {
	static constexpr int value = MR == 8 && D <= 64 ? 2 : 1;
};

int mma_tiles(int64_t R, int64_t D)
{
	return R <= 8 ? (D <= 64 ? MmaTiles<64, 8>::value : MmaTiles<128, 8>::value) : MmaTiles<128, 16>::value;
}

// Column of the value product's output: 8-column tile n, column q of it.
__device__ __forceinline__ int mma_vcol(int n, int q)
{
	return ((n / 8) * 8 + q) * 8 + n % 8;
}

// MR: query rows the block holds (8: rows g; 16: rows g and g + 8).
template <typename T, int D, int MR>
__global__ void __launch_bounds__(kDecThreads, 2) decode_mma_kernel(DecArgs a)
{
	constexpr int TP = MmaTiles<D, MR>::value;
	constexpr int NS = D / 16;	   // k steps of the scores
	constexpr int KV = D / 32;	   // 16-byte pieces of a key a lane loads
	constexpr int NT = D / 8;	   // 8-column tiles of the values
	constexpr int VV = D / 64;	   // 16-byte pieces of a value row a lane loads
	constexpr int NH = MR / 8;	   // row halves a lane holds
	constexpr int OS = D + D / 32 + 4; // a merged output row in shared memory (bank skew)
	constexpr int STEP = kDecWarps * kMmaTile * TP;
	__shared__ float wm[kDecWarps][MR], wl[kDecWarps][MR], bm_s[MR], bl_s[MR];
	__shared__ float ob[kDecWarps][MR * OS];
	__shared__ long long orow[MR];
	pdl_trigger();
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const int64_t grp = blockIdx.y, b = grp / a.Hk, hk = grp % a.Hk;
	const int64_t r0 = (int64_t)blockIdx.z * kMaxGroupRows;
	const bool writes_present = blockIdx.z == 0;
	const int64_t k0 = (int64_t)blockIdx.x * a.chunks_per_split * kMmaTile;
	const int64_t k1 = min(keys_of(a, b), k0 + (int64_t)a.chunks_per_split * kMmaTile);
	T *const prk = a.prk && writes_present ? (T *)a.prk : nullptr;
	T *const prv = a.prv && writes_present ? (T *)a.prv : nullptr;
	const int64_t kvrow = (b * a.Hk + hk) * a.T; // present rows of this KV head
	// a step's loads: key g of each 8-key half, keys 2c, 2c+1, 2c+8, 2c+9
	uint4 kr[TP][2][KV], vr[TP][4][VV];
	// part 0: every row of the step; 1: its past rows only (the others
	// zero), before the dependent-launch wait; 2: its other rows only (the
	// past ones kept), after it
	auto load = [&](int64_t kb, int part) {
		auto want = [&](int64_t j) { return j < k1 && (part == 0 || (part == 1) == (j < a.P)); };
#pragma unroll
		for (int tp = 0; tp < TP; tp++) {
#pragma unroll
			for (int h = 0; h < 2; h++) {
				const int64_t j = kb + tp * kMmaTile + 8 * h + g;
				const T *p = want(j) ? dec_row<T>(a, true, b, hk, j) : nullptr;
				if (part != 2 || p)
#pragma unroll
					for (int v = 0; v < KV; v++)
						kr[tp][h][v] = p ? ldg_stream(p + (v * 4 + c) * 8) : make_uint4(0u, 0u, 0u, 0u);
			}
#pragma unroll
			for (int t = 0; t < 4; t++) {
				const int64_t j = kb + tp * kMmaTile + 2 * c + (t & 1) + 8 * (t >> 1);
				const T *p = want(j) ? dec_row<T>(a, false, b, hk, j) : nullptr;
				if (part != 2 || p)
#pragma unroll
					for (int v = 0; v < VV; v++)
						vr[tp][t][v] = p ? ldg_stream(p + (v * 8 + g) * 8) : make_uint4(0u, 0u, 0u, 0u);
			}
		}
	};
	int64_t kb = k0 + (int64_t)warp * kMmaTile * TP;
	if (a.kv_pre) {
		// the first step's past rows while the previous kernel finishes
		if (kb < k1)
			load(kb, 1);
		pdl_wait();
		if (kb < k1 && kb + kMmaTile * TP > a.P)
			load(kb, 2);
	} else {
		pdl_wait();
		if (kb < k1)
			load(kb, 0);
	}
	// this lane's query rows g (and g + 8), as A fragments
	bool rok[NH];
	int rs[NH], rh[NH];
	uint32_t qa[NS][4];
#pragma unroll
	for (int s = 0; s < NS; s++)
		qa[s][0] = qa[s][1] = qa[s][2] = qa[s][3] = 0u;
#pragma unroll
	for (int i = 0; i < NH; i++) {
		const int64_t r = r0 + g + 8 * i;
		rok[i] = r < a.R;
		const int64_t rr = rok[i] ? r : 0;
		rs[i] = (int)(rr % a.S);
		rh[i] = (int)(hk * a.G + rr / a.S);
		if (rok[i]) {
			const T *qp = (const T *)a.q + ((b * a.Hq + rh[i]) * a.S + rs[i]) * D;
#pragma unroll
			for (int v = 0; v < KV; v++) {
				const uint4 u = *(const uint4 *)(qp + (v * 4 + c) * 8);
				// words 4v .. 4v + 3 of the lane's: k step 2v (x, y) and 2v + 1 (z, w)
				qa[2 * v][i] = u.x, qa[2 * v][2 + i] = u.y;
				qa[2 * v + 1][i] = u.z, qa[2 * v + 1][2 + i] = u.w;
			}
		}
	}
	float m[NH], l[NH], o[NT][2 * NH];
	float dz0 = 0.f, dz1 = 0.f; // rows 8-15 of the value product with MR = 8 (all zero)
#pragma unroll
	for (int i = 0; i < NH; i++)
		m[i] = -INFINITY, l[i] = 0.f;
#pragma unroll
	for (int n = 0; n < NT; n++)
#pragma unroll
		for (int e = 0; e < 2 * NH; e++)
			o[n][e] = 0.f;
	while (kb < k1) {
#pragma unroll
		for (int tp = 0; tp < TP; tp++) {
			const int64_t kt = kb + tp * kMmaTile;
			// present rows, as read
			if (prk)
#pragma unroll
				for (int h = 0; h < 2; h++) {
					const int64_t j = kt + 8 * h + g;
					if (j < k1)
#pragma unroll
						for (int v = 0; v < KV; v++)
							*(uint4 *)(prk + (kvrow + j) * D + (v * 4 + c) * 8) = kr[tp][h][v];
				}
			if (prv)
#pragma unroll
				for (int t = 0; t < 4; t++) {
					const int64_t j = kt + 2 * c + (t & 1) + 8 * (t >> 1);
					if (j < k1)
#pragma unroll
						for (int v = 0; v < VV; v++)
							*(uint4 *)(prv + (kvrow + j) * D + (v * 8 + g) * 8) = vr[tp][t][v];
				}
			// scores of the 16 keys: sc[h] = rows (g, g + 8) x keys 8h + 2c, +1
			float sc[2][4];
#pragma unroll
			for (int h = 0; h < 2; h++) {
				sc[h][0] = sc[h][1] = sc[h][2] = sc[h][3] = 0.f;
#pragma unroll
				for (int s = 0; s < NS; s++) {
					const uint4 &u = kr[tp][h][s / 2];
					// (rows 8-15 zero with MR = 8)
					mma16816<T>(sc[h][0], sc[h][1], sc[h][2], sc[h][3], qa[s][0], NH == 2 ? qa[s][1] : 0u,
						    qa[s][2], NH == 2 ? qa[s][3] : 0u, (s & 1) ? u.z : u.x,
						    (s & 1) ? u.w : u.y);
				}
			}
			// the running softmax of each row over the tile's keys
			float p[2][4];
#pragma unroll
			for (int i = 0; i < NH; i++) {
				float x[2][2];
				float cm = -INFINITY;
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const int64_t j = kt + 8 * h + 2 * c + e;
						const float v = rok[i] && j < k1
									? masked_score(a, [](float v) { return rt<T>(v); }, sc[h][2 * i + e], b, rh[i], rs[i], j)
									: -INFINITY;
						x[h][e] = v;
						cm = fmaxf(cm, v);
					}
				cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 1));
				cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, 2));
				const float mn = fmaxf(m[i], cm);
				const float al = m[i] == -INFINITY ? (mn == -INFINITY ? 1.f : 0.f) : __expf(m[i] - mn);
				float ps = 0.f;
#pragma unroll
				for (int h = 0; h < 2; h++)
#pragma unroll
					for (int e = 0; e < 2; e++) {
						const float pe = mn == -INFINITY ? 0.f : rt<T>(__expf(x[h][e] - mn));
						p[h][2 * i + e] = pe;
						ps += pe;
					}
				l[i] = l[i] * al + ps;
				m[i] = mn;
#pragma unroll
				for (int n = 0; n < NT; n++)
					o[n][2 * i] *= al, o[n][2 * i + 1] *= al;
			}
			if constexpr (NH == 1)
				p[0][2] = p[0][3] = p[1][2] = p[1][3] = 0.f;
			// the weighted values: P (rows x 16 keys) x V (16 keys x D)
			const uint32_t pa0 = Bits<T>::pack(p[0][0], p[0][1]), pa1 = Bits<T>::pack(p[0][2], p[0][3]);
			const uint32_t pa2 = Bits<T>::pack(p[1][0], p[1][1]), pa3 = Bits<T>::pack(p[1][2], p[1][3]);
#pragma unroll
			for (int n = 0; n < NT; n++) {
				// element n of keys (2c, 2c+1) and (2c+8, 2c+9): piece n / 8, word (n % 8) / 2
				const int v = n / 8, e = (n % 8) / 2;
				const unsigned sel = (n & 1) ? 0x7632u : 0x5410u;
				uint32_t w[4];
#pragma unroll
				for (int t = 0; t < 4; t++) {
					const uint4 &u = vr[tp][t][v];
					w[t] = e == 0 ? u.x : e == 1 ? u.y : e == 2 ? u.z : u.w;
				}
				const uint32_t b0 = __byte_perm(w[0], w[1], sel), b1 = __byte_perm(w[2], w[3], sel);
				if constexpr (NH == 2)
					mma16816<T>(o[n][0], o[n][1], o[n][2], o[n][3], pa0, pa1, pa2, pa3, b0, b1);
				else
					mma16816<T>(o[n][0], o[n][1], dz0, dz1, pa0, pa1, pa2, pa3, b0, b1);
			}
		}
		kb += STEP;
		if (kb < k1)
			load(kb, 0);
	}
	// the row sums over the four lanes of a row
#pragma unroll
	for (int i = 0; i < NH; i++) {
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
		l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
	}
	// merge the warps: each one's state rescaled to the block's max, every
	// warp's output in its own slice of ob, summed below in warp order
	if (c == 0)
#pragma unroll
		for (int i = 0; i < NH; i++)
			wm[warp][g + 8 * i] = m[i], wl[warp][g + 8 * i] = l[i];
	if (threadIdx.x < MR) {
		// the output row of group row r (-1: a padding row)
		const int64_t rr = r0 + threadIdx.x;
		orow[threadIdx.x] = rr < a.R ? (b * a.Hq + hk * a.G + rr / a.S) * a.S + rr % a.S : -1;
	}
	__syncthreads();
	float sw[NH];
#pragma unroll
	for (int i = 0; i < NH; i++) {
		const int r = g + 8 * i;
		float bm = -INFINITY, bl = 0.f;
#pragma unroll
		for (int w = 0; w < kDecWarps; w++)
			bm = fmaxf(bm, wm[w][r]);
#pragma unroll
		for (int w = 0; w < kDecWarps; w++)
			bl += wm[w][r] == -INFINITY ? 0.f : wl[w][r] * __expf(wm[w][r] - bm);
		sw[i] = m[i] == -INFINITY ? 0.f : __expf(m[i] - bm);
		if (warp == 0 && c == 0)
			bm_s[r] = bm, bl_s[r] = bl;
	}
#pragma unroll
	for (int i = 0; i < NH; i++)
#pragma unroll
		for (int n = 0; n < NT; n++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = mma_vcol(n, 2 * c + e);
				ob[warp][(g + 8 * i) * OS + col + col / 32] = o[n][2 * i + e] * sw[i];
			}
	__syncthreads();
	// a merged output element (the warps in order)
	auto merged = [&](int r, int d) {
		const int x = r * OS + d + d / 32;
		float v = ob[0][x];
#pragma unroll
		for (int w = 1; w < kDecWarps; w++)
			v += ob[w][x];
		return v;
	};
	// results: Y directly with one split, else this split's partial
	const int64_t rows = a.B * a.Hq * a.S;
	for (int i = threadIdx.x; i < MR * D; i += kDecThreads) {
		const int r = i / D, d = i % D;
		const int64_t row = orow[r];
		if (row < 0)
			continue;
		const float v = merged(r, d);
		if (a.splits == 1) {
			((T *)a.y)[row * D + d] = Cvt<T>::out(bl_s[r] > 0 ? v / bl_s[r] : 0.f);
		} else {
			a.part[((int64_t)blockIdx.x * rows + row) * D + d] = v;
			if (d == 0) {
				float *ml = a.part + (int64_t)a.splits * rows * D;
				ml[((int64_t)blockIdx.x * rows + row) * 2] = bm_s[r];
				ml[((int64_t)blockIdx.x * rows + row) * 2 + 1] = bl_s[r];
			}
		}
	}
}

// The row kernel keeps a row's scores in shared memory.
constexpr int64_t kRowsMaxKeys = 200 * 1024 / sizeof(float);

bool rows_kernel_fits(const struct tpf_attention_ops &o)
{
	return o.T <= kRowsMaxKeys;
}

// The decode kernel's plan for a call: 0 when it does not apply, else the
// group rows R, the splits and chunks per split, and the workspace bytes the
// splits need (0 with one split).
struct DecPlan {
	int ok, mma, chunk, splits, chunks_per_split, row_chunks;
	int64_t R, G;
	size_t ws_bytes;
};

constexpr int64_t kMmaMinRows = 4; // group rows from which decode_plan takes the tensor-core kernel

// The tensor-core kernel may take the call (TPF_DECODE_MMA=0 keeps every call
// on the float kernel): bf16/fp16, head size = value size = 64 or 128, Q
// rows 16-byte aligned (the caller checks K/V).
bool decode_mma_ok(const struct tpf_attention_ops &o)
{
	static const bool off = !tpf_env_switch("TPF_DECODE_MMA", 1);
	enum tpf_dtype t = o.q->dtype;
	return !off && (t == TPF_DTYPE_FLOAT16 || t == TPF_DTYPE_BFLOAT16) && o.D == o.Dv &&
	       (o.D == 64 || o.D == 128) && !((uintptr_t)o.q->data & 15);
}

// long: the group may have more than 16 rows (cut into chunks of 16): only
// where the row kernel cannot hold the scores.
DecPlan decode_plan(const struct tpf_attention_ops &o, bool long_rows)
{
	DecPlan p;
	memset(&p, 0, sizeof(p));
	static const bool off = !tpf_env_switch("TPF_DECODE_ATTENTION", 1);
	if (off)
		return p;
	enum tpf_dtype t = o.q->dtype;
	if (t != TPF_DTYPE_FLOAT && t != TPF_DTYPE_FLOAT16 && t != TPF_DTYPE_BFLOAT16)
		return p;
	const struct tpf_ktensor *same[] = {o.k, o.v, o.pk, o.pv, o.y, o.prk, o.prv};
	for (const struct tpf_ktensor *x : same)
		if (x && x->dtype != t)
			return p;
	int vn = 16 / (int)tpf_elem_size(t);
	p.G = o.Hq / o.Hk;
	p.R = p.G * o.S;
	p.row_chunks = (int)((p.R + kMaxGroupRows - 1) / kMaxGroupRows);
	// (value rows: a lane takes up to 8 columns, decode_dvl)
	if (p.R < 1 || (p.R > kMaxGroupRows && !long_rows) || p.row_chunks > 65535 || o.B * o.Hk > 65535 ||
	    o.D <= 0 || o.D % (kKeyThreads * vn) || o.D > 512 || o.Dv <= 0 || o.Dv > 256 || o.T <= 0 ||
	    o.S > INT32_MAX || o.Hq > INT32_MAX)
		return p;
	// 16-byte rows for the vector loads and stores
	const struct tpf_ktensor *vec[] = {o.k, o.pk, o.prk, o.v, o.pv, o.prv};
	for (const struct tpf_ktensor *x : vec)
		if (x && x->data && ((uintptr_t)x->data & 15))
			return p;
	// as many splits as fill the blocks the SMs hold at once (DecMinBlocks,
	// the tensor-core kernel's launch bounds)
	const int64_t rb = p.R > 8 ? 16 : p.R > 4 ? 8 : p.R;
	// The tensor-core kernel from 4 group rows (a decode step's query heads
	// a KV head): its 16-row products cost the same for 1 to 8 rows, the
	// float kernel's work grows with them.  Decode steps on 2x H100 (4
	// layers, hidden 2048, 16 query heads of 128): 8 KV heads (2 rows) the
	// float kernel 166.1 / 218.8 us at batch 1 / 8 against 177.7 / 231.9
	// (256 keys), 172.6 / 270.4 against 180.1 / 275.9 (1024 keys); 4 KV
	// heads (4 rows) the tensor cores 174.3 / 228.3 against 177.7 / 226.9
	// (256 keys), 178.3 / 240.2 against 183.7 / 252.4 (1024 keys).
	p.mma = decode_mma_ok(o) && p.R >= kMmaMinRows;
	p.chunk = p.mma ? kMmaTile : kChunk;
	const int64_t per_sm = p.mma ? 2 : rb <= 4 ? 4 : 2;
	int64_t groups = o.B * o.Hk * p.row_chunks, nchunks = (o.T + p.chunk - 1) / p.chunk;
	int64_t want = per_sm * (int64_t)tpfc_sm_count() / groups;
	if (want < 1)
		want = 1;
	if (want > nchunks)
		want = nchunks;
	if (want > kDecThreads) // the combine kernel's thread a split
		want = kDecThreads;
	int64_t cps = (nchunks + want - 1) / want;
	// the tensor-core kernel: splits of whole 16-key tiles, at least one
	// step of two warps (fewer, longer splits for the combine kernel to
	// read where the SMs have room to spare)
	// four tiles, or two steps of a warp where a step is two tiles.
	// (Llama-3-8B decode step at batch 1, 4 rows of head size 128: 2x H100
	// 418.99 us with four tiles against 421.5-421.9 with two, 427.4 with
	// one; 2x H200 326.8 against 328.9; batch 8 even: docs/gpu.md.
	// TPF_DECODE_SPLIT_TILES sets another least number.)
	static const int split_tiles = (int)tpf_env_int("TPF_DECODE_SPLIT_TILES", 0);
	const int64_t min_cps = split_tiles > 0 ? split_tiles : (int64_t)max(4, 2 * mma_tiles(p.R, o.D));
	if (p.mma && cps < min_cps)
		cps = nchunks < min_cps ? nchunks : min_cps;
	p.chunks_per_split = (int)cps;
	p.splits = (int)((nchunks + cps - 1) / cps);
	int64_t rows = o.B * o.Hq * o.S;
	p.ws_bytes = p.splits > 1 ? (size_t)p.splits * (size_t)rows * (size_t)(o.Dv + 2) * sizeof(float) : 0;
	p.ok = 1;
	return p;
}

// Dynamic shared memory of the decode kernel.
size_t decode_shmem(int RB, int64_t D, int64_t Dv)
{
	return ((size_t)RB * (size_t)(D + D / 32) + 2 * (size_t)kDecWarps * RB + (size_t)RB * (size_t)Dv) * sizeof(float);
}

template <typename T, int RB, int DVL, bool FULL> constexpr auto decode_fn()
{
	return decode_attention_kernel<T, RB, DVL, FULL>;
}

// The combine kernel after a split call, a block a query row.
template <typename T> enum tpf_status launch_combine(const struct tpf_kernel_call *c, const DecArgs &a, bool pdl)
{
	int64_t rows = a.B * a.Hq * a.S;
	return tpfc_launched_ex(c, tpfc_launch_pdl(pdl, decode_combine_kernel<T>, dim3((unsigned)rows), dim3(kDecThreads),
						   0, tpfc_stream(c), a),
				"decode attention combine");
}

template <typename T, int RB, int DVL, bool FULL>
enum tpf_status launch_decode_rb(const struct tpf_kernel_call *c, const DecArgs &a)
{
	size_t shmem = decode_shmem(RB, a.D, a.Dv);
	if (shmem > 48 * 1024)
		cudaFuncSetAttribute(decode_fn<T, RB, DVL, FULL>(), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shmem);
	dim3 grid((unsigned)a.splits, (unsigned)(a.B * a.Hk), (unsigned)a.row_chunks);
	enum tpf_status e = tpfc_launched_ex(c, tpfc_launch_pdl(tpfc_pdl(TPF_PDL_ATTENTION), decode_fn<T, RB, DVL, FULL>(),
							       grid, dim3(kDecThreads), shmem, tpfc_stream(c), a),
					     "decode attention");
	return e || a.splits == 1 ? e : launch_combine<T>(c, a, tpfc_pdl(TPF_PDL_COMBINE));
}

template <typename T, int D, int MR>
enum tpf_status launch_mma_rows(const struct tpf_kernel_call *c, const DecArgs &a)
{
	dim3 grid((unsigned)a.splits, (unsigned)(a.B * a.Hk), (unsigned)a.row_chunks);
	enum tpf_status e = tpfc_launched_ex(c, tpfc_launch_pdl(tpfc_pdl(TPF_PDL_ATTENTION), decode_mma_kernel<T, D, MR>,
							       grid, dim3(kDecThreads), 0, tpfc_stream(c), a),
					     "decode attention (tensor cores)");
	return e || a.splits == 1 ? e : launch_combine<T>(c, a, tpfc_pdl(TPF_PDL_COMBINE));
}

template <typename T>
enum tpf_status launch_mma(const struct tpf_kernel_call *c, const DecArgs &a)
{
	if (a.D == 64)
		return a.R <= 8 ? launch_mma_rows<T, 64, 8>(c, a) : launch_mma_rows<T, 64, 16>(c, a);
	return a.R <= 8 ? launch_mma_rows<T, 128, 8>(c, a) : launch_mma_rows<T, 128, 16>(c, a);
}

// A lane's columns of a value row: the power of two at least Dv / 32.
int decode_dvl(int64_t Dv)
{
	return Dv <= 32 ? 1 : Dv <= 64 ? 2 : Dv <= 128 ? 4 : 8;
}

template <typename T, int RB, int DVL>
enum tpf_status launch_decode_vec(const struct tpf_kernel_call *c, const DecArgs &a)
{
	if (a.Dv == 32 * DVL)
		return launch_decode_rb<T, RB, DVL, true>(c, a);
	return launch_decode_rb<T, RB, DVL, false>(c, a);
}

template <typename T, int RB>
enum tpf_status launch_decode_dv(const struct tpf_kernel_call *c, const DecArgs &a)
{
	switch (decode_dvl(a.Dv)) {
	case 1:
		return launch_decode_vec<T, RB, 1>(c, a);
	case 2:
		return launch_decode_vec<T, RB, 2>(c, a);
	case 4:
		return launch_decode_vec<T, RB, 4>(c, a);
	default:
		return launch_decode_vec<T, RB, 8>(c, a);
	}
}

template <typename T>
enum tpf_status launch_decode(const struct tpf_kernel_call *c, const DecArgs &a)
{
	if (a.R <= 1)
		return launch_decode_dv<T, 1>(c, a);
	if (a.R <= 2)
		return launch_decode_dv<T, 2>(c, a);
	if (a.R <= 4)
		return launch_decode_dv<T, 4>(c, a);
	if (a.R <= 8)
		return launch_decode_dv<T, 8>(c, a);
	return launch_decode_dv<T, 16>(c, a);
}

enum tpf_status run_decode(const struct tpf_kernel_call *c, const struct tpf_attention_ops &o, const DecPlan &p,
			   const AttnArgs &ra)
{
	DecArgs a;
	memset(&a, 0, sizeof(a));
	a.q = o.q->data, a.k = o.k->data, a.v = o.v->data;
	a.pk = o.pk ? o.pk->data : nullptr, a.pv = o.pv ? o.pv->data : nullptr;
	a.y = o.y->data;
	a.prk = o.prk ? o.prk->data : nullptr, a.prv = o.prv ? o.prv->data : nullptr;
	a.mask = ra.mask, a.dm = ra.dm, a.mask_bool = ra.mask_bool;
	for (int d = 0; d < 4; d++)
		a.mstride[d] = ra.mstride[d];
	a.B = o.B, a.Hq = o.Hq, a.S = o.S, a.D = o.D, a.Hk = o.Hk, a.L = o.L, a.Dv = o.Dv, a.P = o.P, a.T = o.T;
	a.kvlen = o.kvlen ? (const int64_t *)o.kvlen->data : nullptr;
	a.G = p.G, a.R = p.R;
	a.splits = p.splits, a.chunks_per_split = p.chunks_per_split, a.row_chunks = p.row_chunks;
	a.part = (float *)c->workspace;
	a.scale = ra.scale, a.softcap = ra.softcap, a.causal = ra.causal;
	// launched as a dependent, the tensor-core kernel loads its first
	// step's past K/V before the wait where no kernel of the step writes
	// them
	a.kv_pre = p.mma && tpfc_pdl(TPF_PDL_ATTENTION) && (!o.pk || o.pk->invariant) && (!o.pv || o.pv->invariant);
	if (p.mma)
		return o.q->dtype == TPF_DTYPE_FLOAT16 ? launch_mma<__half>(c, a) : launch_mma<__nv_bfloat16>(c, a);
	switch (o.q->dtype) {
	case TPF_DTYPE_FLOAT:
		return launch_decode<float>(c, a);
	case TPF_DTYPE_FLOAT16:
		return launch_decode<__half>(c, a);
	default:
		return launch_decode<__nv_bfloat16>(c, a);
	}
}

} // namespace

// attention-prefill.cu: 1 when it ran the call (*st its status).
extern "C" int tpf_cu_attention_prefill(const struct tpf_kernel_call *c, const struct tpf_attention_ops *o,
					enum tpf_status *st);

// Workspace of a call: the decode kernel's partial results when it splits.
extern "C" size_t tpf_cu_attention_workspace(const struct tpf_kernel_call *c)
{
	struct tpf_attention_ops o;
	struct tpf_kernel_call quiet = *c;
	quiet.diag = NULL; // a call the kernel will refuse needs none, and says so when it runs
	if (c->n_in < 3 || c->n_out < 1 || tpf_attention_operands(&quiet, &o))
		return 0;
	DecPlan p = decode_plan(o, !rows_kernel_fits(o));
	return p.ok ? p.ws_bytes : 0;
}

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
	a.kvlen = o.kvlen ? (const int64_t *)o.kvlen->data : nullptr;
	// every operand but the mask and nonpad_kv_seqlen (int64) is a float
	for (size_t i = 0; i < c->n_in; i++)
		if (c->in[i].data && i != 3 && &c->in[i] != o.kvlen && !tpfc_float_ok(c->in[i].dtype))
			return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported on cuda",
					 tpf_dtype_name(c->in[i].dtype));

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
	if (rows == 0 || a.Dv == 0 || a.T == 0)
		goto rows_kernel;
	{
		enum tpf_status pst;
		if (tpf_cu_attention_prefill(c, &o, &pst)) { // a prompt on the tiled kernel
			if (pst)
				return pst;
			goto presents;
		}
		DecPlan dp = decode_plan(o, !rows_kernel_fits(o));
		if (dp.ok) {
			if (dp.splits > 1 && (!c->workspace || c->workspace_bytes < dp.ws_bytes)) {
				// no room for partial results: one block per KV head walks every chunk
				int64_t nchunks = (a.T + dp.chunk - 1) / dp.chunk;
				dp.splits = 1;
				dp.chunks_per_split = (int)nchunks;
			}
			return run_decode(c, o, dp, a);
		}
	}
rows_kernel:
	if (rows > 0 && a.Dv > 0 && !rows_kernel_fits(o))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED,
				 "%lld keys exceed the row kernel's shared-memory scores, and the split kernel "
				 "needs Q/K/V of one float dtype, a head size that is a multiple of %d elements "
				 "(at most 512), a value size of at most 256 and at most 65535 batch x KV heads",
				 (long long)a.T, 4 * 16 / (int)tpf_elem_size(q->dtype));
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
presents:
	if (o.prk || o.prv) {
		int64_t n = a.B * a.Hk * a.T * (a.D + a.Dv);
		if (n > 0) {
			present_kernel<<<tpfc_blocks(n, 256), 256, 0, st>>>(a);
			return tpfc_launched(c, "attention present");
		}
	}
	return TPF_OK;
}
