/* SPDX-License-Identifier: MIT */
/*
 * The pattern engine: a backtracking matcher over declarative pattern trees,
 * the rewriter every rewrite goes through, and the greedy worklist driver
 * with its statistics, near-miss reports and TPF_DEBUG trace.
 *
 * Matching is a small goal solver.  A goal is (pattern node, graph value)
 * plus the goals still to solve after it, kept as an immutable linked list
 * in the C stack frames of the solver; choice points (operand orders, Cast
 * or not, alternatives) save the binding counts and restore them when a
 * branch fails, so a later operand can still reject an earlier choice and
 * the pattern's check can reject a whole match and have the next one tried.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

/* Upper bound on solver steps for one match attempt: patterns are small,
 * so only a malformed pattern table could get near it. */
#define MATCH_MAX_STEPS 100000

/* ------------------------------------------------------------ match access */

struct tpf_value *tpf_match_value(const struct tpf_match *m, const char *name)
{
	for (size_t i = 0; i < m->n_bindings; i++)
		if (strcmp(m->bindings[i].name, name) == 0)
			return m->bindings[i].value;
	return NULL;
}

struct tpf_node *tpf_match_node(const struct tpf_match *m, const char *name)
{
	for (size_t i = 0; i < m->n_bindings; i++)
		if (strcmp(m->bindings[i].name, name) == 0)
			return m->bindings[i].node;
	return NULL;
}

const char *tpf_match_reason(struct tpf_match *m, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m->reason_buf, sizeof(m->reason_buf), fmt, ap);
	va_end(ap);
	return m->reason_buf;
}

/* ------------------------------------------------------------------ matcher */

struct goal {
	const struct tpf_pnode *p;
	struct tpf_value *v;
	const struct goal *next;   /* what remains after this goal */
	const struct goal *parent; /* the OP goal whose operand this is (NULL: root) */
	int operand;               /* operand index in the parent node */
	int cast_done;             /* OPT_CAST already decided */
};

struct matcher {
	struct tpf_match *m;
	const struct tpf_pattern_context *pc;
	char *why;
	size_t why_size;
	int best; /* progress of the deepest failure so far, -1: none */
	unsigned long steps;
	/* the pattern node of each matched node (NULL for Casts): attribute
	 * predicates run once the structure has matched, so a near miss on an
	 * attribute is reported with the whole structure found */
	const struct tpf_pnode *pat_of[TPF_MATCH_MAX_NODES];
};

static const char *op_name(enum tpf_op op)
{
	const struct tpf_op_info *info = tpf_op_info(op);
	return info && info->name ? info->name : "?";
}

static const char *node_label(const struct tpf_node *n, char *buf, size_t size)
{
	if (!n)
		return "?";
	if (n->domain && *n->domain)
		snprintf(buf, size, "%s::%s '%s'", n->domain, n->op_type, n->name ? n->name : "");
	else
		snprintf(buf, size, "%s '%s'", n->op_type, n->name ? n->name : "");
	return buf;
}

/* "Mul[1] > Div[1] > Sqrt": the path from the root to goal g. */
static void goal_path(const struct goal *g, char *buf, size_t size)
{
	const struct goal *chain[32];
	size_t n = 0, len = 0;

	buf[0] = '\0';
	for (const struct goal *q = g; q && n < 32; q = q->parent)
		chain[n++] = q;
	while (n-- > 0) {
		const struct goal *q = chain[n];
		int w;
		if (q->p->kind == TPF_PNODE_OP)
			w = snprintf(buf + len, size - len, "%s%s", len ? " > " : "",
			             op_name(q->p->op));
		else
			w = snprintf(buf + len, size - len, "%s%s", len ? " > " : "",
			             q->p->kind == TPF_PNODE_CONST ? "constant" : "value");
		if (w < 0 || (size_t)w >= size - len)
			return;
		len += (size_t)w;
		if (q->p->name) {
			w = snprintf(buf + len, size - len, " '%s'", q->p->name);
			if (w < 0 || (size_t)w >= size - len)
				return;
			len += (size_t)w;
		}
		if (n > 0) {
			w = snprintf(buf + len, size - len, "[%d]", chain[n - 1]->operand);
			if (w < 0 || (size_t)w >= size - len)
				return;
			len += (size_t)w;
		}
	}
}

