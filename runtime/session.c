/* SPDX-License-Identifier: MIT */
/* Sessions: a model bound to a backend device and a communicator; each run
 * (re)builds the plan when input shapes change, uploads the inputs, runs
 * the steps and downloads the outputs.  The state is session-internal.h's;
 * the collectives a plan's steps go through are chosen in
 * session-collectives.c, the CPU device is session-cpu.c's. */
#include "session-internal.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ sessions */

void tpf_rt_session_unbind(struct tpf_session *s)
{
	struct tpf_plan *p = s->b->plan;
	if (!p)
		return;
	/* the plan's own constants (folded values, a Constant's scalar): the
	 * store keeps the rest */
	if (s->b->const_dev && s->dev_consts) {
		for (size_t i = 0; i < p->n_values; i++)
			if (s->b->const_dev[i] && !p->values[i].lasting)
				s->dev->free(s->dev, s->b->const_dev[i]);
	}
	/* either array may be missing: its allocation failed */
	for (size_t i = 0; i < p->n_steps; i++) {
		if (s->b->kin)
			tpf_free(s->b->kin[i]);
		if (s->b->kout)
			tpf_free(s->b->kout[i]);
	}
	for (size_t i = 0; i < s->b->n_outs; i++)
		tpf_free(s->b->outs[i].data);
	tpf_free(s->b->const_dev);
	tpf_free(s->b->kin);
	tpf_free(s->b->kout);
	tpf_free(s->b->oneshot);
	tpf_free(s->b->a2a_direct);
	s->b->a2a_direct = NULL;
	s->b->n_a2a_direct = 0;
	tpf_free(s->b->prof_ms);
	tpf_free(s->b->prof_marked);
	tpf_free(s->b->outs);
	tpf_free(s->b->dep_names);
	tpf_free(s->b->dep_len);
	tpf_free(s->b->dep_bytes);
	tpf_free(s->b->kept_of);
	/* this plan's graph (its own constants and one-shot choice go) */
#ifdef TPF_HAVE_CUDA
	tpf_cuda_device_drop_graph_key(s->dev, p->shape_hash);
#endif
	tpf_plan_free(p);
	memset(s->b, 0, sizeof(*s->b));
}

static int profiling(const struct tpf_session *s)
{
	return s->opt.profile && !s->opt.cuda_graph && s->dev->mark && s->dev->elapsed_ms;
}

static void *value_data(struct tpf_session *s, int idx)
{
	const struct rt_value *r = &s->b->plan->values[idx];
	if (r->known)
		return s->b->const_dev[idx];
	void *kept = tpf_rt_kept_data(s, idx);
	if (kept)
		return kept;
	if (r->buffer < 0)
		return NULL;
	return (char *)s->arena + s->b->plan->buffers[r->buffer].offset + r->alias_off;
}

/* No step of a run writes value idx: it was known when the plan was built,
 * or it is a graph input, or a view of either that no step writes (an
 * input updated in place is not) (tpf_ktensor.invariant). */
static int value_invariant(const struct tpf_plan *p, int idx)
{
	const struct rt_value *r = &p->values[idx];
	if (r->alias >= 0)
		r = &p->values[r->alias];
	return r->known || (r->is_input && !r->written);
}

const struct tpf_ktensor *tpf_session_bound_input(const struct tpf_session *s, const char *node, size_t input)
{
	const struct tpf_plan *p = s ? s->b->plan : NULL;
	if (!p || !s->b->kin || !node)
		return NULL;
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		if (st->node && st->node->name && !strcmp(st->node->name, node) && input < st->n_in)
			return s->b->kin[k] ? &s->b->kin[k][input] : NULL;
	}
	return NULL;
}
/* Points the current slot's operands into the session's arena (after the
 * arena moved: another plan needed a larger one). */
static void attach(struct tpf_session *s)
{
	struct tpf_plan *p = s->b->plan;
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		for (size_t i = 0; i < st->n_in; i++)
			if (st->ins[i] >= 0)
				s->b->kin[k][i].data = value_data(s, st->ins[i]);
		for (size_t i = 0; i < st->n_out; i++)
			if (st->outs[i] >= 0)
				s->b->kout[k][i].data = value_data(s, st->outs[i]);
	}
	s->b->arena = s->arena;
}

/* The workspace the plan's kernels ask for (the largest answer), grown when
 * this plan needs more than the session has.  A CUDA graph captured with
 * the old workspace is dropped with it. */
static enum tpf_status bind_workspace(struct tpf_session *s, struct tpf_diag *d)
{
	struct tpf_plan *p = s->b->plan;
	size_t need = 0;
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		if (st->kind != RT_STEP_KERNEL || !st->kernel->workspace)
			continue;
		struct tpf_kernel_call call;
		tpf_rt_session_call(s, k, &call, NULL);
		size_t n = st->kernel->workspace(&call);
		need = n > need ? n : need;
	}
	if (need <= s->ws_cap)
		return TPF_OK;
	enum tpf_status st = tpf_memory_check(s->dev->kind, need - s->ws_cap, "the kernels' workspace", d);
	if (st)
		return st;
	tpf_rt_drop_graphs(s);
	if (s->ws)
		s->dev->free(s->dev, s->ws);
	s->ws = s->dev->alloc(s->dev, need);
	s->ws_cap = s->ws ? need : 0;
	if (!s->ws)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate %zu bytes of kernel workspace on %s", need,
				     tpf_backend_name(s->dev->kind));
	return TPF_OK;
}

