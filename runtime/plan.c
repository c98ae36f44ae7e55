/* SPDX-License-Identifier: MIT */
/* Lowering a graph to a plan: bind inputs, schedule topologically, lower
 * every node (plan-lower.c: infer concrete shapes, fold what is known on
 * the host, split fused collectives into communicator steps and kernel
 * phases, pick kernels) and place every buffer in one arena by liveness
 * (plan-memory.c).  This file holds the plan's values and steps, the
 * binding of inputs, the schedule and the build. */
#include "plan-internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum tpf_status tpf_rt_node_fail(struct tpf_diag *d, const struct tpf_node *n, enum tpf_status st,
				 const char *fmt, ...)
{
	char msg[512], who[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(d, TPF_SEV_ERROR, "%s: %s", tpf_node_describe(n, who, sizeof(who)), msg);
	return st;
}


/* ------------------------------------------------------------ values */

/* Room in *arr (n elements of elem bytes used, *cap allocated) for one
 * more: 0, or -1 when out of memory. */
int tpf_rt_reserve_one(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 64;
	void *na = tpf_realloc(*arr, ncap * elem);
	if (!na)
		return -1;
	*arr = na;
	*cap = ncap;
	return 0;
}

int tpf_rt_add_value(struct tpf_plan *p, const struct tpf_value *v, const char *name)
{
	if (tpf_rt_reserve_one((void **)&p->values, &p->cap_values, p->n_values, sizeof(*p->values)))
		return -1;
	struct rt_value *r = &p->values[p->n_values];
	memset(r, 0, sizeof(*r));
	r->v = v;
	r->name = name ? name : (v ? v->name : "?");
	r->buffer = -1;
	r->alias = -1;
	r->def_step = -1;
	r->last_step = -1;
	r->input_index = -1;
	if (v && v->id < p->n_ids)
		p->value_of_id[v->id] = (int)p->n_values;
	return (int)p->n_values++;
}

int tpf_rt_value_index(const struct tpf_plan *p, const struct tpf_value *v)
{
	if (!v)
		return -1;
	if (v->kind == TPF_VALUE_OUTER)
		return -1;
	return v->id < p->n_ids ? p->value_of_id[v->id] : -1;
}

/* The plan value of v when v is a runtime input of known rank, else -1. */
static int ranked_input(const struct tpf_plan *p, const struct tpf_value *v)
{
	int a = tpf_rt_value_index(p, v);
	return a < 0 || !p->values[a].is_input || v->type.shape.rank < 0 ? -1 : a;
}

int tpf_rt_add_step(struct tpf_plan *p, enum rt_step_kind kind, const struct tpf_node *n,
			 const struct tpf_kernel *k, enum tpf_kernel_phase ph, const int *ins,
			 size_t n_in, const int *outs, size_t n_out)
{
	if (tpf_rt_reserve_one((void **)&p->steps, &p->cap_steps, p->n_steps, sizeof(*p->steps)))
		return -1;
	struct rt_step *s = &p->steps[p->n_steps];
	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->node = n;
	s->kernel = k;
	s->phase = ph;
	s->ins = tpf_calloc(n_in + 1, sizeof(int));
	s->outs = tpf_calloc(n_out + 1, sizeof(int));
	if (!s->ins || !s->outs) {
		tpf_free(s->ins);
		tpf_free(s->outs);
		return -1;
	}
	memcpy(s->ins, ins, n_in * sizeof(int));
	memcpy(s->outs, outs, n_out * sizeof(int));
	s->n_in = n_in;
	s->n_out = n_out;
	return (int)p->n_steps++;
}

/* The session's store when known value w outlives the plan (the model's
 * own bytes), so that its derived copies may be shared; NULL otherwise. */
struct tpf_const_store *tpf_rt_shared_store(const struct tpf_plan *p, int w)
{
	return p->store && w >= 0 && p->values[w].known && p->values[w].lasting ? p->store : NULL;
}

/* A derived copy the plan has just made (t->host, owned) goes to the
 * session's store, when there is one, for later plans to share. */
void tpf_rt_share_derived(struct tpf_const_store *cs, const struct tpf_const_key *k, struct rt_value *t,
			  size_t bytes)
{
	if (cs && tpf_const_store_add_derived(cs, k, t->host, bytes) == TPF_OK) {
		t->owns_host = 0;
		t->lasting = 1;
	}
}

void tpf_plan_free(struct tpf_plan *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].owns_host)
			tpf_free(p->values[i].host);
	for (size_t i = 0; i < p->n_steps; i++) {
		tpf_free(p->steps[i].ins);
		tpf_free(p->steps[i].outs);
	}
	tpf_free(p->values);
	tpf_free(p->steps);
	tpf_free(p->buffers);
	tpf_free(p->value_of_id);
	tpf_free(p->outputs);
	tpf_free(p);
}

