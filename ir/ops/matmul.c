/* SPDX-License-Identifier: MIT */
/*
 * Matrix products: MatMul (numpy semantics: 1-D operands, broadcast batch
 * dims) and Gemm (2-D, optional transposes, C broadcast to the result).
 * The inner dims of a product are one size: symbolic ones unify.
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

enum { T = 1 };

#define MATMUL_TYPES                                                                               \
	(DT_FLOATS | DT(INT32) | DT(INT64) | DT(UINT32) | DT(UINT64))
#define MATMUL_EXPECTED "a float type or a 32- or 64-bit integer type"

static void matmul_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *a = op_in(c, 0), *b = op_in(c, 1);
	struct tpf_op_type *out = op_out(c, 0), ba, bb, bo;
	const struct tpf_op_type *ptrs[2] = {&ba, &bb};
	const size_t labels[2] = {0, 1};
	const struct tpf_dim *ka, *kb;
	int ra = a->rank, rb = b->rank, i;

	if (ra == 0 || rb == 0) {
		op_error(c, "%s input is a scalar; MatMul needs rank >= 1",
			 ra == 0 ? "first" : "second");
		return;
	}
	if (ra < 0 || rb < 0 || !out)
		return;
	ka = &a->dims[ra - 1];
	kb = &b->dims[rb == 1 ? 0 : rb - 2];
	if (dim_is_static(ka) && dim_is_static(kb) && ka->value != kb->value) {
		op_error(c,
			 "inner dimensions differ: '%s' has %" PRId64 " columns, '%s' has %" PRId64
			 " rows",
			 op_in_name(c, 0), ka->value, op_in_name(c, 1), kb->value);
		return;
	}
	op_dims_unify(c, kb, ka);
	/* batch dims: all but the last two (none for 1-D operands) */
	tpf_op_type_unknown(&ba);
	tpf_op_type_unknown(&bb);
	ba.rank = ra > 2 ? ra - 2 : 0;
	bb.rank = rb > 2 ? rb - 2 : 0;
	memcpy(ba.dims, a->dims, (size_t)ba.rank * sizeof(*a->dims));
	memcpy(bb.dims, b->dims, (size_t)bb.rank * sizeof(*b->dims));
	tpf_op_type_unknown(&bo);
	if (op_broadcast_types(c, ptrs, labels, 2, &bo))
		return;
	out->rank = bo.rank;
	for (i = 0; i < bo.rank; i++)
		out->dims[i] = bo.dims[i];
	if (ra >= 2)
		out->dims[out->rank++] = a->dims[ra - 2];
	if (rb >= 2)
		out->dims[out->rank++] = b->dims[rb - 1];
}

const struct tpf_op_def tpf_op_def_MATMUL = {
	.info = {"", "MatMul", 2, 2, 1, 1},
	.since = 1,
	.inputs = {{"A", T}, {"B", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = {"T", MATMUL_TYPES, MATMUL_EXPECTED}},
	.shape = matmul_shape,
	.shard = SHARD(MATMUL, 0),
};

static void gemm_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *a = op_in(c, 0), *b = op_in(c, 1), *cc = op_in(c, 2);
	struct tpf_op_type *out = op_out(c, 0), mn;
	const struct tpf_op_type *ptrs[2] = {&mn, cc};
	const size_t labels[2] = {0, 2};
	const struct tpf_dim *m, *ka, *kb, *nn;
	int64_t ta = 0, tb = 0;

	op_attr_int(c, "transA", &ta);
	op_attr_int(c, "transB", &tb);
	if ((a->rank >= 0 && a->rank != 2) || (b->rank >= 0 && b->rank != 2)) {
		op_error(c, "Gemm needs 2-D inputs; got rank %d and %d", a->rank, b->rank);
		return;
	}
	if (a->rank != 2 || b->rank != 2 || !out)
		return;
	m = &a->dims[ta ? 1 : 0];
	ka = &a->dims[ta ? 0 : 1];
	kb = &b->dims[tb ? 1 : 0];
	nn = &b->dims[tb ? 0 : 1];
	if (dim_is_static(ka) && dim_is_static(kb) && ka->value != kb->value) {
		op_error(c, "inner dimensions differ: %" PRId64 " and %" PRId64, ka->value, kb->value);
		return;
	}
	op_dims_unify(c, kb, ka);
	out->rank = 2;
	out->dims[0] = *m;
	out->dims[1] = *nn;
	/* C broadcasts to [M, N] */
	if (cc->present && cc->rank >= 0) {
		tpf_op_type_unknown(&mn);
		op_type_shape_of(&mn, out);
		if (op_broadcast_types(c, ptrs, labels, 2, &mn) == 0 && mn.rank > 2)
			op_error(c, "C has rank %d; it must broadcast to [M, N]", cc->rank);
	}
}

const struct tpf_op_def tpf_op_def_GEMM = {
	.info = {"", "Gemm", 2, 3, 1, 1},
	.since = 1,
	.inputs = {{"A", T}, {"B", T}, {"C", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = {"T", MATMUL_TYPES, MATMUL_EXPECTED}},
	.attrs = (const struct op_attr[]){
		ATTR_FLOAT("alpha", 1.0f),
		ATTR_FLOAT("beta", 1.0f),
		ATTR_INT("transA", 0),
		ATTR_INT("transB", 0),
		{0},
	},
	.shape = gemm_shape,
	.shard = SHARD(GEMM, 0),
};
