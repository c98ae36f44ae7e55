/* SPDX-License-Identifier: MIT */
/*
 * The verifier's checks of one node against its op record (ir/ops/): arity,
 * attribute kinds, names, required attributes and allowed values, type
 * constraints, and the shapes and output types the op's shape function gives
 * for the declared input types.
 */
#include "verify-private.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ helpers */

static const struct tpf_value *input_at(const struct tpf_node *n, size_t i)
{
	return i < n->n_inputs && n->inputs ? n->inputs[i] : NULL;
}

static const struct tpf_value *output_at(const struct tpf_node *n, size_t i)
{
	return i < n->n_outputs && n->outputs ? n->outputs[i] : NULL;
}

static const char *attr_kind_name(enum tpf_attr_kind k)
{
	static const char *const names[TPF_ATTR_KIND_COUNT] = {
	    "UNDEFINED",      "FLOAT",      "INT",         "STRING",  "TENSOR", "GRAPH",
	    "FLOATS",         "INTS",       "STRINGS",     "TENSORS", "GRAPHS", "SPARSE_TENSOR",
	    "SPARSE_TENSORS", "TYPE_PROTO", "TYPE_PROTOS",
	};

	if ((int)k < 0 || k >= TPF_ATTR_KIND_COUNT)
		return "invalid";
	return names[k];
}

/* Kinds and pointers of every attribute, names unique.  Returns 0 when the
 * attributes can be looked up by name (every name present). */
int verify_node_attrs(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n)
{
	struct name_set names = {0};
	size_t i, j;
	int use_set = n->n_attrs > 16;

	int unnamed = 0;

	if (n->n_attrs && !n->attrs) {
		verify_node_error(c, s, n, "has %zu attributes but no attribute array", n->n_attrs);
		return -1;
	}
	if (use_set && verify_name_set_init(&names, n->n_attrs)) {
		verify_oom(c);
		return -1;
	}
	for (i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];
		int bad = 0;

		if (!a->name || !*a->name) {
			verify_node_error(c, s, n, "attribute %zu has no name", i);
			unnamed |= !a->name;
			continue;
		}
		if (use_set) {
			if (verify_name_set_add(&names, a->name, a))
				verify_node_error(c, s, n, "attribute '%s' appears more than once",
				                  a->name);
		} else {
			for (j = 0; j < i; j++)
				if (n->attrs[j].name && strcmp(n->attrs[j].name, a->name) == 0) {
					verify_node_error(c, s, n,
					                  "attribute '%s' appears more than once",
					                  a->name);
					break;
				}
		}
		if (a->ref_attr_name) {
			if (!c->in_function)
				verify_node_error(
				    c, s, n,
				    "attribute '%s' refers to caller attribute '%s' outside a "
				    "function",
				    a->name, a->ref_attr_name);
			continue;
		}
		switch (a->kind) {
		case TPF_ATTR_FLOAT:
		case TPF_ATTR_INT:
			break;
		case TPF_ATTR_STRING:
			bad = !a->s && a->s_len;
			break;
		case TPF_ATTR_TENSOR:
			bad = !a->t;
			break;
		case TPF_ATTR_GRAPH:
			bad = !a->g;
			break;
		case TPF_ATTR_FLOATS:
			bad = a->n && !a->floats;
			break;
		case TPF_ATTR_INTS:
			bad = a->n && !a->ints;
			break;
		case TPF_ATTR_STRINGS:
			bad = a->n && !a->strings;
			break;
		case TPF_ATTR_TENSORS:
			bad = a->n && !a->tensors;
			if (!bad)
				for (j = 0; j < a->n; j++)
					bad |= !a->tensors[j];
			break;
		case TPF_ATTR_GRAPHS:
			bad = a->n && !a->graphs;
			if (!bad)
				for (j = 0; j < a->n; j++)
					bad |= !a->graphs[j];
			break;
		case TPF_ATTR_SPARSE_TENSOR:
		case TPF_ATTR_TYPE_PROTO:
			break;
		case TPF_ATTR_SPARSE_TENSORS:
		case TPF_ATTR_TYPE_PROTOS:
			bad = a->n && !a->blobs;
			break;
		default:
			verify_node_error(c, s, n, "attribute '%s' has invalid kind %d", a->name,
			                  (int)a->kind);
			continue;
		}
		if (bad)
			verify_node_error(c, s, n, "attribute '%s' (%s) has no value", a->name,
			                  attr_kind_name(a->kind));
	}
	if (use_set)
		verify_name_set_free(&names);
	return unnamed ? -1 : 0;
}

/* --------------------------------------------------------------- the op's record
 * Arity, attributes and type constraints come from the op's record
 * (ir/ops/); shapes and the output types from its shape function, called
 * on the declared input types.  The verifier holds no per-op rules. */

