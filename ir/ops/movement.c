/* SPDX-License-Identifier: MIT */
/*
 * Data movement and shape arithmetic: Reshape, Transpose, Slice, Split,
 * Concat, Gather, GatherElements, ScatterElements, Squeeze, Unsqueeze,
 * Expand, Shape, ConstantOfShape, Constant.  Shape, Gather, Concat,
 * Squeeze, Unsqueeze and Slice also carry the values of small integer
 * tensors (ONNX's data propagation), each value a static or symbolic dim,
 * so `Shape -> Gather -> Concat -> Reshape` gives the Reshape its target
 * even where the dims are symbolic.
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

/* Split lists longer than this are not read. */
#define SPLIT_MAX 65536

enum { T = 1, I64, IND, T2 };


/* Values of an operand known as a list (what a shape, axes or sizes input
 * holds): the count, or -1 when unknown or longer than max. */
static int value_list(const struct tpf_op_type *t, const struct tpf_dim **out, int max)
{
	if (!t->present || t->n_values < 0 || t->n_values > max)
		return -1;
	*out = t->values;
	return t->n_values;
}

/* ------------------------------------------------------------------ Reshape */

/* Symbols of the dims in [from, to) with the product of the static ones.
 * Returns -1 when a dim is unknown or the product overflows. */
static int dim_factors(const struct tpf_dim *dims, int rank, int skip, int64_t *prod,
		       const char **syms, int *n_syms)
{
	int i;

	*prod = 1;
	*n_syms = 0;
	for (i = 0; i < rank; i++) {
		if (i == skip)
			continue;
		if (dims[i].param) {
			syms[(*n_syms)++] = dims[i].param;
		} else if (dims[i].value >= 0) {
			if (__builtin_mul_overflow(*prod, dims[i].value, prod))
				return -1;
		} else {
			return -1;
		}
	}
	return 0;
}

/* The -1 entry (neg >= 0) and the element count, by cancelling symbols the
 * input and the target share. */
static void reshape_resolve(struct tpf_shape_call *c, const struct tpf_op_type *data,
			    struct tpf_op_type *out, int neg)
{
	const char *in_syms[TPF_MAX_RANK], *out_syms[TPF_MAX_RANK], *left = NULL;
	int n_in, n_out, j, k, n_left = 0;
	int64_t p_in, p_out;

	if (data->rank < 0 || dim_factors(data->dims, data->rank, -1, &p_in, in_syms, &n_in) ||
	    dim_factors(out->dims, out->rank, neg, &p_out, out_syms, &n_out))
		return;
	for (j = 0; j < n_out; j++) {
		for (k = 0; k < n_in; k++)
			if (in_syms[k] && (strcmp(in_syms[k], out_syms[j]) == 0 ||
					   op_dims_equal(c, &(struct tpf_dim){-1, in_syms[k], NULL},
							 &(struct tpf_dim){-1, out_syms[j], NULL}) ==
					       TPF_ANSWER_YES))
				break;
		if (k == n_in)
			return;
		in_syms[k] = NULL;
	}
	for (k = 0; k < n_in; k++)
		if (in_syms[k]) {
			left = in_syms[k];
			n_left++;
		}
	if (neg >= 0) {
		if (n_left == 0 && p_out > 0) {
			if (p_in % p_out) {
				op_error(c,
					 "cannot infer the -1 entry: the input dims not matched by "
					 "the shape hold %" PRId64 " elements, not a multiple of %" PRId64,
					 p_in, p_out);
				out->rank = -1;
				return;
			}
			out->dims[neg] = dim_of(p_in / p_out);
		} else if (n_left == 1 && p_out > 0 && p_in == p_out) {
			out->dims[neg].param = left;
		}
	} else if (n_left == 0 && n_out == 0 && p_in != p_out) {
		op_error(c, "element count mismatch: input has %" PRId64 " elements, shape has %" PRId64,
			 p_in, p_out);
		out->rank = -1;
	}
}

/* An output shape given as an operand (Reshape's shape, ConstantOfShape's
 * input): out gets its rank and *vals its values; the count, or -1 when
 * the values are not known (out then has the rank, when the operand's
 * length is known). */
static int shape_operand(const struct tpf_op_type *shp, struct tpf_op_type *out,
			 const struct tpf_dim **vals)
{
	int k = value_list(shp, vals, TPF_MAX_RANK);

	if (k < 0) {
		if (shp->rank == 1 && dim_is_static(&shp->dims[0]) &&
		    shp->dims[0].value <= TPF_MAX_RANK)
			op_type_set_rank(out, (int)shp->dims[0].value);
		return -1;
	}
	out->rank = k;
	return k;
}

