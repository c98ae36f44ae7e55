// SPDX-License-Identifier: MIT
// The fp16 decode attention kernels of 1, 2 and 4 group rows a block
// (attention-kernels.cuh: every value width and full/partial value row) and
// the combine kernel; attention-f16-r8.cu holds those of 8 and 16 rows.
#include "attention-kernels.cuh"

namespace tpfc_attention {

template enum tpf_status launch_combine<__half>(const struct tpf_kernel_call *, const DecArgs &, bool);
template enum tpf_status launch_decode_dv<__half, 1>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_decode_dv<__half, 2>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_decode_dv<__half, 4>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention
