// SPDX-License-Identifier: MIT
// The bf16 small-M MatMul kernels (gemv-kernels.cuh): the FMA kernel for
// every row count and tile width, and the tensor-core kernel.
#include "gemv-kernels.cuh"

namespace tpfc_gemv {

template int try_mma<__nv_bfloat16>(cudaStream_t, const void *, const void *, void *, int, int, int, bool,
			 cudaError_t *);
template cudaError_t launch<__nv_bfloat16>(int, unsigned, cudaStream_t, const void *, const void *, void *, int, int,
				int, bool, bool, bool, int);

} // namespace tpfc_gemv
