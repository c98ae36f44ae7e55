// SPDX-License-Identifier: MIT
// Private to kernels/cuda: what the post-reduce norm kernels (ar-norm.cu)
// and the peer-memory all-reduces that fuse them (ar-peer.cu) share: the
// 16-byte chunk helpers, the row finish (residual add, RMSNorm, FP8, NVFP4
// and FP8-group quantization) and the host-side argument checks.
#ifndef TPF_AR_NORM_CUH
#define TPF_AR_NORM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-common.cuh"
#include "peer.cuh"
#include "peer-rows.h"
#include "tpf-cuda.h"

namespace {

constexpr int kMaxWorld = tpfc::kPeerMaxWorld;
constexpr int kMaxChunksPerThread = 4; // 16-byte chunks a thread keeps in registers
constexpr int kMaxThreads = 512;
// The one-shot kernel's wide instances: a row of up to kWideThreads chunks
// at one chunk a thread, for few rows of 513 to 1024 chunks (hidden 8192 in
// 16-bit types), where one block's chain of work per row decides the time.
constexpr int kWideThreads = 1024;

using tpfc::Elem;

// Rounds through T, as storing into a T tensor and reading it back would.
template <typename T> __device__ inline float round_to(float v)
{
	return Elem<T>::load(Elem<T>::store(v));
}

template <typename T> __device__ inline void unpack(uint4 u, float *out)
{
	const T *e = reinterpret_cast<const T *>(&u);
#pragma unroll
	for (int i = 0; i < Elem<T>::kPerChunk; i++)
		out[i] = Elem<T>::load(e[i]);
}

template <typename T> __device__ inline uint4 pack(const float *in)
{
	uint4 u;
	T *e = reinterpret_cast<T *>(&u);
#pragma unroll
	for (int i = 0; i < Elem<T>::kPerChunk; i++)
		e[i] = Elem<T>::store(in[i]);
	return u;
}

// -0.0 marks "not arrived yet" in receive buffers.
template <typename T> __device__ inline bool has_placeholder(uint4 u)
{
	const uint32_t w[4] = {u.x, u.y, u.z, u.w};
	bool any = false;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (sizeof(T) == 4)
			any |= w[i] == 0x80000000u;
		else
			any |= (w[i] & 0xffffu) == 0x8000u || (w[i] >> 16) == 0x8000u;
	}
	return any;
}

// Replaces -0.0 by +0.0 so that real data never looks like a placeholder.
template <typename T> __device__ inline uint4 scrub(uint4 u)
{
	uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
	for (int i = 0; i < 4; i++) {
		if (sizeof(T) == 4) {
			if (w[i] == 0x80000000u)
				w[i] = 0;
		} else {
			if ((w[i] & 0xffffu) == 0x8000u)
				w[i] &= 0xffff0000u;
			if ((w[i] >> 16) == 0x8000u)
				w[i] &= 0x0000ffffu;
		}
	}
	return make_uint4(w[0], w[1], w[2], w[3]);
}

template <typename T> __host__ __device__ inline uint32_t placeholder_word()
{
	return sizeof(T) == 4 ? 0x80000000u : 0x80008000u;
}

__device__ inline uint4 load_volatile(const uint4 *p)
{
	uint4 r;
	asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
		     : "l"(p));
	return r;
}

__device__ inline void store_volatile(uint4 *p, uint4 v)
{
	asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y),
		     "r"(v.z), "r"(v.w)
		     : "memory");
}

// Sum over the block with one barrier; every thread gets the result (every
// warp reduces the warps' partial sums in the same order).  `scratch` holds
// 64 floats and successive calls alternate between its halves (`phase`,
// flipped here): a warp that reaches the next call's write has passed this
// call's barrier, which no warp reaches before it has read the previous
// call's half.
__device__ inline float block_sum(float v, float *scratch, int &phase)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
	float *half = scratch + 32 * phase;
	phase ^= 1;
	if (lane == 0)
		half[warp] = v;
	__syncthreads();
	float s = lane < nw ? half[lane] : 0.f;
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return s;
}

