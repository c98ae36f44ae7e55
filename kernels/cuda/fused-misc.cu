// SPDX-License-Identifier: MIT
// The sigmoid-gated residual (ai.tpfuse.SigmoidGateAdd) and the segment
// copies behind ai.tpfuse.Pack / Unpack.  See tpf-cuda.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>

#include "cuda-common.cuh"
#include "tpf-cuda.h"

namespace {

using tpfc::Elem;

__device__ inline float sigmoid(float x)
{
	return 1.0f / (1.0f + __expf(-x));
}

// Vectorized over 16-byte chunks: hidden % kPerChunk == 0.
template <typename T>
__global__ void sigmoid_gate_add_kernel(const uint4 *fin, const T *gate, const uint4 *shared, uint4 *out,
					int64_t rows, int64_t hidden, int64_t gate_cols)
{
	constexpr int N = Elem<T>::kPerChunk;
	const int64_t chunks_per_row = hidden / N;
	const int64_t total = rows * chunks_per_row;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t row = i / chunks_per_row, col0 = (i % chunks_per_row) * N;
		uint4 fu = fin[i], su = shared[i], ou;
		const T *f = reinterpret_cast<const T *>(&fu);
		const T *s = reinterpret_cast<const T *>(&su);
		T *o = reinterpret_cast<T *>(&ou);
		if (gate_cols == 1) {
			const float g = sigmoid(Elem<T>::load(gate[row]));
#pragma unroll
			for (int k = 0; k < N; k++)
				o[k] = Elem<T>::store(Elem<T>::load(f[k]) + g * Elem<T>::load(s[k]));
		} else {
			const T *grow = gate + row * gate_cols + col0;
#pragma unroll
			for (int k = 0; k < N; k++)
				o[k] = Elem<T>::store(Elem<T>::load(f[k]) + sigmoid(Elem<T>::load(grow[k])) * Elem<T>::load(s[k]));
		}
		out[i] = ou;
	}
}

// Scalar fallback for widths that do not split into 16-byte chunks.
template <typename T>
__global__ void sigmoid_gate_add_scalar_kernel(const T *fin, const T *gate, const T *shared, T *out, int64_t rows,
					       int64_t hidden, int64_t gate_cols)
{
	const int64_t total = rows * hidden;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t row = i / hidden, col = i % hidden;
		const float g = sigmoid(Elem<T>::load(gate[row * gate_cols + (gate_cols == 1 ? 0 : col)]));
		out[i] = Elem<T>::store(Elem<T>::load(fin[i]) + g * Elem<T>::load(shared[i]));
	}
}

int blocks_for(int64_t work, int threads)
{
	int64_t b = (work + threads - 1) / threads;
	if (b < 1)
		b = 1;
	return (int)(b < 65535 * 16 ? b : 65535 * 16);
}

template <typename T>
cudaError_t launch_gate(const void *f, const void *g, const void *s, void *o, int64_t rows, int64_t hidden,
			int64_t gate_cols, cudaStream_t st)
{
	constexpr int N = Elem<T>::kPerChunk;
	const bool aligned = hidden % N == 0 && ((uintptr_t)f | (uintptr_t)s | (uintptr_t)o) % 16 == 0;
	if (aligned)
		sigmoid_gate_add_kernel<T><<<blocks_for(rows * hidden / N, 256), 256, 0, st>>>(
			(const uint4 *)f, (const T *)g, (const uint4 *)s, (uint4 *)o, rows, hidden, gate_cols);
	else
		sigmoid_gate_add_scalar_kernel<T><<<blocks_for(rows * hidden, 256), 256, 0, st>>>(
			(const T *)f, (const T *)g, (const T *)s, (T *)o, rows, hidden, gate_cols);
	return cudaGetLastError();
}