/* Device memory for the plan, operand arrays, output host buffers. */
static enum tpf_status bind(struct tpf_session *s, struct tpf_diag *d)
{
	struct tpf_plan *p = s->b->plan;
	enum tpf_status st;
	size_t upload = 0, need = 0;
	unsigned char *read = tpf_calloc(p->n_values + 1, 1);
	if (!read)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	for (size_t k = 0; k < p->n_steps; k++)
		for (size_t i = 0; i < p->steps[k].n_in; i++)
			if (p->steps[k].ins[i] >= 0)
				read[p->steps[k].ins[i]] = 1;
	for (size_t i = 0; s->dev_consts && i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (r->known && read[i] && (!r->lasting || !tpf_const_store_on_device(s->consts, r->host, r->t.nbytes)) &&
		    tpf_add_size(upload, r->t.nbytes, &upload))
			upload = SIZE_MAX;
	}
	/* a larger arena replaces the old one, which is given back first */
	if (p->arena_bytes > s->arena_cap || !s->arena)
		need = p->arena_bytes - (s->arena ? s->arena_cap : 0);
	if (tpf_add_size(need, upload, &need))
		need = SIZE_MAX;
	if (need && (st = tpf_memory_check(s->dev->kind, need, "the plan's buffers and constants", d))) {
		tpf_free(read);
		tpf_diag_add(d, TPF_SEV_NOTE, "the arena holds %zu buffers in %zu bytes at its peak (%zu without reuse)",
			     p->n_buffers, p->arena_bytes, p->unshared_bytes);
		return st;
	}
	if (p->arena_bytes > s->arena_cap || !s->arena) {
		/* every plan's graph points into the old arena */
		tpf_rt_drop_graphs(s);
		if (s->arena)
			s->dev->free(s->dev, s->arena);
		s->arena = s->dev->alloc(s->dev, p->arena_bytes ? p->arena_bytes : 64);
		s->arena_cap = s->arena ? p->arena_bytes : 0;
		if (!s->arena) {
			tpf_free(read);
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate a %zu-byte arena on %s",
					     p->arena_bytes, tpf_backend_name(s->dev->kind));
		}
	}
	s->b->arena = s->arena;
	int moved;
	if ((st = tpf_rt_kept_bind(s, &moved, d))) {
		tpf_free(read);
		return st;
	}
	s->b->const_dev = tpf_calloc(p->n_values + 1, sizeof(void *));
	s->b->kin = tpf_calloc(p->n_steps + 1, sizeof(*s->b->kin));
	s->b->kout = tpf_calloc(p->n_steps + 1, sizeof(*s->b->kout));
	s->b->outs = tpf_calloc(p->n_outputs + 1, sizeof(*s->b->outs));
	if (!s->b->const_dev || !s->b->kin || !s->b->kout || !s->b->outs) {
		tpf_free(read);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	if (profiling(s)) {
		s->b->prof_ms = tpf_calloc(p->n_steps + 1, sizeof(double));
		s->b->prof_marked = tpf_calloc(p->n_steps + 1, 1);
		if (!s->b->prof_ms || !s->b->prof_marked) {
			tpf_free(read);
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		}
	}
	/* constants go to the device only when a step reads them (an fp8 GEMM
	 * reads the transposed weight, not the initializer); the model's bytes
	 * and the store's copies once per session, folded values per plan */
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->known)
			continue;
		if (!s->dev_consts) {
			s->b->const_dev[i] = r->host;
			continue;
		}
		if (!read[i])
			continue;
		if (r->lasting) {
			st = tpf_const_store_device(s->consts, s->dev, r->host, r->t.nbytes, r->name, &s->b->const_dev[i],
						    d);
		} else {
			s->b->const_dev[i] = s->dev->alloc(s->dev, r->t.nbytes ? r->t.nbytes : 1);
			st = s->b->const_dev[i]
				     ? s->dev->upload(s->dev, s->b->const_dev[i], r->host, r->t.nbytes, d)
				     : tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate constant '%s'", r->name);
		}
		if (st) {
			tpf_free(read);
			return st;
		}
	}
	tpf_free(read);
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		s->b->kin[k] = tpf_calloc(st->n_in + 1, sizeof(struct tpf_ktensor));
		s->b->kout[k] = tpf_calloc(st->n_out + 1, sizeof(struct tpf_ktensor));
		if (!s->b->kin[k] || !s->b->kout[k])
			return TPF_ERR_NOMEM;
		for (size_t i = 0; i < st->n_in; i++) {
			struct tpf_ktensor *t = &s->b->kin[k][i];
			if (st->ins[i] < 0) {
				t->rank = -1;
				continue;
			}
			*t = p->values[st->ins[i]].t;
			t->data = value_data(s, st->ins[i]);
			t->host = p->values[st->ins[i]].known || p->values[st->ins[i]].host_hint
					  ? p->values[st->ins[i]].host
					  : NULL;
			t->invariant = value_invariant(p, st->ins[i]);
		}
		for (size_t i = 0; i < st->n_out; i++) {
			struct tpf_ktensor *t = &s->b->kout[k][i];
			if (st->outs[i] < 0) {
				t->rank = -1;
				continue;
			}
			*t = p->values[st->outs[i]].t;
			t->data = value_data(s, st->outs[i]);
		}
	}
	if ((st = bind_workspace(s, d)))
		return st;
	s->b->n_outs = p->n_outputs;
	for (size_t i = 0; i < p->n_outputs; i++) {
		const struct rt_value *r = &p->values[p->outputs[i]];
		struct tpf_host_tensor *o = &s->b->outs[i];
		o->name = p->graph->outputs[i]->name;
		o->dtype = r->t.dtype;
		o->rank = r->t.rank;
		if (r->t.rank > 0)
			memcpy(o->dims, r->t.dims, sizeof(int64_t) * (size_t)r->t.rank);
		o->nbytes = r->t.nbytes;
		if (tpf_rt_kept_data(s, p->outputs[i]))
			continue; /* a kept input updated in place: not copied back */
		o->data = tpf_malloc(r->t.nbytes ? r->t.nbytes : 1);
		if (!o->data)
			return TPF_ERR_NOMEM;
	}
	return TPF_OK;
}