/* ------------------------------------------------------------ hashing */

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
	const uint8_t *b = data;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
	return fnv(h, s ? s : "", (s ? strlen(s) : 0) + 1);
}

static uint64_t fnv_i64(uint64_t h, int64_t v)
{
	return fnv(h, &v, sizeof(v));
}

static uint64_t hash_type(uint64_t h, const struct tpf_type *t)
{
	h = fnv_i64(h, t->kind);
	h = fnv_i64(h, t->dtype);
	h = fnv_i64(h, t->shape.rank);
	for (int i = 0; i < t->shape.rank; i++) {
		h = fnv_i64(h, t->shape.dims[i].value);
		h = fnv_str(h, t->shape.dims[i].param);
	}
	return h;
}

/* Values are identified by position (graph inputs, then the nodes that
 * run as steps, in order), initializers by dtype and shape, not by name:
 * exporters name constants after their values, which differ between ranks
 * (slice offsets), and a rank may keep another output of a Split.  Nodes
 * whose inputs are all constants (and Shape, Size) fold when a plan is
 * built and are left out, with every reference to their results: the
 * shape arithmetic of a rank's slice differs between ranks (rank 0 starts
 * at a constant 0, rank 1 computes its start), the work the ranks run
 * together does not. */
static int64_t value_pos(const int64_t *pos, size_t n, const struct tpf_value *v)
{
	return v && v->id < n ? pos[v->id] : -1;
}

/* Marks (known[id] = 1) the values that fold when a plan is built:
 * initializers that are not graph inputs, Constant outputs, the results of
 * nodes whose inputs all fold and of Shape and Size; never a collective's.
 * Graph order is a topological order for ONNX files; a node whose producer
 * comes later counts as not folding. */
void tpf_rt_mark_folding(const struct tpf_graph *g, unsigned char *known, size_t n_ids)
{
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];
		if (v->id < n_ids && !v->is_graph_input)
			known[v->id] = 1;
	}
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		int all = !tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE) && n->op != TPF_OP_UNKNOWN &&
			  !n->n_implicit;
		for (size_t i = 0; i < n->n_inputs && all; i++) {
			const struct tpf_value *v = n->inputs[i];
			if (v && !(v->id < n_ids && known[v->id]))
				all = n->op == TPF_OP_SHAPE || n->op == TPF_OP_SIZE;
		}
		if (!all)
			continue;
		for (size_t o = 0; o < n->n_outputs; o++)
			if (n->outputs[o] && n->outputs[o]->id < n_ids)
				known[n->outputs[o]->id] = 1;
	}
}

int tpf_rt_node_folds(const struct tpf_node *n, const unsigned char *known, size_t n_ids)
{
	for (size_t o = 0; o < n->n_outputs; o++)
		if (n->outputs[o])
			return n->outputs[o]->id < n_ids && known[n->outputs[o]->id];
	return 0;
}

