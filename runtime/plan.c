/* SPDX-License-Identifier: MIT */
/* Lowering a graph to a plan: bind inputs, schedule topologically, infer
 * concrete shapes, fold what is known on the host, split fused collectives
 * into communicator steps and kernel phases, pick kernels, and place every
 * buffer in one arena by liveness. */
#include "runtime-internal.h"

#ifdef TPF_HAVE_CUDA
#include "cuda/tpf-cuda.h"
#endif

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

/* ------------------------------------------------------------ unsupported ops
 * Every (op, dtype) the runtime cannot run, once, with its node count and
 * first node: a plan refusal names all of them in one error. */

struct unsup_entry {
	char op[128];
	enum tpf_dtype dt;
	size_t count;
	char first[160];
	char reason[320];
};

struct tpf_unsupported {
	struct unsup_entry *e;
	size_t n, cap, nodes;
	int nomem;
};

struct tpf_unsupported *tpf_unsupported_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_unsupported));
}

void tpf_unsupported_free(struct tpf_unsupported *u)
{
	if (u)
		tpf_free(u->e);
	tpf_free(u);
}

size_t tpf_unsupported_count(const struct tpf_unsupported *u)
{
	return u ? u->n : 0;
}

void tpf_unsupported_add(struct tpf_unsupported *u, const struct tpf_node *n, enum tpf_dtype dt,
			 const char *reason)
{
	char op[128];
	if (!u || !n)
		return;
	snprintf(op, sizeof(op), "%s%s%s", n->domain && *n->domain ? n->domain : "",
		 n->domain && *n->domain ? "::" : "", n->op_type ? n->op_type : "?");
	u->nodes++;
	/* a node whose dtype is not known (after a node that has no shapes)
	 * counts with its op's entry */
	for (size_t i = 0; i < u->n; i++)
		if (!strcmp(u->e[i].op, op) &&
		    (u->e[i].dt == dt || dt == TPF_DTYPE_UNDEFINED || u->e[i].dt == TPF_DTYPE_UNDEFINED)) {
			if (u->e[i].dt == TPF_DTYPE_UNDEFINED)
				u->e[i].dt = dt;
			u->e[i].count++;
			return;
		}
	if (u->n == u->cap) {
		size_t cap = u->cap ? 2 * u->cap : 16;
		void *ne = tpf_realloc(u->e, cap * sizeof(*u->e));
		if (!ne) {
			u->nomem = 1;
			return;
		}
		u->e = ne;
		u->cap = cap;
	}
	struct unsup_entry *e = &u->e[u->n++];
	memset(e, 0, sizeof(*e));
	snprintf(e->op, sizeof(e->op), "%s", op);
	e->dt = dt;
	e->count = 1;
	tpf_node_describe(n, e->first, sizeof(e->first));
	/* "node 'X' (Op): why" -> "why" */
	const char *r = reason ? reason : "";
	if (!strncmp(r, "node '", 6)) {
		const char *colon = strstr(r, "): ");
		if (colon)
			r = colon + 3;
	}
	snprintf(e->reason, sizeof(e->reason), "%s", r);
}

enum tpf_status tpf_unsupported_report(const struct tpf_unsupported *u, enum tpf_backend b,
				       struct tpf_diag *d)
{
	if (!u || !u->n)
		return u && u->nomem ? tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory") : TPF_OK;
	size_t cap = 256 + u->n * (sizeof(struct unsup_entry) + 64), at = 0;
	char *text = tpf_malloc(cap);
	if (!text)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "the %s runtime cannot run %zu nodes of this model (%zu kinds of op)",
				     tpf_backend_name(b), u->nodes, u->n);
	at += (size_t)snprintf(text + at, cap - at,
			       "the %s runtime cannot run %zu node%s of this model (%zu kind%s of op):",
			       tpf_backend_name(b), u->nodes, u->nodes == 1 ? "" : "s", u->n, u->n == 1 ? "" : "s");
	for (size_t i = 0; i < u->n && at < cap; i++) {
		const struct unsup_entry *e = &u->e[i];
		char dt[48] = "";
		if (e->dt != TPF_DTYPE_UNDEFINED)
			snprintf(dt, sizeof(dt), " (%s)", tpf_dtype_name(e->dt));
		at += (size_t)snprintf(text + at, cap - at, "\n  %s%s: %zu node%s, the first %s%s%s", e->op, dt,
				       e->count, e->count == 1 ? "" : "s", e->first, e->reason[0] ? ": " : "", e->reason);
	}
	tpf_diag_add(d, TPF_SEV_ERROR, "%s", text);
	tpf_free(text);
	return TPF_ERR_UNSUPPORTED;
}

/* The kernel phases a node lowers to (runtime/plan.c's lower_node): 0
 * phases for constants and plain communicator steps. */
static size_t node_phases(const struct tpf_node *n, enum tpf_kernel_phase *ph)
{
	switch (n->op) {
	case TPF_OP_CONSTANT:
	case TPF_OP_MS_ALLREDUCE:
	case TPF_OP_MS_ALLTOALL:
		return 0;
	case TPF_OP_MS_ALLGATHER:
		ph[0] = TPF_PHASE_GATHER_REORDER;
		return 1;
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT:
		ph[0] = TPF_PHASE_POST_REDUCE;
		return 1;
	case TPF_OP_TPF_SHARDED_RMS_NORM:
		ph[0] = TPF_PHASE_SUMSQ;
		ph[1] = TPF_PHASE_NORMALIZE;
		return 2;
	default:
		ph[0] = TPF_PHASE_MAIN;
		return 1;
	}
}

static int runnable_op(const struct tpf_node *n)
{
	return n->op != TPF_OP_UNKNOWN && !tpf_op_has_trait(n->op, TPF_OP_TRAIT_CONTROL_FLOW) && !n->n_implicit;
}

/* Whether backend b has a kernel for node n's phase ph, by the dtype the
 * graph declares or infers for the key operand (unknown: any kernel of the
 * op).  Records a miss in u. */
static void check_kernel(struct tpf_unsupported *u, enum tpf_backend b, const struct tpf_node *n,
			 enum tpf_kernel_phase ph)
{
	char why[160];
	const struct tpf_kernel *any = tpf_kernel_find_any(b, n->op, ph);
	if (!any) {
		const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
		snprintf(why, sizeof(why), "no %s kernel for this op%s%s", tpf_backend_name(b), ph ? " phase " : "",
			 ph ? tpf_kernel_phase_name(ph) : "");
		tpf_unsupported_add(u, n, v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED, why);
		return;
	}
	const struct tpf_value *key = any->key_input < 0 ? (n->n_outputs ? n->outputs[0] : NULL)
				      : (size_t)any->key_input < n->n_inputs ? n->inputs[any->key_input]
									       : NULL;
	enum tpf_dtype dt = key ? tpf_value_dtype(key) : TPF_DTYPE_UNDEFINED;
	if (dt == TPF_DTYPE_UNDEFINED || tpf_kernel_find(b, n->op, ph, dt))
		return;
	snprintf(why, sizeof(why), "no %s kernel for dtype %s", tpf_backend_name(b), tpf_dtype_name(dt));
	tpf_unsupported_add(u, n, dt, why);
}

static void mark_folding(const struct tpf_graph *g, unsigned char *known, size_t n_ids);
static int node_folds(const struct tpf_node *n, const unsigned char *known, size_t n_ids);

/* Records the nodes of g that backend b cannot run, from the graph alone
 * (declared and inferred dtypes; nodes whose inputs are all constants run
 * on the host when the plan is built, with the CPU kernels). */
static enum tpf_status check_graph(const struct tpf_graph *g, enum tpf_backend b, struct tpf_unsupported *u)
{
	size_t n_ids = g->n_values;
	unsigned char *known = tpf_calloc(n_ids + 1, 1);
	if (!known)
		return TPF_ERR_NOMEM;
	mark_folding(g, known, n_ids);
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (!runnable_op(n)) {
			const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
			tpf_unsupported_add(u, n, v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED,
					    n->n_implicit && n->op != TPF_OP_UNKNOWN
						    ? "nodes with subgraphs are not supported by the runtime"
						    : "not supported by the runtime");
			continue;
		}
		enum tpf_kernel_phase ph[2];
		size_t np = node_phases(n, ph);
		for (size_t k = 0; k < np; k++)
			check_kernel(u, node_folds(n, known, n_ids) ? TPF_BACKEND_CPU : b, n, ph[k]);
	}
	tpf_free(known);
	return TPF_OK;
}

enum tpf_status tpf_plan_check_model(const struct tpf_model *m, enum tpf_backend b, struct tpf_diag *d)
{
	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "plan: no model");
	struct tpf_unsupported *u = tpf_unsupported_create();
	if (!u)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = check_graph(m->graph, b, u);
	if (!st)
		st = tpf_unsupported_report(u, b, d);
	else
		tpf_diag_fail(d, st, "out of memory");
	tpf_unsupported_free(u);
	return st;
}

/* ------------------------------------------------------------ values */

/* Room in *arr (n elements of elem bytes used, *cap allocated) for one
 * more: 0, or -1 when out of memory. */
