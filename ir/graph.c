/* SPDX-License-Identifier: MIT */
/* Models, graphs, values, nodes, use lists, attributes: the IR builder. */
#include "tpf-ir.h"
#include "graph-private.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ name index
 * Open addressing, linear probing, tombstones; keyed by value name. */

struct name_index {
	struct tpf_value **slots;
	size_t cap;   /* power of two */
	size_t count; /* live entries */
	size_t used;  /* live + tombstones */
};

static struct tpf_value tombstone_value;
#define TOMBSTONE (&tombstone_value)

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

static int index_rehash(struct name_index *ix, size_t cap)
{
	struct tpf_value **slots = tpf_calloc(cap, sizeof(*slots));
	if (!slots)
		return -1;
	for (size_t i = 0; i < ix->cap; i++) {
		struct tpf_value *v = ix->slots[i];
		if (!v || v == TOMBSTONE)
			continue;
		size_t j = hash_str(v->name) & (cap - 1);
		while (slots[j])
			j = (j + 1) & (cap - 1);
		slots[j] = v;
	}
	tpf_free(ix->slots);
	ix->slots = slots;
	ix->cap = cap;
	ix->used = ix->count;
	return 0;
}

static struct name_index *graph_index(const struct tpf_graph *g)
{
	return g->name_index;
}

static struct tpf_value *index_find(const struct name_index *ix, const char *name)
{
	if (!ix || !ix->cap || !name)
		return NULL;
	size_t j = hash_str(name) & (ix->cap - 1);
	for (;;) {
		struct tpf_value *v = ix->slots[j];
		if (!v)
			return NULL;
		if (v != TOMBSTONE && strcmp(v->name, name) == 0)
			return v;
		j = (j + 1) & (ix->cap - 1);
	}
}

static int index_insert(struct name_index *ix, struct tpf_value *v)
{
	if ((ix->used + 1) * 4 >= ix->cap * 3) {
		size_t cap = ix->cap ? ix->cap : 64;
		while ((ix->count + 1) * 2 >= cap)
			cap *= 2;
		if (cap == ix->cap)
			cap *= 2;
		if (index_rehash(ix, cap))
			return -1;
	}
	size_t j = hash_str(v->name) & (ix->cap - 1);
	while (ix->slots[j] && ix->slots[j] != TOMBSTONE)
		j = (j + 1) & (ix->cap - 1);
	if (!ix->slots[j])
		ix->used++;
	ix->slots[j] = v;
	ix->count++;
	return 0;
}

static void index_remove(struct name_index *ix, struct tpf_value *v)
{
	if (!ix || !ix->cap)
		return;
	size_t j = hash_str(v->name) & (ix->cap - 1);
	for (;;) {
		struct tpf_value *s = ix->slots[j];
		if (!s)
			return;
		if (s == v) {
			ix->slots[j] = TOMBSTONE;
			ix->count--;
			return;
		}
		j = (j + 1) & (ix->cap - 1);
	}
}

/* ------------------------------------------------------------ arrays */

/* Grows an arena array to hold at least `need` elements (graph-private.h). */
int ir_arena_grow(struct tpf_arena *a, void **arr, size_t *cap, size_t elem, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 4;
	while (ncap < need)
		ncap *= 2;
	size_t bytes;
	if (tpf_mul_size(ncap, elem, &bytes))
		return -1;
	void *p = tpf_arena_alloc(a, bytes);
	if (!p)
		return -1;
	if (*arr && *cap)
		memcpy(p, *arr, *cap * elem);
	*arr = p;
	*cap = ncap;
	return 0;
}

int ir_node_capture(struct tpf_node *owner, struct tpf_value *pv)
{
	size_t k;

	for (k = 0; k < owner->n_implicit; k++)
		if (owner->implicit_inputs[k] == pv)
			return 0;
	struct tpf_value **arr = tpf_arena_alloc(owner->graph->arena, (k + 1) * sizeof(*arr));
	if (!arr || ir_arena_grow(pv->graph->arena, (void **)&pv->uses, &pv->cap_uses,
	                          sizeof(*pv->uses), pv->n_uses + 1))
		return -1;
	if (k)
		memcpy(arr, owner->implicit_inputs, k * sizeof(*arr));
	arr[k] = pv;
	owner->implicit_inputs = arr;
	owner->n_implicit = k + 1;
	pv->uses[pv->n_uses].node = owner;
	pv->uses[pv->n_uses].index = -1 - (int)k;
	pv->n_uses++;
	return 0;
}

/* ------------------------------------------------------------ model */

struct tpf_model *tpf_model_create(void)
{
	struct tpf_model *m = tpf_calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->arena = tpf_arena_create();
	if (!m->arena)
		goto out_free_model;
	m->graph = tpf_graph_create(NULL);
	if (!m->graph)
		goto out_free_arena;
	m->ir_version = 10;
	m->base_dir = "";
	return m;

out_free_arena:
	tpf_arena_free(m->arena);
out_free_model:
	tpf_free(m);
	return NULL;
}

