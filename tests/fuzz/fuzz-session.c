/* SPDX-License-Identifier: MIT */
/*
 * fuzz-session: a model as `tpfuse run` brings it, lowered and run on the
 * CPU backend at world size 1 and 2: the planner, the runtime's shape
 * functions, plan-time folding, memory planning, sessions, the CPU kernels
 * and the collectives' wiring.
 *
 * Input: byte 0 says what to do, the rest is the model (ONNX bytes).
 *   bits 0-1  world sizes: 1 only world 1, 2 only world 2, 0 and 3 both
 *   bit  2    run the "default" pipeline first (on each rank, for its rank)
 *   bits 3-4  symbolic and unknown input dims become 1 + these bits
 *   bits 5-7  seed of the input data (as `tpfuse run --random-inputs`:
 *             floats in [-1, 1), integers 0..3); with bit 7 set, the
 *             sessions also copy their constants as a device does and pack
 *             every product of a known 2-D weight in 16-column tiles
 *             (TPF_CPU_COPY_CONSTANTS=1, TPF_GEMV_TILED=16): the session's
 *             constant store and the packed kernels
 * Every rank gets the same inputs; the model's tp_rank/tp_world_size
 * metadata are set to the rank and world size it runs as.
 *
 * World size 2 runs in this process: one thread per rank, each with its own
 * copy of the model and its own session, joined by an in-memory
 * communicator (struct hub).  Only one rank runs at a time: a rank holds the
 * hub's lock from start to end and gives it up only while it waits in a
 * collective.  So the library never runs on two threads at once (it is
 * written for one process per rank, and its allocation counter is a plain
 * global), and every execution is deterministic.  The last rank to arrive
 * at a collective checks that both asked for the same thing and moves the
 * data of both (sums in double, rounded once).  A rank whose call fails
 * ends the run with tpf_comm_abort, as `tpfuse run` does; the other's
 * collectives then fail.
 *
 * Work is bounded so that one execution stays fast and small: at most
 * MAX_NODES nodes, MAX_INPUT_ELEMS elements per input and MAX_TOTAL_ELEMS
 * in all, constant folding up to FOLD_MAX_ELEMS elements, and a plan whose
 * buffers and constants take more than MAX_PLAN_BYTES is built but not run
 * (the ranks' plans are built once first, alone, to see).
 *
 * Besides crashes, leaks and undefined behaviour, a finding (abort()) is a
 * broken promise:
 *   - the ranks of a world-2 run call different collectives, or other sizes,
 *     or one finishes while the other waits in a collective (under mpirun
 *     that is a hang or a truncated message);
 *   - a run that returned OK gives other than one output per graph output,
 *     or an output whose byte count does not match its dtype and dims;
 *   - a second run on the same inputs (the plan kept, the arena reused)
 *     returns other bytes than the first.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-common.h"
#include "tpf-runtime.h"

#define MAX_NODES 512
#define MAX_INPUT_ELEMS 4096
#define MAX_TOTAL_ELEMS 16384
#define FOLD_MAX_ELEMS 4096
#define MAX_PLAN_BYTES (64 * 1024)
#define MAX_STEPS 2048
#define WORLD_MAX 2

static int verbose = -1;

/* With TPF_FUZZ_VERBOSE: why an input went no further. */
static void note(const char *what, const struct tpf_diag *d)
{
	if (!verbose)
		return;
	fprintf(stderr, "---- %s\n", what);
	if (d)
		tpf_diag_print(d, stderr);
}

/* ------------------------------------------------------------ the hub */

enum coll { C_ALLREDUCE, C_ALLGATHER, C_ALLTOALL, C_BROADCAST, C_BARRIER };

static const char *const coll_name[] = {"allreduce", "allgather", "alltoall", "broadcast", "barrier"};

struct call {
	enum coll kind;
	const void *send;
	void *recv;
	size_t n; /* elements (allreduce) or bytes */
	enum tpf_dtype dtype;
	int root;
};