static int reserve_one(void **arr, size_t *cap, size_t n, size_t elem)
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

static int plan_add_value(struct tpf_plan *p, const struct tpf_value *v, const char *name)
{
	if (reserve_one((void **)&p->values, &p->cap_values, p->n_values, sizeof(*p->values)))
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

static int value_index(const struct tpf_plan *p, const struct tpf_value *v)
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
	int a = value_index(p, v);
	return a < 0 || !p->values[a].is_input || v->type.shape.rank < 0 ? -1 : a;
}

static int plan_add_step(struct tpf_plan *p, enum rt_step_kind kind, const struct tpf_node *n,
			 const struct tpf_kernel *k, enum tpf_kernel_phase ph, const int *ins,
			 size_t n_in, const int *outs, size_t n_out)
{
	if (reserve_one((void **)&p->steps, &p->cap_steps, p->n_steps, sizeof(*p->steps)))
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
static struct tpf_const_store *shared_store(const struct tpf_plan *p, int w)
{
	return p->store && w >= 0 && p->values[w].known && p->values[w].lasting ? p->store : NULL;
}

/* A derived copy the plan has just made (t->host, owned) goes to the
 * session's store, when there is one, for later plans to share. */
static void share_derived(struct tpf_const_store *cs, const struct tpf_const_key *k, struct rt_value *t,
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
static void mark_folding(const struct tpf_graph *g, unsigned char *known, size_t n_ids)
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

static int node_folds(const struct tpf_node *n, const unsigned char *known, size_t n_ids)
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
		mark_folding(g, known, n);
		for (size_t i = 0; i < g->n_inputs; i++)
			if (g->inputs[i]->id < n)
				pos[g->inputs[i]->id] = next++;
		/* all outputs of a node share its position: a rank may keep
		 * another output of a Split than its peers */
		for (const struct tpf_node *nd = g->first; nd; nd = nd->next) {
			if (node_folds(nd, known, n))
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
		if (n && node_folds(nd, known, n))
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
		int idx = plan_add_value(p, v, NULL);
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
		if (tpf_host_tensor_bytes(t, &given) || given != r->t.nbytes || !t->data) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': %zu bytes of data for %zu expected",
					   v->name, t->data ? given : 0, r->t.nbytes);
			continue;
		}
		r->is_input = 1;
		r->input_index = (int)(t - in);
		/* small integer inputs and numeric scalars: their values may decide
		 * shapes (Reshape targets, Split sizes, Range bounds) */
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
	/* symbolic dims bound consistently: the same name, the same value, and
	 * the value given for the name, if any */
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

static enum tpf_status bind_initializers(struct tpf_plan *p, struct tpf_diag *d)
{
	const struct tpf_graph *g = p->graph;
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];
		if (value_index(p, v) >= 0)
			continue; /* a graph input with a default, already bound */
		const struct tpf_tensor *t = v->init;
		int idx = plan_add_value(p, v, NULL);
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

/* ------------------------------------------------------------ lowering */

/* ShardedRMSNorm's part form: whether tensor i's part [start, end) is this
 * rank's shard of width d (the kernels apply the same rule). */
static int sharded_part_own(const struct tpf_node *n, size_t i, int64_t d, int64_t rank)
{
	const struct tpf_attr *as = tpf_node_attr(n, "part_starts"), *ae = tpf_node_attr(n, "part_ends");
	if (!as || !ae || as->kind != TPF_ATTR_INTS || ae->kind != TPF_ATTR_INTS || i >= as->n || i >= ae->n)
		return 0;
	return as->ints[i] == rank * d && ae->ints[i] - as->ints[i] == d;
}

static int is_collective(enum tpf_op op)
{
	return op == TPF_OP_MS_ALLREDUCE || op == TPF_OP_MS_ALLGATHER || op == TPF_OP_MS_ALLTOALL ||
	       op == TPF_OP_TPF_ALLREDUCE_RMS_NORM || op == TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT ||
	       op == TPF_OP_TPF_SHARDED_RMS_NORM;
}

static void fill_ktensor(const struct tpf_plan *p, int idx, struct tpf_ktensor *t)
{
	if (idx < 0) {
		memset(t, 0, sizeof(*t));
		t->rank = -1;
		return;
	}
	*t = p->values[idx].t;
	t->host = p->values[idx].known || p->values[idx].host_hint ? p->values[idx].host : NULL;
	t->data = (void *)t->host;
}

static const struct tpf_kernel *pick_kernel(const struct tpf_plan *p, enum tpf_backend b,
					    const struct tpf_node *n, enum tpf_kernel_phase ph,
					    const int *ins, size_t n_in, const int *outs, size_t n_out,
					    struct tpf_diag *d)
{
	const struct tpf_kernel *any = tpf_kernel_find_any(b, n->op, ph);
	if (!any) {
		tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "no %s kernel for this op%s%s", tpf_backend_name(b),
		      ph ? " phase " : "", ph ? tpf_kernel_phase_name(ph) : "");
		return NULL;
	}
	int key_idx = any->key_input < 0 ? (n_out ? outs[0] : -1)
					 : ((size_t)any->key_input < n_in ? ins[any->key_input] : -1);
	enum tpf_dtype key = key_idx >= 0 ? p->values[key_idx].t.dtype : TPF_DTYPE_UNDEFINED;
	const struct tpf_kernel *k = tpf_kernel_find(b, n->op, ph, key);
	if (!k)
		tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "no %s kernel for dtype %s", tpf_backend_name(b),
		      tpf_dtype_name(key));
	return k;
}

/* Picks the kernel of n's phase ph for these operands and adds its step. */
static enum tpf_status add_kernel_step(struct tpf_plan *p, enum tpf_backend b, const struct tpf_node *n,
				       enum tpf_kernel_phase ph, const int *ins, size_t n_in,
				       const int *outs, size_t n_out, struct tpf_diag *d)
{
	const struct tpf_kernel *k = pick_kernel(p, b, n, ph, ins, n_in, outs, n_out, d);
	if (!k)
		return TPF_ERR_UNSUPPORTED;
	return plan_add_step(p, RT_STEP_KERNEL, n, k, ph, ins, n_in, outs, n_out) < 0 ? TPF_ERR_NOMEM
										      : TPF_OK;
}

static int add_temp(struct tpf_plan *p, const struct tpf_node *n, const char *suffix,
		    enum tpf_dtype dt, int rank, const int64_t *dims)
{
	int idx = plan_add_value(p, NULL, suffix);
	if (idx < 0)
		return -1;
	struct rt_value *r = &p->values[idx];
	r->t.dtype = dt;
	r->t.rank = rank;
	if (rank > 0)
		memcpy(r->t.dims, dims, sizeof(int64_t) * (size_t)rank);
	if (tpf_ktensor_finish(&r->t))
		return -1;
	return idx;
}

static enum tpf_status check_group(const struct tpf_plan *p, const struct tpf_node *n,
				   struct tpf_diag *d)
{
	int64_t gs = tpf_node_attr_int(n, "group_size", 0);
	if (gs > 0 && gs != p->opt.world)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "group_size is %lld but the run has %d ranks",
			     (long long)gs, p->opt.world);
	return TPF_OK;
}

/* ------------------------------------------------------------ FP8 GEMMs
 * MatMul(DequantizeLinear(xq), DequantizeLinear(wq)) with E4M3 codes,
 * known per-tensor scales and zero points absent or zero, the weight a 2-D
 * initializer [K, N] with K and N multiples of 16: on a backend with an
 * fp8-gemm kernel it runs on the codes, and the dequantizations that only
 * feed such products are not run at all.  Decided from the graph and the
 * known values only, so that a dequantization lowered before its MatMul
 * makes the same decision as the MatMul. */

static int known_index(const struct tpf_plan *p, const struct tpf_value *v)
{
	int i = v ? value_index(p, v) : -1;
	return i >= 0 && p->values[i].known && p->values[i].host ? i : -1;
}

/* The dtype a DequantizeLinear of an fp8 GEMM produces, or UNDEFINED when
 * v is not such a dequantization. */
