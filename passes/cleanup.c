/*
 * Clean-up passes: dead code elimination, Identity removal, no-op Cast removal.
 *
 * All three walk the main graph, every nested subgraph and every function
 * body.  They change the graph only through the IR API.
 */
#include <string.h>

#include "tpf-passes.h"

#include "pass-list.h"

#define MAX_DEPTH 64

/* Calls fn on the main graph, every function body, and (recursively) every
 * subgraph of their nodes, parents before children. */
typedef enum tpf_status (*graph_fn)(struct tpf_graph *g, struct tpf_pass_context *ctx,
				    int64_t *count, struct tpf_diag *d);

static enum tpf_status walk_graph(struct tpf_graph *g, graph_fn fn, struct tpf_pass_context *ctx,
				  int64_t *count, int depth, struct tpf_diag *d)
{
	struct tpf_node *n;
	enum tpf_status st;
	size_t i, k;

	if (!g)
		return TPF_OK;
	if (depth > MAX_DEPTH)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "subgraphs nested deeper than %d", MAX_DEPTH);
	st = fn(g, ctx, count, d);
	if (st)
		return st;
	for (n = g->first; n; n = n->next) {
		for (k = 0; k < n->n_attrs; k++) {
			struct tpf_attr *a = &n->attrs[k];

			if (a->kind == TPF_ATTR_GRAPH) {
				st = walk_graph(a->g, fn, ctx, count, depth + 1, d);
				if (st)
					return st;
			} else if (a->kind == TPF_ATTR_GRAPHS && a->graphs) {
				for (i = 0; i < a->n; i++) {
					st = walk_graph(a->graphs[i], fn, ctx, count, depth + 1, d);
					if (st)
						return st;
				}
			}
		}
	}
	return TPF_OK;
}

static enum tpf_status walk_model(struct tpf_model *m, graph_fn fn, struct tpf_pass_context *ctx,
				  int64_t *count, struct tpf_diag *d)
{
	enum tpf_status st;
	size_t i;

	st = walk_graph(m->graph, fn, ctx, count, 0, d);
	for (i = 0; !st && i < m->n_functions && m->functions; i++)
		st = walk_graph(m->functions[i].body, fn, ctx, count, 0, d);
	return st;
}

/* ------------------------------------------------------------------- dce */

static int graph_is_pure(const struct tpf_graph *g, int depth);

/* Whether removing an unused node cannot change what the model does.
 * Every ONNX-domain op is side-effect free (known to tpfuse or not), and so
 * is every op of ops.def and of tpfuse's own domain.  Ops of other domains
 * that tpfuse does not know may have effects (I/O, custom collectives), so
 * they are kept.  Control flow is pure when its bodies are. */
static int node_is_pure(const struct tpf_node *n, int depth)
{
	const char *dom = n->domain ? n->domain : "";
	size_t i, k;

	if (n->op == TPF_OP_UNKNOWN && dom[0] && strcmp(dom, "ai.onnx") != 0 &&
	    strcmp(dom, TPF_DOMAIN) != 0)
		return 0;
	for (k = 0; k < n->n_attrs; k++) {
		const struct tpf_attr *a = &n->attrs[k];

		if (a->kind == TPF_ATTR_GRAPH && !graph_is_pure(a->g, depth + 1))
			return 0;
		if (a->kind == TPF_ATTR_GRAPHS)
			for (i = 0; i < a->n; i++)
				if (!a->graphs || !graph_is_pure(a->graphs[i], depth + 1))
					return 0;
	}
	return 1;
}

static int graph_is_pure(const struct tpf_graph *g, int depth)
{
	const struct tpf_node *n;

	if (!g)
		return 1;
	if (depth > MAX_DEPTH)
		return 0;
	for (n = g->first; n; n = n->next)
		if (!node_is_pure(n, depth))
			return 0;
	return 1;
}

static int node_is_dead(const struct tpf_node *n)
{
	size_t i;

	for (i = 0; i < n->n_outputs; i++)
		if (n->outputs[i] && tpf_value_use_count(n->outputs[i]) != 0)
			return 0;
	return node_is_pure(n, 0);
}

/* Takes the initializers nothing reads (and that are not graph inputs) out
 * of g, keeping the order of the others. */
