// SPDX-License-Identifier: MIT
// The bf16 decode attention kernels (attention-kernels.cuh): the split-KV
// kernel for every group-row block, value width and full/partial value row,
// and the combine kernel.
#include "attention-kernels.cuh"

namespace tpfc_attention {

template enum tpf_status launch_combine<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &, bool);
template enum tpf_status launch_decode<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention
