// SPDX-License-Identifier: MIT
// The bf16 decode attention kernels of 1, 2 and 4 group rows a block
// (attention-kernels.cuh: every value width and full/partial value row) and
// the combine kernel; attention-bf16-r8.cu holds those of 8 and 16 rows.
#include "attention-kernels.cuh"

namespace tpfc_attention {

template enum tpf_status launch_combine<__nv_bfloat16>(const struct tpf_kernel_call *, const DecArgs &, bool);
template enum tpf_status launch_decode_dv<__nv_bfloat16, 1>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_decode_dv<__nv_bfloat16, 2>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_decode_dv<__nv_bfloat16, 4>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention
