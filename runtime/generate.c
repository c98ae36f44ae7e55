/* SPDX-License-Identifier: MIT */
/*
 * The generation loop (tpf_generator_*, runtime/tpf-runtime.h): the batch
 * of left-padded prompts, the growing attention mask and the position ids
 * derived from it, the pasts fed back from the presents, and the choice of
 * each next token (greedy, or sampled with temperature, top-k and top-p
 * from a counter-based generator, so that ranks agree without talking).
 */
#include <math.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <string.h>
#include <time.h>

#include "tpf-runtime.h"

/* A candidate token while sampling. */
struct cand {
	float x; /* its logit, then its weight */
	int32_t id;
};

struct tpf_generator {
	struct tpf_session *s;
	const struct tpf_kv_io *io;
	const struct tpf_graph *graph;
	struct tpf_generate_options o;
	int64_t *eos, *suppress; /* copies of the option arrays */

	int64_t **prompts; /* each tpf_malloc'ed */
	size_t *prompt_len;
	size_t batch, cap;

	size_t step;    /* forward calls made */
	size_t total;   /* the mask's length (past + this step's sequence) */
	int64_t *mask;  /* [batch, total] */
	int64_t *ids;   /* this step's [batch, seq] */
	int64_t *pos;   /* this step's position ids */
	int64_t *tokens; /* [batch, max_new_tokens] */
	size_t *n_tokens;
	unsigned char *done;
	size_t n_done;
	struct tpf_host_tensor *in; /* one per graph input */
	void **past;                /* the pasts' data, one per pair */
	size_t *past_cap;

	float *row;  /* one row of logits as float */
	struct cand *order; /* sampling scratch */
	size_t vocab;

	double *step_ms;
	size_t new_tokens;

	/* the cache in place (in_place) */
	size_t max_len;
	int64_t *mask_full; /* [batch, max_len] */
	int64_t *lengths;   /* past_sequence_length [batch] */
	int64_t *chunk_ids; /* a prefill chunk's ids [batch, chunk] */
	size_t prefill_calls;
};

/* The model's cache is in place (kv-cache-in-place): it takes
 * past_sequence_length, the session keeps the caches. */
static int in_place(const struct tpf_generator *g)
{
	return g->io->past_lengths >= 0;
}

/* Milliseconds since *t0 (CLOCK_MONOTONIC). */
static double ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) * 1e-6;
}

static int64_t *copy_ids(const int64_t *ids, size_t n)
{
	int64_t *c = tpf_malloc(n ? n * sizeof(*c) : 1);
	if (c && n)
		memcpy(c, ids, n * sizeof(*c));
	return c;
}

enum tpf_status tpf_generator_create(struct tpf_session *s, const struct tpf_kv_io *io,
				     const struct tpf_generate_options *o, struct tpf_generator **out,
				     struct tpf_diag *d)
{
	*out = NULL;
	if (!s || !io || !o || !io->n_pairs)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_generator_create: no session, KV-cache I/O or options");
	for (size_t i = 0; i < io->n_pairs; i++)
		if (io->pairs[i].kv_heads < 0 || io->pairs[i].head_dim < 0)
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "input '%s': the dims other than the batch and "
					     "the past length must be static for an empty past", io->pairs[i].past->name);
	struct tpf_generator *g = tpf_calloc(1, sizeof(*g));
	if (!g)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	g->s = s;
	g->io = io;
	g->graph = io->pairs[0].past->graph;
	g->o = *o;
	g->eos = copy_ids(o->eos_ids, o->n_eos);
	g->suppress = copy_ids(o->suppress_ids, o->n_suppress);
	g->in = tpf_calloc(g->graph->n_inputs, sizeof(*g->in));
	g->past = tpf_calloc(io->n_pairs, sizeof(*g->past));
	g->past_cap = tpf_calloc(io->n_pairs, sizeof(*g->past_cap));
	g->step_ms = tpf_calloc(o->max_new_tokens + 1, sizeof(*g->step_ms));
	if (!g->eos || !g->suppress || !g->in || !g->past || !g->past_cap || !g->step_ms) {
		tpf_generator_free(g);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	if (io->next_token >= 0 && (o->temperature > 0 || o->n_suppress)) {
		tpf_generator_free(g);
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "the model gives output 'next_token' (greedy-next-token), "
				     "not its logits: sampling and suppressed ids need the logits");
	}
	if (o->prefill_chunk && !in_place(g)) {
		tpf_generator_free(g);
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "a prefill in chunks needs the cache in place (the pass "
				     "kv-cache-in-place)");
	}
	if (in_place(g)) {
		const char **names = tpf_calloc(io->n_pairs, sizeof(*names));
		enum tpf_status st = names ? TPF_OK : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		for (size_t i = 0; !st && i < io->n_pairs; i++)
			names[i] = io->pairs[i].past->name;
		if (!st)
			st = tpf_session_keep_inputs(s, names, io->n_pairs, d);
		tpf_free(names);
		if (st) {
			tpf_generator_free(g);
			return st;
		}
	}
	*out = g;
	return TPF_OK;
}

