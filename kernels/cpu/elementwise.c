/* SPDX-License-Identifier: MIT */
/* Elementwise kernels with numpy broadcasting: binary arithmetic, Mod,
 * comparisons and logic (And, Or, Xor), variadic Max/Min, unary math,
 * IsNaN/IsInf, Clip, Where, Cast, SigmoidGateAdd.
 * Float types compute in double and round once when stored, which equals
 * float32 arithmetic for + - * / and sqrt and is more accurate otherwise;
 * integer types compute in int64. */
#include "cpu-kernels.h"

#include <math.h>
#include <string.h>

static int is_compare(enum tpf_op op)
{
	return op == TPF_OP_EQUAL || op == TPF_OP_GREATER || op == TPF_OP_LESS ||
	       op == TPF_OP_GREATER_OR_EQUAL || op == TPF_OP_LESS_OR_EQUAL;
}

static int is_logic(enum tpf_op op)
{
	return op == TPF_OP_AND || op == TPF_OP_OR || op == TPF_OP_XOR;
}

/* Mod of floats: C's fmod (fmod = 1), or the divisor's sign as numpy's
 * mod has it (fmod = 0): -3 mod inf is inf, 0 mod -2 is -0. */
static double mod_f(double a, double b, int fmod_c)
{
	double m = fmod(a, b);
	if (fmod_c || b == 0 || isnan(m))
		return m;
	if (m != 0) {
		if ((b < 0) != (m < 0))
			m += b;
		return m;
	}
	return copysign(0.0, b);
}

/* Mod of integers: truncated (fmod = 1) or floored (fmod = 0, the
 * divisor's sign); a zero divisor gives 0. */
static int64_t mod_i(int64_t a, int64_t b, int fmod_c)
{
	if (b == 0 || (b == -1 && a == INT64_MIN))
		return 0;
	int64_t m = a % b;
	if (!fmod_c && m != 0 && ((m < 0) != (b < 0)))
		m += b;
	return m;
}

static double binop_f(enum tpf_op op, double a, double b, int fmod_c)
{
	switch (op) {
	case TPF_OP_MOD:
		return mod_f(a, b, fmod_c);
	case TPF_OP_GREATER_OR_EQUAL:
		return a >= b;
	case TPF_OP_LESS_OR_EQUAL:
		return a <= b;
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
	case TPF_OP_EQUAL:
		return a == b;
	case TPF_OP_GREATER:
		return a > b;
	case TPF_OP_LESS:
		return a < b;
	default:
		return NAN;
	}
}

static int64_t binop_i(enum tpf_op op, int64_t a, int64_t b, int fmod_c)
{
	switch (op) {
	case TPF_OP_MOD:
		return mod_i(a, b, fmod_c);
	case TPF_OP_GREATER_OR_EQUAL:
		return a >= b;
	case TPF_OP_LESS_OR_EQUAL:
		return a <= b;
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
		if (b == 0 || (b == -1 && a == INT64_MIN))
			return 0;
		return a / b;
	case TPF_OP_MAX:
		return a > b ? a : b;
	case TPF_OP_MIN:
		return a < b ? a : b;
	case TPF_OP_EQUAL:
		return a == b;
	case TPF_OP_GREATER:
		return a > b;
	case TPF_OP_LESS:
		return a < b;
	default:
		return 0;
	}
}

/* uint64 operands: unsigned arithmetic, comparisons and Mod (values past
 * INT64_MAX would change sign in int64). */
static uint64_t binop_u(enum tpf_op op, uint64_t a, uint64_t b)
{
	switch (op) {
	case TPF_OP_ADD:
		return a + b;
	case TPF_OP_SUB:
		return a - b;
	case TPF_OP_MUL:
		return a * b;
	case TPF_OP_DIV:
		return b ? a / b : 0;
	case TPF_OP_MOD:
		return b ? a % b : 0;
	case TPF_OP_MAX:
		return a > b ? a : b;
	case TPF_OP_MIN:
		return a < b ? a : b;
	case TPF_OP_EQUAL:
		return a == b;
	case TPF_OP_GREATER:
		return a > b;
	case TPF_OP_LESS:
		return a < b;
	case TPF_OP_GREATER_OR_EQUAL:
		return a >= b;
	case TPF_OP_LESS_OR_EQUAL:
		return a <= b;
	default:
		return 0;
	}
}

/* y = a OP b with broadcasting; y may alias a when shapes are equal.
 * fmod_c: Mod's fmod attribute. */
static enum tpf_status binary(const struct tpf_kernel_call *c, enum tpf_op op,
			      const struct tpf_ktensor *a, const struct tpf_ktensor *b,
			      struct tpf_ktensor *y, int fmod_c)
{
	const struct tpf_ktensor *ins[2] = {a, b};
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, y, ins, 2))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	/* float32 fast path: same shapes, or a scalar second operand */
	if (a->dtype == TPF_DTYPE_FLOAT && b->dtype == TPF_DTYPE_FLOAT && y->dtype == TPF_DTYPE_FLOAT &&
	    a->numel == y->numel && (b->numel == y->numel || b->numel == 1) &&
	    (op == TPF_OP_ADD || op == TPF_OP_SUB || op == TPF_OP_MUL || op == TPF_OP_DIV)) {
		const float *pa = a->data, *pb = b->data;
		float *py = y->data;
		int64_t sb = b->numel == 1 ? 0 : 1;
		for (int64_t i = 0; i < y->numel; i++) {
			float x = pa[i], z = pb[i * sb];
			py[i] = op == TPF_OP_ADD ? x + z : op == TPF_OP_SUB ? x - z : op == TPF_OP_MUL ? x * z : x / z;
		}
		return TPF_OK;
	}
	int integral = tpf_dtype_is_integral(a->dtype) && op != TPF_OP_POW;
	int pow_int = op == TPF_OP_POW && tpf_dtype_is_integral(a->dtype);
	int u64 = a->dtype == TPF_DTYPE_UINT64 && b->dtype == TPF_DTYPE_UINT64 && op != TPF_OP_POW;
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it)) {
		if (u64) {
			uint64_t r = binop_u(op, ((const uint64_t *)a->data)[it.off[0]],
					     ((const uint64_t *)b->data)[it.off[1]]);
			tpf_elem_store_int(y->dtype, y->data, i, (int64_t)r);
		} else if (integral) {
			int64_t r = binop_i(op, tpf_elem_load_int(a->dtype, a->data, it.off[0]),
					    tpf_elem_load_int(b->dtype, b->data, it.off[1]), fmod_c);
			tpf_elem_store_int(y->dtype, y->data, i, r);
		} else {
			double r = binop_f(op, tpf_elem_load(a->dtype, a->data, it.off[0]),
					   tpf_elem_load(b->dtype, b->data, it.off[1]), fmod_c);
			if (pow_int)
				r = nearbyint(r);
			tpf_elem_store(y->dtype, y->data, i, r, 1);
		}
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_binary)
{
	enum tpf_op op = c->node->op;
	if (c->n_in != 2 || c->n_out != 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects 2 inputs and 1 output");
	if (!is_compare(op) && op != TPF_OP_POW && c->in[0].dtype != c->in[1].dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "operand dtypes differ (%s, %s)",
				 tpf_dtype_name(c->in[0].dtype), tpf_dtype_name(c->in[1].dtype));
	if (is_logic(op) && c->in[0].dtype != TPF_DTYPE_BOOL)
		return tpf_kfail(c, TPF_ERR_INVALID, "operands must be bool, not %s",
				 tpf_dtype_name(c->in[0].dtype));
	if ((is_compare(op) || is_logic(op)) && c->out[0].dtype != TPF_DTYPE_BOOL)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be bool, not %s",
				 tpf_dtype_name(c->out[0].dtype));
	int fmod_c = op == TPF_OP_MOD ? tpf_node_attr_int(c->node, "fmod", 0) != 0 : 0;
	return binary(c, op, &c->in[0], &c->in[1], &c->out[0], fmod_c);
}

TPF_CPU_KERNEL(tpf_cpu_variadic)
{
	struct tpf_ktensor *y = &c->out[0];
	if (c->n_in < 1)
		return tpf_kfail(c, TPF_ERR_INVALID, "expects at least one input");
	/* y = broadcast(in[0]), then y = y OP in[k] */
	const struct tpf_ktensor *ins[1] = {&c->in[0]};
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, y, ins, 1))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	int integral = tpf_dtype_is_integral(y->dtype);
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it)) {
		if (integral)
			tpf_elem_store_int(y->dtype, y->data, i,
					   tpf_elem_load_int(c->in[0].dtype, c->in[0].data, it.off[0]));
		else
			tpf_elem_store(y->dtype, y->data, i,
				       tpf_elem_load(c->in[0].dtype, c->in[0].data, it.off[0]), 1);
	}
	for (size_t k = 1; k < c->n_in; k++) {
		if (c->in[k].dtype != y->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "operand %zu has dtype %s, expected %s", k,
					 tpf_dtype_name(c->in[k].dtype), tpf_dtype_name(y->dtype));
		enum tpf_status st = binary(c, c->node->op, y, &c->in[k], y, 0);
		if (st)
			return st;
	}
	return TPF_OK;
}

static double unop_f(enum tpf_op op, double x)
{
	switch (op) {
	case TPF_OP_SIGMOID:
		return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
	case TPF_OP_RELU:
		return x > 0 ? x : (isnan(x) ? x : 0.0);
	case TPF_OP_SQRT:
		return sqrt(x);
	case TPF_OP_RECIPROCAL:
		return 1.0 / x;
	case TPF_OP_NEG:
		return -x;
	case TPF_OP_EXP:
		return exp(x);
	case TPF_OP_TANH:
		return tanh(x);
	case TPF_OP_ERF:
		return erf(x);
	case TPF_OP_ABS:
		return fabs(x);
	case TPF_OP_SIN:
		return sin(x);
	case TPF_OP_COS:
		return cos(x);
	case TPF_OP_NOT:
		return x == 0;
	case TPF_OP_FLOOR:
		return floor(x);
	case TPF_OP_CEIL:
		return ceil(x);
	case TPF_OP_LOG:
		return log(x);
	case TPF_OP_SOFTPLUS:
		/* log(1 + e^x) without overflow */
		return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
	default:
		return NAN;
	}
}

/* IsNaN / IsInf: a bool output of a float input. */
static enum tpf_status float_class(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
				   struct tpf_ktensor *y)
{
	enum tpf_op op = c->node->op;
	int neg = 1, pos = 1;
	if (tpf_dtype_is_integral(x->dtype))
		return tpf_kfail(c, TPF_ERR_INVALID, "input must be a float type, not %s",
				 tpf_dtype_name(x->dtype));
	if (y->dtype != TPF_DTYPE_BOOL)
		return tpf_kfail(c, TPF_ERR_INVALID, "output must be bool, not %s", tpf_dtype_name(y->dtype));
	if (op == TPF_OP_IS_INF) {
		neg = tpf_node_attr_int(c->node, "detect_negative", 1) != 0;
		pos = tpf_node_attr_int(c->node, "detect_positive", 1) != 0;
	}
	uint8_t *py = y->data;
	for (int64_t i = 0; i < x->numel; i++) {
		double v = tpf_elem_load(x->dtype, x->data, i);
		py[i] = op == TPF_OP_IS_NAN ? isnan(v) != 0 : isinf(v) && (v > 0 ? pos : neg);
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_unary)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_op op = c->node->op;
	if (x->numel != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size differs from the input's");
	if (op == TPF_OP_IS_NAN || op == TPF_OP_IS_INF)
		return float_class(c, x, y);
	int integral = tpf_dtype_is_integral(x->dtype);
	if (integral && op != TPF_OP_ABS && op != TPF_OP_NEG && op != TPF_OP_NOT && op != TPF_OP_RELU)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "integer dtype %s not supported",
				 tpf_dtype_name(x->dtype));
	if (x->dtype == TPF_DTYPE_FLOAT && y->dtype == TPF_DTYPE_FLOAT && op == TPF_OP_SIGMOID) {
		const float *px = x->data;
		float *py = y->data;
		for (int64_t i = 0; i < x->numel; i++)
			py[i] = (float)unop_f(op, px[i]);
		return TPF_OK;
	}
	for (int64_t i = 0; i < x->numel; i++) {
		if (integral) {
			int64_t v = tpf_elem_load_int(x->dtype, x->data, i);
			int64_t r = op == TPF_OP_ABS ? (v < 0 ? -v : v)
				    : op == TPF_OP_NEG ? -v
				    : op == TPF_OP_NOT ? v == 0
						       : (v > 0 ? v : 0);
			tpf_elem_store_int(y->dtype, y->data, i, r);
		} else {
			tpf_elem_store(y->dtype, y->data, i, unop_f(op, tpf_elem_load(x->dtype, x->data, i)), 1);
		}
	}
	return TPF_OK;
}

/* Clip(x, min, max): bounds from inputs (opset 11) or attributes (before);
 * an absent bound does not clip.  min > max gives max, as the spec says;
 * NaN stays NaN. */