struct hub {
	pthread_mutex_t mu; /* the baton: held by the rank that runs */
	pthread_cond_t cv;
	int world;
	int aborted;
	int left[WORLD_MAX];    /* the rank is done with the communicator */
	int waiting[WORLD_MAX]; /* the rank waits in the current collective */
	int arrived;
	uint64_t round;         /* collectives completed */
	enum tpf_status round_status;
	struct call calls[WORLD_MAX];
	char finding[512];      /* a broken promise, reported after the ranks end */
};

struct hub_comm {
	struct hub *hub;
};

static void describe(const struct call *c, int rank, char *buf, size_t n)
{
	if (c->kind == C_ALLREDUCE)
		snprintf(buf, n, "rank %d: %s of %zu %s", rank, coll_name[c->kind], c->n,
			 tpf_dtype_name(c->dtype));
	else if (c->kind == C_BROADCAST)
		snprintf(buf, n, "rank %d: %s of %zu bytes from rank %d", rank, coll_name[c->kind], c->n,
			 c->root);
	else
		snprintf(buf, n, "rank %d: %s of %zu bytes", rank, coll_name[c->kind], c->n);
}

static int same_call(const struct call *a, const struct call *b)
{
	return a->kind == b->kind && a->n == b->n && a->dtype == b->dtype && a->root == b->root;
}

/* Moves the data of a collective every rank has arrived at. */
static enum tpf_status hub_move(struct hub *h, struct tpf_diag *d)
{
	const struct call *c0 = &h->calls[0];
	const int w = h->world;
	size_t bytes = c0->n, total;
	unsigned char *tmp;

	if (c0->kind == C_BARRIER)
		return TPF_OK;
	if (c0->kind == C_ALLREDUCE) {
		int integral = tpf_dtype_is_integral(c0->dtype);
		if (!integral && !tpf_dtype_is_float(c0->dtype))
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "allreduce of %s not supported",
					     tpf_dtype_name(c0->dtype));
		if (tpf_dtype_storage_bytes(c0->dtype, c0->n, &bytes))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "allreduce: bad dtype or count");
		tmp = malloc(bytes ? bytes : 1);
		if (!tmp)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		memset(tmp, 0, bytes);
		for (int64_t i = 0; i < (int64_t)c0->n; i++) {
			if (integral) {
				int64_t s = 0;
				for (int r = 0; r < w; r++)
					s += tpf_elem_load_int(c0->dtype, h->calls[r].send, i);
				tpf_elem_store_int(c0->dtype, tmp, i, s);
			} else {
				double s = 0;
				for (int r = 0; r < w; r++)
					s += tpf_elem_load(c0->dtype, h->calls[r].send, i);
				tpf_elem_store(c0->dtype, tmp, i, s, 0);
			}
		}
		for (int r = 0; r < w; r++)
			if (bytes)
				memcpy(h->calls[r].recv, tmp, bytes);
		free(tmp);
		return TPF_OK;
	}
	if (c0->kind == C_BROADCAST) {
		if (c0->root < 0 || c0->root >= w)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: root %d outside world size %d",
					     c0->root, w);
		for (int r = 0; r < w; r++)
			if (r != c0->root && bytes)
				memmove(h->calls[r].recv, h->calls[c0->root].recv, bytes);
		return TPF_OK;
	}
	/* allgather: every rank receives send(0), send(1), ...; alltoall: rank j
	 * receives chunk j of send(0), chunk j of send(1), ... (bytes each) */
	if (bytes > SIZE_MAX / (size_t)(w * w))
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s of %zu bytes is too large", coll_name[c0->kind],
				     bytes);
	total = bytes * (size_t)w * (size_t)w;
	tmp = malloc(total ? total : 1);
	if (!tmp)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	for (int j = 0; j < w && bytes; j++)
		for (int i = 0; i < w; i++) {
			const unsigned char *src = h->calls[i].send;
			if (c0->kind == C_ALLTOALL)
				src += (size_t)j * bytes;
			memcpy(tmp + ((size_t)j * (size_t)w + (size_t)i) * bytes, src, bytes);
		}
	for (int j = 0; j < w && bytes; j++)
		memcpy(h->calls[j].recv, tmp + (size_t)j * (size_t)w * bytes, bytes * (size_t)w);
	free(tmp);
	return TPF_OK;
}

/* Called by a rank that holds the baton. */
static enum tpf_status hub_collective(struct tpf_comm *c, const struct call *call, struct tpf_diag *d)
{
	struct hub *h = ((struct hub_comm *)c->impl)->hub;
	const int me = c->rank;
	char a[160], b[160];

	if (h->aborted)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s on rank %d: the run was aborted",
				     coll_name[call->kind], me);
	h->calls[me] = *call;
	h->arrived++;
	if (h->arrived < h->world) {
		uint64_t round = h->round;
		h->waiting[me] = 1;
		for (;;) {
			int peer_left = 0;
			for (int r = 0; r < h->world; r++)
				peer_left |= r != me && h->left[r];
			if (h->round != round || h->aborted || peer_left)
				break;
			pthread_cond_wait(&h->cv, &h->mu);
		}
		h->waiting[me] = 0;
		if (h->round != round)
			return h->round_status ? tpf_diag_fail(d, h->round_status, "%s on rank %d failed",
							       coll_name[call->kind], me)
					       : TPF_OK;
		if (!h->aborted) {
			/* the other rank finished without an error while this one waits */
			describe(call, me, a, sizeof(a));
			snprintf(h->finding, sizeof(h->finding),
				 "a rank finished its run while the other waits in a collective (%s)", a);
			h->aborted = 1;
			pthread_cond_broadcast(&h->cv);
		}
		return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s on rank %d: the run was aborted",
				     coll_name[call->kind], me);
	}
	/* the last one in: both must ask for the same collective */
	for (int r = 1; r < h->world; r++)
		if (!same_call(&h->calls[r], &h->calls[0])) {
			describe(&h->calls[0], 0, a, sizeof(a));
			describe(&h->calls[r], r, b, sizeof(b));
			snprintf(h->finding, sizeof(h->finding), "the ranks call different collectives (%s; %s)",
				 a, b);
			h->aborted = 1;
			pthread_cond_broadcast(&h->cv);
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "ranks disagree on a collective");
		}
	enum tpf_status st = hub_move(h, d);
	h->round_status = st;
	h->arrived = 0;
	h->round++;
	pthread_cond_broadcast(&h->cv);
	return st;
}

static enum tpf_status hub_allreduce(struct tpf_comm *c, const void *send, void *recv, size_t count,
				     enum tpf_dtype dtype, void *stream, struct tpf_diag *d)
{
	struct call k = {C_ALLREDUCE, send, recv, count, dtype, 0};
	return hub_collective(c, &k, d);
}

static enum tpf_status hub_allgather(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				     void *stream, struct tpf_diag *d)
{
	struct call k = {C_ALLGATHER, send, recv, bytes, TPF_DTYPE_UNDEFINED, 0};
	return hub_collective(c, &k, d);
}

static enum tpf_status hub_alltoall(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				    void *stream, struct tpf_diag *d)
{
	struct call k = {C_ALLTOALL, send, recv, bytes, TPF_DTYPE_UNDEFINED, 0};
	return hub_collective(c, &k, d);
}

static enum tpf_status hub_broadcast(struct tpf_comm *c, void *buf, size_t bytes, int root, void *stream,
				     struct tpf_diag *d)
{
	struct call k = {C_BROADCAST, buf, buf, bytes, TPF_DTYPE_UNDEFINED, root};
	return hub_collective(c, &k, d);
}

static enum tpf_status hub_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	struct call k = {C_BARRIER, NULL, NULL, 0, TPF_DTYPE_UNDEFINED, 0};
	return hub_collective(c, &k, d);
}