static void reshape_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *data = op_in(c, 0), *shp = op_in(c, 1);
	struct tpf_op_type *out = op_out(c, 0);
	const struct tpf_dim *vals;
	int64_t allowzero = 0;
	int cnt, i, neg = -1;

	if (!out)
		return;
	op_attr_int(c, "allowzero", &allowzero);
	cnt = shape_operand(shp, out, &vals);
	if (cnt < 0)
		return;
	for (i = 0; i < cnt; i++) {
		const struct tpf_dim *v = &vals[i];

		if (v->param) {
			out->dims[i] = *v;
		} else if (v->value == OP_VALUE_UNKNOWN) {
			out->dims[i] = dim_unknown();
		} else if (v->value == 0 && !allowzero) {
			if (data->rank >= 0 && i >= data->rank) {
				op_error(c,
					 "shape[%d] = 0 copies input dimension %d, but the input has "
					 "rank %d",
					 i, i, data->rank);
				out->rank = -1;
				return;
			}
			out->dims[i] = data->rank >= 0 ? data->dims[i] : dim_unknown();
		} else if (v->value == -1) {
			if (neg >= 0) {
				op_error(c, "shape has more than one -1 (entries %d and %d)", neg, i);
				out->rank = -1;
				return;
			}
			neg = i;
			out->dims[i] = dim_unknown();
		} else if (v->value < -1) {
			op_error(c, "shape[%d] = %" PRId64 " is invalid", i, v->value);
			out->rank = -1;
			return;
		} else {
			out->dims[i] = dim_of(v->value);
		}
	}
	reshape_resolve(c, data, out, neg);
	if (out->rank >= 0 && data->n_values >= 0 && out->rank <= 1)
		op_type_copy_values(out, data);
}

const struct tpf_op_def tpf_op_def_RESHAPE = {
	OP_WITH_INT64("Reshape", 5, 2, "data", "shape", "reshaped"),
	.attrs = (const struct op_attr[]){ATTR_INT("allowzero", 0), {0}},
	.shape = reshape_shape,
	.shard = SHARD(RESHAPE, 0),
};

/* ------------------------------------------------------------------ Transpose */

static void transpose_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t perm[TPF_MAX_RANK];
	uint8_t seen[TPF_MAX_RANK];
	const struct tpf_attr *a = tpf_node_attr(c->node, "perm");
	int np, i;

	if (!out)
		return;
	if (!a) {
		if (in->rank >= 0) {
			out->rank = in->rank;
			for (i = 0; i < in->rank; i++)
				out->dims[i] = in->dims[in->rank - 1 - i];
		}
		return;
	}
	if (a->kind != TPF_ATTR_INTS || a->ref_attr_name)
		return;
	if (a->n > TPF_MAX_RANK) {
		op_error(c, "attribute 'perm' has %zu entries; at most %d supported", a->n,
			 TPF_MAX_RANK);
		return;
	}
	np = op_attr_ints(c, "perm", perm, TPF_MAX_RANK);
	if (in->rank >= 0 && np != in->rank) {
		op_error(c, "attribute 'perm' has %d entries but the input has rank %d", np,
			 in->rank);
		return;
	}
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < np; i++) {
		if (perm[i] < 0 || perm[i] >= np || seen[perm[i]]) {
			op_error(c, "attribute 'perm' is not a permutation of 0..%d", np ? np - 1 : 0);
			return;
		}
		seen[perm[i]] = 1;
	}
	out->rank = np;
	for (i = 0; i < np; i++)
		out->dims[i] = in->rank >= 0 ? in->dims[perm[i]] : dim_unknown();
}

const struct tpf_op_def tpf_op_def_TRANSPOSE = {
	OP_DATA("Transpose", 1, 1, 1, "data", "transposed"),
	.attrs = (const struct op_attr[]){ATTR_OF("perm", TPF_ATTR_INTS), {0}},
	.shape = transpose_shape,
	.shard = SHARD(TRANSPOSE, 0),
};

/* ------------------------------------------------------------------ Slice */

int64_t tpf_slice_span(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *first)
{
	if (start < 0)
		start += d;
	if (end < 0)
		end += d;
	if (step > 0) {
		start = start < 0 ? 0 : start > d ? d : start;
		end = end < 0 ? 0 : end > d ? d : end;
		*first = start;
		return end > start ? (end - start - 1) / step + 1 : 0;
	}
	/* backwards: start in [0, d - 1], end in [-1, d - 1] */
	start = start < 0 ? 0 : start > d - 1 ? d - 1 : start;
	end = end < -1 ? -1 : end > d - 1 ? d - 1 : end;
	*first = start;
	if (d == 0 || start <= end)
		return 0;
	if (step == INT64_MIN)
		return 1;
	return (start - end - 1) / (-step) + 1;
}

