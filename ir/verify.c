/* SPDX-License-Identifier: MIT */
/*
 * The verifier: IR invariants (single definitions, unique names, producer
 * and use lists that agree with the node operands, acyclic and topologically
 * ordered node lists, every operand defined), and for every known op what
 * its record (ir/ops/) says: arity, attributes, type constraints, and the
 * shapes and output types its shape function gives for the declared input
 * types.  Subgraphs and function bodies are verified recursively.
 *
 * Every problem is reported, not only the first; messages about a node start
 * with "node 'NAME' (OP): ".  The work is linear in the number of nodes,
 * values and operands: lookups go through hash tables built per graph.
 *
 * This file holds the graph-level checks and the entry points; the checks of
 * one node against its op record are in verify-node.c.
 */
#include "verify-private.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ tables */

static size_t ptr_hash(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p;

	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)x;
}

static int ptr_map_alloc(struct ptr_map *m, size_t cap)
{
	m->keys = tpf_calloc(cap, sizeof(*m->keys));
	m->vals = tpf_calloc(cap, sizeof(*m->vals));
	if (!m->keys || !m->vals) {
		tpf_free(m->keys);
		tpf_free(m->vals);
		m->keys = NULL;
		m->vals = NULL;
		return -1;
	}
	m->cap = cap;
	m->count = 0;
	return 0;
}

static int ptr_map_init(struct ptr_map *m, size_t expected)
{
	size_t cap = 16;

	while (cap / 2 < expected) {
		if (cap > SIZE_MAX / 4)
			return -1;
		cap <<= 1;
	}
	return ptr_map_alloc(m, cap);
}

static void ptr_map_free(struct ptr_map *m)
{
	tpf_free(m->keys);
	tpf_free(m->vals);
	m->keys = NULL;
	m->vals = NULL;
	m->cap = 0;
}

static uint32_t ptr_map_get(const struct ptr_map *m, const void *p)
{
	size_t i;

	if (!m->cap || !p)
		return 0;
	for (i = ptr_hash(p) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->keys[i])
			return 0;
		if (m->keys[i] == p)
			return m->vals[i];
	}
}

/* Returns 1 if p was already present (value unchanged), 0 when added, -1 on OOM. */
static int ptr_map_put(struct ptr_map *m, const void *p, uint32_t v)
{
	size_t i;

	if (m->count + 1 > m->cap / 2) {
		struct ptr_map bigger;
		size_t k;

		if (m->cap > SIZE_MAX / 4 || ptr_map_alloc(&bigger, m->cap ? m->cap * 2 : 16))
			return -1;
		for (k = 0; k < m->cap; k++) {
			if (!m->keys[k])
				continue;
			for (i = ptr_hash(m->keys[k]) & (bigger.cap - 1); bigger.keys[i];
			     i = (i + 1) & (bigger.cap - 1))
				;
			bigger.keys[i] = m->keys[k];
			bigger.vals[i] = m->vals[k];
			bigger.count++;
		}
		ptr_map_free(m);
		*m = bigger;
	}
	for (i = ptr_hash(p) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == p)
			return 1;
	m->keys[i] = p;
	m->vals[i] = v;
	m->count++;
	return 0;
}

int verify_name_set_init(struct name_set *s, size_t expected)
{
	size_t cap = 16;

	while (cap / 2 < expected) {
		if (cap > SIZE_MAX / 4)
			return -1;
		cap <<= 1;
	}
	s->keys = tpf_calloc(cap, sizeof(*s->keys));
	s->owners = tpf_calloc(cap, sizeof(*s->owners));
	if (!s->keys || !s->owners) {
		tpf_free(s->keys);
		tpf_free(s->owners);
		s->keys = NULL;
		s->owners = NULL;
		return -1;
	}
	s->cap = cap;
	return 0;
}

void verify_name_set_free(struct name_set *s)
{
	tpf_free(s->keys);
	tpf_free(s->owners);
	s->keys = NULL;
	s->owners = NULL;
	s->cap = 0;
}

/* Adds name; returns the earlier owner when the name was present, else NULL.
 * The set never holds more than `expected` names (the caller sizes it). */
const void *verify_name_set_add(struct name_set *s, const char *name, const void *owner)
{
	size_t i;

	for (i = op_name_hash(name) & (s->cap - 1); s->keys[i]; i = (i + 1) & (s->cap - 1))
		if (strcmp(s->keys[i], name) == 0)
			return s->owners[i];
	s->keys[i] = name;
	s->owners[i] = owner;
	return NULL;
}

/* ------------------------------------------------------------------ context */

/* ------------------------------------------------------------------ context */

static const char *gname(const struct tpf_graph *g)
{
	return g && g->name ? g->name : "";
}