static int fail_at(struct matcher *mt, const struct goal *g, int progress, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Records a failure when it went deeper than every earlier one. Returns 0. */
static int fail_at(struct matcher *mt, const struct goal *g, int progress, const char *fmt, ...)
{
	if (progress <= mt->best)
		return 0;
	mt->best = progress;
	if (!mt->why)
		return 0;
	char path[256], reason[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	if (g) {
		goal_path(g, path, sizeof(path));
		snprintf(mt->why, mt->why_size, "at %s: %s", path, reason);
	} else {
		snprintf(mt->why, mt->why_size, "%s", reason);
	}
	return 0;
}

#define FAIL(mt, g, ...) fail_at((mt), (g), (int)(mt)->m->n_nodes, __VA_ARGS__)

static void undo(struct tpf_match *m, size_t nb, size_t nn)
{
	m->n_bindings = nb;
	m->n_nodes = nn;
}

/* Binds `name`, or checks that an existing binding is the same value.
 * 1 on success. */
static int bind(struct matcher *mt, const struct goal *g, const char *name, struct tpf_value *v,
		struct tpf_node *n)
{
	struct tpf_match *m = mt->m;

	if (!name)
		return 1;
	for (size_t i = 0; i < m->n_bindings; i++) {
		if (strcmp(m->bindings[i].name, name) != 0)
			continue;
		if (m->bindings[i].value == v)
			return 1;
		return FAIL(mt, g, "'%s' is already '%s', here '%s'", name,
		            m->bindings[i].value ? m->bindings[i].value->name : "?",
		            v ? v->name : "?");
	}
	if (m->n_bindings >= TPF_MATCH_MAX_BINDINGS)
		return FAIL(mt, g, "too many bindings");
	m->bindings[m->n_bindings].name = name;
	m->bindings[m->n_bindings].value = v;
	m->bindings[m->n_bindings].node = n;
	m->n_bindings++;
	return 1;
}

static int bound_value(const struct tpf_match *m, const char *name, struct tpf_value **out)
{
	for (size_t i = 0; i < m->n_bindings; i++) {
		if (strcmp(m->bindings[i].name, name) == 0) {
			*out = m->bindings[i].value;
			return 1;
		}
	}
	return 0;
}

static int node_matched(const struct tpf_match *m, const struct tpf_node *n)
{
	for (size_t i = 0; i < m->n_nodes; i++)
		if (m->nodes[i] == n)
			return 1;
	return 0;
}

static int push_node(struct matcher *mt, const struct goal *g, struct tpf_node *n,
		     const struct tpf_pnode *p)
{
	struct tpf_match *m = mt->m;

	if (m->n_nodes >= TPF_MATCH_MAX_NODES)
		return FAIL(mt, g, "too many matched nodes");
	mt->pat_of[m->n_nodes] = p;
	m->nodes[m->n_nodes++] = n;
	return 1;
}

static int solve(struct matcher *mt, const struct goal *g);

static int finish(struct matcher *mt)
{
	struct tpf_match *m = mt->m;
	const struct tpf_pattern *p = m->pattern;
	char buf[160];

	/* in a function body an attribute may name the caller's: its value is
	 * not known here, so no check could read it */
	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct tpf_node *n = m->nodes[i];
		for (size_t k = 0; k < n->n_attrs; k++)
			if (n->attrs[k].ref_attr_name) {
				fail_at(mt, NULL, (int)m->n_nodes + 1,
				        "%s: attribute '%s' refers to the calling node's '%s'",
				        node_label(n, buf, sizeof(buf)), n->attrs[k].name,
				        n->attrs[k].ref_attr_name);
				return 0;
			}
	}
	for (size_t i = 0; i < m->n_nodes; i++) {
		const struct tpf_pnode *q = mt->pat_of[i];
		const char *r = q && q->pred ? q->pred(m->nodes[i], m) : NULL;
		if (r) {
			fail_at(mt, NULL, (int)m->n_nodes + 1, "%s: %s",
			        node_label(m->nodes[i], buf, sizeof(buf)), r);
			return 0;
		}
	}
	if (!p->check)
		return 1;
	memset(m->facts, 0, sizeof(m->facts));
	const char *r = p->check(mt->pc, m);
	if (!r)
		return 1;
	fail_at(mt, NULL, (int)m->n_nodes + 1, "check: %s", r);
	return 0;
}

/* An intermediate's output must be used once, by the pattern. */
static int single_use_ok(struct matcher *mt, const struct goal *g, struct tpf_node *n,
			 struct tpf_value *v, unsigned flags)
{
	if (n == mt->m->root || (flags & TPF_PNODE_MULTI_USE))
		return 1;
	size_t uses = tpf_value_use_count(v);
	if (uses == 1)
		return 1;
	char buf[160];
	return FAIL(mt, g, "%s: output '%s' has %zu uses; an intermediate may have only one",
	            node_label(n, buf, sizeof(buf)), v->name, uses);
}

static int solve_op(struct matcher *mt, const struct goal *g)
{
	struct tpf_match *m = mt->m;
	const struct tpf_pnode *p = g->p;
	struct tpf_value *v = g->v;
	char buf[160];

	if (!v)
		return FAIL(mt, g, "expected %s, the input is omitted", op_name(p->op));
	struct tpf_node *n = v->producer;
	if (!n || n->erased)
		return FAIL(mt, g, "expected %s, found '%s' (%s)", op_name(p->op), v->name,
		            v->kind == TPF_VALUE_GRAPH_INPUT   ? "a graph input"
		            : v->kind == TPF_VALUE_INITIALIZER ? "an initializer"
		                                               : "not produced by a node");
	if (n->op != p->op)
		return FAIL(mt, g, "expected %s, found %s", op_name(p->op),
		            node_label(n, buf, sizeof(buf)));
	if (v->producer_index != p->output)
		return FAIL(mt, g, "%s: uses output %d, expected output %d",
		            node_label(n, buf, sizeof(buf)), v->producer_index, p->output);
	if (p->name) {
		struct tpf_value *prev;
		if (bound_value(m, p->name, &prev)) {
			if (prev != v)
				return FAIL(mt, g, "'%s' is already '%s', here '%s'", p->name,
				            prev ? prev->name : "?", v->name);
			return solve(mt, g->next); /* the same subtree, matched already */
		}
	}
	if (!single_use_ok(mt, g, n, v, p->flags))
		return 0;
	if (n != m->root) {
		if (node_matched(m, n))
			return FAIL(mt, g, "%s is matched twice", node_label(n, buf, sizeof(buf)));
		if (!push_node(mt, g, n, p))
			return 0;
	} else {
		mt->pat_of[0] = p;
	}

	size_t k = 0;
	while (p->operands && p->operands[k])
		k++;
	if (n->n_inputs < k || (n->n_inputs > k && !(p->flags & TPF_PNODE_EXTRA_INPUTS)))
		return FAIL(mt, g, "%s has %zu inputs, the pattern %zu",
		            node_label(n, buf, sizeof(buf)), n->n_inputs, k);
	if (!bind(mt, g, p->name, v, n))
		return 0;
	if (k == 0)
		return solve(mt, g->next);
	if (k > 8)
		return FAIL(mt, g, "pattern node has more than 8 operands");

	struct goal kids[8];
	size_t nb = m->n_bindings, nn = m->n_nodes;
	int orders = (p->flags & TPF_PNODE_COMMUTE) && k == 2 ? 2 : 1;
	for (int o = 0; o < orders; o++) {
		for (size_t i = 0; i < k; i++) {
			size_t in = o ? k - 1 - i : i;
			kids[i].p = p->operands[i];
			kids[i].v = n->inputs[in];
			kids[i].next = i + 1 < k ? &kids[i + 1] : g->next;
			kids[i].parent = g;
			kids[i].operand = (int)in;
			kids[i].cast_done = 0;
		}
		if (solve(mt, &kids[0]))
			return 1;
		undo(m, nb, nn);
	}
	return 0;
}

static int solve(struct matcher *mt, const struct goal *g)
{
	struct tpf_match *m = mt->m;

	if (!g)
		return finish(mt);
	if (++mt->steps > MATCH_MAX_STEPS)
		return FAIL(mt, g, "match step limit reached");

	const struct tpf_pnode *p = g->p;
	size_t nb = m->n_bindings, nn = m->n_nodes;

	if ((p->flags & TPF_PNODE_OPT_CAST) && !g->cast_done) {
		struct goal inner = *g;
		inner.cast_done = 1;
		struct tpf_node *c = g->v ? g->v->producer : NULL;
		if (c && !c->erased && c->op == TPF_OP_CAST && c->n_inputs == 1 && c->inputs[0] &&
		    (c == m->root || tpf_value_use_count(g->v) == 1)) {
			int ok = c == m->root || (!node_matched(m, c) && push_node(mt, g, c, NULL));
			if (ok && p->cast_name)
				ok = bind(mt, g, p->cast_name, g->v, c);
			inner.v = c->inputs[0];
			if (ok && solve(mt, &inner))
				return 1;
			undo(m, nb, nn);
		}
		inner.v = g->v;
		return solve(mt, &inner);
	}

	switch (p->kind) {
	case TPF_PNODE_VALUE:
		if (!g->v)
			return FAIL(mt, g, "the input is omitted");
		if (!bind(mt, g, p->name, g->v, g->v->producer))
			return 0;
		return solve(mt, g->next);
	case TPF_PNODE_CONST:
		if (!g->v)
			return FAIL(mt, g, "expected a constant, the input is omitted");
		if (!tpf_value_constant(g->v))
			return FAIL(mt, g, "'%s' is not a constant", g->v->name);
		if (!bind(mt, g, p->name, g->v, g->v->producer))
			return 0;
		return solve(mt, g->next);
	case TPF_PNODE_OP:
		return solve_op(mt, g);
	case TPF_PNODE_ALT:
		for (size_t i = 0; p->operands && p->operands[i]; i++) {
			struct goal alt = *g;
			alt.p = p->operands[i];
			alt.cast_done = 0;
			if (solve(mt, &alt))
				return 1;
			undo(m, nb, nn);
		}
		return 0;
	default:
		return FAIL(mt, g, "bad pattern node kind %d", (int)p->kind);
	}
}

static int root_may_match(const struct tpf_pattern *p, const struct tpf_node *n)
{
	const struct tpf_pnode *r = p->root;
	if (!r || r->kind != TPF_PNODE_OP)
		return 0;
	return n->op == r->op || ((r->flags & TPF_PNODE_OPT_CAST) && n->op == TPF_OP_CAST);
}

int tpf_pattern_match(const struct tpf_pattern *p, const struct tpf_pattern_context *pc,
		      struct tpf_node *n, struct tpf_match *m, char *why, size_t why_size,
		      int *progress)
{
	static const struct tpf_pattern_context unknown = {.rank = -1, .world_size = -1};
	struct matcher mt = {.m = m, .pc = pc ? pc : &unknown, .why = why, .why_size = why_size,
	                     .best = -1};
	char buf[160];
	int ok = 0;

	m->pattern = p;
	m->root = n;
	m->n_bindings = 0;
	m->n_nodes = 0;
	if (why && why_size)
		why[0] = '\0';
	if (!root_may_match(p, n) || n->erased) {
		fail_at(&mt, NULL, 0, "%s is not a %s", node_label(n, buf, sizeof(buf)),
		        p->root ? op_name(p->root->op) : "?");
		goto out;
	}
	size_t out_index = n->op == p->root->op ? (size_t)p->root->output : 0;
	if (out_index >= n->n_outputs || !n->outputs[out_index]) {
		fail_at(&mt, NULL, 0, "%s has no output %zu", node_label(n, buf, sizeof(buf)),
		        out_index);
		goto out;
	}
	mt.pat_of[0] = NULL;
	m->nodes[m->n_nodes++] = n;
	struct goal root = {.p = p->root, .v = n->outputs[out_index], .operand = -1};
	ok = solve(&mt, &root);

out:
	if (progress)
		*progress = mt.best;
	return ok;
}

/* ------------------------------------------------------------------ worklist */

struct tpf_worklist {
	struct tpf_node **items;
	size_t n, cap;
	uint8_t *queued; /* by node id */
	size_t n_queued;
};

static void worklist_free(struct tpf_worklist *wl)
{
	tpf_free(wl->items);
	tpf_free(wl->queued);
}

int tpf_pattern_grow_zeroed(void **arr, size_t n, size_t want, size_t elem)
{
	unsigned char *p = tpf_realloc(*arr, want * elem);

	if (!p)
		return -1;
	memset(p + n * elem, 0, (want - n) * elem);
	*arr = p;
	return 0;
}

static enum tpf_status worklist_push(struct tpf_worklist *wl, struct tpf_node *n)
{
	if (!wl || !n || n->erased)
		return TPF_OK;
	if (n->id >= wl->n_queued) {
		size_t want = wl->n_queued ? wl->n_queued : 64;
		while (want <= n->id)
			want *= 2;
		if (tpf_pattern_grow_zeroed((void **)&wl->queued, wl->n_queued, want, 1))
			return TPF_ERR_NOMEM;
		wl->n_queued = want;
	}
	if (wl->queued[n->id])
		return TPF_OK;
	if (wl->n == wl->cap) {
		size_t cap = wl->cap ? wl->cap * 2 : 256, bytes;
		if (tpf_mul_size(cap, sizeof(*wl->items), &bytes))
			return TPF_ERR_LIMIT;
		struct tpf_node **items = tpf_realloc(wl->items, bytes);
		if (!items)
			return TPF_ERR_NOMEM;
		wl->items = items;
		wl->cap = cap;
	}
	wl->items[wl->n++] = n;
	wl->queued[n->id] = 1;
	return TPF_OK;
}

static struct tpf_node *worklist_pop(struct tpf_worklist *wl)
{
	if (!wl->n)
		return NULL;
	struct tpf_node *n = wl->items[--wl->n];
	wl->queued[n->id] = 0;
	return n;
}

/* Users of a value, then producers of a node's inputs: the neighbours whose
 * matches a change may have enabled.  Push failures are out of memory. */
static enum tpf_status push_users(struct tpf_worklist *wl, const struct tpf_value *v)
{
	for (size_t i = 0; v && i < v->n_uses; i++) {
		enum tpf_status st = worklist_push(wl, v->uses[i].node);
		if (st)
			return st;
	}
	return TPF_OK;
}

static enum tpf_status push_producers(struct tpf_worklist *wl, const struct tpf_node *n)
{
	for (size_t i = 0; i < n->n_inputs; i++) {
		if (n->inputs[i] && n->inputs[i]->producer) {
			enum tpf_status st = worklist_push(wl, n->inputs[i]->producer);
			if (st)
				return st;
		}
	}
	return TPF_OK;
}

/* ------------------------------------------------------------------ rewriter */

static enum tpf_status rw_nomem(struct tpf_rewriter *rw, const char *what)
{
	char buf[160];
	return tpf_diag_fail(rw->diag, TPF_ERR_NOMEM, "%s: %s: %s failed (out of memory)",
	                     rw->anchor ? tpf_node_describe(rw->anchor, buf, sizeof(buf)) : "graph",
	                     rw->pass_name ? rw->pass_name : "rewrite", what);
}

struct tpf_node *tpf_rewriter_create(struct tpf_rewriter *rw, enum tpf_op op,
				     struct tpf_value *const *inputs, size_t n_inputs,
				     size_t n_outputs, const char *const *output_names)
{
	const struct tpf_op_info *info = tpf_op_info(op);
	struct tpf_graph *g = rw->graph;
	char *name = NULL;
	struct tpf_node *n = NULL;

	if (!info || op == TPF_OP_UNKNOWN) {
		tpf_diag_add(rw->diag, TPF_SEV_ERROR, "%s: cannot create a node of unknown op %d",
		             rw->pass_name ? rw->pass_name : "rewrite", (int)op);
		return NULL;
	}
	/* "<root name>/<op>" keeps the origin readable; else "<op>_<id>". */
	const char *base = rw->anchor && rw->anchor->name ? rw->anchor->name : "";
	size_t blen = strlen(base);
	/* an anchor a pass created is "<origin>/<its op>": keep only <origin> */
	if (rw->anchor && rw->anchor->origin_pass && rw->anchor->op_type) {
		size_t olen = strlen(rw->anchor->op_type);
		if (blen > olen + 1 && base[blen - olen - 1] == '/' &&
		    strcmp(base + blen - olen, rw->anchor->op_type) == 0)
			blen -= olen + 1;
	}
	size_t len = blen + strlen(info->name) + 32;
	name = tpf_malloc(len);
	if (!name) {
		rw_nomem(rw, "node name");
		return NULL;
	}
	if (blen)
		snprintf(name, len, "%.*s/%s", (int)blen, base, info->name);
	else
		snprintf(name, len, "%s_%u", info->name, (unsigned)g->next_node_id);
	n = tpf_graph_insert_node(g, rw->anchor, info->domain, info->name, name, inputs, n_inputs,
	                          n_outputs, output_names);
	tpf_free(name);
	if (!n) {
		rw_nomem(rw, "creating a node");
		return NULL;
	}
	n->origin_pass = rw->pass_name;
	n->origin_pattern = rw->pattern_name;
	rw->n_created++;
	if (worklist_push(rw->worklist, n)) {
		rw_nomem(rw, "worklist");
		return NULL;
	}
	if (rw->trace) {
		char buf[160];
		fprintf(rw->trace, "[%s]   created %s\n", rw->pass_name,
		        tpf_node_describe(n, buf, sizeof(buf)));
	}
	return n;
}

enum tpf_status tpf_rewriter_copy_attrs(struct tpf_node *dst, const struct tpf_node *src,
					const char *const *names)
{
	enum tpf_status st = TPF_OK;
	for (; *names && !st; names++) {
		const struct tpf_attr *a = tpf_node_attr(src, *names);
		if (a)
			st = tpf_node_add_attr(dst, a);
	}
	return st;
}

enum tpf_status tpf_rewriter_replace(struct tpf_rewriter *rw, struct tpf_value *from,
				     struct tpf_value *to)
{
	enum tpf_status st;

	if (!from || !to)
		return TPF_ERR_INVALID;
	if (from == to)
		return TPF_OK;
	if (to->type.kind == TPF_TYPE_NONE && from->type.kind != TPF_TYPE_NONE) {
		st = tpf_value_copy_type(to, &from->type);
		if (st)
			return rw_nomem(rw, "copying a type");
	}
	st = tpf_value_replace_uses(from, to);
	if (st)
		return rw_nomem(rw, "replacing uses");
	if (to->producer && to->producer->origin_pass == rw->pass_name &&
	    to->producer->id >= rw->first_new_id) {
		if (rw->n_renames == rw->cap_renames) {
			size_t cap = rw->cap_renames ? rw->cap_renames * 2 : 8;
			struct tpf_rename *r = tpf_realloc(rw->renames, cap * sizeof(*r));
			if (!r)
				return rw_nomem(rw, "rename list");
			rw->renames = r;
			rw->cap_renames = cap;
		}
		rw->renames[rw->n_renames].from = from;
		rw->renames[rw->n_renames].to = to;
		rw->n_renames++;
	}
	if (push_users(rw->worklist, to))
		return rw_nomem(rw, "worklist");
	return TPF_OK;
}

enum tpf_status tpf_rewriter_erase(struct tpf_rewriter *rw, struct tpf_node *n)
{
	char buf[160];

	if (rw->trace)
		fprintf(rw->trace, "[%s]   erased %s\n", rw->pass_name,
		        tpf_node_describe(n, buf, sizeof(buf)));
	if (push_producers(rw->worklist, n))
		return rw_nomem(rw, "worklist");
	enum tpf_status st = tpf_graph_erase_node(rw->graph, n);
	if (st)
		return tpf_diag_fail(rw->diag, st,
		                     "%s: %s: cannot erase it, its outputs are still used",
		                     tpf_node_describe(n, buf, sizeof(buf)),
		                     rw->pass_name ? rw->pass_name : "rewrite");
	rw->n_erased++;
	return TPF_OK;
}

enum tpf_status tpf_rewriter_revisit_users(struct tpf_rewriter *rw, const struct tpf_value *v)
{
	for (size_t i = 0; v && i < v->n_uses; i++) {
		const struct tpf_node *u = v->uses[i].node;
		for (size_t k = 0; k < u->n_outputs; k++)
			if (push_users(rw->worklist, u->outputs[k]))
				return rw_nomem(rw, "worklist");
	}
	return TPF_OK;
}

static int node_dead(const struct tpf_node *n)
{
	for (size_t i = 0; i < n->n_outputs; i++)
		if (n->outputs[i] && tpf_value_use_count(n->outputs[i]))
			return 0;
	return 1;
}

enum tpf_status tpf_rewriter_erase_if_dead(struct tpf_rewriter *rw, struct tpf_node *n)
{
	if (!n || n->erased || n->graph != rw->graph || !node_dead(n))
		return TPF_OK;
	return tpf_rewriter_erase(rw, n);
}

enum tpf_status tpf_rewriter_erase_dead(struct tpf_rewriter *rw, const struct tpf_match *m)
{
	int again = 1;

	while (again) {
		again = 0;
		for (size_t i = 0; i < m->n_nodes; i++) {
			struct tpf_node *n = m->nodes[i];
			if (n->erased || !node_dead(n))
				continue;
			enum tpf_status st = tpf_rewriter_erase(rw, n);
			if (st)
				return st;
			again = 1;
		}
	}
	return TPF_OK;
}

/* Gives replaced names to their replacements once the old values are gone. */
static enum tpf_status rewriter_apply_renames(struct tpf_rewriter *rw)
{
	for (size_t i = 0; i < rw->n_renames; i++) {
		struct tpf_value *from = rw->renames[i].from, *to = rw->renames[i].to;
		if (!to->producer || to->producer->erased)
			continue;
		if (from->producer && !from->producer->erased)
			continue; /* still alive under its name */
		if (from->kind != TPF_VALUE_NODE_OUTPUT ||
		    tpf_graph_find_value(rw->graph, from->name))
			continue;
		int done = 0; /* a value replacing several takes the first name */
		for (size_t j = 0; j < i; j++)
			done |= rw->renames[j].to == to;
		if (done)
			continue;
		enum tpf_status st = tpf_value_rename(to, from->name);
		if (st == TPF_ERR_NOMEM)
			return rw_nomem(rw, "renaming a value");
	}
	rw->n_renames = 0;
	return TPF_OK;
}

/* ------------------------------------------------------------------ helpers */

static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	if (exp == 0) {
		if (man == 0) {
			bits = sign;
		} else {
			exp = 127 - 15 + 1;
			while (!(man & 0x400)) {
				man <<= 1;
				exp--;
			}
			man &= 0x3ff;
			bits = sign | (exp << 23) | (man << 13);
		}
	} else if (exp == 31) {
		bits = sign | 0x7f800000u | (man << 13);
	} else {
		bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
	}
	float f;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

int tpf_pattern_const_scalar(const struct tpf_value *v, double *out)
{
	const struct tpf_tensor *t = tpf_value_constant(v);
	if (!t || !t->data || tpf_tensor_numel(t) != 1)
		return -1;
	const unsigned char *p = t->data;
	switch (t->dtype) {
	case TPF_DTYPE_FLOAT: {
		float f;
		if (t->nbytes < 4)
			return -1;
		memcpy(&f, p, 4);
		*out = f;
		return 0;
	}
	case TPF_DTYPE_DOUBLE:
		if (t->nbytes < 8)
			return -1;
		memcpy(out, p, 8);
		return 0;
	case TPF_DTYPE_FLOAT16:
	case TPF_DTYPE_BFLOAT16: {
		uint16_t h;
		if (t->nbytes < 2)
			return -1;
		memcpy(&h, p, 2);
		if (t->dtype == TPF_DTYPE_FLOAT16) {
			*out = half_to_float(h);
		} else {
			uint32_t bits = (uint32_t)h << 16;
			float f;
			memcpy(&f, &bits, 4);
			*out = f;
		}
		return 0;
	}
	case TPF_DTYPE_INT32: {
		int32_t i;
		if (t->nbytes < 4)
			return -1;
		memcpy(&i, p, 4);
		*out = i;
		return 0;
	}
	case TPF_DTYPE_INT64: {
		int64_t i;
		if (t->nbytes < 8)
			return -1;
		memcpy(&i, p, 8);
		*out = (double)i;
		return 0;
	}
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_INT8:
	case TPF_DTYPE_UINT8:
		/* only zero is needed (quantizer zero points) */
		if (t->nbytes < 1)
			return -1;
		if (t->dtype == TPF_DTYPE_INT8)
			*out = (int8_t)p[0];
		else if (t->dtype == TPF_DTYPE_UINT8)
			*out = p[0];
		else
			*out = (p[0] & 0x7f) == 0 ? 0.0 : 1.0; /* +-0 or not */
		return 0;
	default:
		return -1;
	}
}

int tpf_pattern_const_ints(const struct tpf_value *v, int64_t *out, size_t max, size_t *count)
{
	const struct tpf_tensor *t = tpf_value_constant(v);
	if (!t)
		return tpf_value_ints(v, out, max, count); /* computed from shapes */
	if (t->dtype != TPF_DTYPE_INT64 && t->dtype != TPF_DTYPE_INT32)
		return -1;
	int64_t n = tpf_tensor_numel(t);
	size_t esz = t->dtype == TPF_DTYPE_INT64 ? 8 : 4;
	if (n < 0 || (uint64_t)n > max || (n && !t->data) || t->nbytes < (size_t)n * esz)
		return -1;
	for (int64_t i = 0; i < n; i++) {
		if (esz == 8) {
			memcpy(&out[i], (const char *)t->data + i * 8, 8);
		} else {
			int32_t x;
			memcpy(&x, (const char *)t->data + i * 4, 4);
			out[i] = x;
		}
	}
	*count = (size_t)n;
	return 0;
}

enum tpf_dtype tpf_pattern_dtype(const struct tpf_value *v)
{
	/* the IR answers from the value's type or its producer's op record */
	return tpf_value_dtype(v);
}

int tpf_pattern_rank(const struct tpf_value *v)
{
	if (!v || v->type.kind != TPF_TYPE_TENSOR)
		return -1;
	return v->type.shape.rank;
}

int tpf_pattern_last_dim(const struct tpf_value *v, int64_t *dim)
{
	int r = tpf_pattern_rank(v);
	if (r <= 0)
		return 0;
	const struct tpf_dim *d = &v->type.shape.dims[r - 1];
	if (d->param || d->value < 0)
		return 0;
	*dim = d->value;
	return 1;
}

static int unknown_rank(const struct tpf_value *v)
{
	return v && v->type.kind == TPF_TYPE_TENSOR && v->type.shape.rank < 0;
}

int tpf_pattern_shapes_differ(const struct tpf_value *a, const struct tpf_value *b)
{
	int ra = tpf_pattern_rank(a), rb = tpf_pattern_rank(b);
	enum tpf_answer eq = tpf_value_shapes_equal(a, b);

	if (eq == TPF_ANSWER_YES)
		return 0;
	if (eq == TPF_ANSWER_NO)
		return 1;
	/* a tensor whose rank is known to be unknown (declared `[*]`, or
	 * inferred so through such an input) may broadcast against the other:
	 * an Add of [T, H] and a residual of unknown rank may be [T, 1] or [H] */
	if (unknown_rank(a) || unknown_rank(b))
		return 1;
	if (ra < 0 || rb < 0)
		return 0; /* not inferred yet: the op records check the bound shapes */
	/* not proven equal: they differ where both dims are named (static or
	 * symbolic) and the IR cannot tell them equal; wholly unknown dims
	 * do not count */
	for (int i = 0; i < ra; i++) {
		const struct tpf_dim *x = &a->type.shape.dims[i], *y = &b->type.shape.dims[i];
		int xn = x->param || x->value >= 0, yn = y->param || y->value >= 0;
		if (xn && yn && tpf_graph_dims_equal(a->graph, x, y) != TPF_ANSWER_YES)
			return 1;
	}
	return 0;
}

int tpf_pattern_debug_enabled(const struct tpf_pass_context *ctx, const char *name)
{
	const char *list = ctx && ctx->debug_only ? ctx->debug_only : getenv("TPF_DEBUG");
	size_t nlen = strlen(name);

	if (!list || !*list)
		return 0;
	for (const char *p = list; *p;) {
		while (*p == ',' || *p == ' ')
			p++;
		const char *e = p;
		while (*e && *e != ',' && *e != ' ')
			e++;
		size_t len = (size_t)(e - p);
		if ((len == nlen && strncmp(p, name, len) == 0) ||
		    (len == 3 && !strncmp(p, "all", 3)) || (len == 1 && *p == '1'))
			return 1;
		p = e;
	}
	return 0;
}

/* ------------------------------------------------------------------ context */

/* A non-negative count from metadata_props; -1 when absent or not one. */
static int metadata_count(const struct tpf_model *m, const char *key)
{
	const char *s = m ? tpf_model_metadata(m, key) : NULL;
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	v = strtol(s, &end, 10);
	return *end || v < 0 || v > 1000000 ? -1 : (int)v;
}

void tpf_pattern_context_init(struct tpf_pattern_context *pc, const struct tpf_model *m,
			      const char *pass_name, const struct tpf_pass_context *ctx)
{
	int world = -1, rank = -1;

	if (ctx && ctx->world_size > 0) {
		world = ctx->world_size;
		rank = ctx->rank >= 0 ? ctx->rank : metadata_count(m, "tp_rank");
	} else {
		world = metadata_count(m, "tp_world_size");
		rank = metadata_count(m, "tp_rank");
		if (world == 0)
			world = -1;
	}
	pc->model = m;
	pc->pass_name = pass_name;
	pc->rank = rank;
	pc->world_size = world;
}

/* ------------------------------------------------------------------ driver */

static void report_near_misses(struct tpf_graph *g, const struct tpf_pattern_context *pc,
			       const struct tpf_pattern *const *patterns, struct tpf_match *m,
			       FILE *f)
{
	char why[512], buf[160];

	for (struct tpf_node *n = g->first; n; n = n->next) {
		for (size_t i = 0; patterns[i]; i++) {
			const struct tpf_pattern *p = patterns[i];
			int progress;
			if (!root_may_match(p, n))
				continue;
			if (tpf_pattern_match(p, pc, n, m, why, sizeof(why), &progress))
				continue; /* would match: not a near miss (rewrite declined) */
			int min = p->explain_min_nodes > 0 ? p->explain_min_nodes : 2;
			if (progress < min)
				continue;
			fprintf(f, "near-miss: %s/%s at %s: %s\n", pc->pass_name, p->name,
			        tpf_node_describe(n, buf, sizeof(buf)), why);
		}
	}
}

/* One graph to a fixed point: the main graph, a subgraph or a function
 * body.  *any: whether a rewrite happened; *created: whether it created
 * nodes (which need the ai.tpfuse opset). */
static enum tpf_status run_graph(struct tpf_graph *g, const struct tpf_pass *pass,
				 struct tpf_pass_context *ctx, const struct tpf_pattern_context *pcp,
				 struct tpf_match *m, FILE *trace, int *any_out, int *created,
				 struct tpf_diag *d)
{
	static const struct tpf_pattern *const none[] = {NULL};
	const char *pass_name = pcp->pass_name;
	const struct tpf_pattern *const *patterns = pass && pass->patterns ? pass->patterns : none;
	struct tpf_pattern_context pc = *pcp;
	struct tpf_worklist wl = {0};
	struct tpf_rewriter rw = {0};
	enum tpf_status st = TPF_OK;
	int any = 0;
	char why[512], buf[160];

	size_t initial = 0;
	for (struct tpf_node *n = g->first; n; n = n->next, initial++) {
		st = worklist_push(&wl, n);
		if (st) {
			st = tpf_diag_fail(d, st, "%s: out of memory (worklist)", pass_name);
			goto out;
		}
	}
	rw.graph = g;
	rw.pass_name = pass_name;
	rw.worklist = &wl;
	rw.trace = trace;
	rw.diag = d;

	uint64_t visits = 0, rewrites = 0;
	struct tpf_node *n;
	while ((n = worklist_pop(&wl))) {
		if (n->erased)
			continue;
		/* Every rewrite must make progress; a pattern set that cycles would
		 * otherwise never stop. */
		uint64_t limit = 1000 + 32 * ((uint64_t)initial + rw.n_created);
		if (++visits > limit || rewrites > 8 * (uint64_t)initial + 1000) {
			st = tpf_diag_fail(
			    d, TPF_ERR_LIMIT,
			    "%s: no fixed point after %llu node visits and %llu rewrites",
			    pass_name, (unsigned long long)visits, (unsigned long long)rewrites);
			goto out;
		}
		for (size_t i = 0; patterns[i]; i++) {
			const struct tpf_pattern *p = patterns[i];
			if (!root_may_match(p, n))
				continue;
			int progress;
			if (!tpf_pattern_match(p, &pc, n, m, trace ? why : NULL, sizeof(why),
			                       &progress)) {
				if (trace)
					fprintf(trace, "[%s] %s at %s: no match %s\n", pass_name,
					        p->name, tpf_node_describe(n, buf, sizeof(buf)),
					        why);
				continue;
			}
			if (trace)
				fprintf(trace, "[%s] %s at %s: matched %zu nodes\n", pass_name,
				        p->name, tpf_node_describe(n, buf, sizeof(buf)),
				        m->n_nodes);
			rw.pattern_name = p->name;
			rw.anchor = n;
			rw.first_new_id = g->next_node_id;
			st = p->rewrite(&rw, m);
			if (st == TPF_OK)
				st = rewriter_apply_renames(&rw);
			if (st) {
				if (d && !d->error_count)
					tpf_diag_add(d, TPF_SEV_ERROR,
					             "%s: %s: pattern '%s' failed (%s)",
					             tpf_node_describe(n, buf, sizeof(buf)),
					             pass_name, p->name, tpf_status_name(st));
				goto out;
			}
			rewrites++;
			any = 1;
			if (ctx && ctx->stats)
				tpf_pass_stats_add(ctx->stats, pass_name, p->name, 1);
			if (!n->erased && (st = worklist_push(&wl, n))) {
				st =
				    tpf_diag_fail(d, st, "%s: out of memory (worklist)", pass_name);
				goto out;
			}
			break;
		}
	}
	if (any) {
		st = tpf_graph_toposort(g, d);
		if (st)
			goto out;
	}
	if (ctx && ctx->explain)
		report_near_misses(g, &pc, patterns, m, ctx->explain);

out:
	*any_out |= any;
	*created |= rw.n_created > 0;
	rw.anchor = NULL;
	tpf_free(rw.renames);
	worklist_free(&wl);
	return st;
}

#define MAX_SUBGRAPH_DEPTH 64

/* g, then the subgraphs of its nodes (If/Loop/Scan bodies), depth first. */
static enum tpf_status run_nested(struct tpf_graph *g, const struct tpf_pass *pass,
				  struct tpf_pass_context *ctx, const struct tpf_pattern_context *pc,
				  struct tpf_match *m, FILE *trace, int *any, int *created, int depth,
				  struct tpf_diag *d)
{
	if (depth > MAX_SUBGRAPH_DEPTH)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s: subgraphs nested deeper than %d",
		                     pc->pass_name, MAX_SUBGRAPH_DEPTH);
	enum tpf_status st = run_graph(g, pass, ctx, pc, m, trace, any, created, d);
	for (struct tpf_node *n = g->first; !st && n; n = n->next) {
		for (size_t i = 0; !st && i < n->n_attrs; i++) {
			const struct tpf_attr *a = &n->attrs[i];
			if (a->kind == TPF_ATTR_GRAPH && a->g)
				st = run_nested(a->g, pass, ctx, pc, m, trace, any, created, depth + 1, d);
			else if (a->kind == TPF_ATTR_GRAPHS && a->graphs)
				for (size_t k = 0; !st && k < a->n; k++)
					if (a->graphs[k])
						st = run_nested(a->graphs[k], pass, ctx, pc, m, trace, any,
						                created, depth + 1, d);
		}
	}
	return st;
}