static void hub_abort(struct tpf_comm *c, int code)
{
	struct hub *h = ((struct hub_comm *)c->impl)->hub;
	h->aborted = 1;
	pthread_cond_broadcast(&h->cv);
}

static void hub_destroy(struct tpf_comm *c)
{
	free(c->impl);
	free(c);
}

static const struct tpf_comm_ops hub_ops = {
	.name = "fuzz-hub",
	.allreduce_sum = hub_allreduce,
	.allgather = hub_allgather,
	.alltoall = hub_alltoall,
	.broadcast = hub_broadcast,
	.barrier = hub_barrier,
	.abort = hub_abort,
	.destroy = hub_destroy,
};

static struct tpf_comm *hub_comm_create(struct hub *h, int rank)
{
	struct tpf_comm *c = calloc(1, sizeof(*c));
	struct hub_comm *hc = calloc(1, sizeof(*hc));
	if (!c || !hc) {
		free(c);
		free(hc);
		return NULL;
	}
	hc->hub = h;
	c->ops = &hub_ops;
	c->rank = rank;
	c->world = h->world;
	c->local_rank = rank;
	c->timeout_s = 60;
	c->impl = hc;
	return c;
}

/* ------------------------------------------------------------ inputs */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static void release_inputs(struct tpf_host_tensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].data);
	free(t);
}

/* Inputs for every graph input without a default; -1 when the model's
 * inputs cannot be made (no declared type) or exceed the bounds. */
static int make_inputs(const struct tpf_graph *g, int64_t sym_dim, uint64_t seed,
		       struct tpf_host_tensor **out, size_t *count)
{
	struct tpf_host_tensor *arr = calloc(g->n_inputs + 1, sizeof(*arr));
	size_t n = 0;
	int64_t total = 0;

	if (!arr)
		return -1;
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (v->init)
			continue;
		struct tpf_host_tensor *t = &arr[n++];
		if (v->type.kind != TPF_TYPE_TENSOR || v->type.shape.rank < 0 ||
		    v->type.shape.rank > TPF_KERNEL_MAX_RANK || v->type.dtype == TPF_DTYPE_UNDEFINED ||
		    v->type.dtype == TPF_DTYPE_STRING)
			goto fail;
		t->name = v->name; /* borrowed: the model outlives the inputs */
		t->dtype = v->type.dtype;
		t->rank = v->type.shape.rank;
		int64_t numel = 1;
		for (int k = 0; k < t->rank; k++) {
			const struct tpf_dim *dim = &v->type.shape.dims[k];
			t->dims[k] = dim->value >= 0 && !dim->param ? dim->value : sym_dim;
			if (t->dims[k] > MAX_INPUT_ELEMS)
				goto fail;
			numel *= t->dims[k];
			if (numel > MAX_INPUT_ELEMS)
				goto fail;
		}
		total += numel;
		size_t nb;
		if (total > MAX_TOTAL_ELEMS || tpf_host_tensor_bytes(t, &nb) || !(t->data = calloc(nb ? nb : 1, 1)))
			goto fail;
		t->nbytes = nb;
		for (int64_t k = 0; k < numel; k++) {
			uint64_t r = rng_next(&seed);
			if (tpf_dtype_is_integral(t->dtype))
				tpf_elem_store_int(t->dtype, t->data, k, (int64_t)(r % 4));
			else
				tpf_elem_store(t->dtype, t->data, k, (double)(r >> 11) * 0x1p-52 - 1.0, 1);
		}
	}
	*out = arr;
	*count = n;
	return 0;
fail:
	release_inputs(arr, n);
	return -1;
}

/* ------------------------------------------------------------ one rank */

struct rank_job {
	struct tpf_model *model;
	struct tpf_comm *comm;
	struct hub *hub; /* NULL at world size 1 */
	const struct tpf_host_tensor *in;
	size_t n_in;
	char finding[512];
};

