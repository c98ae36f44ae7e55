/* SPDX-License-Identifier: MIT */
/*
 * ONNX Attention (opset 23): Q, K, V of rank 4 (batch, heads, sequence,
 * head size) or rank 3 (batch, sequence, heads * head size, with
 * q_num_heads and kv_num_heads); past key and value are concatenated in
 * front of K and V along the sequence axis (present_key, present_value).
 */
#include "op-def.h"

#include <inttypes.h>

enum { T1 = 1, U, I64 };

/* present = past ++ new along the sequence axis (2 in the 4-D layout). */
static void present_shape(const struct tpf_op_type *src, const struct tpf_op_type *past,
			  struct tpf_op_type *out)
{
	if (src->rank != 4)
		return;
	op_type_shape_of(out, src);
	if (!past->present)
		return;
	int64_t total;
	if (past->rank == 4 && dim_is_static(&past->dims[2]) && dim_is_static(&src->dims[2]) &&
	    !__builtin_add_overflow(past->dims[2].value, src->dims[2].value, &total))
		out->dims[2] = dim_of(total);
	else
		out->dims[2] = dim_unknown();
}

static void attention_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *q = op_in(c, 0), *k = op_in(c, 1), *v = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t qh = 0, kvh = 0, hd;

	op_attr_int(c, "q_num_heads", &qh);
	op_attr_int(c, "kv_num_heads", &kvh);
	if (q->rank >= 0 && q->rank != 3 && q->rank != 4) {
		op_error(c, "Q has rank %d; expected 3 or 4", q->rank);
		return;
	}
	if (y && q->rank == 4 && v->rank == 4) {
		y->rank = 4;
		y->dims[0] = q->dims[0];
		y->dims[1] = q->dims[1];
		y->dims[2] = q->dims[2];
		y->dims[3] = v->dims[3];
	} else if (y && q->rank == 3 && v->rank == 3) {
		y->rank = 3;
		y->dims[0] = q->dims[0];
		y->dims[1] = q->dims[1];
		y->dims[2] = dim_unknown();
		if (qh > 0 && kvh > 0 && dim_is_static(&v->dims[2]) && v->dims[2].value % kvh == 0 &&
		    !__builtin_mul_overflow(qh, v->dims[2].value / kvh, &hd))
			y->dims[2] = dim_of(hd);
	}
	if (op_out(c, 1))
		present_shape(k, op_in(c, 4), op_out(c, 1));
	if (op_out(c, 2))
		present_shape(v, op_in(c, 5), op_out(c, 2));
}

const struct tpf_op_def tpf_op_def_ATTENTION = {
	.info = {"", "Attention", 3, 7, 1, 4},
	.since = 23,
	.inputs = {{"Q", T1}, {"K", T1}, {"V", T1}, {"attn_mask", U}, {"past_key", T1},
		   {"past_value", T1}, {"nonpad_kv_seqlen", I64}},
	.outputs = {{"Y", T1}, {"present_key", T1}, {"present_value", T1}, {"qk_matmul_output", T1}},
	.types = {[T1] = {"T1", DT_FLOATS, "a float type"},
		  [U] = {"U", DT_FLOATS | DT(BOOL), "bool or a float type"},
		  [I64] = {"tensor(int64)", DT(INT64), "int64"}},
	.attrs = (const struct op_attr[]){
		ATTR_INT("is_causal", 0),
		ATTR_OF("kv_num_heads", TPF_ATTR_INT),
		ATTR_OF("q_num_heads", TPF_ATTR_INT),
		ATTR_INT("qk_matmul_output_mode", 0),
		ATTR_OF("scale", TPF_ATTR_FLOAT),
		ATTR_FLOAT("softcap", 0.0f),
		ATTR_OF("softmax_precision", TPF_ATTR_INT),
		{0},
	},
	.shape = attention_shape,
};