void tpf_generator_free(struct tpf_generator *g)
{
	if (!g)
		return;
	if (in_place(g)) /* the session runs as it did before: its caller's inputs copied */
		tpf_session_keep_inputs(g->s, NULL, 0, NULL);
	for (size_t i = 0; i < g->batch; i++)
		tpf_free(g->prompts[i]);
	if (g->past)
		for (size_t i = 0; i < g->io->n_pairs; i++)
			tpf_free(g->past[i]);
	void *owned[] = {g->eos, g->suppress, g->prompts, g->prompt_len, g->mask, g->ids, g->pos,
			 g->tokens, g->n_tokens, g->done, g->in, g->past, g->past_cap, g->row, g->order,
			 g->step_ms, g->mask_full, g->lengths, g->chunk_ids};
	for (size_t i = 0; i < sizeof(owned) / sizeof(owned[0]); i++)
		tpf_free(owned[i]);
	tpf_free(g);
}

void tpf_generator_reset(struct tpf_generator *g)
{
	g->step = 0;
	g->n_done = 0;
	g->new_tokens = 0;
	g->prefill_calls = 0;
	memset(g->step_ms, 0, (g->o.max_new_tokens + 1) * sizeof(*g->step_ms));
}

enum tpf_status tpf_generator_add_prompt(struct tpf_generator *g, const int64_t *ids, size_t n,
					 struct tpf_diag *d)
{
	if (g->step)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "prompts are added before the first step");
	if (!n)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "prompt %zu is empty", g->batch);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || (g->io->vocab > 0 && ids[i] >= g->io->vocab))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "prompt %zu: token id %lld is outside the "
					     "vocabulary (0 to %lld)", g->batch, (long long)ids[i],
					     (long long)g->io->vocab - 1);
	if (g->batch == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 4;
		int64_t **p = tpf_realloc(g->prompts, cap * sizeof(*p));
		if (p)
			g->prompts = p;
		size_t *l = p ? tpf_realloc(g->prompt_len, cap * sizeof(*l)) : NULL;
		if (!l)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		g->prompt_len = l;
		g->cap = cap;
	}
	if (!(g->prompts[g->batch] = copy_ids(ids, n)))
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	g->prompt_len[g->batch++] = n;
	return TPF_OK;
}