void tpf_model_free(struct tpf_model *m)
{
	if (!m)
		return;
	tpf_graph_free(m->graph);
	for (size_t i = 0; i < m->n_functions; i++)
		tpf_graph_free(m->functions[i].body);
	if (m->backing)
		tpf_model_backing_release(m->backing);
	tpf_arena_free(m->arena);
	tpf_free(m);
}

int64_t tpf_model_opset(const struct tpf_model *m, const char *domain)
{
	if (!domain || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	for (size_t i = 0; i < m->n_opsets; i++) {
		const char *d = m->opsets[i].domain ? m->opsets[i].domain : "";
		if (strcmp(d, "ai.onnx") == 0)
			d = "";
		if (strcmp(d, domain) == 0)
			return m->opsets[i].version;
	}
	return -1;
}

enum tpf_status tpf_model_set_opset(struct tpf_model *m, const char *domain, int64_t version)
{
	if (!domain)
		domain = "";
	for (size_t i = 0; i < m->n_opsets; i++) {
		if (strcmp(m->opsets[i].domain ? m->opsets[i].domain : "", domain) == 0) {
			m->opsets[i].version = version;
			return TPF_OK;
		}
	}
	struct tpf_opset *ops = tpf_arena_alloc(m->arena, (m->n_opsets + 1) * sizeof(*ops));
	const char *dom = tpf_arena_strdup(m->arena, domain);
	if (!ops || !dom)
		return TPF_ERR_NOMEM;
	if (m->n_opsets)
		memcpy(ops, m->opsets, m->n_opsets * sizeof(*ops));
	ops[m->n_opsets].domain = dom;
	ops[m->n_opsets].version = version;
	m->opsets = ops;
	m->n_opsets++;
	return TPF_OK;
}

const char *tpf_model_metadata(const struct tpf_model *m, const char *key)
{
	for (size_t i = 0; i < m->n_metadata; i++)
		if (strcmp(m->metadata_keys[i], key) == 0)
			return m->metadata_values[i];
	return NULL;
}

enum tpf_status tpf_model_set_metadata(struct tpf_model *m, const char *key, const char *value)
{
	const char *v = tpf_arena_strdup(m->arena, value);
	if (!v)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < m->n_metadata; i++) {
		if (strcmp(m->metadata_keys[i], key) == 0) {
			m->metadata_values[i] = v;
			return TPF_OK;
		}
	}
	size_t n = m->n_metadata + 1;
	const char **keys = tpf_arena_alloc(m->arena, n * sizeof(*keys));
	const char **vals = tpf_arena_alloc(m->arena, n * sizeof(*vals));
	const char *k = tpf_arena_strdup(m->arena, key);
	if (!keys || !vals || !k)
		return TPF_ERR_NOMEM;
	if (m->n_metadata) {
		memcpy(keys, m->metadata_keys, m->n_metadata * sizeof(*keys));
		memcpy(vals, m->metadata_values, m->n_metadata * sizeof(*vals));
	}
	keys[m->n_metadata] = k;
	vals[m->n_metadata] = v;
	m->metadata_keys = keys;
	m->metadata_values = vals;
	m->n_metadata = n;
	return TPF_OK;
}

/* ------------------------------------------------------------ graph */

struct tpf_graph *tpf_graph_create(struct tpf_graph *parent)
{
	struct tpf_graph *g = tpf_calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->arena = tpf_arena_create();
	struct name_index *ix = tpf_calloc(1, sizeof(*ix));
	if (!g->arena || !ix)
		goto out_free;
	g->name_index = ix;
	g->name = "";
	if (parent) {
		if (ir_arena_grow(parent->arena, (void **)&parent->children, &parent->cap_children,
			          sizeof(*parent->children), parent->n_children + 1))
			goto out_free;
		parent->children[parent->n_children++] = g;
		g->parent = parent;
	}
	return g;

out_free:
	tpf_free(ix);
	tpf_arena_free(g->arena);
	tpf_free(g);
	return NULL;
}

void tpf_graph_free(struct tpf_graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_children; i++)
		tpf_graph_free(g->children[i]);
	struct name_index *ix = g->name_index;
	if (ix) {
		tpf_free(ix->slots);
		tpf_free(ix);
	}
	tpf_arena_free(g->arena);
	tpf_free(g);
}

struct tpf_value *tpf_graph_find_value(const struct tpf_graph *g, const char *name)
{
	return index_find(graph_index(g), name);
}

struct tpf_value *tpf_graph_resolve(const struct tpf_graph *g, const char *name)
{
	for (; g; g = g->parent) {
		struct tpf_value *v = tpf_graph_find_value(g, name);
		if (v)
			return v;
	}
	return NULL;
}

const char *tpf_graph_unique_name(struct tpf_graph *g, const char *prefix)
{
	if (!prefix || !*prefix)
		prefix = "_t";
	if (!tpf_graph_resolve(g, prefix))
		return tpf_arena_strdup(g->arena, prefix);
	size_t len = strlen(prefix) + 24;
	char *buf = tpf_malloc(len);
	if (!buf)
		return NULL;
	const char *r = NULL;
	for (;;) {
		snprintf(buf, len, "%s_%u", prefix, ++g->next_temp);
		if (!tpf_graph_resolve(g, buf)) {
			r = tpf_arena_strdup(g->arena, buf);
			break;
		}
	}
	tpf_free(buf);
	return r;
}

