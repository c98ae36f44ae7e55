// SPDX-License-Identifier: MIT
// The tensor-core decode attention kernel (attention-kernels.cuh) for fp16
// and bf16, head size 64 and 128, 8 and 16 query rows; its combine kernel
// is the dtype's in attention-f16.cu / attention-bf16.cu.
#include "attention-kernels.cuh"

namespace tpfc_attention {

template enum tpf_status launch_mma<__half>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_mma<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention
