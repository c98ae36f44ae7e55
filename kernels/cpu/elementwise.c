/* SPDX-License-Identifier: MIT */
/* Elementwise kernels with numpy broadcasting: binary arithmetic, Mod,
 * comparisons and logic (And, Or, Xor), variadic Max/Min, unary math,
 * IsNaN/IsInf, Clip, Where, Cast, SigmoidGateAdd.
 * Float types compute in double and round once when stored, which equals
 * float32 arithmetic for + - * / and sqrt and is more accurate otherwise;
 * integer types compute in int64. */
#include "cpu-kernels.h"
#include "elementwise-ops.h"

#include <math.h>
#include <string.h>

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
			uint64_t r = tpf_binop_u(op, ((const uint64_t *)a->data)[it.off[0]],
						 ((const uint64_t *)b->data)[it.off[1]]);
			tpf_elem_store_int(y->dtype, y->data, i, (int64_t)r);
		} else if (integral) {
			int64_t r = tpf_binop_i(op, tpf_elem_load_int(a->dtype, a->data, it.off[0]),
						tpf_elem_load_int(b->dtype, b->data, it.off[1]), fmod_c);
			tpf_elem_store_int(y->dtype, y->data, i, r);
		} else {
			double r = tpf_binop_d(op, tpf_elem_load(a->dtype, a->data, it.off[0]),
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
	int fmod_c = 0;
	enum tpf_status st = tpf_binary_check(c, &fmod_c);
	return st ? st : binary(c, c->node->op, &c->in[0], &c->in[1], &c->out[0], fmod_c);
}

TPF_CPU_KERNEL(tpf_cpu_variadic)
{
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_status st = tpf_variadic_check(c);
	if (st)
		return st;
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
	for (size_t k = 1; k < c->n_in && !st; k++)
		st = binary(c, c->node->op, y, &c->in[k], y, 0);
	return st;
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
	for (int64_t i = 0; i < x->numel; i++)
		py[i] = (uint8_t)tpf_float_class(op, tpf_elem_load(x->dtype, x->data, i), neg, pos);
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_unary)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_op op = c->node->op;
	enum tpf_status st = tpf_unary_check(c);
	if (st)
		return st;
	if (op == TPF_OP_IS_NAN || op == TPF_OP_IS_INF)
		return float_class(c, x, y);
	int integral = tpf_dtype_is_integral(x->dtype);
	if (x->dtype == TPF_DTYPE_FLOAT && y->dtype == TPF_DTYPE_FLOAT && op == TPF_OP_SIGMOID) {
		const float *px = x->data;
		float *py = y->data;
		for (int64_t i = 0; i < x->numel; i++)
			py[i] = (float)tpf_unop_d(op, px[i]);
		return TPF_OK;
	}
	for (int64_t i = 0; i < x->numel; i++) {
		if (integral)
			tpf_elem_store_int(y->dtype, y->data, i,
					   tpf_unop_i(op, tpf_elem_load_int(x->dtype, x->data, i)));
		else
			tpf_elem_store(y->dtype, y->data, i, tpf_unop_d(op, tpf_elem_load(x->dtype, x->data, i)), 1);
	}
	return TPF_OK;
}

/* Clip(x, min, max): bounds from inputs (opset 11) or attributes (before);
 * an absent bound does not clip.  min > max gives max, as the spec says;
 * NaN stays NaN. */
TPF_CPU_KERNEL(tpf_cpu_clip)
{
	struct tpf_clip_bounds b;
	enum tpf_status st = tpf_clip_check(c, &b);
	if (st)
		return st;
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int has_lo = b.has_lo || b.bound[0], has_hi = b.has_hi || b.bound[1];
	double lo = b.bound[0] ? tpf_elem_load(x->dtype, b.bound[0]->data, 0) : b.lo;
	double hi = b.bound[1] ? tpf_elem_load(x->dtype, b.bound[1]->data, 0) : b.hi;
	int64_t ilo = b.bound[0] ? tpf_elem_load_int(x->dtype, b.bound[0]->data, 0) : 0;
	int64_t ihi = b.bound[1] ? tpf_elem_load_int(x->dtype, b.bound[1]->data, 0) : 0;
	int integral = tpf_dtype_is_integral(x->dtype);
	for (int64_t i = 0; i < x->numel; i++) {
		if (x->dtype == TPF_DTYPE_UINT64) {
			uint64_t v = ((const uint64_t *)x->data)[i];
			TPF_CLAMP(v, has_lo, (uint64_t)ilo, has_hi, (uint64_t)ihi);
			((uint64_t *)y->data)[i] = v;
		} else if (integral) {
			int64_t v = tpf_elem_load_int(x->dtype, x->data, i);
			TPF_CLAMP(v, has_lo, ilo, has_hi, ihi);
			tpf_elem_store_int(y->dtype, y->data, i, v);
		} else {
			double v = tpf_elem_load(x->dtype, x->data, i);
			TPF_CLAMP(v, has_lo, lo, has_hi, hi);
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