/* Creates a value named `name` (NULL: fresh).  NULL on a duplicate name or OOM. */
static struct tpf_value *value_create(struct tpf_graph *g, const char *name, enum tpf_value_kind kind)
{
	const char *nm;
	if (name) {
		if (index_find(graph_index(g), name))
			return NULL;
		nm = tpf_arena_strdup(g->arena, name);
	} else {
		nm = tpf_graph_unique_name(g, "_t");
	}
	if (!nm)
		return NULL;
	struct tpf_value *v = tpf_arena_alloc(g->arena, sizeof(*v));
	if (!v)
		return NULL;
	if (g->n_values >= UINT32_MAX)
		return NULL;
	if (ir_arena_grow(g->arena, (void **)&g->values, &g->cap_values, sizeof(*g->values),
		          g->n_values + 1))
		return NULL;
	v->name = nm;
	v->kind = kind;
	v->graph = g;
	v->type.shape.rank = -1;
	v->producer_index = -1;
	if (index_insert(graph_index(g), v))
		return NULL;
	v->id = (uint32_t)g->n_values;
	g->values[g->n_values++] = v;
	return v;
}

struct tpf_value *tpf_graph_new_value(struct tpf_graph *g, const char *name)
{
	return value_create(g, name, TPF_VALUE_NODE_OUTPUT);
}

static int set_shape(struct tpf_arena *a, struct tpf_shape *s, int rank, const int64_t *dims)
{
	s->rank = rank;
	s->dims = NULL;
	if (rank <= 0)
		return 0;
	s->dims = tpf_arena_alloc(a, (size_t)rank * sizeof(*s->dims));
	if (!s->dims)
		return -1;
	for (int i = 0; i < rank; i++)
		s->dims[i].value = dims ? dims[i] : -1;
	return 0;
}

void tpf_value_set_type(struct tpf_value *v, enum tpf_dtype dtype, int rank, const int64_t *dims)
{
	struct tpf_type t = {.kind = TPF_TYPE_TENSOR, .dtype = dtype};
	if (rank > TPF_MAX_RANK || set_shape(v->graph->arena, &t.shape, rank, dims))
		t.shape.rank = -1; /* out of memory: keep the dtype, forget the shape */
	v->type = t;
}

enum tpf_status tpf_value_copy_type(struct tpf_value *dst, const struct tpf_type *src)
{
	struct tpf_arena *a = dst->graph->arena;
	struct tpf_type t = *src;
	if (src->shape.rank > 0) {
		t.shape.dims = tpf_arena_memdup(a, src->shape.dims, (size_t)src->shape.rank * sizeof(struct tpf_dim));
		if (!t.shape.dims)
			return TPF_ERR_NOMEM;
		for (int i = 0; i < src->shape.rank; i++) {
			if (src->shape.dims[i].param && !(t.shape.dims[i].param = tpf_arena_strdup(a, src->shape.dims[i].param)))
				return TPF_ERR_NOMEM;
			if (src->shape.dims[i].denotation &&
			    !(t.shape.dims[i].denotation = tpf_arena_strdup(a, src->shape.dims[i].denotation)))
				return TPF_ERR_NOMEM;
		}
	}
	if (src->denotation && !(t.denotation = tpf_arena_strdup(a, src->denotation)))
		return TPF_ERR_NOMEM;
	if (src->kind == TPF_TYPE_OPAQUE && src->opaque.size) {
		t.opaque.data = tpf_arena_memdup(a, src->opaque.data, src->opaque.size);
		if (!t.opaque.data)
			return TPF_ERR_NOMEM;
	}
	dst->type = t;
	return TPF_OK;
}

static int append_value(struct tpf_graph *g, struct tpf_value ***arr, size_t *n, size_t *cap,
			struct tpf_value *v)
{
	if (ir_arena_grow(g->arena, (void **)arr, cap, sizeof(**arr), *n + 1))
		return -1;
	(*arr)[(*n)++] = v;
	return 0;
}

struct tpf_value *tpf_graph_add_input(struct tpf_graph *g, const char *name, enum tpf_dtype dtype,
				      int rank, const int64_t *dims)
{
	if (rank > TPF_MAX_RANK)
		return NULL;
	struct tpf_value *v = value_create(g, name, TPF_VALUE_GRAPH_INPUT);
	if (!v)
		return NULL;
	v->is_graph_input = 1;
	tpf_value_set_type(v, dtype, rank, dims);
	if (append_value(g, &g->inputs, &g->n_inputs, &g->cap_inputs, v))
		return NULL;
	return v;
}

