/* SPDX-License-Identifier: MIT */
/* Element types.  (The op table is ir/ops/registry.c.) */
#include "dtype-private.h"

#include <math.h>
#include <string.h>

struct dtype_info {
	const char *short_name;
	const char *onnx_name;
	unsigned bits;
	int is_float;
};

static const struct dtype_info dtypes[TPF_DTYPE_COUNT] = {
	[TPF_DTYPE_UNDEFINED] = {"?", "UNDEFINED", 0, 0},
	[TPF_DTYPE_FLOAT] = {"f32", "FLOAT", 32, 1},
	[TPF_DTYPE_UINT8] = {"u8", "UINT8", 8, 0},
	[TPF_DTYPE_INT8] = {"i8", "INT8", 8, 0},
	[TPF_DTYPE_UINT16] = {"u16", "UINT16", 16, 0},
	[TPF_DTYPE_INT16] = {"i16", "INT16", 16, 0},
	[TPF_DTYPE_INT32] = {"i32", "INT32", 32, 0},
	[TPF_DTYPE_INT64] = {"i64", "INT64", 64, 0},
	[TPF_DTYPE_STRING] = {"string", "STRING", 0, 0},
	[TPF_DTYPE_BOOL] = {"bool", "BOOL", 8, 0},
	[TPF_DTYPE_FLOAT16] = {"f16", "FLOAT16", 16, 1},
	[TPF_DTYPE_DOUBLE] = {"f64", "DOUBLE", 64, 1},
	[TPF_DTYPE_UINT32] = {"u32", "UINT32", 32, 0},
	[TPF_DTYPE_UINT64] = {"u64", "UINT64", 64, 0},
	[TPF_DTYPE_COMPLEX64] = {"c64", "COMPLEX64", 64, 0},
	[TPF_DTYPE_COMPLEX128] = {"c128", "COMPLEX128", 128, 0},
	[TPF_DTYPE_BFLOAT16] = {"bf16", "BFLOAT16", 16, 1},
	[TPF_DTYPE_FLOAT8E4M3FN] = {"f8e4m3fn", "FLOAT8E4M3FN", 8, 1},
	[TPF_DTYPE_FLOAT8E4M3FNUZ] = {"f8e4m3fnuz", "FLOAT8E4M3FNUZ", 8, 1},
	[TPF_DTYPE_FLOAT8E5M2] = {"f8e5m2", "FLOAT8E5M2", 8, 1},
	[TPF_DTYPE_FLOAT8E5M2FNUZ] = {"f8e5m2fnuz", "FLOAT8E5M2FNUZ", 8, 1},
	[TPF_DTYPE_UINT4] = {"u4", "UINT4", 4, 0},
	[TPF_DTYPE_INT4] = {"i4", "INT4", 4, 0},
	[TPF_DTYPE_FLOAT4E2M1] = {"f4e2m1", "FLOAT4E2M1", 4, 1},
	[TPF_DTYPE_FLOAT8E8M0] = {"f8e8m0", "FLOAT8E8M0", 8, 1},
	[TPF_DTYPE_UINT2] = {"u2", "UINT2", 2, 0},
	[TPF_DTYPE_INT2] = {"i2", "INT2", 2, 0},
};

int tpf_dtype_is_valid(int t)
{
	return t > TPF_DTYPE_UNDEFINED && t < TPF_DTYPE_COUNT;
}

const char *tpf_dtype_name(enum tpf_dtype t)
{
	if ((unsigned)t >= TPF_DTYPE_COUNT)
		return "?";
	return dtypes[t].short_name;
}

const char *tpf_dtype_onnx_name(enum tpf_dtype t)
{
	if ((unsigned)t >= TPF_DTYPE_COUNT)
		return "UNDEFINED";
	return dtypes[t].onnx_name;
}

int tpf_dtype_from_name(const char *name, enum tpf_dtype *out)
{
	for (int t = 1; t < TPF_DTYPE_COUNT; t++) {
		if (strcmp(name, dtypes[t].short_name) == 0 || strcmp(name, dtypes[t].onnx_name) == 0) {
			*out = (enum tpf_dtype)t;
			return 0;
		}
	}
	static const struct {
		const char *alias;
		enum tpf_dtype t;
	} aliases[] = {
		{"float", TPF_DTYPE_FLOAT},     {"float32", TPF_DTYPE_FLOAT}, {"float16", TPF_DTYPE_FLOAT16},
		{"half", TPF_DTYPE_FLOAT16},    {"bfloat16", TPF_DTYPE_BFLOAT16},
		{"double", TPF_DTYPE_DOUBLE},   {"float64", TPF_DTYPE_DOUBLE}, {"int64", TPF_DTYPE_INT64},
		{"int32", TPF_DTYPE_INT32},     {"int8", TPF_DTYPE_INT8},      {"uint8", TPF_DTYPE_UINT8},
	};
	for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++) {
		if (strcmp(name, aliases[i].alias) == 0) {
			*out = aliases[i].t;
			return 0;
		}
	}
	return -1;
}