static enum tpf_dtype fp8_dq(const struct tpf_plan *p, const struct tpf_value *v, int weight)
{
	const enum tpf_dtype no = TPF_DTYPE_UNDEFINED;
	if (!v || v->kind != TPF_VALUE_NODE_OUTPUT || !v->producer)
		return no;
	const struct tpf_node *dq = v->producer;
	if (dq->op != TPF_OP_DEQUANTIZE_LINEAR || dq->n_inputs < 2 || !dq->inputs[0] ||
	    tpf_node_attr_int(dq, "block_size", 0) != 0)
		return no;
	int s = known_index(p, dq->inputs[1]);
	if (s < 0 || p->values[s].t.numel != 1)
		return no;
	enum tpf_dtype sdt = p->values[s].t.dtype;
	if (sdt != TPF_DTYPE_FLOAT && sdt != TPF_DTYPE_FLOAT16 && sdt != TPF_DTYPE_BFLOAT16)
		return no;
	int64_t odt = tpf_node_attr_int(dq, "output_dtype", 0);
	if (odt && odt != (int64_t)sdt)
		return no;
	double sv = tpf_elem_load(sdt, p->values[s].host, 0);
	if (!(sv > 0 && sv < 1e30))
		return no;
	/* the codes' dtype: the zero point's (the spec makes them equal), else
	 * the bound or declared input type */
	enum tpf_dtype xdt;
	if (dq->n_inputs > 2 && dq->inputs[2]) {
		int z = known_index(p, dq->inputs[2]);
		if (z < 0)
			return no;
		for (size_t b = 0; b < p->values[z].t.nbytes; b++)
			if (((const uint8_t *)p->values[z].host)[b])
				return no;
		xdt = p->values[z].t.dtype;
	} else {
		int x = value_index(p, dq->inputs[0]);
		xdt = x >= 0 ? p->values[x].t.dtype : dq->inputs[0]->type.dtype;
	}
	if (xdt != TPF_DTYPE_FLOAT8E4M3FN)
		return no;
	if (weight) {
		int w = known_index(p, dq->inputs[0]);
		if (w < 0 || p->values[w].t.rank != 2 || p->values[w].t.dims[0] % 16 ||
		    p->values[w].t.dims[1] % 16 || p->values[w].t.numel == 0)
			return no;
	}
	return sdt;
}

static int fp8_gemm_enabled(const struct tpf_plan *p)
{
	return !p->opt.no_fp8_gemm && tpf_env_switch("TPF_FP8_GEMM", 1) &&
	       tpf_kernel_find_any(p->opt.backend, TPF_OP_MATMUL, TPF_PHASE_FP8_GEMM);
}

static int fp8_matmul(const struct tpf_plan *p, const struct tpf_node *mm)
{
	if (mm->op != TPF_OP_MATMUL || mm->n_inputs != 2 || !fp8_gemm_enabled(p))
		return 0;
	enum tpf_dtype a = fp8_dq(p, mm->inputs[0], 0), b = fp8_dq(p, mm->inputs[1], 1);
	return a != TPF_DTYPE_UNDEFINED && a == b;
}

/* 1 when n's single output is no graph output and every reader, in n's
 * graph, is one that reads(p, n, use) accepts: n need not run then. */
static int only_read_by(const struct tpf_plan *p, const struct tpf_node *n,
			int (*reads)(const struct tpf_plan *p, const struct tpf_node *n, const struct tpf_use *use))
{
	const struct tpf_value *y = n->n_outputs == 1 ? n->outputs[0] : NULL;
	if (!y || y->n_output_refs || !y->n_uses)
		return 0;
	for (size_t u = 0; u < y->n_uses; u++) {
		const struct tpf_use *use = &y->uses[u];
		if (!use->node || use->node->graph != n->graph || use->index < 0 || !reads(p, n, use))
			return 0;
	}
	return 1;
}

/* An fp8 GEMM reading a dequantization as either operand. */
static int read_by_fp8_gemm(const struct tpf_plan *p, const struct tpf_node *dq, const struct tpf_use *use)
{
	return use->index <= 1 && fp8_matmul(p, use->node);
}

static enum tpf_status lower_fp8_matmul(struct tpf_plan *p, const struct tpf_node *n, const int *outs,
					struct tpf_diag *d)
{
	const struct tpf_node *dx = n->inputs[0]->producer, *dw = n->inputs[1]->producer;
	int xq = value_index(p, dx->inputs[0]), sx = known_index(p, dx->inputs[1]);
	int w = known_index(p, dw->inputs[0]), sw = known_index(p, dw->inputs[1]);
	if (xq < 0)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "input '%s' is not defined", dx->inputs[0]->name);
	int64_t K = p->values[w].t.dims[0], N = p->values[w].t.dims[1];
	const struct tpf_ktensor *xt = &p->values[xq].t;
	if (xt->dtype != TPF_DTYPE_FLOAT8E4M3FN || xt->rank < 1 || xt->dims[xt->rank - 1] != K)
		return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "fp8 operand '%s' is not FLOAT8E4M3FN [..., %lld]",
			     dx->inputs[0]->name, (long long)K);
	int64_t tdims[2] = {N, K};
	int wt = add_temp(p, n, "weight.fp8.transposed", TPF_DTYPE_FLOAT8E4M3FN, 2, tdims);
	if (wt < 0)
		return TPF_ERR_NOMEM;
	struct rt_value *t = &p->values[wt];
	const uint8_t *src = p->values[w].host;
	size_t bytes = (size_t)(N * K);
	struct tpf_const_store *cs = shared_store(p, w);
	struct tpf_const_key key = {.src = src, .rows = K, .cols = N, .elem_bytes = 1, .kind = TPF_CS_FP8_TRANSPOSED};
	t->known = 1;
	t->host = tpf_const_store_derived(cs, &key);
	t->lasting = t->host != NULL;
	if (!t->host) {
		uint8_t *dst = t->host = tpf_malloc(bytes);
		if (!dst)
			return TPF_ERR_NOMEM;
		t->owns_host = 1;
		for (int64_t k0 = 0; k0 < K; k0 += 32) /* 32 x 32 tiles */
			for (int64_t n0 = 0; n0 < N; n0 += 32)
				for (int64_t k = k0; k < k0 + 32 && k < K; k++)
					for (int64_t j = n0; j < n0 + 32 && j < N; j++)
						dst[j * K + k] = src[k * N + j];
		share_derived(cs, &key, t, bytes);
	}
	int ins[4] = {xq, wt, sx, sw};
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_FP8_GEMM, ins, 4, outs, 1, d);
}

/* ------------------------------------------------------------ packed weights
 * MatMul(a, w) with w a known 2-D weight [K, N] and few rows of a: the CUDA
 * backend's small-M kernel streams w in column tiles (each block one tile
 * over the whole of K), and reads those at more of the memory's bandwidth
 * when each tile is one contiguous run (2x H100, Llama-3-8B gate/up at one
 * row: 2.80 against 2.60 TB/s, docs/gpu.md).  The plan packs such a
 * weight as [ceil(N / TW), K, TW] on the host (once per weight and width)
 * and the product reads the packed copy (TPF_PHASE_MATMUL_TILED); w itself
 * goes to the device only if another step reads it.  TPF_GEMV_TILED=0
 * turns this off; TPF_GEMV_TILED=16 or 32 forces that tile width, and on
 * the CPU backend packs every such product (its kernel unpacks: tests). */
static const struct tpf_node *bt_transpose(const struct tpf_plan *p, const struct tpf_node *mm);
static enum tpf_status lower_main(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs,
				  struct tpf_diag *d);

static int tiled_width(const struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	const long long env = tpf_env_int("TPF_GEMV_TILED", -1); /* -1: chosen below */
	int forced = env > 0 ? (int)env : 0;
	if (env == 0 || n->n_inputs != 2 || n->n_outputs != 1 || ins[0] < 0 || outs[0] < 0)
		return 0;
	int w = known_index(p, n->inputs[1]);
	if (w < 0 || p->values[w].t.rank != 2 || p->values[ins[0]].known)
		return 0;
	const struct tpf_ktensor *a = &p->values[ins[0]].t, *b = &p->values[w].t, *y = &p->values[outs[0]].t;
	int64_t K = b->dims[0], N = b->dims[1];
	if (a->rank < 1 || a->dims[a->rank - 1] != K || K < 1 || N < 1 || a->dtype != b->dtype ||
	    y->dtype != b->dtype || y->rank < 1 || y->dims[y->rank - 1] != N)
		return 0;
#ifdef TPF_HAVE_CUDA
	if (p->opt.backend == TPF_BACKEND_CUDA) {
		int tw = tpf_cuda_gemv_tile_cols(b->dtype, a->numel / K, K, N);
		return tw && forced ? forced : tw;
	}
#endif
	if (forced)
		return tpf_kernel_find(p->opt.backend, TPF_OP_MATMUL, TPF_PHASE_MATMUL_TILED, b->dtype) ? forced : 0;
	return 0;
}

/* The copy of known weight w packed in column tiles of width tw (gated:
 * by tpf_gemv_pack_gated), -1 when there is none. */
static int find_packed(const struct tpf_plan *p, int w, int tw, int gated)
{
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].packed_tw == tw && p->values[i].packed_src == w && p->values[i].packed_gated == gated)
			return (int)i;
	return -1;
}

/* That copy, made once; -1 when it cannot be made (out of host memory:
 * the caller keeps the row-major product). */