static int string_allowed(const struct tpf_attr *a, const char *const *allowed)
{
	for (; *allowed; allowed++)
		if (a->s && strlen(*allowed) == a->s_len && memcmp(a->s, *allowed, a->s_len) == 0)
			return 1;
	return 0;
}

static void check_record_attrs(struct verify_ctx *c, const struct graph_state *s,
                               const struct tpf_node *n, const struct tpf_op_def *d)
{
	const struct op_attr *r;

	for (r = d->attrs; r && r->name; r++) {
		const struct tpf_attr *a = tpf_node_attr(n, r->name);

		if (!a) {
			if (r->flags & ATTR_REQUIRED)
				verify_node_error(c, s, n, "missing required attribute '%s' (%s)",
				                  r->name, attr_kind_name(r->kind));
			else if (r->required_before && c->opset > 0 &&
			         c->opset < r->required_before)
				verify_node_error(
				    c, s, n,
				    "missing required attribute '%s' before opset %" PRId64,
				    r->name, r->required_before);
			continue;
		}
		if (r->until && c->opset >= r->until)
			verify_node_error(c, s, n,
			                  "attribute '%s' is not allowed from opset %" PRId64
			                  " (the model imports opset %" PRId64 "; it is an input)",
			                  r->name, r->until, c->opset);
		if (r->since && c->opset > 0 && c->opset < r->since && is_onnx_domain(n->domain))
			verify_node_error(c, s, n,
			                  "attribute '%s' needs opset %" PRId64
			                  " (the model imports %" PRId64 ")",
			                  r->name, r->since, c->opset);
		if (a->ref_attr_name)
			continue;
		if (a->kind != r->kind) {
			verify_node_error(c, s, n, "attribute '%s' is %s; expected %s", r->name,
			                  attr_kind_name(a->kind), attr_kind_name(r->kind));
			continue;
		}
		if ((r->flags & ATTR_DTYPE) && !((r->flags & ATTR_DTYPE_ZERO) && a->i == 0) &&
		    !op_valid_dtype(a->i))
			verify_node_error(
			    c, s, n, "attribute '%s' = %" PRId64 " is not a valid tensor dtype",
			    r->name, a->i);
		if (r->allowed && !string_allowed(a, r->allowed)) {
			char list[256];
			size_t len = 0;
			const char *const *v;

			list[0] = '\0';
			for (v = r->allowed; *v && len + 32 < sizeof(list); v++)
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s\"%s\"",
				                        len ? ", " : "", *v);
			verify_node_error(c, s, n, "attribute '%s' is \"%.*s\"; expected one of %s",
			                  r->name, (int)(a->s_len < 64 ? a->s_len : 64),
			                  a->s ? a->s : "", list);
		}
	}
}

/* The declared output types against what the shape function gives. */
static void check_outputs(struct verify_ctx *c, const struct graph_state *s,
                          const struct tpf_node *n, const struct tpf_op_def *d,
                          const struct tpf_op_type *out)
{
	size_t j;
	int i;

	for (j = 0; j < n->n_outputs; j++) {
		const struct tpf_value *v = output_at(n, j);
		const struct op_operand *o = op_def_output(d, j);
		const struct tpf_op_type *want = &out[j];
		struct tpf_op_type have;
		char why[160], a[256], b[256];
		int bad = 0;

		if (!v || want->weak)
			continue;
		op_type_from_value(v, &have);
		if (have.dtype && o && o->type && o->type <= OP_MAX_TYPES &&
		    d->types[o->type].dtypes && !((d->types[o->type].dtypes >> have.dtype) & 1)) {
			verify_node_error(c, s, n, "output %zu '%s' is %s; expected %s", j, v->name,
			                  dt_name(have.dtype), d->types[o->type].expected);
		} else if (have.dtype && want->dtype && have.dtype != want->dtype &&
		           have.dtype != want->alt_dtype) {
			if (want->dtype_why)
				snprintf(why, sizeof(why), "%s", want->dtype_why);
			else if (want->dtype_from >= 0)
				snprintf(why, sizeof(why), "the dtype of input %d '%s'",
				         want->dtype_from,
				         input_at(n, (size_t)want->dtype_from)->name);
			else
				snprintf(why, sizeof(why), "its type constraint");
			if (want->alt_dtype && want->alt_dtype != want->dtype)
				verify_node_error(c, s, n,
				                  "output %zu '%s' is %s; expected %s or %s", j,
				                  v->name, dt_name(have.dtype),
				                  dt_name(want->dtype), dt_name(want->alt_dtype));
			else
				verify_node_error(
				    c, s, n, "output %zu '%s' is %s; expected %s (%s)", j, v->name,
				    dt_name(have.dtype), dt_name(want->dtype), why);
		}
		/* Declared shapes: inference reports where they contradict the
		 * inputs (exporters write loose ones); tpfuse's own ops, which
		 * only passes create, must agree here. */
		if (have.rank < 0 || want->rank < 0 || !(d->traits & TPF_OP_TRAIT_FUSED))
			continue;
		bad = have.rank != want->rank;
		for (i = 0; !bad && i < have.rank; i++)
			bad = tpf_graph_dims_equal(s->g, &have.dims[i], &want->dims[i]) ==
			      TPF_ANSWER_NO;
		if (bad) {
			struct tpf_op_type w = *want;

			have.dtype = w.dtype = TPF_DTYPE_UNDEFINED;
			verify_node_error(c, s, n,
			                  "output %zu '%s' has shape %s but its inputs give %s", j,
			                  v->name, op_type_str(&have, a, sizeof(a)) + 1,
			                  op_type_str(&w, b, sizeof(b)) + 1);
		}
	}
}