static void each_nested(const struct tpf_graph *g, void (*fn)(const struct tpf_graph *, void *),
			void *arg, int depth)
{
	if (!g || depth > MAX_SUBGRAPH_DEPTH)
		return;
	fn(g, arg);
	for (const struct tpf_node *n = g->first; n; n = n->next)
		for (size_t i = 0; i < n->n_attrs; i++) {
			const struct tpf_attr *a = &n->attrs[i];
			if (a->kind == TPF_ATTR_GRAPH)
				each_nested(a->g, fn, arg, depth + 1);
			else if (a->kind == TPF_ATTR_GRAPHS && a->graphs)
				for (size_t k = 0; k < a->n; k++)
					each_nested(a->graphs[k], fn, arg, depth + 1);
		}
}

void tpf_pattern_each_graph(const struct tpf_model *m, void (*fn)(const struct tpf_graph *, void *),
			    void *arg)
{
	if (!m)
		return;
	each_nested(m->graph, fn, arg, 0);
	for (size_t i = 0; i < m->n_functions && m->functions; i++)
		each_nested(m->functions[i].body, fn, arg, 0);
}

struct unfused_walk {
	FILE *f;
	const struct tpf_unfused_explain *e;
};

static void explain_unfused_graph(const struct tpf_graph *g, void *arg)
{
	const struct unfused_walk *w = arg;
	const struct tpf_unfused_explain *e = w->e;
	char buf[160], ubuf[160];

	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (n->op != e->op || !n->n_outputs || !n->outputs[0])
			continue;
		if (e->norm_line && e->norm_line(w->f, e->pass, n))
			continue;
		const struct tpf_value *v = n->outputs[0];
		tpf_node_describe(n, buf, sizeof(buf));
		if (v->n_uses)
			fprintf(w->f, "unfused: %s at %s: the %s value feeds %s (and %zu other uses), "
				      "not %s\n",
				e->pass, buf, e->value,
				tpf_node_describe(v->uses[0].node, ubuf, sizeof(ubuf)), v->n_uses - 1,
				e->wanted);
		else if (tpf_value_use_count(v))
			fprintf(w->f, "unfused: %s at %s: the %s value is a graph output, no %s reads it\n",
				e->pass, buf, e->value, e->reader);
		else
			fprintf(w->f, "unfused: %s at %s: nothing reads the %s value\n", e->pass, buf,
				e->value);
	}
}

