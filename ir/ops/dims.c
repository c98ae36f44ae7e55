/* SPDX-License-Identifier: MIT */
/*
 * Symbolic dims proven equal: a union-find over the dim names of one
 * graph, kept in the graph's arena (it dies with the graph).  Shape
 * inference joins two names when a shape function proves them equal (the
 * operands of an Add, MatMul's inner dims, a collective's output and its
 * input); a class may also learn a static value.  Facts that contradict
 * what a class already knows are dropped, never reported: a class is a
 * proof of equality, and a missing proof only makes answers UNKNOWN.
 */
#include "op-def.h"

#include <string.h>

struct dim_classes {
	const char **names;  /* by id */
	uint32_t *parent;    /* by id; a root is its own parent */
	int64_t *value;      /* by root id: static value, -1 none */
	uint32_t n, cap;
	uint32_t *slots;     /* hash of names: id + 1, 0 empty */
	size_t n_slots;      /* power of two, >= 2 * cap */
};

size_t op_name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return (size_t)(h ^ (h >> 29));
}

static const struct dim_classes *classes_of(const struct tpf_graph *g)
{
	return g ? (const struct dim_classes *)g->dim_classes : NULL;
}

/* Id of a name, or -1. */
static int64_t find_name(const struct dim_classes *dc, const char *name)
{
	size_t i;

	if (!dc || !dc->n_slots)
		return -1;
	for (i = op_name_hash(name) & (dc->n_slots - 1); dc->slots[i]; i = (i + 1) & (dc->n_slots - 1))
		if (strcmp(dc->names[dc->slots[i] - 1], name) == 0)
			return dc->slots[i] - 1;
	return -1;
}

static uint32_t root_of(const struct dim_classes *dc, uint32_t id)
{
	while (dc->parent[id] != id)
		id = dc->parent[id];
	return id;
}

/* Grows the tables (arena memory: the old arrays stay until the graph goes). */
static int grow(struct tpf_arena *a, struct dim_classes *dc)
{
	uint32_t cap = dc->cap ? dc->cap * 2 : 16, i;
	size_t n_slots = (size_t)cap * 2;
	const char **names = tpf_arena_alloc(a, cap * sizeof(*names));
	uint32_t *parent = tpf_arena_alloc(a, cap * sizeof(*parent));
	int64_t *value = tpf_arena_alloc(a, cap * sizeof(*value));
	uint32_t *slots = tpf_arena_alloc(a, n_slots * sizeof(*slots));

	if (!names || !parent || !value || !slots || cap > UINT32_MAX / 4)
		return -1;
	if (dc->n) {
		memcpy(names, dc->names, dc->n * sizeof(*names));
		memcpy(parent, dc->parent, dc->n * sizeof(*parent));
		memcpy(value, dc->value, dc->n * sizeof(*value));
	}
	for (i = 0; i < dc->n; i++) {
		size_t k = op_name_hash(names[i]) & (n_slots - 1);

		while (slots[k])
			k = (k + 1) & (n_slots - 1);
		slots[k] = i + 1;
	}
	dc->names = names;
	dc->parent = parent;
	dc->value = value;
	dc->slots = slots;
	dc->n_slots = n_slots;
	dc->cap = cap;
	return 0;
}

/* Id of a name, added when new; -1 on allocation failure. */
static int64_t intern(struct tpf_graph *g, const char *name)
{
	struct dim_classes *dc = g->dim_classes;
	int64_t id;
	size_t k;

	if (!dc) {
		dc = tpf_arena_alloc(g->arena, sizeof(*dc));
		if (!dc)
			return -1;
		g->dim_classes = dc;
	}
	id = find_name(dc, name);
	if (id >= 0)
		return id;
	if (dc->n == dc->cap && grow(g->arena, dc))
		return -1;
	dc->names[dc->n] = tpf_arena_strdup(g->arena, name);
	if (!dc->names[dc->n])
		return -1;
	dc->parent[dc->n] = dc->n;
	dc->value[dc->n] = -1;
	for (k = op_name_hash(name) & (dc->n_slots - 1); dc->slots[k]; k = (k + 1) & (dc->n_slots - 1))
		;
	dc->slots[k] = dc->n + 1;
	return dc->n++;
}

static int dim_known_static(const struct tpf_dim *d)
{
	return !d->param && d->value >= 0;
}

static int dim_symbolic(const struct tpf_dim *d)
{
	return d->param && *d->param;
}

/* The static value a dim is known to have (through its class), or -1. */
static int64_t static_value(const struct dim_classes *dc, const struct tpf_dim *d)
{
	int64_t id;

	if (dim_known_static(d))
		return d->value;
	if (!dim_symbolic(d) || (id = find_name(dc, d->param)) < 0)
		return -1;
	return dc->value[root_of(dc, (uint32_t)id)];
}

