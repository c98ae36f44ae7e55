/* SPDX-License-Identifier: MIT */
/* Private to kernels/: the scalar arithmetic of the elementwise ops and the
 * checks of their operands, one definition for both backends.  The scalar
 * functions compile for the host (kernels/cpu) and, under nvcc, for the
 * device too (kernels/cuda), so the CPU reference and the CUDA kernels
 * compute Mod, the comparisons and the unary math the same way.
 *
 * Float types compute in double here (the CPU reference's rule); a CUDA
 * kernel that computes float32 in float uses float versions of the ops
 * where that differs (division, sqrt, the transcendental functions: the
 * unary ones are in TPF_UNOPS beside the double ones) and these for the
 * rest, where double rounds to the same float. */
#ifndef TPF_ELEMENTWISE_OPS_H
#define TPF_ELEMENTWISE_OPS_H

#include <math.h>
#include <stdint.h>

#include "kernel-host.h"

#ifdef __CUDACC__
#define TPF_HD static __host__ __device__ __forceinline__
#else
#define TPF_HD static inline
#endif

TPF_HD int tpf_op_is_compare(int op)
{
	return op == TPF_OP_EQUAL || op == TPF_OP_GREATER || op == TPF_OP_LESS ||
	       op == TPF_OP_GREATER_OR_EQUAL || op == TPF_OP_LESS_OR_EQUAL;
}

TPF_HD int tpf_op_is_logic(int op)
{
	return op == TPF_OP_AND || op == TPF_OP_OR || op == TPF_OP_XOR;
}

/* Mod of floats: C's fmod (fmod_c = 1), or the divisor's sign as numpy's
 * mod has it (fmod_c = 0): -3 mod inf is inf, 0 mod -2 is -0. */
TPF_HD double tpf_mod_d(double a, double b, int fmod_c)
{
	double m = fmod(a, b);
	if (fmod_c || b == 0 || isnan(m))
		return m;
	if (m != 0)
		return (b < 0) != (m < 0) ? m + b : m;
	return copysign(0.0, b);
}

/* Mod of integers: truncated (fmod_c = 1) or floored (fmod_c = 0, the
 * divisor's sign); a zero divisor gives 0. */
TPF_HD int64_t tpf_mod_i(int64_t a, int64_t b, int fmod_c)
{
	if (b == 0 || (b == -1 && a == INT64_MIN))
		return 0;
	int64_t m = a % b;
	if (!fmod_c && m != 0 && ((m < 0) != (b < 0)))
		m += b;
	return m;
}

/* The comparisons of a and b (a numeric type), -1 for another op. */
#define TPF_COMPARE(op, a, b)                                                                      \
	((op) == TPF_OP_EQUAL              ? (a) == (b)                                            \
	 : (op) == TPF_OP_GREATER          ? (a) > (b)                                             \
	 : (op) == TPF_OP_LESS             ? (a) < (b)                                             \
	 : (op) == TPF_OP_GREATER_OR_EQUAL ? (a) >= (b)                                            \
	 : (op) == TPF_OP_LESS_OR_EQUAL    ? (a) <= (b)                                            \
					   : -1)

/* Binary ops of floats in double (NaN for an op without a float form). */
TPF_HD double tpf_binop_d(int op, double a, double b, int fmod_c)
{
	if (tpf_op_is_compare(op))
		return TPF_COMPARE(op, a, b);
	switch (op) {
	case TPF_OP_MOD:
		return tpf_mod_d(a, b, fmod_c);
	case TPF_OP_ADD:
		return a + b;
	case TPF_OP_SUB:
		return a - b;
	case TPF_OP_MUL:
		return a * b;
	case TPF_OP_DIV:
		return a / b;
	case TPF_OP_POW:
		return pow(a, b);
	case TPF_OP_MAX:
		return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
	case TPF_OP_MIN:
		return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
	default:
		return NAN;
	}
}

/* Binary ops of integers in int64 (wrapping; division by 0 gives 0); the
 * logic ops take 0 as false. */
TPF_HD int64_t tpf_binop_i(int op, int64_t a, int64_t b, int fmod_c)
{
	switch (op) {
	case TPF_OP_AND:
		return a && b;
	case TPF_OP_OR:
		return a || b;
	case TPF_OP_XOR:
		return !a != !b;
	case TPF_OP_ADD:
		return (int64_t)((uint64_t)a + (uint64_t)b);
	case TPF_OP_SUB:
		return (int64_t)((uint64_t)a - (uint64_t)b);
	case TPF_OP_MUL:
		return (int64_t)((uint64_t)a * (uint64_t)b);
	case TPF_OP_DIV:
		return b == 0 || (b == -1 && a == INT64_MIN) ? 0 : a / b;
	case TPF_OP_MOD:
		return tpf_mod_i(a, b, fmod_c);
	case TPF_OP_MAX:
		return a > b ? a : b;
	case TPF_OP_MIN:
		return a < b ? a : b;
	default:
		return tpf_op_is_compare(op) ? TPF_COMPARE(op, a, b) : 0;
	}
}

