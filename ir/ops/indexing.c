/* SPDX-License-Identifier: MIT */
/*
 * Index arithmetic and sequences that exporters' mask and lookup code
 * uses: Range, Flatten, GatherND, ScatterND, OneHot, Tile, Trilu, CumSum,
 * Size; TensorScatter (opset 24), the KV-cache update written in place.  Range and Size carry the values of their small integer results
 * (shape arithmetic), like Shape does.
 */
#include "op-def.h"

#include <inttypes.h>

enum { T = 1, I64, IND, T3 };


/* ------------------------------------------------------------------ Range */

int64_t tpf_range_count(int64_t s, int64_t l, int64_t d)
{
	uint64_t span, step, n;

	if (d == 0)
		return -1;
	/* in unsigned arithmetic: no overflow for any int64 */
	if (d > 0) {
		if (l <= s)
			return 0;
		span = (uint64_t)l - (uint64_t)s;
		step = (uint64_t)d;
	} else {
		if (l >= s)
			return 0;
		span = (uint64_t)s - (uint64_t)l;
		step = (uint64_t)(-(d + 1)) + 1;
	}
	n = span / step + (span % step != 0);
	return n > (uint64_t)INT64_MAX ? -1 : (int64_t)n;
}

static void range_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *y = op_out(c, 0);
	int64_t v[3], n;
	int k, i;

	if (!y)
		return;
	op_type_set_rank(y, 1);
	for (k = 0; k < 3; k++) {
		const struct tpf_op_type *t = op_in(c, k);

		if (t->rank > 0 && !(t->rank == 1 && dim_is_static(&t->dims[0]) &&
				     t->dims[0].value == 1)) {
			op_error(c, "input %d '%s' must be a scalar", k, op_in_name(c, k));
			return;
		}
		if (op_static_values(t, &v[k], 1) != 1)
			return;
	}
	n = tpf_range_count(v[0], v[1], v[2]);
	if (n < 0) {
		if (v[2] == 0)
			op_error(c, "delta is 0");
		return;
	}
	y->dims[0] = dim_of(n);
	if (n <= TPF_MAX_VALUES) {
		for (i = 0; i < n; i++) {
			y->values[i] = dim_of(0);
			/* every value lies between start and limit; the product
			 * i * delta alone may not fit, so compute modulo 2^64 */
			y->values[i].value =
			    (int64_t)((uint64_t)v[0] + (uint64_t)i * (uint64_t)v[2]);
		}
		y->n_values = (int)n;
	}
}

const struct tpf_op_def tpf_op_def_RANGE = {
	.info = {"", "Range", 3, 3, 1, 1},
	.since = 11,
	.inputs = {{"start", T}, {"limit", T}, {"delta", T}},
	.outputs = {{"output", T}},
	.types = {[T] = {"T", DT_FLOATS | DT(INT16) | DT(INT32) | DT(INT64),
			 "a float type, int16, int32 or int64"}},
	.shape = range_shape,
};

/* ------------------------------------------------------------------ Flatten */

/* The product of dims [from, to): static, one symbol times static 1s, or
 * unknown. */
static struct tpf_dim dims_product(const struct tpf_op_type *x, int from, int to)
{
	struct tpf_dim sym = dim_unknown();
	int64_t p = 1;
	int i, n_sym = 0;

	for (i = from; i < to; i++) {
		const struct tpf_dim *d = &x->dims[i];

		if (d->param) {
			sym = *d;
			n_sym++;
		} else if (d->value >= 0) {
			if (__builtin_mul_overflow(p, d->value, &p))
				return dim_unknown();
		} else {
			return dim_unknown();
		}
	}
	if (n_sym == 0)
		return dim_of(p);
	if (n_sym == 1 && p == 1) {
		sym.denotation = NULL;
		return sym;
	}
	return dim_unknown();
}

static void flatten_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t axis = 1;

	op_attr_int(c, "axis", &axis);
	if (!y)
		return;
	op_type_set_rank(y, 2);
	if (x->rank < 0)
		return;
	if (axis < -x->rank || axis > x->rank) {
		op_error(c, "attribute 'axis' = %" PRId64 " is out of range for rank %d", axis, x->rank);
		return;
	}
	if (axis < 0)
		axis += x->rank;
	y->dims[0] = dims_product(x, 0, (int)axis);
	y->dims[1] = dims_product(x, (int)axis, x->rank);
}