static struct tpf_op_type *node_types(struct verify_ctx *c, size_t count)
{
	if (count > c->cap_types) {
		struct tpf_op_type *t;

		if (count > SIZE_MAX / sizeof(*t)) {
			verify_oom(c);
			return NULL;
		}
		t = tpf_realloc(c->types, count * sizeof(*t));
		if (!t) {
			verify_oom(c);
			return NULL;
		}
		c->types = t;
		c->cap_types = count;
	}
	return c->types;
}

void verify_node_record(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n)
{
	const struct tpf_op_def *d = op_def(n->op);
	struct tpf_shape_call call;
	struct tpf_op_type *types;
	size_t i, count;

	check_record_attrs(c, s, n, d);
	if (n->op == TPF_OP_UNKNOWN || c->in_function ||
	    tpf_add_size(n->n_inputs, n->n_outputs, &count))
		return; /* function bodies have no types */
	types = node_types(c, count ? count : 1);
	if (!types)
		return;
	for (i = 0; i < n->n_inputs; i++)
		op_type_from_value(n->inputs[i], &types[i]);
	tpf_shape_call_init(&call, n, TPF_SHAPE_VERIFY, types);
	call.opset = c->opset;
	call.world = c->world;
	call.graph = s->g;
	call.diag = c->d;
	call.where = s->where;
	if (tpf_op_infer(&call) == TPF_ERR_INVALID)
		return;
	c->errors += call.errors;
	if (!call.errors)
		check_outputs(c, s, n, d, call.out);
}

void verify_node_arity(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n)
{
	const struct tpf_op_info *info = tpf_op_info(n->op);
	int min_in, max_in;
	size_t i;

	if (!info)
		return;
	if (!is_onnx_domain(n->domain) || !is_onnx_domain(info->domain)) {
		if (!n->domain || !info->domain || strcmp(n->domain, info->domain) != 0 ||
		    !n->op_type || strcmp(n->op_type, info->name) != 0)
			verify_node_error(c, s, n,
			                  "op is recorded as %s::%s but the node says %s::%s",
			                  info->domain, info->name, n->domain ? n->domain : "",
			                  n->op_type ? n->op_type : "");
	} else if (!n->op_type || strcmp(n->op_type, info->name) != 0) {
		verify_node_error(c, s, n, "op is recorded as %s but the node says %s", info->name,
		                  n->op_type ? n->op_type : "");
	}
	op_def_arity(op_def(n->op), c->opset, &min_in, &max_in);
	if (n->n_inputs < (size_t)min_in || (max_in >= 0 && n->n_inputs > (size_t)max_in)) {
		char opset[64] = "";

		if (min_in != info->min_inputs || max_in != info->max_inputs)
			snprintf(opset, sizeof(opset), " at opset %" PRId64, c->opset);
		if (max_in < 0)
			verify_node_error(c, s, n, "has %zu inputs; expected at least %d%s",
			                  n->n_inputs, min_in, opset);
		else if (min_in == max_in)
			verify_node_error(c, s, n, "has %zu inputs; expected %d%s", n->n_inputs,
			                  min_in, opset);
		else
			verify_node_error(c, s, n, "has %zu inputs; expected %d to %d%s",
			                  n->n_inputs, min_in, max_in, opset);
	}
	if (n->n_outputs < (size_t)info->min_outputs ||
	    (info->max_outputs >= 0 && n->n_outputs > (size_t)info->max_outputs)) {
		if (info->max_outputs < 0)
			verify_node_error(c, s, n, "has %zu outputs; expected at least %d",
			                  n->n_outputs, info->min_outputs);
		else if (info->min_outputs == info->max_outputs)
			verify_node_error(c, s, n, "has %zu outputs; expected %d", n->n_outputs,
			                  info->min_outputs);
		else
			verify_node_error(c, s, n, "has %zu outputs; expected %d to %d",
			                  n->n_outputs, info->min_outputs, info->max_outputs);
	}
	if (n->inputs)
		for (i = 0; i < n->n_inputs && i < (size_t)min_in; i++)
			if (!n->inputs[i] && !op_def_input_optional(op_def(n->op), c->opset, i))
				verify_node_error(c, s, n, "required input %zu is missing", i);
}
