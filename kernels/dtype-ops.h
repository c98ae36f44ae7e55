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

/* The bytes of an element of integer dtype t (bool, 8 to 64 bits); 0 for
 * any other dtype. */
TPF_DHD int tpf_int_elem_bytes(int t)
{
	switch (t) {
	case TPF_DTYPE_BOOL:
	case TPF_DTYPE_UINT8:
	case TPF_DTYPE_INT8:
		return 1;
	case TPF_DTYPE_UINT16:
	case TPF_DTYPE_INT16:
		return 2;
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_INT32:
		return 4;
	case TPF_DTYPE_UINT64:
	case TPF_DTYPE_INT64:
		return 8;
	default:
		return 0;
	}
}

/* Element i of p (dtype t: bool, 8, 16 or 32 bits, int64) in *v: 1, or 0
 * (and *v untouched) for any other dtype (uint64 included). */
TPF_DHD int tpf_load_int_elem(int t, const void *p, int64_t i, int64_t *v)
{
	int sgn = t == TPF_DTYPE_INT8 || t == TPF_DTYPE_INT16 || t == TPF_DTYPE_INT32;

	switch (t == TPF_DTYPE_UINT64 ? 0 : tpf_int_elem_bytes(t)) {
	case 1:
		*v = sgn ? (int64_t)((const int8_t *)p)[i] : (int64_t)((const uint8_t *)p)[i];
		return 1;
	case 2:
		*v = sgn ? (int64_t)((const int16_t *)p)[i] : (int64_t)((const uint16_t *)p)[i];
		return 1;
	case 4:
		*v = sgn ? (int64_t)((const int32_t *)p)[i] : (int64_t)((const uint32_t *)p)[i];
		return 1;
	case 8:
		*v = ((const int64_t *)p)[i];
		return 1;
	default:
		return 0;
	}
}

/* As tpf_load_int_elem, uint64 too (wrapped to int64). */
TPF_DHD int tpf_load_wrapped_int_elem(int t, const void *p, int64_t i, int64_t *v)
{
	if (t != TPF_DTYPE_UINT64)
		return tpf_load_int_elem(t, p, i, v);
	*v = (int64_t)((const uint64_t *)p)[i];
	return 1;
}

/* Stores v as element i of p (dtype t: bool, 8 to 64 bits), wrapped to the
 * width as a C cast does (bool: v != 0): 1, or 0 (nothing stored) for any
 * other dtype. */
TPF_DHD int tpf_store_int_elem(int t, void *p, int64_t i, int64_t v)
{
	uint64_t u = t == TPF_DTYPE_BOOL ? v != 0 : (uint64_t)v;

	switch (tpf_int_elem_bytes(t)) {
	case 1:
		((uint8_t *)p)[i] = (uint8_t)u;
		return 1;
	case 2:
		((uint16_t *)p)[i] = (uint16_t)u;
		return 1;
	case 4:
		((uint32_t *)p)[i] = (uint32_t)u;
		return 1;
	case 8:
		((uint64_t *)p)[i] = u;
		return 1;
	default:
		return 0;
	}
}

#undef TPF_DHD

#endif /* TPF_DTYPE_OPS_H */
