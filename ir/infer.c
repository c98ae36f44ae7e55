/* SPDX-License-Identifier: MIT */
/*
 * Shape and dtype inference: one forward pass over the node list, computing
 * each output's type from the input types, attributes and constant inputs.
 *
 * An output keeps what it already knows: a declared dtype or static dim is
 * never replaced, a symbolic dim is never replaced, an unknown dim or dtype
 * is filled in.  When the inferred type contradicts the declared one, or the
 * inputs contradict each other (MatMul inner dims, broadcasting, a Reshape
 * that changes the element count), the node is named in an error and the
 * pass goes on.  Ops without a rule leave their outputs as they are.
 */
#include "tpf-ir.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define INFER_MAX_DEPTH 256
/* Split lists and constant shapes longer than this are not read. */
#define INFER_MAX_LIST 65536

struct infer_ctx {
	struct tpf_diag *d;
	const struct tpf_model *m; /* may be NULL */
	int64_t opset;             /* ONNX default domain; -1 unknown */
	int64_t world;             /* tp_world_size; -1 unknown */
	size_t errors;
	int nomem;
};

/* A type under construction: dims live here, not in an arena. */
struct itype {
	enum tpf_dtype dtype; /* UNDEFINED: unknown */
	int rank;             /* -1: unknown */
	struct tpf_dim dims[TPF_MAX_RANK];
};

/* ------------------------------------------------------------------ messages */

static void node_error(struct infer_ctx *c, const struct tpf_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void node_error(struct infer_ctx *c, const struct tpf_node *n, const char *fmt, ...)
{
	char desc[256], msg[1024];
	va_list ap;

	tpf_node_describe(n, desc, sizeof(desc));
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(c->d, TPF_SEV_ERROR, "%s: %s", desc, msg);
	c->errors++;
}

static const char *vname(const struct tpf_value *v)
{
	return v && v->name ? v->name : "?";
}

/* "bf16[B,4096]" into buf. */
static const char *itype_str(const struct itype *t, char *buf, size_t size)
{
	size_t len;
	int i;

	snprintf(buf, size, "%s", t->dtype ? tpf_dtype_name(t->dtype) : "?");
	len = strlen(buf);
	if (t->rank < 0) {
		snprintf(buf + len, size - len, "[?]");
		return buf;
	}
	for (i = 0; i < t->rank && len + 2 < size; i++) {
		const struct tpf_dim *d = &t->dims[i];
		int w;

		if (d->param)
			w = snprintf(buf + len, size - len, "%s%s", i ? "," : "[", d->param);
		else if (d->value >= 0)
			w = snprintf(buf + len, size - len, "%s%" PRId64, i ? "," : "[", d->value);
		else
			w = snprintf(buf + len, size - len, "%s?", i ? "," : "[");
		if (w < 0 || (size_t)w >= size - len)
			return buf;
		len += (size_t)w;
	}
	snprintf(buf + len, size - len, "%s]", t->rank ? "" : "[");
	return buf;
}

/* ------------------------------------------------------------------ dims */

static int dim_static(const struct tpf_dim *d)
{
	return !d->param && d->value >= 0;
}

static struct tpf_dim dim_of(int64_t v)
{
	struct tpf_dim d = {v < 0 ? -1 : v, NULL, NULL};

	return d;
}

static struct tpf_dim dim_unknown(void)
{
	struct tpf_dim d = {-1, NULL, NULL};

	return d;
}

static int dims_same(const struct tpf_dim *a, const struct tpf_dim *b)
{
	if (dim_static(a) && dim_static(b))
		return a->value == b->value;
	if (a->param && b->param)
		return strcmp(a->param, b->param) == 0;
	return 0;
}

static void it_unknown(struct itype *t)
{
	t->dtype = TPF_DTYPE_UNDEFINED;
	t->rank = -1;
}

static void it_set_rank_unknown_dims(struct itype *t, int rank)
{
	int i;

	t->rank = rank;
	for (i = 0; i < rank; i++)
		t->dims[i] = dim_unknown();
}

static int norm_axis(int64_t axis, int rank, int64_t *out)
{
	if (axis < -(int64_t)rank || axis >= (int64_t)rank)
		return -1;
	*out = axis < 0 ? axis + rank : axis;
	return 0;
}

/* ------------------------------------------------------------------ values */

static const struct tpf_value *resolve_outer(const struct tpf_value *v)
{
	int depth = 0;

	while (v && v->kind == TPF_VALUE_OUTER && v->outer && depth++ < INFER_MAX_DEPTH)
		v = v->outer;
	return v;
}

/* The known type of v into t (unknown when v is NULL or untyped). */
static void it_from_value(const struct tpf_value *v, struct itype *t)
{
	const struct tpf_type *ty;
	int i;

	it_unknown(t);
	v = resolve_outer(v);
	if (!v)
		return;
	ty = &v->type;
	if (ty->kind != TPF_TYPE_TENSOR) {
		/* initializers carry their type in the tensor */
		if (v->kind == TPF_VALUE_INITIALIZER && v->init && v->init->rank >= 0 &&
		    v->init->rank <= TPF_MAX_RANK) {
			t->dtype = v->init->dtype;
			t->rank = v->init->rank;
			for (i = 0; i < t->rank; i++)
				t->dims[i] = dim_of(v->init->dims[i]);
		}
		return;
	}
	if (tpf_dtype_is_valid((int)ty->dtype))
		t->dtype = ty->dtype;
	if (ty->shape.rank < 0 || ty->shape.rank > TPF_MAX_RANK ||
	    (ty->shape.rank > 0 && !ty->shape.dims))
		return;
	t->rank = ty->shape.rank;
	for (i = 0; i < t->rank; i++) {
		t->dims[i] = ty->shape.dims[i];
		t->dims[i].denotation = NULL;
		if (t->dims[i].param && !*t->dims[i].param)
			t->dims[i].param = NULL; /* an empty name is no name */
		if (!t->dims[i].param && t->dims[i].value < 0)
			t->dims[i].value = -1;
	}
}

static const struct tpf_value *in_value(const struct tpf_node *n, size_t i)
{
	return i < n->n_inputs ? n->inputs[i] : NULL;
}

static void in_type(const struct tpf_node *n, size_t i, struct itype *t)
{
	it_from_value(in_value(n, i), t);
}

static int64_t le_int(const uint8_t *p, unsigned bytes)
{
	uint64_t x = 0;
	unsigned k;

	for (k = 0; k < bytes; k++)
		x |= (uint64_t)p[k] << (8 * k);
	if (bytes == 4)
		return (int64_t)(int32_t)(uint32_t)x;
	return (int64_t)x;
}

/* Reads a constant int32/int64 tensor (any rank) of at most `max` elements.
 * Returns the element count, or -1 when v is not such a constant. */
static int64_t const_ints(const struct tpf_value *v, int64_t *out, size_t max)
{
	const struct tpf_tensor *t;
	int64_t numel;
	unsigned bytes;
	int64_t i;

	if (!v)
		return -1;
	t = tpf_value_constant(v);
	if (!t || !t->data)
		return -1;
	if (t->dtype == TPF_DTYPE_INT64)
		bytes = 8;
	else if (t->dtype == TPF_DTYPE_INT32)
		bytes = 4;
	else
		return -1;
	numel = tpf_tensor_numel(t);
	if (numel < 0 || (uint64_t)numel > max || (uint64_t)numel * bytes > t->nbytes)
		return -1;
	for (i = 0; i < numel; i++)
		out[i] = le_int((const uint8_t *)t->data + (size_t)i * bytes, bytes);
	return numel;
}

/* Integer list from an INTS attribute; -1 when absent or too long. */
static int64_t attr_ints(const struct tpf_node *n, const char *name, int64_t *out, size_t max)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);

	if (!a || a->kind != TPF_ATTR_INTS || a->n > max || (a->n && !a->ints))
		return -1;
	if (a->n)
		memcpy(out, a->ints, a->n * sizeof(*out));
	return (int64_t)a->n;
}

static int64_t attr_int(const struct tpf_node *n, const char *name, int64_t dflt)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);

	return a && a->kind == TPF_ATTR_INT ? a->i : dflt;
}

static int has_attr(const struct tpf_node *n, const char *name)
{
	return tpf_node_attr(n, name) != NULL;
}

/* ------------------------------------------------------------------ outputs */

enum set_mode {
	SET_STRICT, /* contradictions are errors */
	SET_WEAK,   /* only fill an output that has no type at all */
};