struct NormOut {
	const void *residual;
	const void *gamma;
	void *norm_out, *residual_out, *fp8_out;
	void *fp4_out, *fp4_scales; // NVFP4: packed e2m1 pairs, one E4M3 scale per 16
	void *group_out;            // FP8 per group: codes, float32 scales
	float *group_scales;
	float eps, weight_offset, fp4_global, group_floor;
	double r_fp8_scale, r_fp4_global; // 1 / fp8_scale, 1 / fp4_global (tpfc::div_by)
	int group;
	int64_t hidden;
};

// What a row's finish reads besides the sum: its residual chunks and the
// gamma chunks, loaded before the sum is waited for so that their latency
// overlaps the wait.
template <int CPT = kMaxChunksPerThread> struct RowInT {
	uint4 res[CPT];
	uint4 gam[CPT];
};
using RowIn = RowInT<>;

// A load and a store evict-first (__ldcs / __stcs) where S, plain
// otherwise: for data a kernel touches once.
template <bool S, typename V> __device__ inline V get(const V *src)
{
	return S ? __ldcs(src) : *src;
}
template <bool S, typename V> __device__ inline void put(V *dst, V v)
{
	if (S)
		__stcs(dst, v);
	else
		*dst = v;
}

// STREAM: the residual is read once, so it is loaded evict-first (__ldcs)
// and leaves L2 to what the peers write.  RES false: gamma only (a row
// whose residual the owner has already added: the two-shot gather).
template <typename T, int CPT = kMaxChunksPerThread, bool STREAM = false, bool RES = true>
__device__ inline void load_row_in(const NormOut &o, int64_t row, int chunks, RowInT<CPT> &in)
{
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
		if (RES && o.residual)
			in.res[k] = get<STREAM>(reinterpret_cast<const uint4 *>(o.residual) + row * chunks + c);
		if (o.gamma)
			in.gam[k] = reinterpret_cast<const uint4 *>(o.gamma)[c];
	}
}

// The sum of squares of a row that the block holds CPT chunks a thread
// (chunk c in thread c % blockDim.x), in an order fixed by the chunks
// alone, not by the block size: each chunk's values in order, each run of
// 32 neighbouring chunks by a warp's butterfly, those runs' sums (at most
// 64) by lane, two runs a lane, and a butterfly.  So the kMaxThreads-thread
// instances (up to four chunks a thread) and the wide ones (one) give the
// same bits.  One barrier; `scratch` holds 128 floats whose halves
// successive calls alternate (`phase`), as in block_sum.
template <typename T, int CPT>
__device__ inline float chunks_sumsq(float (*acc)[8], int chunks, float *scratch, int &phase)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
	float *runs = scratch + 64 * phase;
	phase ^= 1;
	int nruns = 0;
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		if (k * (int)blockDim.x >= chunks)
			break; // uniform over the block
		const int c = threadIdx.x + k * blockDim.x;
		float v = 0.f;
		if (c < chunks) {
#pragma unroll
			for (int i = 0; i < N; i++)
				v += acc[k][i] * acc[k][i];
		}
		for (int o = 16; o > 0; o >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, o);
		if (lane == 0)
			runs[warp + k * nw] = v; // run c / 32
		nruns = (k + 1) * nw;
	}
	__syncthreads();
	float s = lane < nruns ? runs[lane] : 0.f;
	if (lane + 32 < nruns)
		s += runs[lane + 32];
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	return s;
}

// The largest magnitude of chunk c's N values v over the `span`
// neighbouring chunks of its block, held by neighbouring lanes (their
// maxima meet through shuffles; every lane of the warp takes part, a lane
// past the row with nothing of its own).
template <typename T> __device__ inline float chunk_amax(const float *v, int c, int chunks, int span)
{
	constexpr int N = Elem<T>::kPerChunk;
	float amax = 0.f;
	if (c < chunks) {
#pragma unroll
		for (int i = 0; i < N; i++)
			amax = fmaxf(amax, fabsf(v[i]));
	}
	for (int m = 1; m < span; m <<= 1)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
	return amax;
}

