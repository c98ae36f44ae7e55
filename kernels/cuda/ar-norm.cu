// SPDX-License-Identifier: MIT
// Residual add + RMSNorm (+ FP8) kernels, and the one-shot all-reduce that
// fuses them with the reduction through peer memory.  See tpf-cuda.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>

#include "cuda-common.cuh"
#include "tpf-cuda.h"

namespace {

constexpr int kMaxWorld = 8;
constexpr int kMaxChunksPerThread = 4; // 16-byte chunks a thread keeps in registers
constexpr int kMaxThreads = 512;

template <typename T> struct Elem;
template <> struct Elem<float> {
	static constexpr int kPerChunk = 4;
	__device__ static float load(float v) { return v; }
	__device__ static float store(float v) { return v; }
};
template <> struct Elem<__half> {
	static constexpr int kPerChunk = 8;
	__device__ static float load(__half v) { return __half2float(v); }
	__device__ static __half store(float v) { return __float2half_rn(v); }
};
template <> struct Elem<__nv_bfloat16> {
	static constexpr int kPerChunk = 8;
	__device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
	__device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

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

// Sum over the block; every thread gets the result.  `scratch` holds 33 floats.
__device__ inline float block_sum(float v, float *scratch)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	if (lane == 0)
		scratch[warp] = v;
	__syncthreads();
	if (warp == 0) {
		int nw = (blockDim.x + 31) >> 5;
		float s = lane < nw ? scratch[lane] : 0.f;
		for (int o = 16; o > 0; o >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, o);
		if (lane == 0)
			scratch[32] = s;
	}
	__syncthreads();
	float r = scratch[32];
	__syncthreads(); // scratch is reused by the next row
	return r;
}

struct NormOut {
	const void *residual;
	const void *gamma;
	void *norm_out, *residual_out, *fp8_out;
	void *fp4_out, *fp4_scales; // NVFP4: packed e2m1 pairs, one E4M3 scale per 16
	void *group_out;            // FP8 per group: codes, float32 scales
	float *group_scales;
	float eps, weight_offset, fp8_scale, fp4_global, group_floor;
	int group;
	int64_t hidden;
};

// The rounded norm of chunk c (v, N values) and the largest magnitude over
// the `span` neighbouring chunks of its block, held by neighbouring lanes
// (their maxima meet through shuffles; every lane of the warp takes part,
// a lane past the row with nothing of its own).
template <typename T>
__device__ inline float chunk_norm_amax(const float *acc, int c, int chunks, const NormOut &o, float inv, int span,
					float *v)
{
	constexpr int N = Elem<T>::kPerChunk;
	float amax = 0.f;
	if (c < chunks) {
		float g[8];
		unpack<T>(reinterpret_cast<const uint4 *>(o.gamma)[c], g);
#pragma unroll
		for (int i = 0; i < N; i++) {
			v[i] = round_to<T>(acc[i] * inv * (g[i] + o.weight_offset));
			amax = fmaxf(amax, fabsf(v[i]));
		}
	}
	for (int m = 1; m < span; m <<= 1)
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
	return amax;
}

// NVFP4 output of one row (docs/ops.md, AllReduceRMSNormQuant "nvfp4"):
// per block of 16 along the row, the E4M3 scale amax / 6 / global and the
// e2m1 codes of norm / (scale * global), the norm rounded to T first; a
// block spans 16 / N neighbouring chunks.
template <typename T>
__device__ inline void finish_fp4(float (*acc)[8], int64_t row, int chunks, const NormOut &o, float inv)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * o.hidden;
#pragma unroll
	for (int k = 0; k < kMaxChunksPerThread; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (k * (int)blockDim.x >= chunks)
			break; // uniform over the block: no lane has a chunk here
		float v[8];
		const float amax = chunk_norm_amax<T>(acc[k], c, chunks, o, inv, 16 / N, v);
		if (c >= chunks)
			continue;
		const __nv_fp8_storage_t s8 = __nv_cvt_float_to_fp8(amax / 6.0f / o.fp4_global, __NV_SATFINITE, __NV_E4M3);
		const float sb = __half2float(__half(__nv_cvt_fp8_to_halfraw(s8, __NV_E4M3))) * o.fp4_global;
		const int64_t e0 = base + (int64_t)c * N;
		if (c % (16 / N) == 0)
			reinterpret_cast<uint8_t *>(o.fp4_scales)[e0 / 16] = (uint8_t)s8;
		uint32_t packed = 0;
#pragma unroll
		for (int i = 0; i < N; i += 2) {
			unsigned lo = tpfc::f_to_e2m1(sb != 0 ? v[i] / sb : 0.f);
			unsigned hi = tpfc::f_to_e2m1(sb != 0 ? v[i + 1] / sb : 0.f);
			packed |= (lo | (hi << 4)) << (4 * i);
		}
		uint8_t *dst = reinterpret_cast<uint8_t *>(o.fp4_out) + e0 / 2;
		if (N == 8)
			*reinterpret_cast<uint32_t *>(dst) = packed;
		else
			*reinterpret_cast<uint16_t *>(dst) = (uint16_t)packed;
	}
}

// FP8 per group of o.group values (docs/ops.md, AllReduceRMSNormQuant
// "fp8-group"): the float32 scale max(amax / 448, floor) and the E4M3 codes
// of norm / scale, the norm rounded to T first.  A group spans o.group / N
// neighbouring chunks (at most a warp's lanes, checked on the host).
template <typename T>
__device__ inline void finish_fp8_group(float (*acc)[8], int64_t row, int chunks, const NormOut &o, float inv)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * o.hidden;
	const int span = o.group / N;
