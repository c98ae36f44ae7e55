/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the CUDA kernels behind the kernel table (their rows
 * come from kernels/kernels.def through kernels/registry.c, their
 * declarations from the same list).  Every kernel only enqueues work on the
 * call's stream and never synchronizes, so that a plan can be captured into
 * a CUDA graph; operands are device pointers, host copies (tpf_ktensor.host)
 * are read for shape-like operands. */
#ifndef TPF_CUDA_KERNELS_H
#define TPF_CUDA_KERNELS_H

#include "tpf-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPF_CUDA_KERNEL(fn) enum tpf_status fn(const struct tpf_kernel_call *c)

/* tpf_cu_<FN> of every row of kernels.def that has a CUDA kernel (an FN
 * of several rows is declared once a row: repeated identical declarations
 * are C and C++), and for TPF_KERNEL_CUDA_WS rows tpf_cu_<FN>_workspace:
 * the bytes of workspace a call uses (0: none). */
#define TPF_KERNEL(name, op, phase, key, cpu, cuda, fn) TPF_CUDA_KERNEL(tpf_cu_##fn);
#define TPF_KERNEL_CPU(name, op, phase, key, cpu, fn)
#define TPF_KERNEL_CUDA_WS(name, op, phase, key, cpu, cuda, fn)                                    \
	TPF_CUDA_KERNEL(tpf_cu_##fn);                                                              \
	size_t tpf_cu_##fn##_workspace(const struct tpf_kernel_call *c);
#define TPF_KERNEL_FORM(op, fn)
#include "kernels.def"
#undef TPF_KERNEL
#undef TPF_KERNEL_CPU
#undef TPF_KERNEL_CUDA_WS
#undef TPF_KERNEL_FORM

/* cuBLASLt handle and workspace of the calling thread's current device,
 * created on first use (never during stream capture: the first run of a
 * plan is eager).  Released by tpf_cuda_kernels_release. */
void tpf_cuda_kernels_release(void);

#ifdef __cplusplus
}
#endif

#endif /* TPF_CUDA_KERNELS_H */