// One block row per segment (blockIdx.y); 16-byte copies when the segment
// and both ends are 16-byte aligned, bytes otherwise.
template <bool kPack>
__global__ void segment_copy_kernel(const void *const *bufs_in, void *const *bufs_out, const char *single_src,
				    char *single_dst, const tpf_cuda_segment *segs)
{
	const tpf_cuda_segment sg = segs[blockIdx.y];
	const char *src = kPack ? (const char *)bufs_in[sg.buf] + sg.src : single_src + sg.src;
	char *dst = kPack ? single_dst + sg.dst : (char *)bufs_out[sg.buf] + sg.dst;
	const int64_t stride = (int64_t)gridDim.x * blockDim.x;
	const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
	if ((((uintptr_t)src | (uintptr_t)dst | (uintptr_t)sg.len) & 15) == 0) {
		const uint4 *s4 = (const uint4 *)src;
		uint4 *d4 = (uint4 *)dst;
		for (int64_t i = first; i < sg.len / 16; i += stride)
			d4[i] = s4[i];
	} else {
		for (int64_t i = first; i < sg.len; i += stride)
			dst[i] = src[i];
	}
}

enum tpf_status launch_fail(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "cuda: %s: %s", what, cudaGetErrorString(e));
}

dim3 segment_grid(int nseg, int64_t max_len)
{
	int64_t units = (max_len + 15) / 16;
	int64_t bx = (units + 255) / 256;
	if (bx < 1)
		bx = 1;
	if (bx > 1024)
		bx = 1024;
	return dim3((unsigned)bx, (unsigned)nseg, 1);
}

} // namespace

extern "C" enum tpf_status tpf_cuda_sigmoid_gate_add(enum tpf_dtype dt, const void *final_, const void *gate,
						     const void *shared, void *out, int64_t rows, int64_t hidden,
						     int64_t gate_cols, void *stream, struct tpf_diag *d)
{
	if (gate_cols != 1 && gate_cols != hidden)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "cuda sigmoid gate: gate has %lld columns; expected 1 or %lld",
				     (long long)gate_cols, (long long)hidden);
	if (rows <= 0 || hidden <= 0)
		return TPF_OK;
	cudaStream_t s = (cudaStream_t)stream;
	cudaError_t e;
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		e = launch_gate<float>(final_, gate, shared, out, rows, hidden, gate_cols, s);
		break;
	case TPF_DTYPE_FLOAT16:
		e = launch_gate<__half>(final_, gate, shared, out, rows, hidden, gate_cols, s);
		break;
	case TPF_DTYPE_BFLOAT16:
		e = launch_gate<__nv_bfloat16>(final_, gate, shared, out, rows, hidden, gate_cols, s);
		break;
	default:
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda sigmoid gate: dtype %s is not supported",
				     tpf_dtype_name(dt));
	}
	return e == cudaSuccess ? TPF_OK : launch_fail(d, "sigmoid gate launch", e);
}

extern "C" enum tpf_status tpf_cuda_pack(const void *const *bufs, void *dst, const struct tpf_cuda_segment *segs,
					 int nseg, int64_t max_len, void *stream, struct tpf_diag *d)
{
	if (nseg <= 0)
		return TPF_OK;
	if (nseg > 65535)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "cuda pack: %d segments (at most 65535)", nseg);
	segment_copy_kernel<true><<<segment_grid(nseg, max_len), 256, 0, (cudaStream_t)stream>>>(
		bufs, NULL, NULL, (char *)dst, segs);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : launch_fail(d, "pack launch", e);
}

extern "C" enum tpf_status tpf_cuda_unpack(const void *src, void *const *bufs, const struct tpf_cuda_segment *segs,
					   int nseg, int64_t max_len, void *stream, struct tpf_diag *d)
{
	if (nseg <= 0)
		return TPF_OK;
	if (nseg > 65535)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "cuda unpack: %d segments (at most 65535)", nseg);
	segment_copy_kernel<false><<<segment_grid(nseg, max_len), 256, 0, (cudaStream_t)stream>>>(
		NULL, bufs, (const char *)src, NULL, segs);
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : launch_fail(d, "unpack launch", e);
}