#pragma unroll
	for (int k = 0; k < kMaxChunksPerThread; k++) {
		const int c = threadIdx.x + k * blockDim.x;
		if (k * (int)blockDim.x >= chunks)
			break; // uniform over the block
		float v[8];
		const float amax = chunk_norm_amax<T>(acc[k], c, chunks, o, inv, span, v);
		if (c >= chunks)
			continue;
		float sc = amax / 448.0f;
		if (!(sc >= o.group_floor))
			sc = o.group_floor;
		const int64_t e0 = base + (int64_t)c * N;
		if (c % span == 0)
			o.group_scales[e0 / o.group] = sc;
		uint8_t q[8];
#pragma unroll
		for (int i = 0; i < N; i++)
			q[i] = (uint8_t)__nv_cvt_float_to_fp8(v[i] / sc, __NV_SATFINITE, __NV_E4M3);
		uint8_t *dst = reinterpret_cast<uint8_t *>(o.group_out) + e0;
		if (N == 8)
			*reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<uint2 *>(q);
		else
			*reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<uint32_t *>(q);
	}
}

// Finishes one row held in registers: acc holds x (already rounded to T).
template <typename T>
__device__ inline void finish_row(float (*acc)[8], int64_t row, int chunks, const NormOut &o,
				  float *scratch)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t base = row * (o.hidden / N);
	float sumsq = 0.f;
#pragma unroll
	for (int k = 0; k < kMaxChunksPerThread; k++) {
		int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
		if (o.residual) {
			float r[8];
			unpack<T>(reinterpret_cast<const uint4 *>(o.residual)[base + c], r);
#pragma unroll
			for (int i = 0; i < N; i++)
				acc[k][i] = round_to<T>(acc[k][i] + r[i]);
		}
		// the sum (with no residual: the bare reduced value) for its other users
		if (o.residual_out)
			reinterpret_cast<uint4 *>(o.residual_out)[base + c] = pack<T>(acc[k]);
#pragma unroll
		for (int i = 0; i < N; i++)
			sumsq += acc[k][i] * acc[k][i];
	}
	if (!o.gamma)
		return; // a bare all-reduce: no norm (uniform over the block)
	float total = block_sum(sumsq, scratch);
	float inv = rsqrtf(total / (float)o.hidden + o.eps);
#pragma unroll
	for (int k = 0; k < kMaxChunksPerThread; k++) {
		int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
		float g[8], y[8];
		unpack<T>(reinterpret_cast<const uint4 *>(o.gamma)[c], g);
#pragma unroll
		for (int i = 0; i < N; i++) // docs/ops.md: computed in float, rounded once
			y[i] = acc[k][i] * inv * (g[i] + o.weight_offset);
		if (o.norm_out)
			reinterpret_cast<uint4 *>(o.norm_out)[base + c] = pack<T>(y);
		if (o.fp8_out) {
			uint8_t q[8];
#pragma unroll
			for (int i = 0; i < N; i++) {
				float v = round_to<T>(y[i]) / o.fp8_scale;
				q[i] = (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
			}
			uint8_t *dst = reinterpret_cast<uint8_t *>(o.fp8_out) + (base + c) * N;
			if (N == 8)
				*reinterpret_cast<uint2 *>(dst) = *reinterpret_cast<uint2 *>(q);
			else
				*reinterpret_cast<uint32_t *>(dst) = *reinterpret_cast<uint32_t *>(q);
		}
	}
	if (o.fp4_out)
		finish_fp4<T>(acc, row, chunks, o, inv);
	if (o.group_out)
		finish_fp8_group<T>(acc, row, chunks, o, inv);
}

// Local residual add + norm: one block per row (grid-stride).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) add_rmsnorm_kernel(const void *x, int64_t rows, NormOut o)
{
	__shared__ float scratch[33];
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(o.hidden / N);
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		float acc[kMaxChunksPerThread][8];
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c < chunks)
				unpack<T>(reinterpret_cast<const uint4 *>(x)[row * chunks + c], acc[k]);
		}
		finish_row<T>(acc, row, chunks, o, scratch);
	}
}

template <typename T> __global__ void add_kernel(const T *a, const T *b, T *out, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		out[i] = Elem<T>::store(Elem<T>::load(a[i]) + Elem<T>::load(b[i]));
}

template <typename T> __global__ void quant_fp8_kernel(const T *x, uint8_t *out, int64_t n, float scale)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x)
		out[i] = (uint8_t)__nv_cvt_float_to_fp8(Elem<T>::load(x[i]) / scale, __NV_SATFINITE,
							__NV_E4M3);
}

// ---------------------------------------------------------------- one-shot

struct ArState {
	unsigned iter;                   // calls completed
	unsigned done;                   // blocks finished in the current call
	unsigned timed_out;              // a wait gave up (sticky: later waits give up at once)
	unsigned pad;
	unsigned long long red_bytes[3]; // bytes per source slot written by the call that used buffer b
	unsigned long long gat_bytes[3]; // bytes of the gather slot written by that call,
	unsigned long long gat_skip[3][2]; // but for this byte range (the rows it owned)
};

// Buffer b of a rank's receive area: world source slots, then one gather slot.
struct ArParams {
	char *peer[kMaxWorld]; // receive area of each rank, as mapped here
	int rank, world;
	size_t slot_bytes;     // one slot of one buffer
	ArState *state;
	unsigned long long timeout_ns; // a wait gives up after this long
	const void *x;
	int64_t rows;
	NormOut o;

	__device__ size_t slot(int b, int q) const { return ((size_t)b * (world + 1) + q) * slot_bytes; }
};