static enum tpf_status check_outputs(struct rank_job *j, const struct tpf_host_tensor *out, size_t n)
{
	if (n != j->model->graph->n_outputs) {
		snprintf(j->finding, sizeof(j->finding), "rank %d: a run returned %zu outputs for %zu graph outputs",
			 j->comm->rank, n, j->model->graph->n_outputs);
		return TPF_ERR_INVALID;
	}
	for (size_t i = 0; i < n; i++) {
		size_t nb;
		if (tpf_host_tensor_bytes(&out[i], &nb) || nb != out[i].nbytes) {
			snprintf(j->finding, sizeof(j->finding),
				 "rank %d: output '%s' has %zu bytes, not what its dtype %s and %d dims take",
				 j->comm->rank, out[i].name, out[i].nbytes, tpf_dtype_name(out[i].dtype), out[i].rank);
			return TPF_ERR_INVALID;
		}
	}
	return TPF_OK;
}

struct snapshot {
	struct tpf_host_tensor *t;
	size_t n;
};

static int take_snapshot(struct snapshot *s, const struct tpf_host_tensor *out, size_t n)
{
	s->t = calloc(n + 1, sizeof(*s->t));
	s->n = 0;
	if (!s->t)
		return -1;
	for (size_t i = 0; i < n; i++) {
		s->t[i] = out[i];
		s->t[i].data = malloc(out[i].nbytes ? out[i].nbytes : 1);
		if (!s->t[i].data)
			return -1;
		s->n++;
		if (out[i].nbytes)
			memcpy(s->t[i].data, out[i].data, out[i].nbytes);
	}
	return 0;
}

static void free_snapshot(struct snapshot *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->t[i].data);
	free(s->t);
}

static void rank_run(struct rank_job *j)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	struct tpf_session_options so = {.backend = TPF_BACKEND_CPU, .comm = j->comm};
	const struct tpf_host_tensor *out = NULL;
	size_t n_out = 0;
	struct snapshot snap = {0};
	enum tpf_status st;

	so.plan.fold_max_elements = FOLD_MAX_ELEMS;
	if (!d) {
		tpf_comm_abort(j->comm, 1);
		return;
	}
	d->max_entries = 64;
	st = tpf_session_create(j->model, &so, &s, d);
	if (!st)
		st = tpf_session_run(s, j->in, j->n_in, &out, &n_out, d);
	if (!st)
		st = check_outputs(j, out, n_out);
	if (!st && take_snapshot(&snap, out, n_out))
		st = TPF_ERR_NOMEM;
	/* the plan is kept, the arena holds what the first run left */
	if (!st)
		st = tpf_session_run(s, j->in, j->n_in, &out, &n_out, d);
	if (!st)
		st = check_outputs(j, out, n_out);
	for (size_t i = 0; !st && i < n_out; i++)
		if (out[i].dtype != snap.t[i].dtype || out[i].rank != snap.t[i].rank ||
		    out[i].nbytes != snap.t[i].nbytes ||
		    memcmp(out[i].dims, snap.t[i].dims, sizeof(out[i].dims[0]) * (size_t)out[i].rank) ||
		    (out[i].nbytes && memcmp(out[i].data, snap.t[i].data, out[i].nbytes))) {
			snprintf(j->finding, sizeof(j->finding),
				 "rank %d: a second run on the same inputs returned other values for output '%s'",
				 j->comm->rank, out[i].name);
			st = TPF_ERR_INVALID;
		}
	free_snapshot(&snap);
	if (!st && verbose)
		fprintf(stderr, "---- rank %d of %d: ran twice, same outputs\n", j->comm->rank, j->comm->world);
	if (st) {
		if (verbose)
			fprintf(stderr, "---- rank %d of %d: %s\n", j->comm->rank, j->comm->world,
				tpf_status_name(st));
		note("its messages:", d);
		/* as `tpfuse run` does: no peer may wait for this rank */
		tpf_comm_abort(j->comm, 1);
	}
	tpf_session_free(s);
	tpf_diag_free(d);
}