struct tpf_value *tpf_graph_add_input_sym(struct tpf_graph *g, const char *name,
					  enum tpf_dtype dtype, int rank, const char *const *dims)
{
	struct tpf_value *v = tpf_graph_add_input(g, name, dtype, rank, NULL);
	if (!v || rank <= 0)
		return v;
	for (int i = 0; i < rank; i++) {
		const char *d = dims ? dims[i] : NULL;
		struct tpf_dim *dim = &v->type.shape.dims[i];
		if (!d || !*d) {
			dim->value = -1;
		} else if (d[0] >= '0' && d[0] <= '9') {
			dim->value = strtoll(d, NULL, 10);
		} else {
			dim->value = -1;
			dim->param = tpf_arena_strdup(g->arena, d);
			if (!dim->param)
				return NULL;
		}
	}
	return v;
}

struct tpf_tensor *tpf_tensor_create(struct tpf_arena *a, const char *name, enum tpf_dtype dtype,
				     int rank, const int64_t *dims, const void *data, size_t nbytes)
{
	if (rank < 0 || rank > TPF_MAX_RANK)
		return NULL;
	struct tpf_tensor *t = tpf_arena_alloc(a, sizeof(*t));
	if (!t)
		return NULL;
	t->name = name ? tpf_arena_strdup(a, name) : NULL;
	if (name && !t->name)
		return NULL;
	t->dtype = dtype;
	t->rank = rank;
	if (rank > 0) {
		t->dims = tpf_arena_memdup(a, dims, (size_t)rank * sizeof(int64_t));
		if (!t->dims)
			return NULL;
	}
	if (data && nbytes) {
		t->data = tpf_arena_memdup(a, data, nbytes);
		if (!t->data)
			return NULL;
	} else if (nbytes) {
		t->data = tpf_arena_alloc(a, nbytes);
		if (!t->data)
			return NULL;
	}
	t->nbytes = nbytes;
	return t;
}

struct tpf_value *tpf_graph_add_initializer_tensor(struct tpf_graph *g, struct tpf_tensor *t)
{
	if (!t || !t->name)
		return NULL;
	struct tpf_value *v = value_create(g, t->name, TPF_VALUE_INITIALIZER);
	if (!v)
		return NULL;
	v->init = t;
	tpf_value_set_type(v, t->dtype, t->rank, t->dims);
	if (append_value(g, &g->initializers, &g->n_initializers, &g->cap_initializers, v))
		return NULL;
	return v;
}

struct tpf_value *tpf_graph_add_initializer(struct tpf_graph *g, const char *name,
					    enum tpf_dtype dtype, int rank, const int64_t *dims,
					    const void *data, size_t nbytes)
{
	const char *nm = name ? name : tpf_graph_unique_name(g, "_w");
	if (!nm)
		return NULL;
	struct tpf_tensor *t = tpf_tensor_create(g->arena, nm, dtype, rank, dims, data, nbytes);
	return tpf_graph_add_initializer_tensor(g, t);
}

enum tpf_status tpf_graph_add_output(struct tpf_graph *g, struct tpf_value *v)
{
	if (!v)
		return TPF_ERR_INVALID;
	if (append_value(g, &g->outputs, &g->n_outputs, &g->cap_outputs, v))
		return TPF_ERR_NOMEM;
	v->n_output_refs++;
	return TPF_OK;
}

enum tpf_status tpf_graph_set_output(struct tpf_graph *g, size_t index, struct tpf_value *v)
{
	if (!v || index >= g->n_outputs)
		return TPF_ERR_INVALID;
	g->outputs[index]->n_output_refs--;
	g->outputs[index] = v;
	v->n_output_refs++;
	return TPF_OK;
}

enum tpf_status tpf_graph_remove_initializer(struct tpf_graph *g, struct tpf_value *v)
{
	if (!v || v->graph != g || !v->init || tpf_value_use_count(v) != 0)
		return TPF_ERR_INVALID;
	size_t w = 0;
	for (size_t i = 0; i < g->n_initializers; i++)
		if (g->initializers[i] != v)
			g->initializers[w++] = g->initializers[i];
	g->n_initializers = w;
	if (v->is_graph_input) {
		w = 0;
		for (size_t i = 0; i < g->n_inputs; i++)
			if (g->inputs[i] != v)
				g->inputs[w++] = g->inputs[i];
		g->n_inputs = w;
	}
	index_remove(graph_index(g), v);
	if (v->id < g->n_values && g->values[v->id] == v)
		g->values[v->id] = NULL;
	return TPF_OK;
}

enum tpf_status tpf_value_rename(struct tpf_value *v, const char *name)
{
	struct tpf_graph *g = v->graph;
	if (strcmp(v->name, name) == 0)
		return TPF_OK;
	if (index_find(graph_index(g), name))
		return TPF_ERR_INVALID;
	const char *nm = tpf_arena_strdup(g->arena, name);
	if (!nm)
		return TPF_ERR_NOMEM;
	index_remove(graph_index(g), v);
	v->name = nm;
	if (index_insert(graph_index(g), v))
		return TPF_ERR_NOMEM;
	if (v->init)
		v->init->name = nm;
	return TPF_OK;
}

/* ------------------------------------------------------------ uses */