__device__ inline unsigned long long now_ns()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Waits until the 16 bytes at src hold no placeholder.  Gives up (false,
// v zeroed) after p.timeout_ns, or at once after any earlier wait of this
// context gave up, so that a rank whose peer never arrives ends its kernel
// and the host reports it instead of hanging.
template <typename T> __device__ inline bool wait16(const uint4 *src, uint4 &v, const ArParams &p)
{
	v = load_volatile(src);
	if (!has_placeholder<T>(v))
		return true;
	const unsigned long long t0 = now_ns();
	for (unsigned spins = 1;; spins++) {
		v = load_volatile(src);
		if (!has_placeholder<T>(v))
			return true;
		if ((spins & 255u) == 0) {
			if (*reinterpret_cast<volatile unsigned *>(&p.state->timed_out) ||
			    now_ns() - t0 > p.timeout_ns) {
				atomicExch(&p.state->timed_out, 1u);
				v = make_uint4(0, 0, 0, 0);
				return false;
			}
		}
	}
}

// The start of every peer-memory kernel: with programmatic dependent
// launch the grid may start before the previous kernel of the stream has
// finished; nothing is read or written before that kernel's results are
// visible.  The stream's next kernel may start at once (launch_dependents:
// a GEMV launched as a dependent loads its first weight rows while this one
// waits for the peers).  Returns the call counter.
__device__ inline unsigned call_start(const ArParams &p, unsigned *s_iter)
{
	tpfc::pdl_trigger();
	tpfc::pdl_wait();
	if (threadIdx.x == 0)
		*s_iter = *reinterpret_cast<volatile unsigned *>(&p.state->iter);
	__syncthreads();
	return *s_iter;
}

// The end of every peer-memory kernel: resets what the previous call wrote
// into this rank's buffers (no rank writes that buffer again before every
// rank has finished the next call), and the last block to finish records
// what this call wrote and advances the counter.  `word` is the
// placeholder, `red`/`gat` this call's bytes per source slot and of the
// gather slot (whole 16-byte units).
__device__ inline void call_end(const ArParams &p, unsigned iter, uint32_t word, unsigned long long red,
				unsigned long long gat, unsigned long long skip0 = 0, unsigned long long skip1 = 0)
{
	const int b = (int)(iter % 3), pb = (b + 2) % 3;
	char *own = p.peer[p.rank];
	const uint4 fill = make_uint4(word, word, word, word);
	const size_t per_slot = (size_t)(p.state->red_bytes[pb] / 16);
	const size_t s0 = (size_t)(p.state->gat_skip[pb][0] / 16), s1 = (size_t)(p.state->gat_skip[pb][1] / 16);
	const size_t gather = (size_t)(p.state->gat_bytes[pb] / 16) - (s1 - s0);
	const size_t total = per_slot * p.world + gather;
	uint4 *gslot = reinterpret_cast<uint4 *>(own + p.slot(pb, p.world));
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
		if (i < per_slot * p.world) {
			reinterpret_cast<uint4 *>(own + p.slot(pb, (int)(i / per_slot)))[i % per_slot] = fill;
		} else {
			size_t j = i - per_slot * p.world;
			gslot[j < s0 ? j : j + (s1 - s0)] = fill;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		unsigned finished = atomicAdd(&p.state->done, 1u);
		if (finished == gridDim.x - 1) {
			p.state->red_bytes[b] = red;
			p.state->gat_bytes[b] = gat;
			p.state->gat_skip[b][0] = skip0;
			p.state->gat_skip[b][1] = skip1;
			p.state->done = 0;
			__threadfence();
			atomicExch(&p.state->iter, iter + 1);
		}
	}
}

// Sums slot q = 0..world-1 of row `lrow` (in rank order, the same on every
// rank, so that every rank's result is bit-identical) into acc, rounded to T.
// (Issuing several slots' loads before checking any measured no faster on
// 2x H100: 6.64 us against 6.05 at 1 x 4096.)
template <typename T>
__device__ inline void sum_slots(const ArParams &p, int b, int64_t lrow, int chunks, float (*acc)[8])
{
	constexpr int N = Elem<T>::kPerChunk;
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	const char *own = p.peer[p.rank];
#pragma unroll
	for (int k = 0; k < kMaxChunksPerThread; k++) {
		int c = threadIdx.x + k * blockDim.x;
		if (c >= chunks)
			continue;
#pragma unroll
		for (int i = 0; i < 8; i++)
			acc[k][i] = 0.f;
		for (int q = 0; q < p.world; q++) {
			uint4 v;
			wait16<T>(reinterpret_cast<const uint4 *>(own + p.slot(b, q) + lrow * row_bytes + (size_t)c * 16), v, p);
			float f[8];
			unpack<T>(v, f);
#pragma unroll
			for (int i = 0; i < N; i++)
				acc[k][i] += f[i];
		}
#pragma unroll
		for (int i = 0; i < N; i++)
			acc[k][i] = round_to<T>(acc[k][i]); // the all-reduce result is a T tensor
	}
}

// One-shot: every rank stores its rows into slot `rank` of every rank's
// buffer, then reduces all rows itself.
template <typename T> __global__ void __launch_bounds__(kMaxThreads) arnorm_oneshot_kernel(ArParams p)
{
	__shared__ float scratch[33];
	__shared__ unsigned s_iter;
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.o.hidden / N);
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	const unsigned iter = call_start(p, &s_iter);
	const int b = (int)(iter % 3);

	// 1. push this rank's rows into slot `rank` of buffer b of every rank
	//    (all of them first: a block waits for the peers' rows only after
	//    its own are on their way, so the waits overlap)
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			uint4 v = scrub<T>(reinterpret_cast<const uint4 *>(p.x)[row * chunks + c]);
			size_t off = p.slot(b, p.rank) + row * row_bytes + (size_t)c * 16;
			for (int q = 0; q < p.world; q++)
				store_volatile(reinterpret_cast<uint4 *>(p.peer[q] + off), v);
		}
	}
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
		// 2. wait for every rank's row in our buffer b, sum in float
		float acc[kMaxChunksPerThread][8];
		sum_slots<T>(p, b, row, chunks, acc);
		// 3. residual, norm, quantization in registers
		finish_row<T>(acc, row, chunks, p.o, scratch);
	}
	call_end(p, iter, placeholder_word<T>(), (unsigned long long)p.rows * row_bytes, 0);
}