static enum tpf_status drop_unused_initializers(struct tpf_graph *g, int64_t *removed)
{
	size_t i = 0;
	while (i < g->n_initializers) {
		struct tpf_value *v = g->initializers[i];
		if (v->is_graph_input || tpf_value_use_count(v) != 0) {
			i++;
			continue;
		}
		enum tpf_status st = tpf_graph_remove_initializer(g, v);
		if (st)
			return st;
		(*removed)++;
	}
	return TPF_OK;
}

static enum tpf_status dce_graph(struct tpf_graph *g, struct tpf_pass_context *ctx, int64_t *count,
				 struct tpf_diag *d)
{
	struct tpf_node *n, *prev;
	enum tpf_status st;
	int again = 1;

	/* count[0]: nodes removed, count[1]: initializers removed */
	/* Walking backwards, erasing a node frees the producers of its inputs
	 * before they are visited; repeat in case the list is not in order. */
	while (again) {
		again = 0;
		for (n = g->last; n; n = prev) {
			prev = n->prev;
			if (!node_is_dead(n))
				continue;
			st = tpf_graph_erase_node(g, n);
			if (st) {
				char buf[256];

				return tpf_diag_fail(d, st, "%s: dce could not erase it",
						     tpf_node_describe(n, buf, sizeof(buf)));
			}
			count[0]++;
			again = 1;
		}
	}
	st = drop_unused_initializers(g, &count[1]);
	if (st)
		return tpf_diag_fail(d, st, "dce: cannot remove unused initializers: %s",
				     tpf_status_name(st));
	return TPF_OK;
}

static enum tpf_status dce_run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			       struct tpf_diag *d)
{
	int64_t count[2] = {0, 0};
	enum tpf_status st;

	st = walk_model(m, dce_graph, ctx, count, d);
	tpf_pass_stats_add(ctx->stats, "dce", "nodes-removed", count[0]);
	tpf_pass_stats_add(ctx->stats, "dce", "initializers-removed", count[1]);
	*changed = count[0] || count[1];
	return st;
}

static const char *const dce_counters[] = {"nodes-removed", "initializers-removed", NULL};

const struct tpf_pass tpf_pass_dce = {
	.name = "dce",
	.summary = "remove nodes whose results are unused and initializers nothing reads",
	.run = dce_run,
	.counters = dce_counters,
};

/* ---------------------------------------------------------- node bypassing */

static int has_capture_use(const struct tpf_value *v)
{
	size_t i;

	for (i = 0; i < v->n_uses; i++)
		if (v->uses[i].index < 0)
			return 1;
	return 0;
}

/* Removes a node whose single output equals its first input, making users of
 * the output use the input.  Sets *removed when the node is gone; keeps it
 * (without error) where removal would change the graph's interface:
 *  - the output is a graph output and the input is a graph input, an
 *    initializer, an outer value, or itself a graph output;
 *  - a subgraph captures the output (or, when renaming, the input) by name.
 * When the output is a graph output fed by another node, that node's result
 * takes over the output's name. */
static enum tpf_status bypass_node(struct tpf_graph *g, struct tpf_node *n, int *removed,
				   struct tpf_diag *d)
{
	struct tpf_value *x = n->n_inputs ? n->inputs[0] : NULL;
	struct tpf_value *y = n->n_outputs == 1 ? n->outputs[0] : NULL;
	const char *name, *x_name, *tmp;
	enum tpf_status st;
	char buf[256];