// NVFP4 output of one row (docs/ops.md, AllReduceRMSNormQuant "nvfp4"):
// per block of 16 along the row, the E4M3 scale amax / 6 / global and the
// e2m1 codes of norm / (scale * global), the norm rounded to T first (acc
// holds it: finish_row); a block spans 16 / N neighbouring chunks.
template <typename T, int CPT = kMaxChunksPerThread, bool STREAM = false>
__device__ inline void finish_fp4(float (*acc)[8], int64_t row, int chunks, const NormOut &o)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * o.hidden;
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (k * (int)blockDim.x >= chunks)
			break; // uniform over the block: no lane has a chunk here
		const float *v = acc[k];
		const float amax = chunk_amax<T>(v, c, chunks, 16 / N);
		if (c >= chunks)
			continue;
		const __nv_fp8_storage_t s8 = __nv_cvt_float_to_fp8(
			tpfc::div_by(tpfc::div_by(amax, 1.0 / 6.0), o.r_fp4_global), __NV_SATFINITE, __NV_E4M3);
		const float sb = __half2float(__half(__nv_cvt_fp8_to_halfraw(s8, __NV_E4M3))) * o.fp4_global;
		const int64_t e0 = base + (int64_t)c * N;
		if (c % (16 / N) == 0)
			reinterpret_cast<uint8_t *>(o.fp4_scales)[e0 / 16] = (uint8_t)s8;
		uint32_t packed = 0;
		if (sb != 0) { // a zero scale codes every value as +0
			const double rsb = tpfc::rcp_double(sb);
#pragma unroll
			for (int i = 0; i < N; i++)
				packed |= tpfc::f_to_e2m1(tpfc::div_by(v[i], rsb)) << (4 * i);
		}
		uint8_t *dst = reinterpret_cast<uint8_t *>(o.fp4_out) + e0 / 2;
		if (N == 8)
			put<STREAM>(reinterpret_cast<uint32_t *>(dst), packed);
		else
			put<STREAM>(reinterpret_cast<unsigned short *>(dst), (unsigned short)packed);
	}
}

// FP8 per group of o.group values (docs/ops.md, AllReduceRMSNormQuant
// "fp8-group"): the float32 scale max(amax / 448, floor) and the E4M3 codes
// of norm / scale, the norm rounded to T first (acc holds it: finish_row).
// A group spans o.group / N neighbouring chunks (at most a warp's lanes,
// checked on the host).
template <typename T, int CPT = kMaxChunksPerThread, bool STREAM = false>
__device__ inline void finish_fp8_group(float (*acc)[8], int64_t row, int chunks, const NormOut &o)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * o.hidden;
	const int span = o.group / N;
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (k * (int)blockDim.x >= chunks)
			break; // uniform over the block
		const float *v = acc[k];
		const float amax = chunk_amax<T>(v, c, chunks, span);
		if (c >= chunks)
			continue;
		float sc = tpfc::div_by(amax, 1.0 / 448.0);
		if (!(sc >= o.group_floor))
			sc = o.group_floor;
		const int64_t e0 = base + (int64_t)c * N;
		if (c % span == 0)
			o.group_scales[e0 / o.group] = sc;
		uint8_t q[8];
		const double rsc = tpfc::rcp_double(sc);
#pragma unroll
		for (int i = 0; i < N; i++)
			q[i] = (uint8_t)__nv_cvt_float_to_fp8(tpfc::div_by(v[i], rsc), __NV_SATFINITE, __NV_E4M3);
		uint8_t *dst = reinterpret_cast<uint8_t *>(o.group_out) + e0;
		if (N == 8)
			put<STREAM>(reinterpret_cast<uint2 *>(dst), *reinterpret_cast<uint2 *>(q));
		else
			put<STREAM>(reinterpret_cast<unsigned int *>(dst), *reinterpret_cast<unsigned int *>(q));
	}
}