// Two-shot: rank q owns rows [q*per, (q+1)*per).  1. every rank stores each
// row into slot `rank` of the owner's buffer (a reduce-scatter); 2. each
// owner sums its rows, stores the rounded sums into the gather slot of every
// rank's buffer (an all-gather) and finishes them; 3. every rank finishes
// the rows it does not own from its gather slot.  Each rank moves
// 2 x (world-1)/world of the tensor instead of (world-1) times it; the
// residual add, norm and quantization run on every rank from the same
// summed rows, so the outputs are the same everywhere.  No wait depends on
// a later phase, and the grid is resident as a whole, so it cannot deadlock.
template <typename T> __global__ void __launch_bounds__(kMaxThreads) arnorm_twoshot_kernel(ArParams p)
{
	__shared__ float scratch[33];
	__shared__ unsigned s_iter;
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.o.hidden / N);
	const size_t row_bytes = (size_t)p.o.hidden * sizeof(T);
	const unsigned iter = call_start(p, &s_iter);
	const int b = (int)(iter % 3);
	const int64_t per = (p.rows + p.world - 1) / p.world;
	const int64_t mine0 = (int64_t)p.rank * per;
	const int64_t mine1 = mine0 + per < p.rows ? mine0 + per : p.rows;
	const int64_t n_mine = mine1 > mine0 ? mine1 - mine0 : 0;

	// 1. scatter: row r to its owner's slot `rank`, at the owner's local row
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
		const int owner = (int)(row / per);
		const size_t off = p.slot(b, p.rank) + (row - owner * per) * row_bytes;
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c < chunks)
				store_volatile(reinterpret_cast<uint4 *>(p.peer[owner] + off + (size_t)c * 16),
					       scrub<T>(reinterpret_cast<const uint4 *>(p.x)[row * chunks + c]));
		}
	}
	// 2. reduce the owned rows, gather them to every rank, finish them
	for (int64_t j = blockIdx.x; j < n_mine; j += gridDim.x) {
		const int64_t row = mine0 + j;
		float acc[kMaxChunksPerThread][8];
		sum_slots<T>(p, b, j, chunks, acc);
		const size_t off = p.slot(b, p.world) + row * row_bytes;
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			// the owner finishes from what it sends (-0.0 scrubbed too), so
			// that every rank's outputs are bit-identical
			uint4 v = scrub<T>(pack<T>(acc[k]));
			unpack<T>(v, acc[k]);
			for (int q = 0; q < p.world; q++)
				if (q != p.rank)
					store_volatile(reinterpret_cast<uint4 *>(p.peer[q] + off + (size_t)c * 16), v);
		}
		finish_row<T>(acc, row, chunks, p.o, scratch);
	}
	// 3. the other ranks' rows from the gather slot
	const char *own = p.peer[p.rank];
	for (int64_t j = blockIdx.x; j < p.rows - n_mine; j += gridDim.x) {
		const int64_t row = j < mine0 ? j : j + n_mine;
		float acc[kMaxChunksPerThread][8];
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++) {
			int c = threadIdx.x + k * blockDim.x;
			if (c >= chunks)
				continue;
			uint4 v;
			wait16<T>(reinterpret_cast<const uint4 *>(own + p.slot(b, p.world) + row * row_bytes + (size_t)c * 16), v, p);
			unpack<T>(v, acc[k]);
		}
		finish_row<T>(acc, row, chunks, p.o, scratch);
	}
	call_end(p, iter, placeholder_word<T>(), (unsigned long long)per * row_bytes,
		 (unsigned long long)p.rows * row_bytes, (unsigned long long)mine0 * row_bytes,
		 (unsigned long long)(mine0 + n_mine) * row_bytes);
}

template <typename T> __global__ void fill_placeholder_kernel(uint4 *p, size_t n)
{
	const uint32_t w = placeholder_word<T>();
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = make_uint4(w, w, w, w);
}

int elem_size(enum tpf_dtype dt)
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

enum tpf_status cuda_fail(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "cuda: %s: %s", what, cudaGetErrorString(e));
}

// Threads per block for a row of `chunks` 16-byte chunks.
int row_threads(int chunks)
{
	int t = chunks < kMaxThreads ? chunks : kMaxThreads;
	t = (t + 31) / 32 * 32;
	return t < 32 ? 32 : t;
}

enum tpf_status check_norm_args(const struct tpf_cuda_norm_args *a, struct tpf_diag *d, int *chunks)
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

NormOut norm_out_of(const struct tpf_cuda_norm_args *a)
{
	NormOut o;
	o.residual = a->residual;
	o.gamma = a->gamma;
	o.norm_out = a->norm_out;
	o.residual_out = a->residual_out;
	o.fp8_out = a->fp8_out;
	o.eps = a->epsilon;
	o.weight_offset = a->weight_offset;
	o.fp8_scale = a->fp8_scale;
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

int grid_for(int64_t rows)
{
	return (int)(rows < 65535 * 16 ? rows : 65535 * 16);
}

} // namespace

extern "C" enum tpf_status tpf_cuda_add_rmsnorm(const struct tpf_cuda_norm_args *a, void *stream,
						struct tpf_diag *d)
{
	int chunks;
	enum tpf_status st = check_norm_args(a, d, &chunks);
	if (st != TPF_OK || a->rows == 0)
		return st;
	NormOut o = norm_out_of(a);
	cudaStream_t s = (cudaStream_t)stream;
	int threads = row_threads(chunks);
	switch (a->dtype) {
	case TPF_DTYPE_FLOAT:
		add_rmsnorm_kernel<float><<<grid_for(a->rows), threads, 0, s>>>(a->x, a->rows, o);
		break;
	case TPF_DTYPE_FLOAT16:
		add_rmsnorm_kernel<__half><<<grid_for(a->rows), threads, 0, s>>>(a->x, a->rows, o);
		break;
	default:
		add_rmsnorm_kernel<__nv_bfloat16><<<grid_for(a->rows), threads, 0, s>>>(a->x, a->rows, o);
		break;
	}
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "add_rmsnorm launch", e);
}

