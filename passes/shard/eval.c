/* SPDX-License-Identifier: MIT */
/*
 * The sharder's concrete evaluation: every value of a graph gets concrete
 * dims and, when it is a small integer or boolean tensor, its elements.
 *
 * Symbolic and unknown dims of the graph inputs are bound to distinct
 * primes (7, 11, 13, ...), so that a product of dims identifies the dims
 * it is made of and a Reshape's mapping of axes can be read off numbers.
 * Each node's shape comes from its op record (tpf_op_infer, concrete
 * mode), with the elements of integer inputs handed to it, and so do the
 * elements of integer outputs where the record computes them (Shape, Size,
 * Range, Identity, and the 1-D cases of Gather, Concat, Unsqueeze, Add,
 * ...).  What records leave unknown, a small interpreter of shape
 * arithmetic on concrete numbers computes (sh_interp: broadcasting,
 * comparisons, Where, Neg, Gather, Slice and Concat of any rank,
 * ConstantOfShape, Expand, reductions of a shape).  Where neither knows a
 * dim, the exporter's declared static dim is taken.
 */
#include <limits.h>
#include <string.h>

#include "shard.h"

/* ------------------------------------------------------------------ helpers */

int64_t sh_numel(const struct sh_fact *f)
{
	int64_t n = 1;

	if (!f || f->rank < 0)
		return -1;
	for (int i = 0; i < f->rank; i++) {
		if (f->dims[i] < 0 || __builtin_mul_overflow(n, f->dims[i], &n))
			return -1;
	}
	return n;
}

static int is_int_dtype(enum tpf_dtype t)
{
	switch (t) {
	case TPF_DTYPE_INT64:
	case TPF_DTYPE_INT32:
	case TPF_DTYPE_INT16:
	case TPF_DTYPE_INT8:
	case TPF_DTYPE_UINT8:
	case TPF_DTYPE_UINT16:
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_UINT64:
	case TPF_DTYPE_BOOL:
		return 1;
	default:
		return 0;
	}
}

static const struct sh_fact unknown_fact = {.rank = -1, .nvals = -1};

/* memcpy of r dims that tolerates r <= 0 with a NULL source */
static void copy_dims(int64_t *dst, const int64_t *src, int r)
{
	if (r > 0 && src)
		memcpy(dst, src, (size_t)r * sizeof(int64_t));
}

const struct sh_fact *sh_eval_fact(const struct sh_eval *e, const struct tpf_value *v)
{
	if (!v || v->graph != e->g || v->id >= e->n)
		return &unknown_fact;
	return &e->f[v->id];
}

/* Reads up to SH_MAX_VALS integer elements of a tensor; -1 if not integer. */
static int tensor_ints(const struct tpf_tensor *t, int64_t *out)
{
	int64_t n = tpf_tensor_numel(t);
	size_t esz;

	if (!t || n < 0 || n > SH_MAX_VALS || !is_int_dtype(t->dtype))
		return -1;
	esz = tpf_dtype_bits(t->dtype) / 8;
	if (!esz || (n && (!t->data || t->nbytes < (size_t)n * esz)))
		return -1;
	int is_signed = t->dtype == TPF_DTYPE_INT8 || t->dtype == TPF_DTYPE_INT16 ||
			t->dtype == TPF_DTYPE_INT32 || t->dtype == TPF_DTYPE_INT64;
	for (int64_t i = 0; i < n; i++) {
		/* little-endian, as ONNX stores tensors; signed types sign-extend */
		const unsigned char *p = (const unsigned char *)t->data + i * esz;
		uint64_t x = 0;
		for (size_t k = 0; k < esz; k++)
			x |= (uint64_t)p[k] << (8 * k);
		if (is_signed && esz < 8 && (x >> (8 * esz - 1)) & 1)
			x |= ~UINT64_C(0) << (8 * esz);
		out[i] = (int64_t)x;
	}
	return (int)n;
}

/* ------------------------------------------------------------------ interpreter */

#define MAXR 8

/* Flat index into a tensor of dims `d` (rank r) broadcast to `od` (rank
 * orank), for the output multi-index `oi`. */
static int64_t bcast_index(const int64_t *oi, int orank, const int64_t *d, int r)
{
	int64_t idx = 0;

	for (int i = 0; i < r; i++) {
		int oa = orank - r + i;
		int64_t x = d[i] == 1 ? 0 : oi[oa];
		idx = idx * d[i] + x;
	}
	return idx;
}