/* A list from attribute `name` (opset < 10) or input i; -2 absent, -1 unknown. */
static int slice_list(struct tpf_shape_call *c, int from_attrs, const char *name, size_t i,
		      int64_t *out)
{
	if (from_attrs) {
		if (!op_attr_given(c, name))
			return -2;
		return op_attr_ints(c, name, out, TPF_MAX_RANK);
	}
	if (!op_in_present(c, i))
		return -2;
	return op_static_values(op_in(c, i), out, TPF_MAX_RANK);
}

static void slice_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t starts[TPF_MAX_RANK], ends[TPF_MAX_RANK], axes[TPF_MAX_RANK], steps[TPF_MAX_RANK];
	int from_attrs = (c->opset > 0 && c->opset < 10) || op_attr_given(c, "starts");
	int ns, ne, na, nst, i;

	if (!out || in->rank < 0)
		return;
	ns = slice_list(c, from_attrs, "starts", 1, starts);
	ne = slice_list(c, from_attrs, "ends", 2, ends);
	na = slice_list(c, from_attrs, "axes", 3, axes);
	nst = from_attrs ? -2 : slice_list(c, 0, "steps", 4, steps);
	op_type_shape_of(out, in);
	if (na == -2) {
		/* default axes: 0..len-1 (length from starts when known) */
		int len = ns >= 0 ? ns : in->rank;

		na = len > in->rank ? -1 : len;
		for (i = 0; i < na; i++)
			axes[i] = i;
	}
	if (na < 0) {
		op_type_set_rank(out, in->rank);
		return;
	}
	if (op_norm_axes(c, axes, na, in->rank, "is sliced twice")) {
		out->rank = -1;
		return;
	}
	if (ns < 0 || ne < 0 || nst == -1) {
		for (i = 0; i < na; i++)
			out->dims[axes[i]] = dim_unknown();
		return;
	}
	if (ns != na || ne != na || (nst >= 0 && nst != na)) {
		op_error(c,
			 "starts, ends, axes and steps have different lengths (%d, %d, %d, %d)", ns,
			 ne, na, nst >= 0 ? nst : na);
		out->rank = -1;
		return;
	}
	for (i = 0; i < na; i++) {
		int64_t step = nst >= 0 ? steps[i] : 1, first;
		struct tpf_dim *d = &out->dims[axes[i]];

		if (step == 0) {
			op_error(c, "step %d is 0", i);
			out->rank = -1;
			return;
		}
		if (dim_is_static(d)) {
			*d = dim_of(tpf_slice_span(d->value, starts[i], ends[i], step, &first));
		} else if ((step == 1 && starts[i] == 0 && ends[i] >= INT32_MAX) ||
			   (step == -1 && (starts[i] == -1 || starts[i] >= INT32_MAX) &&
			    ends[i] <= -(int64_t)INT32_MAX)) {
			/* the whole axis: the dim is unchanged */
		} else {
			*d = dim_unknown();
		}
	}
	/* values of a sliced 1-D list (shape arithmetic) */
	if (in->rank == 1 && in->n_values >= 0 && na == 1 && (nst < 0 || steps[0] == 1) &&
	    dim_is_static(&out->dims[0])) {
		int64_t s = starts[0] < 0 ? starts[0] + in->n_values : starts[0];

		s = s < 0 ? 0 : s > in->n_values ? in->n_values : s;
		if (s + out->dims[0].value <= in->n_values) {
			out->n_values = (int)out->dims[0].value;
			for (i = 0; i < out->n_values; i++)
				out->values[i] = in->values[s + i];
		}
	}
}

const struct tpf_op_def tpf_op_def_SLICE = {
	.host_inputs = 0xfu << 1, /* starts, ends, axes, steps */
	.info = {"", "Slice", 3, 5, 1, 1},
	.since = 1,
	.inputs = {{"data", T}, {"starts", IND}, {"ends", IND}, {"axes", IND}, {"steps", IND}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [IND] = TYPE_INDEX("Tind")},
	.attrs = (const struct op_attr[]){
		{.name = "starts", .kind = TPF_ATTR_INTS, .until = 10, .required_before = 10},
		{.name = "ends", .kind = TPF_ATTR_INTS, .until = 10, .required_before = 10},
		{.name = "axes", .kind = TPF_ATTR_INTS, .until = 10},
		{0},
	},
	.forms = {{10, 1, 1}},
	.shape = slice_shape,
	.shard = SHARD(SLICE, 0),
};

/* ------------------------------------------------------------------ Split */

static void set_all_outputs(struct tpf_shape_call *c, const struct tpf_op_type *t)
{
	size_t j;

	for (j = 0; j < c->n_out; j++) {
		c->out[j].rank = t->rank;
		if (t->rank > 0)
			memcpy(c->out[j].dims, t->dims, (size_t)t->rank * sizeof(t->dims[0]));
	}
}

