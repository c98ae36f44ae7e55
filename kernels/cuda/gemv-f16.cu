// SPDX-License-Identifier: MIT
// The fp16 small-M MatMul kernels (gemv-kernels.cuh): the FMA kernel for
// every row count and tile width, and the tensor-core kernel.
#include "gemv-kernels.cuh"

namespace tpfc_gemv {

template int try_mma<__half>(cudaStream_t, const void *, const void *, void *, int, int, int, bool,
			 cudaError_t *);
template cudaError_t launch<__half>(int, unsigned, cudaStream_t, const void *, const void *, void *, int, int,
				int, bool, bool, bool, int);

} // namespace tpfc_gemv