/* Merges the inferred type t into output j.  alt_dtype: a second dtype the
 * declared output may have without an error (UNDEFINED: none). */
static void set_output_ex(struct infer_ctx *c, const struct tpf_node *n, size_t j,
                          const struct itype *t, enum set_mode mode, enum tpf_dtype alt_dtype)
{
	struct tpf_value *v = j < n->n_outputs ? n->outputs[j] : NULL;
	struct itype res, cur;
	struct tpf_type ty;
	int changed = 0, conflict = 0, i;

	if (!v || v->type.kind == TPF_TYPE_OPAQUE)
		return;
	if (t->dtype == TPF_DTYPE_UNDEFINED && t->rank < 0)
		return;
	it_from_value(v, &cur);
	if (v->type.kind != TPF_TYPE_TENSOR)
		it_unknown(&cur);
	if (mode == SET_WEAK && (cur.dtype || cur.rank >= 0))
		return;
	res = cur;
	if (!cur.dtype) {
		res.dtype = t->dtype;
		changed |= t->dtype != TPF_DTYPE_UNDEFINED;
	} else if (t->dtype && t->dtype != cur.dtype && cur.dtype != alt_dtype) {
		conflict = 1;
	}
	if (cur.rank < 0) {
		if (t->rank >= 0) {
			res.rank = t->rank;
			memcpy(res.dims, t->dims, (size_t)t->rank * sizeof(*t->dims));
			changed = 1;
		}
	} else if (t->rank >= 0) {
		if (t->rank != cur.rank) {
			conflict = 1;
		} else {
			for (i = 0; i < cur.rank; i++) {
				const struct tpf_dim *a = &cur.dims[i], *b = &t->dims[i];

				if (dim_static(a)) {
					if (dim_static(b) && a->value != b->value)
						conflict = 1;
				} else if (!a->param && (b->param || dim_static(b))) {
					res.dims[i] = *b;
					changed = 1;
				}
			}
		}
	}
	if (conflict) {
		char have[256], want[256];

		node_error(c, n, "output %zu '%s' has type %s but its inputs give %s", j, vname(v),
		           itype_str(&cur, have, sizeof(have)), itype_str(t, want, sizeof(want)));
		return;
	}
	if (!changed)
		return;
	memset(&ty, 0, sizeof(ty));
	ty.kind = TPF_TYPE_TENSOR;
	ty.dtype = res.dtype;
	ty.shape.rank = res.rank;
	ty.shape.dims = res.rank > 0 ? res.dims : NULL;
	if (v->type.kind == TPF_TYPE_TENSOR) {
		ty.denotation = v->type.denotation;
		/* keep per-dim denotations of the declared shape */
		if (v->type.shape.rank == res.rank && v->type.shape.dims)
			for (i = 0; i < res.rank; i++)
				res.dims[i].denotation = v->type.shape.dims[i].denotation;
	}
	if (tpf_value_copy_type(v, &ty) != TPF_OK)
		c->nomem = 1;
}

static void set_output(struct infer_ctx *c, const struct tpf_node *n, size_t j,
                       const struct itype *t)
{
	set_output_ex(c, n, j, t, SET_STRICT, TPF_DTYPE_UNDEFINED);
}

/* ------------------------------------------------------------------ broadcasting */

/* Numpy broadcasting of k types into out.  Returns -1 (error reported) when
 * two static dims other than 1 differ. */
static int broadcast(struct infer_ctx *c, const struct tpf_node *n, const struct itype *const *ts,
                     size_t k, struct itype *out)
{
	int rank = 0, i;
	size_t j;

	out->rank = -1;
	for (j = 0; j < k; j++) {
		if (ts[j]->rank < 0)
			return 0;
		if (ts[j]->rank > rank)
			rank = ts[j]->rank;
	}
	out->rank = rank;
	for (i = 0; i < rank; i++) {
		const struct tpf_dim *stat = NULL, *sym = NULL;
		int any_unknown = 0, sym_differ = 0, all_one = 1;
		size_t stat_from = 0;

		for (j = 0; j < k; j++) {
			int p = i - (rank - ts[j]->rank);
			const struct tpf_dim *d;

			if (p < 0)
				continue;
			d = &ts[j]->dims[p];
			if (dim_static(d)) {
				if (d->value == 1)
					continue;
				all_one = 0;
				if (stat && stat->value != d->value) {
					node_error(
					    c, n,
					    "inputs %zu and %zu cannot broadcast: dimension %d "
					    "from the right is %" PRId64 " and %" PRId64,
					    stat_from, j, rank - i, stat->value, d->value);
					return -1;
				}
				stat = d;
				stat_from = j;
			} else if (d->param) {
				all_one = 0;
				if (sym && strcmp(sym->param, d->param) != 0)
					sym_differ = 1;
				sym = d;
			} else {
				all_one = 0;
				any_unknown = 1;
			}
		}
		if (stat)
			out->dims[i] = dim_of(stat->value);
		else if (all_one)
			out->dims[i] = dim_of(1);
		else if (sym && !sym_differ && !any_unknown)
			out->dims[i] = *sym;
		else
			out->dims[i] = dim_unknown();
		out->dims[i].denotation = NULL;
	}
	return 0;
}

static void infer_elementwise(struct infer_ctx *c, const struct tpf_node *n, size_t first,
                              size_t count, enum tpf_dtype dtype)
{
	struct itype in[3], out;
	const struct itype *ptrs[3];
	struct itype *many = NULL;
	const struct itype **many_ptrs = NULL;
	size_t j;

	if (first >= n->n_inputs)
		return;
	if (count > n->n_inputs - first)
		count = n->n_inputs - first;
	if (count <= 3) {
		for (j = 0; j < count; j++) {
			in_type(n, first + j, &in[j]);
			ptrs[j] = &in[j];
		}
		if (broadcast(c, n, ptrs, count, &out))
			return;
	} else {
		many = tpf_malloc(count * sizeof(*many));
		many_ptrs = tpf_malloc(count * sizeof(*many_ptrs));
		if (!many || !many_ptrs) {
			c->nomem = 1;
			goto out_free;
		}
		for (j = 0; j < count; j++) {
			in_type(n, first + j, &many[j]);
			many_ptrs[j] = &many[j];
		}
		if (broadcast(c, n, many_ptrs, count, &out))
			goto out_free;
	}
	out.dtype = dtype;
	set_output(c, n, 0, &out);
out_free:
	tpf_free(many);
	tpf_free(many_ptrs);
}

/* ------------------------------------------------------------------ op rules */

static void infer_same(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype t;

	in_type(n, 0, &t);
	set_output(c, n, 0, &t);
}

static void infer_matmul(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype a, b, out, ba, bb, bo;
	const struct itype *ptrs[2] = {&ba, &bb};
	int ra, rb, i;
	const struct tpf_dim *ka, *kb;

	in_type(n, 0, &a);
	in_type(n, 1, &b);
	it_unknown(&out);
	out.dtype = a.dtype ? a.dtype : b.dtype;
	ra = a.rank;
	rb = b.rank;
	if (ra == 0 || rb == 0) {
		node_error(c, n, "MatMul needs inputs of rank >= 1; got rank %d and %d", ra, rb);
		return;
	}
	if (ra < 0 || rb < 0) {
		set_output(c, n, 0, &out);
		return;
	}
	ka = &a.dims[ra - 1];
	kb = &b.dims[rb == 1 ? 0 : rb - 2];
	if (dim_static(ka) && dim_static(kb) && ka->value != kb->value) {
		node_error(c, n,
		           "inner dimensions differ: '%s' has %" PRId64
		           " columns, '%s' has %" PRId64 " rows",
		           vname(in_value(n, 0)), ka->value, vname(in_value(n, 1)), kb->value);
		return;
	}
	/* batch dims: all but the last two (none for 1-D operands) */
	ba.rank = ra > 2 ? ra - 2 : 0;
	bb.rank = rb > 2 ? rb - 2 : 0;
	memcpy(ba.dims, a.dims, (size_t)ba.rank * sizeof(*a.dims));
	memcpy(bb.dims, b.dims, (size_t)bb.rank * sizeof(*b.dims));
	if (broadcast(c, n, ptrs, 2, &bo))
		return;
	out.rank = bo.rank;
	for (i = 0; i < bo.rank; i++)
		out.dims[i] = bo.dims[i];
	if (ra >= 2)
		out.dims[out.rank++] = a.dims[ra - 2];
	if (rb >= 2)
		out.dims[out.rank++] = b.dims[rb - 1];
	set_output(c, n, 0, &out);
}