static enum tpf_status check_model_world(const struct tpf_model *m, const struct tpf_comm *c,
					 struct tpf_diag *d)
{
	const char *w = tpf_model_metadata(m, "tp_world_size");
	const char *r = tpf_model_metadata(m, "tp_rank");
	if (w) {
		char *end;
		long v = strtol(w, &end, 10);
		if (*w && !*end && v != c->world)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "the model was made for world size %ld (metadata tp_world_size) "
					     "but runs with %d rank%s",
					     v, c->world, c->world == 1 ? "" : "s");
	}
	if (r && c->world > 1) {
		char *end;
		long v = strtol(r, &end, 10);
		if (*r && !*end && v != c->rank)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "the model is rank %ld's shard (metadata tp_rank) but runs as rank %d",
					     v, c->rank);
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ start-up exchange
 *
 * Every rank of a session's communicator reaches one exchange when the
 * session is created, whatever failed before it on that rank: its status
 * and first error message, the structural hash of its graph and, for
 * models loaded from per-rank files (check_rank_files), a digest of its
 * weights and whether it carries tp_rank metadata.  So a local error (a
 * malformed tuning variable, another rank's shard, a table that does not
 * load) stops every rank at once with the failing rank's own message,
 * instead of one rank waiting in a collective the other never joins. */

enum {
	REPORT_TEXT = 200,
	REPORT_HASHED = 1,    /* structure (and weights) hold this rank's hashes */
	REPORT_RANK_META = 2, /* its model names its rank (tp_rank) */
	REPORT_FILES = 4,     /* check_rank_files */
	REPORT_WEIGHTS = 8,   /* weights holds a digest of its weight matrices */
};

struct rank_report {
	int32_t status; /* this rank's error before the exchange (0: none) */
	int32_t flags;
	uint64_t structure;
	uint64_t weights;
	char text[REPORT_TEXT]; /* its first error message */
};

/* A hash of n bytes eight at a time (the weights' full digest). */
static uint64_t hash_words(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ w) * UINT64_C(0x100000001b3);
		h ^= h >> 29;
	}
	for (; n; n--, p++)
		h = (h ^ *p) * UINT64_C(0x100000001b3);
	return h;
}

/* One tensor into h: type, shape and bytes; with `sampled`, a tensor of
 * more than 64 KiB by its first and last 4 KiB and 32 slices of 1 KiB
 * spread over the rest. */
static uint64_t hash_tensor(uint64_t h, const struct tpf_tensor *t, int sampled)
{
	int64_t head[3] = {t->dtype, t->rank, (int64_t)t->nbytes};
	h = hash_words(h, head, sizeof(head));
	if (t->rank > 0 && t->dims)
		h = hash_words(h, t->dims, sizeof(int64_t) * (size_t)t->rank);
	for (size_t i = 0; t->strings && i < t->n_strings; i++)
		h = hash_words(h, t->strings[i], t->string_lens ? t->string_lens[i] : 0);
	if (!t->data)
		return h;
	const unsigned char *p = t->data;
	const size_t n = t->nbytes, edge = 4096, slice = 1024, slices = 32;
	if (!sampled || n <= 65536)
		return hash_words(h, p, n);
	h = hash_words(h, p, edge);
	h = hash_words(h, p + n - edge, edge);
	for (size_t k = 0; k < slices; k++) {
		size_t at = edge + (n - 2 * edge - slice) / (slices - 1) * k;
		h = hash_words(h, p + at, slice);
	}
	return h;
}

/* The weight matrices of the top-level graph: its initializers and the
 * tensors of its Constant nodes of two dims or more, what tensor
 * parallelism splits (vectors, such as a norm's gamma or a shape, are
 * often the same on every rank), in graph order.  count, bytes: how many
 * and their size. */
static uint64_t weights_digest(const struct tpf_graph *g, int sampled, size_t *count,
			       uint64_t *bytes)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	*count = 0;
	*bytes = 0;
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_tensor *t = g->initializers[i] ? g->initializers[i]->init : NULL;
		if (t && t->rank >= 2) {
			h = hash_tensor(h, t, sampled);
			++*count;
			*bytes += t->nbytes;
		}
	}
	for (const struct tpf_node *n = g->first; n; n = n->next)
		for (size_t i = 0; i < n->n_attrs; i++) {
			const struct tpf_attr *a = &n->attrs[i];
			const struct tpf_tensor *t = a->kind == TPF_ATTR_TENSOR ? a->t : NULL;
			if (t && t->rank >= 2) {
				h = hash_tensor(h, t, sampled);
				++*count;
				*bytes += t->nbytes;
			}
		}
	return h;
}

static int graph_has_collectives(const struct tpf_graph *g)
{
	for (const struct tpf_node *n = g->first; n; n = n->next)
		if (tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE))
			return 1;
	return 0;
}

/* The first error added to d since entry `mark`, else the status's name. */
static void first_error(const struct tpf_diag *d, size_t mark, enum tpf_status st, char *out,
			size_t size)
{
	for (size_t i = mark; d && i < d->count; i++)
		if (d->entries[i].severity == TPF_SEV_ERROR && d->entries[i].text) {
			snprintf(out, size, "%s", d->entries[i].text);
			return;
		}
	snprintf(out, size, "%s", tpf_status_name(st));
}

/* Pairs of ranks with the same weights among those whose digests say so
 * (twin[r]: the lowest rank with r's digest, else r): confirmed with a
 * digest of every byte, which every rank computes when some pair exists. */
/* Ranks q and r hold the same weights as far as their reports say. */
static int twins(const struct rank_report *all, int q, int r)
{
	return !(all[r].flags & REPORT_RANK_META) && !(all[q].flags & REPORT_RANK_META) &&
	       all[r].weights == all[q].weights;
}