	*removed = 0;
	if (!x || !y || has_capture_use(y))
		return TPF_OK;
	if (!tpf_value_is_graph_output(y)) {
		st = tpf_value_replace_uses(y, x);
		if (!st)
			st = tpf_graph_erase_node(g, n);
		if (st)
			return tpf_diag_fail(d, st, "%s: cannot bypass it",
					     tpf_node_describe(n, buf, sizeof(buf)));
		*removed = 1;
		return TPF_OK;
	}
	if (x->graph != g || x->kind != TPF_VALUE_NODE_OUTPUT || !x->producer ||
	    tpf_value_is_graph_output(x) || has_capture_use(x))
		return TPF_OK;
	name = y->name;
	x_name = x->name;
	tmp = tpf_graph_unique_name(g, "_bypassed");
	if (!tmp)
		return TPF_ERR_NOMEM;
	if (x->type.kind == TPF_TYPE_NONE && y->type.kind != TPF_TYPE_NONE) {
		st = tpf_value_copy_type(x, &y->type);
		if (st)
			return st;
	}
	/* Each step can only fail for lack of memory; undo the earlier ones
	 * (best effort) so the graph keeps its interface. */
	st = tpf_value_rename(y, tmp);
	if (st)
		goto out_fail;
	st = tpf_value_rename(x, name);
	if (st) {
		tpf_value_rename(y, name);
		goto out_fail;
	}
	st = tpf_value_replace_uses(y, x);
	if (st) {
		tpf_value_rename(x, x_name);
		tpf_value_rename(y, name);
		goto out_fail;
	}
	st = tpf_graph_erase_node(g, n);
	if (st)
		goto out_fail;
	if (!x->doc_string)
		x->doc_string = y->doc_string;
	x->has_value_info |= y->has_value_info;
	*removed = 1;
	return TPF_OK;

out_fail:
	return tpf_diag_fail(d, st, "%s: cannot bypass it", tpf_node_describe(n, buf, sizeof(buf)));
}

static enum tpf_status identity_graph(struct tpf_graph *g, struct tpf_pass_context *ctx,
				      int64_t *count, struct tpf_diag *d)
{
	struct tpf_node *n, *next;
	enum tpf_status st;
	int removed;

	for (n = g->first; n; n = next) {
		next = n->next;
		if (n->op != TPF_OP_IDENTITY)
			continue;
		st = bypass_node(g, n, &removed, d);
		if (st)
			return st;
		*count += removed;
	}
	return TPF_OK;
}

static enum tpf_status identity_run(struct tpf_model *m, struct tpf_pass_context *ctx,
				    int *changed, struct tpf_diag *d)
{
	int64_t count = 0;
	enum tpf_status st = walk_model(m, identity_graph, ctx, &count, d);

	tpf_pass_stats_add(ctx->stats, "remove-identity", "identity-removed", count);
	*changed = count != 0;
	return st;
}

static const char *const identity_counters[] = {"identity-removed", NULL};

const struct tpf_pass tpf_pass_remove_identity = {
	.name = "remove-identity",
	.summary = "bypass Identity nodes (kept where a graph output's name depends on them)",
	.run = identity_run,
	.counters = identity_counters,
};

static int cast_is_noop(const struct tpf_node *n)
{
	const struct tpf_attr *to = tpf_node_attr(n, "to");
	const struct tpf_value *x = n->n_inputs ? n->inputs[0] : NULL;
	int hops = 0;

	if (!to || to->kind != TPF_ATTR_INT || !x)
		return 0;
	while (x->kind == TPF_VALUE_OUTER && x->outer && hops++ < MAX_DEPTH)
		x = x->outer;
	return x->type.kind == TPF_TYPE_TENSOR && x->type.dtype != TPF_DTYPE_UNDEFINED &&
	       (int64_t)x->type.dtype == to->i;
}

static enum tpf_status cast_graph(struct tpf_graph *g, struct tpf_pass_context *ctx,
				  int64_t *count, struct tpf_diag *d)
{
	struct tpf_node *n, *next;
	enum tpf_status st;
	int removed;

	for (n = g->first; n; n = next) {
		next = n->next;
		if (n->op != TPF_OP_CAST || !cast_is_noop(n))
			continue;
		st = bypass_node(g, n, &removed, d);
		if (st)
			return st;
		*count += removed;
	}
	return TPF_OK;
}

static enum tpf_status cast_run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				struct tpf_diag *d)
{
	int64_t count = 0;
	enum tpf_status st = walk_model(m, cast_graph, ctx, &count, d);

	tpf_pass_stats_add(ctx->stats, "remove-noop-cast", "cast-removed", count);
	*changed = count != 0;
	return st;
}

static const char *const cast_counters[] = {"cast-removed", NULL};

const struct tpf_pass tpf_pass_remove_noop_cast = {
	.name = "remove-noop-cast",
	.summary = "bypass Cast nodes whose input already has the target dtype",
	.run = cast_run,
	.counters = cast_counters,
};

/* ---------------------------------------------------------- fold-constants */

