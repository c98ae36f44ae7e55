/* SPDX-License-Identifier: MIT */
/* `tpfuse tune`: measures, on the GPUs of an NCCL communicator, every path
 * of the all-reduce kinds the runtime chooses among (NCCL + the fused
 * op's post kernel, one-shot, two-shot through peer memory) over hidden
 * sizes and token counts, and makes a strategy table of the fastest
 * (runtime/strategy.c).  Each time: 20 calls captured in one CUDA graph,
 * the best of `replays` launches, the slowest rank's.  Going up the token
 * counts, a path keeps its place while it is within 3% of the fastest, so
 * every chosen path is within 3% of the fastest measured one. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime-internal.h"
#include "tpf-cuda-runtime.h"
#include "cuda/tpf-cuda.h"

#define CALLS_PER_GRAPH 20
#define TPF_TUNE_MARGIN 0.03

struct tune {
	struct tpf_comm *comm;
	cudaStream_t s;
	struct tpf_diag *d;
	int replays;
	enum tpf_dtype dt;
};

typedef enum tpf_status (*tune_body)(struct tune *t, void *ctx);

static enum tpf_status cuda_err(struct tpf_diag *d, const char *what, cudaError_t e)
{
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "tune: %s: %s", what, cudaGetErrorString(e));
}

/* Microseconds per call of body (slowest rank), or a failure. */
static enum tpf_status time_graph(struct tune *t, tune_body body, void *ctx, double *us)
{
	enum tpf_status st = TPF_OK;
	cudaGraph_t g = NULL;
	cudaGraphExec_t ge = NULL;
	cudaEvent_t e0 = NULL, e1 = NULL;
	cudaError_t e;
	/* one eager call first (set-up, first-use costs) */
	if ((st = body(t, ctx)))
		return st;
	if ((e = cudaStreamSynchronize(t->s)) != cudaSuccess)
		return cuda_err(t->d, "warm-up", e);
	if ((e = cudaStreamBeginCapture(t->s, cudaStreamCaptureModeThreadLocal)) != cudaSuccess)
		return cuda_err(t->d, "capture", e);
	for (int i = 0; i < CALLS_PER_GRAPH && !st; i++)
		st = body(t, ctx);
	e = cudaStreamEndCapture(t->s, &g);
	if (st)
		goto out;
	if (e != cudaSuccess || (e = cudaGraphInstantiate(&ge, g, 0)) != cudaSuccess) {
		st = cuda_err(t->d, "graph", e);
		goto out;
	}
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float best = 0;
	for (int r = 0; r < t->replays + 1; r++) {
		cudaEventRecord(e0, t->s);
		cudaGraphLaunch(ge, t->s);
		cudaEventRecord(e1, t->s);
		if ((e = cudaEventSynchronize(e1)) != cudaSuccess) {
			st = cuda_err(t->d, "replay", e);
			goto out;
		}
		float ms = 0;
		cudaEventElapsedTime(&ms, e0, e1);
		if (r > 0 && (best == 0 || ms < best)) /* the first launch uploads the graph */
			best = ms;
	}
	/* the slowest rank's time */
	double mine = 1000.0 * best / CALLS_PER_GRAPH, *all = tpf_calloc((size_t)t->comm->world, sizeof(double));
	if (!all) {
		st = tpf_diag_fail(t->d, TPF_ERR_NOMEM, "tune: out of memory");
		goto out;
	}
	if ((st = t->comm->ops->allgather(t->comm, &mine, all, sizeof(mine), NULL, t->d)) == TPF_OK) {
		*us = 0;
		for (int q = 0; q < t->comm->world; q++)
			*us = all[q] > *us ? all[q] : *us;
	}
	tpf_free(all);
out:
	if (ge)
		cudaGraphExecDestroy(ge);
	if (g)
		cudaGraphDestroy(g);
	if (e0)
		cudaEventDestroy(e0);
	if (e1)
		cudaEventDestroy(e1);
	return st;
}

struct case_bufs {
	struct tpf_cuda_arnorm *ar;
	struct tpf_cuda_norm_args a; /* the fused call (x: this rank's partial) */
	void *reduced;               /* NCCL's result */
	size_t n;
	int bare;                    /* a bare all-reduce: no norm */
	enum tpf_cuda_ar_path path;
};

static enum tpf_status body_nccl(struct tune *t, void *ctx)
{
	struct case_bufs *c = ctx;
	return t->comm->ops->allreduce_sum(t->comm, c->a.x, c->reduced, c->n, c->a.dtype, t->s, t->d);
}

static enum tpf_status body_nccl_post(struct tune *t, void *ctx)
{
	struct case_bufs *c = ctx;
	enum tpf_status st = body_nccl(t, ctx);
	if (st || c->bare)
		return st;
	struct tpf_cuda_norm_args post = c->a;
	post.x = c->reduced;
	return tpf_cuda_add_rmsnorm(&post, t->s, t->d);
}

static enum tpf_status body_peer(struct tune *t, void *ctx)
{
	struct case_bufs *c = ctx;
	struct tpf_cuda_norm_args a = c->a;
	a.path = c->path;
	if (c->bare) { /* the sum only, as a bare all-reduce runs */
		a.residual = a.gamma = NULL;
		a.norm_out = a.fp8_out = NULL;
		a.residual_out = c->reduced;
	}
	return tpf_cuda_arnorm_run(c->ar, &a, t->s, t->d);
}

static enum tpf_status dev_alloc(struct tpf_diag *d, void **p, size_t bytes)
{
	cudaError_t e = cudaMalloc(p, bytes ? bytes : 16);
	if (e == cudaSuccess)
		e = cudaMemset(*p, 0, bytes ? bytes : 16);
	return e == cudaSuccess ? TPF_OK : cuda_err(d, "buffers", e);
}

static int host_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
	struct tpf_comm *c = ctx;
	return c->ops->allgather(c, send, recv, bytes, NULL, NULL) != TPF_OK;
}

/* Small positive bfloat16 values (no NaN, no -0.0). */
static void fill_host(uint16_t *h, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		h[i] = (uint16_t)(0x3c00u | ((seed >> 16) & 0x3ffu)); /* about 0.008 .. 0.03 */
	}
}