static void unflatten(int64_t flat, const int64_t *d, int r, int64_t *oi)
{
	for (int i = r - 1; i >= 0; i--) {
		oi[i] = d[i] ? flat % d[i] : 0;
		flat = d[i] ? flat / d[i] : 0;
	}
}

static int fact_ok(const struct sh_fact *f)
{
	return f && f->rank >= 0 && f->rank <= MAXR && f->nvals >= 0 && sh_numel(f) == f->nvals;
}

static int64_t attr_i(const struct tpf_node *n, const char *name, int64_t dflt)
{
	return tpf_node_attr_int(n, name, dflt);
}

static int norm_axis(int64_t a, int r)
{
	if (a < 0)
		a += r;
	return a < 0 || a >= r ? -1 : (int)a;
}

/* The integer arithmetic of shape computations, checked: -1 when the result
 * does not fit in int64 (INT64_MIN / -1 included) or the divisor is 0, and
 * the value is then left unknown. */
static int binop(enum tpf_op op, int64_t a, int64_t b, int64_t *out)
{
	switch (op) {
	case TPF_OP_ADD:
		return __builtin_add_overflow(a, b, out) ? -1 : 0;
	case TPF_OP_SUB:
		return __builtin_sub_overflow(a, b, out) ? -1 : 0;
	case TPF_OP_MUL:
		return __builtin_mul_overflow(a, b, out) ? -1 : 0;
	case TPF_OP_DIV:
		if (!b || (a == INT64_MIN && b == -1))
			return -1;
		*out = a / b;
		return 0;
	case TPF_OP_MOD:
		if (!b)
			return -1;
		/* INT64_MIN % -1 traps on x86; the remainder is 0 */
		*out = b == -1 ? 0 : a % b;
		if (*out && ((*out < 0) != (b < 0)))
			*out += b; /* fmod=0: the sign of the divisor */
		return 0;
	case TPF_OP_MAX:
		*out = a > b ? a : b;
		return 0;
	case TPF_OP_MIN:
		*out = a < b ? a : b;
		return 0;
	case TPF_OP_EQUAL:
		*out = a == b;
		return 0;
	case TPF_OP_LESS:
		*out = a < b;
		return 0;
	case TPF_OP_GREATER:
		*out = a > b;
		return 0;
	case TPF_OP_LESS_OR_EQUAL:
		*out = a <= b;
		return 0;
	case TPF_OP_GREATER_OR_EQUAL:
		*out = a >= b;
		return 0;
	case TPF_OP_AND:
		*out = a && b;
		return 0;
	case TPF_OP_OR:
		*out = a || b;
		return 0;
	case TPF_OP_XOR:
		*out = !a != !b;
		return 0;
	default:
		return -1;
	}
}

/* The ops binop knows (each computes 1 op 1). */
static int is_binop(enum tpf_op op)
{
	int64_t x;
	return binop(op, 1, 1, &x) == 0;
}

/* Optional input i of n: its k values, else 0, 1, ... (iota) or all 1s;
 * -1 when given with another count or not known. */
static int opt_list(const struct tpf_node *n, const struct sh_fact *const *in, size_t i, int k,
		    int iota, int64_t *out)
{
	if (n->n_inputs > i && n->inputs[i]) {
		if (!in[i] || in[i]->nvals != k)
			return -1;
		memcpy(out, in[i]->vals, (size_t)k * 8);
		return 0;
	}
	for (int j = 0; j < k; j++)
		out[j] = iota ? j : 1;
	return 0;
}

/* An INTS attribute of at most max entries: the count, or -1. */
static int attr_list(const struct tpf_node *n, const char *name, int64_t *out, int max)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);

	if (!a || a->kind != TPF_ATTR_INTS || a->n > (size_t)max)
		return -1;
	if (a->n)
		memcpy(out, a->ints, a->n * sizeof(*out));
	return (int)a->n;
}