static int use_add(struct tpf_value *v, struct tpf_node *n, int index)
{
	if (ir_arena_grow(v->graph->arena, (void **)&v->uses, &v->cap_uses, sizeof(*v->uses), v->n_uses + 1))
		return -1;
	v->uses[v->n_uses].node = n;
	v->uses[v->n_uses].index = index;
	v->n_uses++;
	return 0;
}

/* From the end: a pass that erases the latest readers first (cse) removes
 * each in constant time, even from a use list of a million entries. */
static void use_remove(struct tpf_value *v, struct tpf_node *n, int index)
{
	for (size_t i = v->n_uses; i-- > 0;) {
		if (v->uses[i].node == n && v->uses[i].index == index) {
			memmove(&v->uses[i], &v->uses[i + 1], (v->n_uses - i - 1) * sizeof(*v->uses));
			v->n_uses--;
			return;
		}
	}
}

size_t tpf_value_use_count(const struct tpf_value *v)
{
	return v->n_uses + v->n_output_refs;
}

int tpf_value_is_graph_output(const struct tpf_value *v)
{
	return v->n_output_refs != 0;
}

/* ------------------------------------------------------------ nodes */

static void node_link_before(struct tpf_graph *g, struct tpf_node *n, struct tpf_node *before)
{
	if (!before) {
		n->prev = g->last;
		n->next = NULL;
		if (g->last)
			g->last->next = n;
		else
			g->first = n;
		g->last = n;
	} else {
		n->next = before;
		n->prev = before->prev;
		if (before->prev)
			before->prev->next = n;
		else
			g->first = n;
		before->prev = n;
	}
}

static void node_unlink(struct tpf_graph *g, struct tpf_node *n)
{
	if (n->prev)
		n->prev->next = n->next;
	else
		g->first = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		g->last = n->prev;
	n->prev = n->next = NULL;
}

struct tpf_node *tpf_graph_insert_node(struct tpf_graph *g, struct tpf_node *before,
				       const char *domain, const char *op_type, const char *name,
				       struct tpf_value *const *inputs, size_t n_inputs,
				       size_t n_outputs, const char *const *output_names)
{
	struct tpf_node *n = tpf_arena_alloc(g->arena, sizeof(*n));
	if (!n)
		return NULL;
	if (!domain || strcmp(domain, "ai.onnx") == 0)
		domain = "";
	n->domain = tpf_arena_strdup(g->arena, domain);
	n->op_type = tpf_arena_strdup(g->arena, op_type ? op_type : "");
	n->name = tpf_arena_strdup(g->arena, name ? name : "");
	if (!n->domain || !n->op_type || !n->name)
		return NULL;
	n->op = tpf_op_lookup(n->domain, n->op_type);
	n->graph = g;
	n->id = g->next_node_id++;
	if (n_inputs) {
		n->inputs = tpf_arena_alloc(g->arena, n_inputs * sizeof(*n->inputs));
		if (!n->inputs)
			return NULL;
	}
	if (n_outputs) {
		n->outputs = tpf_arena_alloc(g->arena, n_outputs * sizeof(*n->outputs));
		if (!n->outputs)
			return NULL;
	}
	/* Create outputs first so that a failure leaves no dangling uses. */
	for (size_t i = 0; i < n_outputs; i++) {
		const char *on = output_names ? output_names[i] : NULL;
		if (on && !*on)
			continue; /* omitted optional output */
		struct tpf_value *v = value_create(g, on, TPF_VALUE_NODE_OUTPUT);
		if (!v)
			goto out_unwind_outputs;
		v->producer = n;
		v->producer_index = (int)i;
		n->outputs[i] = v;
	}
	n->n_outputs = n_outputs;
	for (size_t i = 0; i < n_inputs; i++) {
		n->inputs[i] = inputs[i];
		if (inputs[i] && use_add(inputs[i], n, (int)i)) {
			n->n_inputs = i; /* drop the uses added so far */
			while (i-- > 0)
				if (inputs[i])
					use_remove(inputs[i], n, (int)i);
			goto out_unwind_outputs;
		}
	}
	n->n_inputs = n_inputs;
	node_link_before(g, n, before);
	g->n_nodes++;
	return n;

out_unwind_outputs:
	for (size_t i = 0; i < n_outputs; i++) {
		struct tpf_value *v = n->outputs[i];
		if (v) {
			index_remove(graph_index(g), v);
			g->values[v->id] = NULL;
		}
	}
	return NULL;
}

struct tpf_node *tpf_graph_add_node(struct tpf_graph *g, const char *domain, const char *op_type,
				    const char *name, struct tpf_value *const *inputs, size_t n_inputs,
				    size_t n_outputs, const char *const *output_names)
{
	return tpf_graph_insert_node(g, NULL, domain, op_type, name, inputs, n_inputs, n_outputs,
				     output_names);
}

