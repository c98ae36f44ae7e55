/* SPDX-License-Identifier: MIT */
/*
 * Raising a model's default-domain opset (tpf_model_raise_opset): the nodes
 * whose spelling the newer opset no longer accepts are rewritten, the rest
 * stay as they are.  Between opsets 13 and 23 that is the Reduce ops'
 * `axes` attribute, an input from opset 13 (ReduceSum) or 18 (the others):
 * the attribute becomes a constant int64 initializer [n] read as input 1,
 * the node otherwise unchanged.  GroupNormalization changed its meaning at
 * opset 21 (scale and bias per channel instead of per group), so a model
 * below 21 that has one is not raised past 20.
 *
 * The raise keeps what it did, so that tpf_opset_raise_undo puts the model
 * back as it was (attributes, operand counts, initializers, the opset) when
 * the caller finds nothing to gain from it.
 */
#include <stdio.h>
#include <string.h>

#include "tpf-ir.h"

struct raised_node {
	struct tpf_node *node;
	struct tpf_value *axes; /* the initializer made from the attribute */
	struct tpf_attr attr;   /* the attribute as it was, and its place */
	size_t attr_pos;
};

struct tpf_opset_raise {
	const char *domain;
	int64_t from;
	struct raised_node *nodes;
	size_t n, cap;
};

static int onnx_domain(const char *d)
{
	return !d || !*d || !strcmp(d, "ai.onnx");
}

/* The opset from which op_type takes `axes` as an input, else 0. */
static int64_t axes_input_since(const char *op_type)
{
	static const char *const at18[] = {"ReduceMean", "ReduceMax",     "ReduceMin",
	                                   "ReduceProd", "ReduceL1",      "ReduceL2",
	                                   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
	if (!op_type)
		return 0;
	if (!strcmp(op_type, "ReduceSum"))
		return 13;
	for (size_t i = 0; i < sizeof(at18) / sizeof(at18[0]); i++)
		if (!strcmp(op_type, at18[i]))
			return 18;
	return 0;
}

static enum tpf_status remember(struct tpf_opset_raise *r, struct tpf_node *n, struct tpf_value *v,
                                const struct tpf_attr *a)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 8;
		struct raised_node *p = tpf_realloc(r->nodes, cap * sizeof(*p));
		if (!p)
			return TPF_ERR_NOMEM;
		r->nodes = p;
		r->cap = cap;
	}
	r->nodes[r->n].node = n;
	r->nodes[r->n].axes = v;
	r->nodes[r->n].attr = *a;
	r->nodes[r->n].attr_pos = (size_t)(a - n->attrs);
	r->n++;
	return TPF_OK;
}

/* Reduce(data) {axes = [..]} => Reduce(data, axes_initializer) */
static enum tpf_status axes_to_input(struct tpf_opset_raise *r, struct tpf_graph *g,
                                     struct tpf_node *n)
{
	const struct tpf_attr *a = tpf_node_attr(n, "axes");
	char base[200];
	enum tpf_status st;

	if (!a || a->kind != TPF_ATTR_INTS || n->n_inputs != 1)
		return TPF_OK;
	snprintf(base, sizeof(base), "%s_axes", n->name && *n->name ? n->name : "reduce");
	const char *nm = tpf_graph_unique_name(g, base);
	int64_t len = (int64_t)a->n;
	struct tpf_value *v =
	    nm ? tpf_graph_add_initializer(g, nm, TPF_DTYPE_INT64, 1, &len, a->ints,
	                                   a->n * sizeof(int64_t))
	       : NULL;
	if (!v)
		return TPF_ERR_NOMEM;
	if ((st = remember(r, n, v, a)) || (st = tpf_node_append_input(n, v)))
		return st;
	return tpf_node_remove_attr(n, "axes");
}

static enum tpf_status raise_graph(struct tpf_opset_raise *r, struct tpf_graph *g, int64_t to)
{
	enum tpf_status st;

