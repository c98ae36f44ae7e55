/* SPDX-License-Identifier: MIT */
/* Private to kernels/: element access to the integer dtypes of whole bytes
 * (bool, 8 to 64 bits), the same on both backends (kernels/cpu/convert.c,
 * kernels/cuda/cuda-common.cuh).  Compiles for the host, and under nvcc
 * for the device too. */
#ifndef TPF_DTYPE_OPS_H
#define TPF_DTYPE_OPS_H

#include <stdint.h>

#include "kernel-host.h"

#ifdef __CUDACC__
#define TPF_DHD static __host__ __device__ __forceinline__
#else
#define TPF_DHD static inline
#endif

/* Element i of p (dtype t: bool, 8, 16 or 32 bits, int64) in *v: 1, or 0
 * (and *v untouched) for any other dtype (uint64 included). */
TPF_DHD int tpf_load_int_elem(int t, const void *p, int64_t i, int64_t *v)
{
	switch (t) {
	case TPF_DTYPE_BOOL:
	case TPF_DTYPE_UINT8:
		*v = ((const uint8_t *)p)[i];
		return 1;
	case TPF_DTYPE_INT8:
		*v = ((const int8_t *)p)[i];
		return 1;
	case TPF_DTYPE_UINT16:
		*v = ((const uint16_t *)p)[i];
		return 1;
	case TPF_DTYPE_INT16:
		*v = ((const int16_t *)p)[i];
		return 1;
	case TPF_DTYPE_INT32:
		*v = ((const int32_t *)p)[i];
		return 1;
	case TPF_DTYPE_UINT32:
		*v = ((const uint32_t *)p)[i];
		return 1;
	case TPF_DTYPE_INT64:
		*v = ((const int64_t *)p)[i];
		return 1;
	default:
		return 0;
	}
}

/* Stores v as element i of p (dtype t: bool, 8 to 64 bits), wrapped as a
 * C cast does (bool: v != 0): 1, or 0 (nothing stored) for any other
 * dtype. */
TPF_DHD int tpf_store_int_elem(int t, void *p, int64_t i, int64_t v)
{
	switch (t) {
	case TPF_DTYPE_BOOL:
		((uint8_t *)p)[i] = v != 0;
		return 1;
	case TPF_DTYPE_UINT8:
		((uint8_t *)p)[i] = (uint8_t)v;
		return 1;
	case TPF_DTYPE_INT8:
		((int8_t *)p)[i] = (int8_t)v;
		return 1;
	case TPF_DTYPE_UINT16:
		((uint16_t *)p)[i] = (uint16_t)v;
		return 1;
	case TPF_DTYPE_INT16:
		((int16_t *)p)[i] = (int16_t)v;
		return 1;
	case TPF_DTYPE_INT32:
		((int32_t *)p)[i] = (int32_t)v;
		return 1;
	case TPF_DTYPE_UINT32:
		((uint32_t *)p)[i] = (uint32_t)v;
		return 1;
	case TPF_DTYPE_INT64:
		((int64_t *)p)[i] = v;
		return 1;
	case TPF_DTYPE_UINT64:
		((uint64_t *)p)[i] = (uint64_t)v;
		return 1;
	default:
		return 0;
	}
}

#undef TPF_DHD

#endif /* TPF_DTYPE_OPS_H */