int sh_slice_params(const struct tpf_node *n, const struct sh_fact *const *in, int rank, int max,
		    int64_t *st, int64_t *en, int64_t *stp, int *ax_of, int *count)
{
	int64_t s[TPF_MAX_RANK], e[TPF_MAX_RANK], a[TPF_MAX_RANK], p[TPF_MAX_RANK];
	int k;

	if (max > TPF_MAX_RANK)
		max = TPF_MAX_RANK;
	if (n->n_inputs >= 3) {
		if (!in[1] || !in[2] || in[1]->nvals < 0 || in[2]->nvals != in[1]->nvals ||
		    in[1]->nvals > max)
			return -1;
		k = in[1]->nvals;
		memcpy(s, in[1]->vals, (size_t)k * 8);
		memcpy(e, in[2]->vals, (size_t)k * 8);
		if (opt_list(n, in, 3, k, 1, a) || opt_list(n, in, 4, k, 0, p))
			return -1;
	} else {
		k = attr_list(n, "starts", s, max);
		if (k < 0 || attr_list(n, "ends", e, max) != k)
			return -1;
		/* axes of another count are ignored: 0, 1, ... */
		int na = attr_list(n, "axes", a, max);
		for (int i = 0; i < k; i++) {
			if (na != k)
				a[i] = i;
			p[i] = 1;
		}
	}
	for (int i = 0; i < k; i++) {
		int ax = norm_axis(a[i], rank);
		if (ax < 0 || !p[i])
			return -1;
		ax_of[i] = ax;
		st[i] = s[i];
		en[i] = e[i];
		stp[i] = p[i];
	}
	*count = k;
	return 0;
}

void sh_slice_range(int64_t start, int64_t end, int64_t step, int64_t d, int64_t *first,
		    int64_t *count)
{
	*count = tpf_slice_span(d, start, end, step, first);
}

/* The interpreter, one family of ops a function: each gets the node, its
 * inputs' facts, the output's fact `of` with on = its numel, and writes
 * vals: the count, or -1. */

/* Neg, Abs and Not of each element. */
static int interp_unary(const struct tpf_node *n, const struct sh_fact *x, int64_t on,
			int64_t *vals)
{
	if (!fact_ok(x) || x->nvals != on)
		return -1;
	for (int64_t i = 0; i < on; i++) {
		int64_t v = x->vals[i];
		if (v == INT64_MIN && n->op != TPF_OP_NOT)
			return -1; /* -INT64_MIN does not fit */
		vals[i] = n->op == TPF_OP_NEG ? -v : n->op == TPF_OP_ABS ? (v < 0 ? -v : v) : !v;
	}
	return (int)on;
}

/* A broadcast binary op, or Where. */
static int interp_broadcast(const struct tpf_node *n, const struct sh_fact *const *in,
			    const struct sh_fact *of, int64_t on, int64_t *vals)
{
	int k = n->op == TPF_OP_WHERE ? 3 : 2;
	int64_t oi[MAXR];

	if ((int)n->n_inputs != k)
		return -1;
	for (int j = 0; j < k; j++)
		if (!fact_ok(in[j]) || in[j]->rank > of->rank)
			return -1;
	for (int64_t f = 0; f < on; f++) {
		int64_t x[3];
		unflatten(f, of->dims, of->rank, oi);
		for (int j = 0; j < k; j++)
			x[j] = in[j]->vals[bcast_index(oi, of->rank, in[j]->dims, in[j]->rank)];
		if (k == 3)
			vals[f] = x[0] ? x[1] : x[2];
		else if (binop(n->op, x[0], x[1], &vals[f]))
			return -1;
	}
	return (int)on;
}

static int interp_gather(const struct tpf_node *n, const struct sh_fact *const *in,
			 const struct sh_fact *of, int64_t on, int64_t *vals)
{
	const struct sh_fact *dt = in[0], *ix = in[1];
	int64_t oi[MAXR];
	int ax;

	if (!fact_ok(dt) || !fact_ok(ix))
		return -1;
	ax = norm_axis(attr_i(n, "axis", 0), dt->rank);
	if (ax < 0 || of->rank != dt->rank - 1 + ix->rank)
		return -1;
	for (int64_t f = 0; f < on; f++) {
		int64_t di[MAXR], src = 0, ii = 0;
		unflatten(f, of->dims, of->rank, oi);
		for (int i = 0; i < ix->rank; i++)
			ii = ii * ix->dims[i] + oi[ax + i];
		for (int i = 0; i < dt->rank; i++) {
			if (i < ax)
				di[i] = oi[i];
			else if (i == ax) {
				int64_t g = ix->vals[ii];
				if (g < 0)
					g += dt->dims[ax];
				if (g < 0 || g >= dt->dims[ax])
					return -1;
				di[i] = g;
			} else
				di[i] = oi[i - 1 + ix->rank];
		}
		for (int i = 0; i < dt->rank; i++)
			src = src * dt->dims[i] + di[i];
		vals[f] = dt->vals[src];
	}
	return (int)on;
}