static int packed_weight(struct tpf_plan *p, const struct tpf_node *n, int w, int tw, int gated)
{
	int wp = w >= 0 ? find_packed(p, w, tw, gated) : -1;
	if (wp >= 0 || w < 0)
		return wp;
	const struct tpf_ktensor bt = p->values[w].t; /* add_temp may move the values array */
	const void *src = p->values[w].host;
	int64_t dims[3] = {(bt.dims[1] + tw - 1) / tw, bt.dims[0], tw};
	size_t es = bt.numel ? bt.nbytes / (size_t)bt.numel : 0;
	size_t bytes = (size_t)dims[0] * (size_t)dims[1] * (size_t)tw * es;
	struct tpf_const_store *cs = shared_store(p, w);
	struct tpf_const_key key = {.src = src, .rows = bt.dims[0], .cols = bt.dims[1], .elem_bytes = (int)es,
				    .kind = gated ? TPF_CS_PACKED_GATED : TPF_CS_PACKED, .param = tw};
	void *host = tpf_const_store_derived(cs, &key);
	int made = !host;
	if (made)
		host = es ? tpf_malloc(bytes) : NULL;
	wp = host ? add_temp(p, n, gated ? "weight.tiled.gated" : "weight.tiled", bt.dtype, 3, dims) : -1;
	if (wp < 0) {
		if (made)
			tpf_free(host);
		return -1;
	}
	struct rt_value *t = &p->values[wp];
	t->host = host;
	t->owns_host = made;
	t->lasting = !made;
	t->known = 1;
	t->packed_tw = tw;
	t->packed_src = w;
	t->packed_gated = gated;
	if (!made)
		return wp;
	if (gated)
		tpf_gemv_pack_gated(src, t->host, bt.dims[0], bt.dims[1] / 2, tw, es);
	else
		tpf_gemv_pack(src, t->host, bt.dims[0], bt.dims[1], tw, es);
	share_derived(cs, &key, t, bytes);
	return wp;
}

static enum tpf_status lower_tiled_matmul(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
					  const int *outs, int tw, struct tpf_diag *d)
{
	int wp = packed_weight(p, n, known_index(p, n->inputs[1]), tw, 0);
	if (wp < 0)
		return lower_main(p, n, ins, outs, d);
	int tins[2] = {ins[0], wp};
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MATMUL_TILED, tins, 2, outs, 1, d);
}

/* A GatedActivation (packed) whose input is a MatMul of a known merged
 * gate/up weight [K, 2F] that the packed product takes (tiled_width), read
 * by nothing else: the activation is folded into the product's epilogue
 * (the gated-matmul-tiled kernel), the weight packed so that each tile
 * holds the gate and up columns of the same outputs, and the MatMul is
 * not run.  The tile width of the fold for the MatMul mm, else 0.
 * TPF_GEMV_GATED=0 turns it off. */
static int gated_fold_width(const struct tpf_plan *p, const struct tpf_node *mm)
{
	if (!tpf_env_switch("TPF_GEMV_GATED", 1) || mm->op != TPF_OP_MATMUL || mm->n_inputs != 2 || mm->n_outputs != 1 ||
	    fp8_matmul(p, mm) || bt_transpose(p, mm))
		return 0;
	const struct tpf_value *y = mm->outputs[0];
	if (!y || y->n_output_refs || y->n_uses != 1)
		return 0;
	const struct tpf_node *g = y->uses[0].node;
	if (!g || g->graph != mm->graph || g->op != TPF_OP_TPF_GATED_ACTIVATION || y->uses[0].index != 0 ||
	    g->n_inputs != 1 || g->n_outputs != 1 || tpf_node_attr_int(g, "packed", 0) != 1)
		return 0;
	int ins[2] = {value_index(p, mm->inputs[0]), value_index(p, mm->inputs[1])};
	int outs[1] = {value_index(p, y)};
	if (ins[0] < 0 || outs[0] < 0)
		return 0;
	int tw = tiled_width(p, mm, ins, outs);
	int w = known_index(p, mm->inputs[1]);
	/* (the GatedActivation's output has the dtype of its input: the
	 * kernel checks; it is not planned yet when the MatMul is skipped) */
	if (!tw || w < 0 || p->values[w].t.dims[1] % 2 || (p->values[w].t.dims[1] / 2) % (tw / 2))
		return 0;
	return tpf_kernel_find(p->opt.backend, TPF_OP_TPF_GATED_ACTIVATION, TPF_PHASE_MATMUL_TILED,
			       p->values[w].t.dtype)
		       ? tw
		       : 0;
}

/* The fold's packed weight, made when the MatMul was skipped (the main
 * loop): without it the MatMul ran and the activation runs alone. */
static enum tpf_status lower_gated_matmul(struct tpf_plan *p, const struct tpf_node *g, const int *ins,
					  const int *outs, int tw, struct tpf_diag *d)
{
	const struct tpf_node *mm = g->inputs[0]->producer;
	int wp = find_packed(p, known_index(p, mm->inputs[1]), tw, 1);
	if (wp < 0)
		return lower_main(p, g, ins, outs, d);
	int tins[2] = {value_index(p, mm->inputs[0]), wp};
	return add_kernel_step(p, p->opt.backend, g, TPF_PHASE_MATMUL_TILED, tins, 2, outs, 1, d);
}

/* ------------------------------------------------------------ transposed operands
 * MatMul(a, Transpose(b, perm swapping the last two axes)): the GEMM reads
 * b transposed (matmul-bt) and the Transpose, when only such products read
 * it, is not run: no copy of b (attention's K^T over a whole KV cache). */

static const struct tpf_node *bt_transpose(const struct tpf_plan *p, const struct tpf_node *mm)
{
	if (mm->op != TPF_OP_MATMUL || mm->n_inputs != 2 || !mm->inputs[0] || !mm->inputs[1])
		return NULL;
	const struct tpf_value *v = mm->inputs[1];
	const struct tpf_node *t = v->kind == TPF_VALUE_NODE_OUTPUT ? v->producer : NULL;
	if (!t || t->op != TPF_OP_TRANSPOSE || t->n_inputs != 1 || !t->inputs[0])
		return NULL;
	const struct tpf_attr *perm = tpf_node_attr(t, "perm");
	int b = value_index(p, t->inputs[0]);
	if (!perm || perm->kind != TPF_ATTR_INTS || perm->n < 2 || b < 0 || p->values[b].t.rank != (int)perm->n)
		return NULL;
	size_t r = perm->n;
	for (size_t i = 0; i + 2 < r; i++)
		if (perm->ints[i] != (int64_t)i)
			return NULL;
	if (perm->ints[r - 2] != (int64_t)r - 1 || perm->ints[r - 1] != (int64_t)r - 2)
		return NULL;
	if (!tpf_kernel_find(p->opt.backend, TPF_OP_MATMUL, TPF_PHASE_MATMUL_BT, p->values[b].t.dtype))
		return NULL;
	return t;
}

/* A product that reads the Transpose's input transposed instead. */
static int read_by_bt_gemm(const struct tpf_plan *p, const struct tpf_node *t, const struct tpf_use *use)
{
	return use->index == 1 && !fp8_matmul(p, use->node) && bt_transpose(p, use->node) == t;
}

/* One kernel step for node n (the common lowering). */
static enum tpf_status lower_main(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
				  const int *outs, struct tpf_diag *d)
{
	return add_kernel_step(p, p->opt.backend, n, TPF_PHASE_MAIN, ins, n->n_inputs, outs, n->n_outputs, d);
}

/* A Split whose pieces are contiguous runs of its input (every dim before
 * the axis is 1: a decode step's merged projection, one token) becomes views
 * of the input's buffer at the pieces' offsets, when every offset keeps the
 * arena's alignment (kernels may use vector loads).  1 when it did. */
static int split_views(struct tpf_plan *p, const struct tpf_node *n, const int *ins, const int *outs)
{
	const struct rt_value *x = ins[0] >= 0 ? &p->values[ins[0]] : NULL;
	size_t align = p->opt.alignment ? p->opt.alignment : 256;
	if (!x || x->known || x->t.rank < 1)
		return 0;
	int ax = (int)tpf_node_attr_int(n, "axis", 0);
	if (ax < 0)
		ax += x->t.rank;
	if (ax < 0 || ax >= x->t.rank)
		return 0;
	for (int i = 0; i < ax; i++)
		if (x->t.dims[i] != 1)
			return 0;
	if (x->t.numel <= 0 || x->t.nbytes % (size_t)x->t.numel)
		return 0; /* empty, or sub-byte elements */
	size_t esz = x->t.nbytes / (size_t)x->t.numel, inner = esz, off = 0;
	for (int i = ax + 1; i < x->t.rank; i++)
		inner *= (size_t)x->t.dims[i];
	for (size_t k = 0; k < n->n_outputs; k++) {
		if (outs[k] < 0)
			return 0;
		const struct rt_value *y = &p->values[outs[k]];
		if (y->t.rank != x->t.rank || y->t.dtype != x->t.dtype || (x->alias_off + off) % align)
			return 0;
		off += (size_t)y->t.dims[ax] * inner;
	}
	if (off > x->t.nbytes)
		return 0;
	int root = x->alias >= 0 ? x->alias : ins[0];
	off = 0;
	for (size_t k = 0; k < n->n_outputs; k++) {
		struct rt_value *y = &p->values[outs[k]];
		y->alias = root;
		y->alias_off = x->alias_off + off;
		off += (size_t)y->t.dims[ax] * inner;
		p->n_views++;
	}
	return 1;
}

