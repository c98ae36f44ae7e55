/* SPDX-License-Identifier: MIT */
/*
 * The table of op records, generated from ir/ops.def: one record a line,
 * defined in ir/ops/FAMILY.c.  A line without its record does not link.
 */
#include "op-def.h"

#include <string.h>

/* Ops tpfuse does not know: any operands, no rules. */
const struct tpf_op_def tpf_op_def_UNKNOWN = {
	.info = {"", "", 0, -1, 0, -1},
};

static const struct tpf_op_def *const defs[TPF_OP_COUNT] = {
#define TPF_OP(id, family) [TPF_OP_##id] = &tpf_op_def_##id,
#include "ops.def"
#undef TPF_OP
};

const struct tpf_op_def *op_def(enum tpf_op op)
{
	if ((unsigned)op >= TPF_OP_COUNT)
		return defs[TPF_OP_UNKNOWN];
	return defs[op];
}

const struct tpf_op_info *tpf_op_info(enum tpf_op op)
{
	return &op_def(op)->info;
}

int tpf_op_has_trait(enum tpf_op op, enum tpf_op_trait trait)
{
	return (op_def(op)->traits & (unsigned)trait) != 0;
}

enum tpf_shard_rule tpf_op_shard_rule(enum tpf_op op, int *arg)
{
	const struct tpf_op_def *d = op_def(op);

	if (arg)
		*arg = d->shard.arg;
	return d->shard.rule;
}

/* What is known of ops without a record, by their ONNX semantics: the
 * sharder's rule, and whether the op draws random numbers (two runs of
 * it differ: nothing may merge or fold it). */
struct unrecorded_op {
	const char *domain, *op_type;
	struct op_shard shard;
	int random;
};

static const struct unrecorded_op unrecorded_rules[] = {
	{"", "Acos", SHARD(UNARY, 0)},          {"", "Acosh", SHARD(UNARY, 0)},
	{"", "Asin", SHARD(UNARY, 0)},          {"", "Asinh", SHARD(UNARY, 0)},
	{"", "Atan", SHARD(UNARY, 0)},          {"", "Atanh", SHARD(UNARY, 0)},
	{"", "Cosh", SHARD(UNARY, 0)},          {"", "Elu", SHARD(UNARY, 0)},
	{"", "Gelu", SHARD(UNARY, 0)},          {"", "HardSigmoid", SHARD(UNARY, 0)},
	{"", "HardSwish", SHARD(UNARY, 0)},     {"", "LeakyRelu", SHARD(UNARY, 0)},
	{"", "Mish", SHARD(UNARY, 0)},          {"", "Round", SHARD(UNARY, 0)},
	{"", "Selu", SHARD(UNARY, 0)},          {"", "Sign", SHARD(UNARY, 0)},
	{"", "Sinh", SHARD(UNARY, 0)},          {"", "Softsign", SHARD(UNARY, 0)},
	{"", "Tan", SHARD(UNARY, 0)},           {"", "ThresholdedRelu", SHARD(UNARY, 0)},
	{"", "Celu", SHARD(UNARY, 0)},          {"", "CastLike", SHARD(UNARY, 0)},
	{"", "Shrink", SHARD(UNARY, 0)},        {"", "Dropout", SHARD(UNARY, 0), 1},
	{"", "LogSoftmax", SHARD(ALONG_AXIS, -1)}, {"", "Hardmax", SHARD(ALONG_AXIS, -1)},
	{"", "ArgMin", SHARD(ARG_EXTREME, 0)},
	{"", "ReduceMin", SHARD(REDUCE, TPF_SHARD_MIN)},
	{"", "ReduceProd", SHARD(REDUCE, TPF_SHARD_PRODUCT)},
	{"", "ReduceL1", SHARD(REDUCE, 0)},     {"", "ReduceL2", SHARD(REDUCE, 0)},
	{"", "ReduceLogSum", SHARD(REDUCE, 0)}, {"", "ReduceLogSumExp", SHARD(REDUCE, 0)},
	{"", "ReduceSumSquare", SHARD(REDUCE, 0)},
	{"", "Sum", SHARD(BROADCAST, TPF_SHARD_SUM)}, {"", "Mean", SHARD(BROADCAST, 0)},
	{"", "BitShift", SHARD(BROADCAST, 0)},  {"", "BitwiseAnd", SHARD(BROADCAST, 0)},
	{"", "BitwiseOr", SHARD(BROADCAST, 0)}, {"", "BitwiseXor", SHARD(BROADCAST, 0)},
	{"", "PRelu", SHARD(BROADCAST, 0)},     {"", "Resize", SHARD(RESIZE, 0)},
	{TPF_MS_DOMAIN, "SkipLayerNormalization", SHARD(NORM, 2)},
	{"", "RandomNormal", SHARD(NONE, 0), 1}, {"", "RandomUniform", SHARD(NONE, 0), 1},
	{"", "RandomNormalLike", SHARD(NONE, 0), 1}, {"", "RandomUniformLike", SHARD(NONE, 0), 1},
	{"", "Multinomial", SHARD(NONE, 0), 1}, {"", "Bernoulli", SHARD(NONE, 0), 1},
};