const struct tpf_op_def tpf_op_def_FLATTEN = {
	OP_DATA("Flatten", 1, 1, 1, "input", "output"),
	.attrs = (const struct op_attr[]){ATTR_INT("axis", 1), {0}},
	.shape = flatten_shape,
	.shard = SHARD(FLATTEN, 0),
};

/* ------------------------------------------------------------------ GatherND, ScatterND */

static void gather_nd_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *data = op_in(c, 0), *idx = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t b = 0, k;
	int i;

	if (!y)
		return;
	op_attr_int(c, "batch_dims", &b);
	if (idx->rank == 0 || (idx->rank > 0 && (b < 0 || b >= idx->rank))) {
		op_error(c, "attribute 'batch_dims' = %" PRId64 " does not fit indices of rank %d", b,
			 idx->rank);
		return;
	}
	if (data->rank >= 0 && b >= data->rank) {
		op_error(c, "attribute 'batch_dims' = %" PRId64 " does not fit data of rank %d", b,
			 data->rank);
		return;
	}
	if (data->rank < 0 || idx->rank < 0 || !dim_is_static(&idx->dims[idx->rank - 1]))
		return;
	k = idx->dims[idx->rank - 1].value;
	if (k < 1 || b + k > data->rank) {
		op_error(c, "index tuples of %" PRId64 " entries do not fit data of rank %d (batch_dims %" PRId64 ")",
			 k, data->rank, b);
		return;
	}
	if (idx->rank - 1 + data->rank - b - k > TPF_MAX_RANK)
		return;
	y->rank = 0;
	for (i = 0; i < idx->rank - 1; i++)
		y->dims[y->rank++] = i < b && dim_is_static(&data->dims[i]) ? data->dims[i] : idx->dims[i];
	for (i = (int)(b + k); i < data->rank; i++)
		y->dims[y->rank++] = data->dims[i];
}

const struct tpf_op_def tpf_op_def_GATHER_ND = {
	OP_WITH_INT64("GatherND", 11, 2, "data", "indices", "output"),
	.attrs = (const struct op_attr[]){ATTR_INT("batch_dims", 0), {0}},
	.shape = gather_nd_shape,
};

static const char *const scatter_nd_reductions[] = {"none", "add", "mul", "max", "min", NULL};

static void scatter_nd_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *data = op_in(c, 0), *idx = op_in(c, 1), *up = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t k;

	if (!y)
		return;
	op_type_shape_of(y, data);
	if (idx->rank == 0) {
		op_error(c, "indices must have rank 1 or more");
		return;
	}
	if (data->rank < 0 || idx->rank < 0 || !dim_is_static(&idx->dims[idx->rank - 1]))
		return;
	k = idx->dims[idx->rank - 1].value;
	if (k > data->rank) {
		op_error(c, "index tuples of %" PRId64 " entries exceed data of rank %d", k, data->rank);
		return;
	}
	if (up->rank >= 0 && up->rank != idx->rank - 1 + data->rank - (int)k)
		op_error(c, "updates have rank %d; expected %d (indices rank - 1 + data rank - %" PRId64 ")",
			 up->rank, idx->rank - 1 + data->rank - (int)k, k);
}

const struct tpf_op_def tpf_op_def_SCATTER_ND = {
	.info = {"", "ScatterND", 3, 3, 1, 1},
	.since = 11,
	.inputs = {{"data", T}, {"indices", I64}, {"updates", T}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){
		{.name = "reduction", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "none",
		 .since = 16, .allowed = scatter_nd_reductions},
		{0},
	},
	.shape = scatter_nd_shape,
	.shard = SHARD(SCATTER_ND, 0),
};

/* ------------------------------------------------------------ TensorScatter */

static const char *const tensor_scatter_modes[] = {"linear", "circular", NULL};

/* present_cache has past_cache's type; update differs from it in the
 * sequence axis only; write_indices is [batch]. */
