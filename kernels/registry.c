/* SPDX-License-Identifier: MIT */
/* The kernel table: every backend's rows, made from the one list
 * kernels.def.  Each backend contributes the rows it has a kernel for (the
 * CUDA ones when the library is built with CUDA); no backend looks into
 * another's table. */
#include "tpf-kernels.h"

#include <pthread.h>
#include <stddef.h>

#include "cpu/cpu-kernels.h"
#ifdef TPF_HAVE_CUDA
#include "cuda/cuda-kernels.h"
#endif

/* key dtype masks of kernels.def */
#define B(t) (UINT64_C(1) << TPF_DTYPE_##t)
#define FLOATS (B(FLOAT) | B(FLOAT16) | B(BFLOAT16) | B(DOUBLE))
#define INTS                                                                                       \
	(B(UINT8) | B(INT8) | B(UINT16) | B(INT16) | B(INT32) | B(INT64) | B(UINT32) | B(UINT64))
#define NUM (FLOATS | INTS)
#define ANY 0

#define ROW(prefix, backend, name, op, phase, key, dtypes, fn, ws)                                 \
	{prefix name, backend, TPF_OP_##op, TPF_PHASE_##phase, dtypes, key, fn, ws},
#define CPU_ROW(name, op, phase, key, dtypes, fn)                                                  \
	ROW("cpu.", TPF_BACKEND_CPU, name, op, phase, key, dtypes, tpf_cpu_##fn, NULL)
#ifdef TPF_HAVE_CUDA
#define CUDA_ROW(name, op, phase, key, dtypes, fn)                                                 \
	ROW("cuda.", TPF_BACKEND_CUDA, name, op, phase, key, dtypes, tpf_cu_##fn, NULL)
#define CUDA_WS_ROW(name, op, phase, key, dtypes, fn)                                              \
	ROW("cuda.", TPF_BACKEND_CUDA, name, op, phase, key, dtypes, tpf_cu_##fn, tpf_cu_##fn##_workspace)
#else
#define CUDA_ROW(name, op, phase, key, dtypes, fn)
#define CUDA_WS_ROW(name, op, phase, key, dtypes, fn)
#endif

static const struct tpf_kernel kernels[] = {
#define TPF_KERNEL(name, op, phase, key, cpu, cuda, fn)                                            \
	CPU_ROW(name, op, phase, key, cpu, fn) CUDA_ROW(name, op, phase, key, cuda, fn)
#define TPF_KERNEL_CPU(name, op, phase, key, cpu, fn) CPU_ROW(name, op, phase, key, cpu, fn)
#define TPF_KERNEL_CUDA_WS(name, op, phase, key, cpu, cuda, fn)                                    \
	CPU_ROW(name, op, phase, key, cpu, fn) CUDA_WS_ROW(name, op, phase, key, cuda, fn)
#define TPF_KERNEL_FORM(op, fn)
#include "kernels.def"
#undef TPF_KERNEL
#undef TPF_KERNEL_CPU
#undef TPF_KERNEL_CUDA_WS
#undef TPF_KERNEL_FORM
};

#define N_KERNELS (sizeof(kernels) / sizeof(kernels[0]))

const struct tpf_kernel *tpf_kernel_find(enum tpf_backend b, enum tpf_op op,
					 enum tpf_kernel_phase phase, enum tpf_dtype key)
{
	for (size_t i = 0; i < N_KERNELS; i++) {
		const struct tpf_kernel *k = &kernels[i];
		if (k->backend == b && k->op == op && k->phase == phase &&
		    (k->dtypes == 0 || ((unsigned)key < 64 && (k->dtypes >> key) & 1)))
			return k;
	}
	return NULL;
}

const struct tpf_kernel *tpf_kernel_find_any(enum tpf_backend b, enum tpf_op op,
					     enum tpf_kernel_phase phase)
{
	for (size_t i = 0; i < N_KERNELS; i++) {
		const struct tpf_kernel *k = &kernels[i];
		if (k->backend == b && k->op == op && k->phase == phase)
			return k;
	}
	return NULL;
}

size_t tpf_kernel_phases(enum tpf_op op, enum tpf_kernel_phase *phases, size_t max)
{
	size_t n = 0;
	int main_row = 0;
	for (size_t i = 0; i < N_KERNELS; i++) {
		const struct tpf_kernel *k = &kernels[i];
		if (k->op != op)
			continue;
		if (k->phase == TPF_PHASE_MAIN || k->phase == TPF_PHASE_MATMUL_TILED) {
			main_row = 1;
			continue;
		}
		size_t j = 0;
		while (j < n && phases[j] != k->phase)
			j++;
		if (j == n && n < max)
			phases[n++] = k->phase;
	}
	if (!n && main_row && max)
		phases[n++] = TPF_PHASE_MAIN;
	return n;
}

static const struct tpf_kernel *kernel_list[N_KERNELS];
static pthread_once_t kernel_list_once = PTHREAD_ONCE_INIT;

static void kernel_list_init(void)
{
	for (size_t i = 0; i < N_KERNELS; i++)
		kernel_list[i] = &kernels[i];
}

const struct tpf_kernel *const *tpf_kernel_list(size_t *count)
{
	pthread_once(&kernel_list_once, kernel_list_init);
	*count = N_KERNELS;
	return kernel_list;
}