static enum tpf_status lower_node(struct tpf_plan *p, const struct tpf_node *n, const int *ins,
				  const int *outs, struct tpf_diag *d)
{
	enum tpf_backend b = p->opt.backend;
	enum tpf_status st;
	size_t n_in = n->n_inputs, n_out = n->n_outputs;
	int tmp_ins[64];

	if (is_collective(n->op) && (st = check_group(p, n, d)))
		return st;
	switch (n->op) {
	case TPF_OP_RESHAPE:
	case TPF_OP_SQUEEZE:
	case TPF_OP_UNSQUEEZE:
	case TPF_OP_FLATTEN:
	case TPF_OP_IDENTITY:
		/* the same bytes under another shape: a view of the input's buffer */
		if (ins[0] >= 0 && outs[0] >= 0 && !p->values[ins[0]].known &&
		    p->values[ins[0]].t.nbytes == p->values[outs[0]].t.nbytes) {
			int root = p->values[ins[0]].alias >= 0 ? p->values[ins[0]].alias : ins[0];
			p->values[outs[0]].alias = root;
			p->values[outs[0]].alias_off = p->values[ins[0]].alias_off;
			p->n_views++;
			return TPF_OK;
		}
		return lower_main(p, n, ins, outs, d);
	case TPF_OP_SPLIT:
		if (split_views(p, n, ins, outs))
			return TPF_OK;
		return lower_main(p, n, ins, outs, d);
	case TPF_OP_MS_ALLREDUCE:
		return plan_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
			       ? TPF_ERR_NOMEM
			       : TPF_OK;
	case TPF_OP_MS_ALLTOALL: {
		const struct rt_value *x = &p->values[ins[0]];
		if (x->t.rank < 1 || x->t.dims[0] % p->opt.world)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "dim 0 (%lld) does not split into %d ranks",
				     x->t.rank ? (long long)x->t.dims[0] : 0LL, p->opt.world);
		return plan_add_step(p, RT_STEP_ALLTOALL, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
			       ? TPF_ERR_NOMEM
			       : TPF_OK;
	}
	case TPF_OP_MS_ALLGATHER: {
		const struct rt_value *y = &p->values[outs[0]];
		int ax = tpf_norm_axis(tpf_node_attr_int(n, "axis", 0), y->t.rank);
		if (ax < 0)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "axis out of range");
		if (tpf_dims_prod(y->t.dims, 0, ax) == 1 || p->opt.world == 1)
			return plan_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, ins, 1, outs, 1) < 0
				       ? TPF_ERR_NOMEM
				       : TPF_OK;
		int64_t flat = y->t.numel;
		int tmp = add_temp(p, n, "gathered", y->t.dtype, 1, &flat);
		if (tmp < 0)
			return TPF_ERR_NOMEM;
		if (plan_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, ins, 1, &tmp, 1) < 0)
			return TPF_ERR_NOMEM;
		return add_kernel_step(p, b, n, TPF_PHASE_GATHER_REORDER, &tmp, 1, outs, 1, d);
	}
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM:
	case TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT: {
		/* copied: add_temp may move the values array */
		struct tpf_ktensor xt = p->values[ins[0]].t;
		if (n_in > 64)
			return tpf_rt_node_fail(d, n, TPF_ERR_LIMIT, "too many inputs");
		int tmp = add_temp(p, n, "reduced", xt.dtype, xt.rank, xt.dims);
		if (tmp < 0)
			return TPF_ERR_NOMEM;
		if (plan_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, ins, 1, &tmp, 1) < 0)
			return TPF_ERR_NOMEM;
		memcpy(tmp_ins, ins, n_in * sizeof(int));
		tmp_ins[0] = tmp;
		return add_kernel_step(p, b, n, TPF_PHASE_POST_REDUCE, tmp_ins, n_in, outs, n_out, d);
	}
	case TPF_OP_TPF_SHARDED_RMS_NORM: {
		if (n_in < 2 || n_in % 2 || n_in > 62)
			return tpf_rt_node_fail(d, n, TPF_ERR_UNSUPPORTED, "expects n inputs and n gammas, got %zu inputs", n_in);
		const struct rt_value *x = &p->values[ins[0]];
		int64_t cols = x->t.rank ? x->t.dims[x->t.rank - 1] : 1;
		int64_t dims[2] = {cols ? x->t.numel / cols : 0, (int64_t)(n_in / 2)};
		/* the part form (docs/ops.md) exchanges one more float, the ranks
		 * whose parts are their own shards; the others gather below */
		int parts = tpf_node_attr(n, "part_starts") != NULL, own = 1;
		int64_t flat = dims[0] * dims[1] + 1;
		for (size_t i = 0; parts && i < n_in / 2; i++) {
			const struct rt_value *xi = &p->values[ins[i]];
			int64_t d = xi->t.rank ? xi->t.dims[xi->t.rank - 1] : 1;
			int64_t rk = p->opt.rank > 0 ? p->opt.rank : 0;
			own &= sharded_part_own(n, i, d, rk);
		}
		int part = parts ? add_temp(p, n, "sumsq", TPF_DTYPE_FLOAT, 1, &flat)
				 : add_temp(p, n, "sumsq", TPF_DTYPE_FLOAT, 2, dims);
		if (part < 0)
			return TPF_ERR_NOMEM;
		if ((st = add_kernel_step(p, b, n, TPF_PHASE_SUMSQ, ins, n_in, &part, 1, d)))
			return st;
		int sum = parts ? add_temp(p, n, "sumsq.reduced", TPF_DTYPE_FLOAT, 1, &flat)
				: add_temp(p, n, "sumsq.reduced", TPF_DTYPE_FLOAT, 2, dims);
		if (sum < 0)
			return TPF_ERR_NOMEM;
		if (plan_add_step(p, RT_STEP_ALLREDUCE, n, NULL, TPF_PHASE_MAIN, &part, 1, &sum, 1) < 0)
			return TPF_ERR_NOMEM;
		if (!own) {
			/* another part: first the kernel checks that no rank took
			 * the exchange alone (the ranks' collectives would part
			 * ways), then each input is gathered (rank after rank) and
			 * the part normalized from the gathered values */
			int none = -1;
			if ((st = add_kernel_step(p, b, n, TPF_PHASE_MAIN, &sum, 1, &none, 0, d)))
				return st;
			for (size_t i = 0; i < n_in / 2; i++) {
				int64_t all = p->values[ins[i]].t.numel * (p->opt.world > 0 ? p->opt.world : 1);
				int g = add_temp(p, n, "gathered", p->values[ins[i]].t.dtype, 1, &all);
				if (g < 0)
					return TPF_ERR_NOMEM;
				if (plan_add_step(p, RT_STEP_ALLGATHER, n, NULL, TPF_PHASE_MAIN, &ins[i], 1, &g, 1) < 0)
					return TPF_ERR_NOMEM;
				tmp_ins[i] = g;
			}
			memcpy(tmp_ins + n_in / 2, ins + n_in / 2, (n_in / 2) * sizeof(int));
			tmp_ins[n_in] = sum;
			return add_kernel_step(p, b, n, TPF_PHASE_MAIN, tmp_ins, n_in + 1, outs, n_out, d);
		}
		memcpy(tmp_ins, ins, n_in * sizeof(int));
		tmp_ins[n_in] = sum;
		return add_kernel_step(p, b, n, TPF_PHASE_NORMALIZE, tmp_ins, n_in + 1, outs, n_out, d);
	}
	case TPF_OP_TPF_GATED_ACTIVATION: {
		const struct tpf_node *mm = n->n_inputs == 1 && n->inputs[0] ? n->inputs[0]->producer : NULL;
		int tw = mm ? gated_fold_width(p, mm) : 0;
		return tw ? lower_gated_matmul(p, n, ins, outs, tw, d) : lower_main(p, n, ins, outs, d);
	}
	case TPF_OP_MATMUL: {
		if (fp8_matmul(p, n))
			return lower_fp8_matmul(p, n, outs, d);
		const struct tpf_node *t = bt_transpose(p, n);
		if (!t) {
			int tw = tiled_width(p, n, ins, outs);
			return tw ? lower_tiled_matmul(p, n, ins, outs, tw, d) : lower_main(p, n, ins, outs, d);
		}
		int bt_ins[2] = {ins[0], value_index(p, t->inputs[0])};
		return add_kernel_step(p, b, n, TPF_PHASE_MATMUL_BT, bt_ins, 2, outs, 1, d);
	}
	default:
		return lower_main(p, n, ins, outs, d);
	}
}

/* Runs a node on the host now: its outputs become plan constants. */
static enum tpf_status fold_node(struct tpf_plan *p, const struct tpf_node *n,
				 struct tpf_ktensor *in, struct tpf_ktensor *out, const int *outs,
				 struct tpf_diag *d)
{
	const struct tpf_kernel *k = NULL;
	const struct tpf_kernel *any = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN);
	if (any) {
		enum tpf_dtype key = any->key_input < 0 ? out[0].dtype
				     : (size_t)any->key_input < n->n_inputs ? in[any->key_input].dtype
									    : TPF_DTYPE_UNDEFINED;
		k = tpf_kernel_find(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN, key);
	}
	if (!k)
		return TPF_ERR_UNSUPPORTED; /* not foldable: lowered as a step instead */
	for (size_t i = 0; i < n->n_outputs; i++) {
		if (outs[i] < 0)
			continue;
		struct rt_value *r = &p->values[outs[i]];
		r->host = tpf_calloc(r->t.nbytes ? r->t.nbytes : 1, 1);
		if (!r->host)
			return TPF_ERR_NOMEM;
		r->owns_host = 1;
		out[i].data = r->host;
		out[i].host = r->host;
	}
	struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n->n_inputs,
				    .out = out, .n_out = n->n_outputs, .rank = p->opt.rank,
				    .world = p->opt.world, .diag = d};
	enum tpf_status st = k->run(&c);
	if (st)
		return st;
	for (size_t i = 0; i < n->n_outputs; i++)
		if (outs[i] >= 0)
			p->values[outs[i]].known = 1;
	p->n_folded++;
	return TPF_OK;
}