static enum tpf_status refuse_twins(struct tpf_comm *c, const struct tpf_model *m,
				    const struct rank_report *all, struct tpf_diag *d)
{
	int world = c->world, pairs = 0;
	for (int r = 0; r < world; r++)
		for (int q = 0; q < r; q++)
			pairs += twins(all, q, r);
	if (!pairs)
		return TPF_OK;
	size_t count;
	uint64_t bytes;
	uint64_t mine = weights_digest(m->graph, 0, &count, &bytes);
	uint64_t stack_full[8], *full = stack_full;
	if (world > 8 && !(full = tpf_calloc((size_t)world, sizeof(uint64_t))))
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	/* every rank is here: the pairs come from the same exchanged reports */
	enum tpf_status st = c->ops->allgather(c, &mine, full, sizeof(mine), NULL, d);
	char list[256];
	size_t at = 0;
	int shown = 0;
	list[0] = 0;
	for (int r = 0; r < world && !st; r++)
		for (int q = 0; q < r; q++)
			if (twins(all, q, r) && full[r] == full[q]) {
				if (shown++ < 4 && at < sizeof(list) - 32)
					at += (size_t)snprintf(list + at, sizeof(list) - at,
							       "%sranks %d and %d", shown > 1 ? ", " : "",
							       q, r);
				break;
			}
	if (full != stack_full)
		tpf_free(full);
	if (st || !shown)
		return st;
	return tpf_diag_fail(d, TPF_ERR_INVALID,
			     "%s%s loaded byte-identical weights (%zu weight matrices, %.1f MiB) into "
			     "a model with collectives and no tp_rank metadata: tensor-parallel ranks "
			     "hold different shards, so one rank's file was given to several ranks "
			     "(give each rank its own shard; ranks that hold the same weights on "
			     "purpose need a file each, with its tp_rank)",
			     list, shown > 4 ? " and more" : "", count,
			     (double)bytes / (1024.0 * 1024.0));
}

/* The exchange itself: st is this rank's status so far; returns the
 * session's (every rank fails alike when any rank failed or the
 * structures differ). */
static enum tpf_status startup_exchange(struct tpf_comm *c, const struct tpf_model *m,
					int check_files, enum tpf_status st, size_t mark,
					struct tpf_diag *d)
{
	struct rank_report mine, stack_reports[8], *all = stack_reports;
	const int world = c->world;
	memset(&mine, 0, sizeof(mine));
	mine.status = (int32_t)st;
	if (st) {
		first_error(d, mark, st, mine.text, sizeof(mine.text));
	} else {
		mine.flags = REPORT_HASHED;
		mine.structure = tpf_graph_structure_hash(m->graph);
		if (tpf_model_metadata(m, "tp_rank"))
			mine.flags |= REPORT_RANK_META;
		if (check_files) {
			size_t count;
			uint64_t bytes;
			mine.weights = weights_digest(m->graph, 1, &count, &bytes);
			/* without a matrix there is nothing a rank's shard holds */
			mine.flags |= REPORT_FILES | (count ? REPORT_WEIGHTS : 0);
		}
	}
	if (world > 8 && !(all = tpf_calloc((size_t)world, sizeof(*all))))
		return st ? st : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status cst = c->ops->allgather(c, &mine, all, sizeof(mine), NULL, d);
	if (cst || st) {
		st = st ? st : cst;
		goto out;
	}
	/* 1. a rank failed before the checks: its own message, on every rank */
	int failed = 0;
	for (int r = 0; r < world; r++)
		if (all[r].status) {
			all[r].text[REPORT_TEXT - 1] = 0;
			if (failed++ < 4)
				tpf_diag_add(d, TPF_SEV_ERROR,
					     "rank %d failed while creating its session: %s", r,
					     all[r].text);
		}
	if (failed) {
		if (failed > 4)
			tpf_diag_add(d, TPF_SEV_ERROR, "(%d ranks failed; the first 4 are named)",
				     failed);
		st = TPF_ERR_RUNTIME;
		goto out;
	}
	/* 2. one graph structure */
	int differ = 0;
	for (int r = 1; r < world; r++)
		differ |= all[r].structure != all[0].structure;
	if (differ) {
		char buf[512];
		size_t at = 0;
		for (int r = 0; r < world && at < sizeof(buf) - 48; r++)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%srank %d: %016" PRIx64,
					       r ? ", " : "", r, all[r].structure);
		st = tpf_diag_fail(d, TPF_ERR_INVALID,
				   "ranks disagree on the graph structure (ops, attributes, wiring, "
				   "weight shapes) (%s); every rank must run the same structure with "
				   "the same input shapes",
				   buf);
		goto out;
	}
	/* 3. the rank files: their weights, and whether their order is known */
	int files = 1, weights = 1, unnamed = 0;
	for (int r = 0; r < world; r++) {
		files &= (all[r].flags & REPORT_FILES) != 0;
		weights &= (all[r].flags & REPORT_WEIGHTS) != 0;
		unnamed |= !(all[r].flags & REPORT_RANK_META);
	}
	if (files && graph_has_collectives(m->graph)) {
		if (weights && (st = refuse_twins(c, m, all, d)))
			goto out;
		if (unnamed && c->rank == 0)
			tpf_diag_add(d, TPF_SEV_WARNING,
				     "the rank models carry no tp_rank metadata: which rank's shard "
				     "each rank loaded is not checked (rank r must be given rank r's "
				     "file; `tpfuse shard` writes the metadata)");
	}
out:
	if (all != stack_reports)
		tpf_free(all);
	return st;
}

/* What a session needs before the ranks compare notes: its communicator,
 * device, constant store and strategy table, and the model's world size
 * and rank checked against the communicator. */
static enum tpf_status session_setup(struct tpf_session *s, const struct tpf_model *m,
				     struct tpf_diag *d)
{
	enum tpf_status st;
	if (s->opt.comm) {
		s->comm = s->opt.comm;
	} else {
		if ((st = tpf_comm_create_self(NULL, &s->comm, d)))
			return st;
		s->owns_comm = 1;
	}
	if ((st = tpf_device_create(s->opt.backend, s->comm->local_rank, &s->dev, d)))
		return st;
	s->consts = tpf_const_store_create();
	if (!s->consts)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	s->dev_consts = s->dev->kind != TPF_BACKEND_CPU || tpf_env_switch("TPF_CPU_COPY_CONSTANTS", 0);
	s->strategy = s->opt.strategy;
	if (!s->strategy) {
		const char *tab = tpf_env_text("TPF_STRATEGY_TABLE");
		if (tab) {
			if ((st = tpf_strategy_load(tab, &s->strategy_owned, d))) {
				tpf_diag_add(d, TPF_SEV_ERROR, "(the file TPF_STRATEGY_TABLE names)");
				return st;
			}
			s->strategy = s->strategy_owned;
		} else {
			s->strategy = tpf_strategy_builtin_for(s->dev->model);
		}
	}
	return check_model_world(m, s->comm, d);
}