extern "C" enum tpf_status tpf_cuda_rmsnorm(enum tpf_dtype dt, const void *x, const void *gamma, void *out,
					    int64_t rows, int64_t hidden, float epsilon, float weight_offset,
					    void *stream, struct tpf_diag *d)
{
	struct tpf_cuda_norm_args a;
	memset(&a, 0, sizeof(a));
	a.dtype = dt;
	a.rows = rows;
	a.hidden = hidden;
	a.x = x;
	a.gamma = gamma;
	a.norm_out = out;
	a.epsilon = epsilon;
	a.weight_offset = weight_offset;
	return tpf_cuda_add_rmsnorm(&a, stream, d);
}

extern "C" enum tpf_status tpf_cuda_add(enum tpf_dtype dt, const void *a, const void *b, void *out,
					int64_t n, void *stream, struct tpf_diag *d)
{
	if (n <= 0)
		return TPF_OK;
	cudaStream_t s = (cudaStream_t)stream;
	int threads = 256;
	int64_t blocks64 = (n + threads - 1) / threads;
	int blocks = (int)(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		add_kernel<float><<<blocks, threads, 0, s>>>((const float *)a, (const float *)b, (float *)out, n);
		break;
	case TPF_DTYPE_FLOAT16:
		add_kernel<__half><<<blocks, threads, 0, s>>>((const __half *)a, (const __half *)b, (__half *)out, n);
		break;
	case TPF_DTYPE_BFLOAT16:
		add_kernel<__nv_bfloat16><<<blocks, threads, 0, s>>>(
			(const __nv_bfloat16 *)a, (const __nv_bfloat16 *)b, (__nv_bfloat16 *)out, n);
		break;
	default:
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda add: dtype %s is not supported", tpf_dtype_name(dt));
	}
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "add launch", e);
}

extern "C" enum tpf_status tpf_cuda_quantize_fp8(enum tpf_dtype dt, const void *x, void *out, int64_t n,
						 float scale, void *stream, struct tpf_diag *d)
{
	if (n <= 0)
		return TPF_OK;
	cudaStream_t s = (cudaStream_t)stream;
	int threads = 256;
	int64_t blocks64 = (n + threads - 1) / threads;
	int blocks = (int)(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		quant_fp8_kernel<float><<<blocks, threads, 0, s>>>((const float *)x, (uint8_t *)out, n, scale);
		break;
	case TPF_DTYPE_FLOAT16:
		quant_fp8_kernel<__half><<<blocks, threads, 0, s>>>((const __half *)x, (uint8_t *)out, n, scale);
		break;
	case TPF_DTYPE_BFLOAT16:
		quant_fp8_kernel<__nv_bfloat16><<<blocks, threads, 0, s>>>((const __nv_bfloat16 *)x, (uint8_t *)out, n, scale);
		break;
	default:
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda quantize: dtype %s is not supported", tpf_dtype_name(dt));
	}
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "quantize launch", e);
}

// ---------------------------------------------------------------- one-shot host side

struct tpf_cuda_arnorm {
	int rank, world;
	enum tpf_dtype dtype;
	size_t max_elems, slot_bytes;
	char *local;                 // our receive area (3 buffers x world slots)
	char *peer[kMaxWorld];       // every rank's receive area mapped here
	ArState *state;
	int max_grid;                // blocks that are surely resident together
	unsigned long long timeout_ns;
	bool pdl;                    // programmatic dependent launch
};

namespace {

// Launches a peer-memory kernel; with pdl, as a programmatic dependent of
// the stream's previous kernel (its launch overlaps that kernel's end; the
// kernel's griddepcontrol.wait keeps the data dependency).
template <typename... Args>
cudaError_t launch_peer(const struct tpf_cuda_arnorm *c, void (*kernel)(Args...), int grid, int threads,
			cudaStream_t s, Args... args)
{
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = dim3((unsigned)grid);
	cfg.blockDim = dim3((unsigned)threads);
	cfg.stream = s;
	cudaLaunchAttribute attr[1];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = 1;
	cfg.attrs = attr;
	cfg.numAttrs = c->pdl ? 1 : 0;
	return cudaLaunchKernelEx(&cfg, kernel, args...);
}

} // namespace

extern "C" void tpf_cuda_arnorm_free(struct tpf_cuda_arnorm *c)
{
	if (!c)
		return;
	for (int q = 0; q < c->world; q++)
		if (q != c->rank && c->peer[q])
			cudaIpcCloseMemHandle(c->peer[q]);
	if (c->local)
		cudaFree(c->local);
	if (c->state)
		cudaFree(c->state);
	tpf_free(c);
}

extern "C" size_t tpf_cuda_arnorm_max_elems(const struct tpf_cuda_arnorm *c)
{
	return c->max_elems;
}

// What each rank contributes to the exchange: its buffer's handle, or the
// news that it has none (so that every rank fails together).
struct PeerHandle {
	cudaIpcMemHandle_t handle;
	int ok;
};