static void *rank_thread(void *arg)
{
	struct rank_job *j = arg;
	pthread_mutex_lock(&j->hub->mu);
	rank_run(j);
	j->hub->left[j->comm->rank] = 1;
	pthread_cond_broadcast(&j->hub->cv);
	pthread_mutex_unlock(&j->hub->mu);
	return NULL;
}

/* ------------------------------------------------------------ one world size */

/* Loads the model for one rank: verified, shapes inferred, metadata set to
 * the rank; with `optimize`, through the default pipeline.  NULL when it
 * does not get that far. */
static struct tpf_model *load_rank(const uint8_t *data, size_t size, int rank, int world, int optimize)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	char text[16];

	if (!d)
		return NULL;
	d->max_entries = 64;
	if (tpf_model_load_memory(data, size, NULL, NULL, &m, d) || tpf_model_verify(m, d) ||
	    tpf_model_infer_shapes(m, d) || tpf_model_verify(m, d))
		goto fail;
	if (m->graph->n_nodes > MAX_NODES)
		goto fail;
	snprintf(text, sizeof(text), "%d", world);
	if (tpf_model_set_metadata(m, "tp_world_size", text))
		goto fail;
	if (optimize) {
		/* Every rank optimizes the model for the rank it was made for (its
		 * tp_rank, else 0), so that all ranks get the same structure: there
		 * is one model, not one shard per rank. */
		const char *own = tpf_model_metadata(m, "tp_rank");
		int made_for = own && own[0] >= '0' && own[0] < '0' + world && !own[1] ? own[0] - '0' : 0;
		struct tpf_pipeline_options po = {.passes = "default"};
		snprintf(text, sizeof(text), "%d", made_for);
		if (tpf_model_set_metadata(m, "tp_rank", text))
			goto fail;
		po.ctx.rank = made_for;
		po.ctx.world_size = world;
		if (tpf_pipeline_run(m, &po, d))
			goto fail;
		tpf_diag_clear(d);
		/* fuzz-model holds the pipeline to this promise; here it only gates */
		if (tpf_model_verify(m, d) || tpf_model_infer_shapes(m, d))
			goto fail;
	}
	snprintf(text, sizeof(text), "%d", rank);
	if (tpf_model_set_metadata(m, "tp_rank", text))
		goto fail;
	tpf_diag_free(d);
	return m;
fail:
	note("not run: the model does not load, verify or go through the pipeline", d);
	tpf_model_free(m);
	tpf_diag_free(d);
	return NULL;
}

/* Builds each rank's plan alone: 0 when the sessions may run (every plan
 * within the bounds, or failing, which the sessions must then report). */
static int plans_within_bounds(struct tpf_model **m, int world, const struct tpf_host_tensor *in, size_t n_in)
{
	int ok = 1;
	for (int r = 0; r < world && ok; r++) {
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_plan *p = NULL;
		struct tpf_plan_options po = {.backend = TPF_BACKEND_CPU, .rank = r, .world = world,
					      .fold_max_elements = FOLD_MAX_ELEMS};
		if (!d)
			return -1;
		d->max_entries = 64;
		if (tpf_plan_build(m[r], in, n_in, &po, &p, d) == TPF_OK) {
			struct tpf_plan_stats st;
			tpf_plan_get_stats(p, &st);
			if (st.unshared_bytes > MAX_PLAN_BYTES || st.constant_bytes > MAX_PLAN_BYTES ||
			    st.n_steps > MAX_STEPS) {
				note("not run: the plan is over the bounds", NULL);
				ok = 0;
			}
		} else {
			note("the plan fails (the sessions must say so too):", d);
		}
		tpf_plan_free(p);
		tpf_diag_free(d);
	}
	return ok ? 0 : -1;
}