void tpf_pattern_explain_unfused(const struct tpf_model *m, FILE *f,
				 const struct tpf_unfused_explain *e)
{
	struct unfused_walk w = {f, e};

	tpf_pattern_each_graph(m, explain_unfused_graph, &w);
}

/* A function body that now holds ai.tpfuse nodes imports the domain too
 * (a function lists its own opsets). */
static enum tpf_status function_import(struct tpf_model *model, struct tpf_function *fn)
{
	for (size_t i = 0; i < fn->n_opsets; i++)
		if (fn->opsets[i].domain && strcmp(fn->opsets[i].domain, TPF_DOMAIN) == 0)
			return TPF_OK;
	struct tpf_opset *o = tpf_arena_alloc(model->arena, (fn->n_opsets + 1) * sizeof(*o));
	if (!o)
		return TPF_ERR_NOMEM;
	if (fn->n_opsets)
		memcpy(o, fn->opsets, fn->n_opsets * sizeof(*o));
	o[fn->n_opsets].domain = TPF_DOMAIN;
	o[fn->n_opsets].version = 1;
	fn->opsets = o;
	fn->n_opsets++;
	return TPF_OK;
}

enum tpf_status tpf_pattern_run(struct tpf_model *model, const struct tpf_pass *pass,
				struct tpf_pass_context *ctx, int *changed, struct tpf_diag *d)
{
	struct tpf_graph *g = model ? model->graph : NULL;
	const char *pass_name = pass && pass->name ? pass->name : "?";
	struct tpf_pattern_context pc;
	enum tpf_status st = TPF_OK;
	int any = 0, created = 0;