/* The prefill's buffers: ids and mask left-padded to the longest prompt. */
static enum tpf_status start(struct tpf_generator *g, struct tpf_diag *d)
{
	size_t b = g->batch, len = 0, max_new = g->o.max_new_tokens;
	if (!b)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "no prompt to generate from");
	for (size_t i = 0; i < b; i++)
		len = g->prompt_len[i] > len ? g->prompt_len[i] : len;
	g->total = len;
	void **bufs[] = {(void **)&g->mask, (void **)&g->ids, (void **)&g->pos, (void **)&g->tokens,
			 (void **)&g->n_tokens, (void **)&g->done, (void **)&g->mask_full, (void **)&g->lengths,
			 (void **)&g->chunk_ids};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) { /* a failed start, again */
		tpf_free(*bufs[i]);
		*bufs[i] = NULL;
	}
	g->mask = tpf_malloc(b * (len + max_new) * sizeof(*g->mask));
	g->ids = tpf_malloc(b * len * sizeof(*g->ids));
	g->pos = tpf_malloc(b * len * sizeof(*g->pos));
	g->tokens = tpf_malloc(b * (max_new ? max_new : 1) * sizeof(*g->tokens));
	g->n_tokens = tpf_calloc(b, sizeof(*g->n_tokens));
	g->done = tpf_calloc(b, 1);
	if (!g->mask || !g->ids || !g->pos || !g->tokens || !g->n_tokens || !g->done)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	if (in_place(g)) {
		g->max_len = g->o.max_length ? g->o.max_length : len + max_new;
		if (g->max_len < len + max_new)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "a cache of %zu positions cannot hold a prompt of %zu "
					     "and %zu new tokens", g->max_len, len, max_new);
		g->mask_full = tpf_calloc(b * g->max_len, sizeof(*g->mask_full));
		g->lengths = tpf_calloc(b, sizeof(*g->lengths));
		g->chunk_ids = tpf_calloc(b * len, sizeof(*g->chunk_ids));
		if (!g->mask_full || !g->lengths || !g->chunk_ids)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		enum tpf_status st = tpf_session_clear_kept(g->s, d);
		if (st)
			return st;
	}
	for (size_t i = 0; i < b; i++) {
		size_t pad = len - g->prompt_len[i];
		for (size_t j = 0; j < len; j++) {
			g->ids[i * len + j] = j < pad ? g->o.pad_id : g->prompts[i][j - pad];
			g->mask[i * len + j] = j >= pad;
		}
	}
	return TPF_OK;
}

/* Dim a (past the batch) of a cache tensor of p holding `len` positions:
 * the past axis, then the KV heads and the head dim in axis order. */
static int64_t cache_dim(const struct tpf_kv_pair *p, int a, size_t len)
{
	if (a == p->axis)
		return (int64_t)len;
	return a == (p->axis == 1 ? 2 : 1) ? p->kv_heads : p->head_dim;
}

/* Position ids of the mask's columns [c0, c0 + seq): cumsum(mask) - 1,
 * 0 at padding. */
static void fill_positions(struct tpf_generator *g, size_t c0, size_t seq)
{
	for (size_t i = 0; i < g->batch; i++) {
		const int64_t *m = g->mask + i * g->total;
		int64_t run = 0;
		for (size_t j = 0; j < c0 + seq; j++) {
			run += m[j];
			if (j >= c0)
				g->pos[i * seq + j - c0] = m[j] ? run - 1 : 0;
		}
	}
}

/* input_ids [batch, seq], the attention mask [batch, width] and the
 * position ids (fill_positions'). */
static void set_step_inputs(struct tpf_generator *g, const int64_t *ids, size_t seq, int64_t *mask,
			    size_t width)
{
	const struct tpf_kv_io *io = g->io;
	int64_t b = (int64_t)g->batch;
	g->in[io->input_ids] = (struct tpf_host_tensor){.name = "input_ids", .dtype = TPF_DTYPE_INT64,
							 .rank = 2, .dims = {b, (int64_t)seq}, .data = (void *)ids};
	g->in[io->attention_mask] = (struct tpf_host_tensor){
		.name = "attention_mask", .dtype = TPF_DTYPE_INT64, .rank = 2,
		.dims = {b, (int64_t)width}, .data = mask};
	if (io->position_ids >= 0)
		g->in[io->position_ids] = (struct tpf_host_tensor){
			.name = "position_ids", .dtype = TPF_DTYPE_INT64, .rank = 2,
			.dims = {b, (int64_t)seq}, .data = g->pos};
}