static int interp_concat(const struct tpf_node *n, const struct sh_fact *const *in,
			 const struct sh_fact *of, int64_t on, int64_t *vals)
{
	int ax = norm_axis(attr_i(n, "axis", 0), of->rank);
	int64_t oi[MAXR];

	if (ax < 0)
		return -1;
	for (size_t j = 0; j < n->n_inputs; j++)
		if (!fact_ok(in[j]) || in[j]->rank != of->rank)
			return -1;
	for (int64_t f = 0; f < on; f++) {
		int64_t pos, src = 0;
		size_t j;
		unflatten(f, of->dims, of->rank, oi);
		pos = oi[ax];
		for (j = 0; j < n->n_inputs && pos >= in[j]->dims[ax]; j++)
			pos -= in[j]->dims[ax];
		if (j == n->n_inputs)
			return -1;
		for (int i = 0; i < of->rank; i++)
			src = src * in[j]->dims[i] + (i == ax ? pos : oi[i]);
		vals[f] = in[j]->vals[src];
	}
	return (int)on;
}

static int interp_slice(const struct tpf_node *n, const struct sh_fact *const *in,
			const struct sh_fact *of, int64_t on, int64_t *vals)
{
	const struct sh_fact *x = in[0];
	int64_t st[MAXR], en[MAXR], sp[MAXR], first[MAXR], step[MAXR], oi[MAXR];
	int ax[MAXR], k;

	if (!fact_ok(x) || x->rank != of->rank ||
	    sh_slice_params(n, in, x->rank, MAXR, st, en, sp, ax, &k))
		return -1;
	for (int i = 0; i < x->rank; i++) {
		first[i] = 0;
		step[i] = 1;
	}
	for (int i = 0; i < k; i++) {
		int64_t cnt;
		sh_slice_range(st[i], en[i], sp[i], x->dims[ax[i]], &first[ax[i]], &cnt);
		step[ax[i]] = sp[i];
		if (cnt != of->dims[ax[i]])
			return -1;
	}
	for (int64_t f = 0; f < on; f++) {
		int64_t src = 0;
		unflatten(f, of->dims, of->rank, oi);
		for (int i = 0; i < x->rank; i++)
			src = src * x->dims[i] + first[i] + oi[i] * step[i];
		vals[f] = x->vals[src];
	}
	return (int)on;
}

/* ConstantOfShape and Expand: values made from a few inputs. */
static int interp_fill(const struct tpf_node *n, const struct sh_fact *const *in,
		       const struct sh_fact *of, int64_t on, int64_t *vals)
{
	int64_t oi[MAXR];

	if (n->op == TPF_OP_CONSTANT_OF_SHAPE) {
		const struct tpf_attr *a = tpf_node_attr(n, "value");
		int64_t v = 0, tmp[SH_MAX_VALS];
		if (a && a->kind == TPF_ATTR_TENSOR) {
			if (tensor_ints(a->t, tmp) != 1)
				return -1;
			v = tmp[0];
		} else if (of->dtype != TPF_DTYPE_UNDEFINED && !is_int_dtype(of->dtype)) {
			return -1;
		}
		for (int64_t f = 0; f < on; f++)
			vals[f] = v;
		return (int)on;
	}
	if (!fact_ok(in[0]) || in[0]->rank > of->rank)
		return -1;
	for (int64_t f = 0; f < on; f++) {
		unflatten(f, of->dims, of->rank, oi);
		vals[f] = in[0]->vals[bcast_index(oi, of->rank, in[0]->dims, in[0]->rank)];
	}
	return (int)on;
}

/* ReduceSum, ReduceProd, ReduceMax, ReduceMin over everything (a 1-D
 * shape tensor). */
