/* SPDX-License-Identifier: MIT */
/*
 * Running a record's shape function (tpf_op_infer), the helpers shape
 * functions share (attributes with the record's defaults, broadcasting,
 * axes, messages), and tpf_value_dtype, which answers the passes' dtype
 * questions through the same functions.
 */
#include "op-def.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ types */

void tpf_op_type_unknown(struct tpf_op_type *t)
{
	t->present = 1;
	t->dtype = TPF_DTYPE_UNDEFINED;
	t->rank = -1;
	t->n_values = -1;
	t->alt_dtype = TPF_DTYPE_UNDEFINED;
	t->dtype_why = NULL;
	t->dtype_from = -1;
	t->weak = 0;
}

void op_type_set_rank(struct tpf_op_type *t, int rank)
{
	int i;

	t->rank = rank;
	for (i = 0; i < rank && i < TPF_MAX_RANK; i++)
		t->dims[i] = dim_unknown();
}

void op_type_shape_of(struct tpf_op_type *t, const struct tpf_op_type *x)
{
	t->rank = x->rank;
	if (x->rank > 0)
		memcpy(t->dims, x->dims, (size_t)x->rank * sizeof(*t->dims));
}

void op_type_copy_values(struct tpf_op_type *t, const struct tpf_op_type *x)
{
	t->n_values = x->n_values;
	if (x->n_values > 0)
		memcpy(t->values, x->values, (size_t)x->n_values * sizeof(*t->values));
}

int op_valid_dtype(int64_t v)
{
	return v > 0 && v < TPF_DTYPE_COUNT && tpf_dtype_is_valid((int)v) &&
	       v != TPF_DTYPE_UNDEFINED;
}

const char *op_type_str(const struct tpf_op_type *t, char *buf, size_t size)
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