/* Shape arithmetic that the op records compute at compile time (Shape of
 * static dims, Gather, Unsqueeze, Concat, Add, Mul, ... of them:
 * tpf_value_ints) and Constant nodes become initializers; dce then drops
 * the nodes left without users.  Only values nothing captures by name and
 * that are no graph outputs are replaced, so the interface stays; only the
 * main graph (a function body holds no initializers). */
#define FOLD_MAX 64

static int foldable_output(const struct tpf_value *v)
{
	return v && v->n_uses && !tpf_value_is_graph_output(v) && !has_capture_use(v);
}

static enum tpf_status fold_value(struct tpf_graph *g, struct tpf_value *v,
				  const struct tpf_tensor *t, int64_t *count)
{
	char base[200];
	snprintf(base, sizeof(base), "%s", v->name && *v->name ? v->name : "folded");
	const char *name = tpf_graph_unique_name(g, base);
	if (!name)
		return TPF_ERR_NOMEM;
	struct tpf_value *c = tpf_graph_add_initializer(g, name, t->dtype, t->rank, t->dims,
							t->data, t->nbytes);
	if (!c)
		return TPF_ERR_NOMEM;
	enum tpf_status st = tpf_value_replace_uses(v, c);
	if (!st)
		(*count)++;
	return st;
}

static enum tpf_status fold_graph(struct tpf_graph *g, struct tpf_pass_context *ctx,
				  int64_t *count, struct tpf_diag *d)
{
	(void)ctx;
	(void)d;
	int64_t vals[FOLD_MAX], dims[1];
	size_t n;
	enum tpf_status st;

	for (struct tpf_node *node = g->first; node; node = node->next) {
		if (node->n_outputs != 1 || !foldable_output(node->outputs[0]))
			continue;
		struct tpf_value *y = node->outputs[0];
		if (node->op == TPF_OP_CONSTANT) {
			const struct tpf_tensor *t = tpf_value_constant(y);
			if (t && t->dtype != TPF_DTYPE_STRING && t->data &&
			    (st = fold_value(g, y, t, count)))
				return st;
			continue;
		}
		if (tpf_op_has_trait(node->op, TPF_OP_TRAIT_COLLECTIVE) ||
		    tpf_op_has_trait(node->op, TPF_OP_TRAIT_CONTROL_FLOW) ||
		    node->op == TPF_OP_UNKNOWN)
			continue;
		enum tpf_dtype dt = tpf_value_dtype(y);
		if ((dt != TPF_DTYPE_INT64 && dt != TPF_DTYPE_INT32) ||
		    y->type.kind != TPF_TYPE_TENSOR || y->type.shape.rank < 0 ||
		    y->type.shape.rank > 1)
			continue;
		if (tpf_value_ints(y, vals, FOLD_MAX, &n))
			continue;
		if (y->type.shape.rank == 1 && (y->type.shape.dims[0].param ||
						y->type.shape.dims[0].value != (int64_t)n))
			continue;
		if (y->type.shape.rank == 0 && n != 1)
			continue;
		unsigned char bytes[FOLD_MAX * 8];
		for (size_t i = 0; i < n; i++) {
			if (dt == TPF_DTYPE_INT64) {
				memcpy(bytes + 8 * i, &vals[i], 8);
			} else {
				int32_t w = (int32_t)vals[i];
				memcpy(bytes + 4 * i, &w, 4);
			}
		}
		dims[0] = (int64_t)n;
		struct tpf_tensor t = {.dtype = dt, .rank = y->type.shape.rank, .dims = dims,
				       .data = bytes, .nbytes = n * (dt == TPF_DTYPE_INT64 ? 8 : 4)};
		if ((st = fold_value(g, y, &t, count)))
			return st;
	}
	return TPF_OK;
}

static enum tpf_status fold_run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				struct tpf_diag *d)
{
	int64_t count = 0;
	/* the main graph only: a function body holds no initializers */
	enum tpf_status st = m && m->graph ? fold_graph(m->graph, ctx, &count, d) : TPF_OK;

	tpf_pass_stats_add(ctx->stats, "fold-constants", "values-folded", count);
	*changed = count != 0;
	return st;
}

static const char *const fold_counters[] = {"values-folded", NULL};

const struct tpf_pass tpf_pass_fold_constants = {
	.name = "fold-constants",
	.summary = "shape arithmetic known at compile time and Constant nodes into initializers",
	.run = fold_run,
	.counters = fold_counters,
};