	if (changed)
		*changed = 0;
	if (!g)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: no graph", pass_name);
	tpf_pattern_context_init(&pc, model, pass_name, ctx);
	FILE *trace = tpf_pattern_debug_enabled(ctx, pass_name)
	                  ? (ctx && ctx->explain ? ctx->explain : stderr)
	                  : NULL;
	struct tpf_match *m = tpf_malloc(sizeof(*m));
	if (!m)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", pass_name);

	/* the main graph and its subgraphs, then each model-local function's
	 * body and its subgraphs */
	st = run_nested(g, pass, ctx, &pc, m, trace, &any, &created, 0, d);
	for (size_t i = 0; !st && i < model->n_functions && model->functions; i++) {
		struct tpf_function *fn = &model->functions[i];
		int fn_created = 0;
		if (!fn->body)
			continue;
		st = run_nested(fn->body, pass, ctx, &pc, m, trace, &any, &fn_created, 0, d);
		if (!st && fn_created && function_import(model, fn))
			st = tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory (opset import)",
			                   pass_name);
		created |= fn_created;
	}
	/* nodes of the project's own domain need its opset import */
	if (!st && created && tpf_model_opset(model, TPF_DOMAIN) < 0 &&
	    tpf_model_set_opset(model, TPF_DOMAIN, 1))
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory (opset import)", pass_name);
	if (changed)
		*changed = any;
	tpf_free(m);
	return st;
}