namespace {

// Everything before the exchange: buffers, state, placeholders, handle.
enum tpf_status arnorm_prepare(struct tpf_cuda_arnorm *c, int es, cudaIpcMemHandle_t *mine, struct tpf_diag *d)
{
	c->slot_bytes = (c->max_elems * (size_t)es + 255) / 256 * 256;
	// 3 buffers of world source slots and one gather slot (two-shot)
	const size_t area = 3 * ((size_t)c->world + 1) * c->slot_bytes;
	cudaError_t e = cudaMalloc((void **)&c->local, area);
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce buffers", e);
	e = cudaMalloc((void **)&c->state, sizeof(ArState));
	if (e == cudaSuccess)
		e = cudaMemset(c->state, 0, sizeof(ArState));
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce state", e);
	size_t n = area / 16;
	if (c->dtype == TPF_DTYPE_FLOAT)
		fill_placeholder_kernel<float><<<1024, 256>>>((uint4 *)c->local, n);
	else
		fill_placeholder_kernel<__half><<<1024, 256>>>((uint4 *)c->local, n);
	e = cudaDeviceSynchronize();
	if (e != cudaSuccess)
		return cuda_fail(d, "one-shot all-reduce init", e);
	e = cudaIpcGetMemHandle(mine, c->local);
	if (e != cudaSuccess)
		return cuda_fail(d, "cudaIpcGetMemHandle", e);
	int dev = 0, sms = 0, per_sm = 0;
	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
	// The kernels at their largest block size; smaller blocks only fit more.
	int a1 = 0, a2 = 0;
	if (c->dtype == TPF_DTYPE_FLOAT) {
		cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a1, arnorm_oneshot_kernel<float>, kMaxThreads, 0);
		cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a2, arnorm_twoshot_kernel<float>, kMaxThreads, 0);
	} else {
		cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a1, arnorm_oneshot_kernel<__nv_bfloat16>, kMaxThreads, 0);
		cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a2, arnorm_twoshot_kernel<__nv_bfloat16>, kMaxThreads, 0);
	}
	per_sm = a1 < a2 ? a1 : a2;
	c->max_grid = sms * (per_sm > 0 ? per_sm : 1);
	return TPF_OK;
}

} // namespace

extern "C" enum tpf_status tpf_cuda_arnorm_create(int rank, int world, enum tpf_dtype dtype, size_t max_elems,
						  const struct tpf_cuda_exchange *ex,
						  struct tpf_cuda_arnorm **out, struct tpf_diag *d)
{
	*out = NULL;
	// Argument errors are the same on every rank: they return before the
	// exchange everywhere.
	int es = elem_size(dtype);
	if (!es)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "one-shot all-reduce: dtype %s is not supported",
				     tpf_dtype_name(dtype));
	if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "one-shot all-reduce: world size %d (rank %d) outside 1..%d",
				     world, rank, kMaxWorld);
	struct tpf_cuda_arnorm *c = (struct tpf_cuda_arnorm *)tpf_calloc(1, sizeof(*c));
	PeerHandle *all = (PeerHandle *)tpf_calloc((size_t)world, sizeof(PeerHandle));
	PeerHandle mine;
	memset(&mine, 0, sizeof(mine));
	enum tpf_status st = TPF_OK;
	if (!c || !all) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "one-shot all-reduce: out of memory");
	} else {
		c->rank = rank;
		c->world = world;
		c->dtype = dtype;
		c->max_elems = max_elems;
		c->timeout_ns = 60ull * 1000000000ull;
		const char *pdl = getenv("TPF_PDL");
		c->pdl = !(pdl && !strcmp(pdl, "0"));
		st = arnorm_prepare(c, es, &mine.handle, d);
	}
	mine.ok = st == TPF_OK;
	// Every rank takes part in the exchange, failed or not.
	PeerHandle scratch[kMaxWorld];
	if (ex->allgather(ex->ctx, &mine, all ? all : scratch, sizeof(mine)) != 0) {
		if (st == TPF_OK)
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "one-shot all-reduce: exchanging peer handles failed");
		goto out_fail;
	}
	if (st != TPF_OK)
		goto out_fail;
	for (int q = 0; q < world; q++)
		if (!all[q].ok) {
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "one-shot all-reduce: rank %d could not set up its buffer", q);
			goto out_fail;
		}
	for (int q = 0; q < world; q++) {
		if (q == rank) {
			c->peer[q] = c->local;
			continue;
		}
		void *p = NULL;
		cudaError_t e = cudaIpcOpenMemHandle(&p, all[q].handle, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "one-shot all-reduce: mapping rank %d's buffer: %s", q,
					   cudaGetErrorString(e));
			goto out_fail;
		}
		c->peer[q] = (char *)p;
	}
	tpf_free(all);
	*out = c;
	return TPF_OK;

out_fail:
	tpf_free(all);
	tpf_cuda_arnorm_free(c);
	return st;
}

extern "C" enum tpf_status tpf_cuda_arnorm_run(struct tpf_cuda_arnorm *c, const struct tpf_cuda_norm_args *a,
					       void *stream, struct tpf_diag *d)
{
	int chunks;
	enum tpf_status st = check_norm_args(a, d, &chunks);
	if (st != TPF_OK)
		return st;
	if (a->dtype != c->dtype)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "one-shot all-reduce: created for %s, called with %s",
				     tpf_dtype_name(c->dtype), tpf_dtype_name(a->dtype));
	if ((size_t)(a->rows * a->hidden) > c->max_elems)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "one-shot all-reduce: %lld elements exceed the buffer (%zu)",
				     (long long)(a->rows * a->hidden), c->max_elems);
	if (a->rows == 0)
		return TPF_OK;
	ArParams p;
	memset(&p, 0, sizeof(p));
	for (int q = 0; q < c->world; q++)
		p.peer[q] = c->peer[q];
	p.rank = c->rank;
	p.world = c->world;
	p.slot_bytes = c->slot_bytes;
	p.state = c->state;
	p.x = a->x;
	p.rows = a->rows;
	p.o = norm_out_of(a);
	p.timeout_ns = c->timeout_ns;
	int threads = row_threads(chunks);
	int grid = (int)(a->rows < c->max_grid ? a->rows : c->max_grid);
	cudaStream_t s = (cudaStream_t)stream;
	const bool two = a->path == TPF_CUDA_AR_TWOSHOT && c->world > 1;
	cudaError_t e;
	switch (a->dtype) {
	case TPF_DTYPE_FLOAT:
		e = launch_peer(c, two ? arnorm_twoshot_kernel<float> : arnorm_oneshot_kernel<float>, grid, threads, s, p);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_peer(c, two ? arnorm_twoshot_kernel<__half> : arnorm_oneshot_kernel<__half>, grid, threads, s, p);
		break;
	default:
		e = launch_peer(c, two ? arnorm_twoshot_kernel<__nv_bfloat16> : arnorm_oneshot_kernel<__nv_bfloat16>, grid,
				threads, s, p);
		break;
	}
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, two ? "two-shot all-reduce launch" : "one-shot all-reduce launch", e);
}