static void tensor_scatter_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *past = op_in(c, 0), *up = op_in(c, 1), *wi = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t axis = -2;

	if (y)
		op_type_shape_of(y, past);
	if (past->rank < 0 || up->rank < 0)
		return;
	op_attr_int(c, "axis", &axis);
	if (past->rank < 2 || up->rank != past->rank) {
		op_error(c, "past_cache has rank %d and update rank %d; expected one rank of 2 or more",
			 past->rank, up->rank);
		return;
	}
	if (axis < 0)
		axis += past->rank;
	if (axis < 1 || axis >= past->rank) {
		op_error(c, "axis %" PRId64 " is out of range (1 to %d, not the batch axis)", axis,
			 past->rank - 1);
		return;
	}
	for (int a = 0; a < past->rank; a++) {
		const struct tpf_dim *p = &past->dims[a], *u = &up->dims[a];
		if (!dim_is_static(p) || !dim_is_static(u))
			continue;
		if (a == axis ? u->value > p->value : u->value != p->value)
			op_error(c, "update dim %d is %" PRId64 "; expected %s%" PRId64 " (past_cache's)", a,
				 u->value, a == axis ? "at most " : "", p->value);
	}
	if (wi && wi->present && wi->rank >= 0 &&
	    (wi->rank != 1 || (dim_is_static(&wi->dims[0]) && dim_is_static(&past->dims[0]) &&
			       wi->dims[0].value != past->dims[0].value)))
		op_error(c, "write_indices must be [batch]");
}

const struct tpf_op_def tpf_op_def_TENSOR_SCATTER = {
	.info = {"", "TensorScatter", 2, 3, 1, 1},
	.since = 24,
	.inputs = {{"past_cache", T}, {"update", T}, {"write_indices", I64}},
	.outputs = {{"present_cache", T}},
	.types = {[T] = TYPE_ANY("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", -2),
		{.name = "mode", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "linear",
		 .allowed = tensor_scatter_modes},
		{0},
	},
	.shape = tensor_scatter_shape,
};

/* ------------------------------------------------------------------ OneHot */

static void one_hot_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *idx = op_in(c, 0), *depth = op_in(c, 1), *vals = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t axis = -1, ax, dv;
	int i, src = 0;

	if (!y)
		return;
	if (vals->rank >= 0 && !(vals->rank == 1 && (!dim_is_static(&vals->dims[0]) ||
						     vals->dims[0].value == 2))) {
		op_error(c, "values must be a 1-D tensor of 2 elements [off, on]");
		return;
	}
	if (depth->rank > 1 || (depth->rank == 1 && dim_is_static(&depth->dims[0]) &&
				depth->dims[0].value != 1)) {
		op_error(c, "depth must be a scalar");
		return;
	}
	if (idx->rank < 0 || idx->rank + 1 > TPF_MAX_RANK)
		return;
	op_attr_int(c, "axis", &axis);
	if (op_norm_axis(axis, idx->rank + 1, &ax)) {
		op_error(c, "attribute 'axis' = %" PRId64 " is out of range for output rank %d", axis,
			 idx->rank + 1);
		return;
	}
	op_type_set_rank(y, idx->rank + 1);
	for (i = 0; i < y->rank; i++)
		if (i != ax)
			y->dims[i] = idx->dims[src++];
	if (op_static_values(depth, &dv, 1) == 1) {
		if (dv < 1) {
			op_error(c, "depth is %" PRId64 "; expected 1 or more", dv);
			return;
		}
		y->dims[ax] = dim_of(dv);
	}
}

const struct tpf_op_def tpf_op_def_ONE_HOT = {
	.info = {"", "OneHot", 3, 3, 1, 1},
	.since = 9,
	.inputs = {{"indices", T}, {"depth", IND}, {"values", T3}},
	.outputs = {{"output", T3}},
	.types = {[T] = TYPE_NUMERIC("T1"), [IND] = TYPE_NUMERIC("T2"), [T3] = TYPE_ANY("T3")},
	.attrs = (const struct op_attr[]){ATTR_INT("axis", -1), {0}},
	.shape = one_hot_shape,
};

/* ------------------------------------------------------------------ Tile */

