/* SPDX-License-Identifier: MIT */
/* Scalar conversions between float32/float64 and every storage format, and
 * element access for any numeric dtype.  All roundings are to nearest, ties
 * to even, computed exactly (no table lookups, no intermediate rounding). */
#include "tpf-kernels.h"
#include "dtype-ops.h"
#include "quant-ops.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof(u));
	return u;
}

static float bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, sizeof(f));
	return f;
}

float tpf_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
	if (e == 0x1f)
		return bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
	if (e == 0) {
		/* zero or subnormal: m * 2^-24, exact in float */
		float v = (float)m * 0x1p-24f;
		return sign ? -v : v;
	}
	return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t tpf_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
	uint32_t a = u & 0x7fffffffu;
	if (a >= 0x7f800000u) /* inf or NaN */
		return (uint16_t)(sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0));
	if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to infinity */
		return sign | 0x7c00;
	if (a < 0x38800000u) {
		/* result is subnormal or zero: value / 2^-24, rounded to an integer */
		double q = (double)bits_f32(a) * 0x1p24;
		return (uint16_t)(sign | (uint16_t)nearbyint(q));
	}
	uint32_t mant = a & 0x7fffff, exp = (a >> 23) - 112;
	uint32_t r = (exp << 10) | (mant >> 13);
	uint32_t rest = mant & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
		r++;
	return (uint16_t)(sign | r);
}

float tpf_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

uint16_t tpf_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN, sign kept */
	uint32_t rest = u & 0xffff;
	uint32_t r = u >> 16;
	if (rest > 0x8000 || (rest == 0x8000 && (r & 1)))
		r++; /* may carry into the exponent, giving infinity as it should */
	return (uint16_t)r;
}

/* ------------------------------------------------------------ minifloats */

struct minifloat {
	int ebits, mbits, bias;
	double maxv;
	int has_inf; /* all-ones exponent with zero mantissa is infinity (E5M2) */
	int uz;      /* 0x80 is the only NaN, no negative zero (FNUZ) */
	int no_nan;  /* FP4: no NaN, no infinity */
};

static const struct minifloat *minifloat_format(enum tpf_dtype t)
{
	static const struct minifloat e4m3fn = {4, 3, 7, 448.0, 0, 0, 0};
	static const struct minifloat e4m3fnuz = {4, 3, 8, 240.0, 0, 1, 0};
	static const struct minifloat e5m2 = {5, 2, 15, 57344.0, 1, 0, 0};
	static const struct minifloat e5m2fnuz = {5, 2, 16, 57344.0, 0, 1, 0};
	static const struct minifloat e2m1 = {2, 1, 1, 6.0, 0, 0, 1};
	switch (t) {
	case TPF_DTYPE_FLOAT8E4M3FN:
		return &e4m3fn;
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
		return &e4m3fnuz;
	case TPF_DTYPE_FLOAT8E5M2:
		return &e5m2;
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
		return &e5m2fnuz;
	case TPF_DTYPE_FLOAT4E2M1:
		return &e2m1;
	default:
		return NULL;
	}
}

float tpf_minifloat_to_f32(enum tpf_dtype t, uint8_t code)
{
	if (t == TPF_DTYPE_FLOAT8E8M0) {
		if (code == 0xff)
			return NAN;
		return (float)ldexp(1.0, (int)code - 127);
	}
	const struct minifloat *f = minifloat_format(t);
	if (!f)
		return NAN;
	int nbits = 1 + f->ebits + f->mbits;
	code &= (uint8_t)((1u << nbits) - 1);
	unsigned sign = code >> (nbits - 1);
	unsigned e = (code >> f->mbits) & ((1u << f->ebits) - 1);
	unsigned m = code & ((1u << f->mbits) - 1);
	unsigned emax = (1u << f->ebits) - 1;
	if (f->uz) {
		if (code == 0x80)
			return NAN;
	} else if (!f->no_nan && e == emax) {
		if (f->has_inf) {
			if (m == 0)
				return sign ? -INFINITY : INFINITY;
			return NAN;
		}
		if (m == (1u << f->mbits) - 1)
			return NAN;
	}
	double v;
	if (e == 0)
		v = ldexp((double)m, 1 - f->bias - f->mbits);
	else
		v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
	return (float)(sign ? -v : v);
}