extern "C" void tpf_cuda_arnorm_set_timeout(struct tpf_cuda_arnorm *c, double seconds)
{
	c->timeout_ns = seconds > 0 ? (unsigned long long)(seconds * 1e9) : 60ull * 1000000000ull;
}

extern "C" enum tpf_status tpf_cuda_arnorm_check(struct tpf_cuda_arnorm *c, struct tpf_diag *d)
{
	unsigned timed_out = 0;
	cudaError_t e = cudaMemcpy(&timed_out, &c->state->timed_out, sizeof(timed_out), cudaMemcpyDeviceToHost);
	if (e != cudaSuccess)
		return cuda_fail(d, "reading the peer-memory collectives' state", e);
	if (timed_out)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME,
				     "rank %d: a peer-memory collective waited more than %.0f s for another rank's "
				     "data (did every rank reach the same collective?); this communicator's peer-memory "
				     "collectives are unusable from here on",
				     c->rank, (double)c->timeout_ns / 1e9);
	return TPF_OK;
}

// ---------------------------------------------------------------- sharded RMSNorm

namespace {

struct ShardedParams {
	int n;
	int64_t rows;
	const void *x[TPF_CUDA_SHARDED_MAX];
	const void *gamma[TPF_CUDA_SHARDED_MAX];
	void *out[TPF_CUDA_SHARDED_MAX];
	int64_t width[TPF_CUDA_SHARDED_MAX];
	float inv_dim[TPF_CUDA_SHARDED_MAX];
	float eps[TPF_CUDA_SHARDED_MAX];
	float weight_offset;
};

// Partial sum of squares of row `row` of tensor i, over the block.
template <typename T>
__device__ float row_sumsq(const ShardedParams &p, int i, int64_t row, float *scratch)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.width[i] / N);
	const uint4 *src = reinterpret_cast<const uint4 *>(p.x[i]) + row * chunks;
	float s = 0.f;
	for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
		float f[8];
		unpack<T>(src[c], f);
#pragma unroll
		for (int k = 0; k < N; k++)
			s += f[k] * f[k];
	}
	return block_sum(s, scratch);
}

template <typename T>
__device__ void row_normalize(const ShardedParams &p, int i, int64_t row, float total)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int chunks = (int)(p.width[i] / N);
	const uint4 *src = reinterpret_cast<const uint4 *>(p.x[i]) + row * chunks;
	uint4 *dst = reinterpret_cast<uint4 *>(p.out[i]) + row * chunks;
	const uint4 *gam = reinterpret_cast<const uint4 *>(p.gamma[i]);
	float inv = rsqrtf(total * p.inv_dim[i] + p.eps[i]);
	for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
		float f[8], g[8];
		unpack<T>(src[c], f);
		unpack<T>(gam[c], g);
#pragma unroll
		for (int k = 0; k < N; k++)
			f[k] = f[k] * inv * (g[k] + p.weight_offset);
		dst[c] = pack<T>(f);
	}
}

template <typename T> __global__ void __launch_bounds__(kMaxThreads) sharded_sumsq_kernel(ShardedParams p, float *sums)
{
	__shared__ float scratch[33];
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x)
		for (int i = 0; i < p.n; i++) {
			float s = row_sumsq<T>(p, i, row, scratch);
			if (threadIdx.x == 0)
				sums[row * p.n + i] = s;
		}
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreads) sharded_normalize_kernel(ShardedParams p, const float *sums)
{
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x)
		for (int i = 0; i < p.n; i++)
			row_normalize<T>(p, i, row, sums[row * p.n + i]);
}

// One kernel: partial sums, push n floats per row to every rank, wait, normalize.
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) sharded_oneshot_kernel(ShardedParams p, ArParams ar)
{
	__shared__ float scratch[33];
	__shared__ float totals[TPF_CUDA_SHARDED_MAX];
	__shared__ unsigned s_iter;
	const unsigned iter = call_start(ar, &s_iter);
	const int b = (int)(iter % 3);
	char *own = ar.peer[ar.rank];
	const size_t row_bytes = (size_t)p.n * sizeof(float);
	for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
		for (int i = 0; i < p.n; i++) {
			float s = row_sumsq<T>(p, i, row, scratch);
			if (threadIdx.x == 0) {
				uint32_t bits = __float_as_uint(s);
				if (bits == 0x80000000u)
					bits = 0;
				size_t off = ar.slot(b, ar.rank) + row * row_bytes + i * 4;
				for (int q = 0; q < ar.world; q++)
					asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(ar.peer[q] + off), "r"(bits)
						     : "memory");
			}
		}
		if (threadIdx.x < p.n) {
			float t = 0.f;
			for (int q = 0; q < ar.world; q++) {
				const char *src = own + ar.slot(b, q) + row * row_bytes + threadIdx.x * 4;
				uint32_t bits;
				asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(bits) : "l"(src));
				if (bits == 0x80000000u) {
					const unsigned long long t0 = now_ns();
					for (unsigned spins = 1; bits == 0x80000000u; spins++) {
						asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(bits) : "l"(src));
						if ((spins & 255u) == 0 && bits == 0x80000000u &&
						    (*reinterpret_cast<volatile unsigned *>(&ar.state->timed_out) ||
						     now_ns() - t0 > ar.timeout_ns)) {
							atomicExch(&ar.state->timed_out, 1u);
							bits = 0;
						}
					}
				}
				t += __uint_as_float(bits);
			}
			totals[threadIdx.x] = t;
		}
		__syncthreads();
		for (int i = 0; i < p.n; i++)
			row_normalize<T>(p, i, row, totals[i]);
		__syncthreads();
	}
	// whole 16-byte units, so that the reset covers what was written
	call_end(ar, iter, 0x80000000u, ((unsigned long long)p.rows * row_bytes + 15) / 16 * 16, 0);
}