static const struct tpf_value *resolve_outer(const struct tpf_value *v)
{
	int depth = 0;

	while (v && v->kind == TPF_VALUE_OUTER && v->outer && depth++ < 256)
		v = v->outer;
	return v;
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

/* Values of a small int32/int64 constant into t. */
static void read_constant(const struct tpf_value *v, struct tpf_op_type *t)
{
	const struct tpf_tensor *k = tpf_value_constant(v);
	unsigned bytes;
	int64_t numel, i;

	if (!k || !k->data)
		return;
	if (k->dtype == TPF_DTYPE_INT64)
		bytes = 8;
	else if (k->dtype == TPF_DTYPE_INT32)
		bytes = 4;
	else
		return;
	numel = tpf_tensor_numel(k);
	if (numel < 0 || numel > TPF_MAX_VALUES || (uint64_t)numel * bytes > k->nbytes)
		return;
	for (i = 0; i < numel; i++) {
		/* a value may be negative (a Reshape's -1): not an unknown dim */
		t->values[i].value = le_int((const uint8_t *)k->data + (size_t)i * bytes, bytes);
		t->values[i].param = NULL;
		t->values[i].denotation = NULL;
	}
	t->n_values = (int)numel;
}

void op_type_from_value(const struct tpf_value *v, struct tpf_op_type *t)
{
	const struct tpf_type *ty;
	int i;

	tpf_op_type_unknown(t);
	v = resolve_outer(v);
	if (!v) {
		t->present = 0;
		return;
	}
	read_constant(v, t);
	ty = &v->type;
	if (ty->kind != TPF_TYPE_TENSOR) {
		/* initializers carry their type in the tensor */
		if (v->kind == TPF_VALUE_INITIALIZER && v->init && v->init->rank >= 0 &&
		    v->init->rank <= TPF_MAX_RANK && (v->init->rank == 0 || v->init->dims)) {
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

int64_t op_model_opset(const struct tpf_model *m)
{
	int64_t v;

	if (!m)
		return -1;
	v = tpf_model_opset(m, "");
	return v < 0 ? tpf_model_opset(m, "ai.onnx") : v;
}

int64_t op_model_world(const struct tpf_model *m)
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

/* ------------------------------------------------------------------ access */

static const struct tpf_op_type absent_type = {.present = 0, .rank = -1, .n_values = -1,
					       .dtype_from = -1};

const struct tpf_op_type *op_in(const struct tpf_shape_call *c, size_t i)
{
	return i < c->n_in ? &c->in[i] : &absent_type;
}

int op_in_present(const struct tpf_shape_call *c, size_t i)
{
	return i < c->n_in && c->in[i].present;
}

struct tpf_op_type *op_out(struct tpf_shape_call *c, size_t j)
{
	return j < c->n_out ? &c->out[j] : NULL;
}

const char *op_in_name(const struct tpf_shape_call *c, size_t i)
{
	const struct tpf_value *v = i < c->node->n_inputs ? c->node->inputs[i] : NULL;

	return v && v->name ? v->name : "?";
}

void op_node_verror(struct tpf_diag *d, const struct tpf_node *n, const char *where,
		    const char *fmt, va_list ap)
{
	char desc[256], msg[1024];

	if (!d)
		return;
	tpf_node_describe(n, desc, sizeof(desc));
	vsnprintf(msg, sizeof(msg), fmt, ap);
	tpf_diag_add(d, TPF_SEV_ERROR, "%s: %s%s", desc, msg, where ? where : "");
}

void op_error(struct tpf_shape_call *c, const char *fmt, ...)
{
	va_list ap;

	c->errors++;
	va_start(ap, fmt);
	op_node_verror(c->diag, c->node, c->where, fmt, ap);
	va_end(ap);
}

/* ------------------------------------------------------------------ attributes */

/* The node's attribute `name` of `kind` into *a, else the record's default
 * into *d.  0 when neither is known (absent without a default, a reference
 * to a caller attribute in a function body, or another kind). */
static int attr_lookup(const struct tpf_shape_call *c, const char *name, enum tpf_attr_kind kind,
		       const struct tpf_attr **a, const struct op_attr **d)
{
	*a = tpf_node_attr(c->node, name);
	*d = NULL;
	if (*a)
		return !(*a)->ref_attr_name && (*a)->kind == kind;
	*d = op_def_attr(op_def(c->node->op), name);
	return *d && (*d)->kind == kind && ((*d)->flags & ATTR_DEFAULT);
}

/* op_attr_int and op_attr_float: the node's value, else the default. */
#define ATTR_READER(fn, type, kind, field)                                                         \
	int fn(const struct tpf_shape_call *c, const char *name, type *out)                       \
	{                                                                                          \
		const struct tpf_attr *a;                                                          \
		const struct op_attr *d;                                                           \
                                                                                                   \
		if (!attr_lookup(c, name, kind, &a, &d))                                           \
			return 0;                                                                  \
		*out = a ? a->field : d->field;                                                    \
		return 1;                                                                          \
	}

ATTR_READER(op_attr_int, int64_t, TPF_ATTR_INT, i)
ATTR_READER(op_attr_float, float, TPF_ATTR_FLOAT, f)

int op_attr_string(const struct tpf_shape_call *c, const char *name, const char **out)
{
	const struct tpf_attr *a;
	const struct op_attr *d;

	if (!attr_lookup(c, name, TPF_ATTR_STRING, &a, &d) ||
	    (a && (!a->s || memchr(a->s, 0, a->s_len))))
		return 0;
	*out = a ? a->s : d->s;
	return 1;
}

int op_attr_ints(const struct tpf_shape_call *c, const char *name, int64_t *out, size_t max)
{
	const struct tpf_attr *a;
	const struct op_attr *d;

	if (!attr_lookup(c, name, TPF_ATTR_INTS, &a, &d) || !a || a->n > max || (a->n && !a->ints))
		return -1;
	if (a->n)
		memcpy(out, a->ints, a->n * sizeof(*out));
	return (int)a->n;
}

int op_attr_given(const struct tpf_shape_call *c, const char *name)
{
	return tpf_node_attr(c->node, name) != NULL;
}

/* ------------------------------------------------------------------ axes, values */

int op_norm_axis(int64_t axis, int rank, int64_t *out)
{
	if (axis < -(int64_t)rank || axis >= (int64_t)rank)
		return -1;
	*out = axis < 0 ? axis + rank : axis;
	return 0;
}

int op_attr_axis(struct tpf_shape_call *c, const char *attr, int rank, int64_t *out)
{
	int64_t axis;

	if (rank < 0 || !op_attr_int(c, attr, &axis))
		return 0;
	if (op_norm_axis(axis, rank, out)) {
		op_error(c, "attribute '%s' = %" PRId64 " is out of range for rank %d", attr, axis,
			 rank);
		return -1;
	}
	return 1;
}

int op_norm_axes(struct tpf_shape_call *c, int64_t *axes, int n, int rank, const char *twice)
{
	char seen[TPF_MAX_RANK] = {0};
	int i;

	for (i = 0; i < n; i++) {
		int64_t ax;

		if (op_norm_axis(axes[i], rank, &ax)) {
			op_error(c, "axis %" PRId64 " is out of range for rank %d", axes[i], rank);
			return -1;
		}
		if (twice && seen[ax]) {
			op_error(c, "axis %" PRId64 " %s", ax, twice);
			return -1;
		}
		seen[ax] = 1;
		axes[i] = ax;
	}
	return 0;
}

int op_static_values(const struct tpf_op_type *t, int64_t *out, int max)
{
	int i;

	if (!t->present || t->n_values < 0 || t->n_values > max)
		return -1;
	for (i = 0; i < t->n_values; i++) {
		if (t->values[i].param || t->values[i].value == OP_VALUE_UNKNOWN)
			return -1;
		out[i] = t->values[i].value;
	}
	return t->n_values;
}

/* ------------------------------------------------------------------ broadcasting */

int op_broadcast_types(struct tpf_shape_call *c, const struct tpf_op_type *const *ts,
		       const size_t *labels, size_t k, struct tpf_op_type *out)
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
			if (dim_is_static(d)) {
				if (d->value == 1)
					continue;
				all_one = 0;
				if (stat && stat->value != d->value) {
					op_error(c,
						 "inputs %zu and %zu cannot broadcast: dimension %d "
						 "from the right is %" PRId64 " and %" PRId64,
						 labels[stat_from], labels[j], rank - i, stat->value,
						 d->value);
					return -1;
				}
				stat = d;
				stat_from = j;
			} else if (d->param) {
				all_one = 0;
				if (sym && op_dims_equal(c, sym, d) != TPF_ANSWER_YES) {
					/* symbols of real models are never 1 where they
					 * meet: they name one size (what onnxruntime's
					 * symbolic inference assumes too) */
					op_dims_unify(c, d, sym);
					if (op_dims_equal(c, sym, d) != TPF_ANSWER_YES)
						sym_differ = 1;
				}
				if (!sym)
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
	out->rank = rank;
	return 0;
}

int op_broadcast(struct tpf_shape_call *c, const size_t *idx, size_t k, struct tpf_op_type *out)
{
	const struct tpf_op_type *ts[OP_MAX_OPERANDS];
	size_t j, n = 0, labels[OP_MAX_OPERANDS];

	for (j = 0; j < k && n < OP_MAX_OPERANDS; j++) {
		if (!op_in(c, idx[j])->present)
			continue;
		ts[n] = op_in(c, idx[j]);
		labels[n++] = idx[j];
	}
	return op_broadcast_types(c, ts, labels, n, out);
}

int op_broadcast_all(struct tpf_shape_call *c, struct tpf_op_type *out)
{
	struct tpf_op_type acc;
	const struct tpf_op_type *pair[2] = {&acc, NULL};
	size_t i, lab[2] = {0, 0}, idx[OP_MAX_OPERANDS];

	if (c->n_in <= OP_MAX_OPERANDS) {
		for (i = 0; i < c->n_in; i++)
			idx[i] = i;
		return op_broadcast(c, idx, c->n_in, out);
	}
	/* variadic ops with many operands: fold pairwise */
	tpf_op_type_unknown(&acc);
	acc.rank = 0;
	for (i = 0; i < c->n_in; i++) {
		pair[1] = op_in(c, i);
		lab[1] = i;
		if (!pair[1]->present)
			continue;
		if (op_broadcast_types(c, pair, lab, 2, out))
			return -1;
		if (out->rank < 0)
			return 0;
		op_type_shape_of(&acc, out);
		lab[0] = i;
	}
	return 0;
}

/* ------------------------------------------------------------------ running */

void tpf_shape_call_init(struct tpf_shape_call *c, const struct tpf_node *n,
			 enum tpf_shape_mode mode, struct tpf_op_type *types)
{
	memset(c, 0, sizeof(*c));
	c->node = n;
	c->mode = mode;
	c->opset = -1;
	c->world = -1;
	c->in = types;
	c->n_in = n->n_inputs;
	c->out = types + n->n_inputs;
	c->n_out = n->n_outputs;
}

static void prefill_outputs(struct tpf_shape_call *c, const struct tpf_op_def *d)
{
	size_t i, j;

	for (j = 0; j < c->n_out; j++) {
		const struct op_operand *o = op_def_output(d, j);
		struct tpf_op_type *t = &c->out[j];

		tpf_op_type_unknown(t);
		t->present = j < c->node->n_outputs && c->node->outputs[j] != NULL;
		if (!o || !o->type)
			continue;
		/* a constraint of one dtype names it (Shape's int64, Equal's bool) */
		if (d->types[o->type].dtypes &&
		    !(d->types[o->type].dtypes & (d->types[o->type].dtypes - 1))) {
			t->dtype = (enum tpf_dtype)__builtin_ctzll(d->types[o->type].dtypes);
			continue;
		}
		for (i = 0; i < c->n_in; i++) {
			const struct op_operand *p = op_def_input(d, i);

			if (p && p->type == o->type && c->in[i].present && c->in[i].dtype) {
				t->dtype = c->in[i].dtype;
				t->dtype_from = (int)i;
				break;
			}
		}
	}
}

/* Inputs of one type constraint share one dtype; with `allowed`, one the
 * constraint allows. */
static void check_input_types(struct tpf_shape_call *c, const struct tpf_op_def *d, int allowed)
{
	size_t first[OP_MAX_TYPES + 1], i;
	int seen[OP_MAX_TYPES + 1] = {0};

	for (i = 0; i < c->n_in; i++) {
		const struct op_operand *o = op_def_input(d, i);
		const struct op_type_rule *rule;
		enum tpf_dtype dt = c->in[i].dtype;

		if (!o || !o->type || o->type > OP_MAX_TYPES || !c->in[i].present || !dt)
			continue;
		rule = &d->types[o->type];
		if (allowed && rule->dtypes && !((rule->dtypes >> dt) & 1)) {
			op_error(c, "input %zu '%s' is %s; expected %s", i, op_in_name(c, i),
				 tpf_dtype_name(dt), rule->expected);
			continue;
		}
		if (!seen[o->type]) {
			seen[o->type] = 1;
			first[o->type] = i;
		} else if (c->in[first[o->type]].dtype != dt) {
			size_t f = first[o->type];

			op_error(c, "input %zu '%s' is %s but input %zu '%s' is %s; expected the same dtype",
				 i, op_in_name(c, i), tpf_dtype_name(dt), f, op_in_name(c, f),
				 tpf_dtype_name(c->in[f].dtype));
		}
	}
}

/* The trait rules for ops without a shape function of their own. */
static void trait_shape(struct tpf_shape_call *c, const struct tpf_op_def *d)
{
	struct tpf_op_type *y = op_out(c, 0);

	if (!y)
		return;
	if (d->traits & TPF_OP_TRAIT_BROADCAST) {
		op_broadcast_all(c, y);
	} else if (d->traits & TPF_OP_TRAIT_UNARY) {
		op_type_shape_of(y, op_in(c, 0));
	}
}

enum tpf_status tpf_op_infer(struct tpf_shape_call *c)
{
	const struct tpf_op_def *d;
	size_t before;

	if (!c || !c->node || (c->n_in && !c->in) || (c->n_out && !c->out))
		return TPF_ERR_INVALID;
	before = c->errors;
	d = op_def(c->node->op);
	prefill_outputs(c, d);
	if (c->node->op == TPF_OP_UNKNOWN)
		return TPF_OK;
	/* the verifier checks the constraints; the runtime that operands agree
	 * (its kernels say which dtypes they run) */
	if (c->mode != TPF_SHAPE_INFER)
		check_input_types(c, d, c->mode == TPF_SHAPE_VERIFY);
	if (d->shape)
		d->shape(c);
	else
		trait_shape(c, d);
	return c->errors > before ? TPF_ERR_VERIFY : TPF_OK;
}

/* ------------------------------------------------------------------ dtype questions */

#define DTYPE_MAX_DEPTH 16

static enum tpf_dtype dtype_at(const struct tpf_value *v, int depth)
{
	const struct tpf_node *n;
	struct tpf_op_type *types = NULL;
	struct tpf_shape_call c;
	enum tpf_dtype dt = TPF_DTYPE_UNDEFINED;
	size_t i, count;

	v = resolve_outer(v);
	if (!v)
		return TPF_DTYPE_UNDEFINED;
	if (v->type.kind == TPF_TYPE_TENSOR && v->type.dtype != TPF_DTYPE_UNDEFINED &&
	    tpf_dtype_is_valid((int)v->type.dtype))
		return v->type.dtype;
	if (v->init)
		return v->init->dtype;
	n = v->producer;
	if (v->kind != TPF_VALUE_NODE_OUTPUT || !n || n->op == TPF_OP_UNKNOWN ||
	    depth > DTYPE_MAX_DEPTH || v->producer_index < 0 ||
	    (size_t)v->producer_index >= n->n_outputs)
		return TPF_DTYPE_UNDEFINED;
	if (tpf_add_size(n->n_inputs, n->n_outputs, &count) || !count ||
	    !(types = tpf_calloc(count, sizeof(*types))))
		return TPF_DTYPE_UNDEFINED;
	for (i = 0; i < n->n_inputs; i++) {
		tpf_op_type_unknown(&types[i]);
		types[i].present = n->inputs[i] != NULL;
		if (n->inputs[i]) {
			read_constant(n->inputs[i], &types[i]);
			types[i].dtype = dtype_at(n->inputs[i], depth + 1);
		}
	}
	tpf_shape_call_init(&c, n, TPF_SHAPE_VERIFY, types);
	c.graph = n->graph;
	if (tpf_op_infer(&c) != TPF_ERR_INVALID)
		dt = c.out[v->producer_index].dtype;
	tpf_free(types);
	return dt;
}

enum tpf_dtype tpf_value_dtype(const struct tpf_value *v)
{
	return dtype_at(v, 0);
}

/* ------------------------------------------------------------------ value questions */

/* Nodes a value question may evaluate: shape arithmetic is shallow, and a
 * graph that is not must not make a question expensive. */
#define VALUES_BUDGET 256

static int is_index_type(enum tpf_dtype t)
{
	return t == TPF_DTYPE_INT64 || t == TPF_DTYPE_INT32;
}

/* t: v's type with its values when they are known. */
static void values_at(const struct tpf_value *v, int depth, int *budget, struct tpf_op_type *t)
{
	const struct tpf_node *n;
	struct tpf_op_type *types;
	struct tpf_shape_call c;
	size_t i, count;

	op_type_from_value(v, t);
	v = resolve_outer(v);
	if (!v || t->n_values >= 0 || depth > DTYPE_MAX_DEPTH || *budget <= 0)
		return;
	if (!t->dtype)
		t->dtype = tpf_value_dtype(v);
	n = v->producer;
	if (!is_index_type(t->dtype) || v->kind != TPF_VALUE_NODE_OUTPUT || !n ||
	    n->op == TPF_OP_UNKNOWN || v->producer_index < 0 ||
	    (size_t)v->producer_index >= n->n_outputs ||
	    tpf_add_size(n->n_inputs, n->n_outputs, &count) ||
	    !(types = tpf_malloc((count ? count : 1) * sizeof(*types))))
		return;
	(*budget)--;
	for (i = 0; i < n->n_inputs; i++) {
		if (n->inputs[i])
			values_at(n->inputs[i], depth + 1, budget, &types[i]);
		else
			op_type_from_value(NULL, &types[i]);
	}
	tpf_shape_call_init(&c, n, TPF_SHAPE_VERIFY, types);
	c.graph = n->graph;
	if (tpf_op_infer(&c) == TPF_OK) {
		const struct tpf_op_type *o = &c.out[v->producer_index];

		/* what the value's own type leaves open (no inference yet) */
		if (t->rank < 0 && o->rank >= 0)
			op_type_shape_of(t, o);
		if (o->n_values >= 0) {
			t->n_values = o->n_values;
			memcpy(t->values, o->values, (size_t)o->n_values * sizeof(o->values[0]));
		}
	}
	tpf_free(types);
}

int tpf_value_ints(const struct tpf_value *v, int64_t *out, size_t max, size_t *count)
{
	struct tpf_op_type *t;
	int budget = VALUES_BUDGET, n;

	if (!v || !out || !count || !(t = tpf_malloc(sizeof(*t))))
		return -1;
	values_at(v, 0, &budget, t);
	n = op_static_values(t, out, max < TPF_MAX_VALUES ? (int)max : TPF_MAX_VALUES);
	tpf_free(t);
	if (n < 0)
		return -1;
	*count = (size_t)n;
	return 0;
}