uint8_t tpf_f64_to_minifloat(enum tpf_dtype t, double v, int saturate)
{
	if (t == TPF_DTYPE_FLOAT8E8M0)
		return tpf_f64_to_e8m0(v, 0, saturate);
	const struct minifloat *f = minifloat_format(t);
	if (!f)
		return 0;
	int nbits = 1 + f->ebits + f->mbits;
	uint8_t sign = signbit(v) ? (uint8_t)(1u << (nbits - 1)) : 0;
	uint8_t emax = (uint8_t)((1u << f->ebits) - 1);
	uint8_t maxcode;
	uint8_t nan_code, inf_code;
	/* the largest finite value's code, and the codes for NaN / infinity */
	if (f->uz) {
		maxcode = (uint8_t)((1u << (nbits - 1)) - 1);
		nan_code = 0x80;
		inf_code = 0x80;
	} else if (f->has_inf) {
		maxcode = (uint8_t)(((emax - 1u) << f->mbits) | ((1u << f->mbits) - 1));
		nan_code = (uint8_t)(sign | (emax << f->mbits) | (1u << (f->mbits - 1)));
		inf_code = (uint8_t)(sign | (emax << f->mbits));
	} else if (f->no_nan) {
		maxcode = (uint8_t)((1u << (nbits - 1)) - 1);
		nan_code = (uint8_t)(1u << (nbits - 1)); /* as ml_dtypes: NaN becomes -0 */
		inf_code = (uint8_t)(sign | maxcode);
	} else {
		maxcode = (uint8_t)((1u << (nbits - 1)) - 2);
		nan_code = (uint8_t)(sign | ((1u << (nbits - 1)) - 1));
		inf_code = nan_code;
	}
	if (isnan(v))
		return nan_code;
	double a = fabs(v);
	if (isinf(a))
		return (saturate || f->no_nan) ? (uint8_t)(sign | maxcode) : inf_code;
	if (a == 0)
		return f->uz ? 0 : sign;
	/* the quantum at a's binade (subnormals share the smallest normal one) */
	int e = ilogb(a);
	if (e < 1 - f->bias)
		e = 1 - f->bias;
	double q = nearbyint(ldexp(a, f->mbits - e)); /* exact scaling; RNE */
	double r = ldexp(q, e - f->mbits);
	if (r > f->maxv)
		return (saturate || f->no_nan) ? (uint8_t)(sign | maxcode) : inf_code;
	if (r == 0)
		return f->uz ? 0 : sign;
	unsigned code;
	int re = ilogb(r);
	if (re < 1 - f->bias) {
		code = (unsigned)ldexp(r, f->bias - 1 + f->mbits);
	} else {
		unsigned m = (unsigned)(ldexp(r, f->mbits - re) - ldexp(1.0, f->mbits));
		code = ((unsigned)(re + f->bias) << f->mbits) | m;
	}
	return (uint8_t)(sign | code);
}

uint8_t tpf_f64_to_e8m0(double v, int round_mode, int saturate)
{
	/* As ONNX defines it: on the float32 bits, sign ignored. */
	float f = (float)v;
	uint32_t u = f32_bits(f);
	uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
	if (e == 0xff)
		return 0xff;
	int up = 0;
	if (round_mode == 1) {
		uint32_t g = (u >> 22) & 1, rb = (u >> 21) & 1, s = (u & 0x1fffff) != 0;
		uint32_t lsb = e > 0;
		up = g && (rb || s || lsb);
	} else if (round_mode == 0) {
		up = m != 0 && e != 0;
	}
	if (up && saturate && e == 0xfe)
		up = 0;
	return (uint8_t)(e + (uint32_t)up);
}

/* ------------------------------------------------------------ element access */

