// SPDX-License-Identifier: MIT
// Einsum on the GPU over the index plan of kernel-host.h (the CPU
// kernel's): one thread per output element sums, over the summed loops,
// the product of the inputs' elements.  Sums accumulate in float (double
// for DOUBLE, int64 for the integer types) and the result is rounded into
// the output dtype once.  The plan travels by value, so the step can be
// captured into a CUDA graph.
#include "cuda-common.cuh"
#include "op-geometry.h"

using namespace tpfc;

namespace {

constexpr int kThreads = 256;

struct einsum_ptrs {
	const void *x[TPF_EINSUM_MAX_OPERANDS];
};

template <typename T> __device__ __forceinline__ T einsum_load(int dt, const void *p, int64_t i);
template <> __device__ __forceinline__ float einsum_load<float>(int dt, const void *p, int64_t i)
{
	return ld_f(dt, p, i);
}
template <> __device__ __forceinline__ double einsum_load<double>(int dt, const void *p, int64_t i)
{
	return ld_d(dt, p, i);
}
template <> __device__ __forceinline__ int64_t einsum_load<int64_t>(int dt, const void *p, int64_t i)
{
	return ld_i(dt, p, i);
}

template <typename T>
__global__ void einsum_kernel(int dt, struct einsum_ptrs x, void *y, struct tpf_einsum_plan p)
{
	const int no = p.n_out, ns = p.n_loops - p.n_out;
	for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < p.out_numel;
	     o += (int64_t)gridDim.x * blockDim.x) {
		int64_t off[TPF_EINSUM_MAX_OPERANDS] = {}, rest = o;
		for (int d = no - 1; d >= 0; d--) {
			int64_t pos = rest % p.size[d];
			rest /= p.size[d];
			for (int i = 0; i < p.n_in; i++)
				off[i] += pos * p.stride[i][d];
		}
		T acc = 0;
		for (int64_t s = 0; s < p.sum_numel; s++) {
			int64_t at[TPF_EINSUM_MAX_OPERANDS], r = s;
			for (int i = 0; i < p.n_in; i++)
				at[i] = off[i];
			for (int d = ns - 1; d >= 0; d--) {
				int64_t pos = r % p.size[no + d];
				r /= p.size[no + d];
				for (int i = 0; i < p.n_in; i++)
					at[i] += pos * p.stride[i][no + d];
			}
			T v = 1;
			for (int i = 0; i < p.n_in; i++)
				v *= einsum_load<T>(dt, x.x[i], at[i]);
			acc += v;
		}
		if (dt == TPF_DTYPE_DOUBLE)
			st_d(dt, y, o, (double)acc);
		else if (dt == TPF_DTYPE_INT32 || dt == TPF_DTYPE_INT64)
			st_i(dt, y, o, (int64_t)acc);
		else
			st_f(dt, y, o, (float)acc);
	}
}

} // namespace

extern "C" TPF_CUDA_KERNEL(tpf_cu_einsum)
{
	struct tpf_einsum_plan p;
	struct einsum_ptrs x = {};
	int dt = c->out[0].dtype;

	TPF_KTRY(tpf_einsum_plan(c, &p));
	if (!p.out_numel)
		return TPF_OK;
	for (int i = 0; i < p.n_in; i++)
		x.x[i] = c->in[i].data;
	if (dt == TPF_DTYPE_DOUBLE)
		return tpfc_launch(c, "einsum", p.out_numel, kThreads, einsum_kernel<double>, dt, x,
				   c->out[0].data, p);
	if (dt == TPF_DTYPE_INT32 || dt == TPF_DTYPE_INT64)
		return tpfc_launch(c, "einsum", p.out_numel, kThreads, einsum_kernel<int64_t>, dt, x,
				   c->out[0].data, p);
	return tpfc_launch(c, "einsum", p.out_numel, kThreads, einsum_kernel<float>, dt, x,
			   c->out[0].data, p);
}
