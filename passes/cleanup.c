/*
 * Clean-up passes: dead code elimination, Identity removal, no-op Cast
 * removal, constant folding and common-subexpression elimination.
 *
 * All but fold-constants (the main graph) walk the main graph, every nested
 * subgraph and every function body.  They change the graph only through
 * the IR API.
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

/* Runs a clean-up with one counter over the model's graphs and records the
 * count under the pass's name. */
static enum tpf_status run_counted(struct tpf_model *m, graph_fn fn, struct tpf_pass_context *ctx,
				   const char *pass, const char *counter, int *changed,
				   struct tpf_diag *d)
{
	int64_t count = 0;
	enum tpf_status st = walk_model(m, fn, ctx, &count, d);

	if (ctx && ctx->stats)
		tpf_pass_stats_add(ctx->stats, pass, counter, count);
	if (changed)
		*changed = count > 0;
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

/* Bypasses every node of g that `drop` picks. */
static enum tpf_status bypass_nodes(struct tpf_graph *g, int (*drop)(const struct tpf_node *),
				    int64_t *count, struct tpf_diag *d)
{
	struct tpf_node *n, *next;
	enum tpf_status st;
	int removed;

	for (n = g->first; n; n = next) {
		next = n->next;
		if (!drop(n))
			continue;
		st = bypass_node(g, n, &removed, d);
		if (st)
			return st;
		*count += removed;
	}
	return TPF_OK;
}

static int is_identity(const struct tpf_node *n)
{
	return n->op == TPF_OP_IDENTITY;
}

static enum tpf_status identity_graph(struct tpf_graph *g, struct tpf_pass_context *ctx,
				      int64_t *count, struct tpf_diag *d)
{
	(void)ctx;
	return bypass_nodes(g, is_identity, count, d);
}

static enum tpf_status identity_run(struct tpf_model *m, struct tpf_pass_context *ctx,
				    int *changed, struct tpf_diag *d)
{
	return run_counted(m, identity_graph, ctx, "remove-identity", "identity-removed", changed, d);
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

static int is_noop_cast(const struct tpf_node *n)
{
	return n->op == TPF_OP_CAST && cast_is_noop(n);
}

static enum tpf_status cast_graph(struct tpf_graph *g, struct tpf_pass_context *ctx,
				  int64_t *count, struct tpf_diag *d)
{
	(void)ctx;
	return bypass_nodes(g, is_noop_cast, count, d);
}

static enum tpf_status cast_run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				struct tpf_diag *d)
{
	return run_counted(m, cast_graph, ctx, "remove-noop-cast", "cast-removed", changed, d);
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

/* ------------------------------------------------------------------- cse */

/* Common-subexpression elimination: a node that computes what an earlier
 * node of its graph computes (same op, same input values, same attributes)
 * is dropped and its users read the earlier node's outputs.  One sweep in
 * graph order per graph: inputs replaced earlier make their consumers
 * equal in turn, so chains of duplicates fold in the same sweep.
 *
 * Left alone: ops with effects or randomness (collectives, ops of unknown
 * non-ONNX domains, Random*, Multinomial, Bernoulli, Dropout), nodes with
 * subgraphs or captures, and attributes that cannot be compared (graphs,
 * sparse tensors, type protos, tensors without loaded bytes).  A duplicate
 * whose output is a graph output or captured by a subgraph stays (names
 * are the interface); it may be the node others are merged into. */

static int cse_skip_op(const struct tpf_node *n)
{
	if (tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE) ||
	    tpf_op_has_trait(n->op, TPF_OP_TRAIT_CONTROL_FLOW) || n->n_implicit)
		return 1;
	if (n->op == TPF_OP_UNKNOWN && n->domain && *n->domain && strcmp(n->domain, "ai.onnx") != 0)
		return 1;
	if (tpf_node_is_random(n))
		return 1;
	for (size_t i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];
		if (a->ref_attr_name)
			continue;
		if (a->kind == TPF_ATTR_GRAPH || a->kind == TPF_ATTR_GRAPHS ||
		    a->kind == TPF_ATTR_SPARSE_TENSOR || a->kind == TPF_ATTR_SPARSE_TENSORS ||
		    a->kind == TPF_ATTR_TYPE_PROTO || a->kind == TPF_ATTR_TYPE_PROTOS ||
		    a->kind == TPF_ATTR_TENSORS)
			return 1;
		if (a->kind == TPF_ATTR_TENSOR && (!a->t || (!a->t->data && a->t->nbytes)))
			return 1;
	}
	return 0;
}