static void infer_gemm(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype a, b, out;
	const struct tpf_dim *m, *ka, *kb, *nn;
	int ta = attr_int(n, "transA", 0) != 0, tb = attr_int(n, "transB", 0) != 0;

	in_type(n, 0, &a);
	in_type(n, 1, &b);
	it_unknown(&out);
	out.dtype = a.dtype ? a.dtype : b.dtype;
	if ((a.rank >= 0 && a.rank != 2) || (b.rank >= 0 && b.rank != 2)) {
		node_error(c, n, "Gemm needs 2-D inputs; got rank %d and %d", a.rank, b.rank);
		return;
	}
	if (a.rank == 2 && b.rank == 2) {
		m = &a.dims[ta ? 1 : 0];
		ka = &a.dims[ta ? 0 : 1];
		kb = &b.dims[tb ? 1 : 0];
		nn = &b.dims[tb ? 0 : 1];
		if (dim_static(ka) && dim_static(kb) && ka->value != kb->value) {
			node_error(c, n, "inner dimensions differ: %" PRId64 " and %" PRId64,
			           ka->value, kb->value);
			return;
		}
		out.rank = 2;
		out.dims[0] = *m;
		out.dims[1] = *nn;
	}
	set_output(c, n, 0, &out);
}

static void infer_cast(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype t;
	int64_t to = attr_int(n, "to", 0);

	in_type(n, 0, &t);
	t.dtype = to > 0 && to < TPF_DTYPE_COUNT && tpf_dtype_is_valid((int)to)
	              ? (enum tpf_dtype)to
	              : TPF_DTYPE_UNDEFINED;
	set_output(c, n, 0, &t);
}

/* Symbols of the dims in [from, to) with the product of the static ones.
 * Returns -1 when a dim is unknown or the product overflows. */
