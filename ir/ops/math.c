/* SPDX-License-Identifier: MIT */
/*
 * More elementwise ops that exporters' mask and guard arithmetic uses:
 * Mod, Clip, Floor, Ceil, Log, Softplus, IsNaN, IsInf, the logic ops And,
 * Or, Xor and the comparisons LessOrEqual, GreaterOrEqual.  Type
 * constraints as the ONNX spec lists them in its latest opsets.
 */
#include "op-def.h"

enum { T = 1, B };

#define FLOATS_EXPECTED "a float type (float16, bfloat16, float, double)"
#define NUMERIC_EXPECTED "a numeric type"

#define UNARY_FLOAT_OP(id, op_type, since_opset)                                                   \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 1, 1, 1, 1},                                                 \
		.since = since_opset,                                                              \
		.traits = TPF_OP_TRAIT_UNARY,                                                      \
		.inputs = {{"X", T}},                                                              \
		.outputs = {{"Y", T}},                                                             \
		.types = {[T] = {"T", DT_FLOATS, FLOATS_EXPECTED}},                                \
	}

UNARY_FLOAT_OP(FLOOR, "Floor", 1);
UNARY_FLOAT_OP(CEIL, "Ceil", 1);
UNARY_FLOAT_OP(LOG, "Log", 1);
UNARY_FLOAT_OP(SOFTPLUS, "Softplus", 1);

const struct tpf_op_def tpf_op_def_IS_NAN = {
	.info = {"", "IsNaN", 1, 1, 1, 1},
	.since = 9,
	.traits = TPF_OP_TRAIT_UNARY,
	.inputs = {{"X", T}},
	.outputs = {{"Y", B}},
	.types = {[T] = {"T1", DT_FLOATS | DT_FLOAT8, "a float type"}, [B] = {"T2", DT(BOOL), "bool"}},
};

const struct tpf_op_def tpf_op_def_IS_INF = {
	.info = {"", "IsInf", 1, 1, 1, 1},
	.since = 10,
	.traits = TPF_OP_TRAIT_UNARY,
	.inputs = {{"X", T}},
	.outputs = {{"Y", B}},
	.types = {[T] = {"T1", DT_FLOATS | DT_FLOAT8, "a float type"}, [B] = {"T2", DT(BOOL), "bool"}},
	.attrs = (const struct op_attr[]){ATTR_INT("detect_negative", 1),
					  ATTR_INT("detect_positive", 1), {0}},
};

const struct tpf_op_def tpf_op_def_MOD = {
	.info = {"", "Mod", 2, 2, 1, 1},
	.since = 10,
	.traits = TPF_OP_TRAIT_BROADCAST,
	.inputs = {{"A", T}, {"B", T}},
	.outputs = {{"C", T}},
	.types = {[T] = {"T", DT_NUMERIC, NUMERIC_EXPECTED}},
	.attrs = (const struct op_attr[]){ATTR_INT("fmod", 0), {0}},
};

/* Clip: bounds as optional scalar inputs (opset 11), attributes before. */
const struct tpf_op_def tpf_op_def_CLIP = {
	.info = {"", "Clip", 1, 3, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_UNARY,
	.inputs = {{"input", T}, {"min", T, OPND_OPTIONAL}, {"max", T, OPND_OPTIONAL}},
	.outputs = {{"output", T}},
	.types = {[T] = {"T", DT_NUMERIC, NUMERIC_EXPECTED}},
	.attrs = (const struct op_attr[]){
		{.name = "min", .kind = TPF_ATTR_FLOAT, .until = 11},
		{.name = "max", .kind = TPF_ATTR_FLOAT, .until = 11},
		{0},
	},
	.forms = {{11, 1, 1}},
};

#define LOGIC_OP(id, op_type)                                                                      \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 2, 2, 1, 1},                                                 \
		.since = 1,                                                                        \
		.traits = TPF_OP_TRAIT_BROADCAST | TPF_OP_TRAIT_COMPARISON,                        \
		.inputs = {{"A", B}, {"B", B}},                                                    \
		.outputs = {{"C", B}},                                                             \
		.types = {[B] = {"T", DT(BOOL), "bool"}},                                          \
	}

LOGIC_OP(AND, "And");
LOGIC_OP(OR, "Or");
LOGIC_OP(XOR, "Xor");

#define ORDER_OP(id, op_type)                                                                      \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 2, 2, 1, 1},                                                 \
		.since = 12,                                                                       \
		.traits = TPF_OP_TRAIT_BROADCAST | TPF_OP_TRAIT_COMPARISON,                        \
		.inputs = {{"A", T}, {"B", T}},                                                    \
		.outputs = {{"C", B}},                                                             \
		.types = {[T] = {"T", DT_NUMERIC, NUMERIC_EXPECTED}, [B] = {"T1", DT(BOOL), "bool"}}, \
	}

ORDER_OP(LESS_OR_EQUAL, "LessOrEqual");
ORDER_OP(GREATER_OR_EQUAL, "GreaterOrEqual");