/* The entry of node n's op when it has no record (ONNX or com.microsoft
 * domain), else NULL. */
static const struct unrecorded_op *unrecorded(const struct tpf_node *n)
{
	const char *domain;

	if (!n || n->op != TPF_OP_UNKNOWN || !n->op_type)
		return NULL;
	domain = n->domain && strcmp(n->domain, "ai.onnx") ? n->domain : "";
	for (size_t i = 0; i < sizeof(unrecorded_rules) / sizeof(unrecorded_rules[0]); i++)
		if (!strcmp(unrecorded_rules[i].op_type, n->op_type) &&
		    !strcmp(unrecorded_rules[i].domain, domain))
			return &unrecorded_rules[i];
	return NULL;
}

int tpf_node_is_random(const struct tpf_node *n)
{
	const struct unrecorded_op *u = unrecorded(n);

	return u && u->random;
}

enum tpf_shard_rule tpf_node_shard_rule(const struct tpf_node *n, int *arg)
{
	const struct unrecorded_op *u;

	if (arg)
		*arg = 0;
	if (!n)
		return TPF_SHARD_RULE_NONE;
	if (n->op != TPF_OP_UNKNOWN)
		return tpf_op_shard_rule(n->op, arg);
	if (!(u = unrecorded(n)))
		return TPF_SHARD_RULE_NONE;
	if (arg)
		*arg = u->shard.arg;
	return u->shard.rule;
}

int tpf_op_host_input(enum tpf_op op, size_t i)
{
	return i < 32 && (op_def(op)->host_inputs >> i & 1u);
}

enum tpf_op tpf_op_lookup(const char *domain, const char *op_type)
{
	if (!domain || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	if (!op_type || !*op_type)
		return TPF_OP_UNKNOWN;
	for (int i = 1; i < TPF_OP_COUNT; i++)
		if (strcmp(defs[i]->info.name, op_type) == 0 && strcmp(defs[i]->info.domain, domain) == 0)
			return (enum tpf_op)i;
	return TPF_OP_UNKNOWN;
}

static const struct op_operand *operand_at(const struct op_operand *list, int max, size_t i)
{
	size_t n = 0;

	while (n < OP_MAX_OPERANDS && list[n].name)
		n++;
	if (i < n)
		return &list[i];
	if (max < 0 && n)
		return &list[n - 1];
	return NULL;
}

const struct op_operand *op_def_input(const struct tpf_op_def *d, size_t i)
{
	return operand_at(d->inputs, d->info.max_inputs, i);
}

const struct op_operand *op_def_output(const struct tpf_op_def *d, size_t i)
{
	return operand_at(d->outputs, d->info.max_outputs, i);
}

const struct op_attr *op_def_attr(const struct tpf_op_def *d, const char *name)
{
	const struct op_attr *a;

	for (a = d->attrs; a && a->name; a++)
		if (strcmp(a->name, name) == 0)
			return a;
	return NULL;
}

void op_def_arity(const struct tpf_op_def *d, int64_t opset, int *min_in, int *max_in)
{
	size_t k;

	*min_in = d->info.min_inputs;
	*max_in = d->info.max_inputs;
	if (opset <= 0)
		return;
	for (k = 0; k < sizeof(d->forms) / sizeof(d->forms[0]) && d->forms[k].before; k++)
		if (opset < d->forms[k].before) {
			*min_in = d->forms[k].min_inputs;
			*max_in = d->forms[k].max_inputs;
			return;
		}
}

int op_def_input_optional(const struct tpf_op_def *d, int64_t opset, size_t i)
{
	const struct op_operand *o = op_def_input(d, i);
	int min_in, max_in;
	size_t k;

	op_def_arity(d, opset, &min_in, &max_in);
	if (i >= (size_t)min_in || (o && (o->flags & OPND_OPTIONAL)))
		return 1;
	for (k = 0; opset > 0 && k < sizeof(d->forms) / sizeof(d->forms[0]) && d->forms[k].before;
	     k++)
		if (opset < d->forms[k].before)
			return i < 32 && (d->forms[k].optional >> i) & 1;
	return 0;
}