enum tpf_status sharded_params(const struct tpf_cuda_sharded_args *a, ShardedParams *p, int *threads,
			       struct tpf_diag *d)
{
	int es = elem_size(a->dtype);
	if (!es)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda sharded norm: dtype %s is not supported",
				     tpf_dtype_name(a->dtype));
	if (a->n < 1 || a->n > TPF_CUDA_SHARDED_MAX)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda sharded norm: %d tensors (1..%d supported)", a->n,
				     TPF_CUDA_SHARDED_MAX);
	memset(p, 0, sizeof(*p));
	p->n = a->n;
	p->rows = a->rows;
	p->weight_offset = a->weight_offset;
	int maxc = 0;
	for (int i = 0; i < a->n; i++) {
		if (a->width[i] <= 0 || (a->width[i] * es) % 16 != 0 || a->full_dim[i] <= 0)
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
					     "cuda sharded norm: width %lld of tensor %d must be a positive multiple of %d",
					     (long long)a->width[i], i, 16 / es);
		p->x[i] = a->x[i];
		p->gamma[i] = a->gamma[i];
		p->out[i] = a->out[i];
		p->width[i] = a->width[i];
		p->inv_dim[i] = 1.0f / (float)a->full_dim[i];
		p->eps[i] = a->epsilon[i];
		int c = (int)(a->width[i] * es / 16);
		if (c > maxc)
			maxc = c;
	}
	*threads = row_threads(maxc);
	return TPF_OK;
}

} // namespace

#define TPF_DISPATCH_FLOAT_TYPES(dt, KERNEL, grid, threads, stream, ...)                            \
	do {                                                                                       \
		switch (dt) {                                                                      \
		case TPF_DTYPE_FLOAT:                                                              \
			KERNEL<float><<<grid, threads, 0, stream>>>(__VA_ARGS__);                   \
			break;                                                                     \
		case TPF_DTYPE_FLOAT16:                                                            \
			KERNEL<__half><<<grid, threads, 0, stream>>>(__VA_ARGS__);                  \
			break;                                                                     \
		default:                                                                           \
			KERNEL<__nv_bfloat16><<<grid, threads, 0, stream>>>(__VA_ARGS__);           \
			break;                                                                     \
		}                                                                                  \
	} while (0)

extern "C" enum tpf_status tpf_cuda_sharded_sumsq(const struct tpf_cuda_sharded_args *a, float *sums,
						  void *stream, struct tpf_diag *d)
{
	ShardedParams p;
	int threads;
	enum tpf_status st = sharded_params(a, &p, &threads, d);
	if (st != TPF_OK || a->rows == 0)
		return st;
	TPF_DISPATCH_FLOAT_TYPES(a->dtype, sharded_sumsq_kernel, grid_for(a->rows), threads, (cudaStream_t)stream, p,
				 sums);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "sharded sumsq launch", e);
}

extern "C" enum tpf_status tpf_cuda_sharded_normalize(const struct tpf_cuda_sharded_args *a, const float *sums,
						      void *stream, struct tpf_diag *d)
{
	ShardedParams p;
	int threads;
	enum tpf_status st = sharded_params(a, &p, &threads, d);
	if (st != TPF_OK || a->rows == 0)
		return st;
	TPF_DISPATCH_FLOAT_TYPES(a->dtype, sharded_normalize_kernel, grid_for(a->rows), threads, (cudaStream_t)stream,
				 p, sums);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "sharded normalize launch", e);
}

extern "C" enum tpf_status tpf_cuda_sharded_rmsnorm_run(struct tpf_cuda_arnorm *c,
							const struct tpf_cuda_sharded_args *a, void *stream,
							struct tpf_diag *d)
{
	ShardedParams p;
	int threads;
	enum tpf_status st = sharded_params(a, &p, &threads, d);
	if (st != TPF_OK)
		return st;
	if (c->dtype != TPF_DTYPE_FLOAT)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "sharded norm exchange: needs a FLOAT exchange, not %s",
				     tpf_dtype_name(c->dtype));
	if ((size_t)(a->rows * a->n) > c->max_elems)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "sharded norm exchange: %lld floats exceed the buffer (%zu)",
				     (long long)(a->rows * a->n), c->max_elems);
	if (a->rows == 0)
		return TPF_OK;
	ArParams ar;
	memset(&ar, 0, sizeof(ar));
	for (int q = 0; q < c->world; q++)
		ar.peer[q] = c->peer[q];
	ar.rank = c->rank;
	ar.world = c->world;
	ar.slot_bytes = c->slot_bytes;
	ar.state = c->state;
	ar.timeout_ns = c->timeout_ns;
	int grid = (int)(a->rows < c->max_grid ? a->rows : c->max_grid);
	cudaStream_t s = (cudaStream_t)stream;
	cudaError_t e;
	switch (a->dtype) {
	case TPF_DTYPE_FLOAT:
		e = launch_peer(c, sharded_oneshot_kernel<float>, grid, threads, s, p, ar);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_peer(c, sharded_oneshot_kernel<__half>, grid, threads, s, p, ar);
		break;
	default:
		e = launch_peer(c, sharded_oneshot_kernel<__nv_bfloat16>, grid, threads, s, p, ar);
		break;
	}
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "sharded norm launch", e);
}