uint64_t tpf_graph_structure_hash(const struct tpf_graph *g)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	if (!g)
		return h;
	size_t n = g->n_values;
	int64_t *pos = tpf_malloc((n + 1) * sizeof(int64_t));
	unsigned char *known = tpf_calloc(n + 1, 1);
	int64_t next = 0;
	if (pos && known) {
		for (size_t i = 0; i <= n; i++)
			pos[i] = -1;
		tpf_rt_mark_folding(g, known, n);
		for (size_t i = 0; i < g->n_inputs; i++)
			if (g->inputs[i]->id < n)
				pos[g->inputs[i]->id] = next++;
		/* all outputs of a node share its position: a rank may keep
		 * another output of a Split than its peers */
		for (const struct tpf_node *nd = g->first; nd; nd = nd->next) {
			if (tpf_rt_node_folds(nd, known, n))
				continue;
			for (size_t i = 0; i < nd->n_outputs; i++)
				if (nd->outputs[i] && nd->outputs[i]->id < n)
					pos[nd->outputs[i]->id] = next;
			next++;
		}
	} else {
		n = 0;
	}
	for (size_t i = 0; i < g->n_inputs; i++) {
		h = fnv_str(h, g->inputs[i]->name);
		h = hash_type(h, &g->inputs[i]->type);
	}
	for (const struct tpf_node *nd = g->first; nd; nd = nd->next) {
		if (n && tpf_rt_node_folds(nd, known, n))
			continue;
		h = fnv_str(h, nd->domain);
		h = fnv_str(h, nd->op_type);
		h = fnv_i64(h, (int64_t)nd->n_inputs);
		for (size_t i = 0; i < nd->n_inputs; i++) {
			const struct tpf_value *v = nd->inputs[i];
			const struct tpf_tensor *t = v && !v->is_graph_input ? v->init : NULL;
			if (!t && v && v->id < n && known[v->id]) {
				h = fnv_i64(h, -3); /* computed from constants */
				continue;
			}
			if (!t) {
				h = fnv_i64(h, value_pos(pos, n, v));
				continue;
			}
			/* an initializer: by type and shape (ranks may share or not
			 * share equal constants) */
			h = fnv_i64(h, -2);
			h = fnv_i64(h, t->dtype);
			h = fnv_i64(h, t->rank);
			for (int k = 0; k < t->rank; k++)
				h = fnv_i64(h, t->dims[k]);
		}
		h = fnv_i64(h, (int64_t)nd->n_outputs);
		for (size_t i = 0; i < nd->n_attrs; i++) {
			const struct tpf_attr *a = &nd->attrs[i];
			h = fnv_str(h, a->name);
			h = fnv_i64(h, a->kind);
			switch (a->kind) {
			case TPF_ATTR_INT:
				h = fnv_i64(h, a->i);
				break;
			case TPF_ATTR_FLOAT:
				h = fnv(h, &a->f, sizeof(a->f));
				break;
			case TPF_ATTR_STRING:
				h = fnv(h, a->s ? a->s : "", a->s ? a->s_len : 0);
				break;
			case TPF_ATTR_TENSOR:
				if (a->t) {
					h = fnv_i64(h, a->t->dtype);
					h = fnv_i64(h, a->t->rank);
				}
				break;
			default:
				/* lists may hold rank-specific offsets (Pack segments, slice
				 * starts before opset 10): their length only */
				h = fnv_i64(h, (int64_t)a->n);
				break;
			}
		}
	}
	for (size_t i = 0; i < g->n_outputs; i++) {
		h = fnv_str(h, g->outputs[i]->name);
		h = fnv_i64(h, value_pos(pos, n, g->outputs[i]));
	}
	tpf_free(pos);
	tpf_free(known);
	return h;
}

static uint64_t inputs_hash(const struct tpf_host_tensor *in, size_t n)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < n; i++) {
		h = fnv_str(h, in[i].name);
		h = fnv_i64(h, in[i].dtype);
		h = fnv_i64(h, in[i].rank);
		for (int k = 0; k < in[i].rank && k < TPF_KERNEL_MAX_RANK; k++)
			h = fnv_i64(h, in[i].dims[k]);
	}
	return h;
}

/* ------------------------------------------------------------ inputs */

