/* SPDX-License-Identifier: MIT */
/*
 * Shape and dtype inference: one forward pass over the node list that calls
 * each node's shape function (its op record's, ir/ops/) on the input types
 * and the values of small integer inputs, and merges the result into the
 * outputs.  Shape arithmetic folds: the values a shape function computes
 * (Shape's dims, a Concat of them, ...) are handed to the nodes that read
 * them, so a Reshape whose target is computed from shapes gets its dims.
 *
 * An output keeps what it already knows: a declared dtype or static dim is
 * never replaced, a symbolic dim is never replaced, an unknown dim or dtype
 * is filled in.  A declared symbolic dim joins the class of what the inputs
 * give (tpf_graph_dims_unify), so an exporter's invented dim name answers
 * as equal to the input's.  When the inferred type contradicts the declared
 * one, or the inputs contradict each other, the node is named in an error
 * and the pass goes on.  Ops tpfuse does not know leave their outputs as
 * they are.
 */
#include "ops/op-def.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INFER_MAX_DEPTH 256

/* Values of a small integer tensor, computed by a shape function. */
struct known_values {
	int n;
	struct tpf_dim v[TPF_MAX_VALUES];
};

struct infer_ctx {
	struct tpf_diag *d;
	const struct tpf_model *m; /* may be NULL */
	int64_t opset;             /* ONNX default domain; -1 unknown */
	int64_t world;             /* tp_world_size; -1 unknown */
	size_t errors;
	int nomem;
	struct tpf_op_type *types; /* scratch: one node's operand types */
	size_t cap_types;
};

/* Per graph: values computed so far, by value id. */
struct graph_values {
	struct known_values **by_id;
	size_t n;
};