static void split_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type shape;
	int64_t ax, sizes[TPF_MAX_VALUES], num, sum = 0;
	int64_t *split = sizes;
	size_t nout = c->n_out, i;
	int count = -1, from_input = op_in_present(c, 1), r;
	const struct tpf_attr *sa = tpf_node_attr(c->node, "split");

	if (!nout)
		return;
	if (op_attr_given(c, "num_outputs") && from_input)
		op_error(c, "attribute 'num_outputs' and input 'split' are both given");
	if (op_attr_given(c, "num_outputs") && op_attr_int(c, "num_outputs", &num) &&
	    num != (int64_t)nout) {
		op_error(c, "attribute 'num_outputs' = %" PRId64 " but the node has %zu outputs", num,
			 nout);
		return;
	}
	if (sa && sa->kind == TPF_ATTR_INTS && !sa->ref_attr_name && sa->n != nout) {
		op_error(c, "attribute 'split' has %zu entries but the node has %zu outputs", sa->n,
			 nout);
		return;
	}
	r = op_attr_axis(c, "axis", in->rank, &ax);
	if (r <= 0)
		return;
	if (from_input) {
		count = op_static_values(op_in(c, 1), sizes, TPF_MAX_VALUES);
		if (count < 0) {
			const struct tpf_op_type *st = op_in(c, 1);

			if (st->rank == 1 && dim_is_static(&st->dims[0]) &&
			    st->dims[0].value != (int64_t)nout) {
				op_error(c,
					 "input 'split' has %" PRId64 " entries but the node has %zu "
					 "outputs",
					 st->dims[0].value, nout);
				return;
			}
		}
	} else if (sa && sa->kind == TPF_ATTR_INTS && !sa->ref_attr_name) {
		if (sa->n > SPLIT_MAX || (sa->n && !sa->ints))
			return;
		split = sa->ints;
		count = (int)sa->n;
	}
	shape = *in;
	if (count >= 0) {
		if (count != (int)nout) {
			op_error(c, "'split' has %d entries but the node has %zu outputs", count, nout);
			return;
		}
		for (i = 0; i < nout; i++)
			if (split[i] < 0 || __builtin_add_overflow(sum, split[i], &sum)) {
				op_error(c, "split[%zu] = %" PRId64 " is invalid", i, split[i]);
				return;
			}
		if (dim_is_static(&in->dims[ax]) && sum != in->dims[ax].value) {
			op_error(c, "split sizes add up to %" PRId64 " but dimension %" PRId64 " is %" PRId64,
				 sum, ax, in->dims[ax].value);
			return;
		}
		for (i = 0; i < nout; i++) {
			op_type_shape_of(&c->out[i], in);
			c->out[i].dims[ax] = dim_of(split[i]);
		}
		return;
	}
	if (from_input) {
		shape.dims[ax] = dim_unknown();
		set_all_outputs(c, &shape);
		return;
	}
	if (!dim_is_static(&in->dims[ax])) {
		shape.dims[ax] = dim_unknown();
		set_all_outputs(c, &shape);
		return;
	}
	{
		int64_t d = in->dims[ax].value, k = (int64_t)nout, chunk;

		if (d % k && !op_attr_given(c, "num_outputs")) {
			op_error(c,
				 "dimension %" PRId64 " = %" PRId64 " does not split evenly into %" PRId64
				 " outputs",
				 ax, d, k);
			return;
		}
		/* opset 18's num_outputs: chunks of ceil(d/k), the last ones
		 * smaller (down to empty) */
		chunk = d / k + (d % k != 0);
		for (i = 0; i < nout; i++) {
			int64_t left = d - chunk * (int64_t)i;

			op_type_shape_of(&c->out[i], in);
			c->out[i].dims[ax] = dim_of(left < chunk ? (left > 0 ? left : 0) : chunk);
		}
	}
}

const struct tpf_op_def tpf_op_def_SPLIT = {
	.host_inputs = 1u << 1, /* split */
	.info = {"", "Split", 1, 2, 1, -1},
	.since = 1,
	.inputs = {{"input", T}, {"split", I64}},
	.outputs = {{"outputs", T}},
	.types = {[T] = TYPE_ANY("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", 0),
		{.name = "split", .kind = TPF_ATTR_INTS, .until = 13},
		{.name = "num_outputs", .kind = TPF_ATTR_INT, .since = 18},
		{0},
	},
	.forms = {{13, 1, 1}},
	.shape = split_shape,
	.shard = SHARD(SPLIT, 0),
};

/* ------------------------------------------------------------------ Concat */

