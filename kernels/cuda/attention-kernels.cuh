// SPDX-License-Identifier: MIT
// Private to kernels/cuda: the split-KV decode kernels of ONNX Attention
// (attention.cu says what they do) and their launchers.  The launchers are
// instantiated in several files so that nvcc compiles them side by side:
// the float decode kernel one dtype a file, 1 to 4 group rows a block with
// the combine kernel (attention-f32.cu, attention-f16.cu, attention-bf16.cu)
// apart from 8 and 16 rows (attention-f32-r8.cu, attention-f16-r8.cu,
// attention-bf16-r8.cu), and the tensor-core decode kernel (fp16 and bf16)
// in attention-mma.cu.  attention.cu (the planning and the entry points)
// calls them through the explicit instantiation declarations at the end.
#ifndef TPF_ATTENTION_KERNELS_CUH
#define TPF_ATTENTION_KERNELS_CUH

#include "cuda-common.cuh"

namespace tpfc_attention {

using namespace tpfc;

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

inline int mma_tiles(int64_t R, int64_t D)
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
	// kvlen (the keys a sequence has) is read first: before the wait only
	// where no kernel of the step writes it or the past K/V (kv_pre)
	if (!a.kv_pre)
		pdl_wait();
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
	} else if (kb < k1) {
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

// Dynamic shared memory of the decode kernel.
inline size_t decode_shmem(int RB, int64_t D, int64_t Dv)
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
inline int decode_dvl(int64_t Dv)
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

// The launchers attention.cu calls, instantiated in the files named above.
extern template enum tpf_status launch_combine<float>(const struct tpf_kernel_call *, const DecArgs &, bool);
extern template enum tpf_status launch_combine<__half>(const struct tpf_kernel_call *, const DecArgs &, bool);
extern template enum tpf_status launch_combine<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &, bool);
extern template enum tpf_status launch_decode_dv<float, 1>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<float, 2>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<float, 4>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<float, 8>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<float, 16>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__half, 1>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__half, 2>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__half, 4>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__half, 8>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__half, 16>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__nv_bfloat16, 1>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__nv_bfloat16, 2>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__nv_bfloat16, 4>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__nv_bfloat16, 8>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_decode_dv<__nv_bfloat16, 16>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_mma<__half>(const struct tpf_kernel_call *, const DecArgs &);
extern template enum tpf_status launch_mma<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention

#endif