static int interp_reduce(const struct sh_fact *x, int arith, int64_t on, int64_t *vals)
{
	int64_t acc;

	if (!fact_ok(x) || on != 1 || x->nvals < 1 || x->rank > 1)
		return -1;
	acc = x->vals[0];
	for (int i = 1; i < x->nvals; i++) {
		int64_t v = x->vals[i];
		if (arith == TPF_SHARD_PRODUCT) {
			if (__builtin_mul_overflow(acc, v, &acc))
				return -1;
		} else if (arith == TPF_SHARD_SUM) {
			if (__builtin_add_overflow(acc, v, &acc))
				return -1;
		} else if (arith == TPF_SHARD_MAX)
			acc = v > acc ? v : acc;
		else
			acc = v < acc ? v : acc;
	}
	vals[0] = acc;
	return 1;
}

int sh_interp(const struct tpf_node *n, size_t out, const struct sh_fact *const *in,
	      const struct sh_fact *of, int64_t *vals)
{
	int64_t on = sh_numel(of);
	int arith;

	if (!of || of->rank < 0 || of->rank > MAXR || on < 0 || on > SH_MAX_VALS)
		return -1;
	if (!is_int_dtype(of->dtype) && of->dtype != TPF_DTYPE_UNDEFINED)
		return -1;
	if (out != 0)
		return -1;
	switch (n->op) {
	case TPF_OP_CAST:
	case TPF_OP_RESHAPE:
	case TPF_OP_SQUEEZE:
	case TPF_OP_UNSQUEEZE:
	case TPF_OP_FLATTEN:
		if (!in[0] || in[0]->nvals != on || !is_int_dtype(in[0]->dtype))
			return -1;
		memcpy(vals, in[0]->vals, (size_t)on * 8);
		return (int)on;
	case TPF_OP_NEG:
	case TPF_OP_ABS:
	case TPF_OP_NOT:
		return interp_unary(n, in[0], on, vals);
	case TPF_OP_WHERE:
		return interp_broadcast(n, in, of, on, vals);
	case TPF_OP_GATHER:
		return interp_gather(n, in, of, on, vals);
	case TPF_OP_CONCAT:
		return interp_concat(n, in, of, on, vals);
	case TPF_OP_SLICE:
		return interp_slice(n, in, of, on, vals);
	case TPF_OP_CONSTANT_OF_SHAPE:
	case TPF_OP_EXPAND:
		return interp_fill(n, in, of, on, vals);
	default:
		break;
	}
	if (is_binop(n->op))
		return interp_broadcast(n, in, of, on, vals);
	if (tpf_node_shard_rule(n, &arith) == TPF_SHARD_RULE_REDUCE && arith != TPF_SHARD_OTHER &&
	    arith != TPF_SHARD_QUOTIENT)
		return interp_reduce(in[0], arith, on, vals);
	return -1;
}

/* ------------------------------------------------------------------ evaluation */

static const int64_t primes[] = {7,  11, 13, 17, 19, 23, 29, 31, 37, 41, 43,
				 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97};

static int64_t sym_value(struct sh_eval *e, const char *name)
{
	for (size_t i = 0; i < e->n_syms; i++)
		if (name && e->sym_names[i] && !strcmp(e->sym_names[i], name))
			return e->sym_values[i];
	if (e->n_syms == e->cap_syms) {
		size_t cap = e->cap_syms ? 2 * e->cap_syms : 16;
		const char **nn = tpf_realloc(e->sym_names, cap * sizeof(*nn));
		if (!nn)
			return -1;
		e->sym_names = nn;
		int64_t *nv = tpf_realloc(e->sym_values, cap * sizeof(*nv));
		if (!nv)
			return -1;
		e->sym_values = nv;
		e->cap_syms = cap;
	}
	size_t k = e->next_prime++;
	int64_t v = k < sizeof(primes) / sizeof(primes[0])
			    ? primes[k]
			    : 101 + 2 * (int64_t)(k - sizeof(primes) / sizeof(primes[0]));
	e->sym_names[e->n_syms] = name ? tpf_arena_strdup(e->arena, name) : NULL;
	e->sym_values[e->n_syms++] = v;
	return v;
}