enum tpf_status tpf_graph_erase_node(struct tpf_graph *g, struct tpf_node *n)
{
	if (n->erased || n->graph != g)
		return TPF_ERR_INVALID;
	for (size_t i = 0; i < n->n_outputs; i++) {
		struct tpf_value *v = n->outputs[i];
		if (v && tpf_value_use_count(v) != 0)
			return TPF_ERR_INVALID;
	}
	for (size_t i = 0; i < n->n_inputs; i++)
		if (n->inputs[i])
			use_remove(n->inputs[i], n, (int)i);
	for (size_t i = 0; i < n->n_implicit; i++)
		if (n->implicit_inputs[i])
			use_remove(n->implicit_inputs[i], n, -1 - (int)i);
	for (size_t i = 0; i < n->n_outputs; i++) {
		struct tpf_value *v = n->outputs[i];
		if (!v)
			continue;
		index_remove(graph_index(g), v);
		g->values[v->id] = NULL;
		v->producer = NULL;
	}
	node_unlink(g, n);
	n->erased = 1;
	g->n_nodes--;
	return TPF_OK;
}

void tpf_graph_move_node_before(struct tpf_graph *g, struct tpf_node *n, struct tpf_node *before)
{
	if (n == before)
		return;
	node_unlink(g, n);
	node_link_before(g, n, before);
}

enum tpf_status tpf_node_set_input(struct tpf_node *n, size_t index, struct tpf_value *v)
{
	if (index >= n->n_inputs)
		return TPF_ERR_INVALID;
	if (n->inputs[index] == v)
		return TPF_OK;
	if (v && use_add(v, n, (int)index))
		return TPF_ERR_NOMEM;
	if (n->inputs[index])
		use_remove(n->inputs[index], n, (int)index);
	n->inputs[index] = v;
	return TPF_OK;
}

enum tpf_status tpf_node_append_input(struct tpf_node *n, struct tpf_value *v)
{
	struct tpf_graph *g = n->graph;
	struct tpf_value **in = tpf_arena_alloc(g->arena, (n->n_inputs + 1) * sizeof(*in));
	if (!in)
		return TPF_ERR_NOMEM;
	if (v && use_add(v, n, (int)n->n_inputs))
		return TPF_ERR_NOMEM;
	if (n->n_inputs)
		memcpy(in, n->inputs, n->n_inputs * sizeof(*in));
	in[n->n_inputs] = v;
	n->inputs = in;
	n->n_inputs++;
	return TPF_OK;
}

/* Points OUTER placeholders in the subgraphs of `g` (recursively) from `from` to `to`. */
static void retarget_outer(struct tpf_graph *g, struct tpf_value *from, struct tpf_value *to)
{
	for (size_t i = 0; i < g->n_values; i++) {
		struct tpf_value *v = g->values[i];
		if (v && v->kind == TPF_VALUE_OUTER && v->outer == from)
			v->outer = to;
	}
	for (size_t i = 0; i < g->n_children; i++)
		retarget_outer(g->children[i], from, to);
}

enum tpf_status tpf_value_replace_uses(struct tpf_value *from, struct tpf_value *to)
{
	if (from == to)
		return TPF_OK;
	/* Reserve room first so that the move cannot fail half-way. */
	if (ir_arena_grow(to->graph->arena, (void **)&to->uses, &to->cap_uses, sizeof(*to->uses),
		          to->n_uses + from->n_uses))
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < from->n_uses; i++) {
		struct tpf_use u = from->uses[i];
		if (u.index >= 0) {
			u.node->inputs[u.index] = to;
		} else {
			u.node->implicit_inputs[-1 - u.index] = to;
			for (size_t c = 0; c < u.node->graph->n_children; c++) {
				struct tpf_graph *sub = u.node->graph->children[c];
				if (sub->owner == u.node)
					retarget_outer(sub, from, to);
			}
		}
		to->uses[to->n_uses++] = u;
	}
	from->n_uses = 0;
	struct tpf_graph *g = from->graph;
	if (from->n_output_refs) {
		for (size_t i = 0; i < g->n_outputs; i++)
			if (g->outputs[i] == from)
				g->outputs[i] = to;
		to->n_output_refs += from->n_output_refs;
		from->n_output_refs = 0;
	}
	return TPF_OK;
}

/* The tensor a Constant's attribute a stands for when it is value_float,
 * value_int, value_floats or value_ints: its dtype, rank (0 or 1) and
 * bytes; 0 for any other attribute. */
static int attr_const_form(const struct tpf_attr *a, enum tpf_dtype *dt, int *rank, const void **data,
			   size_t *nbytes)
{
	static const struct {
		enum tpf_attr_kind kind;
		const char *name;
		enum tpf_dtype dt;
		int rank;
	} forms[] = {{TPF_ATTR_FLOAT, "value_float", TPF_DTYPE_FLOAT, 0},
		     {TPF_ATTR_INT, "value_int", TPF_DTYPE_INT64, 0},
		     {TPF_ATTR_FLOATS, "value_floats", TPF_DTYPE_FLOAT, 1},
		     {TPF_ATTR_INTS, "value_ints", TPF_DTYPE_INT64, 1}};
	for (size_t f = 0; f < sizeof(forms) / sizeof(forms[0]); f++) {
		if (forms[f].kind != a->kind || strcmp(a->name, forms[f].name))
			continue;
		*dt = forms[f].dt;
		*rank = forms[f].rank;
		switch (a->kind) {
		case TPF_ATTR_FLOAT:
			*data = &a->f, *nbytes = sizeof(float);
			break;
		case TPF_ATTR_INT:
			*data = &a->i, *nbytes = sizeof(int64_t);
			break;
		case TPF_ATTR_FLOATS:
			*data = a->floats, *nbytes = a->n * sizeof(float);
			break;
		default:
			*data = a->ints, *nbytes = a->n * sizeof(int64_t);
			break;
		}
		return 1;
	}
	return 0;
}

