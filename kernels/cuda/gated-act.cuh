// SPDX-License-Identifier: MIT
// The activation of ai.tpfuse.GatedActivation on the GPU, rounded to T
// where the CPU reference (kernels/cpu/fused-decode.c, gated_act) rounds:
// the gated-activation kernel (fused-decode.cu) and the small-M MatMul
// with the activation folded in (gemv.cu) compute it alike.
#ifndef TPF_GATED_ACT_CUH
#define TPF_GATED_ACT_CUH

#include "cuda-common.cuh"
#include "fused-decode-host.h"

namespace tpfc {

// v rounded to T (the CPU reference's to_t): each step of the unfused
// chain rounds to T.
template <typename T> __device__ __forceinline__ float gated_round(float v)
{
	return Cvt<T>::in(Cvt<T>::out(v));
}

// act(g) rounded to T at every step of the decomposed chain.
template <typename T, int A> __device__ __forceinline__ float gated_act(float g, bool cube_as_product)
{
	if (A == TPF_GATED_GELU) {
		const float e = gated_round<T>(erff(gated_round<T>(g / gated_round<T>(1.4142135623730951f))));
		return gated_round<T>(gated_round<T>(g * gated_round<T>(1.0f + e)) * 0.5f);
	}
	if (A == TPF_GATED_GELU_TANH) {
		float c = cube_as_product ? gated_round<T>(g * gated_round<T>(g * g)) : gated_round<T>(g * g * g);
		c = gated_round<T>(g + gated_round<T>(gated_round<T>(0.044715f) * c));
		c = gated_round<T>(tanhf(gated_round<T>(gated_round<T>(0.79788456080286536f) * c)));
		return gated_round<T>(g * gated_round<T>(0.5f * gated_round<T>(1.0f + c)));
	}
	return gated_round<T>(g * gated_round<T>(1.0f / (1.0f + expf(-g))));
}

// The same with the activation chosen at run time.
template <typename T> __device__ __forceinline__ float gated_act_rt(int act, float g, bool cube_as_product)
{
	if (act == TPF_GATED_GELU)
		return gated_act<T, TPF_GATED_GELU>(g, cube_as_product);
	if (act == TPF_GATED_GELU_TANH)
		return gated_act<T, TPF_GATED_GELU_TANH>(g, cube_as_product);
	return gated_act<T, TPF_GATED_SILU>(g, cube_as_product);
}

} // namespace tpfc

#endif