static void concat_values(struct tpf_shape_call *c, struct tpf_op_type *out)
{
	size_t j;
	int n = 0, k;

	if (out->rank != 1)
		return;
	for (j = 0; j < c->n_in; j++) {
		const struct tpf_op_type *t = op_in(c, j);

		if (t->n_values < 0 || t->rank > 1 || n + t->n_values > TPF_MAX_VALUES)
			return;
		for (k = 0; k < t->n_values; k++)
			out->values[n++] = t->values[k];
	}
	out->n_values = n;
}

static void concat_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *out = op_out(c, 0);
	int64_t ax = 0, sum = 0;
	int rank = -1, i, sum_known = 1, any_unknown_rank = 0, r;
	size_t j;

	if (!out)
		return;
	for (j = 0; j < c->n_in; j++) {
		const struct tpf_op_type *t = op_in(c, j);

		if (t->rank < 0) {
			any_unknown_rank = 1;
			continue;
		}
		if (rank < 0) {
			rank = t->rank;
		} else if (t->rank != rank) {
			op_error(c, "input %zu '%s' has rank %d but earlier inputs have rank %d", j,
				 op_in_name(c, j), t->rank, rank);
			return;
		}
	}
	if (rank < 0)
		return;
	r = op_attr_axis(c, "axis", rank, &ax);
	if (r < 0)
		return;
	op_type_set_rank(out, rank);
	if (r == 0)
		return;
	for (j = 0; j < c->n_in; j++) {
		const struct tpf_op_type *t = op_in(c, j);

		if (t->rank < 0)
			continue;
		for (i = 0; i < rank; i++) {
			struct tpf_dim *o = &out->dims[i];
			const struct tpf_dim *d = &t->dims[i];

			if (i == ax) {
				if (dim_is_static(d) && sum_known) {
					if (__builtin_add_overflow(sum, d->value, &sum))
						sum_known = 0;
				} else {
					sum_known = 0;
				}
				continue;
			}
			if (dim_is_static(d)) {
				if (dim_is_static(o) && o->value != d->value) {
					op_error(c,
						 "input %zu '%s' has %" PRId64 " in dimension %d where "
						 "earlier inputs have %" PRId64,
						 j, op_in_name(c, j), d->value, i, o->value);
					out->rank = -1;
					return;
				}
				*o = *d;
			} else if (d->param) {
				if (!dim_is_static(o) && !o->param)
					*o = *d;
				else if (o->param)
					op_dims_unify(c, d, o); /* the other dims are one size */
			}
		}
	}
	if (sum_known && !any_unknown_rank)
		out->dims[ax] = dim_of(sum);
	concat_values(c, out);
}

const struct tpf_op_def tpf_op_def_CONCAT = {
	OP_DATA("Concat", 1, 1, -1, "inputs", "concat_result"),
	.attrs = (const struct op_attr[]){
		{.name = "axis", .kind = TPF_ATTR_INT, .flags = ATTR_REQUIRED}, {0}},
	.shape = concat_shape,
	.shard = SHARD(CONCAT, 0),
};

/* ------------------------------------------------------------------ Gather */

static void gather_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *data = op_in(c, 0), *idx = op_in(c, 1);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t ax, iv[TPF_MAX_VALUES];
	int i, r, ni;

	r = op_attr_axis(c, "axis", data->rank, &ax);
	if (!out || r <= 0 || idx->rank < 0)
		return;
	if (data->rank + idx->rank - 1 > TPF_MAX_RANK)
		return;
	out->rank = 0;
	for (i = 0; i < ax; i++)
		out->dims[out->rank++] = data->dims[i];
	for (i = 0; i < idx->rank; i++)
		out->dims[out->rank++] = idx->dims[i];
	for (i = (int)ax + 1; i < data->rank; i++)
		out->dims[out->rank++] = data->dims[i];
	/* values: picking entries of a 1-D list (a shape) */
	ni = op_static_values(idx, iv, TPF_MAX_VALUES);
	if (data->rank == 1 && data->n_values >= 0 && ni >= 0 && idx->rank <= 1) {
		for (i = 0; i < ni; i++) {
			int64_t k = iv[i] < 0 ? iv[i] + data->n_values : iv[i];

			if (k < 0 || k >= data->n_values)
				return;
			out->values[i] = data->values[k];
		}
		out->n_values = ni;
	}
}

const struct tpf_op_def tpf_op_def_GATHER = {
	OP_WITH_INDEX("Gather", 1, "data", "indices", "output"),
	.attrs = (const struct op_attr[]){ATTR_INT("axis", 0), {0}},
	.shape = gather_shape,
	.shard = SHARD(GATHER, 0),
};