const struct tpf_tensor *tpf_value_constant(const struct tpf_value *v)
{
	if (!v)
		return NULL;
	if (v->kind == TPF_VALUE_OUTER)
		return tpf_value_constant(v->outer);
	if (v->kind == TPF_VALUE_INITIALIZER)
		return v->is_graph_input ? NULL : v->init;
	const struct tpf_node *n = v->producer;
	if (!n || n->op != TPF_OP_CONSTANT || n->n_attrs != 1)
		return NULL;
	const struct tpf_attr *a = &n->attrs[0];
	if (a->kind == TPF_ATTR_TENSOR)
		return strcmp(a->name, "value") == 0 ? a->t : NULL;
	enum tpf_dtype dt;
	int rank;
	const void *data;
	size_t nbytes;
	if (!attr_const_form(a, &dt, &rank, &data, &nbytes))
		return NULL;
	/* made once and kept while the attribute holds the same value: the
	 * plans and inferences that ask again get the same bytes, and the
	 * graph's arena does not grow with every ask */
	const struct tpf_tensor *c = v->attr_const;
	if (c && v->attr_const_of == a && c->dtype == dt && c->rank == rank && c->nbytes == nbytes &&
	    (!nbytes || !memcmp(c->data, data, nbytes)))
		return c;
	const int64_t dim = (int64_t)a->n;
	struct tpf_tensor *t = tpf_tensor_create(v->graph->arena, v->name, dt, rank, rank ? &dim : NULL, data, nbytes);
	if (t) { /* a cache on a value the caller holds as const */
		struct tpf_value *mv = (struct tpf_value *)v;
		mv->attr_const = t;
		mv->attr_const_of = a;
	}
	return t;
}

/* ------------------------------------------------------------ attributes */

const struct tpf_attr *tpf_node_attr(const struct tpf_node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attrs; i++)
		if (strcmp(n->attrs[i].name, name) == 0)
			return &n->attrs[i];
	return NULL;
}

int64_t tpf_node_attr_int(const struct tpf_node *n, const char *name, int64_t dflt)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);
	return a && a->kind == TPF_ATTR_INT ? a->i : dflt;
}

float tpf_node_attr_float(const struct tpf_node *n, const char *name, float dflt)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);
	return a && a->kind == TPF_ATTR_FLOAT ? a->f : dflt;
}

const char *tpf_node_attr_string(const struct tpf_node *n, const char *name, const char *dflt)
{
	const struct tpf_attr *a = tpf_node_attr(n, name);
	return a && a->kind == TPF_ATTR_STRING ? a->s : dflt;
}

enum tpf_status tpf_node_add_attr(struct tpf_node *n, const struct tpf_attr *a)
{
	struct tpf_graph *g = n->graph;
	for (size_t i = 0; i < n->n_attrs; i++) {
		if (strcmp(n->attrs[i].name, a->name) == 0) {
			n->attrs[i] = *a;
			return TPF_OK;
		}
	}
	struct tpf_attr *attrs = tpf_arena_alloc(g->arena, (n->n_attrs + 1) * sizeof(*attrs));
	if (!attrs)
		return TPF_ERR_NOMEM;
	if (n->n_attrs)
		memcpy(attrs, n->attrs, n->n_attrs * sizeof(*attrs));
	attrs[n->n_attrs] = *a;
	n->attrs = attrs;
	n->n_attrs++;
	return TPF_OK;
}

enum tpf_status tpf_node_remove_attr(struct tpf_node *n, const char *name)
{
	for (size_t i = 0; i < n->n_attrs; i++) {
		if (strcmp(n->attrs[i].name, name) == 0) {
			memmove(&n->attrs[i], &n->attrs[i + 1], (n->n_attrs - i - 1) * sizeof(*n->attrs));
			n->n_attrs--;
			return TPF_OK;
		}
	}
	return TPF_ERR_INVALID;
}

/* Adds (or replaces) attribute `name` with the kind and value of *a. */
static enum tpf_status add_named(struct tpf_node *n, const char *name, struct tpf_attr *a)
{
	a->name = tpf_arena_strdup(n->graph->arena, name);
	return a->name ? tpf_node_add_attr(n, a) : TPF_ERR_NOMEM;
}

enum tpf_status tpf_node_set_attr_int(struct tpf_node *n, const char *name, int64_t v)
{
	struct tpf_attr a = {.kind = TPF_ATTR_INT, .i = v};
	return add_named(n, name, &a);
}