/* The inputs of a cache in place for the positions [c0, c0 + seq) of the
 * mask's g->total columns (a decode step: the last one; a prefill chunk):
 * their ids and position ids, the mask over all max_len positions (zeros
 * past c0 + seq), the positions the caches hold (c0), the caches by shape
 * only (the session keeps them). */
static void fill_in_place(struct tpf_generator *g, size_t c0, size_t seq)
{
	const struct tpf_kv_io *io = g->io;
	int64_t b = (int64_t)g->batch;
	size_t end = c0 + seq, w = g->total;
	const int64_t *ids = g->ids;
	if (g->step == 0) { /* the prompt's columns c0.. */
		for (size_t i = 0; i < g->batch; i++)
			memcpy(g->chunk_ids + i * seq, g->ids + i * w + c0, seq * sizeof(*g->ids));
		ids = g->chunk_ids;
	}
	fill_positions(g, c0, seq);
	for (size_t i = 0; i < g->batch; i++) {
		memcpy(g->mask_full + i * g->max_len, g->mask + i * w, end * sizeof(*g->mask));
		memset(g->mask_full + i * g->max_len + end, 0, (g->max_len - end) * sizeof(*g->mask));
		g->lengths[i] = (int64_t)c0;
	}
	set_step_inputs(g, ids, seq, g->mask_full, g->max_len);
	g->in[io->past_lengths] = (struct tpf_host_tensor){.name = "past_sequence_length",
							    .dtype = TPF_DTYPE_INT64, .rank = 1, .dims = {b},
							    .data = g->lengths};
	for (size_t k = 0; k < io->n_pairs; k++) {
		const struct tpf_kv_pair *p = &io->pairs[k];
		struct tpf_host_tensor *t = &g->in[p->input];
		*t = (struct tpf_host_tensor){.name = p->past->name, .dtype = p->past->type.dtype, .rank = 4};
		t->dims[0] = b;
		for (int a = 1; a < 4; a++)
			t->dims[a] = cache_dim(p, a, g->max_len);
	}
}

/* The prompt into a cache in place, in calls of at most `chunk` positions
 * (o.prefill_chunk, else whole; at one rank a plan whose memory does not
 * fit halves the chunk and starts again).  *seq: the last call's
 * positions, whose logits *out holds. */
static enum tpf_status prefill_in_place(struct tpf_generator *g, const struct tpf_host_tensor **out,
					size_t *n_out, size_t *seq, struct tpf_diag *d)
{
	size_t len = g->total, chunk = g->o.prefill_chunk && g->o.prefill_chunk < len ? g->o.prefill_chunk : len;
	int retry = !g->o.prefill_chunk && tpf_session_world(g->s) == 1;
	for (;;) {
		struct tpf_diag *tmp = retry ? tpf_diag_create() : d;
		enum tpf_status st = retry && !tmp ? TPF_ERR_NOMEM : TPF_OK;
		g->prefill_calls = 0;
		for (size_t c0 = 0; c0 < len && !st; c0 += chunk) {
			*seq = len - c0 < chunk ? len - c0 : chunk;
			fill_in_place(g, c0, *seq);
			st = tpf_session_run(g->s, g->in, g->graph->n_inputs, out, n_out, tmp);
			g->prefill_calls++;
		}
		if (tmp && tmp != d) {
			int again = st == TPF_ERR_NOMEM && chunk > 1;
			for (size_t i = 0; !again && i < tmp->count; i++)
				tpf_diag_add(d, tmp->entries[i].severity, "%s", tmp->entries[i].text);
			tpf_diag_free(tmp);
			if (again) {
				chunk = (chunk + 1) / 2;
				continue;
			}
		}
		return st;
	}
}