static int dim_factors(const struct tpf_dim *dims, int from, int to, int skip, int64_t *prod,
                       const char **syms, int *n_syms)
{
	int i;

	*prod = 1;
	*n_syms = 0;
	for (i = from; i < to; i++) {
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

static void infer_reshape(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype data, shp, out;
	int64_t vals[TPF_MAX_RANK];
	int64_t cnt;
	int allowzero = attr_int(n, "allowzero", 0) != 0;
	int i, neg = -1;

	in_type(n, 0, &data);
	it_unknown(&out);
	out.dtype = data.dtype;
	cnt = const_ints(in_value(n, 1), vals, TPF_MAX_RANK);
	if (cnt < 0) {
		in_type(n, 1, &shp);
		if (shp.rank == 1 && dim_static(&shp.dims[0]) && shp.dims[0].value <= TPF_MAX_RANK)
			it_set_rank_unknown_dims(&out, (int)shp.dims[0].value);
		set_output(c, n, 0, &out);
		return;
	}
	out.rank = (int)cnt;
	for (i = 0; i < out.rank; i++) {
		int64_t v = vals[i];

		if (v == 0 && !allowzero) {
			if (data.rank >= 0 && i >= data.rank) {
				node_error(
				    c, n,
				    "shape[%d] = 0 copies input dimension %d, but the input has "
				    "rank %d",
				    i, i, data.rank);
				return;
			}
			out.dims[i] = data.rank >= 0 ? data.dims[i] : dim_unknown();
		} else if (v == -1) {
			if (neg >= 0) {
				node_error(c, n, "shape has more than one -1 (entries %d and %d)",
				           neg, i);
				return;
			}
			neg = i;
			out.dims[i] = dim_unknown();
		} else if (v < -1) {
			node_error(c, n, "shape[%d] = %" PRId64 " is invalid", i, v);
			return;
		} else {
			out.dims[i] = dim_of(v);
		}
	}
	if (data.rank >= 0) {
		const char *in_syms[TPF_MAX_RANK], *out_syms[TPF_MAX_RANK];
		int n_in, n_out, j, k, matched = 1;
		int64_t p_in, p_out;

		if (!dim_factors(data.dims, 0, data.rank, -1, &p_in, in_syms, &n_in) &&
		    !dim_factors(out.dims, 0, out.rank, neg, &p_out, out_syms, &n_out)) {
			/* cancel symbols that appear on both sides */
			for (j = 0; j < n_out; j++) {
				for (k = 0; k < n_in; k++)
					if (in_syms[k] && strcmp(in_syms[k], out_syms[j]) == 0)
						break;
				if (k == n_in) {
					matched = 0;
					break;
				}
				in_syms[k] = NULL;
			}
			if (matched) {
				const char *left = NULL;
				int n_left = 0;

				for (k = 0; k < n_in; k++)
					if (in_syms[k]) {
						left = in_syms[k];
						n_left++;
					}
				if (neg >= 0) {
					if (n_left == 0 && p_out > 0) {
						if (p_in % p_out) {
							node_error(c, n,
							           "cannot infer the -1 entry: "
							           "the input dims not matched "
							           "by the shape hold %" PRId64
							           " elements, not a multiple "
							           "of %" PRId64,
							           p_in, p_out);
							return;
						}
						out.dims[neg] = dim_of(p_in / p_out);
					} else if (n_left == 1 && p_out > 0 && p_in == p_out) {
						out.dims[neg].param = left;
					}
				} else if (n_left == 0 && n_out == 0 && p_in != p_out) {
					node_error(c, n,
					           "element count mismatch: input has %" PRId64
					           " elements, shape has %" PRId64,
					           p_in, p_out);
					return;
				}
			}
		}
	}
	set_output(c, n, 0, &out);
}

static void infer_transpose(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t perm[TPF_MAX_RANK];
	int64_t np = attr_ints(n, "perm", perm, TPF_MAX_RANK);
	uint8_t seen[TPF_MAX_RANK];
	int i;

	in_type(n, 0, &in);
	it_unknown(&out);
	out.dtype = in.dtype;
	if (np < 0) {
		if (in.rank >= 0) {
			out.rank = in.rank;
			for (i = 0; i < in.rank; i++)
				out.dims[i] = in.dims[in.rank - 1 - i];
		}
		set_output(c, n, 0, &out);
		return;
	}
	if (in.rank >= 0 && np != in.rank) {
		node_error(c, n,
		           "attribute 'perm' has %" PRId64 " entries but the input has rank %d", np,
		           in.rank);
		return;
	}
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < np; i++) {
		if (perm[i] < 0 || perm[i] >= np || seen[perm[i]]) {
			node_error(c, n, "attribute 'perm' is not a permutation");
			return;
		}
		seen[perm[i]] = 1;
	}
	out.rank = (int)np;
	for (i = 0; i < out.rank; i++)
		out.dims[i] = in.rank >= 0 ? in.dims[perm[i]] : dim_unknown();
	set_output(c, n, 0, &out);
}

/* Length of data[start:end:step] for a static extent d (ONNX clamping). */
static int64_t slice_len(int64_t d, int64_t start, int64_t end, int64_t step)
{
	if (start < 0)
		start += d;
	if (end < 0)
		end += d;
	if (step > 0) {
		start = start < 0 ? 0 : start > d ? d : start;
		end = end < 0 ? 0 : end > d ? d : end;
		return end > start ? (end - start - 1) / step + 1 : 0;
	}
	if (d == 0)
		return 0;
	start = start < 0 ? 0 : start > d - 1 ? d - 1 : start;
	end = end < -1 ? -1 : end > d - 1 ? d - 1 : end;
	if (start <= end)
		return 0;
	if (step == INT64_MIN)
		return 1;
	return (start - end - 1) / (-step) + 1;
}

static void infer_slice(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t starts[TPF_MAX_RANK], ends[TPF_MAX_RANK], axes[TPF_MAX_RANK], steps[TPF_MAX_RANK];
	int64_t ns, ne, na, nst, i;
	uint8_t used[TPF_MAX_RANK];
	int from_attrs = (c->opset > 0 && c->opset < 10) || has_attr(n, "starts");

	in_type(n, 0, &in);
	it_unknown(&out);
	out.dtype = in.dtype;
	if (in.rank < 0) {
		set_output(c, n, 0, &out);
		return;
	}
	if (from_attrs) {
		ns = attr_ints(n, "starts", starts, TPF_MAX_RANK);
		ne = attr_ints(n, "ends", ends, TPF_MAX_RANK);
		na = has_attr(n, "axes") ? attr_ints(n, "axes", axes, TPF_MAX_RANK) : -2;
		nst = -2;
	} else {
		ns = const_ints(in_value(n, 1), starts, TPF_MAX_RANK);
		ne = const_ints(in_value(n, 2), ends, TPF_MAX_RANK);
		na = in_value(n, 3) ? const_ints(in_value(n, 3), axes, TPF_MAX_RANK) : -2;
		nst = in_value(n, 4) ? const_ints(in_value(n, 4), steps, TPF_MAX_RANK) : -2;
	}
	out.rank = in.rank;
	for (i = 0; i < in.rank; i++)
		out.dims[i] = in.dims[i];
	if (na == -2) {
		/* default axes: 0..len-1 (length from starts when known) */
		int64_t len = ns >= 0 ? ns : in.rank;

		na = len > in.rank ? -1 : len;
		for (i = 0; i < na; i++)
			axes[i] = i;
	}
	if (na < 0) {
		it_set_rank_unknown_dims(&out, in.rank);
		set_output(c, n, 0, &out);
		return;
	}
	memset(used, 0, sizeof(used));
	for (i = 0; i < na; i++) {
		int64_t ax;

		if (norm_axis(axes[i], in.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for rank %d", axes[i],
			           in.rank);
			return;
		}
		if (used[ax]) {
			node_error(c, n, "axis %" PRId64 " is sliced twice", ax);
			return;
		}
		used[ax] = 1;
		axes[i] = ax;
	}
	if (ns < 0 || ne < 0 || nst == -1) {
		for (i = 0; i < na; i++)
			out.dims[axes[i]] = dim_unknown();
		set_output(c, n, 0, &out);
		return;
	}
	if (ns != na || ne != na || (nst >= 0 && nst != na)) {
		node_error(c, n,
		           "starts, ends, axes and steps have different lengths (%" PRId64
		           ", %" PRId64 ", %" PRId64 ", %" PRId64 ")",
		           ns, ne, na, nst >= 0 ? nst : na);
		return;
	}
	for (i = 0; i < na; i++) {
		int64_t step = nst >= 0 ? steps[i] : 1;
		struct tpf_dim *d = &out.dims[axes[i]];

		if (step == 0) {
			node_error(c, n, "step %" PRId64 " is 0", i);
			return;
		}
		if (dim_static(d)) {
			*d = dim_of(slice_len(d->value, starts[i], ends[i], step));
		} else if ((step == 1 && starts[i] == 0 && ends[i] >= INT32_MAX) ||
		           (step == -1 && (starts[i] == -1 || starts[i] >= INT32_MAX) &&
		            ends[i] <= -(int64_t)INT32_MAX)) {
			/* the whole axis: the dim is unchanged */
		} else {
			*d = dim_unknown();
		}
	}
	set_output(c, n, 0, &out);
}

static void infer_split(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t axis = attr_int(n, "axis", 0), ax, count = -1, i, sum = 0;
	int64_t *split = NULL;
	size_t nout = n->n_outputs;
	const struct tpf_attr *num = tpf_node_attr(n, "num_outputs");
	int from_input = in_value(n, 1) != NULL;

	in_type(n, 0, &in);
	if (!nout)
		return;
	if (in.rank < 0) {
		it_unknown(&out);
		out.dtype = in.dtype;
		for (i = 0; i < (int64_t)nout; i++)
			set_output(c, n, (size_t)i, &out);
		return;
	}
	if (norm_axis(axis, in.rank, &ax)) {
		node_error(c, n, "axis %" PRId64 " is out of range for rank %d", axis, in.rank);
		return;
	}
	if (nout > INFER_MAX_LIST)
		return;
	split = tpf_malloc(nout * sizeof(*split));
	if (!split) {
		c->nomem = 1;
		return;
	}
	if (from_input) {
		count = const_ints(in_value(n, 1), split, nout);
		if (count < 0) {
			struct itype st;

			in_type(n, 1, &st);
			if (st.rank == 1 && dim_static(&st.dims[0]) &&
			    st.dims[0].value != (int64_t)nout) {
				node_error(c, n,
				           "input 'split' has %" PRId64 " entries but the node has "
				           "%zu outputs",
				           st.dims[0].value, nout);
				goto out_free;
			}
		}
	} else if (has_attr(n, "split")) {
		const struct tpf_attr *a = tpf_node_attr(n, "split");

		if (a->kind == TPF_ATTR_INTS && a->n != nout) {
			node_error(c, n,
			           "attribute 'split' has %zu entries but the node has %zu outputs",
			           a->n, nout);
			goto out_free;
		}
		count = attr_ints(n, "split", split, nout);
	}
	out = in;
	if (count >= 0) {
		if (count != (int64_t)nout) {
			node_error(c, n,
			           "'split' has %" PRId64 " entries but the node has %zu outputs",
			           count, nout);
			goto out_free;
		}
		for (i = 0; i < count; i++) {
			if (split[i] < 0 || __builtin_add_overflow(sum, split[i], &sum)) {
				node_error(c, n, "split[%" PRId64 "] = %" PRId64 " is invalid", i,
				           split[i]);
				goto out_free;
			}
		}
		if (dim_static(&in.dims[ax]) && sum != in.dims[ax].value) {
			node_error(c, n,
			           "split sizes add up to %" PRId64 " but dimension %" PRId64
			           " is %" PRId64,
			           sum, ax, in.dims[ax].value);
			goto out_free;
		}
		for (i = 0; i < count; i++) {
			out.dims[ax] = dim_of(split[i]);
			set_output(c, n, (size_t)i, &out);
		}
		goto out_free;
	}
	if (from_input) {
		out.dims[ax] = dim_unknown();
		for (i = 0; i < (int64_t)nout; i++)
			set_output(c, n, (size_t)i, &out);
		goto out_free;
	}
	if (num && num->kind == TPF_ATTR_INT && num->i != (int64_t)nout) {
		node_error(c, n,
		           "attribute 'num_outputs' = %" PRId64 " but the node has %zu outputs",
		           num->i, nout);
		goto out_free;
	}
	if (dim_static(&in.dims[ax])) {
		int64_t d = in.dims[ax].value, k = (int64_t)nout;

		if (d % k == 0) {
			out.dims[ax] = dim_of(d / k);
			for (i = 0; i < k; i++)
				set_output(c, n, (size_t)i, &out);
		} else if (num) {
			/* opset 18: chunks of ceil(d/k), the last one smaller; when
			 * that leaves nothing consistent the sizes stay unknown (the
			 * node may sit in a branch that never runs) */
			int64_t chunk = d / k + 1, last = -1;

			if (!__builtin_mul_overflow(chunk, k - 1, &last))
				last = d - last;

			for (i = 0; i < k; i++) {
				out.dims[ax] =
				    last < 0 ? dim_unknown() : dim_of(i < k - 1 ? chunk : last);
				set_output(c, n, (size_t)i, &out);
			}
		} else {
			node_error(c, n,
			           "dimension %" PRId64 " = %" PRId64
			           " does not split evenly into %" PRId64 " outputs",
			           ax, d, k);
		}
	} else {
		out.dims[ax] = dim_unknown();
		for (i = 0; i < (int64_t)nout; i++)
			set_output(c, n, (size_t)i, &out);
	}
out_free:
	tpf_free(split);
}

static void infer_concat(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype t, out;
	const struct tpf_attr *a = tpf_node_attr(n, "axis");
	int64_t ax = 0, sum = 0;
	int rank = -1, i, sum_known = 1, any_unknown_rank = 0;
	size_t j;

	it_unknown(&out);
	for (j = 0; j < n->n_inputs; j++) {
		in_type(n, j, &t);
		if (!out.dtype)
			out.dtype = t.dtype;
		if (t.rank < 0) {
			any_unknown_rank = 1;
			continue;
		}
		if (rank < 0) {
			rank = t.rank;
		} else if (t.rank != rank) {
			node_error(c, n,
			           "input %zu '%s' has rank %d but earlier inputs have rank %d", j,
			           vname(in_value(n, j)), t.rank, rank);
			return;
		}
	}
	if (rank < 0 || !a || a->kind != TPF_ATTR_INT) {
		if (rank >= 0)
			it_set_rank_unknown_dims(&out, rank);
		set_output(c, n, 0, &out);
		return;
	}
	if (rank == 0 || norm_axis(a->i, rank, &ax)) {
		node_error(c, n, "axis %" PRId64 " is out of range for rank %d", a->i, rank);
		return;
	}
	out.rank = rank;
	for (i = 0; i < rank; i++)
		out.dims[i] = dim_unknown();
	for (j = 0; j < n->n_inputs; j++) {
		in_type(n, j, &t);
		if (t.rank < 0)
			continue;
		for (i = 0; i < rank; i++) {
			struct tpf_dim *o = &out.dims[i];
			const struct tpf_dim *d = &t.dims[i];

			if (i == ax) {
				if (dim_static(d) && sum_known) {
					if (__builtin_add_overflow(sum, d->value, &sum))
						sum_known = 0;
				} else {
					sum_known = 0;
				}
				continue;
			}
			if (dim_static(d)) {
				if (dim_static(o) && o->value != d->value) {
					node_error(c, n,
					           "input %zu '%s' has %" PRId64
					           " in dimension %d where "
					           "earlier inputs have %" PRId64,
					           j, vname(in_value(n, j)), d->value, i, o->value);
					return;
				}
				*o = *d;
			} else if (d->param && !dim_static(o) && !o->param) {
				*o = *d;
			}
		}
	}
	if (sum_known && !any_unknown_rank)
		out.dims[ax] = dim_of(sum);
	set_output(c, n, 0, &out);
}

static void infer_gather(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype data, idx, out;
	int64_t ax;
	int i;

	in_type(n, 0, &data);
	in_type(n, 1, &idx);
	it_unknown(&out);
	out.dtype = data.dtype;
	if (data.rank >= 0 && idx.rank >= 0) {
		if (norm_axis(attr_int(n, "axis", 0), data.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
			           attr_int(n, "axis", 0), data.rank);
			return;
		}
		if (data.rank + idx.rank - 1 > TPF_MAX_RANK) {
			set_output(c, n, 0, &out);
			return;
		}
		out.rank = 0;
		for (i = 0; i < ax; i++)
			out.dims[out.rank++] = data.dims[i];
		for (i = 0; i < idx.rank; i++)
			out.dims[out.rank++] = idx.dims[i];
		for (i = (int)ax + 1; i < data.rank; i++)
			out.dims[out.rank++] = data.dims[i];
	}
	set_output(c, n, 0, &out);
}

static void infer_gather_elements(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype data, idx;

	in_type(n, 0, &data);
	in_type(n, 1, &idx);
	idx.dtype = data.dtype;
	set_output(c, n, 0, &idx);
}

/* Axes of Squeeze/Unsqueeze/Reduce: attribute, else constant input 1.
 * Returns the count, -1 when absent, -2 when given as a non-constant input. */
static int64_t read_axes(const struct tpf_node *n, int64_t *axes)
{
	if (has_attr(n, "axes"))
		return attr_ints(n, "axes", axes, TPF_MAX_RANK);
	if (in_value(n, 1)) {
		int64_t k = const_ints(in_value(n, 1), axes, TPF_MAX_RANK);

		return k < 0 ? -2 : k;
	}
	return -1;
}

static void infer_squeeze(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t axes[TPF_MAX_RANK], k, i, ax;
	uint8_t drop[TPF_MAX_RANK];

	in_type(n, 0, &in);
	it_unknown(&out);
	out.dtype = in.dtype;
	k = read_axes(n, axes);
	if (in.rank < 0 || k == -2) {
		set_output(c, n, 0, &out);
		return;
	}
	memset(drop, 0, sizeof(drop));
	if (k < 0 || k == 0) {
		for (i = 0; i < in.rank; i++) {
			if (!dim_static(&in.dims[i])) {
				set_output(c, n, 0, &out); /* which dims are 1 is unknown */
				return;
			}
			drop[i] = in.dims[i].value == 1;
		}
	} else {
		for (i = 0; i < k; i++) {
			if (norm_axis(axes[i], in.rank, &ax)) {
				node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
				           axes[i], in.rank);
				return;
			}
			if (drop[ax]) {
				node_error(c, n, "axis %" PRId64 " is given twice", ax);
				return;
			}
			if (dim_static(&in.dims[ax]) && in.dims[ax].value != 1) {
				node_error(c, n,
				           "cannot squeeze axis %" PRId64 " of extent %" PRId64, ax,
				           in.dims[ax].value);
				return;
			}
			drop[ax] = 1;
		}
	}
	out.rank = 0;
	for (i = 0; i < in.rank; i++)
		if (!drop[i])
			out.dims[out.rank++] = in.dims[i];
	set_output(c, n, 0, &out);
}

