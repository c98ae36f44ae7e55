/* SPDX-License-Identifier: MIT */
/*
 * Collectives of the tensor-parallel group, as onnxruntime's contrib ops
 * (domain com.microsoft) spell them.  The group is every rank of the run;
 * `group_size`, when given, must equal it (tp_world_size), and is the
 * default size of a gather.  onnxruntime lists float16, float and double
 * (AllGather and AllToAll also int64 and bool); tpfuse accepts every
 * numeric type, bfloat16 and FP8 included, which is what TP models carry.
 *
 *   AllReduce      variadic: output k has input k's type and shape
 *   AllGather      output = input with dim `axis` times the group size
 *   AllToAll       output = input (axis 0 is split into group-size chunks
 *                  and exchanged; the runtime needs it to divide)
 *   ReduceScatter  output = input with dim `axis` divided by the group size
 *
 * Each output dim equals its input dim (but the gathered or scattered
 * one): shape inference unifies them, so an exporter's invented
 * `AllReduce_output_0_dim_0` is known to be `batch`.
 */
#include "op-def.h"

#include <inttypes.h>

enum { T = 1 };

#define COLLECTIVE_TYPES (DT_NUMERIC | DT(BOOL) | DT_FLOAT8)
#define COLLECTIVE_TYPE {"T", COLLECTIVE_TYPES, "a numeric or bool type"}

/* The group size: 1 and *gs set when known; 0 unknown; -1 reported. */
static int group_size(struct tpf_shape_call *c, int64_t *gs)
{
	int given = op_attr_given(c, "group_size") && op_attr_int(c, "group_size", gs);

	if (given && *gs <= 0) {
		op_error(c, "attribute 'group_size' = %" PRId64 "; expected > 0", *gs);
		return -1;
	}
	if (c->mode == TPF_SHAPE_CONCRETE && c->world > 0) {
		/* the runtime gathers over the ranks it runs (the plan checks
		 * the attribute against them) */
		*gs = c->world;
		return 1;
	}
	if (given && c->world > 0 && *gs != c->world) {
		op_error(c,
			 "attribute 'group_size' = %" PRId64 " differs from the model's tp_world_size %" PRId64,
			 *gs, c->world);
		return -1;
	}
	if (given)
		return 1;
	if (c->world > 0) {
		*gs = c->world;
		return 1;
	}
	return 0;
}

/* Output k has input k's shape. */
static void same_shapes(struct tpf_shape_call *c)
{
	size_t k;

	for (k = 0; k < c->n_out; k++)
		op_type_shape_of(&c->out[k], op_in(c, k));
}

static void allreduce_shape(struct tpf_shape_call *c)
{
	int64_t gs;

	if (c->n_out != c->n_in)
		op_error(c, "has %zu inputs but %zu outputs; expected one output per input", c->n_in,
			 c->n_out);
	group_size(c, &gs);
	same_shapes(c);
}

/* A collective of the whole group with the group size its only attribute. */
#define GROUP_COLLECTIVE(id, op_type, max_operands, shape_fn)                                     \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {TPF_MS_DOMAIN, op_type, 1, max_operands, 1, max_operands},                \
		.since = 1,                                                                        \
		.traits = TPF_OP_TRAIT_COLLECTIVE,                                                 \
		.inputs = {{"input", T}},                                                          \
		.outputs = {{"output", T}},                                                        \
		.types = {[T] = COLLECTIVE_TYPE},                                                  \
		.attrs = (const struct op_attr[]){ATTR_OF("group_size", TPF_ATTR_INT), {0}},       \
		.shape = shape_fn,                                                                 \
	}

GROUP_COLLECTIVE(MS_ALLREDUCE, "AllReduce", -1, allreduce_shape);
static void alltoall_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	int64_t gs;

	if (group_size(c, &gs) > 0 && c->mode == TPF_SHAPE_CONCRETE && x->rank > 0 &&
	    dim_is_static(&x->dims[0]) && x->dims[0].value % gs) {
		op_error(c, "dimension 0 = %" PRId64 " does not divide into %" PRId64 " ranks' chunks",
			 x->dims[0].value, gs);
		return;
	}
	same_shapes(c);
}

GROUP_COLLECTIVE(MS_ALLTOALL, "AllToAll", 1, alltoall_shape);
/* AllGather multiplies dim `axis` by the group size, ReduceScatter divides
 * it (which must come out even). */
static void gather_scatter_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int gather = c->node->op == TPF_OP_MS_ALLGATHER;
	int64_t gs = 0, ax, d;
	int known = group_size(c, &gs), r = op_attr_axis(c, "axis", x->rank, &ax);

	if (!y || known < 0 || r < 0)
		return;
	op_type_shape_of(y, x);
	if (r == 0 || (known && gs == 1))
		return; /* one rank: nothing moves */
	if (!known || !dim_is_static(&x->dims[ax])) {
		y->dims[ax] = dim_unknown();
	} else if (gather) {
		y->dims[ax] = __builtin_mul_overflow(x->dims[ax].value, gs, &d) ? dim_unknown()
										: dim_of(d);
	} else if (x->dims[ax].value % gs) {
		op_error(c, "dimension %" PRId64 " = %" PRId64 " does not divide by the group size %" PRId64,
			 ax, x->dims[ax].value, gs);
		y->rank = -1;
	} else {
		y->dims[ax] = dim_of(x->dims[ax].value / gs);
	}
}

/* A collective along `axis` (default 0). */
#define AXIS_COLLECTIVE(id, op_type)                                                               \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {TPF_MS_DOMAIN, op_type, 1, 1, 1, 1},                                      \
		.since = 1,                                                                        \
		.traits = TPF_OP_TRAIT_COLLECTIVE,                                                 \
		.inputs = {{"input", T}},                                                          \
		.outputs = {{"output", T}},                                                        \
		.types = {[T] = COLLECTIVE_TYPE},                                                  \
		.attrs = (const struct op_attr[]){ATTR_INT("axis", 0),                             \
						  ATTR_OF("group_size", TPF_ATTR_INT), {0}},       \
		.shape = gather_scatter_shape,                                                     \
	}

AXIS_COLLECTIVE(MS_ALLGATHER, "AllGather");
AXIS_COLLECTIVE(MS_REDUCE_SCATTER, "ReduceScatter");