static int set_fact(struct sh_eval *e, struct sh_fact *f, enum tpf_dtype dt, int rank,
		    const int64_t *dims, int nvals, const int64_t *vals)
{
	f->dtype = dt;
	f->rank = rank;
	f->nvals = -1;
	f->dims = NULL;
	f->vals = NULL;
	if (rank > 0) {
		f->dims = tpf_arena_alloc(e->arena, (size_t)rank * sizeof(int64_t));
		if (!f->dims)
			return -1;
		memcpy(f->dims, dims, (size_t)rank * sizeof(int64_t));
	}
	if (nvals >= 0) {
		f->vals = tpf_arena_alloc(e->arena, (size_t)(nvals ? nvals : 1) * sizeof(int64_t));
		if (!f->vals)
			return -1;
		memcpy(f->vals, vals, (size_t)nvals * sizeof(int64_t));
		f->nvals = nvals;
	}
	return 0;
}

/* Dims of a declared type: static ones, and symbols through the binding
 * when `bind` (graph inputs), else -1. */
static int declared_dims(struct sh_eval *e, const struct tpf_value *v, int64_t *dims, int bind)
{
	const struct tpf_type *t = &v->type;
	int r;

	if (t->kind != TPF_TYPE_TENSOR || t->shape.rank < 0 || t->shape.rank > TPF_MAX_RANK)
		return -1;
	r = t->shape.rank;
	for (int i = 0; i < r; i++) {
		const struct tpf_dim *d = &t->shape.dims[i];
		if (!d->param && d->value >= 0)
			dims[i] = d->value;
		else if (bind)
			dims[i] = sym_value(e, d->param && *d->param ? d->param : NULL);
		else
			dims[i] = -1;
	}
	return r;
}

static enum tpf_dtype value_dtype(const struct tpf_value *v)
{
	if (v->type.kind == TPF_TYPE_TENSOR && v->type.dtype)
		return v->type.dtype;
	if (v->init)
		return v->init->dtype;
	return tpf_value_dtype(v);
}

static int seed_value(struct sh_eval *e, struct tpf_value *v)
{
	int64_t dims[TPF_MAX_RANK], vals[SH_MAX_VALS];
	int r, nv = -1;

	if (v->init && !v->is_graph_input) {
		const struct tpf_tensor *t = v->init;
		if (t->rank < 0 || t->rank > TPF_MAX_RANK)
			return set_fact(e, &e->f[v->id], t->dtype, -1, NULL, -1, NULL);
		nv = tensor_ints(t, vals);
		return set_fact(e, &e->f[v->id], t->dtype, t->rank, t->dims, nv, vals);
	}
	r = declared_dims(e, v, dims, 1);
	if (r < 0 && v->init) {
		r = v->init->rank;
		copy_dims(dims, v->init->dims, r);
	}
	return set_fact(e, &e->f[v->id], value_dtype(v), r, dims, -1, NULL);
}

/* Ops whose output 0 has input 0's shape: the sharder's unary rules and
 * the ops along an axis that keep it (Softmax and friends, not TopK),
 * CumSum and Trilu. */
static int keeps_shape(const struct tpf_node *n)
{
	switch (tpf_node_shard_rule(n, NULL)) {
	case TPF_SHARD_RULE_UNARY:
	case TPF_SHARD_RULE_CUMSUM:
	case TPF_SHARD_RULE_TRILU:
		return 1;
	case TPF_SHARD_RULE_ALONG_AXIS:
		return n->op != TPF_OP_TOPK;
	default:
		return 0;
	}
}

/* Shapes the op records may not give: ops without a record, by their
 * sharding rule (unary and broadcast ones), and a scatter whose record
 * stopped at an error. */
static int fallback_shape(const struct tpf_node *n, size_t j, const struct sh_fact *const *in,
			  int64_t *dims)
{
	if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
		return -1;
	if (j == 0 && keeps_shape(n) && in[0] && in[0]->rank >= 0 && n->n_inputs >= 1) {
		copy_dims(dims, in[0]->dims, in[0]->rank);
		return in[0]->rank;
	}
	if (j == 0 && tpf_node_shard_rule(n, NULL) == TPF_SHARD_RULE_BROADCAST) {
		int r = 0;
		for (size_t i = 0; i < n->n_inputs; i++) {
			if (!in[i] || in[i]->rank < 0 || in[i]->rank > TPF_MAX_RANK)
				return -1;
			if (in[i]->rank > r)
				r = in[i]->rank;
		}
		for (int a = 0; a < r; a++) {
			int64_t d = 1;
			for (size_t i = 0; i < n->n_inputs; i++) {
				int k = a - (r - in[i]->rank);
				int64_t x = k >= 0 ? in[i]->dims[k] : 1;
				if (x < 0) {
					d = -1;
					break;
				}
				if (x != 1) {
					if (d != 1 && d != x)
						return -1;
					d = x;
				}
			}
			dims[a] = d;
		}
		return r;
	}
	if (j == 0 && (n->op == TPF_OP_SCATTER_ND || n->op == TPF_OP_SCATTER_ELEMENTS) && in[0] &&
	    in[0]->rank >= 0) {
		copy_dims(dims, in[0]->dims, in[0]->rank);
		return in[0]->rank;
	}
	return -1;
}