/* Symbolic dims bound consistently: the same name, the same value, and
 * the value given for the name (--dim NAME=VALUE), if any. */
static enum tpf_status check_dim_bindings(const struct tpf_plan *p, struct tpf_diag *d)
{
	const struct tpf_graph *g = p->graph;
	enum tpf_status st = TPF_OK;
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		int a = ranked_input(p, v);
		if (a < 0)
			continue;
		for (int k = 0; k < v->type.shape.rank; k++) {
			const char *sym = v->type.shape.dims[k].param;
			if (!sym)
				continue;
			size_t len = strlen(sym);
			for (size_t j = 0; j < p->opt.n_dims; j++) {
				const char *b = p->opt.dims[j];
				char *end;
				if (!b || strncmp(b, sym, len) || b[len] != '=')
					continue;
				long long want = strtoll(b + len + 1, &end, 10);
				if (*end || end == b + len + 1)
					st = tpf_diag_fail(d, TPF_ERR_INVALID, "dim binding '%s' is not NAME=VALUE", b);
				else if (want != p->values[a].t.dims[k])
					st = tpf_diag_fail(d, TPF_ERR_INVALID,
							   "input '%s': dim %d ('%s') is %lld, but %s was given", v->name,
							   k, sym, (long long)p->values[a].t.dims[k], b);
			}
			for (size_t j = 0; j < i; j++) {
				const struct tpf_value *w = g->inputs[j];
				int b = ranked_input(p, w);
				if (b < 0)
					continue;
				for (int l = 0; l < w->type.shape.rank; l++) {
					const char *s2 = w->type.shape.dims[l].param;
					if (s2 && strcmp(s2, sym) == 0 &&
					    p->values[a].t.dims[k] != p->values[b].t.dims[l])
						st = tpf_diag_fail(
							d, TPF_ERR_INVALID,
							"dim '%s' is %lld in input '%s' but %lld in input '%s'", sym,
							(long long)p->values[a].t.dims[k], v->name,
							(long long)p->values[b].t.dims[l], w->name);
				}
			}
		}
	}
	return st;
}

/* Whether graph input `name` is one of the options' kept inputs (no buffer
 * of the plan; its data may be missing). */
static int kept_input(const struct tpf_plan *p, const char *name)
{
	for (size_t i = 0; name && i < p->opt.n_kept_inputs; i++)
		if (!strcmp(p->opt.kept_inputs[i], name))
			return 1;
	return 0;
}