static void infer_unsqueeze(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t axes[TPF_MAX_RANK], k, i, ax;
	uint8_t ins[TPF_MAX_RANK];
	int src = 0;

	in_type(n, 0, &in);
	it_unknown(&out);
	out.dtype = in.dtype;
	k = read_axes(n, axes);
	if (in.rank < 0 || k < 0) {
		set_output(c, n, 0, &out);
		return;
	}
	if (in.rank + k > TPF_MAX_RANK) {
		node_error(c, n, "output rank %" PRId64 " exceeds %d", in.rank + k, TPF_MAX_RANK);
		return;
	}
	out.rank = (int)(in.rank + k);
	memset(ins, 0, sizeof(ins));
	for (i = 0; i < k; i++) {
		if (norm_axis(axes[i], out.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for output rank %d",
			           axes[i], out.rank);
			return;
		}
		if (ins[ax]) {
			node_error(c, n, "axis %" PRId64 " is given twice", ax);
			return;
		}
		ins[ax] = 1;
	}
	for (i = 0; i < out.rank; i++)
		out.dims[i] = ins[i] ? dim_of(1) : in.dims[src++];
	set_output(c, n, 0, &out);
}

static void infer_reduce(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t axes[TPF_MAX_RANK], k, i, ax;
	int keep = attr_int(n, "keepdims", 1) != 0;
	uint8_t red[TPF_MAX_RANK];

	in_type(n, 0, &in);
	it_unknown(&out);
	out.dtype = in.dtype;
	if (n->op == TPF_OP_ARGMAX) {
		out.dtype = TPF_DTYPE_INT64;
		axes[0] = attr_int(n, "axis", 0);
		k = 1;
	} else {
		k = read_axes(n, axes);
	}
	if (in.rank < 0) {
		set_output(c, n, 0, &out);
		return;
	}
	if (k == -2) {
		if (keep)
			it_set_rank_unknown_dims(&out, in.rank);
		set_output(c, n, 0, &out);
		return;
	}
	memset(red, 0, sizeof(red));
	if (k <= 0) {
		if (attr_int(n, "noop_with_empty_axes", 0)) {
			out = in;
			set_output(c, n, 0, &out);
			return;
		}
		memset(red, 1, sizeof(red));
	} else {
		for (i = 0; i < k; i++) {
			if (norm_axis(axes[i], in.rank, &ax)) {
				node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
				           axes[i], in.rank);
				return;
			}
			red[ax] = 1;
		}
	}
	out.rank = 0;
	for (i = 0; i < in.rank; i++) {
		if (!red[i])
			out.dims[out.rank++] = in.dims[i];
		else if (keep)
			out.dims[out.rank++] = dim_of(1);
	}
	set_output(c, n, 0, &out);
}

static void infer_expand(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, shp, tgt, out;
	const struct itype *ptrs[2] = {&in, &tgt};
	int64_t vals[TPF_MAX_RANK], k, i;

	in_type(n, 0, &in);
	it_unknown(&out);
	k = const_ints(in_value(n, 1), vals, TPF_MAX_RANK);
	if (k < 0) {
		in_type(n, 1, &shp);
		if (in.rank >= 0 && shp.rank == 1 && dim_static(&shp.dims[0]) &&
		    shp.dims[0].value <= TPF_MAX_RANK)
			it_set_rank_unknown_dims(
			    &out, in.rank > shp.dims[0].value ? in.rank : (int)shp.dims[0].value);
		out.dtype = in.dtype;
		set_output(c, n, 0, &out);
		return;
	}
	tgt.dtype = in.dtype;
	tgt.rank = (int)k;
	for (i = 0; i < k; i++) {
		if (vals[i] < 0) {
			node_error(c, n, "shape[%" PRId64 "] = %" PRId64 " is negative", i,
			           vals[i]);
			return;
		}
		tgt.dims[i] = dim_of(vals[i]);
	}
	if (broadcast(c, n, ptrs, 2, &out))
		return;
	out.dtype = in.dtype;
	set_output(c, n, 0, &out);
}