/* Runs n's record (tpf_op_infer, every dim concrete) on its inputs' facts:
 * types holds n_inputs input types, then the output types it writes. */
static enum tpf_status record_infer(const struct tpf_node *n, const struct sh_fact *const *in,
				    struct tpf_op_type *types, int64_t opset, int64_t world)
{
	size_t ni = n->n_inputs, no = n->n_outputs;
	struct tpf_shape_call c;

	for (size_t i = 0; i < ni; i++) {
		struct tpf_op_type *t = &types[i];
		const struct sh_fact *f = in[i];
		tpf_op_type_unknown(t);
		if (!f) {
			t->present = 0;
			continue;
		}
		t->dtype = f->dtype;
		if (f->rank >= 0 && f->rank <= TPF_MAX_RANK) {
			t->rank = f->rank;
			for (int k = 0; k < f->rank; k++)
				t->dims[k] = (struct tpf_dim){f->dims[k] >= 0 ? f->dims[k] : -1, NULL, NULL};
		}
		if (f->nvals >= 0 && f->nvals <= TPF_MAX_VALUES) {
			/* the records read INT64_MIN as an unknown element; a Slice
			 * bound of INT64_MIN (dynamo's `[:-2]`) clamps as the next
			 * number does */
			int bound = sh_op(n, TPF_OP_SLICE) && (i == 1 || i == 2);
			t->n_values = f->nvals;
			for (int k = 0; k < f->nvals; k++)
				t->values[k] = (struct tpf_dim){
					bound && f->vals[k] == INT64_MIN ? INT64_MIN + 1 : f->vals[k], NULL,
					NULL};
		}
	}
	for (size_t j = 0; j < no; j++)
		tpf_op_type_unknown(&types[ni + j]);
	if (n->op == TPF_OP_UNKNOWN || tpf_op_has_trait(n->op, TPF_OP_TRAIT_CONTROL_FLOW))
		return TPF_OK;
	tpf_shape_call_init(&c, n, TPF_SHAPE_CONCRETE, types);
	c.opset = opset;
	c.world = world;
	return tpf_op_infer(&c);
}

/* The elements the record gave output type t (of dtype dt, fact of): the
 * count, or -1 unless every one is known and they are all of it. */
static int record_values(const struct tpf_op_type *t, enum tpf_dtype dt, const struct sh_fact *of,
			 int64_t *vals)
{
	int nv = t->n_values;

	if (nv < 0 || !is_int_dtype(dt))
		return -1;
	for (int k = 0; k < nv; k++) {
		if (t->values[k].param || t->values[k].value < 0)
			return -1;
		vals[k] = t->values[k].value;
	}
	return of->rank >= 0 && sh_numel(of) != nv ? -1 : nv;
}

int sh_eval_ints(const struct tpf_node *n, size_t out, const struct sh_fact *const *in,
		 const struct sh_fact *of, int64_t opset, int64_t *vals)
{
	struct tpf_op_type *types = tpf_calloc(n->n_inputs + n->n_outputs + 1, sizeof(*types));
	int nv = -1;

	if (types && record_infer(n, in, types, opset, 1) == TPF_OK && out < n->n_outputs) {
		const struct tpf_op_type *t = &types[n->n_inputs + out];
		nv = record_values(t, t->dtype ? t->dtype : of->dtype, of, vals);
	}
	tpf_free(types);
	return nv >= 0 ? nv : sh_interp(n, out, in, of, vals);
}

