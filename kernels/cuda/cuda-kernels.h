/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the CUDA kernels behind the kernel table (their rows
 * come from kernels/kernels.def through kernels/registry.c).  Every kernel only
 * enqueues work on the call's stream and never synchronizes, so that a plan
 * can be captured into a CUDA graph; operands are device pointers, host
 * copies (tpf_ktensor.host) are read for shape-like operands. */
#ifndef TPF_CUDA_KERNELS_H
#define TPF_CUDA_KERNELS_H

#include "tpf-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPF_CUDA_KERNEL(fn) enum tpf_status fn(const struct tpf_kernel_call *c)

/* elementwise.cu */
TPF_CUDA_KERNEL(tpf_cu_binary);
TPF_CUDA_KERNEL(tpf_cu_variadic);
TPF_CUDA_KERNEL(tpf_cu_unary);
TPF_CUDA_KERNEL(tpf_cu_where);
TPF_CUDA_KERNEL(tpf_cu_clip);
TPF_CUDA_KERNEL(tpf_cu_cast);
TPF_CUDA_KERNEL(tpf_cu_sigmoid_gate_add);
/* matmul.cu */
TPF_CUDA_KERNEL(tpf_cu_matmul);
TPF_CUDA_KERNEL(tpf_cu_gemm);
TPF_CUDA_KERNEL(tpf_cu_matmul_fp8);
TPF_CUDA_KERNEL(tpf_cu_matmul_bt);
TPF_CUDA_KERNEL(tpf_cu_matmul_tiled);
TPF_CUDA_KERNEL(tpf_cu_gated_matmul_tiled);
/* reduce.cu */
TPF_CUDA_KERNEL(tpf_cu_reduce);
TPF_CUDA_KERNEL(tpf_cu_softmax);
TPF_CUDA_KERNEL(tpf_cu_topk);
TPF_CUDA_KERNEL(tpf_cu_argmax);
/* norm.cu */
TPF_CUDA_KERNEL(tpf_cu_rms_norm);
TPF_CUDA_KERNEL(tpf_cu_skip_rms_norm);
TPF_CUDA_KERNEL(tpf_cu_layer_norm);
TPF_CUDA_KERNEL(tpf_cu_tpf_rms_norm);
TPF_CUDA_KERNEL(tpf_cu_allreduce_rms_norm_post);
TPF_CUDA_KERNEL(tpf_cu_allreduce_rms_norm_quant_post);
TPF_CUDA_KERNEL(tpf_cu_sharded_sumsq);
TPF_CUDA_KERNEL(tpf_cu_sharded_normalize);
TPF_CUDA_KERNEL(tpf_cu_sharded_gathered);
/* movement.cu */
TPF_CUDA_KERNEL(tpf_cu_copy);
TPF_CUDA_KERNEL(tpf_cu_transpose);
TPF_CUDA_KERNEL(tpf_cu_slice);
TPF_CUDA_KERNEL(tpf_cu_split);
TPF_CUDA_KERNEL(tpf_cu_concat);
TPF_CUDA_KERNEL(tpf_cu_gather);
TPF_CUDA_KERNEL(tpf_cu_gather_elements);
TPF_CUDA_KERNEL(tpf_cu_scatter_elements);
TPF_CUDA_KERNEL(tpf_cu_expand);
TPF_CUDA_KERNEL(tpf_cu_shape);
TPF_CUDA_KERNEL(tpf_cu_constant_of_shape);
TPF_CUDA_KERNEL(tpf_cu_gather_reorder);
TPF_CUDA_KERNEL(tpf_cu_pack);
TPF_CUDA_KERNEL(tpf_cu_unpack);
/* indexing.cu */
TPF_CUDA_KERNEL(tpf_cu_range);
TPF_CUDA_KERNEL(tpf_cu_gather_nd);
TPF_CUDA_KERNEL(tpf_cu_scatter_nd);
TPF_CUDA_KERNEL(tpf_cu_one_hot);
TPF_CUDA_KERNEL(tpf_cu_tile);
TPF_CUDA_KERNEL(tpf_cu_trilu);
TPF_CUDA_KERNEL(tpf_cu_cumsum);
TPF_CUDA_KERNEL(tpf_cu_size);
/* spatial.cu */
TPF_CUDA_KERNEL(tpf_cu_conv);
TPF_CUDA_KERNEL(tpf_cu_pad);
/* quant.cu */
TPF_CUDA_KERNEL(tpf_cu_quantize_linear);
TPF_CUDA_KERNEL(tpf_cu_dequantize_linear);
TPF_CUDA_KERNEL(tpf_cu_fp4_dynamic_quantize);
/* attention.cu */
TPF_CUDA_KERNEL(tpf_cu_attention);
/* bytes of workspace a call of tpf_cu_attention uses (the split decode
 * kernel's partial results); 0: none */
size_t tpf_cu_attention_workspace(const struct tpf_kernel_call *c);

/* cuBLASLt handle and workspace of the calling thread's current device,
 * created on first use (never during stream capture: the first run of a
 * plan is eager).  Released by tpf_cuda_kernels_release. */
void tpf_cuda_kernels_release(void);

/* fused-decode.cu */
TPF_CUDA_KERNEL(tpf_cu_gated_activation);
TPF_CUDA_KERNEL(tpf_cu_rotary_embedding);

#ifdef __cplusplus
}
#endif

#endif /* TPF_CUDA_KERNELS_H */
