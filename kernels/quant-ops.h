/* SPDX-License-Identifier: MIT */
/* Private to kernels/: what QuantizeLinear and DequantizeLinear compute the
 * same way on both backends (kernels/cpu/quant.c, kernels/cuda/quant.cu):
 * where element i of x finds its scale, and the range an integer output
 * saturates to.  Compiles for the host, and under nvcc for the device
 * too. */
#ifndef TPF_QUANT_OPS_H
#define TPF_QUANT_OPS_H

#include <stdint.h>

#include "kernel-host.h"

#ifdef __CUDACC__
#define TPF_QHD static __host__ __device__ __forceinline__
#else
#define TPF_QHD static inline
#endif

/* The index of x's element i in the scale (and zero point) that *m maps
 * (tpf_qmap_init): mode 0 per tensor, 1 per axis, else blocked. */
TPF_QHD int64_t tpf_qmap_index(const struct tpf_qmap *m, int64_t i)
{
	if (m->mode == 0)
		return 0;
	int64_t in = i % m->inner, t = i / m->inner;
	int64_t a = t % m->dim, o = t / m->dim;
	if (m->mode == 1)
		return a;
	return (o * m->sdim + a / m->block) * m->inner + in;
}

/* The range [*lo, *hi] of integer dtype t (8 to 32 bits, 4 and 2 bits);
 * -1 for a dtype that is not one of these. */
TPF_QHD int tpf_quant_int_range(enum tpf_dtype t, double *lo, double *hi)
{
	switch (t) {
	case TPF_DTYPE_UINT8: *lo = 0; *hi = 255; return 0;
	case TPF_DTYPE_INT8: *lo = -128; *hi = 127; return 0;
	case TPF_DTYPE_UINT16: *lo = 0; *hi = 65535; return 0;
	case TPF_DTYPE_INT16: *lo = -32768; *hi = 32767; return 0;
	case TPF_DTYPE_UINT4: *lo = 0; *hi = 15; return 0;
	case TPF_DTYPE_INT4: *lo = -8; *hi = 7; return 0;
	case TPF_DTYPE_UINT2: *lo = 0; *hi = 3; return 0;
	case TPF_DTYPE_INT2: *lo = -2; *hi = 1; return 0;
	case TPF_DTYPE_INT32: *lo = -2147483648.0; *hi = 2147483647.0; return 0;
	case TPF_DTYPE_UINT32: *lo = 0; *hi = 4294967295.0; return 0;
	default: return -1;
	}
}

#undef TPF_QHD

#endif