/* uint64 operands: unsigned division, Mod, Max, Min and comparisons (values
 * past INT64_MAX would change sign in int64); + - * wrap to the same bits
 * as int64's. */
TPF_HD uint64_t tpf_binop_u(int op, uint64_t a, uint64_t b)
{
	if (tpf_op_is_compare(op))
		return (uint64_t)TPF_COMPARE(op, a, b);
	switch (op) {
	case TPF_OP_DIV:
		return b ? a / b : 0;
	case TPF_OP_MOD:
		return b ? a % b : 0;
	case TPF_OP_MAX:
		return a > b ? a : b;
	case TPF_OP_MIN:
		return a < b ? a : b;
	default:
		return (uint64_t)tpf_binop_i(op, (int64_t)a, (int64_t)b, 0);
	}
}

/* The unary math, one row an op: X(OP, IN_DOUBLE, IN_FLOAT), the value of
 * x in double (the CPU reference's, and the CUDA kernels' for double) and
 * in float (the CUDA kernels' for float32, float16 and bfloat16: expanded
 * only by nvcc).  TPF_UNOP_VIA_DOUBLE as IN_FLOAT: the float is the double
 * value rounded (exact for Relu, Neg, Abs, Not, Floor and Ceil; Log and
 * Softplus keep the CPU reference's roundings). */
#define TPF_UNOPS(X)                                                                               \
	X(SIGMOID, x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x)),                       \
	  x >= 0 ? 1.0f / (1.0f + expf(-x)) : expf(x) / (1.0f + expf(x)))                          \
	X(RELU, x > 0 ? x : (isnan(x) ? x : 0.0), TPF_UNOP_VIA_DOUBLE)                             \
	X(SQRT, sqrt(x), __fsqrt_rn(x))                                                            \
	X(RECIPROCAL, 1.0 / x, __frcp_rn(x))                                                       \
	X(NEG, -x, TPF_UNOP_VIA_DOUBLE)                                                            \
	X(EXP, exp(x), expf(x))                                                                    \
	X(TANH, tanh(x), tanhf(x))                                                                 \
	X(ERF, erf(x), erff(x))                                                                    \
	X(ABS, fabs(x), TPF_UNOP_VIA_DOUBLE)                                                       \
	X(SIN, sin(x), sinf(x))                                                                    \
	X(COS, cos(x), cosf(x))                                                                    \
	X(NOT, x == 0, TPF_UNOP_VIA_DOUBLE)                                                        \
	X(FLOOR, floor(x), TPF_UNOP_VIA_DOUBLE)                                                    \
	X(CEIL, ceil(x), TPF_UNOP_VIA_DOUBLE)                                                      \
	X(LOG, log(x), TPF_UNOP_VIA_DOUBLE)                                                        \
	/* log(1 + e^x) without overflow */                                                        \
	X(SOFTPLUS, x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)), TPF_UNOP_VIA_DOUBLE)

/* Unary ops of floats in double (NaN for an op without a float form). */
TPF_HD double tpf_unop_d(int op, double x)
{
	switch (op) {
#define TPF_UNOP_CASE_D(OP, in_double, in_float)                                                   \
	case TPF_OP_##OP:                                                                          \
		return in_double;
	TPF_UNOPS(TPF_UNOP_CASE_D)
#undef TPF_UNOP_CASE_D
	default:
		return NAN;
	}
}

/* The unary ops that take integer operands, and their value. */
TPF_HD int tpf_unop_has_int(int op)
{
	return op == TPF_OP_ABS || op == TPF_OP_NEG || op == TPF_OP_NOT || op == TPF_OP_RELU;
}

TPF_HD int64_t tpf_unop_i(int op, int64_t v)
{
	switch (op) {
	case TPF_OP_ABS:
		return v < 0 ? -v : v;
	case TPF_OP_NEG:
		return -v;
	case TPF_OP_NOT:
		return v == 0;
	default: /* Relu */
		return v > 0 ? v : 0;
	}
}

/* IsNaN / IsInf of v; neg and pos: IsInf's detect_negative, detect_positive. */
TPF_HD int tpf_float_class(int op, double v, int neg, int pos)
{
	if (op == TPF_OP_IS_NAN)
		return isnan(v) != 0;
	return isinf(v) && (v > 0 ? pos : neg);
}

/* Clamps of Clip: an absent bound (has_* 0) does not clip. */
#define TPF_CLAMP(v, has_lo, lo, has_hi, hi)                                                       \
	do {                                                                                       \
		if ((has_lo) && (v) < (lo))                                                        \
			(v) = (lo);                                                                \
		if ((has_hi) && (v) > (hi))                                                        \
			(v) = (hi);                                                                \
	} while (0)

/* Copies element si of src to element di of dst, es bytes each (1, 2, 4
 * or 8). */