/* Fills g->in for a step of `seq` new positions per sequence. */
static void fill_inputs(struct tpf_generator *g, size_t seq)
{
	if (in_place(g)) {
		fill_in_place(g, g->total - seq, seq);
		return;
	}
	const struct tpf_kv_io *io = g->io;
	int64_t b = (int64_t)g->batch;
	fill_positions(g, g->total - seq, seq);
	set_step_inputs(g, g->ids, seq, g->mask, g->total);
	static int64_t empty; /* the data of a past of length 0 */
	for (size_t k = 0; k < io->n_pairs; k++) {
		const struct tpf_kv_pair *p = &io->pairs[k];
		struct tpf_host_tensor *t = &g->in[p->input];
		*t = (struct tpf_host_tensor){.name = p->past->name, .dtype = p->past->type.dtype, .rank = 4,
					      .data = g->step ? g->past[k] : (void *)&empty};
		t->dims[0] = b;
		for (int a = 1; a < 4; a++)
			t->dims[a] = cache_dim(p, a, g->total - seq);
	}
}

/* Keeps the presents as the next step's pasts. */
static enum tpf_status keep_presents(struct tpf_generator *g, const struct tpf_host_tensor *out,
				     size_t n_out, size_t seq, struct tpf_diag *d)
{
	for (size_t k = 0; k < g->io->n_pairs; k++) {
		const struct tpf_kv_pair *p = &g->io->pairs[k];
		const struct tpf_host_tensor *t = &out[p->output];
		size_t nb;
		int fits = p->output < n_out && t->rank == 4 && t->dtype == p->past->type.dtype &&
			   t->dims[0] == (int64_t)g->batch && t->dims[p->axis] == (int64_t)g->total &&
			   !tpf_host_tensor_bytes(t, &nb);
		for (int a = 1; fits && a < 4; a++)
			fits = t->dims[a] == cache_dim(p, a, g->total);
		if (!fits)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "output '%s' is not the past '%s' extended by %zu "
					     "position%s along axis %d", p->present->name, p->past->name, seq,
					     seq == 1 ? "" : "s", p->axis);
		if (nb > g->past_cap[k]) {
			void *grown = tpf_realloc(g->past[k], nb);
			if (!grown)
				return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
			g->past[k] = grown;
			g->past_cap[k] = nb;
		}
		memcpy(g->past[k], t->data, nb);
	}
	return TPF_OK;
}

/* Logit v of row (dtype t) as float. */
static float logit_at(const void *row, enum tpf_dtype t, size_t v)
{
	switch (t) {
	case TPF_DTYPE_FLOAT16:
		return tpf_f16_to_f32(((const uint16_t *)row)[v]);
	case TPF_DTYPE_BFLOAT16:
		return tpf_bf16_to_f32(((const uint16_t *)row)[v]);
	case TPF_DTYPE_DOUBLE:
		return (float)((const double *)row)[v];
	default:
		return ((const float *)row)[v];
	}
}

/* A uniform double in [0, 1) for (seed, step, sequence): splitmix64 over
 * the three. */
static double uniform(uint64_t seed, uint64_t step, uint64_t seq)
{
	uint64_t x = seed;
	uint64_t in[2] = {step, seq};
	for (int i = 0; i < 2; i++) {
		x += 0x9e3779b97f4a7c15ull * (in[i] + 1);
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
		x ^= x >> 31;
	}
	return (double)(x >> 11) * 0x1.0p-53;
}

/* Larger logit first, then the smaller token id. */
static int by_logit(const void *a, const void *b)
{
	const struct cand *p = a, *q = b;
	return p->x > q->x ? -1 : p->x < q->x ? 1 : (p->id > q->id) - (p->id < q->id);
}

/* Samples from g->row (suppressed tokens at -inf) with temperature, top-k
 * and top-p. */