static void tile_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *rep = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t r[TPF_MAX_RANK];
	int n, i;

	if (!y || x->rank < 0)
		return;
	op_type_set_rank(y, x->rank);
	if (rep->rank >= 0 && rep->rank != 1) {
		op_error(c, "repeats must be 1-D, not rank %d", rep->rank);
		return;
	}
	if (rep->rank == 1 && dim_is_static(&rep->dims[0]) && rep->dims[0].value != x->rank) {
		op_error(c, "repeats has %" PRId64 " entries but the input has rank %d",
			 rep->dims[0].value, x->rank);
		return;
	}
	n = op_static_values(rep, r, TPF_MAX_RANK);
	if (n != x->rank)
		return;
	for (i = 0; i < n; i++) {
		int64_t p;

		if (r[i] < 0) {
			op_error(c, "repeats[%d] = %" PRId64 " is negative", i, r[i]);
			return;
		}
		if (r[i] == 1)
			y->dims[i] = x->dims[i];
		else if (r[i] == 0)
			y->dims[i] = dim_of(0);
		else if (dim_is_static(&x->dims[i]) && !__builtin_mul_overflow(x->dims[i].value, r[i], &p))
			y->dims[i] = dim_of(p);
	}
}

const struct tpf_op_def tpf_op_def_TILE = {
	OP_WITH_INT64("Tile", 6, 2, "input", "repeats", "output"),
	.shape = tile_shape,
};

/* ------------------------------------------------------------------ Trilu, CumSum */

static void trilu_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *k = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);

	if (!y)
		return;
	if (x->rank >= 0 && x->rank < 2) {
		op_error(c, "input has rank %d; expected 2 or more", x->rank);
		return;
	}
	if (k->present && k->rank > 0 &&
	    !(k->rank == 1 && dim_is_static(&k->dims[0]) && k->dims[0].value == 1)) {
		op_error(c, "k must be a scalar");
		return;
	}
	op_type_shape_of(y, x);
}

const struct tpf_op_def tpf_op_def_TRILU = {
	.info = {"", "Trilu", 1, 2, 1, 1},
	.since = 14,
	.inputs = {{"input", T}, {"k", I64, OPND_OPTIONAL}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){ATTR_INT("upper", 1), {0}},
	.shape = trilu_shape,
	.shard = SHARD(TRILU, 0),
};

static void cumsum_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *axis = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t a, ax;

	if (!y)
		return;
	op_type_shape_of(y, x);
	if (axis->rank > 1 || (axis->rank == 1 && dim_is_static(&axis->dims[0]) &&
			       axis->dims[0].value != 1)) {
		op_error(c, "axis must be a scalar");
		return;
	}
	if (x->rank >= 0 && op_static_values(axis, &a, 1) == 1 && op_norm_axis(a, x->rank, &ax))
		op_error(c, "axis %" PRId64 " is out of range for rank %d", a, x->rank);
}

const struct tpf_op_def tpf_op_def_CUMSUM = {
	.host_inputs = 1u << 1, /* axis */
	.info = {"", "CumSum", 2, 2, 1, 1},
	.since = 11,
	.inputs = {{"x", T}, {"axis", IND}},
	.outputs = {{"y", T}},
	.types = {[T] = TYPE_NUMERIC("T"),
		  [IND] = TYPE_INDEX("T2")},
	.attrs = (const struct op_attr[]){ATTR_INT("exclusive", 0), ATTR_INT("reverse", 0), {0}},
	.shape = cumsum_shape,
	.shard = SHARD(CUMSUM, 0),
};

/* ------------------------------------------------------------------ Size */

static void size_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	struct tpf_dim n;

	if (!y)
		return;
	y->rank = 0;
	if (x->rank < 0)
		return;
	n = dims_product(x, 0, x->rank);
	if (n.param || n.value >= 0) {
		y->values[0] = n.param ? n : dim_of(n.value);
		y->n_values = 1;
	}
}

const struct tpf_op_def tpf_op_def_SIZE = {
	OP_TO_INT64("Size", 1, "size", TYPE_ANY("T")),
	.shape = size_shape,
	.shard = SHARD(REPLICATED, 0),
};