void verify_node_error(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

void verify_node_error(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	op_node_verror(c->d, n, s ? s->where : NULL, fmt, ap);
	va_end(ap);
	c->errors++;
}

static void graph_error(struct verify_ctx *c, const struct graph_state *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void graph_error(struct verify_ctx *c, const struct graph_state *s, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(c->d, TPF_SEV_ERROR, "graph '%s': %s%s", gname(s->g), msg, s->where);
	c->errors++;
}

void verify_oom(struct verify_ctx *c)
{
	if (!c->nomem)
		tpf_diag_add(c->d, TPF_SEV_ERROR, "verifier: out of memory");
	c->nomem = 1;
}

/* ------------------------------------------------------------------ helpers */

/* ------------------------------------------------------------------ graphs */

static int is_ancestor(const struct tpf_graph *a, const struct tpf_graph *g)
{
	const struct tpf_graph *p;
	int depth = 0;

	if (!a)
		return 0;
	for (p = g->parent; p && depth < VERIFY_MAX_DEPTH; p = p->parent, depth++)
		if (p == a)
			return 1;
	return 0;
}

static int value_registered(const struct tpf_graph *g, const struct tpf_value *v)
{
	return v->graph == g && g->values && v->id < g->n_values && g->values[v->id] == v;
}

/* NULL when v is a definition visible in s->g; else why not. */
static const char *undefined_reason(const struct graph_state *s, const struct tpf_value *v)
{
	const struct tpf_graph *g = s->g;

	if (!value_registered(g, v)) {
		if (is_ancestor(v->graph, g))
			return "belongs to an enclosing graph and is used without an outer-scope "
			       "reference";
		return "belongs to another graph";
	}
	switch (v->kind) {
	case TPF_VALUE_NODE_OUTPUT:
		if (!v->producer)
			return "is not defined: no node produces it and it is not a graph input "
			       "or initializer";
		if (!ptr_map_get(&s->pos, v->producer))
			return "names a producer that is not in the graph's node list";
		if (v->producer_index < 0 || (size_t)v->producer_index >= v->producer->n_outputs ||
		    !v->producer->outputs || v->producer->outputs[v->producer_index] != v)
			return "is not among the outputs of the node recorded as its producer";
		return NULL;
	case TPF_VALUE_GRAPH_INPUT:
		if (!(s->vflags[v->id] & VF_LISTED_INPUT))
			return "is marked as a graph input but is not listed among the graph's "
			       "inputs";
		return NULL;
	case TPF_VALUE_INITIALIZER:
		if (!v->init)
			return "is marked as an initializer but has no tensor";
		if (!(s->vflags[v->id] & (VF_LISTED_INIT | VF_LISTED_INPUT)))
			return "is marked as an initializer but is not listed among the graph's "
			       "initializers";
		return NULL;
	case TPF_VALUE_OUTER:
		if (!g->parent)
			return "is an outer-scope reference in a graph that has no enclosing graph";
		if (!v->outer || !is_ancestor(v->outer->graph, g))
			return "is an outer-scope reference to no value of an enclosing graph";
		if (!value_registered(v->outer->graph, v->outer))
			return "is an outer-scope reference to a value removed from its graph";
		return NULL;
	default:
		return "has an invalid value kind";
	}
}

static void check_type_sane(struct verify_ctx *c, const struct graph_state *s,
                            const struct tpf_value *v)
{
	const struct tpf_type *t = &v->type;

	if (t->kind == TPF_TYPE_NONE || t->kind == TPF_TYPE_OPAQUE)
		return;
	if (t->kind != TPF_TYPE_TENSOR) {
		graph_error(c, s, "value '%s' has an invalid type kind %d", vname(v), (int)t->kind);
		return;
	}
	if (t->dtype != TPF_DTYPE_UNDEFINED && !tpf_dtype_is_valid((int)t->dtype))
		graph_error(c, s, "value '%s' has an invalid dtype %d", vname(v), (int)t->dtype);
	if (t->shape.rank < -1 || t->shape.rank > TPF_MAX_RANK)
		graph_error(c, s, "value '%s' has rank %d; supported ranks are 0..%d", vname(v),
		            t->shape.rank, TPF_MAX_RANK);
	else if (t->shape.rank > 0 && !t->shape.dims)
		graph_error(c, s, "value '%s' has rank %d but no dims", vname(v), t->shape.rank);
}

static void check_initializer(struct verify_ctx *c, const struct graph_state *s,
                              const struct tpf_value *v)
{
	const struct tpf_tensor *t = v->init;
	int i;

	if (!t)
		return;
	if (!tpf_dtype_is_valid((int)t->dtype) || t->dtype == TPF_DTYPE_UNDEFINED) {
		graph_error(c, s, "initializer '%s' has an invalid dtype %d", vname(v),
		            (int)t->dtype);
		return;
	}
	if (t->rank < 0 || t->rank > TPF_MAX_RANK || (t->rank > 0 && !t->dims)) {
		graph_error(c, s, "initializer '%s' has an invalid rank %d", vname(v), t->rank);
		return;
	}
	for (i = 0; i < t->rank; i++)
		if (t->dims[i] < 0) {
			graph_error(c, s, "initializer '%s' has negative dimension %" PRId64,
			            vname(v), t->dims[i]);
			return;
		}
	if (t->data && t->dtype != TPF_DTYPE_STRING) {
		int64_t numel = tpf_tensor_numel(t);
		size_t want;

		if (numel < 0 || tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &want))
			graph_error(c, s, "initializer '%s': element count overflows", vname(v));
		else if (want != t->nbytes)
			graph_error(c, s,
			            "initializer '%s' holds %zu bytes; %s[%" PRId64
			            " elements] needs %zu",
			            vname(v), t->nbytes, dt_name(t->dtype), numel, want);
	}
	if (v->type.kind == TPF_TYPE_TENSOR) {
		const struct tpf_type *ty = &v->type;
		int ok = !ty->dtype || ty->dtype == t->dtype;

		if (ok && ty->shape.rank >= 0) {
			ok = ty->shape.rank == t->rank && (t->rank == 0 || ty->shape.dims);
			for (i = 0; ok && i < t->rank; i++) {
				const struct tpf_dim *d = &ty->shape.dims[i];

				if (!d->param && d->value >= 0 && d->value != t->dims[i])
					ok = 0;
			}
		}
		if (!ok)
			graph_error(c, s,
			            "initializer '%s': its declared type disagrees with the "
			            "tensor's dtype or shape",
			            vname(v));
	}
}

/* Short label of a node for cycle paths. */
static const char *node_label(const struct tpf_node *n)
{
	if (n->name && *n->name)
		return n->name;
	return n->op_type ? n->op_type : "?";
}

struct edge {
	uint32_t src, dst; /* 0-based positions */
	int slot;          /* input index, or -1-k for implicit input k */
	const struct tpf_value *v;
};

static enum tpf_status verify_graph(struct verify_ctx *c, const struct tpf_graph *g,
                                    const struct graph_state *parent, const char *where);

static void verify_subgraphs(struct verify_ctx *c, const struct graph_state *s,
                             const struct tpf_node *n)
{
	size_t i, j;

	for (i = 0; i < n->n_attrs && n->attrs; i++) {
		const struct tpf_attr *a = &n->attrs[i];
		size_t count;
		struct tpf_graph *const *gs;
		struct tpf_graph *one;

		if (a->ref_attr_name)
			continue;
		if (a->kind == TPF_ATTR_GRAPH && a->g) {
			one = a->g;
			gs = &one;
			count = 1;
		} else if (a->kind == TPF_ATTR_GRAPHS && a->graphs) {
			gs = a->graphs;
			count = a->n;
		} else {
			continue;
		}
		for (j = 0; j < count; j++) {
			const struct tpf_graph *sub = gs[j];
			char desc[200], where[320];

			if (!sub)
				continue;
			if (sub->parent != s->g)
				verify_node_error(
				    c, s, n,
				    "subgraph '%s' does not record this node's graph as its "
				    "parent",
				    a->name ? a->name : "?");
			if (sub->owner != n)
				verify_node_error(
				    c, s, n, "subgraph '%s' does not record this node as its owner",
				    a->name ? a->name : "?");
			if (s->depth + 1 >= VERIFY_MAX_DEPTH) {
				verify_node_error(c, s, n, "subgraphs nest deeper than %d levels",
				                  VERIFY_MAX_DEPTH);
				continue;
			}
			tpf_node_describe(n, desc, sizeof(desc));
			snprintf(where, sizeof(where), " (in subgraph '%.64s' of %.128s)%.100s",
			         a->name ? a->name : "?", desc, s->where);
			verify_graph(c, sub, s, where);
		}
	}
}

/* An outer-scope value used in a subgraph must be produced before the node
 * of the enclosing graph that holds the subgraph. */
static void check_outer_order(struct verify_ctx *c, const struct graph_state *s,
                              const struct tpf_value *v)
{
	const struct tpf_value *t = v->outer;
	const struct graph_state *anc;
	const struct tpf_graph *gg = s->g;
	const struct tpf_node *holder;
	uint32_t pp, ph;
	int depth = 0;

	if (!t || t->kind != TPF_VALUE_NODE_OUTPUT || !t->producer)
		return;
	for (anc = s->parent; anc && anc->g != t->graph; anc = anc->parent)
		;
	if (!anc)
		return;
	while (gg && gg->parent != t->graph && depth++ < VERIFY_MAX_DEPTH)
		gg = gg->parent;
	if (!gg || !gg->owner)
		return;
	holder = gg->owner;
	pp = ptr_map_get(&anc->pos, t->producer);
	ph = ptr_map_get(&anc->pos, holder);
	if (pp && ph && pp >= ph) {
		char desc[256];

		tpf_node_describe(t->producer, desc, sizeof(desc));
		verify_node_error(
		    c, anc, holder,
		    "a subgraph uses '%s', which is produced by later %s; nodes are not in "
		    "topological order",
		    vname(t), desc);
	}
}

/* The node holding a subgraph lists every value of its own graph that the
 * subgraph refers to among its implicit inputs (captures). */
static void check_capture(struct verify_ctx *c, const struct graph_state *s,
                          const struct tpf_value *v)
{
	const struct tpf_node *owner = s->g->owner;
	size_t k;

	if (!owner || v->outer->graph != s->g->parent || owner->graph != s->g->parent)
		return;
	if (owner->n_implicit > 256)
		return; /* keep the check linear; large capture lists are rare */
	for (k = 0; k < owner->n_implicit && owner->implicit_inputs; k++)
		if (owner->implicit_inputs[k] == v->outer)
			return;
	graph_error(c, s,
	            "outer-scope value '%s' is not among the captures of the node holding "
	            "this subgraph",
	            vname(v));
}

static void check_operand(struct verify_ctx *c, const struct graph_state *s,
                          const struct tpf_node *n, const char *what, size_t i,
                          const struct tpf_value *v)
{
	const char *why = undefined_reason(s, v);

	if (why)
		verify_node_error(c, s, n, "%s %zu '%s' %s", what, i, vname(v), why);
}

static void report_cycles(struct verify_ctx *c, const struct graph_state *s,
                          const struct edge *edges, size_t n_edges, const uint8_t *done)
{
	uint32_t *pred = NULL, *visit = NULL;
	size_t e, k;
	uint32_t walk = 0;

	pred = tpf_malloc(s->n * sizeof(*pred));
	visit = tpf_calloc(s->n, sizeof(*visit));
	if (!pred || !visit) {
		verify_oom(c);
		goto out_free;
	}
	for (k = 0; k < s->n; k++)
		pred[k] = UINT32_MAX;
	for (e = 0; e < n_edges; e++)
		if (!done[edges[e].src] && !done[edges[e].dst] && pred[edges[e].dst] == UINT32_MAX)
			pred[edges[e].dst] = edges[e].src;
	for (k = 0; k < s->n; k++) {
		uint32_t cur = (uint32_t)k;
		char path[512];
		size_t len = 0, steps = 0;
		uint32_t x;

		if (done[k] || visit[k])
			continue;
		walk++;
		while (cur != UINT32_MAX && !visit[cur]) {
			visit[cur] = walk;
			cur = pred[cur];
		}
		if (cur == UINT32_MAX || visit[cur] != walk)
			continue;
		/* cur is on a cycle; follow producers back around it */
		path[0] = '\0';
		x = cur;
		do {
			int w = snprintf(path + len, sizeof(path) - len, "%s'%s'",
			                 len ? " <- " : "", node_label(s->order[x]));

			if (w < 0 || (size_t)w >= sizeof(path) - len) {
				len = sizeof(path) - 1;
				break;
			}
			len += (size_t)w;
			x = pred[x];
		} while (x != cur && x != UINT32_MAX && ++steps < 16);
		if (x == cur && len < sizeof(path) - 1)
			snprintf(path + len, sizeof(path) - len, " <- '%s'",
			         node_label(s->order[cur]));
		else if (len < sizeof(path) - 5)
			snprintf(path + len, sizeof(path) - len, " ...");
		verify_node_error(c, s, s->order[cur], "is on a cycle (each reads the next): %s",
		                  path);
	}
out_free:
	tpf_free(pred);
	tpf_free(visit);
}

/* Kahn's algorithm over the operand edges: reports cycles, then operands
 * produced later in the list by nodes that are not on or after a cycle. */
static void check_order(struct verify_ctx *c, const struct graph_state *s, const struct edge *edges,
                        size_t n_edges)
{
	uint32_t *indeg = NULL, *start = NULL, *adj = NULL, *queue = NULL;
	uint8_t *done = NULL;
	size_t e, k, head = 0, tail = 0, n = s->n;
	int any_left = 0;

	if (!n)
		return;
	indeg = tpf_calloc(n, sizeof(*indeg));
	start = tpf_calloc(n + 1, sizeof(*start));
	adj = tpf_malloc((n_edges ? n_edges : 1) * sizeof(*adj));
	queue = tpf_malloc(n * sizeof(*queue));
	done = tpf_calloc(n, 1);
	if (!indeg || !start || !adj || !queue || !done) {
		verify_oom(c);
		goto out_free;
	}
	for (e = 0; e < n_edges; e++) {
		indeg[edges[e].dst]++;
		start[edges[e].src + 1]++;
	}
	for (k = 0; k < n; k++)
		start[k + 1] += start[k];
	{
		uint32_t *fill = queue; /* reuse as a cursor array before the queue runs */

		for (k = 0; k < n; k++)
			fill[k] = start[k];
		for (e = 0; e < n_edges; e++)
			adj[fill[edges[e].src]++] = edges[e].dst;
	}
	for (k = 0; k < n; k++)
		if (!indeg[k])
			queue[tail++] = (uint32_t)k;
	while (head < tail) {
		uint32_t x = queue[head++];

		done[x] = 1;
		for (e = start[x]; e < start[x + 1]; e++)
			if (--indeg[adj[e]] == 0)
				queue[tail++] = adj[e];
	}
	for (k = 0; k < n; k++)
		any_left |= !done[k];
	if (any_left)
		report_cycles(c, s, edges, n_edges, done);
	for (e = 0; e < n_edges; e++) {
		const struct edge *ed = &edges[e];
		char desc[256];

		if (ed->src < ed->dst || !done[ed->src])
			continue;
		tpf_node_describe(s->order[ed->src], desc, sizeof(desc));
		if (ed->slot >= 0)
			verify_node_error(c, s, s->order[ed->dst],
			                  "input %d '%s' is produced by later %s; nodes are not in "
			                  "topological order",
			                  ed->slot, vname(ed->v), desc);
		else
			verify_node_error(
			    c, s, s->order[ed->dst],
			    "subgraph input '%s' is produced by later %s; nodes are not in "
			    "topological order",
			    vname(ed->v), desc);
	}
out_free:
	tpf_free(indeg);
	tpf_free(start);
	tpf_free(adj);
	tpf_free(queue);
	tpf_free(done);
}

/* Use lists: every use names a real operand slot, once; every operand slot
 * of a value of this graph appears in the value's use list. */
static void check_uses(struct verify_ctx *c, const struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t *offset = NULL, total = 0, i, k;
	uint8_t *seen = NULL;

	offset = tpf_malloc((s->n + 1) * sizeof(*offset));
	if (!offset) {
		verify_oom(c);
		return;
	}
	for (k = 0; k < s->n; k++) {
		const struct tpf_node *n = s->order[k];

		offset[k] = total;
		if (tpf_add_size(total, n->n_inputs, &total) ||
		    tpf_add_size(total, n->n_implicit, &total)) {
			verify_oom(c);
			goto out_free;
		}
	}
	offset[s->n] = total;
	seen = tpf_calloc(total ? total : 1, 1);
	if (!seen) {
		verify_oom(c);
		goto out_free;
	}
	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];
		size_t u;

		if (!v || !value_registered(g, v))
			continue;
		if (v->n_uses && !v->uses) {
			graph_error(c, s, "value '%s' has %zu uses but no use array", vname(v),
			            v->n_uses);
			continue;
		}
		for (u = 0; u < v->n_uses; u++) {
			const struct tpf_use *use = &v->uses[u];
			const struct tpf_node *n = use->node;
			uint32_t pos = n ? ptr_map_get(&s->pos, n) : 0;
			size_t slot;

			if (!pos) {
				graph_error(c, s,
				            "value '%s' lists a use by a node that is not in this "
				            "graph's node list",
				            vname(v));
				continue;
			}
			if (use->index >= 0) {
				if ((size_t)use->index >= n->n_inputs || !n->inputs ||
				    n->inputs[use->index] != v) {
					verify_node_error(
					    c, s, n,
					    "value '%s' lists a use as input %d, but the node "
					    "does not read it there",
					    vname(v), use->index);
					continue;
				}
				slot = offset[pos - 1] + (size_t)use->index;
			} else {
				size_t imp = (size_t)(-(int64_t)use->index - 1);

				if (imp >= n->n_implicit || !n->implicit_inputs ||
				    n->implicit_inputs[imp] != v) {
					verify_node_error(
					    c, s, n,
					    "value '%s' lists a use as subgraph capture %zu, "
					    "but the node does not capture it there",
					    vname(v), imp);
					continue;
				}
				slot = offset[pos - 1] + n->n_inputs + imp;
			}
			if (seen[slot])
				verify_node_error(c, s, n, "value '%s' lists the same use twice",
				                  vname(v));
			seen[slot] = 1;
		}
	}
	for (k = 0; k < s->n; k++) {
		const struct tpf_node *n = s->order[k];

		for (i = 0; i < n->n_inputs && n->inputs; i++) {
			const struct tpf_value *v = n->inputs[i];

			if (v && value_registered(g, v) && !seen[offset[k] + i])
				verify_node_error(
				    c, s, n, "input %zu '%s' is missing from the value's use list",
				    i, vname(v));
		}
		for (i = 0; i < n->n_implicit && n->implicit_inputs; i++) {
			const struct tpf_value *v = n->implicit_inputs[i];

			if (v && value_registered(g, v) && !seen[offset[k] + n->n_inputs + i])
				verify_node_error(
				    c, s, n,
				    "subgraph capture '%s' is missing from the value's use list",
				    vname(v));
		}
	}