static int64_t sample(struct tpf_generator *g, size_t seq)
{
	size_t n = 0;
	for (size_t v = 0; v < g->vocab; v++)
		if (g->row[v] > -INFINITY)
			g->order[n++] = (struct cand){g->row[v], (int32_t)v};
	if (!n)
		return 0;
	qsort(g->order, n, sizeof(*g->order), by_logit);
	if (g->o.top_k > 0 && (size_t)g->o.top_k < n)
		n = (size_t)g->o.top_k;
	double top = g->order[0].x, sum = 0;
	for (size_t i = 0; i < n; i++) {
		g->order[i].x = (float)exp(((double)g->order[i].x - top) / g->o.temperature);
		sum += g->order[i].x;
	}
	if (g->o.top_p > 0 && g->o.top_p < 1) {
		double kept = 0;
		for (size_t i = 0; i < n; i++)
			if ((kept += g->order[i].x) >= g->o.top_p * sum) {
				n = i + 1;
				break;
			}
		sum = kept < sum ? kept : sum;
	}
	double u = uniform(g->o.seed, g->step, seq) * sum, acc = 0;
	for (size_t i = 0; i < n; i++)
		if ((acc += g->order[i].x) > u)
			return g->order[i].id;
	return g->order[n - 1].id;
}

/* The next token of sequence i from its last position's logits (or the
 * model's own next_token ids). */
static int64_t next_token(struct tpf_generator *g, const struct tpf_host_tensor *lg, size_t i)
{
	if (lg->dtype == TPF_DTYPE_INT64) /* next_token [batch, seq] */
		return ((const int64_t *)lg->data)[(i + 1) * (size_t)lg->dims[1] - 1];
	size_t es = lg->dtype == TPF_DTYPE_DOUBLE ? 8 : lg->dtype == TPF_DTYPE_FLOAT ? 4 : 2;
	size_t seq = (size_t)lg->dims[1];
	const char *row = (const char *)lg->data + ((i * seq + seq - 1) * g->vocab) * es;
	if (lg->dtype == TPF_DTYPE_FLOAT) {
		memcpy(g->row, row, g->vocab * sizeof(float));
	} else if (lg->dtype == TPF_DTYPE_BFLOAT16) { /* the high half of a float32 */
		const uint16_t *h = (const uint16_t *)row;
		for (size_t v = 0; v < g->vocab; v++) {
			uint32_t u = (uint32_t)h[v] << 16;
			memcpy(&g->row[v], &u, sizeof(u));
		}
	} else {
		for (size_t v = 0; v < g->vocab; v++)
			g->row[v] = logit_at(row, lg->dtype, v);
	}
	for (size_t k = 0; k < g->o.n_suppress; k++)
		if (g->suppress[k] >= 0 && (size_t)g->suppress[k] < g->vocab)
			g->row[g->suppress[k]] = -INFINITY;
	if (g->o.temperature > 0)
		return sample(g, i);
	size_t best = 0;
	for (size_t v = 1; v < g->vocab; v++)
		if (g->row[v] > g->row[best])
			best = v;
	return (int64_t)best;
}

/* Every prompt id is below the vocabulary size. */
static enum tpf_status check_prompts(const struct tpf_generator *g, size_t vocab, struct tpf_diag *d)
{
	for (size_t i = 0; i < g->batch; i++)
		for (size_t j = 0; j < g->prompt_len[i]; j++)
			if ((size_t)g->prompts[i][j] >= vocab)
				return tpf_diag_fail(d, TPF_ERR_INVALID, "prompt %zu: token id %lld is outside the "
						     "vocabulary (0 to %zu)", i, (long long)g->prompts[i][j], vocab - 1);
	return TPF_OK;
}

/* Every suppressed id is in the vocabulary, and one token at least is
 * left to generate. */
static enum tpf_status check_suppress(const struct tpf_generator *g, struct tpf_diag *d)
{
	size_t left = g->vocab;
	unsigned char *seen;