TPF_HD void tpf_copy_elem(void *dst, int64_t di, const void *src, int64_t si, int es)
{
	switch (es) {
	case 1:
		((uint8_t *)dst)[di] = ((const uint8_t *)src)[si];
		break;
	case 2:
		((uint16_t *)dst)[di] = ((const uint16_t *)src)[si];
		break;
	case 4:
		((uint32_t *)dst)[di] = ((const uint32_t *)src)[si];
		break;
	default:
		((uint64_t *)dst)[di] = ((const uint64_t *)src)[si];
		break;
	}
}

/* ------------------------------------------------------------ operand checks (host)
 * The CPU and the CUDA kernel of an op refuse the same nodes with the same
 * message. */

/* A binary op's two operands and output: one dtype for both operands
 * (comparisons and Pow excepted), bool for the logic ops, a bool output for
 * comparisons and logic; *fmod_c gets Mod's fmod. */
static inline enum tpf_status tpf_binary_check(const struct tpf_kernel_call *c, int *fmod_c)
{
	int op = c->node->op;
	if (c->n_in != 2 || c->n_out != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects 2 inputs and 1 output");
	if (!tpf_op_is_compare(op) && op != TPF_OP_POW && c->in[0].dtype != c->in[1].dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "operand dtypes differ (%s, %s)",
				 tpf_dtype_name(c->in[0].dtype), tpf_dtype_name(c->in[1].dtype));
	if (tpf_op_is_logic(op) && c->in[0].dtype != TPF_DTYPE_BOOL)
		return tpf_kfail(c, TPF_ERR_INVALID, "operands must be bool, not %s",
				 tpf_dtype_name(c->in[0].dtype));
	if ((tpf_op_is_compare(op) || tpf_op_is_logic(op)) && c->out[0].dtype != TPF_DTYPE_BOOL)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be bool, not %s",
				 tpf_dtype_name(c->out[0].dtype));
	*fmod_c = op == TPF_OP_MOD ? tpf_node_attr_int(c->node, "fmod", 0) != 0 : 0;
	return TPF_OK;
}

/* Variadic Max/Min: every operand of the output's dtype. */
static inline enum tpf_status tpf_variadic_check(const struct tpf_kernel_call *c)
{
	if (c->n_in < 1 || c->n_out != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects at least one input");
	for (size_t k = 1; k < c->n_in; k++)
		if (c->in[k].dtype != c->out[0].dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "operand %zu has dtype %s, expected %s", k,
					 tpf_dtype_name(c->in[k].dtype), tpf_dtype_name(c->out[0].dtype));
	return TPF_OK;
}

/* Unary ops: the output of the input's size; integer operands only for
 * the ops that have an integer form. */
static inline enum tpf_status tpf_unary_check(const struct tpf_kernel_call *c)
{
	const struct tpf_ktensor *x = &c->in[0];
	if (x->numel != c->out[0].numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size differs from the input's");
	if (c->node->op != TPF_OP_IS_NAN && c->node->op != TPF_OP_IS_INF &&
	    tpf_dtype_is_integral(x->dtype) && !tpf_unop_has_int(c->node->op))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "integer dtype %s not supported",
				 tpf_dtype_name(x->dtype));
	return TPF_OK;
}

/* Clip: the output of the input's size and dtype, bounds given as inputs
 * scalars of the input's dtype (bound[0] min, bound[1] max; NULL: none,
 * else the operand), or before opset 11 (one input) float attributes,
 * which an integer input may not have. */
struct tpf_clip_bounds {
	const struct tpf_ktensor *bound[2];
	int has_lo, has_hi; /* attributes */
	double lo, hi;
};

static inline enum tpf_status tpf_clip_check(const struct tpf_kernel_call *c, struct tpf_clip_bounds *b)
{
	const struct tpf_ktensor *x = &c->in[0];
	b->bound[0] = b->bound[1] = NULL;
	b->has_lo = b->has_hi = 0;
	b->lo = b->hi = 0;
	if (x->numel != c->out[0].numel || x->dtype != c->out[0].dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "output differs from the input in size or dtype");
	for (size_t k = 1; k < 3 && k < c->n_in; k++) {
		const struct tpf_ktensor *t = &c->in[k];
		if (!t->data || t->rank < 0)
			continue;
		if (t->numel != 1 || t->dtype != x->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "%s must be a scalar of the input's dtype",
					 k == 1 ? "min" : "max");
		b->bound[k - 1] = t;
	}
	if (c->n_in == 1) {
		const struct tpf_attr *lo = tpf_node_attr(c->node, "min"), *hi = tpf_node_attr(c->node, "max");
		b->has_lo = lo && lo->kind == TPF_ATTR_FLOAT;
		b->has_hi = hi && hi->kind == TPF_ATTR_FLOAT;
		b->lo = b->has_lo ? lo->f : 0.0;
		b->hi = b->has_hi ? hi->f : 0.0;
		if ((b->has_lo || b->has_hi) && tpf_dtype_is_integral(x->dtype))
			return tpf_kfail(c, TPF_ERR_INVALID, "float bounds for an integer input");
	}
	return TPF_OK;
}

#endif /* TPF_ELEMENTWISE_OPS_H */