/* Whether n's outputs may hand their users over and go: not when one is a
 * graph output (its name is the model's interface) or captured by a
 * subgraph (by its name).  Such a node may still be the one kept. */
static int cse_may_drop(const struct tpf_node *n)
{
	for (size_t i = 0; i < n->n_outputs; i++) {
		const struct tpf_value *v = n->outputs[i];
		if (!v)
			continue;
		if (v->n_output_refs)
			return 0;
		for (size_t k = 0; k < v->n_uses; k++)
			if (v->uses[k].index < 0)
				return 0;
	}
	return 1;
}

static int str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int tensor_eq(const struct tpf_tensor *a, const struct tpf_tensor *b)
{
	if (a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes ||
	    a->n_strings != b->n_strings || a->strings || b->strings)
		return 0;
	for (int i = 0; i < a->rank; i++)
		if (a->dims[i] != b->dims[i])
			return 0;
	return !a->nbytes || (a->data && b->data && memcmp(a->data, b->data, a->nbytes) == 0);
}

static int attr_eq(const struct tpf_attr *a, const struct tpf_attr *b)
{
	if (a->kind != b->kind || !str_eq(a->ref_attr_name, b->ref_attr_name))
		return 0;
	if (a->ref_attr_name)
		return 1;
	switch (a->kind) {
	case TPF_ATTR_INT:
		return a->i == b->i;
	case TPF_ATTR_FLOAT:
		return memcmp(&a->f, &b->f, sizeof(a->f)) == 0;
	case TPF_ATTR_STRING:
		return a->s_len == b->s_len && (!a->s_len || memcmp(a->s, b->s, a->s_len) == 0);
	case TPF_ATTR_INTS:
		return a->n == b->n && (!a->n || memcmp(a->ints, b->ints, a->n * sizeof(int64_t)) == 0);
	case TPF_ATTR_FLOATS:
		return a->n == b->n && (!a->n || memcmp(a->floats, b->floats, a->n * sizeof(float)) == 0);
	case TPF_ATTR_STRINGS:
		if (a->n != b->n)
			return 0;
		for (size_t i = 0; i < a->n; i++) {
			size_t la = a->string_lens ? a->string_lens[i] : strlen(a->strings[i]);
			size_t lb = b->string_lens ? b->string_lens[i] : strlen(b->strings[i]);
			if (la != lb || memcmp(a->strings[i], b->strings[i], la) != 0)
				return 0;
		}
		return 1;
	case TPF_ATTR_TENSOR:
		return a->t && b->t && tensor_eq(a->t, b->t);
	default:
		return 0;
	}
}

static int node_eq(const struct tpf_node *a, const struct tpf_node *b)
{
	if (a->op != b->op || !str_eq(a->domain, b->domain) || !str_eq(a->op_type, b->op_type) ||
	    !str_eq(a->overload, b->overload) || a->n_inputs != b->n_inputs ||
	    a->n_outputs != b->n_outputs || a->n_attrs != b->n_attrs)
		return 0;
	for (size_t i = 0; i < a->n_inputs; i++)
		if (a->inputs[i] != b->inputs[i])
			return 0;
	/* b's used outputs must exist in a */
	for (size_t i = 0; i < b->n_outputs; i++)
		if (b->outputs[i] && tpf_value_use_count(b->outputs[i]) && !a->outputs[i])
			return 0;
	for (size_t i = 0; i < a->n_attrs; i++) {
		const struct tpf_attr *x = &a->attrs[i], *y = NULL;
		for (size_t k = 0; k < b->n_attrs && !y; k++)
			if (strcmp(b->attrs[k].name, x->name) == 0)
				y = &b->attrs[k];
		if (!y || !attr_eq(x, y))
			return 0;
	}
	return 1;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	return (h ^ v) * UINT64_C(0x100000001b3);
}