	if (!g->o.n_suppress)
		return TPF_OK;
	for (size_t k = 0; k < g->o.n_suppress; k++)
		if (g->suppress[k] < 0 || (uint64_t)g->suppress[k] >= g->vocab)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "suppressed token id %lld is outside the vocabulary "
					     "(0 to %zu)", (long long)g->suppress[k], g->vocab - 1);
	seen = tpf_calloc(g->vocab, 1);
	if (!seen)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	for (size_t k = 0; k < g->o.n_suppress; k++)
		if (!seen[g->suppress[k]]++)
			left--;
	tpf_free(seen);
	return left ? TPF_OK
		    : tpf_diag_fail(d, TPF_ERR_INVALID, "the suppressed ids are the whole vocabulary (%zu tokens): "
				    "nothing is left to generate", g->vocab);
}

/* Checks the logits (or next_token) and makes the row buffers on the
 * first step. */
static enum tpf_status check_logits(struct tpf_generator *g, const struct tpf_host_tensor *lg, size_t seq,
				   struct tpf_diag *d)
{
	enum tpf_dtype t = lg->dtype;
	enum tpf_status st;
	if (g->io->next_token >= 0) {
		/* [batch, 1]: the last position only (last-position-logits) */
		if (lg->rank != 2 || lg->dims[0] != (int64_t)g->batch ||
		    (lg->dims[1] != (int64_t)seq && lg->dims[1] != 1) || t != TPF_DTYPE_INT64)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "output 'next_token' is not int64 [%zu, %zu] (or [%zu, 1])",
					     g->batch, seq, g->batch);
		if (g->step || g->io->vocab <= 0)
			return TPF_OK;
		return check_prompts(g, (size_t)g->io->vocab, d);
	}
	if (lg->rank != 3 || lg->dims[0] != (int64_t)g->batch || (lg->dims[1] != (int64_t)seq && lg->dims[1] != 1) ||
	    lg->dims[2] < 1 || (t != TPF_DTYPE_FLOAT && t != TPF_DTYPE_FLOAT16 && t != TPF_DTYPE_BFLOAT16 &&
				t != TPF_DTYPE_DOUBLE))
		return tpf_diag_fail(d, TPF_ERR_RUNTIME,
				     "output 'logits' is not [%zu, %zu, vocab] (or [%zu, 1, vocab]) of a float type", g->batch,
				     seq, g->batch);
	if (g->vocab)
		return (size_t)lg->dims[2] == g->vocab
			       ? TPF_OK
			       : tpf_diag_fail(d, TPF_ERR_RUNTIME, "output 'logits' changed its vocabulary size");
	g->vocab = (size_t)lg->dims[2];
	if ((st = check_prompts(g, g->vocab, d)) || (st = check_suppress(g, d)))
		return st;
	g->row = tpf_malloc(g->vocab * sizeof(*g->row));
	g->order = tpf_malloc(g->vocab * sizeof(*g->order));
	return g->row && g->order ? TPF_OK : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
}

/* Takes each unfinished sequence's next token and makes the next step's
 * ids and mask. */
static void take_tokens(struct tpf_generator *g, const struct tpf_host_tensor *lg)
{
	size_t max_new = g->o.max_new_tokens;
	for (size_t i = 0; i < g->batch; i++) {
		int64_t t = g->o.pad_id;
		if (!g->done[i]) {
			t = next_token(g, lg, i);
			g->tokens[i * max_new + g->n_tokens[i]++] = t;
			g->new_tokens++;
			int stop = g->n_tokens[i] >= max_new;
			for (size_t k = 0; k < g->o.n_eos; k++)
				stop |= t == g->eos[k];
			if (stop) {
				g->done[i] = 1;
				g->n_done++;
			}
		}
		g->ids[i] = t;
	}
	/* the mask grows by a one per sequence */
	size_t old = g->total;
	g->total++;
	for (size_t i = g->batch; i-- > 0;) {
		memmove(g->mask + i * g->total, g->mask + i * old, old * sizeof(*g->mask));
		g->mask[i * g->total + old] = 1;
	}
}