enum tpf_status tpf_node_set_attr_float(struct tpf_node *n, const char *name, float v)
{
	struct tpf_attr a = {.kind = TPF_ATTR_FLOAT, .f = v};
	return add_named(n, name, &a);
}

enum tpf_status tpf_node_set_attr_string(struct tpf_node *n, const char *name, const char *v)
{
	struct tpf_attr a = {.kind = TPF_ATTR_STRING, .s = tpf_arena_strdup(n->graph->arena, v)};
	if (!a.s)
		return TPF_ERR_NOMEM;
	a.s_len = strlen(v);
	return add_named(n, name, &a);
}

enum tpf_status tpf_node_set_attr_ints(struct tpf_node *n, const char *name, const int64_t *v, size_t count)
{
	struct tpf_attr a = {.kind = TPF_ATTR_INTS, .n = count};
	if (count && !(a.ints = tpf_arena_memdup(n->graph->arena, v, count * sizeof(*v))))
		return TPF_ERR_NOMEM;
	return add_named(n, name, &a);
}

enum tpf_status tpf_node_set_attr_floats(struct tpf_node *n, const char *name, const float *v, size_t count)
{
	struct tpf_attr a = {.kind = TPF_ATTR_FLOATS, .n = count};
	if (count && !(a.floats = tpf_arena_memdup(n->graph->arena, v, count * sizeof(*v))))
		return TPF_ERR_NOMEM;
	return add_named(n, name, &a);
}

enum tpf_status tpf_node_set_attr_tensor(struct tpf_node *n, const char *name, struct tpf_tensor *t)
{
	struct tpf_attr a = {.kind = TPF_ATTR_TENSOR, .t = t};
	return add_named(n, name, &a);
}

/* ------------------------------------------------------------ order */

enum tpf_status tpf_graph_toposort(struct tpf_graph *g, struct tpf_diag *d)
{
	size_t n = g->n_nodes;
	if (n == 0)
		return TPF_OK;
	enum tpf_status st = TPF_OK;
	struct tpf_node **order = tpf_malloc(n * sizeof(*order));
	struct tpf_node **stack = tpf_malloc(n * sizeof(*stack));
	size_t *next_in = tpf_malloc(n * sizeof(*next_in));
	uint8_t *state = NULL;
	/* node ids are creation indices; map them densely through a table */
	size_t max_id = g->next_node_id;
	state = tpf_calloc(max_id ? max_id : 1, 1);
	if (!order || !stack || !next_in || !state) {
		st = TPF_ERR_NOMEM;
		goto out_free;
	}
	size_t count = 0;
	for (struct tpf_node *root = g->first; root; root = root->next) {
		if (state[root->id] == 2)
			continue;
		/* iterative DFS: emit a node after every producer in this graph */
		size_t sp = 0;
		stack[sp] = root;
		next_in[sp] = 0;
		state[root->id] = 1;
		sp++;
		while (sp) {
			struct tpf_node *cur = stack[sp - 1];
			size_t total = cur->n_inputs + cur->n_implicit;
			if (next_in[sp - 1] < total) {
				size_t k = next_in[sp - 1]++;
				struct tpf_value *in = k < cur->n_inputs ? cur->inputs[k]
									 : cur->implicit_inputs[k - cur->n_inputs];
				struct tpf_node *p = in ? in->producer : NULL;
				if (!p || p->graph != g || p->erased)
					continue;
				if (state[p->id] == 1) {
					char buf[256];
					st = tpf_diag_fail(d, TPF_ERR_VERIFY, "%s: is part of a cycle (input '%s')",
							   tpf_node_describe(cur, buf, sizeof(buf)), in->name);
					goto out_free;
				}
				if (state[p->id] == 0) {
					state[p->id] = 1;
					stack[sp] = p;
					next_in[sp] = 0;
					sp++;
				}
				continue;
			}
			state[cur->id] = 2;
			order[count++] = cur;
			sp--;
		}
	}
	/* relink in the new order */
	g->first = g->last = NULL;
	for (size_t i = 0; i < count; i++) {
		order[i]->prev = order[i]->next = NULL;
		node_link_before(g, order[i], NULL);
	}

out_free:
	tpf_free(order);
	tpf_free(stack);
	tpf_free(next_in);
	tpf_free(state);
	return st;
}

size_t tpf_graph_count_nodes(const struct tpf_graph *g, int recursive)
{
	size_t n = g->n_nodes;
	if (recursive)
		for (size_t i = 0; i < g->n_children; i++)
			n += tpf_graph_count_nodes(g->children[i], 1);
	return n;
}

const char *tpf_node_describe(const struct tpf_node *n, char *buf, size_t size)
{
	if (n->domain && *n->domain)
		snprintf(buf, size, "node '%s' (%s::%s)", n->name ? n->name : "", n->domain, n->op_type);
	else
		snprintf(buf, size, "node '%s' (%s)", n->name ? n->name : "", n->op_type);
	return buf;
}
