/* SPDX-License-Identifier: MIT */
/*
 * Backend ops (domain ai.tpfuse, docs/ops.md): forms of standard ops that
 * a backend's kernels run directly, written by the lowering passes
 * (passes/lower.c, the pipelines lower-cpu and lower-cuda) just before a
 * model is planned.  A model on its way to a file never holds them.
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

enum { T = 1, Q, S };

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

/* X [..., K] and W [K, N] of a product by a 2-D weight: 0, or -1 with the
 * error added when the ranks are not those. */
static int weight_product_ranks(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *w = op_in(c, 1);
	if (x->rank == 0 || (w->rank >= 0 && w->rank != 2)) {
		op_error(c, "X must have rank >= 1 and W rank 2, not %d and %d", x->rank, w->rank);
		return -1;
	}
	return 0;
}

/* That product's Y [..., N] (halve: [..., N / 2]), K checked and unified. */
static void weight_product_shape(struct tpf_shape_call *c, int halve)
{
	const struct tpf_op_type *x = op_in(c, 0), *w = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);

	if (x->rank < 0 || w->rank < 0 || !y)
		return;
	const struct tpf_dim *k = &x->dims[x->rank - 1], *n = &w->dims[1];
	if (dim_is_static(k) && dim_is_static(&w->dims[0]) && k->value != w->dims[0].value) {
		op_error(c, "inner dimensions differ: X has %lld columns, W %lld rows", (long long)k->value,
			 (long long)w->dims[0].value);
		return;
	}
	op_dims_unify(c, &w->dims[0], k);
	y->rank = x->rank;
	memcpy(y->dims, x->dims, (size_t)x->rank * sizeof(*x->dims));
	y->dims[x->rank - 1] = !halve ? *n : dim_is_static(n) ? dim_of(n->value / 2) : dim_unknown();
}

/* MatMulFp8(X, W, x_scale, w_scale): X [..., K] and W [K, N] FLOAT8E4M3FN
 * codes, the scales float scalars; Y [..., N] of the scales' dtype. */
static void matmul_fp8_shape(struct tpf_shape_call *c)
{
	if (weight_product_ranks(c))
		return;
	for (size_t i = 2; i < 4; i++)
		if (op_in(c, i)->rank > 0) {
			op_error(c, "%s must be a scalar", i == 2 ? "x_scale" : "w_scale");
			return;
		}
	weight_product_shape(c, 0);
}

const struct tpf_op_def tpf_op_def_TPF_MATMUL_FP8 = {
	.info = {TPF_DOMAIN, "MatMulFp8", 4, 4, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"X", Q}, {"W", Q}, {"x_scale", S}, {"w_scale", S}},
	.outputs = {{"Y", S}},
	.types = {[Q] = {"T1", DT(FLOAT8E4M3FN), "float8e4m3fn"},
		  [S] = {"T2", DT(FLOAT) | DT(FLOAT16) | DT(BFLOAT16), "float, float16 or bfloat16"}},
	.shape = matmul_fp8_shape,
};

/* GatedMatMul(X, W): GatedActivation (packed = 1, its attributes) of
 * MatMul(X, W), X [..., K] and W [K, 2F], the merged gate/up weight (gate
 * columns first); Y [..., F].  packed must be given, 1. */
static void gated_matmul_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *w = op_in(c, 1);
	int64_t packed = 0;

	op_attr_int(c, "packed", &packed);
	if (packed != 1) {
		op_error(c, "attribute 'packed' = %" PRId64 "; GatedMatMul takes the merged weight (1)", packed);
		return;
	}
	if (weight_product_ranks(c))
		return;
	if (w->rank == 2 && dim_is_static(&w->dims[1]) && w->dims[1].value % 2) {
		op_error(c, "W has %lld columns; the merged gate/up weight has an even count",
			 (long long)w->dims[1].value);
		return;
	}
	weight_product_shape(c, 1);
}

static const char *const gated_matmul_activations[] = {"silu", "gelu", "gelu_tanh", NULL};

static const struct op_attr gated_matmul_attrs[] = {
	{.name = "activation", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "silu",
	 .allowed = gated_matmul_activations},
	ATTR_INT("packed", 0), /* 1: the kernels read the merged weight */
	ATTR_INT("cube_as_product", 0),
	{0},
};

const struct tpf_op_def tpf_op_def_TPF_GATED_MATMUL = {
	.info = {TPF_DOMAIN, "GatedMatMul", 2, 2, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"X", T}, {"W", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = TYPE_FLOATS("T")},
	.attrs = gated_matmul_attrs,
	.shape = gated_matmul_shape,
};