// The outputs a kernel instance is compiled for (its template argument Q):
// any of them (checked at run time), the bare all-reduce / norm / FP8 per
// tensor, or one block quantization (with the norm).  An instance with
// every output is several times larger and measured slower even where the
// block quantizations are not asked (2x H100, one-shot 1 x 8192 norm only
// 5.33 us against 5.14 specialized, FP8 6.02 against 5.85).
enum QuantKind { kQAny = 0, kQPlain = 1, kQFp4 = 2, kQGroup = 3 };

// The instance for a call's outputs.
inline int quant_kind(const NormOut &o)
{
	const int n = !!o.fp8_out + !!o.fp4_out + !!o.group_out;
	return n > 1 ? kQAny : o.fp4_out ? kQFp4 : o.group_out ? kQGroup : kQPlain;
}

// One chunk's residual add: a = round(a + residual), the residual sum.
template <typename T> __device__ inline void add_residual(float *a, uint4 res)
{
	float r[8];
	unpack<T>(res, r);
#pragma unroll
	for (int i = 0; i < Elem<T>::kPerChunk; i++)
		a[i] = round_to<T>(a[i] + r[i]);
}

// Finishes one row held in registers: acc holds x (already rounded to T),
// `in` the row's residual and gamma (load_row_in).  Q: QuantKind.
// STREAM: the sum, the norm and the quantized codes are stored evict-first
// (__stcs).
// RES false: acc already holds the residual sum (add_residual).
template <typename T, int Q = kQAny, int CPT = kMaxChunksPerThread, bool STREAM = false, bool RES = true>
__device__ inline void finish_row(float (*acc)[8], const RowInT<CPT> &in, int64_t row, int chunks, const NormOut &o,
				  float *scratch, int &phase)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * (o.hidden / N);
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
		if (RES && o.residual)
			add_residual<T>(acc[k], in.res[k]);
		// the sum (with no residual: the bare reduced value) for its other users
		if (o.residual_out)
			put<STREAM>(reinterpret_cast<uint4 *>(o.residual_out) + base + c, pack<T>(acc[k]));
	}
	if (!o.gamma)
		return; // a bare all-reduce: no norm (uniform over the block)
	constexpr bool fp8 = Q == kQAny || Q == kQPlain, fp4 = Q == kQAny || Q == kQFp4,
		       group = Q == kQAny || Q == kQGroup;
	// the block quantizations take their scales over the rounded norm,
	// which acc holds for them after this loop
	const bool blocks = (fp4 && o.fp4_out) || (group && o.group_out);
	float total = chunks_sumsq<T, CPT>(acc, chunks, scratch, phase);
	float inv = rsqrtf(total / (float)o.hidden + o.eps);
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
		float g[8], y[8];
		unpack<T>(in.gam[k], g);
#pragma unroll
		for (int i = 0; i < N; i++) // docs/ops.md: computed in float, rounded once
			y[i] = acc[k][i] * inv * (g[i] + o.weight_offset);
		if (o.norm_out)
			put<STREAM>(reinterpret_cast<uint4 *>(o.norm_out) + base + c, pack<T>(y));
		if (fp8 && o.fp8_out) {
			uint8_t q[8];
#pragma unroll
			for (int i = 0; i < N; i++) {
				float v = tpfc::div_by(round_to<T>(y[i]), o.r_fp8_scale);
				q[i] = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
			}
			uint8_t *dst = reinterpret_cast<uint8_t *>(o.fp8_out) + (base + c) * N;
			if (N == 8)
				put<STREAM>(reinterpret_cast<uint2 *>(dst), *reinterpret_cast<uint2 *>(q));
			else
				put<STREAM>(reinterpret_cast<unsigned int *>(dst), *reinterpret_cast<unsigned int *>(q));
		}
		if (blocks)
#pragma unroll
			for (int i = 0; i < N; i++)
				acc[k][i] = round_to<T>(y[i]);
	}
	if (fp4 && o.fp4_out)
		finish_fp4<T, CPT, STREAM>(acc, row, chunks, o);
	if (group && o.group_out)
		finish_fp8_group<T, CPT, STREAM>(acc, row, chunks, o);
}