enum tpf_status tpf_generator_step(struct tpf_generator *g, int *done, struct tpf_diag *d)
{
	enum tpf_status st;
	if (done)
		*done = 0;
	if (!g->step && (st = start(g, d)))
		return st;
	if (g->n_done == g->batch || !g->o.max_new_tokens) {
		if (done)
			*done = 1;
		return TPF_OK;
	}
	size_t seq = g->step ? 1 : g->total;
	const struct tpf_host_tensor *out = NULL;
	size_t n_out = 0;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	/* the prefill eager (tpf_session_set_cuda_graph), the decode steps as
	 * the session's options say */
	int graph = g->step ? -1 : tpf_session_set_cuda_graph(g->s, 0);
	if (!g->step && in_place(g)) {
		st = prefill_in_place(g, &out, &n_out, &seq, d);
	} else {
		fill_inputs(g, seq);
		st = tpf_session_run(g->s, g->in, g->graph->n_inputs, &out, &n_out, d);
		g->prefill_calls += !g->step;
	}
	if (graph >= 0)
		tpf_session_set_cuda_graph(g->s, graph);
	if (st)
		return st;
	long lo = g->io->logits >= 0 ? g->io->logits : g->io->next_token;
	if (lo < 0 || (size_t)lo >= n_out)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME, "the session gave no output 'logits'");
	if ((st = check_logits(g, &out[lo], seq, d)) || (!in_place(g) && (st = keep_presents(g, out, n_out, seq, d))))
		return st;
	take_tokens(g, &out[lo]);
	g->step_ms[g->step++] = ms_since(&t0);
	if (done)
		*done = g->n_done == g->batch;
	return TPF_OK;
}

enum tpf_status tpf_generator_run(struct tpf_generator *g, void (*progress)(void *arg, size_t step),
				  void *arg, struct tpf_diag *d)
{
	int done = 0;
	while (!done) {
		enum tpf_status st = tpf_generator_step(g, &done, d);
		if (st)
			return st;
		if (progress)
			progress(arg, g->step);
	}
	return TPF_OK;
}

size_t tpf_generator_count(const struct tpf_generator *g)
{
	return g->batch;
}

size_t tpf_generator_tokens(const struct tpf_generator *g, size_t i, const int64_t **ids)
{
	if (i >= g->batch || !g->tokens) {
		*ids = NULL;
		return 0;
	}
	*ids = g->tokens + i * g->o.max_new_tokens;
	return g->n_tokens[i];
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void tpf_generator_stats(const struct tpf_generator *g, struct tpf_generate_stats *out)
{
	*out = (struct tpf_generate_stats){.steps = g->step, .new_tokens = g->new_tokens, .in_place = in_place(g),
					   .cache_length = in_place(g) ? g->max_len : 0,
					   .cache_bytes = in_place(g) ? tpf_session_kept_bytes(g->s) : 0,
					   .prefill_calls = g->prefill_calls,
					   .device_bytes = tpf_session_device_bytes(g->s)};
	tpf_session_graph_stats(g->s, &out->graphs_captured, &out->graph_replays);
	struct rusage ru;
	if (!getrusage(RUSAGE_SELF, &ru))
		out->peak_rss_bytes = (size_t)ru.ru_maxrss * 1024; /* kilobytes on Linux */
	tpf_session_plan_count(g->s, &out->plans_built);
	if (!g->step)
		return;
	out->ttft_ms = g->step_ms[0];
	size_t n = g->step - 1;
	for (size_t i = 0; i < n; i++)
		out->decode_ms += g->step_ms[i + 1];
	double *sorted = n ? tpf_malloc(n * sizeof(*sorted)) : NULL;
	if (!sorted)
		return;
	memcpy(sorted, g->step_ms + 1, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(sorted[0]), by_value);
	/* nearest rank */
	out->step_p50_ms = sorted[(n + 1) / 2 - 1];
	out->step_p99_ms = sorted[(size_t)ceil(0.99 * (double)n) - 1];
	tpf_free(sorted);
}