/* Moves the entries of `from` into `to` (errors that are not about
 * unsupported ops) and clears `from`. */
static void move_diag(struct tpf_diag *from, struct tpf_diag *to)
{
	for (size_t i = 0; from && i < from->count; i++)
		tpf_diag_add(to, from->entries[i].severity, "%s", from->entries[i].text);
	tpf_diag_clear(from);
}

static const char *last_message(const struct tpf_diag *d)
{
	return d && d->count ? d->entries[d->count - 1].text : "";
}

/* Shapes of a node's outputs.  The op's record computes them (integer
 * values known here included); Range of floats and OneHot's float depth
 * are the two shapes that depend on float values, which records do not
 * see: they are computed here from the host copies. */
static enum tpf_status infer_node(const struct tpf_plan *p, const struct tpf_node *n, struct tpf_kernel_call *c,
				  struct tpf_diag *d)
{
	if (n->op == TPF_OP_RANGE && c->n_in == 3 && c->n_out == 1 && !tpf_dtype_is_integral(c->in[0].dtype) &&
	    c->in[0].host && c->in[1].host && c->in[2].host) {
		for (int k = 0; k < 3; k++)
			if (c->in[k].numel != 1 || c->in[k].dtype != c->in[0].dtype)
				return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "start, limit and delta must be scalars of one dtype");
		int64_t len = tpf_range_length(c->in[0].dtype, c->in[0].host, c->in[1].host, c->in[2].host);
		if (len < 0)
			return tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "delta is 0, a bound is not finite or the range is too long");
		c->out[0].dtype = c->in[0].dtype;
		c->out[0].rank = 1;
		c->out[0].dims[0] = len;
		return TPF_OK;
	}
	if (n->op == TPF_OP_ONE_HOT && c->n_in == 3 && c->in[1].host && c->in[1].numel == 1 &&
	    !tpf_dtype_is_integral(c->in[1].dtype)) {
		/* the depth as an int64 scalar (ONNX casts it) */
		struct tpf_ktensor in[3] = {c->in[0], c->in[1], c->in[2]};
		double dv = tpf_elem_load(c->in[1].dtype, c->in[1].host, 0);
		int64_t depth = dv >= 1 && dv < 9.0e18 ? (int64_t)dv : 0;
		in[1].dtype = TPF_DTYPE_INT64;
		in[1].rank = 0;
		in[1].host = in[1].data = &depth;
		tpf_ktensor_finish(&in[1]);
		struct tpf_kernel_call c2 = *c;
		c2.in = in;
		return tpf_rt_infer(n, &c2, d);
	}
	(void)p;
	return tpf_rt_infer(n, c, d);
}

/* Inputs whose host values a kernel reads (not only a shape function):
 * those must stay with the plan even where the output shapes do not
 * change with them. */
static int kernel_reads_host(enum tpf_op op, size_t i)
{
	switch (op) {
	case TPF_OP_SLICE:
	case TPF_OP_SPLIT:
	case TPF_OP_REDUCE_MEAN:
	case TPF_OP_REDUCE_SUM:
	case TPF_OP_REDUCE_MAX:
	case TPF_OP_TOPK:
	case TPF_OP_CUMSUM:
		return i >= 1;
	case TPF_OP_PAD:
		return i == 1 || i == 3; /* pads and axes */
	default:
		return 0;
	}
}

static int same_outputs(const struct tpf_ktensor *a, const struct tpf_ktensor *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (a[i].dtype != b[i].dtype || a[i].rank != b[i].rank)
			return 0;
		for (int k = 0; k < a[i].rank && k < TPF_KERNEL_MAX_RANK; k++)
			if (a[i].dims[k] != b[i].dims[k])
				return 0;
	}
	return 1;
}

/* Marks the hinted inputs (small graph inputs whose values were given to
 * the shape function) whose values this node's shapes or kernel depend
 * on: inference again without each must give the same shapes. */
static enum tpf_status mark_value_deps(struct tpf_plan *p, const struct tpf_node *n, struct tpf_ktensor *in,
				       const int *ins, const struct tpf_ktensor *out)
{
	struct tpf_ktensor *alt = NULL;
	struct tpf_diag *scratch = NULL;
	enum tpf_status st = TPF_OK;
	for (size_t i = 0; i < n->n_inputs; i++) {
		struct rt_value *r = ins[i] >= 0 ? &p->values[ins[i]] : NULL;
		if (!r || !r->host_hint || r->known || r->value_dep)
			continue;
		if (kernel_reads_host(n->op, i)) {
			r->value_dep = 1;
			continue;
		}
		if (!alt && !(alt = tpf_calloc(n->n_outputs + 1, sizeof(*alt)))) {
			st = TPF_ERR_NOMEM;
			break;
		}
		if (!scratch && !(scratch = tpf_diag_create())) {
			st = TPF_ERR_NOMEM;
			break;
		}
		for (size_t o = 0; o < n->n_outputs; o++) {
			memset(&alt[o], 0, sizeof(alt[o]));
			alt[o].rank = -1;
		}
		struct tpf_ktensor saved = in[i];
		in[i].host = NULL;
		in[i].data = NULL;
		struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n->n_inputs, .out = alt,
					    .n_out = n->n_outputs, .rank = p->opt.rank, .world = p->opt.world,
					    .diag = scratch};
		enum tpf_status ist = infer_node(p, n, &c, scratch);
		in[i] = saved;
		tpf_diag_clear(scratch);
		/* omitted outputs keep rank -1 in both */
		if (ist || !same_outputs(alt, out, n->n_outputs))
			r->value_dep = 1;
	}
	tpf_free(alt);
	tpf_diag_free(scratch);
	return st;
}

/* The key operand's dtype of a node whose inputs have no shapes (a node
 * after one the runtime cannot run): the graph's. */
static void check_poisoned_node(struct tpf_plan *p, const struct tpf_node *n, struct tpf_unsupported *u)
{
	enum tpf_kernel_phase ph[2];
	size_t np = node_phases(n, ph);
	for (size_t k = 0; k < np; k++)
		check_kernel(u, p->opt.backend, n, ph[k]);
}