static int eval_node(struct sh_eval *e, struct tpf_node *n)
{
	size_t ni = n->n_inputs, no = n->n_outputs;
	struct tpf_op_type *types;
	const struct sh_fact **inf;
	int st = 0;

	types = tpf_calloc(ni + no + 1, sizeof(*types));
	inf = tpf_calloc(ni + 1, sizeof(*inf));
	if (!types || !inf) {
		tpf_free(types);
		tpf_free(inf);
		return -1;
	}
	for (size_t i = 0; i < ni; i++)
		inf[i] = n->inputs[i] ? sh_eval_fact(e, n->inputs[i]) : NULL;
	if (record_infer(n, inf, types, e->opset, e->world) == TPF_ERR_NOMEM)
		st = -1;
	for (size_t j = 0; j < no && !st; j++) {
		struct tpf_value *v = n->outputs[j];
		const struct tpf_op_type *t = &types[ni + j];
		int64_t dims[TPF_MAX_RANK], decl[TPF_MAX_RANK], vals[SH_MAX_VALS];
		int r = -1, dr, nv = -1;
		struct sh_fact tmp;
		enum tpf_dtype dt;

		if (!v || v->id >= e->n)
			continue;
		if (t->rank >= 0) {
			r = t->rank;
			for (int k = 0; k < r; k++)
				dims[k] = !t->dims[k].param && t->dims[k].value >= 0 ? t->dims[k].value : -1;
		} else {
			r = fallback_shape(n, j, inf, dims);
		}
		dr = declared_dims(e, v, decl, 0);
		if (r < 0 && dr >= 0) {
			r = dr;
			copy_dims(dims, decl, r);
		} else if (r >= 0 && dr == r) {
			for (int k = 0; k < r; k++)
				if (dims[k] < 0)
					dims[k] = decl[k];
		}
		dt = t->dtype ? t->dtype : value_dtype(v);
		if (sh_op(n, TPF_OP_CONSTANT)) {
			const struct tpf_tensor *ct = tpf_value_constant(v);
			if (ct) {
				r = ct->rank;
				copy_dims(dims, ct->dims, r);
				dt = ct->dtype;
				nv = tensor_ints(ct, vals);
			}
		} else {
			tmp.rank = r;
			tmp.dims = dims;
			tmp.dtype = dt;
			tmp.nvals = -1;
			tmp.vals = NULL;
			nv = record_values(t, dt, &tmp, vals);
			if (nv < 0)
				nv = sh_interp(n, j, inf, &tmp, vals);
		}
		if (set_fact(e, &e->f[v->id], dt, r, dims, nv, vals))
			st = -1;
	}
	tpf_free(types);
	tpf_free(inf);
	return st;
}

enum tpf_status sh_eval_run(struct sh_eval *e, struct tpf_graph *g, int64_t opset,
			    int64_t world, const struct sh_eval *like)
{
	memset(e, 0, sizeof(*e));
	e->world = world;
	e->g = g;
	e->n = g->n_values;
	e->opset = opset;
	e->arena = tpf_arena_create();
	e->f = tpf_calloc(e->n ? e->n : 1, sizeof(*e->f));
	if (!e->arena || !e->f)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < e->n; i++) {
		e->f[i].rank = -1;
		e->f[i].nvals = -1;
	}
	if (like) {
		for (size_t i = 0; i < like->n_syms; i++) {
			if (sym_value(e, like->sym_names[i]) < 0)
				return TPF_ERR_NOMEM;
			e->sym_values[e->n_syms - 1] = like->sym_values[i];
		}
		e->next_prime = like->next_prime;
	}
	for (size_t i = 0; i < g->n_inputs; i++)
		if (g->inputs[i] && g->inputs[i]->id < e->n && seed_value(e, g->inputs[i]))
			return TPF_ERR_NOMEM;
	for (size_t i = 0; i < g->n_initializers; i++)
		if (g->initializers[i] && g->initializers[i]->id < e->n &&
		    seed_value(e, g->initializers[i]))
			return TPF_ERR_NOMEM;
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (eval_node(e, n))
			return TPF_ERR_NOMEM;
	return TPF_OK;
}

void sh_eval_free(struct sh_eval *e)
{
	if (!e)
		return;
	tpf_free(e->f);
	tpf_free(e->sym_names);
	tpf_free(e->sym_values);
	tpf_arena_free(e->arena);
	memset(e, 0, sizeof(*e));
}