enum tpf_status tpf_tune_collectives(struct tpf_comm *comm, const struct tpf_tune_options *o,
				     struct tpf_strategy_table **out, struct tpf_diag *d)
{
	*out = NULL;
	if (!comm || comm->world < 2 || strcmp(comm->ops->name, "nccl") != 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "tune: needs an NCCL communicator of two or more ranks (mpirun -np N tpfuse tune)");
	if (o->n_hiddens == 0 || o->n_tokens == 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tune: no hidden sizes or token counts");
	int64_t max_elems = 0;
	for (size_t i = 0; i < o->n_hiddens; i++) {
		if (o->hiddens[i] <= 0 || o->hiddens[i] % 8 || o->hiddens[i] > 16384)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "tune: hidden size %lld: expected a multiple of 8 up to 16384",
					     (long long)o->hiddens[i]);
		for (size_t j = 0; j < o->n_tokens; j++) {
			if (o->tokens[j] <= 0 || o->tokens[j] > 65536)
				return tpf_diag_fail(d, TPF_ERR_INVALID, "tune: token count %lld: expected 1..65536",
						     (long long)o->tokens[j]);
			if (o->hiddens[i] * o->tokens[j] > max_elems)
				max_elems = o->hiddens[i] * o->tokens[j];
		}
	}
	struct tpf_comm_hosts hosts;
	char why[256];
	tpf_comm_hosts(comm, &hosts);
	if (!tpf_comm_hosts_peer_ok(&hosts, NULL, why, sizeof(why)))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "tune: the peer-memory paths it times need every rank "
				     "on one host (%s)", why);
	struct tune t = {.comm = comm, .d = d, .replays = o->replays > 0 ? o->replays : 10,
			 .dt = TPF_DTYPE_BFLOAT16};
	cudaError_t e;
	if ((e = cudaStreamCreateWithFlags(&t.s, cudaStreamNonBlocking)) != cudaSuccess)
		return cuda_err(d, "stream", e);
	struct tpf_strategy_table *tab = tpf_calloc(1, sizeof(*tab));
	size_t n_kinds = 3, cap = o->n_hiddens * o->n_tokens * n_kinds;
	struct case_bufs c;
	memset(&c, 0, sizeof(c));
	void *x = NULL, *res = NULL, *gamma = NULL, *norm = NULL, *sum = NULL, *q = NULL, *red = NULL;
	uint16_t *h = NULL;
	enum tpf_status st = TPF_OK;
	if (!tab || !(tab->rows = tpf_calloc(cap, sizeof(*tab->rows))) ||
	    !(h = tpf_malloc((size_t)max_elems * 2))) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "tune: out of memory");
		goto out;
	}
	snprintf(tab->source, sizeof(tab->source), "tpfuse tune");
	size_t bytes = (size_t)max_elems * 2;
	if ((st = dev_alloc(d, &x, bytes)) || (st = dev_alloc(d, &res, bytes)) || (st = dev_alloc(d, &gamma, 16384 * 2)) ||
	    (st = dev_alloc(d, &norm, bytes)) || (st = dev_alloc(d, &sum, bytes)) || (st = dev_alloc(d, &q, bytes)) ||
	    (st = dev_alloc(d, &red, bytes)))
		goto out;
	fill_host(h, (size_t)max_elems, 17u + (unsigned)comm->rank);
	cudaMemcpy(x, h, bytes, cudaMemcpyHostToDevice);
	fill_host(h, (size_t)max_elems, 5u);
	cudaMemcpy(res, h, bytes, cudaMemcpyHostToDevice);
	cudaMemcpy(gamma, h, 16384 * 2, cudaMemcpyHostToDevice);
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = comm};
	if ((st = tpf_cuda_arnorm_create(comm->rank, comm->world, t.dt, (size_t)max_elems, &ex, &c.ar, d)))
		goto out;
	tpf_cuda_arnorm_set_timeout(c.ar, comm->timeout_s);
	if (o->log && comm->rank == 0)
		fprintf(o->log, "# %-22s %6s %6s %9s %9s %9s %9s  %s\n", "kind", "hidden", "tokens", "nccl_ar",
			"nccl+post", "oneshot", "twoshot", "fastest");
	static const enum tpf_coll_kind kinds[] = {TPF_COLL_ALLREDUCE, TPF_COLL_ARNORM, TPF_COLL_ARNORM_FP8};
	for (size_t ki = 0; ki < n_kinds && !st; ki++) {
		for (size_t hi = 0; hi < o->n_hiddens && !st; hi++) {
			enum tpf_coll_path run_path = TPF_PATH_NCCL;
			int64_t run_end = 0;
			int have_run = 0;
			for (size_t ti = 0; ti < o->n_tokens && !st; ti++) {
				int64_t H = o->hiddens[hi], T = o->tokens[ti];
				memset(&c.a, 0, sizeof(c.a));
				c.a.dtype = t.dt;
				c.a.rows = T;
				c.a.hidden = H;
				c.a.x = x;
				c.a.residual = res;
				c.a.gamma = gamma;
				c.a.epsilon = 1e-6f;
				c.a.residual_out = sum;
				if (kinds[ki] == TPF_COLL_ARNORM_FP8) {
					c.a.fp8_out = q;
					c.a.fp8_scale = 0.05f;
				} else {
					c.a.norm_out = norm;
				}
				c.reduced = red;
				c.n = (size_t)(H * T);
				c.bare = kinds[ki] == TPF_COLL_ALLREDUCE;
				double t_nccl = 0, t_post = 0, t_one = 0, t_two = 0;
				if ((st = time_graph(&t, body_nccl, &c, &t_nccl)) ||
				    (st = time_graph(&t, body_nccl_post, &c, &t_post)))
					break;
				c.path = TPF_CUDA_AR_ONESHOT;
				if ((st = time_graph(&t, body_peer, &c, &t_one)))
					break;
				c.path = TPF_CUDA_AR_TWOSHOT;
				if ((st = time_graph(&t, body_peer, &c, &t_two)))
					break;
				enum tpf_coll_path best = TPF_PATH_NCCL;
				double best_t = t_post;
				if (t_one < best_t)
					best = TPF_PATH_ONESHOT, best_t = t_one;
				if (t_two < best_t)
					best = TPF_PATH_TWOSHOT, best_t = t_two;
				/* the path of the smaller sizes holds while it is within
				 * TPF_TUNE_MARGIN of the fastest: measurement noise does not
				 * make the table flip back and forth */
				double held = run_path == TPF_PATH_NCCL ? t_post : run_path == TPF_PATH_ONESHOT ? t_one : t_two;
				if (have_run && held <= best_t * (1.0 + TPF_TUNE_MARGIN))
					best = run_path;
				if (o->log && comm->rank == 0)
					fprintf(o->log, "# %-22s %6lld %6lld %9.2f %9.2f %9.2f %9.2f  %s\n",
						tpf_coll_kind_name(kinds[ki]), (long long)H, (long long)T, t_nccl, t_post,
						t_one, t_two, tpf_coll_path_name(best));
				if (have_run && best != run_path) {
					tab->rows[tab->n++] = (struct tpf_strategy_row){comm->world, kinds[ki], H, run_end,
											 run_path};
				}
				run_path = best;
				run_end = T;
				have_run = 1;
			}
			if (have_run && !st)
				tab->rows[tab->n++] = (struct tpf_strategy_row){comm->world, kinds[ki], o->hiddens[hi], -1,
										 run_path};
		}
	}
	if (!st) {
		e = cudaStreamSynchronize(t.s);
		if (e != cudaSuccess)
			st = cuda_err(d, "sync", e);
		else
			st = tpf_cuda_arnorm_check(c.ar, d);
	}
out:
	tpf_cuda_arnorm_free(c.ar);
	cudaFree(x), cudaFree(res), cudaFree(gamma), cudaFree(norm), cudaFree(sum), cudaFree(q), cudaFree(red);
	tpf_free(h);
	cudaStreamDestroy(t.s);
	if (st) {
		tpf_strategy_free(tab);
		return st;
	}
	*out = tab;
	return TPF_OK;
}