enum tpf_status tpf_session_create(const struct tpf_model *m, const struct tpf_session_options *o,
				   struct tpf_session **out, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	struct tpf_session *s = NULL;
	struct tpf_comm *comm = o ? o->comm : NULL;
	const size_t mark = d ? d->count : 0;
	*out = NULL;
	/* a failure here still joins the ranks' exchange below */
	if (!m || !m->graph)
		st = tpf_diag_fail(d, TPF_ERR_INVALID, "session: no model");
	if (!st)
		st = tpf_env_check(d);
	if (!st && !(s = tpf_calloc(1, sizeof(*s))))
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	if (!st) {
		s->model = m;
		s->b = &s->slots[0];
		if (o)
			s->opt = *o;
		st = session_setup(s, m, d);
	}
	if (comm && comm->world > 1 && !(o && o->no_structure_check))
		st = startup_exchange(comm, m, o->check_rank_files, st, mark, d);
	if (st)
		goto out_fail;
	/* every op the backend cannot run, named now: before any input is read
	 * (the ranks have one structure, so all of them refuse alike) */
	if ((st = tpf_plan_check_model(m, s->opt.backend, d)))
		goto out_fail;
	*out = s;
	return TPF_OK;
out_fail:
	tpf_session_free(s);
	return st;
}

void tpf_session_free(struct tpf_session *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < TPF_SESSION_PLANS; i++) {
		s->b = &s->slots[i];
		tpf_rt_session_unbind(s);
	}
	tpf_rt_kept_free(s);
	tpf_const_store_free(s->consts, s->dev);
#ifdef TPF_HAVE_CUDA
	tpf_rt_oneshot_free(s);
#endif
	if (s->arena)
		s->dev->free(s->dev, s->arena);
	if (s->ws)
		s->dev->free(s->dev, s->ws);
	tpf_device_free(s->dev);
	if (s->owns_comm)
		tpf_comm_free(s->comm);
	tpf_strategy_free(s->strategy_owned);
	tpf_free(s);
}

void tpf_session_graph_stats(const struct tpf_session *s, unsigned long *captures, unsigned long *replays)
{
	unsigned long c = 0, r = 0, e = 0;
#ifdef TPF_HAVE_CUDA
	tpf_cuda_device_graph_stats(s->dev, &c, &r, &e);
#endif
	(void)s;
	(void)e;
	if (captures)
		*captures = c;
	if (replays)
		*replays = r;
}

size_t tpf_session_device_bytes(const struct tpf_session *s)
{
	size_t n = s->arena_cap + s->ws_cap + tpf_session_kept_bytes(s);
	return n + (s->dev_consts ? tpf_const_store_device_bytes(s->consts) : 0);
}

int tpf_session_world(const struct tpf_session *s)
{
	return s->comm->world;
}

const struct tpf_plan *tpf_session_plan(const struct tpf_session *s)
{
	return s->b->plan;
}

void tpf_session_constant_bytes(const struct tpf_session *s, size_t *device, size_t *derived)
{
	if (device)
		*device = tpf_const_store_device_bytes(s->consts);
	if (derived)
		*derived = tpf_const_store_host_bytes(s->consts);
}

size_t tpf_session_plan_count(const struct tpf_session *s, size_t *builds)
{
	size_t n = 0;
	for (size_t i = 0; i < TPF_SESSION_PLANS; i++)
		n += s->slots[i].plan != NULL;
	if (builds)
		*builds = (size_t)s->builds;
	return n;
}

void tpf_rt_session_call(struct tpf_session *s, size_t k, struct tpf_kernel_call *call,
			 struct tpf_diag *d)
{
	const struct rt_step *st = &s->b->plan->steps[k];
	*call = (struct tpf_kernel_call){.node = st->node, .opset = s->b->plan->opset, .in = s->b->kin[k],
					 .n_in = st->n_in, .out = s->b->kout[k], .n_out = st->n_out,
					 .workspace = s->ws, .workspace_bytes = s->ws_cap,
					 .stream = s->dev->stream, .rank = s->comm->rank,
					 .world = s->comm->world, .diag = d};
}