static uint64_t node_hash(const struct tpf_node *n)
{
	uint64_t h = mix(UINT64_C(0xcbf29ce484222325), (uint64_t)n->op);
	for (const char *p = n->op_type ? n->op_type : ""; *p; p++)
		h = mix(h, (unsigned char)*p);
	h = mix(h, n->n_inputs);
	for (size_t i = 0; i < n->n_inputs; i++)
		h = mix(h, n->inputs[i] ? (uint64_t)n->inputs[i]->id + 1 : 0);
	h = mix(h, n->n_attrs);
	for (size_t i = 0; i < n->n_attrs; i++)
		if (n->attrs[i].kind == TPF_ATTR_INT)
			h = mix(h, (uint64_t)n->attrs[i].i);
	return h;
}

static enum tpf_status cse_graph(struct tpf_graph *g, struct tpf_pass_context *ctx, int64_t *count,
				 struct tpf_diag *d)
{
	(void)ctx;
	size_t cap = 64, n_nodes = 0;
	for (struct tpf_node *n = g->first; n; n = n->next)
		n_nodes++;
	while (cap < 2 * n_nodes)
		cap *= 2;
	struct tpf_node **table = tpf_calloc(cap, sizeof(*table));
	/* the dropped nodes, erased last to first once the sweep is done (each
	 * then leaves the end of its inputs' use lists: constant time) */
	struct tpf_node **dropped = tpf_calloc(n_nodes + 1, sizeof(*dropped));
	size_t n_dropped = 0;
	if (!table || !dropped) {
		tpf_free(table);
		tpf_free(dropped);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "cse: out of memory");
	}
	enum tpf_status st = TPF_OK;
	struct tpf_node *next;
	for (struct tpf_node *n = g->first; n; n = next) {
		next = n->next;
		if (cse_skip_op(n))
			continue;
		size_t slot = (size_t)node_hash(n) & (cap - 1);
		struct tpf_node *same = NULL;
		while (table[slot]) {
			if (node_eq(table[slot], n)) {
				same = table[slot];
				break;
			}
			slot = (slot + 1) & (cap - 1);
		}
		if (!same) {
			table[slot] = n;
			continue;
		}
		if (!cse_may_drop(n))
			continue;
		for (size_t i = 0; !st && i < n->n_outputs; i++) {
			struct tpf_value *from = n->outputs[i], *to = same->outputs[i];
			if (!from || !to)
				continue;
			if (to->type.kind == TPF_TYPE_NONE && from->type.kind != TPF_TYPE_NONE)
				st = tpf_value_copy_type(to, &from->type);
			if (!st)
				st = tpf_value_replace_uses(from, to);
		}
		if (st) {
			char buf[160];
			st = tpf_diag_fail(d, st, "cse: %s: could not replace it by its equal",
					   tpf_node_describe(n, buf, sizeof(buf)));
			break;
		}
		dropped[n_dropped++] = n;
		(*count)++;
	}
	while (n_dropped > 0) {
		struct tpf_node *n = dropped[--n_dropped];
		enum tpf_status e = tpf_graph_erase_node(g, n);
		if (e && !st) {
			char buf[160];
			st = tpf_diag_fail(d, e, "cse: %s: could not erase it", tpf_node_describe(n, buf, sizeof(buf)));
		}
	}
	tpf_free(table);
	tpf_free(dropped);
	return st;
}

static const char *const cse_counters[] = {"nodes-merged", NULL};

static enum tpf_status cse_run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			       struct tpf_diag *d)
{
	return run_counted(m, cse_graph, ctx, "cse", "nodes-merged", changed, d);
}

const struct tpf_pass tpf_pass_cse = {
	.name = "cse",
	.counters = cse_counters,
	.summary = "nodes that compute what an earlier node computes (same op, inputs and "
		   "attributes) are dropped for it",
	.run = cse_run,
};
