/* SPDX-License-Identifier: MIT */
/* Private to ir/: the decodings of the 16-bit and small float types that
 * the text printer and the text reader share (ir/dtype.c). */
#ifndef TPF_DTYPE_PRIVATE_H
#define TPF_DTYPE_PRIVATE_H

#include "tpf-ir.h"

#pragma GCC visibility push(hidden)

/* IEEE half and bfloat16 bits as float (subnormals, infinities, NaN). */
float ir_half_to_float(uint16_t h);
float ir_bf16_to_float(uint16_t b);
/* A code of a type of at most 8 bits (the FLOAT8 types, FLOAT8E8M0,
 * FLOAT4E2M1's low nibble) as float; NaN for another type. */
float ir_small_float_to_float(enum tpf_dtype dt, unsigned code);

#pragma GCC visibility pop

#endif /* TPF_DTYPE_PRIVATE_H */
