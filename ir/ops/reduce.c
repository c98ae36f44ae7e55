/* SPDX-License-Identifier: MIT */
/*
 * Reductions along axes: ReduceMax, ReduceMean, ReduceSum, ArgMax, TopK,
 * and Softmax (which keeps the shape).  The axes moved from an attribute
 * to an input at opset 13 (ReduceSum) and 18 (ReduceMax, ReduceMean).
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

enum { T = 1, I64 };

static void reduce_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t axes[TPF_MAX_RANK], ax, keep = 1, noop = 0;
	uint8_t red[TPF_MAX_RANK];
	int k, i;

	if (!out)
		return;
	op_attr_int(c, "keepdims", &keep);
	if (c->node->op == TPF_OP_ARGMAX) {
		k = 1;
		if (!op_attr_int(c, "axis", &axes[0]))
			return;
	} else {
		k = op_read_axes(c, axes);
	}
	if (in->rank < 0)
		return;
	if (k == -2) {
		if (keep)
			op_type_set_rank(out, in->rank);
		return;
	}
	memset(red, 0, sizeof(red));
	if (k <= 0) {
		op_attr_int(c, "noop_with_empty_axes", &noop);
		if (noop) {
			op_type_shape_of(out, in);
			return;
		}
		memset(red, 1, sizeof(red));
	} else {
		for (i = 0; i < k; i++) {
			if (op_norm_axis(axes[i], in->rank, &ax)) {
				if (c->node->op == TPF_OP_ARGMAX)
					op_error(c,
						 "attribute 'axis' = %" PRId64 " is out of range for rank %d",
						 axes[i], in->rank);
				else
					op_error(c, "axis %" PRId64 " is out of range for rank %d",
						 axes[i], in->rank);
				return;
			}
			red[ax] = 1;
		}
	}
	out->rank = 0;
	for (i = 0; i < in->rank; i++) {
		if (!red[i])
			out->dims[out->rank++] = in->dims[i];
		else if (keep)
			out->dims[out->rank++] = dim_of(1);
	}
}

/* What the sharder tells apart (enum tpf_shard_arith). */
#define REDUCE_ARITH(op)                                                                           \
	((op) == TPF_OP_REDUCE_SUM ? TPF_SHARD_SUM : (op) == TPF_OP_REDUCE_MAX ? TPF_SHARD_MAX : 0)

#define REDUCE_OP(id, op_type, dtypes, expected, axes_input_since)                                \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.host_inputs = 1u << 1,                                                            \
		.info = {"", op_type, 1, 2, 1, 1},                                                 \
		.since = 1,                                                                        \
		.inputs = {{"data", T}, {"axes", I64}},                                            \
		.outputs = {{"reduced", T}},                                                       \
		.types = {[T] = {"T", dtypes, expected}, [I64] = TYPE_INT64},                      \
		.attrs = (const struct op_attr[]){                                                 \
			{.name = "axes", .kind = TPF_ATTR_INTS, .until = axes_input_since},        \
			ATTR_INT("keepdims", 1),                                                   \
			{.name = "noop_with_empty_axes", .kind = TPF_ATTR_INT,                    \
			 .flags = ATTR_DEFAULT, .since = axes_input_since},                       \
			{0},                                                                       \
		},                                                                                 \
		.forms = {{axes_input_since, 1, 1}},                                               \
		.shape = reduce_shape,                                                             \
		.shard = SHARD(REDUCE, REDUCE_ARITH(TPF_OP_##id)),                                 \
	}

REDUCE_OP(REDUCE_MAX, "ReduceMax", DT_NUMERIC | DT(BOOL), "a numeric or bool type", 18);
REDUCE_OP(REDUCE_MEAN, "ReduceMean", DT_NUMERIC, "a numeric type", 18);
REDUCE_OP(REDUCE_SUM, "ReduceSum", DT_NUMERIC, "a numeric type", 13);

const struct tpf_op_def tpf_op_def_ARGMAX = {
	OP_TO_INT64("ArgMax", 1, "reduced", TYPE_NUMERIC("T")),
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", 0),
		ATTR_INT("keepdims", 1),
		{.name = "select_last_index", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .since = 12},
		{0},
	},
	.shape = reduce_shape,
	.shard = SHARD(ARG_EXTREME, 0),
};

static void softmax_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t ax;

	if (op_attr_axis(c, "axis", x->rank, &ax) >= 0 && y)
		op_type_shape_of(y, x);
}

const struct tpf_op_def tpf_op_def_SOFTMAX = {
	OP_UNARY("Softmax", 1, "input", "output", TYPE_FLOATS("T")),
	.attrs = (const struct op_attr[]){ATTR_INT("axis", -1), {0}},
	.shape = softmax_shape,
	.shard = SHARD(ALONG_AXIS, -1),
};

static void topk_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *vals = op_out(c, 0), *idx = op_out(c, 1);
	int64_t k = -1, ax, kv[1];
	size_t j;

	if (op_in_present(c, 1)) {
		if (op_static_values(op_in(c, 1), kv, 1) == 1)
			k = kv[0];
	} else if (!op_attr_int(c, "k", &k)) {
		k = -1;
	}
	if (op_attr_axis(c, "axis", x->rank, &ax) <= 0)
		return;
	if (k >= 0 && dim_is_static(&x->dims[ax]) && x->dims[ax].value < k) {
		op_error(c, "k = %" PRId64 " exceeds dimension %" PRId64 " = %" PRId64, k, ax,
			 x->dims[ax].value);
		return;
	}
	if (k < -1 && c->mode == TPF_SHAPE_CONCRETE) {
		op_error(c, "k = %" PRId64 " is negative", k);
		return;
	}
	for (j = 0; j < 2; j++) {
		struct tpf_op_type *t = j ? idx : vals;

		if (!t)
			continue;
		op_type_shape_of(t, x);
		t->dims[ax] = dim_of(k);
	}
}

const struct tpf_op_def tpf_op_def_TOPK = {
	.host_inputs = 1u << 1, /* K */
	.info = {"", "TopK", 2, 2, 2, 2},
	.since = 1,
	.inputs = {{"X", T}, {"K", I64}},
	.outputs = {{"Values", T}, {"Indices", I64}},
	.types = {[T] = TYPE_NUMERIC("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", -1),
		{.name = "largest", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .i = 1, .since = 11},
		{.name = "sorted", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .i = 1, .since = 11},
		{.name = "k", .kind = TPF_ATTR_INT, .until = 10, .required_before = 10},
		{0},
	},
	.forms = {{10, 1, 1}},
	.shape = topk_shape,
	.shard = SHARD(ALONG_AXIS, -1),
};