out_free:
	tpf_free(offset);
	tpf_free(seen);
}

/* The node list: positions, links, ownership.  Returns -1 when out of memory. */
static int check_node_list(struct verify_ctx *c, struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	const struct tpf_node *n, *prev = NULL;
	size_t cap_order = 0;

	if (ptr_map_init(&s->pos, g->n_nodes + 1)) {
		verify_oom(c);
		return -1;
	}
	for (n = g->first; n; n = n->next) {
		if (ptr_map_get(&s->pos, n)) {
			graph_error(c, s, "the node list loops back to an earlier node");
			break;
		}
		if (s->n >= UINT32_MAX - 1) {
			graph_error(c, s, "too many nodes");
			break;
		}
		if (s->n == cap_order) {
			size_t cap = cap_order ? cap_order * 2 : 64;
			const struct tpf_node **o;

			if (cap > SIZE_MAX / sizeof(*o)) {
				verify_oom(c);
				return -1;
			}
			o = tpf_realloc(s->order, cap * sizeof(*o));
			if (!o) {
				verify_oom(c);
				return -1;
			}
			s->order = o;
			cap_order = cap;
		}
		s->order[s->n++] = n;
		if (ptr_map_put(&s->pos, n, (uint32_t)s->n) < 0) {
			verify_oom(c);
			return -1;
		}
		if (n->prev != prev)
			verify_node_error(c, s, n,
			                  "its previous-node link disagrees with the node list");
		if (n->graph != g)
			verify_node_error(c, s, n,
			                  "is in this graph's node list but records another graph");
		if (n->erased)
			verify_node_error(c, s, n,
			                  "is marked erased but is still in the node list");
		if ((n->n_inputs && !n->inputs) || (n->n_outputs && !n->outputs) ||
		    (n->n_implicit && !n->implicit_inputs))
			verify_node_error(c, s, n, "has operand counts but no operand arrays");
		prev = n;
	}
	if (prev != g->last)
		graph_error(c, s, "the last-node link disagrees with the node list");
	if (s->n != g->n_nodes)
		graph_error(c, s, "records %zu nodes but its node list holds %zu", g->n_nodes,
		            s->n);
	return 0;
}