static void gather_elements_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *data = op_in(c, 0), *idx = op_in(c, 1);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t ax;

	if (op_attr_axis(c, "axis", data->rank, &ax) < 0 || !out)
		return;
	if (data->rank >= 0 && idx->rank >= 0 && data->rank != idx->rank) {
		op_error(c, "data has rank %d but indices have rank %d; expected the same rank",
			 data->rank, idx->rank);
		return;
	}
	op_type_shape_of(out, idx);
}

const struct tpf_op_def tpf_op_def_GATHER_ELEMENTS = {
	OP_WITH_INDEX("GatherElements", 11, "data", "indices", "output"),
	.attrs = (const struct op_attr[]){ATTR_INT("axis", 0), {0}},
	.shape = gather_elements_shape,
	.shard = SHARD(ELEMENTS, 0),
};

static const char *const scatter_reductions[] = {"none", "add", "mul", "max", "min", NULL};

const struct tpf_op_def tpf_op_def_SCATTER_ELEMENTS = {
	.info = {"", "ScatterElements", 3, 3, 1, 1},
	.since = 11,
	.traits = TPF_OP_TRAIT_UNARY, /* the output has the data's shape */
	.inputs = {{"data", T}, {"indices", IND}, {"updates", T}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [IND] = TYPE_INDEX("Tind")},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", 0),
		{.name = "reduction", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "none",
		 .since = 16, .allowed = scatter_reductions},
		{0},
	},
	.shard = SHARD(ELEMENTS, 1),
};

/* ------------------------------------------------------------------ Squeeze, Unsqueeze */

int op_read_axes(const struct tpf_shape_call *c, int64_t *axes)
{
	if (op_attr_given(c, "axes"))
		return op_attr_ints(c, "axes", axes, TPF_MAX_RANK);
	if (op_in_present(c, 1)) {
		int k = op_static_values(op_in(c, 1), axes, TPF_MAX_RANK);

		return k < 0 ? -2 : k;
	}
	return -1;
}

static void squeeze_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t axes[TPF_MAX_RANK], ax;
	uint8_t drop[TPF_MAX_RANK];
	int k, i;

	k = op_read_axes(c, axes);
	if (!out || in->rank < 0 || k == -2)
		return;
	memset(drop, 0, sizeof(drop));
	if (k <= 0) {
		for (i = 0; i < in->rank; i++) {
			if (!dim_is_static(&in->dims[i]))
				return; /* which dims are 1 is unknown */
			drop[i] = in->dims[i].value == 1;
		}
	} else {
		if (op_norm_axes(c, axes, k, in->rank, "is given twice"))
			return;
		for (i = 0; i < k; i++) {
			ax = axes[i];
			if (dim_is_static(&in->dims[ax]) && in->dims[ax].value != 1) {
				op_error(c, "cannot squeeze axis %" PRId64 " of extent %" PRId64, ax,
					 in->dims[ax].value);
				return;
			}
			drop[ax] = 1;
		}
	}
	out->rank = 0;
	for (i = 0; i < in->rank; i++)
		if (!drop[i])
			out->dims[out->rank++] = in->dims[i];
	if (out->rank <= 1)
		op_type_copy_values(out, in);
}

const struct tpf_op_def tpf_op_def_SQUEEZE = {
	OP_WITH_INT64("Squeeze", 1, 1, "data", "axes", "squeezed"),
	.attrs = (const struct op_attr[]){
		{.name = "axes", .kind = TPF_ATTR_INTS, .until = 13}, {0}},
	.forms = {{13, 1, 1}},
	.shape = squeeze_shape,
	.shard = SHARD(UNSQUEEZE, 1),
};

static void unsqueeze_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t axes[TPF_MAX_RANK], ax;
	uint8_t ins[TPF_MAX_RANK];
	int k, i, src = 0;

	k = op_read_axes(c, axes);
	if (!out || in->rank < 0 || k < 0)
		return;
	if (in->rank + k > TPF_MAX_RANK) {
		op_error(c, "output rank %d exceeds %d", in->rank + k, TPF_MAX_RANK);
		return;
	}
	memset(ins, 0, sizeof(ins));
	for (i = 0; i < k; i++) {
		if (op_norm_axis(axes[i], in->rank + k, &ax)) {
			op_error(c, "axis %" PRId64 " is out of range for output rank %d", axes[i],
				 in->rank + k);
			return;
		}
		if (ins[ax]) {
			op_error(c, "axis %" PRId64 " is given twice", ax);
			return;
		}
		ins[ax] = 1;
	}
	out->rank = in->rank + k;
	for (i = 0; i < out->rank; i++)
		out->dims[i] = ins[i] ? dim_of(1) : in->dims[src++];
	if (out->rank <= 1)
		op_type_copy_values(out, in);
}

