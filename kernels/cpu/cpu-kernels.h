/* SPDX-License-Identifier: MIT */
/* Private to kernels/cpu: the CPU reference kernels and their helpers. */
#ifndef TPF_CPU_KERNELS_H
#define TPF_CPU_KERNELS_H

#include "tpf-kernels.h"
#include "kernel-host.h"

#define TPF_CPU_KERNEL(fn) enum tpf_status fn(const struct tpf_kernel_call *c)

/* elementwise.c */
TPF_CPU_KERNEL(tpf_cpu_binary);
TPF_CPU_KERNEL(tpf_cpu_variadic);
TPF_CPU_KERNEL(tpf_cpu_unary);
TPF_CPU_KERNEL(tpf_cpu_where);
TPF_CPU_KERNEL(tpf_cpu_clip);
TPF_CPU_KERNEL(tpf_cpu_cast);
TPF_CPU_KERNEL(tpf_cpu_sigmoid_gate_add);
/* matmul.c */
TPF_CPU_KERNEL(tpf_cpu_matmul);
TPF_CPU_KERNEL(tpf_cpu_matmul_bt);
TPF_CPU_KERNEL(tpf_cpu_matmul_tiled);
TPF_CPU_KERNEL(tpf_cpu_gated_matmul_tiled);
TPF_CPU_KERNEL(tpf_cpu_matmul_fp8);
TPF_CPU_KERNEL(tpf_cpu_gemm);
/* reduce.c */
TPF_CPU_KERNEL(tpf_cpu_reduce);
TPF_CPU_KERNEL(tpf_cpu_softmax);
TPF_CPU_KERNEL(tpf_cpu_topk);
TPF_CPU_KERNEL(tpf_cpu_argmax);
/* norm.c */
TPF_CPU_KERNEL(tpf_cpu_rms_norm);
TPF_CPU_KERNEL(tpf_cpu_skip_rms_norm);
TPF_CPU_KERNEL(tpf_cpu_layer_norm);
TPF_CPU_KERNEL(tpf_cpu_tpf_rms_norm);
TPF_CPU_KERNEL(tpf_cpu_allreduce_rms_norm_post);
TPF_CPU_KERNEL(tpf_cpu_allreduce_rms_norm_quant_post);
TPF_CPU_KERNEL(tpf_cpu_sharded_sumsq);
TPF_CPU_KERNEL(tpf_cpu_sharded_normalize);
TPF_CPU_KERNEL(tpf_cpu_sharded_gathered);
/* movement.c */
TPF_CPU_KERNEL(tpf_cpu_copy);
TPF_CPU_KERNEL(tpf_cpu_transpose);
TPF_CPU_KERNEL(tpf_cpu_slice);
TPF_CPU_KERNEL(tpf_cpu_split);
TPF_CPU_KERNEL(tpf_cpu_concat);
TPF_CPU_KERNEL(tpf_cpu_gather);
TPF_CPU_KERNEL(tpf_cpu_gather_elements);
TPF_CPU_KERNEL(tpf_cpu_scatter_elements);
TPF_CPU_KERNEL(tpf_cpu_expand);
TPF_CPU_KERNEL(tpf_cpu_shape);
TPF_CPU_KERNEL(tpf_cpu_constant_of_shape);
TPF_CPU_KERNEL(tpf_cpu_gather_reorder);
TPF_CPU_KERNEL(tpf_cpu_pack);
TPF_CPU_KERNEL(tpf_cpu_unpack);
/* indexing.c */
TPF_CPU_KERNEL(tpf_cpu_range);
TPF_CPU_KERNEL(tpf_cpu_gather_nd);
TPF_CPU_KERNEL(tpf_cpu_scatter_nd);
TPF_CPU_KERNEL(tpf_cpu_one_hot);
TPF_CPU_KERNEL(tpf_cpu_tile);
TPF_CPU_KERNEL(tpf_cpu_trilu);
TPF_CPU_KERNEL(tpf_cpu_cumsum);
TPF_CPU_KERNEL(tpf_cpu_size);
/* spatial.c */
TPF_CPU_KERNEL(tpf_cpu_conv);
TPF_CPU_KERNEL(tpf_cpu_pad);
/* quant.c */
TPF_CPU_KERNEL(tpf_cpu_quantize_linear);
TPF_CPU_KERNEL(tpf_cpu_dequantize_linear);
TPF_CPU_KERNEL(tpf_cpu_fp4_dynamic_quantize);
/* attention.c */
TPF_CPU_KERNEL(tpf_cpu_attention);
/* fused-decode.c */
TPF_CPU_KERNEL(tpf_cpu_gated_activation);
TPF_CPU_KERNEL(tpf_cpu_rotary_embedding);

#endif /* TPF_CPU_KERNELS_H */
