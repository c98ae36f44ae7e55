// SPDX-License-Identifier: MIT
// The fp16 decode attention kernels of 8 and 16 group rows a block
// (attention-kernels.cuh: every value width and full/partial value row);
// attention-f16.cu holds those of fewer rows and the combine kernel.
#include "attention-kernels.cuh"

namespace tpfc_attention {

template enum tpf_status launch_decode_dv<__half, 8>(const struct tpf_kernel_call *, const DecArgs &);
template enum tpf_status launch_decode_dv<__half, 16>(const struct tpf_kernel_call *, const DecArgs &);

} // namespace tpfc_attention