static enum tpf_status bind_inputs(struct tpf_plan *p, const struct tpf_host_tensor *in, size_t n_in,
				   struct tpf_diag *d)
{
	const struct tpf_graph *g = p->graph;
	enum tpf_status st = TPF_OK;
	for (size_t k = 0; k < n_in; k++) {
		int found = 0;
		for (size_t i = 0; i < g->n_inputs; i++)
			found |= in[k].name && strcmp(in[k].name, g->inputs[i]->name) == 0;
		if (!found) {
			char names[512] = "";
			size_t at = 0;
			for (size_t i = 0; i < g->n_inputs && at < sizeof(names) - 64; i++)
				at += (size_t)snprintf(names + at, sizeof(names) - at, "%s'%s'", i ? ", " : "",
						       g->inputs[i]->name);
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "unexpected input '%s' (the model's inputs: %s)",
					   in[k].name ? in[k].name : "(unnamed)", names);
		}
		for (size_t j = 0; j < k; j++)
			if (in[k].name && in[j].name && strcmp(in[k].name, in[j].name) == 0)
				st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' given twice", in[k].name);
	}
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		const struct tpf_host_tensor *t = NULL;
		for (size_t k = 0; k < n_in; k++)
			if (in[k].name && strcmp(in[k].name, v->name) == 0)
				t = &in[k];
		int idx = tpf_rt_add_value(p, v, NULL);
		if (idx < 0)
			return TPF_ERR_NOMEM;
		struct rt_value *r = &p->values[idx];
		if (!t) {
			if (v->init && v->init->data) {
				r->known = 1;
				r->lasting = 1;
				r->host = (void *)v->init->data;
				r->t.dtype = v->init->dtype;
				r->t.rank = v->init->rank;
				if (r->t.rank > TPF_KERNEL_MAX_RANK)
					return tpf_diag_fail(d, TPF_ERR_LIMIT, "input '%s': rank %d too large",
							     v->name, r->t.rank);
				if (r->t.rank > 0)
					memcpy(r->t.dims, v->init->dims, sizeof(int64_t) * (size_t)r->t.rank);
				if (tpf_ktensor_finish(&r->t))
					return tpf_diag_fail(d, TPF_ERR_LIMIT, "input '%s': size overflows", v->name);
				continue;
			}
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "missing input '%s' (%s, rank %d)", v->name,
					   tpf_dtype_name(v->type.dtype), v->type.shape.rank);
			continue;
		}
		if (v->type.kind == TPF_TYPE_TENSOR && v->type.dtype != TPF_DTYPE_UNDEFINED &&
		    v->type.dtype != t->dtype) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': dtype %s, the model expects %s",
					   v->name, tpf_dtype_name(t->dtype), tpf_dtype_name(v->type.dtype));
			continue;
		}
		if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK) {
			st = tpf_diag_fail(d, TPF_ERR_LIMIT, "input '%s': rank %d not supported (max %d)",
					   v->name, t->rank, TPF_KERNEL_MAX_RANK);
			continue;
		}
		if (v->type.kind == TPF_TYPE_TENSOR && v->type.shape.rank >= 0) {
			if (v->type.shape.rank != t->rank) {
				st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': rank %d, the model expects %d",
						   v->name, t->rank, v->type.shape.rank);
				continue;
			}
			for (int k = 0; k < t->rank; k++) {
				const struct tpf_dim *dim = &v->type.shape.dims[k];
				if (!dim->param && dim->value >= 0 && dim->value != t->dims[k]) {
					st = tpf_diag_fail(d, TPF_ERR_INVALID,
							   "input '%s': dim %d is %lld, the model expects %lld",
							   v->name, k, (long long)t->dims[k],
							   (long long)dim->value);
					break;
				}
			}
		}
		r->t.dtype = t->dtype;
		r->t.rank = t->rank;
		if (t->rank > 0)
			memcpy(r->t.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
		if (tpf_ktensor_finish(&r->t)) {
			st = tpf_diag_fail(d, TPF_ERR_LIMIT, "input '%s': size overflows", v->name);
			continue;
		}
		size_t given;
		int kept = kept_input(p, v->name);
		if (tpf_host_tensor_bytes(t, &given) || given != r->t.nbytes || (!t->data && !kept)) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': %zu bytes of data for %zu expected",
					   v->name, t->data ? given : 0, r->t.nbytes);
			continue;
		}
		r->is_input = 1;
		r->kept = kept;
		r->input_index = (int)(t - in);
		/* small integer inputs and numeric scalars: their values may decide
		 * shapes (Reshape targets, Split sizes, Range bounds) */
		if (kept)
			continue;
		if ((tpf_dtype_is_integral(t->dtype) && r->t.numel <= TPF_RT_HINT_MAX_ELEMS) ||
		    (r->t.numel == 1 && tpf_dtype_bits(t->dtype) >= 8 && t->dtype != TPF_DTYPE_STRING)) {
			r->host = tpf_malloc(r->t.nbytes ? r->t.nbytes : 1);
			if (!r->host)
				return TPF_ERR_NOMEM;
			memcpy(r->host, t->data, r->t.nbytes);
			r->owns_host = 1;
			r->host_hint = 1;
		}
	}
	enum tpf_status bst = check_dim_bindings(p, d);
	return bst ? bst : st;
}