// Loads the 16-byte chunks of `row` this thread handles.
template <typename T, int CPT = kMaxChunksPerThread>
__device__ inline void load_chunks(const void *x, int64_t row, int chunks, uint4 *v)
{
#pragma unroll
	for (int k = 0; k < CPT; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (c < chunks)
			v[k] = reinterpret_cast<const uint4 *>(x)[row * chunks + c];
	}
}

inline int elem_size(enum tpf_dtype dt)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		return 4;
	case TPF_DTYPE_FLOAT16:
	case TPF_DTYPE_BFLOAT16:
		return 2;
	default:
		return 0;
	}
}

inline enum tpf_status cuda_fail(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "cuda: %s: %s", what, cudaGetErrorString(e));
}

// Threads per block for a row of `chunks` 16-byte chunks.
inline int row_threads(int chunks)
{
	int t = chunks < kMaxThreads ? chunks : kMaxThreads;
	t = (t + 31) / 32 * 32;
	return t < 32 ? 32 : t;
}

inline enum tpf_status check_norm_args(const struct tpf_cuda_norm_args *a, struct tpf_diag *d, int *chunks)
{
	int es = elem_size(a->dtype);
	if (!es)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda norm: dtype %s is not supported (float, float16, bfloat16)",
				     tpf_dtype_name(a->dtype));
	if (a->hidden <= 0 || a->rows < 0 || (a->hidden * es) % 16 != 0)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "cuda norm: hidden size %lld must be a positive multiple of %d",
				     (long long)a->hidden, 16 / es);
	int64_t c = a->hidden * es / 16;
	if (c > (int64_t)kMaxThreads * kMaxChunksPerThread)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda norm: hidden size %lld is too large (at most %d)",
				     (long long)a->hidden, kMaxThreads * kMaxChunksPerThread * 16 / es);
	if (a->group_out) {
		const int64_t per = 16 / es, span = a->group / (per ? per : 1);
		if (a->group <= 0 || a->group % per || span > 32 || (span & (span - 1)) || a->hidden % a->group ||
		    !a->group_scales || !a->gamma || !(a->group_floor >= 0))
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
					     "cuda norm: FP8 groups of %lld need a hidden size (%lld) of whole groups, a "
					     "group of 1 to 32 16-byte chunks (a power of two), group scales and gamma",
					     (long long)a->group, (long long)a->hidden);
	}
	if (a->fp4_out && (a->hidden % 16 || !a->fp4_scales || !a->gamma || !(a->fp4_global > 0)))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "cuda norm: NVFP4 needs a hidden size that is a multiple of 16 (not %lld), block "
				     "scales, gamma and a positive global scale",
				     (long long)a->hidden);
	*chunks = (int)c;
	return TPF_OK;
}

inline NormOut norm_out_of(const struct tpf_cuda_norm_args *a)
{
	NormOut o;
	o.residual = a->residual;
	o.gamma = a->gamma;
	o.norm_out = a->norm_out;
	o.residual_out = a->residual_out;
	o.fp8_out = a->fp8_out;
	o.eps = a->epsilon;
	o.weight_offset = a->weight_offset;
	o.r_fp8_scale = 1.0 / (double)a->fp8_scale;
	o.r_fp4_global = 1.0 / (double)a->fp4_global;
	o.fp4_out = a->fp4_out;
	o.fp4_scales = a->fp4_scales;
	o.fp4_global = a->fp4_global;
	o.group_out = a->group_out;
	o.group_scales = (float *)a->group_scales;
	o.group_floor = a->group_floor;
	o.group = (int)a->group;
	o.hidden = a->hidden;
	return o;
}

inline int grid_for(int64_t rows)
{
	return (int)(rows < 65535 * 16 ? rows : 65535 * 16);
}

} // namespace

#endif // TPF_AR_NORM_CUH