static enum tpf_status run_step(struct tpf_session *s, size_t k, struct tpf_diag *d)
{
	const struct tpf_plan *p = s->b->plan;
	const struct rt_step *st = &p->steps[k];
	struct tpf_ktensor *in = s->b->kin[k], *out = s->b->kout[k];
	struct tpf_comm *c = s->comm;
	enum tpf_status rc;
	char who[256];
	switch (st->kind) {
	case RT_STEP_KERNEL: {
		struct tpf_kernel_call call;
		tpf_rt_session_call(s, k, &call, d);
		return st->kernel->run(&call);
	}
	default:
		break;
	}
	if (c->world == 1 && s->dev->kind != TPF_BACKEND_CPU) {
		/* one rank on a device: every collective is a copy, made on the
		 * device by the backend's copy kernel (the one-rank communicator
		 * copies host memory) */
		const struct tpf_kernel *cp = tpf_kernel_find(s->dev->kind, TPF_OP_IDENTITY, TPF_PHASE_MAIN, in[0].dtype);
		struct tpf_kernel_call call = {.node = st->node, .opset = p->opset, .in = in, .n_in = 1, .out = out,
					       .n_out = 1, .stream = s->dev->stream, .rank = 0, .world = 1, .diag = d};
		if (!cp)
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "%s: no %s copy kernel for a one-rank collective",
					     tpf_node_describe(st->node, who, sizeof(who)), tpf_backend_name(s->dev->kind));
		return cp->run(&call);
	}
	switch (st->kind) {
	case RT_STEP_ALLREDUCE:
		rc = c->ops->allreduce_sum(c, in[0].data, out[0].data, (size_t)in[0].numel, in[0].dtype,
					   s->dev->stream, d);
		break;
	case RT_STEP_ALLGATHER:
		rc = c->ops->allgather(c, in[0].data, out[0].data, in[0].nbytes, s->dev->stream, d);
		break;
	case RT_STEP_ALLTOALL:
		rc = c->ops->alltoall(c, in[0].data, out[0].data, in[0].nbytes / (size_t)c->world,
				      s->dev->stream, d);
		break;
	default:
		return TPF_ERR_INVALID;
	}
	if (rc)
		tpf_diag_add(d, TPF_SEV_ERROR, "in %s", tpf_node_describe(st->node, who, sizeof(who)));
	return rc;
}
static enum tpf_status run_steps(void *ctx, struct tpf_diag *d)
{
	struct tpf_session *s = ctx;
	enum tpf_status st;
	int prof = s->b->prof_ms != NULL;
	if (prof) {
		memset(s->b->prof_marked, 0, s->b->plan->n_steps + 1);
		if ((st = s->dev->mark(s->dev, 0, d)))
			return st;
	}
	for (size_t k = 0; k < s->b->plan->n_steps;) {
		size_t used = 1;
		if (s->b->a2a_direct && s->b->a2a_direct[k]) {
			st = tpf_rt_a2a_direct_run(s, k, d);
			used = 3;
		} else
#ifdef TPF_HAVE_CUDA
		if (s->b->oneshot && s->b->oneshot[k])
			st = tpf_rt_oneshot_run(s, k, &used, d);
		else
#endif
			st = run_step(s, k, d);
		if (st)
			return st;
		if (prof) {
			if ((st = s->dev->mark(s->dev, k + used, d)))
				return st;
			s->b->prof_marked[k] = 1;
		}
		k += used;
	}
	return TPF_OK;
}

/* After a synchronized run: adds its step times.  The first run of a plan
 * is left out: it carries the first-use set-up (cuBLASLt's algorithm
 * choice, peer mappings) and the ranks' start-up skew. */
static void profile_collect(struct tpf_session *s)
{
	if (!s->b->prof_ms)
		return;
	if (!s->b->prof_seen_first) {
		s->b->prof_seen_first = 1;
		return;
	}
	for (size_t k = 0, next; k < s->b->plan->n_steps; k = next) {
		for (next = k + 1; next < s->b->plan->n_steps && !s->b->prof_marked[next]; next++)
			;
		if (!s->b->prof_marked[k])
			continue;
		double ms = s->dev->elapsed_ms(s->dev, k, next);
		if (ms > 0)
			s->b->prof_ms[k] += ms;
	}
	s->b->prof_runs++;
}

/* What ran at step k of slot b's plan, for the profile. */
static void step_label(const struct tpf_session *s, const struct bound *b, size_t k, char *buf, size_t size)
{
	const struct rt_step *st = &b->plan->steps[k];
	static const char *const coll[] = {"kernel", "allreduce", "allgather", "alltoall"};
#ifdef TPF_HAVE_CUDA
	static const char *const os[] = {"", "allreduce-rmsnorm", "allreduce", "sharded-rmsnorm"};
	if (b->oneshot && k < b->n_oneshot && b->oneshot[k]) {
		snprintf(buf, size, "%s.%s", b->oneshot[k] & OS_TWOSHOT ? "twoshot" : "oneshot",
			 os[b->oneshot[k] & OS_MODE_MASK]);
		return;
	}
#endif
	if (st->kind == RT_STEP_KERNEL)
		snprintf(buf, size, "%s", st->kernel->name);
	else
		snprintf(buf, size, "%s.%s", s->comm->ops->name, coll[st->kind]);
}

struct prof_row {
	char name[64];
	double ms;
	size_t n;
	size_t step;
};

static int cmp_rows(const void *a, const void *b)
{
	const struct prof_row *x = a, *y = b;
	return x->ms < y->ms ? 1 : x->ms > y->ms ? -1 : 0;
}

static void profile_print_bound(const struct tpf_session *s, const struct bound *b, FILE *f)
{
	if (!b->plan || !b->prof_ms || !b->prof_runs) {
		fprintf(f, "profile: no timed runs (eager runs after the first, with profiling on)\n");
		return;
	}
	size_t n = b->plan->n_steps, n_by = 0;
	struct prof_row *steps = tpf_calloc(n + 1, sizeof(*steps)), *by = tpf_calloc(n + 1, sizeof(*by));
	if (!steps || !by) {
		tpf_free(steps);
		tpf_free(by);
		return;
	}
	double total = 0, runs = (double)b->prof_runs;
	for (size_t k = 0; k < n; k++) {
		steps[k].step = k;
		steps[k].ms = b->prof_ms[k] / runs;
		step_label(s, b, k, steps[k].name, sizeof(steps[k].name));
		if (!b->prof_marked[k])
			continue;
		total += steps[k].ms;
		size_t j = 0;
		while (j < n_by && strcmp(by[j].name, steps[k].name))
			j++;
		if (j == n_by)
			memcpy(by[n_by++].name, steps[k].name, sizeof(by[0].name));
		by[j].ms += steps[k].ms;
		by[j].n++;
	}
	qsort(by, n_by, sizeof(*by), cmp_rows);
	fprintf(f, "profile: %.3f ms of device time per run (%zu runs, %zu steps)\n", total, b->prof_runs, n);
	fprintf(f, "  %-34s %7s %12s %7s\n", "kernel", "steps", "ms per run", "share");
	for (size_t j = 0; j < n_by; j++)
		fprintf(f, "  %-34s %7zu %12.4f %6.1f%%\n", by[j].name, by[j].n, by[j].ms,
			total > 0 ? 100 * by[j].ms / total : 0.0);
	qsort(steps, n, sizeof(*steps), cmp_rows);
	fprintf(f, "  slowest steps:\n");
	char who[256];
	for (size_t j = 0; j < n && j < 10 && steps[j].ms > 0; j++)
		fprintf(f, "  #%-5zu %10.4f ms  %-28s %s\n", steps[j].step, steps[j].ms, steps[j].name,
			tpf_node_describe(b->plan->steps[steps[j].step].node, who, sizeof(who)));
	tpf_free(steps);
	tpf_free(by);
}