static void infer_shape(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype in, out;
	int64_t start, end;

	in_type(n, 0, &in);
	out.dtype = TPF_DTYPE_INT64;
	out.rank = 1;
	out.dims[0] = dim_unknown();
	if (in.rank >= 0) {
		start = attr_int(n, "start", 0);
		end = attr_int(n, "end", in.rank);
		if (start < 0)
			start += in.rank;
		if (end < 0)
			end += in.rank;
		start = start < 0 ? 0 : start > in.rank ? in.rank : start;
		end = end < 0 ? 0 : end > in.rank ? in.rank : end;
		out.dims[0] = dim_of(end > start ? end - start : 0);
	}
	set_output(c, n, 0, &out);
}

static void infer_constant_of_shape(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype shp, out;
	const struct tpf_attr *a = tpf_node_attr(n, "value");
	int64_t vals[TPF_MAX_RANK], k, i;

	it_unknown(&out);
	out.dtype = a && a->kind == TPF_ATTR_TENSOR && a->t ? a->t->dtype : TPF_DTYPE_FLOAT;
	k = const_ints(in_value(n, 0), vals, TPF_MAX_RANK);
	if (k >= 0) {
		out.rank = (int)k;
		for (i = 0; i < k; i++) {
			if (vals[i] < 0) {
				node_error(c, n, "shape[%" PRId64 "] = %" PRId64 " is negative", i,
				           vals[i]);
				return;
			}
			out.dims[i] = dim_of(vals[i]);
		}
	} else {
		in_type(n, 0, &shp);
		if (shp.rank == 1 && dim_static(&shp.dims[0]) && shp.dims[0].value <= TPF_MAX_RANK)
			it_set_rank_unknown_dims(&out, (int)shp.dims[0].value);
	}
	set_output(c, n, 0, &out);
}

static void infer_constant(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype out;
	const struct tpf_attr *a;
	int i;

	it_unknown(&out);
	if ((a = tpf_node_attr(n, "value")) && a->kind == TPF_ATTR_TENSOR && a->t) {
		if (a->t->rank < 0 || a->t->rank > TPF_MAX_RANK)
			return;
		out.dtype = a->t->dtype;
		out.rank = a->t->rank;
		for (i = 0; i < out.rank; i++)
			out.dims[i] = dim_of(a->t->dims[i]);
	} else if ((a = tpf_node_attr(n, "value_float")) || (a = tpf_node_attr(n, "value_int")) ||
	           (a = tpf_node_attr(n, "value_string"))) {
		out.dtype = a->kind == TPF_ATTR_FLOAT ? TPF_DTYPE_FLOAT
		            : a->kind == TPF_ATTR_INT ? TPF_DTYPE_INT64
		                                      : TPF_DTYPE_STRING;
		out.rank = 0;
	} else if ((a = tpf_node_attr(n, "value_floats")) || (a = tpf_node_attr(n, "value_ints")) ||
	           (a = tpf_node_attr(n, "value_strings"))) {
		out.dtype = a->kind == TPF_ATTR_FLOATS ? TPF_DTYPE_FLOAT
		            : a->kind == TPF_ATTR_INTS ? TPF_DTYPE_INT64
		                                       : TPF_DTYPE_STRING;
		out.rank = 1;
		out.dims[0] = dim_of((int64_t)a->n);
	} else {
		return;
	}
	set_output(c, n, 0, &out);
}

/* X's shape with the dims from `axis` on set to 1 (normalization statistics). */
static void reduced_from(const struct itype *x, int64_t axis, struct itype *out)
{
	int64_t ax;
	int i;

	out->rank = -1;
	if (x->rank < 0 || norm_axis(axis, x->rank, &ax))
		return;
	*out = *x;
	for (i = (int)ax; i < x->rank; i++)
		out->dims[i] = dim_of(1);
}

static enum tpf_dtype valid_or(int64_t v, enum tpf_dtype dflt)
{
	if (v > 0 && v < TPF_DTYPE_COUNT && tpf_dtype_is_valid((int)v))
		return (enum tpf_dtype)v;
	return dflt;
}

/* RMSNormalization, SimplifiedLayerNormalization (both domains): Y has the
 * scale's dtype (V) and X's shape; a Y declared with X's dtype is accepted. */
static void infer_rms_like(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, scale, y, stat;

	in_type(n, 0, &x);
	in_type(n, 1, &scale);
	y = x;
	if (scale.dtype)
		y.dtype = scale.dtype;
	set_output_ex(c, n, 0, &y, SET_STRICT, x.dtype);
	if (n->n_outputs > 1) {
		reduced_from(&x, attr_int(n, "axis", -1), &stat);
		stat.dtype = valid_or(attr_int(n, "stash_type", TPF_DTYPE_FLOAT), TPF_DTYPE_FLOAT);
		set_output(c, n, 1, &stat);
	}
}

static void infer_layer_norm(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, stat;
	size_t j;

	in_type(n, 0, &x);
	set_output(c, n, 0, &x);
	reduced_from(&x, attr_int(n, "axis", -1), &stat);
	stat.dtype = valid_or(attr_int(n, "stash_type", TPF_DTYPE_FLOAT), TPF_DTYPE_FLOAT);
	for (j = 1; j < 3 && j < n->n_outputs; j++)
		set_output(c, n, j, &stat);
}

static void infer_skip_simplified(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, skip, bias, stat;
	const struct itype *ptrs[2] = {&x, &skip}, *with_bias[2] = {&x, &bias};
	struct itype sum;

	in_type(n, 0, &x);
	in_type(n, 1, &skip);
	in_type(n, 3, &bias);
	/* the residual sum input + skip (+ bias) has the input's shape; skip
	 * and bias must each broadcast to it (checked apart: an unknown skip
	 * must not hide a bias that cannot) */
	if (n->n_inputs > 3 && in_value(n, 3) && broadcast(c, n, with_bias, 2, &sum))
		return;
	if (broadcast(c, n, ptrs, 2, &sum))
		return;
	/* input, skip, gamma and bias share one type T: any of them names it
	 * when the input's is unknown (as the canonical Add + RMSNorm would) */
	for (size_t i = 1; !x.dtype && i < n->n_inputs && i < 4; i++) {
		struct itype t;
		in_type(n, i, &t);
		x.dtype = t.dtype;
	}
	set_output(c, n, 0, &x);
	it_unknown(&stat);
	stat.dtype = TPF_DTYPE_FLOAT;
	set_output(c, n, 1, &stat);
	set_output(c, n, 2, &stat);
	set_output(c, n, 3, &x);
}

static void infer_quantize(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, zp;
	int64_t od = attr_int(n, "output_dtype", 0);

	in_type(n, 0, &x);
	in_type(n, 2, &zp);
	if (in_value(n, 2) && zp.dtype)
		x.dtype = zp.dtype;
	else if (od)
		x.dtype = valid_or(od, TPF_DTYPE_UNDEFINED);
	else if (!in_value(n, 2))
		x.dtype = TPF_DTYPE_UINT8;
	else
		x.dtype = TPF_DTYPE_UNDEFINED;
	set_output(c, n, 0, &x);
}

static void infer_dequantize(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, scale;
	int64_t od = attr_int(n, "output_dtype", 0);

	in_type(n, 0, &x);
	in_type(n, 1, &scale);
	if (od)
		x.dtype = valid_or(od, TPF_DTYPE_UNDEFINED);
	else if (c->opset > 0 && c->opset < 19)
		x.dtype = TPF_DTYPE_FLOAT;
	else
		x.dtype = scale.dtype;
	set_output(c, n, 0, &x);
}

static void infer_topk(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, idx;
	int64_t k = -1, ax;

	in_type(n, 0, &x);
	if (in_value(n, 1)) {
		int64_t vals[1];

		if (const_ints(in_value(n, 1), vals, 1) == 1)
			k = vals[0];
	} else {
		k = attr_int(n, "k", -1);
	}
	if (x.rank >= 0) {
		if (norm_axis(attr_int(n, "axis", -1), x.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
			           attr_int(n, "axis", -1), x.rank);
			return;
		}
		if (k >= 0 && dim_static(&x.dims[ax]) && x.dims[ax].value < k) {
			node_error(c, n, "k = %" PRId64 " exceeds dimension %" PRId64 " = %" PRId64,
			           k, ax, x.dims[ax].value);
			return;
		}
		x.dims[ax] = dim_of(k);
	}
	set_output(c, n, 0, &x);
	idx = x;
	idx.dtype = TPF_DTYPE_INT64;
	set_output(c, n, 1, &idx);
}