int tpf_dtype_is_integral(enum tpf_dtype t)
{
	switch (t) {
	case TPF_DTYPE_UINT8:
	case TPF_DTYPE_INT8:
	case TPF_DTYPE_UINT16:
	case TPF_DTYPE_INT16:
	case TPF_DTYPE_INT32:
	case TPF_DTYPE_INT64:
	case TPF_DTYPE_BOOL:
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_UINT64:
	case TPF_DTYPE_UINT4:
	case TPF_DTYPE_INT4:
	case TPF_DTYPE_UINT2:
	case TPF_DTYPE_INT2:
		return 1;
	default:
		return 0;
	}
}

static unsigned load_bits(const void *base, int64_t i, unsigned bits)
{
	const uint8_t *p = base;
	unsigned per = 8 / bits;
	unsigned shift = (unsigned)(i % per) * bits;
	return (p[i / per] >> shift) & ((1u << bits) - 1);
}

static void store_bits(void *base, int64_t i, unsigned bits, unsigned v)
{
	uint8_t *p = base;
	unsigned per = 8 / bits;
	unsigned shift = (unsigned)(i % per) * bits;
	unsigned mask = ((1u << bits) - 1) << shift;
	p[i / per] = (uint8_t)((p[i / per] & ~mask) | ((v << shift) & mask));
}

int64_t tpf_elem_load_int(enum tpf_dtype t, const void *base, int64_t i)
{
	int64_t iv;

	if (tpf_load_wrapped_int_elem(t, base, i, &iv))
		return iv;
	switch (t) {
	case TPF_DTYPE_UINT4:
		return load_bits(base, i, 4);
	case TPF_DTYPE_INT4: {
		int v = (int)load_bits(base, i, 4);
		return v >= 8 ? v - 16 : v;
	}
	case TPF_DTYPE_UINT2:
		return load_bits(base, i, 2);
	case TPF_DTYPE_INT2: {
		int v = (int)load_bits(base, i, 2);
		return v >= 2 ? v - 4 : v;
	}
	default: {
		double d = tpf_elem_load(t, base, i);
		if (isnan(d))
			return 0;
		if (d >= 9.2233720368547758e18)
			return INT64_MAX;
		if (d <= -9.2233720368547758e18)
			return INT64_MIN;
		return (int64_t)d;
	}
	}
}

double tpf_elem_load(enum tpf_dtype t, const void *base, int64_t i)
{
	switch (t) {
	case TPF_DTYPE_FLOAT:
		return ((const float *)base)[i];
	case TPF_DTYPE_DOUBLE:
		return ((const double *)base)[i];
	case TPF_DTYPE_FLOAT16:
		return tpf_f16_to_f32(((const uint16_t *)base)[i]);
	case TPF_DTYPE_BFLOAT16:
		return tpf_bf16_to_f32(((const uint16_t *)base)[i]);
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
	case TPF_DTYPE_FLOAT8E8M0:
		return tpf_minifloat_to_f32(t, ((const uint8_t *)base)[i]);
	case TPF_DTYPE_FLOAT4E2M1:
		return tpf_minifloat_to_f32(t, (uint8_t)load_bits(base, i, 4));
	case TPF_DTYPE_UINT64:
		return (double)((const uint64_t *)base)[i];
	default:
		if (tpf_dtype_is_integral(t))
			return (double)tpf_elem_load_int(t, base, i);
		return 0;
	}
}

static int64_t clamp_to_int(double v, double lo, double hi)
{
	if (isnan(v))
		return 0;
	v = trunc(v);
	if (v < lo)
		v = lo;
	if (v > hi)
		v = hi;
	return (int64_t)v;
}