TPF_CPU_KERNEL(tpf_cpu_clip)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int has_lo = 0, has_hi = 0;
	double lo = 0, hi = 0;
	int64_t ilo = 0, ihi = 0;
	int integral = tpf_dtype_is_integral(x->dtype);
	if (x->numel != y->numel || x->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "output differs from the input in size or dtype");
	for (size_t k = 1; k < 3; k++) {
		const struct tpf_ktensor *b = k < c->n_in ? &c->in[k] : NULL;
		if (!b || !b->data || b->rank < 0)
			continue;
		if (b->numel != 1 || b->dtype != x->dtype)
			return tpf_kfail(c, TPF_ERR_INVALID, "%s must be a scalar of the input's dtype",
					 k == 1 ? "min" : "max");
		if (k == 1) {
			has_lo = 1;
			lo = tpf_elem_load(b->dtype, b->data, 0);
			ilo = tpf_elem_load_int(b->dtype, b->data, 0);
		} else {
			has_hi = 1;
			hi = tpf_elem_load(b->dtype, b->data, 0);
			ihi = tpf_elem_load_int(b->dtype, b->data, 0);
		}
	}
	if (c->n_in == 1) {
		const struct tpf_attr *a = tpf_node_attr(c->node, "min"), *b = tpf_node_attr(c->node, "max");
		if (a && a->kind == TPF_ATTR_FLOAT) {
			has_lo = 1;
			lo = a->f;
		}
		if (b && b->kind == TPF_ATTR_FLOAT) {
			has_hi = 1;
			hi = b->f;
		}
		if ((has_lo || has_hi) && integral)
			return tpf_kfail(c, TPF_ERR_INVALID, "float bounds for an integer input");
	}
	int u64 = x->dtype == TPF_DTYPE_UINT64;
	for (int64_t i = 0; i < x->numel; i++) {
		if (u64) {
			uint64_t v = ((const uint64_t *)x->data)[i];
			if (has_lo && v < (uint64_t)ilo)
				v = (uint64_t)ilo;
			if (has_hi && v > (uint64_t)ihi)
				v = (uint64_t)ihi;
			((uint64_t *)y->data)[i] = v;
		} else if (integral) {
			int64_t v = tpf_elem_load_int(x->dtype, x->data, i);
			if (has_lo && v < ilo)
				v = ilo;
			if (has_hi && v > ihi)
				v = ihi;
			tpf_elem_store_int(y->dtype, y->data, i, v);
		} else {
			double v = tpf_elem_load(x->dtype, x->data, i);
			if (has_lo && v < lo)
				v = lo;
			if (has_hi && v > hi)
				v = hi;
			tpf_elem_store(y->dtype, y->data, i, v, 1);
		}
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_where)
{
	const struct tpf_ktensor *ins[3] = {&c->in[0], &c->in[1], &c->in[2]};
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_bcast it;
	if (c->in[1].dtype != y->dtype || c->in[2].dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "X and Y must have the output dtype");
	if (tpf_bcast_init(&it, y, ins, 3))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	size_t es = tpf_elem_size(y->dtype);
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it)) {
		int cond = tpf_elem_load_int(c->in[0].dtype, c->in[0].data, it.off[0]) != 0;
		const struct tpf_ktensor *src = cond ? ins[1] : ins[2];
		int64_t off = cond ? it.off[1] : it.off[2];
		if (es)
			memcpy((char *)y->data + (size_t)i * es, (const char *)src->data + (size_t)off * es, es);
		else
			tpf_elem_store_int(y->dtype, y->data, i, tpf_elem_load_int(src->dtype, src->data, off));
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_cast)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	if (x->numel != y->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output size differs from the input's");
	if (x->dtype == TPF_DTYPE_STRING || y->dtype == TPF_DTYPE_STRING ||
	    x->dtype == TPF_DTYPE_COMPLEX64 || x->dtype == TPF_DTYPE_COMPLEX128 ||
	    y->dtype == TPF_DTYPE_COMPLEX64 || y->dtype == TPF_DTYPE_COMPLEX128)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "cast from %s to %s not supported",
				 tpf_dtype_name(x->dtype), tpf_dtype_name(y->dtype));
	int saturate = c->node ? (int)tpf_node_attr_int(c->node, "saturate", 1) : 1;
	if (y->dtype == TPF_DTYPE_FLOAT8E8M0) {
		const char *rm = c->node ? tpf_node_attr_string(c->node, "round_mode", "up") : "up";
		int mode = strcmp(rm, "nearest") == 0 ? 1 : strcmp(rm, "down") == 0 ? 2 : 0;
		for (int64_t i = 0; i < x->numel; i++)
			((uint8_t *)y->data)[i] =
				tpf_f64_to_e8m0((float)tpf_elem_load(x->dtype, x->data, i), mode, saturate);
		return TPF_OK;
	}
	tpf_elem_convert(y->dtype, y->data, x->dtype, x->data, x->numel, saturate);
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_sigmoid_gate_add)
{
	const struct tpf_ktensor *ins[3] = {&c->in[0], &c->in[1], &c->in[2]};
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_bcast it;
	if (tpf_bcast_init(&it, y, ins, 3))
		return tpf_kfail(c, TPF_ERR_INVALID, "operands do not broadcast to the output shape");
	for (int64_t i = 0; i < y->numel; i++, tpf_bcast_next(&it)) {
		float f = (float)tpf_elem_load(ins[0]->dtype, ins[0]->data, it.off[0]);
		float g = (float)tpf_elem_load(ins[1]->dtype, ins[1]->data, it.off[1]);
		float s = (float)tpf_elem_load(ins[2]->dtype, ins[2]->data, it.off[2]);
		float sig = 1.0f / (1.0f + expf(-g));
		tpf_elem_store(y->dtype, y->data, i, f + sig * s, 1);
	}
	return TPF_OK;
}