static void infer_allgather(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x;
	int64_t gs = attr_int(n, "group_size", c->world), ax;

	in_type(n, 0, &x);
	if (x.rank >= 0) {
		if (norm_axis(attr_int(n, "axis", 0), x.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
			           attr_int(n, "axis", 0), x.rank);
			return;
		}
		if (gs == 1) {
			/* one rank: nothing is gathered */
		} else if (gs > 1 && dim_static(&x.dims[ax]) &&
		           !__builtin_mul_overflow(x.dims[ax].value, gs, &x.dims[ax].value)) {
			x.dims[ax].param = NULL;
		} else {
			x.dims[ax] = dim_unknown();
		}
	}
	set_output(c, n, 0, &x);
}

static void infer_fp4_quantize(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x, sc;
	int64_t bs = attr_int(n, "block_size", 16), ax;

	in_type(n, 0, &x);
	sc = x;
	x.dtype = TPF_DTYPE_FLOAT4E2M1;
	set_output(c, n, 0, &x);
	sc.dtype =
	    valid_or(attr_int(n, "scale_type", TPF_DTYPE_FLOAT8E4M3FN), TPF_DTYPE_FLOAT8E4M3FN);
	if (sc.rank >= 0) {
		if (norm_axis(attr_int(n, "axis", -1), sc.rank, &ax)) {
			node_error(c, n, "axis %" PRId64 " is out of range for rank %d",
			           attr_int(n, "axis", -1), sc.rank);
			return;
		}
		if (bs > 0 && dim_static(&sc.dims[ax])) {
			if (sc.dims[ax].value % bs) {
				node_error(c, n,
				           "dimension %" PRId64 " = %" PRId64
				           " is not a multiple of block_size %" PRId64,
				           ax, sc.dims[ax].value, bs);
				return;
			}
			sc.dims[ax] = dim_of(sc.dims[ax].value / bs);
		} else {
			sc.dims[ax] = dim_unknown();
		}
	}
	set_output(c, n, 1, &sc);
}

/* ONNX Attention (opset 23): Q, K, V of rank 4 (B, heads, seq, head_size)
 * or rank 3 (B, seq, heads * head_size) with q_num_heads/kv_num_heads. */
static void infer_attention(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype q, k, v, pk, y, present;
	int64_t qh = attr_int(n, "q_num_heads", 0), kvh = attr_int(n, "kv_num_heads", 0);

	in_type(n, 0, &q);
	in_type(n, 1, &k);
	in_type(n, 2, &v);
	in_type(n, 4, &pk);
	it_unknown(&y);
	y.dtype = q.dtype;
	if (q.rank == 4 && v.rank == 4) {
		y.rank = 4;
		y.dims[0] = q.dims[0];
		y.dims[1] = q.dims[1];
		y.dims[2] = q.dims[2];
		y.dims[3] = v.dims[3];
	} else if (q.rank == 3 && v.rank == 3) {
		y.rank = 3;
		y.dims[0] = q.dims[0];
		y.dims[1] = q.dims[1];
		y.dims[2] = dim_unknown();
		if (qh > 0 && kvh > 0 && dim_static(&v.dims[2]) && v.dims[2].value % kvh == 0 &&
		    !__builtin_mul_overflow(qh, v.dims[2].value / kvh, &y.dims[2].value))
			y.dims[2].param = NULL;
		else
			y.dims[2] = dim_unknown();
	}
	set_output(c, n, 0, &y);
	/* present key/value: past sequence + new sequence */
	if (n->n_outputs > 1 && k.rank == 4 && pk.rank == 4) {
		size_t j;

		for (j = 1; j < 3 && j < n->n_outputs; j++) {
			const struct itype *src = j == 1 ? &k : &v;

			if (src->rank != 4)
				continue;
			present = *src;
			if (dim_static(&pk.dims[2]) && dim_static(&src->dims[2]))
				present.dims[2] = dim_of(pk.dims[2].value + src->dims[2].value);
			else
				present.dims[2] = dim_unknown();
			set_output(c, n, j, &present);
		}
	}
}

static void infer_if(struct infer_ctx *c, const struct tpf_node *n)
{
	const struct tpf_attr *ta = tpf_node_attr(n, "then_branch");
	const struct tpf_attr *ea = tpf_node_attr(n, "else_branch");
	size_t j;
	int i;

	if (!ta || !ea || ta->kind != TPF_ATTR_GRAPH || ea->kind != TPF_ATTR_GRAPH || !ta->g ||
	    !ea->g)
		return;
	for (j = 0; j < n->n_outputs; j++) {
		struct itype a, b, out;

		if (j >= ta->g->n_outputs || j >= ea->g->n_outputs)
			break;
		it_from_value(ta->g->outputs[j], &a);
		it_from_value(ea->g->outputs[j], &b);
		it_unknown(&out);
		if (a.dtype == b.dtype)
			out.dtype = a.dtype;
		if (a.rank >= 0 && a.rank == b.rank) {
			out.rank = a.rank;
			for (i = 0; i < a.rank; i++)
				out.dims[i] =
				    dims_same(&a.dims[i], &b.dims[i]) ? a.dims[i] : dim_unknown();
		}
		set_output(c, n, j, &out);
	}
}

static void infer_loop(struct infer_ctx *c, const struct tpf_node *n)
{
	const struct tpf_attr *ba = tpf_node_attr(n, "body");
	const struct tpf_graph *body;
	size_t carried, j;
	int i;

	if (!ba || ba->kind != TPF_ATTR_GRAPH || !ba->g || n->n_inputs < 2)
		return;
	body = ba->g;
	carried = n->n_inputs - 2;
	for (j = 0; j < n->n_outputs && 1 + j < body->n_outputs; j++) {
		struct itype t;

		it_from_value(body->outputs[1 + j], &t);
		if (j >= carried && t.rank >= 0) {
			/* scan outputs stack one value per iteration */
			if (t.rank + 1 > TPF_MAX_RANK)
				continue;
			for (i = t.rank; i > 0; i--)
				t.dims[i] = t.dims[i - 1];
			t.dims[0] = dim_unknown();
			t.rank++;
		}
		set_output_ex(c, n, j, &t, SET_WEAK, TPF_DTYPE_UNDEFINED);
	}
}

/* ai.tpfuse ops whose outputs follow their first input. */
static void infer_tpf(struct infer_ctx *c, const struct tpf_node *n)
{
	struct itype x;

	in_type(n, 0, &x);
	switch (n->op) {
	case TPF_OP_TPF_RMS_NORM: {
		/* docs/ops.md: Y has gamma's element type, X's shape */
		struct itype g, y = x;
		in_type(n, 1, &g);
		if (g.dtype != TPF_DTYPE_UNDEFINED)
			y.dtype = g.dtype;
		set_output(c, n, 0, &y);
		break;
	}
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
		set_output(c, n, 0, &x);
		set_output(c, n, 1, &x);
		break;
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT: {
		/* y: fp8 or fp4 by `quant`; residual_out and norm_out: X's type */
		struct itype q = x;
		const char *quant = tpf_node_attr_string(n, "quant", "fp8");
		q.dtype = strcmp(quant, "fp8") == 0 ? TPF_DTYPE_FLOAT8E4M3FN : TPF_DTYPE_FLOAT4E2M1;
		set_output_ex(c, n, 0, &q, SET_WEAK, TPF_DTYPE_UNDEFINED);
		set_output(c, n, 1, &x);
		set_output(c, n, 3, &x);
		break;
	}
	case TPF_OP_TPF_SIGMOID_GATE_ADD:
		infer_elementwise(c, n, 0, 3, x.dtype);
		break;
	default:
		set_output_ex(c, n, 0, &x, SET_WEAK, TPF_DTYPE_UNDEFINED);
		break;
	}
}

static enum tpf_status infer_graph(struct infer_ctx *c, struct tpf_graph *g, int depth);

static void infer_subgraphs(struct infer_ctx *c, const struct tpf_node *n, int depth)
{
	size_t i, j;

	for (i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];

		if (a->kind == TPF_ATTR_GRAPH && a->g)
			infer_graph(c, a->g, depth + 1);
		else if (a->kind == TPF_ATTR_GRAPHS && a->graphs)
			for (j = 0; j < a->n; j++)
				if (a->graphs[j])
					infer_graph(c, a->graphs[j], depth + 1);
	}
}