	for (struct tpf_node *n = g->first; n; n = n->next) {
		int64_t since;
		if (!onnx_domain(n->domain))
			continue;
		since = axes_input_since(n->op_type);
		if (since && r->from < since && to >= since && (st = axes_to_input(r, g, n)))
			return st;
	}
	for (size_t i = 0; i < g->n_children; i++)
		if (g->children[i] && (st = raise_graph(r, g->children[i], to)))
			return st;
	return TPF_OK;
}

/* The first node of g (and its subgraphs) whose meaning changes between
 * `from` and `to`, else NULL. */
static const struct tpf_node *meaning_changes(const struct tpf_graph *g, int64_t from, int64_t to)
{
	for (const struct tpf_node *n = g->first; n; n = n->next)
		if (onnx_domain(n->domain) && n->op_type &&
		    !strcmp(n->op_type, "GroupNormalization") && from < 21 && to >= 21)
			return n;
	for (size_t i = 0; i < g->n_children; i++) {
		const struct tpf_node *n =
		    g->children[i] ? meaning_changes(g->children[i], from, to) : NULL;
		if (n)
			return n;
	}
	return NULL;
}

enum tpf_status tpf_model_raise_opset(struct tpf_model *m, int64_t to,
                                      struct tpf_opset_raise **undo, struct tpf_diag *d)
{
	const char *dom = tpf_model_opset(m, "") >= 0 ? "" : "ai.onnx";
	int64_t from = tpf_model_opset(m, dom);
	enum tpf_status st;

	*undo = NULL;
	if (from < 0 || from >= to)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "model: opset %lld cannot be raised to %lld",
		                     (long long)from, (long long)to);
	const struct tpf_node *bad = meaning_changes(m->graph, from, to);
	if (bad)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
		                     "node '%s' (%s): its meaning changes at opset 21 (scale and "
		                     "bias per channel)",
		                     bad->name ? bad->name : "", bad->op_type);
	struct tpf_opset_raise *r = tpf_malloc(sizeof(*r));
	if (!r)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "model: out of memory (opset raise)");
	memset(r, 0, sizeof(*r));
	r->domain = dom;
	r->from = from;
	*undo = r;
	if ((st = raise_graph(r, m->graph, to)) || (st = tpf_model_set_opset(m, dom, to)))
		return tpf_diag_fail(d, st, "model: out of memory (opset raise)");
	return TPF_OK;
}

enum tpf_status tpf_opset_raise_undo(struct tpf_model *m, struct tpf_opset_raise *r)
{
	enum tpf_status st;

	if (!r)
		return TPF_OK;
	for (size_t i = r->n; i-- > 0;) {
		struct tpf_node *n = r->nodes[i].node;
		struct tpf_value *v = r->nodes[i].axes;
		if (n->erased || n->n_inputs != 2 || n->inputs[1] != v || tpf_node_attr(n, "axes"))
			continue;
		/* the attribute goes back where it was among the node's attributes */
		if ((st = tpf_node_add_attr(n, &r->nodes[i].attr)) || (st = tpf_node_set_input(n, 1, NULL)))
			return st;
		size_t pos = r->nodes[i].attr_pos < n->n_attrs ? r->nodes[i].attr_pos : n->n_attrs - 1;
		struct tpf_attr a = n->attrs[n->n_attrs - 1];
		memmove(&n->attrs[pos + 1], &n->attrs[pos], (n->n_attrs - 1 - pos) * sizeof(*n->attrs));
		n->attrs[pos] = a;
		n->n_inputs = 1;
		if (!tpf_value_use_count(v) && (st = tpf_graph_remove_initializer(n->graph, v)))
			return st;
	}
	r->n = 0;
	return tpf_model_set_opset(m, r->domain, r->from);
}

void tpf_opset_raise_free(struct tpf_opset_raise *r)
{
	if (!r)
		return;
	tpf_free(r->nodes);
	tpf_free(r);
}