void tpf_session_profile_print(const struct tpf_session *s, FILE *f)
{
	profile_print_bound(s, s->b, f);
}

void tpf_session_profile_print_plans(const struct tpf_session *s, FILE *f)
{
	/* the plans in the order they last ran */
	const struct bound *order[TPF_SESSION_PLANS];
	size_t n = 0;
	for (size_t i = 0; i < TPF_SESSION_PLANS; i++)
		if (s->slots[i].plan && s->slots[i].prof_ms)
			order[n++] = &s->slots[i];
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && order[j - 1]->used > order[j]->used; j--) {
			const struct bound *t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	if (!n)
		fprintf(f, "profile: no timed runs (eager runs after the first, with profiling on)\n");
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%splan %zu of %zu: ", i ? "\n" : "", i + 1, n);
		tpf_plan_print_inputs(order[i]->plan, f);
		fputc('\n', f);
		profile_print_bound(s, order[i], f);
	}
}

int tpf_session_set_cuda_graph(struct tpf_session *s, int on)
{
	int was = s->opt.cuda_graph;
	s->opt.cuda_graph = on;
	return was;
}

enum tpf_status tpf_session_replay(struct tpf_session *s, struct tpf_diag *d)
{
	if (!s->b->plan)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "session: nothing to replay before the first run");
#ifdef TPF_HAVE_CUDA
	if (s->opt.cuda_graph && s->dev->kind == TPF_BACKEND_CUDA)
		return tpf_cuda_device_run_graph(s->dev, s->b->plan->shape_hash, run_steps, s, d);
#endif
	enum tpf_status st = run_steps(s, d);
	if (!st && s->b->prof_ms && !(st = s->dev->sync(s->dev, d)))
		profile_collect(s); /* the marks are reused by the next run */
	return st;
}

enum tpf_status tpf_session_sync(struct tpf_session *s, struct tpf_diag *d)
{
	enum tpf_status st = s->dev->sync(s->dev, d);
#ifdef TPF_HAVE_CUDA
	if (!st)
		st = tpf_rt_oneshot_check(s, d);
#endif
	return st;
}

static uint64_t fnv_bytes(uint64_t h, const void *data, size_t n)
{
	const uint8_t *b = data;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * UINT64_C(0x100000001b3);
	return h;
}

/* The input signature: names, dtypes and dims (values are matched per plan,
 * for the inputs it depends on). */
static uint64_t shape_key(const struct tpf_host_tensor *in, size_t n)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < n; i++) {
		const char *nm = in[i].name ? in[i].name : "";
		h = fnv_bytes(h, nm, strlen(nm) + 1);
		int64_t vals[2] = {in[i].dtype, in[i].rank};
		h = fnv_bytes(h, vals, sizeof(vals));
		if (in[i].rank > 0 && in[i].rank <= TPF_KERNEL_MAX_RANK)
			h = fnv_bytes(h, in[i].dims, sizeof(int64_t) * (size_t)in[i].rank);
	}
	return h;
}

static const struct tpf_host_tensor *input_named(const struct tpf_host_tensor *in, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (in[i].name && !strcmp(in[i].name, name))
			return &in[i];
	return NULL;
}

/* Whether slot b's plan fits these inputs: the signature, and the values
 * of the inputs it depends on. */
static int slot_fits(const struct bound *b, uint64_t key, const struct tpf_host_tensor *in, size_t n)
{
	if (!b->plan || b->shape_key != key)
		return 0;
	size_t at = 0;
	for (size_t j = 0; j < b->n_dep; j++) {
		const struct tpf_host_tensor *t = input_named(in, n, b->dep_names[j]);
		size_t nb;
		if (!t || !t->data || tpf_host_tensor_bytes(t, &nb) || nb != b->dep_len[j] ||
		    memcmp(t->data, b->dep_bytes + at, nb))
			return 0;
		at += nb;
	}
	return 1;
}

/* Keeps the values of the inputs the current plan depends on; their hash. */
static enum tpf_status record_deps(struct tpf_session *s, const struct tpf_host_tensor *in, uint64_t *hash,
				   struct tpf_diag *d)
{
	const struct tpf_plan *p = s->b->plan;
	size_t n = 0, bytes = 0;
	*hash = UINT64_C(0xcbf29ce484222325);
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].is_input && p->values[i].value_dep) {
			n++;
			bytes += p->values[i].t.nbytes;
		}
	s->b->n_dep = 0;
	if (!n)
		return TPF_OK;
	s->b->dep_names = tpf_calloc(n, sizeof(*s->b->dep_names));
	s->b->dep_len = tpf_calloc(n, sizeof(*s->b->dep_len));
	s->b->dep_bytes = tpf_malloc(bytes ? bytes : 1);
	if (!s->b->dep_names || !s->b->dep_len || !s->b->dep_bytes)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	size_t at = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->is_input || !r->value_dep)
			continue;
		s->b->dep_names[s->b->n_dep] = r->v->name;
		s->b->dep_len[s->b->n_dep] = r->t.nbytes;
		memcpy(s->b->dep_bytes + at, in[r->input_index].data, r->t.nbytes);
		*hash = fnv_bytes(*hash, r->v->name, strlen(r->v->name) + 1);
		*hash = fnv_bytes(*hash, s->b->dep_bytes + at, r->t.nbytes);
		at += r->t.nbytes;
		s->b->n_dep++;
	}
	return TPF_OK;
}

