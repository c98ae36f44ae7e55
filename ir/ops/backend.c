/* SPDX-License-Identifier: MIT */
/*
 * Backend ops (domain ai.tpfuse, docs/ops.md): forms of standard ops that
 * a backend's kernels run directly, written by the lowering passes
 * (passes/lower.c, the pipelines lower-cpu and lower-cuda) just before a
 * model is planned.  A model on its way to a file never holds them.
 */
#include "op-def.h"

#include <string.h>

enum { T = 1 };

/* MatMul's type constraint: a float type or a 32- or 64-bit integer type */
#define PRODUCT_TYPES (DT_FLOATS | DT(INT32) | DT(INT64) | DT(UINT32) | DT(UINT64))

/* MatMulTransB(A, B) = MatMul(A, B with its last two axes swapped): the
 * shape of that MatMul. */
static void matmul_trans_b_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *b = op_in(c, 1);
	struct tpf_op_type in[2];

	if (b->rank >= 0 && b->rank < 2) {
		op_error(c, "B has rank %d; MatMulTransB needs rank >= 2", b->rank);
		return;
	}
	in[0] = *op_in(c, 0);
	in[1] = *b;
	if (b->rank >= 2) {
		struct tpf_dim last = in[1].dims[b->rank - 1];
		in[1].dims[b->rank - 1] = in[1].dims[b->rank - 2];
		in[1].dims[b->rank - 2] = last;
	}
	struct tpf_shape_call t = *c;
	t.in = in;
	t.errors = 0;
	tpf_op_def_MATMUL.shape(&t);
	c->errors += t.errors;
}

const struct tpf_op_def tpf_op_def_TPF_MATMUL_TRANS_B = {
	.info = {TPF_DOMAIN, "MatMulTransB", 2, 2, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"A", T}, {"B", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = {"T", PRODUCT_TYPES, "a float type or a 32- or 64-bit integer type"}},
	.shape = matmul_trans_b_shape,
};