/* The value registry: ids, unique names, sane types.  Returns -1 when out of
 * memory. */
static int check_values(struct verify_ctx *c, struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	struct name_set names = {0};
	size_t i;

	s->vflags = tpf_calloc(g->n_values ? g->n_values : 1, 1);
	if (!s->vflags || verify_name_set_init(&names, g->n_values)) {
		verify_oom(c);
		return -1;
	}
	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];

		if (!v)
			continue;
		if (v->id != i || v->graph != g) {
			graph_error(c, s, "value '%s' is registered at id %zu but records id %u%s",
			            vname(v), i, v->id, v->graph != g ? " and another graph" : "");
			continue;
		}
		if (!v->name) {
			graph_error(c, s, "value %zu has no name", i);
			continue;
		}
		if (verify_name_set_add(&names, v->name, v))
			graph_error(c, s, "value name '%s' is defined twice", v->name);
		check_type_sane(c, s, v);
	}
	verify_name_set_free(&names);
	return 0;
}

static void check_graph_inputs(struct verify_ctx *c, struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t i;

	for (i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];

		if (!v) {
			graph_error(c, s, "graph input %zu is missing", i);
			continue;
		}
		if (!value_registered(g, v)) {
			graph_error(c, s, "graph input %zu '%s' is not a value of this graph", i,
			            vname(v));
			continue;
		}
		if (s->vflags[v->id] & VF_LISTED_INPUT)
			graph_error(c, s, "graph input '%s' is listed twice", vname(v));
		s->vflags[v->id] |= VF_LISTED_INPUT;
		if (v->kind != TPF_VALUE_GRAPH_INPUT && v->kind != TPF_VALUE_INITIALIZER)
			graph_error(c, s,
			            "graph input '%s' is also defined elsewhere (as a node output "
			            "or outer reference)",
			            vname(v));
		if (!v->is_graph_input)
			graph_error(c, s, "graph input '%s' is not flagged as a graph input",
			            vname(v));
	}
}