unsigned tpf_dtype_bits(enum tpf_dtype t)
{
	if ((unsigned)t >= TPF_DTYPE_COUNT)
		return 0;
	return dtypes[t].bits;
}

int tpf_dtype_is_float(enum tpf_dtype t)
{
	if ((unsigned)t >= TPF_DTYPE_COUNT)
		return 0;
	return dtypes[t].is_float;
}

int tpf_dtype_storage_bytes(enum tpf_dtype t, uint64_t count, size_t *out)
{
	unsigned bits = tpf_dtype_bits(t);
	if (bits == 0)
		return -1;
	if (bits >= 8) {
		size_t bytes;
		if (count > SIZE_MAX || tpf_mul_size((size_t)count, bits / 8, &bytes))
			return -1;
		*out = bytes;
		return 0;
	}
	/* sub-byte: packed, rounded up to whole bytes */
	uint64_t per_byte = 8 / bits;
	uint64_t bytes = count / per_byte + (count % per_byte ? 1 : 0);
	if (bytes > SIZE_MAX)
		return -1;
	*out = (size_t)bytes;
	return 0;
}

int64_t tpf_shape_numel(const struct tpf_shape *s)
{
	if (!s || s->rank < 0)
		return -1;
	int64_t n = 1;
	for (int i = 0; i < s->rank; i++) {
		const struct tpf_dim *d = &s->dims[i];
		if (d->param || d->value < 0)
			return -1;
		if (d->value != 0 && n > INT64_MAX / d->value)
			return -1;
		n *= d->value;
	}
	return n;
}

int64_t tpf_tensor_numel(const struct tpf_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->rank; i++) {
		int64_t d = t->dims[i];
		if (d < 0)
			return -1;
		if (d != 0 && n > INT64_MAX / d)
			return -1;
		n *= d;
	}
	return n;
}

/* ------------------------------------------------------------------ decodings */

float ir_half_to_float(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	float v;

	if (exp == 0)
		v = ldexpf((float)man, -24);
	else if (exp == 31)
		v = man ? NAN : INFINITY;
	else
		v = ldexpf((float)(man | 0x400), exp - 25);
	return sign ? -v : v;
}

float ir_bf16_to_float(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float v;

	memcpy(&v, &u, sizeof(v));
	return v;
}

/* An 8-bit float of `eb` exponent bits, `mb` mantissa bits and exponent
 * bias `bias`, with subnormals; the callers handle their NaN encodings. */
static float f8_to_float(unsigned b, int eb, int mb, int bias)
{
	int sign = (b >> 7) & 1, exp = (b >> mb) & ((1 << eb) - 1), man = b & ((1 << mb) - 1);
	float v;

	if (exp == 0)
		v = ldexpf((float)man, 1 - bias - mb);
	else
		v = ldexpf((float)(man | (1 << mb)), exp - bias - mb);
	return sign ? -v : v;
}

float ir_small_float_to_float(enum tpf_dtype dt, unsigned code)
{
	static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

	switch (dt) {
	case TPF_DTYPE_FLOAT8E4M3FN:
		return (code & 0x7f) == 0x7f ? NAN : f8_to_float(code, 4, 3, 7);
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
		return code == 0x80 ? NAN : f8_to_float(code, 4, 3, 8);
	case TPF_DTYPE_FLOAT8E5M2:
		return ir_half_to_float((uint16_t)(code << 8));
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
		return code == 0x80 ? NAN : f8_to_float(code, 5, 2, 16);
	case TPF_DTYPE_FLOAT8E8M0:
		return code == 0xff ? NAN : (float)ldexp(1.0, (int)code - 127);
	case TPF_DTYPE_FLOAT4E2M1:
		return (code & 8) ? -e2m1[code & 7] : e2m1[code & 7];
	default:
		return NAN;
	}
}