static void node_error(struct infer_ctx *c, const struct tpf_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void node_error(struct infer_ctx *c, const struct tpf_node *n, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	op_node_verror(c->d, n, NULL, fmt, ap);
	va_end(ap);
	c->errors++;
}

/* ------------------------------------------------------------------ outputs */

static int dim_static(const struct tpf_dim *d)
{
	return !d->param && d->value >= 0;
}

/* Merges the inferred type t into output j of n. */
static void set_output(struct infer_ctx *c, const struct tpf_node *n, size_t j,
                       const struct tpf_op_type *t)
{
	struct tpf_value *v = j < n->n_outputs ? n->outputs[j] : NULL;
	struct tpf_op_type res, cur;
	struct tpf_type ty;
	int changed = 0, conflict = 0, i;

	if (!v || (t->dtype == TPF_DTYPE_UNDEFINED && t->rank < 0))
		return;
	if (v->type.kind == TPF_TYPE_OPAQUE) {
		/* a sequence, map, optional or sparse type (or a tensor of an
		 * element type newer than the IR): where the inputs give a tensor
		 * of a known dtype, that declaration contradicts them (and would
		 * hide every shape downstream from the checks) */
		if (t->dtype != TPF_DTYPE_UNDEFINED && !t->weak) {
			char want[256];

			node_error(c, n, "output %zu '%s' is declared a non-tensor type (sequence, "
			           "map, optional or sparse) but its inputs give the tensor %s",
			           j, v->name, op_type_str(t, want, sizeof(want)));
		}
		return;
	}
	op_type_from_value(v, &cur);
	if (v->type.kind != TPF_TYPE_TENSOR) {
		cur.dtype = TPF_DTYPE_UNDEFINED;
		cur.rank = -1;
	}
	if (t->weak && (cur.dtype || cur.rank >= 0))
		return;
	res = cur;
	if (!cur.dtype) {
		res.dtype = t->dtype;
		changed |= t->dtype != TPF_DTYPE_UNDEFINED;
	} else if (t->dtype && t->dtype != cur.dtype && cur.dtype != t->alt_dtype) {
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

		node_error(c, n, "output %zu '%s' has type %s but its inputs give %s", j, v->name,
		           op_type_str(&cur, have, sizeof(have)), op_type_str(t, want, sizeof(want)));
		return;
	}
	/* a declared name for a dim the inputs determine is that dim */
	if (cur.rank >= 0 && cur.rank == t->rank)
		for (i = 0; i < cur.rank; i++)
			if ((cur.dims[i].param || t->dims[i].param) &&
			    tpf_graph_dims_unify(v->graph, &cur.dims[i], &t->dims[i]) == TPF_ERR_NOMEM)
				c->nomem = 1;
	if (!changed)
		return;
	memset(&ty, 0, sizeof(ty));
	ty.kind = TPF_TYPE_TENSOR;
	ty.dtype = res.dtype;
	ty.shape.rank = res.rank;
	ty.shape.dims = res.rank > 0 ? res.dims : NULL;
	for (i = 0; i < res.rank; i++)
		res.dims[i].denotation = NULL;
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

/* ------------------------------------------------------------------ nodes */

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

static struct tpf_op_type *node_types(struct infer_ctx *c, size_t count)
{
	if (count > c->cap_types) {
		struct tpf_op_type *t;

		if (count > SIZE_MAX / sizeof(*t)) {
			c->nomem = 1;
			return NULL;
		}
		t = tpf_realloc(c->types, count * sizeof(*t));
		if (!t) {
			c->nomem = 1;
			return NULL;
		}
		c->types = t;
		c->cap_types = count;
	}
	return c->types;
}

static void infer_node(struct infer_ctx *c, struct tpf_graph *g, struct graph_values *gv,
                       const struct tpf_node *n, int depth)
{
	struct tpf_shape_call call;
	struct tpf_op_type *types;
	size_t i, count;

	/* bodies first: control flow reads their output types */
	infer_subgraphs(c, n, depth);
	if (n->op == TPF_OP_UNKNOWN || tpf_add_size(n->n_inputs, n->n_outputs, &count))
		return;
	types = node_types(c, count ? count : 1);
	if (!types)
		return;
	for (i = 0; i < n->n_inputs; i++) {
		const struct tpf_value *v = n->inputs[i];

		op_type_from_value(v, &types[i]);
		if (v && v->graph == g && v->id < gv->n && gv->by_id[v->id]) {
			const struct known_values *k = gv->by_id[v->id];

			types[i].n_values = k->n;
			memcpy(types[i].values, k->v, (size_t)k->n * sizeof(k->v[0]));
		}
	}
	tpf_shape_call_init(&call, n, TPF_SHAPE_INFER, types);
	call.opset = c->opset;
	call.world = c->world;
	call.graph = g;
	call.diag = c->d;
	if (tpf_op_infer(&call) == TPF_ERR_INVALID)
		return;
	c->errors += call.errors;
	for (i = 0; i < n->n_outputs; i++) {
		const struct tpf_value *v = n->outputs[i];
		const struct tpf_op_type *t = &call.out[i];

		if (!v)
			continue;
		set_output(c, n, i, t);
		if (t->n_values >= 0 && v->graph == g && v->id < gv->n && !gv->by_id[v->id]) {
			struct known_values *k = tpf_malloc(sizeof(*k));

			if (!k) {
				c->nomem = 1;
				return;
			}
			k->n = t->n_values;
			memcpy(k->v, t->values, (size_t)t->n_values * sizeof(t->values[0]));
			gv->by_id[v->id] = k;
		}
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

/* Initializers know their type from the tensor. */
static void type_initializers(struct infer_ctx *c, struct tpf_graph *g)
{
	struct tpf_dim dims[TPF_MAX_RANK];
	size_t i;
	int k;

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
		for (k = 0; k < t->rank; k++)
			dims[k] = (struct tpf_dim){t->dims[k] < 0 ? -1 : t->dims[k], NULL, NULL};
		memset(&ty, 0, sizeof(ty));
		ty.kind = TPF_TYPE_TENSOR;
		ty.dtype = t->dtype;
		ty.shape.rank = t->rank;
		ty.shape.dims = t->rank > 0 ? dims : NULL;
		if (tpf_value_copy_type(v, &ty) != TPF_OK)
			c->nomem = 1;
	}
}

static enum tpf_status infer_graph(struct infer_ctx *c, struct tpf_graph *g, int depth)
{
	struct graph_values gv = {0};
	const struct tpf_node *n;
	size_t i, count = 0;

	if (!g || depth > INFER_MAX_DEPTH)
		return TPF_ERR_INVALID;
	type_initializers(c, g);
	gv.n = g->n_values;
	gv.by_id = tpf_calloc(gv.n ? gv.n : 1, sizeof(*gv.by_id));
	if (!gv.by_id) {
		c->nomem = 1;
		return TPF_ERR_NOMEM;
	}
	for (n = g->first; n && !c->nomem; n = n->next) {
		/* a corrupt list must not hang the pass */
		if (++count > g->n_nodes + 1)
			break;
		if (n->erased || !node_operands_sane(n))
			continue;
		infer_node(c, g, &gv, n, depth);
	}
	for (i = 0; i < gv.n; i++)
		tpf_free(gv.by_id[i]);
	tpf_free(gv.by_id);
	if (c->nomem)
		return TPF_ERR_NOMEM;
	return TPF_OK;
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
	c.opset = op_model_opset(m);
	c.world = op_model_world(m);
	st = infer_graph(&c, g, 0);
	tpf_free(c.types);
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