static void check_initializers(struct verify_ctx *c, struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t i;

	for (i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];

		if (!v) {
			graph_error(c, s, "initializer %zu is missing", i);
			continue;
		}
		if (!value_registered(g, v)) {
			graph_error(c, s, "initializer %zu '%s' is not a value of this graph", i,
			            vname(v));
			continue;
		}
		if (s->vflags[v->id] & VF_LISTED_INIT)
			graph_error(c, s, "initializer '%s' is listed twice", vname(v));
		s->vflags[v->id] |= VF_LISTED_INIT;
		if (v->kind != TPF_VALUE_INITIALIZER)
			graph_error(c, s, "initializer '%s' is also defined elsewhere", vname(v));
		else if (!v->init)
			graph_error(c, s, "initializer '%s' has no tensor", vname(v));
		check_initializer(c, s, v);
	}
}

/* Every node output and outer-scope reference is defined where it says. */
static void check_definitions(struct verify_ctx *c, const struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t i;

	for (i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];
		const char *why;

		if (!v || !value_registered(g, v))
			continue;
		if (v->is_graph_input && !(s->vflags[i] & VF_LISTED_INPUT))
			graph_error(c, s, "value '%s' is flagged as a graph input but not listed",
			            vname(v));
		if (v->kind == TPF_VALUE_NODE_OUTPUT && v->producer) {
			why = undefined_reason(s, v);
			if (why)
				graph_error(c, s, "value '%s' %s", vname(v), why);
		} else if (v->kind == TPF_VALUE_OUTER) {
			why = undefined_reason(s, v);
			if (why) {
				graph_error(c, s, "value '%s' %s", vname(v), why);
			} else {
				check_outer_order(c, s, v);
				check_capture(c, s, v);
			}
		}
	}
}