static enum tpf_status bind_initializers(struct tpf_plan *p, struct tpf_diag *d)
{
	const struct tpf_graph *g = p->graph;
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];
		if (tpf_rt_value_index(p, v) >= 0)
			continue; /* a graph input with a default, already bound */
		const struct tpf_tensor *t = v->init;
		int idx = tpf_rt_add_value(p, v, NULL);
		if (idx < 0)
			return TPF_ERR_NOMEM;
		struct rt_value *r = &p->values[idx];
		if (!t)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "initializer '%s' has no tensor", v->name);
		if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK)
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "initializer '%s': rank %d too large", v->name,
					     t->rank);
		r->t.dtype = t->dtype;
		r->t.rank = t->rank;
		if (t->rank > 0)
			memcpy(r->t.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
		if (t->dtype == TPF_DTYPE_STRING) {
			r->t.dtype = TPF_DTYPE_UNDEFINED; /* unusable by kernels; an error if used */
			continue;
		}
		if (tpf_ktensor_finish(&r->t))
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "initializer '%s': size overflows", v->name);
		if (t->nbytes != r->t.nbytes || (!t->data && t->nbytes))
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "initializer '%s': %zu bytes of data for %zu expected%s", v->name,
					     t->data ? t->nbytes : 0, r->t.nbytes,
					     t->is_external && !t->data ? " (external data not loaded)" : "");
		r->known = 1;
		r->lasting = 1;
		r->host = (void *)t->data;
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ scheduling */

static enum tpf_status schedule(const struct tpf_graph *g, const struct tpf_node ***order_out,
				size_t *n_out, struct tpf_diag *d)
{
	size_t n_ids = g->next_node_id;
	enum tpf_status st = TPF_OK;
	const struct tpf_node **order = tpf_calloc(g->n_nodes + 1, sizeof(*order));
	int *indeg = tpf_calloc(n_ids + 1, sizeof(int));
	const struct tpf_node **by_id = tpf_calloc(n_ids + 1, sizeof(*by_id));
	if (!order || !indeg || !by_id) {
		st = TPF_ERR_NOMEM;
		goto out_free;
	}
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (n->id >= n_ids)
			continue;
		by_id[n->id] = n;
		for (size_t i = 0; i < n->n_inputs; i++) {
			const struct tpf_value *v = n->inputs[i];
			if (v && v->kind == TPF_VALUE_NODE_OUTPUT && v->producer && !v->producer->erased)
				indeg[n->id]++;
		}
		for (size_t i = 0; i < n->n_implicit; i++) {
			const struct tpf_value *v = n->implicit_inputs[i];
			if (v && v->kind == TPF_VALUE_NODE_OUTPUT && v->producer && !v->producer->erased)
				indeg[n->id]++;
		}
	}
	size_t head = 0, tail = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next)
		if (n->id < n_ids && indeg[n->id] == 0)
			order[tail++] = n;
	while (head < tail) {
		const struct tpf_node *n = order[head++];
		for (size_t o = 0; o < n->n_outputs; o++) {
			const struct tpf_value *v = n->outputs[o];
			if (!v)
				continue;
			for (size_t u = 0; u < v->n_uses; u++) {
				const struct tpf_node *m = v->uses[u].node;
				if (!m || m->graph != g || m->id >= n_ids || by_id[m->id] != m)
					continue; /* a use inside a subgraph */
				if (--indeg[m->id] == 0)
					order[tail++] = m;
			}
		}
	}
	if (tail != g->n_nodes) {
		for (const struct tpf_node *n = g->first; n; n = n->next)
			if (n->id < n_ids && indeg[n->id] > 0) {
				st = tpf_rt_node_fail(d, n, TPF_ERR_VERIFY,
					   "cannot be scheduled: its inputs are on a cycle or never defined");
				break;
			}
		if (!st)
			st = tpf_diag_fail(d, TPF_ERR_VERIFY, "graph cannot be scheduled");
		goto out_free;
	}
	*order_out = order;
	*n_out = tail;
	order = NULL;
out_free:
	tpf_free(order);
	tpf_free(indeg);
	tpf_free(by_id);
	return st;
}

/* ------------------------------------------------------------ build */