void tpf_elem_store(enum tpf_dtype t, void *base, int64_t i, double v, int saturate)
{
	switch (t) {
	case TPF_DTYPE_FLOAT:
		((float *)base)[i] = (float)v;
		return;
	case TPF_DTYPE_DOUBLE:
		((double *)base)[i] = v;
		return;
	case TPF_DTYPE_FLOAT16:
		((uint16_t *)base)[i] = tpf_f32_to_f16((float)v);
		return;
	case TPF_DTYPE_BFLOAT16:
		((uint16_t *)base)[i] = tpf_f32_to_bf16((float)v);
		return;
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
		/* through float32 first, as the ONNX reference does */
		((uint8_t *)base)[i] = tpf_f64_to_minifloat(t, (float)v, saturate);
		return;
	case TPF_DTYPE_FLOAT8E8M0:
		((uint8_t *)base)[i] = tpf_f64_to_e8m0(v, 0, saturate);
		return;
	case TPF_DTYPE_FLOAT4E2M1:
		store_bits(base, i, 4, tpf_f64_to_minifloat(t, (float)v, 1));
		return;
	case TPF_DTYPE_BOOL:
		((uint8_t *)base)[i] = v != 0;
		return;
	case TPF_DTYPE_UINT64:
		((uint64_t *)base)[i] = isnan(v) || v <= 0 ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v;
		return;
	case TPF_DTYPE_INT64:
		tpf_elem_store_int(t, base, i, clamp_to_int(v, -9.2233720368547758e18, 9.2233720368547748e18));
		return;
	default: {
		double lo, hi;

		if (tpf_quant_int_range(t, &lo, &hi))
			return;
		if (!tpf_elem_size(t)) {
			/* 4 and 2 bits: truncated, then wrapped to the width (as
			 * ONNX's reference does) */
			lo = -1e15;
			hi = 1e15;
		}
		tpf_elem_store_int(t, base, i, clamp_to_int(v, lo, hi));
		return;
	}
	}
}

void tpf_elem_store_int(enum tpf_dtype t, void *base, int64_t i, int64_t v)
{
	if (tpf_store_int_elem(t, base, i, v))
		return;
	switch (t) {
	case TPF_DTYPE_UINT4:
	case TPF_DTYPE_INT4:
		store_bits(base, i, 4, (unsigned)v & 0xf);
		return;
	case TPF_DTYPE_UINT2:
	case TPF_DTYPE_INT2:
		store_bits(base, i, 2, (unsigned)v & 0x3);
		return;
	default:
		tpf_elem_store(t, base, i, (double)v, 1);
		return;
	}
}

void tpf_elem_convert(enum tpf_dtype to, void *dst, enum tpf_dtype from, const void *src,
		      int64_t count, int saturate)
{
	if (to == from) {
		size_t nb;
		if (tpf_dtype_storage_bytes(to, (uint64_t)count, &nb) == 0)
			memmove(dst, src, nb);
		return;
	}
	if (from == TPF_DTYPE_FLOAT && to == TPF_DTYPE_BFLOAT16) {
		for (int64_t i = 0; i < count; i++)
			((uint16_t *)dst)[i] = tpf_f32_to_bf16(((const float *)src)[i]);
		return;
	}
	if (from == TPF_DTYPE_BFLOAT16 && to == TPF_DTYPE_FLOAT) {
		for (int64_t i = 0; i < count; i++)
			((float *)dst)[i] = tpf_bf16_to_f32(((const uint16_t *)src)[i]);
		return;
	}
	int from_int = tpf_dtype_is_integral(from), to_int = tpf_dtype_is_integral(to);
	for (int64_t i = 0; i < count; i++) {
		if (from_int && to_int)
			tpf_elem_store_int(to, dst, i, tpf_elem_load_int(from, src, i));
		else if (from_int && to == TPF_DTYPE_UINT64)
			tpf_elem_store_int(to, dst, i, tpf_elem_load_int(from, src, i));
		else if (from == TPF_DTYPE_INT64 || from == TPF_DTYPE_UINT64)
			tpf_elem_store(to, dst, i,
				       from == TPF_DTYPE_INT64 ? (double)tpf_elem_load_int(from, src, i)
							       : tpf_elem_load(from, src, i),
				       saturate);
		else
			tpf_elem_store(to, dst, i, tpf_elem_load(from, src, i), saturate);
	}
}