static enum tpf_status lower_graph(struct tpf_plan *p, const struct tpf_node **order, size_t n_order,
				   struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	struct tpf_ktensor *in = NULL, *out = NULL;
	int *ins = NULL, *outs = NULL;
	size_t cap = 0;
	struct tpf_unsupported *u = tpf_unsupported_create();
	struct tpf_diag *scratch = tpf_diag_create();
	if (!u || !scratch) {
		st = TPF_ERR_NOMEM;
		goto out_free;
	}
	for (size_t oi = 0; oi < n_order; oi++) {
		const struct tpf_node *n = order[oi];
		size_t need = (n->n_inputs > n->n_outputs ? n->n_inputs : n->n_outputs) + 2;
		if (need > cap) {
			tpf_free(in);
			tpf_free(out);
			tpf_free(ins);
			tpf_free(outs);
			cap = need * 2;
			in = tpf_calloc(cap, sizeof(*in));
			out = tpf_calloc(cap, sizeof(*out));
			ins = tpf_calloc(cap, sizeof(int));
			outs = tpf_calloc(cap, sizeof(int));
			if (!in || !out || !ins || !outs) {
				st = TPF_ERR_NOMEM;
				goto out_free;
			}
		}
		/* outputs as plan values */
		for (size_t i = 0; i < n->n_outputs; i++) {
			outs[i] = -1;
			if (!n->outputs[i])
				continue;
			outs[i] = plan_add_value(p, n->outputs[i], NULL);
			if (outs[i] < 0) {
				st = TPF_ERR_NOMEM;
				goto out_free;
			}
		}
		int poisoned = 0;
		for (size_t i = 0; i < n->n_inputs; i++) {
			ins[i] = -1;
			if (!n->inputs[i])
				continue;
			ins[i] = value_index(p, n->inputs[i]);
			if (ins[i] < 0) {
				st = tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "input '%s' is not defined", n->inputs[i]->name);
				goto out_free;
			}
			poisoned |= p->values[ins[i]].poisoned;
		}
		if (!runnable_op(n) || poisoned) {
			if (!runnable_op(n)) {
				const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
				int vi = v ? value_index(p, v) : -1;
				enum tpf_dtype dt = vi >= 0 && !p->values[vi].poisoned ? p->values[vi].t.dtype
						    : v ? tpf_value_dtype(v) : TPF_DTYPE_UNDEFINED;
				tpf_unsupported_add(u, n, dt,
						    n->n_implicit && n->op != TPF_OP_UNKNOWN
							    ? "nodes with subgraphs are not supported by the runtime"
							    : "not supported by the runtime");
			} else {
				check_poisoned_node(p, n, u);
			}
			for (size_t i = 0; i < n->n_outputs; i++)
				if (outs[i] >= 0)
					p->values[outs[i]].poisoned = 1;
			continue;
		}
		if (n->op == TPF_OP_CONSTANT) {
			const struct tpf_tensor *t = n->n_outputs ? tpf_value_constant(n->outputs[0]) : NULL;
			if (!t || t->dtype == TPF_DTYPE_STRING || (!t->data && t->nbytes) ||
			    t->rank > TPF_KERNEL_MAX_RANK || outs[0] < 0) {
				tpf_unsupported_add(u, n, t ? t->dtype : TPF_DTYPE_UNDEFINED,
						    "this form of Constant is not supported");
				for (size_t i = 0; i < n->n_outputs; i++)
					if (outs[i] >= 0)
						p->values[outs[i]].poisoned = 1;
				continue;
			}
			struct rt_value *r = &p->values[outs[0]];
			r->t.dtype = t->dtype;
			r->t.rank = t->rank;
			if (t->rank > 0)
				memcpy(r->t.dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
			if (tpf_ktensor_finish(&r->t) || r->t.nbytes != t->nbytes) {
				st = tpf_rt_node_fail(d, n, TPF_ERR_INVALID, "value has %zu bytes for its shape", t->nbytes);
				goto out_free;
			}
			r->known = 1;
			r->host = (void *)t->data;
			/* a 'value' tensor, or the one tpf_value_constant made once
			 * for value_float and the like */
			r->lasting = 1; /* the Constant's tensor is the model's */
			p->n_folded++;
			continue;
		}
		int all_known = 1, bad_type = 0;
		for (size_t i = 0; i < n->n_inputs; i++) {
			if (ins[i] < 0) {
				fill_ktensor(p, -1, &in[i]);
				continue;
			}
			if (p->values[ins[i]].t.dtype == TPF_DTYPE_UNDEFINED) {
				tpf_unsupported_add(u, n, TPF_DTYPE_STRING, "string tensors are not supported");
				bad_type = 1;
				break;
			}
			fill_ktensor(p, ins[i], &in[i]);
			all_known &= p->values[ins[i]].known;
		}
		if (bad_type) {
			for (size_t i = 0; i < n->n_outputs; i++)
				if (outs[i] >= 0)
					p->values[outs[i]].poisoned = 1;
			continue;
		}
		for (size_t i = 0; i < n->n_outputs; i++) {
			memset(&out[i], 0, sizeof(out[i]));
			out[i].rank = -1;
		}
		struct tpf_kernel_call c = {.node = n, .opset = p->opset, .in = in, .n_in = n->n_inputs,
					    .out = out, .n_out = n->n_outputs, .rank = p->opt.rank,
					    .world = p->opt.world, .diag = scratch};
		st = infer_node(p, n, &c, scratch);
		if (st == TPF_ERR_UNSUPPORTED) {
			/* a form or a value-dependent shape the runtime cannot run:
			 * listed with the others, later nodes are checked too */
			const struct tpf_value *v = n->n_inputs ? n->inputs[0] : NULL;
			tpf_unsupported_add(u, n, v && ins[0] >= 0 ? p->values[ins[0]].t.dtype : TPF_DTYPE_UNDEFINED,
					    last_message(scratch));
			tpf_diag_clear(scratch);
			for (size_t i = 0; i < n->n_outputs; i++)
				if (outs[i] >= 0)
					p->values[outs[i]].poisoned = 1;
			st = TPF_OK;
			continue;
		}
		if (st) {
			move_diag(scratch, d);
			goto out_free;
		}
		size_t out_elems = 0;
		for (size_t i = 0; i < n->n_outputs; i++) {
			if (outs[i] < 0)
				continue;
			if (out[i].rank < 0 || out[i].rank > TPF_KERNEL_MAX_RANK || tpf_ktensor_finish(&out[i])) {
				st = tpf_rt_node_fail(d, n, TPF_ERR_LIMIT, "output %zu has no valid shape (overflow or rank)", i);
				goto out_free;
			}
			p->values[outs[i]].t = out[i];
			p->values[outs[i]].t.data = NULL;
			p->values[outs[i]].t.host = NULL;
			out_elems += (size_t)out[i].numel;
		}
		if ((st = mark_value_deps(p, n, in, ins, out)))
			goto out_free;
		if (n->op == TPF_OP_DEQUANTIZE_LINEAR && only_read_by(p, n, read_by_fp8_gemm))
			continue; /* its fp8 GEMMs read the codes */
		if (n->op == TPF_OP_TRANSPOSE && only_read_by(p, n, read_by_bt_gemm))
			continue; /* its products read the input transposed */
		if (n->op == TPF_OP_MATMUL) {
			int gtw = gated_fold_width(p, n);
			if (gtw && packed_weight(p, n, known_index(p, n->inputs[1]), gtw, 1) >= 0)
				continue; /* its GatedActivation runs it (lower_gated_matmul) */
		}
		size_t fold_max = p->opt.fold_max_elements ? p->opt.fold_max_elements : 65536;
		if ((all_known || n->op == TPF_OP_SHAPE || n->op == TPF_OP_SIZE) && !is_collective(n->op) &&
		    out_elems <= fold_max) {
			st = fold_node(p, n, in, out, outs, scratch);
			if (st == TPF_OK)
				continue;
			if (st != TPF_ERR_UNSUPPORTED) {
				move_diag(scratch, d);
				goto out_free;
			}
			tpf_diag_clear(scratch);
			st = TPF_OK;
		}
		st = lower_node(p, n, ins, outs, scratch);
		if (st == TPF_ERR_UNSUPPORTED) {
			/* no kernel: listed; the outputs have shapes, planning goes on */
			enum tpf_kernel_phase ph[2];
			const struct tpf_kernel *any;
			enum tpf_dtype dt = TPF_DTYPE_UNDEFINED;
			if (node_phases(n, ph) && (any = tpf_kernel_find_any(p->opt.backend, n->op, ph[0]))) {
				int k = any->key_input < 0 ? outs[0]
					: (size_t)any->key_input < n->n_inputs ? ins[any->key_input] : -1;
				dt = k >= 0 ? p->values[k].t.dtype : TPF_DTYPE_UNDEFINED;
			} else if (n->n_inputs && ins[0] >= 0) {
				dt = p->values[ins[0]].t.dtype;
			}
			tpf_unsupported_add(u, n, dt, last_message(scratch));
			tpf_diag_clear(scratch);
			st = TPF_OK;
			continue;
		}
		if (st) {
			move_diag(scratch, d);
			goto out_free;
		}
		move_diag(scratch, d); /* notes, if any */
	}
	st = tpf_unsupported_report(u, p->opt.backend, d);
	if (!st) {
		/* hints that no shape or kernel depends on are not plan constants:
		 * kernels never read them (they change from run to run) */
		for (size_t i = 0; i < p->n_values; i++) {
			struct rt_value *r = &p->values[i];
			if (r->host_hint && !r->value_dep)
				r->host_hint = 0;
		}
	}
out_free:
	if (st == TPF_ERR_NOMEM && d && !d->error_count)
		tpf_diag_fail(d, st, "out of memory while building the plan");
	tpf_unsupported_free(u);
	tpf_diag_free(scratch);
	tpf_free(in);
	tpf_free(out);
	tpf_free(ins);
	tpf_free(outs);
	return st;
}

/* ------------------------------------------------------------ memory */