static void infer_node(struct infer_ctx *c, const struct tpf_node *n, int depth)
{
	switch (n->op) {
	case TPF_OP_ABS:
	case TPF_OP_COS:
	case TPF_OP_ERF:
	case TPF_OP_EXP:
	case TPF_OP_IDENTITY:
	case TPF_OP_NEG:
	case TPF_OP_RECIPROCAL:
	case TPF_OP_RELU:
	case TPF_OP_SIGMOID:
	case TPF_OP_SIN:
	case TPF_OP_SQRT:
	case TPF_OP_TANH:
	case TPF_OP_SOFTMAX:
	case TPF_OP_MS_ALLREDUCE:
	case TPF_OP_MS_ALLTOALL:
	case TPF_OP_SCATTER_ELEMENTS:
		infer_same(c, n);
		break;
	case TPF_OP_NOT: {
		struct itype t;

		in_type(n, 0, &t);
		t.dtype = TPF_DTYPE_BOOL;
		set_output(c, n, 0, &t);
		break;
	}
	case TPF_OP_ADD:
	case TPF_OP_SUB:
	case TPF_OP_MUL:
	case TPF_OP_DIV:
	case TPF_OP_POW:
	case TPF_OP_MAX:
	case TPF_OP_MIN: {
		struct itype t;

		in_type(n, 0, &t);
		infer_elementwise(c, n, 0, n->n_inputs, t.dtype);
		break;
	}
	case TPF_OP_EQUAL:
	case TPF_OP_GREATER:
	case TPF_OP_LESS:
		infer_elementwise(c, n, 0, 2, TPF_DTYPE_BOOL);
		break;
	case TPF_OP_WHERE: {
		struct itype x, y;

		in_type(n, 1, &x);
		in_type(n, 2, &y);
		infer_elementwise(c, n, 0, 3, x.dtype ? x.dtype : y.dtype);
		break;
	}
	case TPF_OP_MATMUL:
		infer_matmul(c, n);
		break;
	case TPF_OP_GEMM:
		infer_gemm(c, n);
		break;
	case TPF_OP_CAST:
		infer_cast(c, n);
		break;
	case TPF_OP_RESHAPE:
		infer_reshape(c, n);
		break;
	case TPF_OP_TRANSPOSE:
		infer_transpose(c, n);
		break;
	case TPF_OP_SLICE:
		infer_slice(c, n);
		break;
	case TPF_OP_SPLIT:
		infer_split(c, n);
		break;
	case TPF_OP_CONCAT:
		infer_concat(c, n);
		break;
	case TPF_OP_GATHER:
		infer_gather(c, n);
		break;
	case TPF_OP_GATHER_ELEMENTS:
		infer_gather_elements(c, n);
		break;
	case TPF_OP_SQUEEZE:
		infer_squeeze(c, n);
		break;
	case TPF_OP_UNSQUEEZE:
		infer_unsqueeze(c, n);
		break;
	case TPF_OP_REDUCE_MAX:
	case TPF_OP_REDUCE_MEAN:
	case TPF_OP_REDUCE_SUM:
	case TPF_OP_ARGMAX:
		infer_reduce(c, n);
		break;
	case TPF_OP_EXPAND:
		infer_expand(c, n);
		break;
	case TPF_OP_SHAPE:
		infer_shape(c, n);
		break;
	case TPF_OP_CONSTANT_OF_SHAPE:
		infer_constant_of_shape(c, n);
		break;
	case TPF_OP_CONSTANT:
		infer_constant(c, n);
		break;
	case TPF_OP_RMS_NORMALIZATION:
	case TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION:
	case TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION:
		infer_rms_like(c, n);
		break;
	case TPF_OP_LAYER_NORMALIZATION:
		infer_layer_norm(c, n);
		break;
	case TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION:
		infer_skip_simplified(c, n);
		break;
	case TPF_OP_QUANTIZE_LINEAR:
		infer_quantize(c, n);
		break;
	case TPF_OP_DEQUANTIZE_LINEAR:
		infer_dequantize(c, n);
		break;
	case TPF_OP_TOPK:
		infer_topk(c, n);
		break;
	case TPF_OP_MS_ALLGATHER:
		infer_allgather(c, n);
		break;
	case TPF_OP_TRT_FP4_DYNAMIC_QUANTIZE:
		infer_fp4_quantize(c, n);
		break;
	case TPF_OP_ATTENTION:
		infer_attention(c, n);
		break;
	case TPF_OP_IF:
		infer_subgraphs(c, n, depth);
		infer_if(c, n);
		break;
	case TPF_OP_LOOP:
		infer_subgraphs(c, n, depth);
		infer_loop(c, n);
		break;
	case TPF_OP_SCAN:
		infer_subgraphs(c, n, depth);
		break;
	case TPF_OP_TPF_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT:
	case TPF_OP_TPF_SHARDED_RMS_NORM:
	case TPF_OP_TPF_SIGMOID_GATE_ADD:
	case TPF_OP_TPF_PACK:
	case TPF_OP_TPF_UNPACK:
		infer_tpf(c, n);
		break;
	default:
		/* unknown ops: their subgraphs still get types */
		infer_subgraphs(c, n, depth);
		break;
	}
}

static int node_operands_sane(const struct tpf_node *n)
{
	size_t i;

	if ((n->n_inputs && !n->inputs) || (n->n_outputs && !n->outputs) ||
	    (n->n_attrs && !n->attrs))
		return 0;
	for (i = 0; i < n->n_attrs; i++)
		if (!n->attrs[i].name)
			return 0;
	return 1;
}

static enum tpf_status infer_graph(struct infer_ctx *c, struct tpf_graph *g, int depth)
{
	const struct tpf_node *n;
	size_t i, count = 0;

	if (!g || depth > INFER_MAX_DEPTH)
		return TPF_ERR_INVALID;
	/* initializers know their type from the tensor */
	for (i = 0; i < g->n_initializers && g->initializers; i++) {
		struct tpf_value *v = g->initializers[i];
		const struct tpf_tensor *t;
		struct tpf_type ty;

		if (!v || !(t = v->init) || v->type.kind == TPF_TYPE_OPAQUE)
			continue;
		if (v->type.kind == TPF_TYPE_TENSOR && v->type.dtype && v->type.shape.rank >= 0)
			continue;
		if (t->rank < 0 || t->rank > TPF_MAX_RANK)
			continue;
		{
			struct tpf_dim dims[TPF_MAX_RANK];
			int k;

			for (k = 0; k < t->rank; k++)
				dims[k] = dim_of(t->dims[k]);
			memset(&ty, 0, sizeof(ty));
			ty.kind = TPF_TYPE_TENSOR;
			ty.dtype = t->dtype;
			ty.shape.rank = t->rank;
			ty.shape.dims = t->rank > 0 ? dims : NULL;
			if (tpf_value_copy_type(v, &ty) != TPF_OK)
				c->nomem = 1;
		}
	}
	for (n = g->first; n && !c->nomem; n = n->next) {
		/* a corrupt list must not hang the pass */
		if (++count > g->n_nodes + 1)
			break;
		if (n->erased || !node_operands_sane(n))
			continue;
		infer_node(c, n, depth);
	}
	if (c->nomem)
		return TPF_ERR_NOMEM;
	return TPF_OK;
}

static int64_t metadata_world(const struct tpf_model *m)
{
	const char *s = m ? tpf_model_metadata(m, "tp_world_size") : NULL;
	char *end;
	long long v;

	if (!s || !*s)
		return -1;
	v = strtoll(s, &end, 10);
	if (*end || v <= 0)
		return -1;
	return (int64_t)v;
}

enum tpf_status tpf_graph_infer_shapes(struct tpf_graph *g, const struct tpf_model *m,
                                       struct tpf_diag *d)
{
	struct infer_ctx c;
	enum tpf_status st;

	memset(&c, 0, sizeof(c));
	c.d = d;
	c.m = m;
	c.opset = -1;
	c.world = -1;
	if (!g)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "shape inference: no graph given");
	if (m) {
		c.opset = tpf_model_opset(m, "");
		if (c.opset < 0)
			c.opset = tpf_model_opset(m, "ai.onnx");
		c.world = metadata_world(m);
	}
	st = infer_graph(&c, g, 0);
	if (c.nomem) {
		tpf_diag_add(d, TPF_SEV_ERROR, "shape inference: out of memory");
		return TPF_ERR_NOMEM;
	}
	if (st)
		return st;
	return c.errors ? TPF_ERR_VERIFY : TPF_OK;
}

enum tpf_status tpf_model_infer_shapes(struct tpf_model *m, struct tpf_diag *d)
{
	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "shape inference: no model graph given");
	return tpf_graph_infer_shapes(m->graph, m, d);
}