enum tpf_answer tpf_graph_dims_equal(const struct tpf_graph *g, const struct tpf_dim *a,
				     const struct tpf_dim *b)
{
	const struct dim_classes *dc = classes_of(g);
	int64_t va, vb, ia, ib;

	if (!a || !b)
		return TPF_ANSWER_UNKNOWN;
	if (dim_symbolic(a) && dim_symbolic(b) && strcmp(a->param, b->param) == 0)
		return TPF_ANSWER_YES;
	va = static_value(dc, a);
	vb = static_value(dc, b);
	if (va >= 0 && vb >= 0)
		return va == vb ? TPF_ANSWER_YES : TPF_ANSWER_NO;
	if (dim_symbolic(a) && dim_symbolic(b) && (ia = find_name(dc, a->param)) >= 0 &&
	    (ib = find_name(dc, b->param)) >= 0 &&
	    root_of(dc, (uint32_t)ia) == root_of(dc, (uint32_t)ib))
		return TPF_ANSWER_YES;
	return TPF_ANSWER_UNKNOWN;
}

enum tpf_answer tpf_value_shapes_equal(const struct tpf_value *a, const struct tpf_value *b)
{
	const struct tpf_shape *sa, *sb;
	int i, unknown = 0;

	if (!a || !b || a->type.kind != TPF_TYPE_TENSOR || b->type.kind != TPF_TYPE_TENSOR)
		return TPF_ANSWER_UNKNOWN;
	sa = &a->type.shape;
	sb = &b->type.shape;
	if (sa->rank < 0 || sb->rank < 0 || (sa->rank && !sa->dims) || (sb->rank && !sb->dims))
		return TPF_ANSWER_UNKNOWN;
	if (sa->rank != sb->rank)
		return TPF_ANSWER_NO;
	for (i = 0; i < sa->rank; i++) {
		/* dims of two graphs compare only by value or by name */
		const struct tpf_graph *g = a->graph == b->graph ? a->graph : NULL;
		enum tpf_answer e = tpf_graph_dims_equal(g, &sa->dims[i], &sb->dims[i]);

		if (e == TPF_ANSWER_NO)
			return TPF_ANSWER_NO;
		unknown |= e == TPF_ANSWER_UNKNOWN;
	}
	return unknown ? TPF_ANSWER_UNKNOWN : TPF_ANSWER_YES;
}

enum tpf_status tpf_graph_dims_unify(struct tpf_graph *g, const struct tpf_dim *a,
				     const struct tpf_dim *b)
{
	struct dim_classes *dc;
	int64_t ia, ib;
	uint32_t ra, rb;

	if (!g || !a || !b)
		return TPF_ERR_INVALID;
	if (dim_symbolic(a) && dim_symbolic(b)) {
		if (strcmp(a->param, b->param) == 0)
			return TPF_OK;
		if ((ia = intern(g, a->param)) < 0 || (ib = intern(g, b->param)) < 0)
			return TPF_ERR_NOMEM;
		dc = g->dim_classes;
		ra = root_of(dc, (uint32_t)ia);
		rb = root_of(dc, (uint32_t)ib);
		if (ra == rb)
			return TPF_OK;
		if (dc->value[ra] >= 0 && dc->value[rb] >= 0 && dc->value[ra] != dc->value[rb])
			return TPF_OK; /* contradicts what is known: dropped */
		if (dc->value[rb] < 0)
			dc->value[rb] = dc->value[ra];
		dc->parent[ra] = rb; /* b's class keeps its name */
		return TPF_OK;
	}
	if (dim_symbolic(b) && dim_known_static(a)) {
		const struct tpf_dim *t = a;

		a = b;
		b = t;
	}
	if (!dim_symbolic(a) || !dim_known_static(b))
		return TPF_OK; /* static with static, or an unknown dim: nothing to record */
	if ((ia = intern(g, a->param)) < 0)
		return TPF_ERR_NOMEM;
	dc = g->dim_classes;
	ra = root_of(dc, (uint32_t)ia);
	if (dc->value[ra] < 0)
		dc->value[ra] = b->value;
	return TPF_OK;
}

enum tpf_answer op_dims_equal(const struct tpf_shape_call *c, const struct tpf_dim *a,
			      const struct tpf_dim *b)
{
	return tpf_graph_dims_equal(c->graph, a, b);
}

void op_dims_unify(struct tpf_shape_call *c, const struct tpf_dim *a, const struct tpf_dim *b)
{
	/* in INFER mode the caller holds the graph for writing */
	if (c->mode == TPF_SHAPE_INFER && c->graph)
		(void)tpf_graph_dims_unify((struct tpf_graph *)c->graph, a, b);
}