/* Each output of n is a node output of this graph that records n. */
static void check_node_outputs(struct verify_ctx *c, const struct graph_state *s,
                               const struct tpf_node *n)
{
	char desc[256];
	size_t i;

	for (i = 0; i < n->n_outputs && n->outputs; i++) {
		const struct tpf_value *v = n->outputs[i];

		if (!v)
			continue;
		if (!value_registered(s->g, v)) {
			verify_node_error(c, s, n, "output %zu '%s' is not a value of this graph",
			                  i, vname(v));
		} else if (v->kind == TPF_VALUE_GRAPH_INPUT || v->kind == TPF_VALUE_INITIALIZER) {
			verify_node_error(c, s, n,
			                  "output %zu '%s' redefines a graph input or initializer",
			                  i, vname(v));
		} else if (v->kind != TPF_VALUE_NODE_OUTPUT) {
			verify_node_error(c, s, n, "output %zu '%s' redefines an outer-scope value",
			                  i, vname(v));
		} else if (v->producer != n && v->producer) {
			tpf_node_describe(v->producer, desc, sizeof(desc));
			verify_node_error(c, s, n, "output %zu '%s' is also produced by %s", i,
			                  vname(v), desc);
		} else if (v->producer != n) {
			verify_node_error(
			    c, s, n, "output %zu '%s' does not record this node as its producer", i,
			    vname(v));
		} else if (v->producer_index != (int)i) {
			verify_node_error(
			    c, s, n,
			    "output %zu '%s' records output index %d (defined twice by "
			    "this node?)",
			    i, vname(v), v->producer_index);
		}
	}
}