enum tpf_status tpf_pattern_run_opset23(struct tpf_model *m, const struct tpf_pass *pass, const char *op,
					struct tpf_pass_context *ctx, int *changed, struct tpf_diag *d)
{
	const char *dom = tpf_model_opset(m, "") >= 0 ? "" : "ai.onnx";
	int64_t opset = tpf_model_opset(m, dom);
	struct tpf_opset_raise *undo = NULL;
	enum tpf_status st;

	*changed = 0;
	if (opset >= 0 && opset < 13) {
		if (ctx && ctx->explain)
			fprintf(ctx->explain,
				"near-miss: %s: the model's opset %" PRId64
				" is below 13 (raising it to 23 for %s would change Softmax's meaning)\n",
				pass->name, opset, op);
		return TPF_OK;
	}
	if (opset >= 0 && opset < 23) {
		/* raised (Reduce axes attributes become inputs), then verified
		 * there; put back as it was when either fails */
		struct tpf_diag *vd = tpf_diag_create();
		if (!vd)
			return TPF_ERR_NOMEM;
		st = tpf_model_raise_opset(m, 23, &undo, vd);
		if (st == TPF_ERR_NOMEM) {
			tpf_diag_free(vd);
			tpf_opset_raise_free(undo);
			return st;
		}
		if (st != TPF_OK || tpf_model_verify(m, vd) != TPF_OK) {
			if (ctx && ctx->explain) {
				fprintf(ctx->explain, "near-miss: %s: the model's opset %" PRId64 " cannot be raised to 23 (%s): ",
					pass->name, opset, op);
				tpf_diag_print(vd, ctx->explain);
			}
			tpf_diag_free(vd);
			st = tpf_opset_raise_undo(m, undo);
			tpf_opset_raise_free(undo);
			return st;
		}
		tpf_diag_free(vd);
	}
	st = tpf_pattern_run(m, pass, ctx, changed, d);
	if (st == TPF_OK && !*changed && undo)
		st = tpf_opset_raise_undo(m, undo);
	tpf_opset_raise_free(undo);
	return st;
}