static void run_world(const uint8_t *data, size_t size, int world, int optimize, int64_t sym_dim,
		      uint64_t seed)
{
	struct tpf_model *m[WORLD_MAX] = {NULL};
	struct rank_job job[WORLD_MAX];
	struct tpf_host_tensor *in = NULL;
	size_t n_in = 0;
	struct hub hub;
	char finding[1024] = "";

	memset(job, 0, sizeof(job));
	for (int r = 0; r < world; r++)
		if (!(m[r] = load_rank(data, size, r, world, optimize)))
			goto out;
	if (make_inputs(m[0]->graph, sym_dim, seed, &in, &n_in)) {
		note("not run: inputs without a declared tensor type, or over the bounds", NULL);
		goto out;
	}
	if (plans_within_bounds(m, world, in, n_in))
		goto out;
	if (world == 1) {
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_comm *c = NULL;
		if (d && tpf_comm_create_self(NULL, &c, d) == TPF_OK) {
			job[0] = (struct rank_job){.model = m[0], .comm = c, .in = in, .n_in = n_in};
			rank_run(&job[0]);
			snprintf(finding, sizeof(finding), "%s", job[0].finding);
		}
		tpf_comm_free(c);
		tpf_diag_free(d);
		goto out;
	}

	memset(&hub, 0, sizeof(hub));
	hub.world = world;
	pthread_mutex_init(&hub.mu, NULL);
	pthread_cond_init(&hub.cv, NULL);
	pthread_t th[WORLD_MAX];
	int started = 0;
	for (int r = 0; r < world; r++) {
		job[r] = (struct rank_job){.model = m[r], .comm = hub_comm_create(&hub, r), .hub = &hub,
					   .in = in, .n_in = n_in};
		if (!job[r].comm || pthread_create(&th[r], NULL, rank_thread, &job[r])) {
			/* no thread for this rank: the others must not wait for it */
			pthread_mutex_lock(&hub.mu);
			hub.aborted = 1;
			hub.left[r] = 1;
			pthread_cond_broadcast(&hub.cv);
			pthread_mutex_unlock(&hub.mu);
			break;
		}
		started++;
	}
	for (int r = 0; r < started; r++)
		pthread_join(th[r], NULL);
	for (int r = 0; r < world; r++)
		tpf_comm_free(job[r].comm);
	pthread_cond_destroy(&hub.cv);
	pthread_mutex_destroy(&hub.mu);
	if (hub.finding[0])
		snprintf(finding, sizeof(finding), "%s", hub.finding);
	for (int r = 0; r < world && !finding[0]; r++)
		if (job[r].finding[0])
			snprintf(finding, sizeof(finding), "%s", job[r].finding);
out:
	release_inputs(in, n_in);
	for (int r = 0; r < world; r++)
		tpf_model_free(m[r]);
	if (finding[0]) {
		fprintf(stderr, "fuzz-session: world size %d%s: %s\n", world, optimize ? ", optimized" : "",
			finding);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (verbose < 0)
		verbose = getenv("TPF_FUZZ_VERBOSE") != NULL;
	if (size < 1)
		return 0;
	uint8_t cfg = data[0];
	int worlds = cfg & 3;
	int optimize = (cfg >> 2) & 1;
	int64_t sym_dim = 1 + ((cfg >> 3) & 3);
	uint64_t seed = (uint64_t)(cfg >> 5) + 1;

	if (cfg >> 7) {
		setenv("TPF_CPU_COPY_CONSTANTS", "1", 1);
		setenv("TPF_GEMV_TILED", "16", 1);
	}
	if (worlds != 2)
		run_world(data + 1, size - 1, 1, optimize, sym_dim, seed);
	if (worlds != 1)
		run_world(data + 1, size - 1, 2, optimize, sym_dim, seed);
	unsetenv("TPF_CPU_COPY_CONSTANTS");
	unsetenv("TPF_GEMV_TILED");
	return 0;
}