enum tpf_status tpf_plan_build(const struct tpf_model *m, const struct tpf_host_tensor *inputs,
			       size_t n_inputs, const struct tpf_plan_options *o,
			       struct tpf_plan **out, struct tpf_diag *d)
{
	return tpf_plan_build_shared(m, inputs, n_inputs, o, NULL, out, d);
}

enum tpf_status tpf_plan_build_shared(const struct tpf_model *m, const struct tpf_host_tensor *inputs,
				      size_t n_inputs, const struct tpf_plan_options *o,
				      struct tpf_const_store *store, struct tpf_plan **out, struct tpf_diag *d)
{
	enum tpf_status st;
	const struct tpf_node **order = NULL;
	size_t n_order = 0;
	*out = NULL;
	if (!m || !m->graph || (n_inputs && !inputs))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "plan: no model or inputs");
	if ((st = tpf_env_check(d)))
		return st;
	struct tpf_plan *p = tpf_calloc(1, sizeof(*p));
	if (!p)
		return TPF_ERR_NOMEM;
	p->model = m;
	p->graph = m->graph;
	p->store = store;
	if (o)
		p->opt = *o;
	if (p->opt.world <= 0)
		p->opt.world = 1;
	if (p->opt.rank < 0 || p->opt.rank >= p->opt.world) {
		st = tpf_diag_fail(d, TPF_ERR_INVALID, "rank %d outside world size %d", p->opt.rank,
				   p->opt.world);
		goto out_fail;
	}
	p->opset = tpf_model_opset(m, "");
	if (p->opset < 0)
		p->opset = 23;
	p->n_ids = p->graph->n_values;
	p->value_of_id = tpf_malloc((p->n_ids + 1) * sizeof(int));
	if (!p->value_of_id) {
		st = TPF_ERR_NOMEM;
		goto out_fail;
	}
	for (size_t i = 0; i <= p->n_ids; i++)
		p->value_of_id[i] = -1;
	if ((st = bind_inputs(p, inputs, n_inputs, d)))
		goto out_fail;
	if ((st = bind_initializers(p, d)))
		goto out_fail;
	if ((st = schedule(p->graph, &order, &n_order, d)))
		goto out_fail;
	if ((st = tpf_rt_lower_graph(p, order, n_order, d)))
		goto out_fail;
	p->n_outputs = p->graph->n_outputs;
	p->outputs = tpf_calloc(p->n_outputs + 1, sizeof(int));
	if (!p->outputs) {
		st = TPF_ERR_NOMEM;
		goto out_fail;
	}
	for (size_t i = 0; i < p->n_outputs; i++) {
		int v = tpf_rt_value_index(p, p->graph->outputs[i]);
		if (v < 0) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "graph output '%s' is never computed",
					   p->graph->outputs[i]->name);
			goto out_fail;
		}
		p->outputs[i] = v;
		p->values[v].is_output = 1;
	}
	if ((st = tpf_rt_plan_memory(p, d)))
		goto out_fail;
	p->shape_hash = inputs_hash(inputs, n_inputs);
	p->store = NULL;
	tpf_free(order);
	*out = p;
	return TPF_OK;
out_fail:
	tpf_free(order);
	tpf_plan_free(p);
	return st;
}

size_t tpf_plan_value_inputs(const struct tpf_plan *p, int *idx, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (r->is_input && r->value_dep) {
			if (n < max)
				idx[n] = r->input_index;
			n++;
		}
	}
	return n;
}

void tpf_plan_get_stats(const struct tpf_plan *p, struct tpf_plan_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->n_steps = p->n_steps;
	for (size_t i = 0; i < p->n_steps; i++) {
		if (p->steps[i].kind == RT_STEP_KERNEL)
			st->n_kernel_steps++;
		else
			st->n_collective_steps++;
	}
	st->n_folded = p->n_folded;
	st->n_views = p->n_views;
	st->n_buffers = p->n_buffers;
	st->arena_bytes = p->arena_bytes;
	st->unshared_bytes = p->unshared_bytes;
	st->constant_bytes = p->constant_bytes;
}