const struct tpf_op_def tpf_op_def_UNSQUEEZE = {
	OP_WITH_INT64("Unsqueeze", 1, 1, "data", "axes", "expanded"),
	.attrs = (const struct op_attr[]){
		{.name = "axes", .kind = TPF_ATTR_INTS, .until = 13, .required_before = 13}, {0}},
	.forms = {{13, 1, 1}, {INT64_MAX, 2, 2}},
	.shape = unsqueeze_shape,
	.shard = SHARD(UNSQUEEZE, 0),
};

/* ------------------------------------------------------------------ Expand */

static void expand_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0), *shp = op_in(c, 1);
	struct tpf_op_type *out = op_out(c, 0), tgt;
	const struct tpf_op_type *ptrs[2] = {in, &tgt};
	const size_t labels[2] = {0, 1};
	const struct tpf_dim *vals;
	int k, i;

	if (!out)
		return;
	k = value_list(shp, &vals, TPF_MAX_RANK);
	if (k < 0) {
		if (in->rank >= 0 && shp->rank == 1 && dim_is_static(&shp->dims[0]) &&
		    shp->dims[0].value <= TPF_MAX_RANK)
			op_type_set_rank(out, in->rank > shp->dims[0].value ? in->rank
									    : (int)shp->dims[0].value);
		return;
	}
	tpf_op_type_unknown(&tgt);
	tgt.rank = k;
	for (i = 0; i < k; i++) {
		if (vals[i].value == OP_VALUE_UNKNOWN) {
			tgt.dims[i] = dim_unknown();
			continue;
		}
		if (!vals[i].param && vals[i].value < 0) {
			op_error(c, "shape[%d] = %" PRId64 " is negative", i, vals[i].value);
			return;
		}
		tgt.dims[i] = vals[i];
	}
	op_broadcast_types(c, ptrs, labels, 2, out);
}

const struct tpf_op_def tpf_op_def_EXPAND = {
	OP_WITH_INT64("Expand", 8, 2, "input", "shape", "output"),
	.shape = expand_shape,
	.shard = SHARD(EXPAND, 0),
};

/* ------------------------------------------------------------------ Shape */

static void shape_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *in = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	int64_t start = 0, end, n;
	int i;

	if (!out)
		return;
	op_type_set_rank(out, 1);
	if (in->rank < 0)
		return;
	end = in->rank;
	op_attr_int(c, "start", &start);
	op_attr_int(c, "end", &end);
	/* dims [start, end) clamped as a Slice of the rank */
	n = tpf_slice_span(in->rank, start, end, 1, &start);
	out->dims[0] = dim_of(n);
	/* the values are the input's dims */
	if (n <= TPF_MAX_VALUES) {
		for (i = 0; i < n; i++) {
			const struct tpf_dim *d = &in->dims[start + i];

			out->values[i] = d->param || d->value >= 0 ? *d : value_unknown();
		}
		out->n_values = (int)n;
	}
}

const struct tpf_op_def tpf_op_def_SHAPE = {
	OP_TO_INT64("Shape", 1, "shape", TYPE_ANY("T")),
	.attrs = (const struct op_attr[]){
		{.name = "start", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .since = 15},
		{.name = "end", .kind = TPF_ATTR_INT, .since = 15},
		{0},
	},
	.shape = shape_shape,
	.shard = SHARD(REPLICATED, 0),
};

/* ------------------------------------------------------------------ ConstantOfShape, Constant */

static void constant_of_shape_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *shp = op_in(c, 0);
	struct tpf_op_type *out = op_out(c, 0);
	const struct tpf_attr *a = tpf_node_attr(c->node, "value");
	const struct tpf_dim *vals;
	int k, i;

	if (!out)
		return;
	out->dtype = TPF_DTYPE_FLOAT;
	out->dtype_why = "the dtype of attribute 'value'";
	if (a && a->kind == TPF_ATTR_TENSOR && !a->ref_attr_name && a->t) {
		if (tpf_tensor_numel(a->t) != 1)
			op_error(c, "attribute 'value' must hold exactly one element");
		out->dtype = a->t->dtype;
	}
	k = shape_operand(shp, out, &vals);
	for (i = 0; i < k; i++) {
		if (vals[i].value == OP_VALUE_UNKNOWN) {
			out->dims[i] = dim_unknown();
			continue;
		}
		if (!vals[i].param && vals[i].value < 0) {
			op_error(c, "shape[%d] = %" PRId64 " is negative", i, vals[i].value);
			out->rank = -1;
			return;
		}
		out->dims[i] = vals[i];
	}
}