/* Builds a plan for these inputs into a free slot (else the least
 * recently used one's). */
static enum tpf_status build_plan(struct tpf_session *s, uint64_t key, const struct tpf_host_tensor *inputs,
				  size_t n_inputs, struct tpf_diag *d)
{
	enum tpf_status st;
	struct bound *slot = NULL;
	for (size_t i = 0; i < TPF_SESSION_PLANS && !slot; i++)
		if (!s->slots[i].plan)
			slot = &s->slots[i];
	if (!slot) {
		slot = &s->slots[0];
		for (size_t i = 1; i < TPF_SESSION_PLANS; i++)
			if (s->slots[i].used < slot->used)
				slot = &s->slots[i];
	}
	s->b = slot;
	tpf_rt_session_unbind(s);
	struct tpf_plan_options po = s->opt.plan;
	po.backend = s->opt.backend;
	po.kept_inputs = s->kept_names;
	po.n_kept_inputs = s->n_kept;
	po.rank = s->comm->rank;
	po.world = s->comm->world;
	/* agree on the input shapes before any rank builds a plan */
	if ((st = tpf_comm_check_same(s->comm, key, "the input names, dtypes and shapes", d)))
		return st;
	uint64_t deps = 0;
	st = tpf_plan_build_shared(s->model, inputs, n_inputs, &po, s->consts, &s->b->plan, d);
	if (!st) {
		s->builds++;
		s->b->shape_key = key;
		/* the CUDA graph's key: this plan's, distinct from every other */
		s->b->plan->shape_hash = key ^ (s->builds * UINT64_C(0x9e3779b97f4a7c15));
		st = record_deps(s, inputs, &deps, d);
	}
	if (!st)
		st = bind(s, d);
	/* a rank that cannot build its plan must not leave the others waiting
	 * in the first collective */
	if ((st = tpf_comm_agree(s->comm, st, "building its plan", d)) ||
	    (s->comm->world > 1 &&
	     (st = tpf_comm_check_same(s->comm, deps, "the values of the inputs that decide shapes", d)))) {
		tpf_rt_session_unbind(s);
		return st;
	}
	if ((st = tpf_rt_a2a_direct_prepare(s, d))) {
		tpf_rt_session_unbind(s);
		return st;
	}
#ifdef TPF_HAVE_CUDA
	if ((st = tpf_rt_oneshot_prepare(s, d))) {
		tpf_rt_session_unbind(s);
		return st;
	}
#endif
	return TPF_OK;
}

enum tpf_status tpf_session_prepare(struct tpf_session *s, const struct tpf_host_tensor *inputs,
				    size_t n_inputs, struct tpf_diag *d)
{
	enum tpf_status st;
	if (n_inputs && !inputs)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "session: no inputs");
	uint64_t key = shape_key(inputs, n_inputs);
	struct bound *hit = NULL;
	for (size_t i = 0; i < TPF_SESSION_PLANS && !hit; i++)
		if (slot_fits(&s->slots[i], key, inputs, n_inputs))
			hit = &s->slots[i];
	if (hit) {
		s->b = hit;
		int moved;
		if ((st = tpf_rt_kept_bind(s, &moved, d)))
			return st;
		if (hit->arena != s->arena || moved)
			attach(s); /* a larger plan moved the arena, or kept inputs moved */
	} else if ((st = build_plan(s, key, inputs, n_inputs, d))) {
		return st;
	}
	s->b->used = ++s->clock;
	return TPF_OK;
}

enum tpf_status tpf_session_run(struct tpf_session *s, const struct tpf_host_tensor *inputs,
				size_t n_inputs, const struct tpf_host_tensor **outputs,
				size_t *n_outputs, struct tpf_diag *d)
{
	enum tpf_status st;
	if ((st = tpf_session_prepare(s, inputs, n_inputs, d)))
		return st;
	struct tpf_plan *p = s->b->plan;
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->is_input || r->buffer < 0)
			continue;
		if ((st = s->dev->upload(s->dev, value_data(s, (int)i), inputs[r->input_index].data,
					 r->t.nbytes, d)))
			return st;
	}
#ifdef TPF_HAVE_CUDA
	if (s->opt.cuda_graph && s->dev->kind == TPF_BACKEND_CUDA)
		st = tpf_cuda_device_run_graph(s->dev, p->shape_hash, run_steps, s, d);
	else
		st = run_steps(s, d);
#else
	st = run_steps(s, d);
#endif
	if (st)
		return st;
	for (size_t i = 0; i < p->n_outputs; i++) {
		int v = p->outputs[i];
		const struct rt_value *r = &p->values[v];
		if (!s->b->outs[i].data)
			continue; /* kept on the device */
		if (r->known)
			memcpy(s->b->outs[i].data, r->host, r->t.nbytes);
		else if ((st = s->dev->download(s->dev, s->b->outs[i].data, value_data(s, v), r->t.nbytes, d)))
			return st;
	}
	if ((st = s->dev->sync(s->dev, d)))
		return st;
#ifdef TPF_HAVE_CUDA
	if ((st = tpf_rt_oneshot_check(s, d)))
		return st;
#endif
	profile_collect(s);
	*outputs = s->b->outs;
	*n_outputs = s->b->n_outs;
	return TPF_OK;
}

int tpf_host_tensor_bytes(const struct tpf_host_tensor *t, size_t *out)
{
	uint64_t n = 1;
	if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK)
		return -1;
	for (int i = 0; i < t->rank; i++) {
		if (t->dims[i] < 0 || (t->dims[i] && n > UINT64_MAX / (uint64_t)t->dims[i]))
			return -1;
		n *= (uint64_t)t->dims[i];
	}
	if (t->dtype == TPF_DTYPE_STRING)
		return -1;
	return tpf_dtype_storage_bytes(t->dtype, n, out);
}
