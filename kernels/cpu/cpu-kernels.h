/* SPDX-License-Identifier: MIT */
/* Private to kernels/cpu: the CPU reference kernels and their helpers. */
#ifndef TPF_CPU_KERNELS_H
#define TPF_CPU_KERNELS_H

#include "tpf-kernels.h"
#include "kernel-host.h"

#define TPF_CPU_KERNEL(fn) enum tpf_status fn(const struct tpf_kernel_call *c)

/* tpf_cpu_<FN> of every row of kernels.def (an FN of several rows is
 * declared once a row: repeated identical declarations are C). */
#define TPF_KERNEL(name, op, phase, key, cpu, cuda, fn) TPF_CPU_KERNEL(tpf_cpu_##fn);
#define TPF_KERNEL_CPU(name, op, phase, key, cpu, fn) TPF_CPU_KERNEL(tpf_cpu_##fn);
#define TPF_KERNEL_CUDA_WS(name, op, phase, key, cpu, cuda, fn) TPF_CPU_KERNEL(tpf_cpu_##fn);
#define TPF_KERNEL_FORM(op, fn)
#include "kernels.def"
#undef TPF_KERNEL
#undef TPF_KERNEL_CPU
#undef TPF_KERNEL_CUDA_WS
#undef TPF_KERNEL_FORM

#endif /* TPF_CPU_KERNELS_H */
