// SPDX-License-Identifier: MIT
// Residual add + RMSNorm (+ FP8) kernels on one rank's data (the post-reduce
// phase of the fused norms).  See tpf-cuda.h; ar-peer.cu fuses them with the
// all-reduce through peer memory.
#include "ar-norm.cuh"

namespace {

// Local residual add + norm: one block per row (grid-stride).
template <typename T>
__global__ void __launch_bounds__(kMaxThreads) add_rmsnorm_kernel(const void *x, int64_t rows, NormOut o)
{
	__shared__ float scratch[128];
	int phase = 0;
	const int chunks = (int)(o.hidden / Elem<T>::kPerChunk);
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		uint4 xv[kMaxChunksPerThread];
		RowIn in;
		load_chunks<T>(x, row, chunks, xv);
		load_row_in<T>(o, row, chunks, in);
		float acc[kMaxChunksPerThread][8];
#pragma unroll
		for (int k = 0; k < kMaxChunksPerThread; k++)
			if (threadIdx.x + k * blockDim.x < chunks)
				unpack<T>(xv[k], acc[k]);
		finish_row<T>(acc, in, row, chunks, o, scratch, phase);
	}
}

// Calls f with a value of the element type of float dtype dt (float32,
// float16, bfloat16); false for another dtype.
template <typename F> bool by_float_type(enum tpf_dtype dt, F &&f)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT:
		f(float());
		return true;
	case TPF_DTYPE_FLOAT16:
		f(__half());
		return true;
	case TPF_DTYPE_BFLOAT16:
		f(__nv_bfloat16());
		return true;
	default:
		return false;
	}
}

// Blocks of `threads` for a grid-stride loop over n elements.
int flat_blocks(int64_t n, int threads)
{
	int64_t blocks64 = (n + threads - 1) / threads;
	return (int)(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
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
	const int threads = 256, blocks = flat_blocks(n, threads);
	const bool known = by_float_type(dt, [&](auto t) {
		using T = decltype(t);
		add_kernel<T><<<blocks, threads, 0, (cudaStream_t)stream>>>((const T *)a, (const T *)b, (T *)out, n);
	});
	if (!known)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda add: dtype %s is not supported", tpf_dtype_name(dt));
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "add launch", e);
}

extern "C" enum tpf_status tpf_cuda_quantize_fp8(enum tpf_dtype dt, const void *x, void *out, int64_t n,
						 float scale, void *stream, struct tpf_diag *d)
{
	if (n <= 0)
		return TPF_OK;
	const int threads = 256, blocks = flat_blocks(n, threads);
	const bool known = by_float_type(dt, [&](auto t) {
		using T = decltype(t);
		quant_fp8_kernel<T><<<blocks, threads, 0, (cudaStream_t)stream>>>((const T *)x, (uint8_t *)out, n, scale);
	});
	if (!known)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "cuda quantize: dtype %s is not supported",
				     tpf_dtype_name(dt));
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? TPF_OK : cuda_fail(d, "quantize launch", e);
}
