/* SPDX-License-Identifier: MIT */
/*
 * Elementwise ops: unary math, binary arithmetic and comparisons (numpy
 * broadcasting), Where, Not, Cast.  Type constraints as the ONNX spec
 * lists them in its latest opsets (a model of an older opset is checked
 * against the newest list, which only ever grew).  Add, Sub, Mul and Div
 * of known integer values compute the result's values, as ONNX's data
 * propagation does, so shape arithmetic folds.
 */
#include "op-def.h"

#include <inttypes.h>

enum { T = 1, T1, B };

#define SIGNED_EXPECTED "a float or signed integer type"

/* One input X, one output Y of X's type and shape. */
#define UNARY_OP(id, op_type, since_opset, dtypes, expected)                                       \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		OP_UNARY(op_type, since_opset, "X", "Y", {"T", dtypes, expected}),                 \
		.shard = SHARD(UNARY, TPF_OP_##id == TPF_OP_NEG), /* Neg is linear */              \
	}

UNARY_OP(ABS, "Abs", 1, DT_NUMERIC, "a numeric type");
UNARY_OP(NEG, "Neg", 1, DT_FLOATS | DT_SIGNED_INTS, SIGNED_EXPECTED);
UNARY_OP(RELU, "Relu", 1, DT_FLOATS | DT_SIGNED_INTS, SIGNED_EXPECTED);
UNARY_OP(ERF, "Erf", 9, DT_NUMERIC, "a numeric type");
UNARY_OP(COS, "Cos", 7, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(SIN, "Sin", 7, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(EXP, "Exp", 1, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(SQRT, "Sqrt", 1, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(TANH, "Tanh", 1, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(SIGMOID, "Sigmoid", 1, DT_FLOATS, "a float type (float16, bfloat16, float, double)");
UNARY_OP(RECIPROCAL, "Reciprocal", 1, DT_FLOATS, "a float type (float16, bfloat16, float, double)");

const struct tpf_op_def tpf_op_def_NOT = {
	OP_UNARY("Not", 1, "X", "Y", TYPE_BOOL("T")),
	.shard = SHARD(UNARY, 0),
};

/* Shape and values pass through. */
static void identity_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *y = op_out(c, 0);

	if (!y)
		return;
	op_type_shape_of(y, op_in(c, 0));
	op_type_copy_values(y, op_in(c, 0));
}

const struct tpf_op_def tpf_op_def_IDENTITY = {
	OP_UNARY("Identity", 1, "input", "output", TYPE_ANY("V")),
	.shape = identity_shape,
	.shard = SHARD(UNARY, 1),
};

/* ------------------------------------------------------------------ binary */

/* Values of a broadcast binary op on known integer values (shape
 * arithmetic: one operand a scalar or both of one length).  Static values
 * compute; a symbolic one passes through x + 0, x - 0, x * 1, x / 1; the
 * rest is unknown. */
static struct tpf_dim arith_value(enum tpf_op op, const struct tpf_dim *a, const struct tpf_dim *b)
{
	int sa = !a->param && a->value != OP_VALUE_UNKNOWN, sb = !b->param && b->value != OP_VALUE_UNKNOWN;
	int64_t x = a->value, z = b->value, r;

	if (!sa || !sb) {
		if (a->param && sb && ((z == 0 && (op == TPF_OP_ADD || op == TPF_OP_SUB)) ||
				       (z == 1 && (op == TPF_OP_MUL || op == TPF_OP_DIV))))
			return *a;
		if (b->param && sa && ((x == 0 && op == TPF_OP_ADD) || (x == 1 && op == TPF_OP_MUL)))
			return *b;
		return value_unknown();
	}
	switch (op) {
	case TPF_OP_ADD:
		if (__builtin_add_overflow(x, z, &r))
			return value_unknown();
		break;
	case TPF_OP_SUB:
		if (__builtin_sub_overflow(x, z, &r))
			return value_unknown();
		break;
	case TPF_OP_MUL:
		if (__builtin_mul_overflow(x, z, &r))
			return value_unknown();
		break;
	default:
		/* integer Div truncates toward zero */
		if (z == 0 || (x == INT64_MIN && z == -1))
			return value_unknown();
		r = x / z;
		break;
	}
	return (struct tpf_dim){r, NULL, NULL};
}

static void arith_values(struct tpf_shape_call *c, struct tpf_op_type *y)
{
	const struct tpf_op_type *a = op_in(c, 0), *b = op_in(c, 1);
	int na = a->n_values, nb = b->n_values, n, i;

	if (na < 0 || nb < 0 || (y->dtype != TPF_DTYPE_INT64 && y->dtype != TPF_DTYPE_INT32))
		return;
	if (na != nb && na != 1 && nb != 1)
		return;
	n = na > nb ? na : nb;
	for (i = 0; i < n; i++)
		y->values[i] = arith_value(c->node->op, &a->values[na == 1 ? 0 : i],
					   &b->values[nb == 1 ? 0 : i]);
	y->n_values = n;
}

static void arith_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *y = op_out(c, 0);

	if (!y || op_broadcast_all(c, y))
		return;
	arith_values(c, y);
}

/* What the sharder tells apart (enum tpf_shard_arith). */
#define BINARY_ARITH(op)                                                                           \
	((op) == TPF_OP_ADD || (op) == TPF_OP_SUB ? TPF_SHARD_SUM                                  \
	 : (op) == TPF_OP_MUL                    ? TPF_SHARD_PRODUCT                              \
						 : TPF_SHARD_QUOTIENT)

#define BINARY_OP(id, op_type)                                                                     \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		OP_BINARY(op_type, 1, TYPE_NUMERIC("T")),                                          \
		.shape = arith_shape,                                                              \
		.shard = SHARD(BROADCAST, BINARY_ARITH(TPF_OP_##id)),                              \
	}

BINARY_OP(ADD, "Add");
BINARY_OP(SUB, "Sub");
BINARY_OP(MUL, "Mul");
BINARY_OP(DIV, "Div");

const struct tpf_op_def tpf_op_def_POW = {
	.info = {"", "Pow", 2, 2, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_BROADCAST,
	.inputs = {{"X", T}, {"Y", T1}},
	.outputs = {{"Z", T}},
	.types = {[T] = TYPE_NUMERIC("T"), [T1] = TYPE_NUMERIC("T1")},
	.shard = SHARD(BROADCAST, 0),
};

#define VARIADIC_OP(id, op_type)                                                                   \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 1, -1, 1, 1},                                                \
		.since = 1,                                                                        \
		.traits = TPF_OP_TRAIT_BROADCAST,                                                  \
		.inputs = {{"data_0", T}},                                                         \
		.outputs = {{"result", T}},                                                        \
		.types = {[T] = TYPE_NUMERIC("T")},                                                \
		.shard = SHARD(BROADCAST, 0),                                                      \
	}

VARIADIC_OP(MAX, "Max");
VARIADIC_OP(MIN, "Min");

#define COMPARISON_OP(id, op_type, dtypes, expected)                                               \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		OP_COMPARE(op_type, 1, "T1", {"T", dtypes, expected}),                             \
		.shard = SHARD(BROADCAST, 0),                                                      \
	}

COMPARISON_OP(EQUAL, "Equal", DT_NUMERIC | DT(BOOL) | DT(STRING), "a numeric, bool or string type");
COMPARISON_OP(GREATER, "Greater", DT_NUMERIC, "a numeric type");
COMPARISON_OP(LESS, "Less", DT_NUMERIC, "a numeric type");

const struct tpf_op_def tpf_op_def_WHERE = {
	.info = {"", "Where", 3, 3, 1, 1},
	.since = 9,
	.traits = TPF_OP_TRAIT_BROADCAST,
	.inputs = {{"condition", B}, {"X", T}, {"Y", T}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [B] = TYPE_BOOL("B")},
	.shard = SHARD(BROADCAST, 0),
};

/* ------------------------------------------------------------------ Cast */

static void cast_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t to;

	if (!y)
		return;
	op_type_shape_of(y, x);
	if (op_attr_int(c, "to", &to) && op_valid_dtype(to)) {
		y->dtype = (enum tpf_dtype)to;
		y->dtype_why = "attribute 'to'";
	}
	/* integer values stay what they are between integer types */
	if ((y->dtype == TPF_DTYPE_INT64 || y->dtype == TPF_DTYPE_INT32) &&
	    (x->dtype == TPF_DTYPE_INT64 || x->dtype == TPF_DTYPE_INT32 || !x->dtype))
		op_type_copy_values(y, x);
}

const struct tpf_op_def tpf_op_def_CAST = {
	.info = {"", "Cast", 1, 1, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_UNARY,
	.inputs = {{"input", T1}},
	.outputs = {{"output", T}},
	.types = {[T1] = TYPE_ANY("T1"), [T] = TYPE_ANY("T2")},
	.attrs = (const struct op_attr[]){
		{.name = "to", .kind = TPF_ATTR_INT, .flags = ATTR_REQUIRED | ATTR_DTYPE},
		{.name = "saturate", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .i = 1, .since = 19},
		{0},
	},
	.shape = cast_shape,
	.shard = SHARD(UNARY, 0),
};