static int cmp_buf_size(const void *a, const void *b, void *ctx)
{
	const struct rt_buffer *bufs = ctx;
	const struct rt_buffer *x = &bufs[*(const int *)a], *y = &bufs[*(const int *)b];
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* insertion sort with a context (qsort_r is not C11) */
static void sort_by_size(int *idx, size_t n, struct rt_buffer *bufs)
{
	for (size_t i = 1; i < n; i++) {
		int v = idx[i];
		size_t j = i;
		while (j > 0 && cmp_buf_size(&idx[j - 1], &v, bufs) > 0) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
}

int tpf_plan_a2a_run(const struct tpf_plan *p, size_t s)
{
	if (s + 2 >= p->n_steps)
		return 0;
	const struct rt_step *pk = &p->steps[s], *a2a = &p->steps[s + 1], *up = &p->steps[s + 2];
	return pk->kind == RT_STEP_KERNEL && pk->node->op == TPF_OP_TPF_PACK && pk->n_out >= 1 &&
	       a2a->kind == RT_STEP_ALLTOALL && a2a->n_in >= 1 && a2a->n_out >= 1 && a2a->ins[0] == pk->outs[0] &&
	       up->kind == RT_STEP_KERNEL && up->node->op == TPF_OP_TPF_UNPACK && up->n_in >= 1 &&
	       up->ins[0] == a2a->outs[0];
}

static enum tpf_status plan_memory(struct tpf_plan *p, struct tpf_diag *d)
{
	size_t align = p->opt.alignment ? p->opt.alignment : 256;
	int last = (int)p->n_steps;
	/* live ranges */
	for (size_t s = 0; s < p->n_steps; s++) {
		const struct rt_step *st = &p->steps[s];
		/* a fused norm's all-reduce input lives through its post-reduce
		 * step: a backend may run both as one kernel (the CUDA one-shot
		 * path), which reads the input while it writes the outputs */
		int upto = (int)s;
		if (st->kind == RT_STEP_ALLREDUCE && s + 1 < p->n_steps && p->steps[s + 1].node == st->node &&
		    p->steps[s + 1].phase == TPF_PHASE_POST_REDUCE)
			upto = (int)s + 1;
		/* likewise a Pack -> AllToAll -> Unpack run, which the session may
		 * run as one grouped exchange from the Pack's inputs straight into
		 * the Unpack's outputs: the inputs live through the Unpack step, so
		 * no piece is received into bytes another piece still sends from */
		if (tpf_plan_a2a_run(p, s))
			upto = (int)s + 2;
		for (size_t i = 0; i < st->n_in; i++)
			if (st->ins[i] >= 0 && p->values[st->ins[i]].last_step < upto)
				p->values[st->ins[i]].last_step = upto;
		for (size_t i = 0; i < st->n_out; i++)
			if (st->outs[i] >= 0 && p->values[st->outs[i]].def_step < 0)
				p->values[st->outs[i]].def_step = (int)s;
	}
	/* a view keeps the buffer it shares alive as long as itself */
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (r->alias < 0)
			continue;
		struct rt_value *root = &p->values[r->alias];
		int end = r->is_output ? last : r->last_step;
		if (end > root->last_step)
			root->last_step = end;
	}
	size_t n_buf = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		struct rt_value *r = &p->values[i];
		if (r->known) {
			/* what goes to the device: the constants a step reads (not
			 * a weight only its packed or transposed copy is read for) */
			if (r->last_step >= 0)
				p->constant_bytes += r->t.nbytes;
			continue;
		}
		if (r->alias >= 0)
			continue; /* placed with the value it views */
		if (!r->is_input && r->def_step < 0)
			continue; /* never produced by a step (an omitted or folded output) */
		if (r->is_output)
			r->last_step = last;
		if (r->last_step < r->def_step)
			r->last_step = r->def_step;
		n_buf++;
	}
	p->buffers = tpf_calloc(n_buf + 1, sizeof(*p->buffers));
	int *idx = tpf_calloc(n_buf + 1, sizeof(int));
	if (!p->buffers || !idx) {
		tpf_free(idx);
		return TPF_ERR_NOMEM;
	}
	size_t b = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		struct rt_value *r = &p->values[i];
		if (r->known || r->alias >= 0 || (!r->is_input && r->def_step < 0))
			continue;
		size_t sz = r->t.nbytes;
		if (sz % align && tpf_add_size(sz, align - sz % align, &sz)) {
			tpf_free(idx);
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "buffer of '%s' too large", r->name);
		}
		if (sz == 0)
			sz = align;
		p->buffers[b].size = sz;
		p->buffers[b].first = r->is_input ? -1 : r->def_step;
		p->buffers[b].last = r->last_step;
		p->buffers[b].value = (int)i;
		r->buffer = (int)b;
		if (tpf_add_size(p->unshared_bytes, sz, &p->unshared_bytes)) {
			tpf_free(idx);
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "arena size overflows");
		}
		idx[b] = (int)b;
		b++;
	}
	p->n_buffers = n_buf;
	sort_by_size(idx, n_buf, p->buffers);
	/* greedy by size: lowest offset that does not collide with a placed
	 * buffer whose live range overlaps */
	int *placed = tpf_calloc(n_buf + 1, sizeof(int));
	if (!placed) {
		tpf_free(idx);
		return TPF_ERR_NOMEM;
	}
	size_t n_placed = 0;
	for (size_t k = 0; k < n_buf; k++) {
		struct rt_buffer *x = &p->buffers[idx[k]];
		size_t off = 0;
		int moved = 1;
		while (moved) {
			moved = 0;
			for (size_t j = 0; j < n_placed; j++) {
				const struct rt_buffer *y = &p->buffers[placed[j]];
				if (y->last < x->first || x->last < y->first)
					continue;
				if (off < y->offset + y->size && y->offset < off + x->size) {
					off = y->offset + y->size;
					moved = 1;
				}
			}
		}
		x->offset = off;
		placed[n_placed++] = idx[k];
		if (off + x->size > p->arena_bytes)
			p->arena_bytes = off + x->size;
	}
	tpf_free(placed);
	tpf_free(idx);
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].alias >= 0)
			p->values[i].buffer = p->values[p->values[i].alias].buffer;
	return TPF_OK;
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
	if ((st = lower_graph(p, order, n_order, d)))
		goto out_fail;
	p->n_outputs = p->graph->n_outputs;
	p->outputs = tpf_calloc(p->n_outputs + 1, sizeof(int));
	if (!p->outputs) {
		st = TPF_ERR_NOMEM;
		goto out_fail;
	}
	for (size_t i = 0; i < p->n_outputs; i++) {
		int v = value_index(p, p->graph->outputs[i]);
		if (v < 0) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "graph output '%s' is never computed",
					   p->graph->outputs[i]->name);
			goto out_fail;
		}
		p->outputs[i] = v;
		p->values[v].is_output = 1;
	}
	if ((st = plan_memory(p, d)))
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

/* ------------------------------------------------------------ printing */

static void print_type(FILE *f, const struct tpf_ktensor *t)
{
	fprintf(f, "%s[", tpf_dtype_name(t->dtype));
	for (int i = 0; i < t->rank; i++)
		fprintf(f, "%s%lld", i ? "," : "", (long long)t->dims[i]);
	fprintf(f, "]");
}

static void print_operand(FILE *f, const struct tpf_plan *p, int idx)
{
	if (idx < 0) {
		fprintf(f, "-");
		return;
	}
	const struct rt_value *r = &p->values[idx];
	fprintf(f, "%s:", r->name);
	print_type(f, &r->t);
	if (r->known)
		fprintf(f, "@const");
	else if (r->buffer >= 0)
		fprintf(f, "@b%d", r->buffer);
}

static const char *step_kind_name(enum rt_step_kind k)
{
	static const char *const names[RT_STEP_KIND_COUNT] = {"kernel", "allreduce", "allgather",
							       "alltoall"};
	return (unsigned)k < RT_STEP_KIND_COUNT ? names[k] : "?";
}

enum tpf_status tpf_plan_print(const struct tpf_plan *p, FILE *f)
{
	struct tpf_plan_stats s;
	char who[256];
	tpf_plan_get_stats(p, &s);
	fprintf(f, "plan: backend %s, rank %d of %d, %zu steps (%zu kernels, %zu collectives), "
		   "%zu nodes folded on the host, %zu views\n",
		tpf_backend_name(p->opt.backend), p->opt.rank, p->opt.world, s.n_steps, s.n_kernel_steps,
		s.n_collective_steps, s.n_folded, s.n_views);
	fprintf(f, "inputs:\n");
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->is_input)
			continue;
		fprintf(f, "  ");
		print_operand(f, p, (int)i);
		fprintf(f, "\n");
	}
	fprintf(f, "schedule:\n");
	for (size_t i = 0; i < p->n_steps; i++) {
		const struct rt_step *st = &p->steps[i];
		fprintf(f, "  #%-4zu %-9s %-32s %s", i, step_kind_name(st->kind),
			st->kernel ? st->kernel->name : "comm", tpf_node_describe(st->node, who, sizeof(who)));
		if (st->phase)
			fprintf(f, " [%s]", tpf_kernel_phase_name(st->phase));
		fprintf(f, "\n         (");
		for (size_t k = 0; k < st->n_in; k++) {
			fprintf(f, "%s", k ? ", " : "");
			print_operand(f, p, st->ins[k]);
		}
		fprintf(f, ") -> (");
		for (size_t k = 0; k < st->n_out; k++) {
			fprintf(f, "%s", k ? ", " : "");
			print_operand(f, p, st->outs[k]);
		}
		fprintf(f, ")\n");
	}
	fprintf(f, "outputs:\n");
	for (size_t i = 0; i < p->n_outputs; i++) {
		fprintf(f, "  ");
		print_operand(f, p, p->outputs[i]);
		fprintf(f, "\n");
	}
	fprintf(f, "buffers:\n");
	for (size_t i = 0; i < p->n_buffers; i++) {
		const struct rt_buffer *b = &p->buffers[i];
		fprintf(f, "  b%-4zu offset %10zu size %10zu live [%d, %d] %s\n", i, b->offset, b->size,
			b->first, b->last, p->values[b->value].name);
	}
	fprintf(f, "memory: arena peak %zu bytes (%zu without reuse, %zu buffers), constants %zu bytes\n",
		s.arena_bytes, s.unshared_bytes, s.n_buffers, s.constant_bytes);
	return ferror(f) ? TPF_ERR_IO : TPF_OK;
}