/* The data edges of the node list, for the order and cycle checks. */
struct edge_list {
	struct edge *e;
	size_t n, cap;
};

/* Checks the operands of the node at position k and records the edges from
 * their producers.  Returns -1 when out of memory. */
static int check_node_operands(struct verify_ctx *c, const struct graph_state *s, size_t k,
                               struct edge_list *edges)
{
	const struct tpf_node *n = s->order[k];
	size_t need = edges->n, i;

	if (tpf_add_size(need, n->n_inputs, &need) || tpf_add_size(need, n->n_implicit, &need)) {
		verify_oom(c);
		return -1;
	}
	if (need > edges->cap) {
		size_t cap = edges->cap ? edges->cap : 256;
		struct edge *ne;

		while (cap < need) {
			if (cap > SIZE_MAX / 2 / sizeof(*ne)) {
				verify_oom(c);
				return -1;
			}
			cap *= 2;
		}
		ne = tpf_realloc(edges->e, cap * sizeof(*ne));
		if (!ne) {
			verify_oom(c);
			return -1;
		}
		edges->e = ne;
		edges->cap = cap;
	}
	/* Inputs first (slot i), then subgraph captures (slot -1 - i). */
	for (i = 0; i < n->n_inputs + n->n_implicit; i++) {
		int implicit = i >= n->n_inputs;
		size_t j = implicit ? i - n->n_inputs : i;
		const struct tpf_value *v;
		uint32_t p;

		if (implicit ? !n->implicit_inputs : !n->inputs)
			continue;
		v = implicit ? n->implicit_inputs[j] : n->inputs[j];
		if (!v) {
			if (implicit)
				verify_node_error(c, s, n, "subgraph capture %zu is missing", j);
			continue;
		}
		check_operand(c, s, n, implicit ? "subgraph capture" : "input", j, v);
		if (!value_registered(s->g, v) || v->kind != TPF_VALUE_NODE_OUTPUT)
			continue;
		p = ptr_map_get(&s->pos, v->producer);
		if (p)
			edges->e[edges->n++] =
			    (struct edge){p - 1, (uint32_t)k, implicit ? -1 - (int)j : (int)j, v};
	}
	return 0;
}

/* The node at position k: its outputs, its op, its operands, its record and
 * its subgraphs.  Returns -1 when out of memory. */
static int check_node(struct verify_ctx *c, const struct graph_state *s, size_t k,
                      struct edge_list *edges)
{
	const struct tpf_node *n = s->order[k];
	int attrs_ok;

	check_node_outputs(c, s, n);
	if (is_onnx_domain(n->domain) && !c->onnx_node)
		c->onnx_node = n;
	if (n->op != TPF_OP_UNKNOWN)
		verify_node_arity(c, s, n);
	else if (n->op_type &&
	         tpf_op_lookup(n->domain ? n->domain : "", n->op_type) != TPF_OP_UNKNOWN)
		verify_node_error(c, s, n, "names a known op but is recorded as an unknown op");
	attrs_ok = verify_node_attrs(c, s, n) == 0;
	if (check_node_operands(c, s, k, edges))
		return -1;
	if (attrs_ok) {
		verify_node_record(c, s, n);
		verify_subgraphs(c, s, n);
	}
	return c->nomem ? -1 : 0;
}

static void check_graph_outputs(struct verify_ctx *c, const struct graph_state *s)
{
	const struct tpf_graph *g = s->g;
	size_t i;

	for (i = 0; i < g->n_outputs; i++) {
		const struct tpf_value *v = g->outputs[i];
		const char *why;

		if (!v) {
			graph_error(c, s, "graph output %zu is missing", i);
			continue;
		}
		why = undefined_reason(s, v);
		if (why)
			graph_error(c, s, "graph output %zu '%s' %s", i, vname(v), why);
	}
}

static enum tpf_status verify_graph(struct verify_ctx *c, const struct tpf_graph *g,
                                    const struct graph_state *parent, const char *where)
{
	struct graph_state st;
	struct graph_state *s = &st;
	struct edge_list edges = {0};
	size_t errors_before = c->errors, k;

	memset(s, 0, sizeof(*s));
	s->g = g;
	s->parent = parent;
	s->depth = parent ? parent->depth + 1 : 0;
	snprintf(s->where, sizeof(s->where), "%s", where ? where : "");
	if (!g) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "graph is missing%s", s->where);
		c->errors++;
		return TPF_ERR_VERIFY;
	}
	if ((g->n_values && !g->values) || (g->n_inputs && !g->inputs) ||
	    (g->n_outputs && !g->outputs) || (g->n_initializers && !g->initializers)) {
		graph_error(c, s, "value, input, output or initializer arrays are missing");
		return TPF_ERR_VERIFY;
	}
	if (check_node_list(c, s) || check_values(c, s))
		goto out_free;
	check_graph_inputs(c, s);
	check_initializers(c, s);
	check_definitions(c, s);
	for (k = 0; k < s->n; k++)
		if (check_node(c, s, k, &edges))
			goto out_free;
	check_uses(c, s);
	check_order(c, s, edges.e, edges.n);
	check_graph_outputs(c, s);