const struct tpf_op_def tpf_op_def_CONSTANT_OF_SHAPE = {
	.info = {"", "ConstantOfShape", 1, 1, 1, 1},
	.since = 9,
	.inputs = {{"input", I64}},
	.outputs = {{"output", T2}},
	.types = {[I64] = TYPE_INT64, [T2] = {"T2", DT_ALL, "a tensor type"}},
	.attrs = (const struct op_attr[]){ATTR_OF("value", TPF_ATTR_TENSOR), {0}},
	.shape = constant_of_shape_shape,
	.shard = SHARD(CONSTANT_OF_SHAPE, 0),
};

static const struct op_attr constant_attrs[] = {
	ATTR_OF("value", TPF_ATTR_TENSOR),
	ATTR_OF("value_float", TPF_ATTR_FLOAT),
	ATTR_OF("value_floats", TPF_ATTR_FLOATS),
	ATTR_OF("value_int", TPF_ATTR_INT),
	ATTR_OF("value_ints", TPF_ATTR_INTS),
	ATTR_OF("value_string", TPF_ATTR_STRING),
	ATTR_OF("value_strings", TPF_ATTR_STRINGS),
	ATTR_OF("sparse_value", TPF_ATTR_SPARSE_TENSOR),
	{0},
};

/* The first of `names` (NULL-terminated) that the node has. */
static const struct tpf_attr *first_attr(const struct tpf_node *n, const char *const *names)
{
	const struct tpf_attr *a = NULL;

	for (; *names && !a; names++)
		a = tpf_node_attr(n, *names);
	return a;
}

static void constant_shape(struct tpf_shape_call *c)
{
	static const char *const scalars[] = {"value_float", "value_int", "value_string", NULL};
	static const char *const lists[] = {"value_floats", "value_ints", "value_strings", NULL};
	const struct tpf_node *n = c->node;
	struct tpf_op_type *out = op_out(c, 0);
	const struct op_attr *d;
	const struct tpf_attr *a;
	int count = 0, i, any_ref = 0;

	for (d = constant_attrs; d->name; d++)
		count += tpf_node_attr(n, d->name) != NULL;
	for (i = 0; i < (int)n->n_attrs; i++)
		any_ref |= n->attrs[i].ref_attr_name != NULL;
	if (count != 1 && !any_ref && c->mode != TPF_SHAPE_CONCRETE)
		op_error(c,
			 "has %d value attributes; expected exactly one of value, value_float(s), "
			 "value_int(s), value_string(s), sparse_value",
			 count);
	if (!out)
		return;
	out->dtype_why = "the dtype of attribute 'value'";
	if ((a = tpf_node_attr(n, "value")) && !a->ref_attr_name) {
		if (a->kind != TPF_ATTR_TENSOR || !a->t || a->t->rank < 0 || a->t->rank > TPF_MAX_RANK)
			return;
		out->dtype = a->t->dtype;
		out->rank = a->t->rank;
		for (i = 0; i < out->rank; i++)
			out->dims[i] = dim_of(a->t->dims[i]);
	} else if (((a = first_attr(n, scalars)) && !a->ref_attr_name) ||
		   ((a = first_attr(n, lists)) && !a->ref_attr_name)) {
		/* a scalar, or a list of its elements */
		int list = a->kind == TPF_ATTR_FLOATS || a->kind == TPF_ATTR_INTS ||
			   a->kind == TPF_ATTR_STRINGS;
		int64_t len = list ? (int64_t)a->n : 1;
		const int64_t *ints = a->kind == TPF_ATTR_INT ? &a->i : a->ints;

		out->dtype = a->kind == TPF_ATTR_FLOAT || a->kind == TPF_ATTR_FLOATS ? TPF_DTYPE_FLOAT
			     : a->kind == TPF_ATTR_INT || a->kind == TPF_ATTR_INTS   ? TPF_DTYPE_INT64
										     : TPF_DTYPE_STRING;
		out->rank = list;
		if (list)
			out->dims[0] = dim_of(len);
		if (out->dtype == TPF_DTYPE_INT64 && len <= TPF_MAX_VALUES && (ints || !len)) {
			out->n_values = (int)len;
			for (i = 0; i < len; i++) {
				out->values[i] = dim_of(0);
				out->values[i].value = ints[i];
			}
		}
	}
	/* a tensor value's own elements */
	if (out->n_values < 0 && n->n_outputs && n->outputs[0]) {
		struct tpf_op_type t;

		op_type_from_value(n->outputs[0], &t);
		if (t.n_values >= 0)
			op_type_copy_values(out, &t);
	}
}

const struct tpf_op_def tpf_op_def_CONSTANT = {
	.info = {"", "Constant", 0, 0, 1, 1},
	.since = 1,
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T")},
	.attrs = constant_attrs,
	.shape = constant_shape,
};
