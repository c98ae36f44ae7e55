/* SPDX-License-Identifier: MIT */
/*
 * More elementwise ops that exporters' mask and guard arithmetic uses:
 * Mod, Clip, Floor, Ceil, Log, Softplus, IsNaN, IsInf, the logic ops And,
 * Or, Xor and the comparisons LessOrEqual, GreaterOrEqual.  Type
 * constraints as the ONNX spec lists them in its latest opsets.
 */
#include "op-def.h"

enum { T = 1, B };

#define UNARY_FLOAT_OP(id, op_type, since_opset)                                                   \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		OP_UNARY(op_type, since_opset, "X", "Y", TYPE_FLOATS("T")),                        \
		.shard = SHARD(UNARY, 0),                                                          \
	}

UNARY_FLOAT_OP(FLOOR, "Floor", 1);
UNARY_FLOAT_OP(CEIL, "Ceil", 1);
UNARY_FLOAT_OP(LOG, "Log", 1);
UNARY_FLOAT_OP(SOFTPLUS, "Softplus", 1);

/* IsNaN and IsInf: a bool of each element of a float tensor. */
#define FLOAT_CLASS_OP(id, op_type, since_opset, attributes)                                       \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 1, 1, 1, 1},                                                 \
		.since = since_opset,                                                              \
		.traits = TPF_OP_TRAIT_UNARY,                                                      \
		.inputs = {{"X", T}},                                                              \
		.outputs = {{"Y", B}},                                                             \
		.types = {[T] = {"T1", DT_FLOATS | DT_FLOAT8, "a float type"}, [B] = TYPE_BOOL("T2")}, \
		.attrs = attributes,                                                               \
		.shard = SHARD(UNARY, 0),                                                          \
	}

FLOAT_CLASS_OP(IS_NAN, "IsNaN", 9, NULL);
FLOAT_CLASS_OP(IS_INF, "IsInf", 10,
	       ((const struct op_attr[]){ATTR_INT("detect_negative", 1),
					 ATTR_INT("detect_positive", 1), {0}}));

const struct tpf_op_def tpf_op_def_MOD = {
	OP_BINARY("Mod", 10, TYPE_NUMERIC("T")),
	.attrs = (const struct op_attr[]){ATTR_INT("fmod", 0), {0}},
	.shard = SHARD(BROADCAST, 0),
};

/* Clip: bounds as optional scalar inputs (opset 11), attributes before. */
const struct tpf_op_def tpf_op_def_CLIP = {
	.info = {"", "Clip", 1, 3, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_UNARY,
	.inputs = {{"input", T}, {"min", T, OPND_OPTIONAL}, {"max", T, OPND_OPTIONAL}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_NUMERIC("T")},
	.attrs = (const struct op_attr[]){
		{.name = "min", .kind = TPF_ATTR_FLOAT, .until = 11},
		{.name = "max", .kind = TPF_ATTR_FLOAT, .until = 11},
		{0},
	},
	.forms = {{11, 1, 1}},
	.shard = SHARD(UNARY, 0),
};

#define LOGIC_OP(id, op_type)                                                                      \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {"", op_type, 2, 2, 1, 1},                                                 \
		.since = 1,                                                                        \
		.traits = TPF_OP_TRAIT_BROADCAST | TPF_OP_TRAIT_COMPARISON,                        \
		.inputs = {{"A", B}, {"B", B}},                                                    \
		.outputs = {{"C", B}},                                                             \
		.types = {[B] = TYPE_BOOL("T")},                                                   \
		.shard = SHARD(BROADCAST, 0),                                                      \
	}

LOGIC_OP(AND, "And");
LOGIC_OP(OR, "Or");
LOGIC_OP(XOR, "Xor");

#define ORDER_OP(id, op_type)                                                                      \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		OP_COMPARE(op_type, 12, "T1", TYPE_NUMERIC("T")),                                  \
		.shard = SHARD(BROADCAST, 0),                                                      \
	}

ORDER_OP(LESS_OR_EQUAL, "LessOrEqual");
ORDER_OP(GREATER_OR_EQUAL, "GreaterOrEqual");