out_free:
	ptr_map_free(&s->pos);
	tpf_free(s->order);
	tpf_free(s->vflags);
	tpf_free(edges.e);
	if (c->nomem)
		return TPF_ERR_NOMEM;
	return c->errors > errors_before ? TPF_ERR_VERIFY : TPF_OK;
}

/* ------------------------------------------------------------------ entry points */

enum tpf_status tpf_graph_verify(const struct tpf_graph *g, struct tpf_diag *d)
{
	struct verify_ctx c;
	enum tpf_status st;

	memset(&c, 0, sizeof(c));
	c.d = d;
	c.opset = -1;
	c.world = -1;
	st = verify_graph(&c, g, NULL, "");
	tpf_free(c.types);
	return st;
}

static void verify_function(struct verify_ctx *c, const struct tpf_function *f)
{
	char where[320];
	size_t i;
	int64_t fopset = -1;
	const struct tpf_node *saved = c->onnx_node;

	snprintf(where, sizeof(where), " (in function '%s%s%s')",
	         f->domain && *f->domain ? f->domain : "", f->domain && *f->domain ? "::" : "",
	         f->name ? f->name : "?");
	if (!f->name || !*f->name) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "model: function has no name%s", where);
		c->errors++;
	}
	if (!f->body) {
		tpf_diag_add(c->d, TPF_SEV_ERROR, "model: function has no body%s", where);
		c->errors++;
		return;
	}
	for (i = 0; i < f->n_opsets && f->opsets; i++)
		if (is_onnx_domain(f->opsets[i].domain))
			fopset = f->opsets[i].version;
	c->opset = fopset > 0 ? fopset : op_model_opset(c->m);
	c->in_function = 1;
	c->onnx_node = NULL;
	verify_graph(c, f->body, NULL, where);
	if (c->onnx_node && fopset <= 0 && op_model_opset(c->m) <= 0) {
		char desc[256];

		tpf_node_describe(c->onnx_node, desc, sizeof(desc));
		tpf_diag_add(c->d, TPF_SEV_ERROR,
		             "model: function uses ONNX-domain ops (%s) but imports no opset for "
		             "the default domain%s",
		             desc, where);
		c->errors++;
	}
	c->in_function = 0;
	c->onnx_node = saved;
	c->opset = op_model_opset(c->m);
}

enum tpf_status tpf_model_verify(const struct tpf_model *m, struct tpf_diag *d)
{
	struct verify_ctx c;
	size_t i, j;

	memset(&c, 0, sizeof(c));
	c.d = d;
	c.opset = -1;
	c.world = -1;
	if (!m) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: no model given");
		return TPF_ERR_INVALID;
	}
	c.m = m;
	c.opset = op_model_opset(m);
	c.world = op_model_world(m);
	if (m->ir_version <= 0) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: ir_version is missing");
		c.errors++;
	}
	for (i = 0; i < m->n_opsets && m->opsets; i++) {
		const char *di = m->opsets[i].domain ? m->opsets[i].domain : "";

		if (m->opsets[i].version <= 0) {
			tpf_diag_add(d, TPF_SEV_ERROR,
			             "model: opset import for domain '%s' has version %" PRId64, di,
			             m->opsets[i].version);
			c.errors++;
		}
		for (j = 0; j < i; j++) {
			const char *dj = m->opsets[j].domain ? m->opsets[j].domain : "";

			if (strcmp(di, dj) == 0 || (is_onnx_domain(di) && is_onnx_domain(dj))) {
				tpf_diag_add(d, TPF_SEV_ERROR,
				             "model: domain '%s' is imported more than once", di);
				c.errors++;
				break;
			}
		}
	}
	if (!m->graph) {
		tpf_diag_add(d, TPF_SEV_ERROR, "model: has no graph");
		c.errors++;
	} else {
		if (m->graph->parent) {
			tpf_diag_add(d, TPF_SEV_ERROR, "model: main graph records a parent graph");
			c.errors++;
		}
		verify_graph(&c, m->graph, NULL, "");
		if (c.onnx_node && c.opset <= 0) {
			char desc[256];

			tpf_node_describe(c.onnx_node, desc, sizeof(desc));
			tpf_diag_add(d, TPF_SEV_ERROR,
			             "model: has ONNX-domain nodes (first: %s) but no opset import "
			             "for the default domain",
			             desc);
			c.errors++;
		}
	}
	for (i = 0; i < m->n_functions && m->functions && !c.nomem; i++) {
		const struct tpf_function *f = &m->functions[i];

		for (j = 0; j < i; j++) {
			const struct tpf_function *o = &m->functions[j];

			if (f->name && o->name && strcmp(f->name, o->name) == 0 &&
			    strcmp(f->domain ? f->domain : "", o->domain ? o->domain : "") == 0 &&
			    strcmp(f->overload ? f->overload : "",
			           o->overload ? o->overload : "") == 0) {
				tpf_diag_add(d, TPF_SEV_ERROR,
				             "model: function '%s%s%s' is defined more than once",
				             f->domain && *f->domain ? f->domain : "",
				             f->domain && *f->domain ? "::" : "", f->name);
				c.errors++;
				break;
			}
		}
		verify_function(&c, f);
	}
	tpf_free(c.types);
	if (c.nomem)
		return TPF_ERR_NOMEM;
	return c.errors ? TPF_ERR_VERIFY : TPF_OK;
}
