/* SPDX-License-Identifier: MIT */
/*
 * Decode-step benchmark of one model per rank on the runtime's plan, with
 * the step's device time alone: inputs (the new token's hidden state and the
 * KV cache) are uploaded once, then the plan's steps run N times back to
 * back, launched eagerly and (CUDA) as one captured graph; the time per step
 * is the wall time of N steps divided by N after the device has drained.
 * Every rank runs; rank 0 prints one JSON line per mode.
 *
 *   mpirun -np 2 bench-decode 'dense.rank{rank}.onnx' --backend cuda \
 *          --iters 200 --warmup 20 --label batch=8
 *
 * Under mpirun the communicator is NCCL for --backend cuda, MPI otherwise.
 * Inputs are random (floats in [-1, 1), integers 0), from --seed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime-internal.h"
#ifdef TPF_HAVE_CUDA
#include "tpf-cuda-runtime.h"
#endif

struct bench {
	struct tpf_plan *plan;
	struct tpf_device *dev;
	struct tpf_comm *comm;
	void *arena;
	void **vdata;
	struct tpf_ktensor **kin, **kout;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static enum tpf_status run_steps(void *ctx, struct tpf_diag *d)
{
	struct bench *b = ctx;
	struct tpf_plan *p = b->plan;
	struct tpf_comm *c = b->comm;
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		struct tpf_ktensor *in = b->kin[k], *out = b->kout[k];
		enum tpf_status rc;
		switch (st->kind) {
		case RT_STEP_KERNEL: {
			struct tpf_kernel_call call = {.node = st->node, .opset = p->opset, .in = in,
						       .n_in = st->n_in, .out = out, .n_out = st->n_out,
						       .stream = b->dev->stream, .rank = c->rank,
						       .world = c->world, .diag = d};
			rc = st->kernel->run(&call);
			break;
		}
		case RT_STEP_ALLREDUCE:
			rc = c->ops->allreduce_sum(c, in[0].data, out[0].data, (size_t)in[0].numel, in[0].dtype,
						   b->dev->stream, d);
			break;
		case RT_STEP_ALLGATHER:
			rc = c->ops->allgather(c, in[0].data, out[0].data, in[0].nbytes, b->dev->stream, d);
			break;
		case RT_STEP_ALLTOALL:
			rc = c->ops->alltoall(c, in[0].data, out[0].data, in[0].nbytes / (size_t)c->world,
					      b->dev->stream, d);
			break;
		default:
			rc = TPF_ERR_INVALID;
		}
		if (rc)
			return rc;
	}
	return TPF_OK;
}

static void *value_data(struct bench *b, int idx)
{
	const struct rt_value *r = &b->plan->values[idx];
	if (r->known)
		return b->vdata[idx];
	if (r->buffer < 0)
		return NULL;
	return (char *)b->arena + b->plan->buffers[r->buffer].offset;
}

/* Device memory, constants and operand arrays, as a session binds them. */
static enum tpf_status bind(struct bench *b, struct tpf_diag *d)
{
	struct tpf_plan *p = b->plan;
	b->arena = b->dev->alloc(b->dev, p->arena_bytes ? p->arena_bytes : 64);
	b->vdata = calloc(p->n_values + 1, sizeof(void *));
	b->kin = calloc(p->n_steps + 1, sizeof(*b->kin));
	b->kout = calloc(p->n_steps + 1, sizeof(*b->kout));
	if (!b->arena || !b->vdata || !b->kin || !b->kout)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory (arena %zu bytes)", p->arena_bytes);
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (!r->known)
			continue;
		if (b->dev->kind == TPF_BACKEND_CPU) {
			b->vdata[i] = r->host;
			continue;
		}
		b->vdata[i] = b->dev->alloc(b->dev, r->t.nbytes ? r->t.nbytes : 1);
		if (!b->vdata[i])
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "cannot allocate constant '%s'", r->name);
		enum tpf_status st = b->dev->upload(b->dev, b->vdata[i], r->host, r->t.nbytes, d);
		if (st)
			return st;
	}
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		b->kin[k] = calloc(st->n_in + 1, sizeof(struct tpf_ktensor));
		b->kout[k] = calloc(st->n_out + 1, sizeof(struct tpf_ktensor));
		if (!b->kin[k] || !b->kout[k])
			return TPF_ERR_NOMEM;
		for (size_t i = 0; i < st->n_in; i++) {
			struct tpf_ktensor *t = &b->kin[k][i];
			if (st->ins[i] < 0) {
				t->rank = -1;
				continue;
			}
			const struct rt_value *r = &p->values[st->ins[i]];
			*t = r->t;
			t->data = value_data(b, st->ins[i]);
			t->host = r->known || r->host_hint ? r->host : NULL;
		}
		for (size_t i = 0; i < st->n_out; i++) {
			struct tpf_ktensor *t = &b->kout[k][i];
			if (st->outs[i] < 0) {
				t->rank = -1;
				continue;
			}
			*t = p->values[st->outs[i]].t;
			t->data = value_data(b, st->outs[i]);
		}
	}
	return TPF_OK;
}

static unsigned long long lcg(unsigned long long *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 33;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench-decode MODEL [--backend cpu|cuda] [--iters N] [--warmup N] [--seed S]\n"
			"                    [--label TEXT] [--no-graph] [--timeout S]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *label = "", *backend_name = "cuda";
	long iters = 100, warmup = 10;
	unsigned long long seed = 1;
	int no_graph = 0;
	double timeout = 60;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--backend") && v)
			backend_name = argv[++i];
		else if (!strcmp(a, "--iters") && v)
			iters = atol(argv[++i]);
		else if (!strcmp(a, "--warmup") && v)
			warmup = atol(argv[++i]);
		else if (!strcmp(a, "--seed") && v)
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(a, "--label") && v)
			label = argv[++i];
		else if (!strcmp(a, "--timeout") && v)
			timeout = atof(argv[++i]);
		else if (!strcmp(a, "--no-graph"))
			no_graph = 1;
		else if (a[0] != '-' && !model)
			model = a;
		else
			return usage();
	}
	enum tpf_backend backend;
	if (!model || iters < 1 || tpf_backend_from_name(backend_name, &backend))
		return usage();
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm_options co = {.timeout_s = timeout};
	struct bench b;
	struct tpf_model *m = NULL;
	struct tpf_host_tensor *in = NULL;
	size_t n_in = 0;
	enum tpf_status st;
	memset(&b, 0, sizeof(b));
	if (tpf_comm_launched_by_mpi()) {
#ifdef TPF_HAVE_NCCL
		st = backend == TPF_BACKEND_CUDA ? tpf_comm_create_nccl(&co, &b.comm, d)
						 : tpf_comm_create_mpi(&co, &b.comm, d);
#else
		st = tpf_comm_create_mpi(&co, &b.comm, d);
#endif
	} else {
		st = tpf_comm_create_self(&co, &b.comm, d);
	}
	if (st)
		goto out;
	char path[4096];
	const char *at = strstr(model, "{rank}");
	if (at)
		snprintf(path, sizeof(path), "%.*s%d%s", (int)(at - model), model, b.comm->rank, at + 6);
	else
		snprintf(path, sizeof(path), "%s", model);
	if ((st = tpf_model_load_file(path, &(struct tpf_load_options){0}, &m, d)) ||
	    (st = tpf_model_infer_shapes(m, d)))
		goto out;
	/* random inputs of the declared (static) shapes */
	const struct tpf_graph *g = m->graph;
	in = calloc(g->n_inputs + 1, sizeof(*in));
	for (size_t i = 0; in && i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (v->init)
			continue;
		struct tpf_host_tensor *t = &in[n_in++];
		t->name = v->name;
		t->dtype = v->type.dtype;
		t->rank = v->type.shape.rank;
		for (int k = 0; k < t->rank; k++)
			t->dims[k] = v->type.shape.dims[k].value > 0 ? v->type.shape.dims[k].value : 1;
		size_t nb;
		if (t->rank < 0 || tpf_host_tensor_bytes(t, &nb)) {
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' has no static shape", v->name);
			goto out;
		}
		t->data = calloc(nb ? nb : 1, 1);
		int64_t n = 1;
		for (int k = 0; k < t->rank; k++)
			n *= t->dims[k];
		for (int64_t e = 0; e < n && !tpf_dtype_is_integral(t->dtype); e++)
			tpf_elem_store(t->dtype, t->data, e, (double)(lcg(&seed) % 2048) / 1024.0 - 1.0, 1);
	}
	struct tpf_plan_options po = {.backend = backend, .rank = b.comm->rank, .world = b.comm->world};
	if ((st = tpf_plan_build(m, in, n_in, &po, &b.plan, d)))
		goto out;
	if ((st = tpf_device_create(backend, b.comm->local_rank, &b.dev, d)) || (st = bind(&b, d)))
		goto out;
	for (size_t i = 0; i < b.plan->n_values; i++) {
		const struct rt_value *r = &b.plan->values[i];
		if (r->is_input && r->buffer >= 0 &&
		    (st = b.dev->upload(b.dev, value_data(&b, (int)i), in[r->input_index].data, r->t.nbytes, d)))
			goto out;
	}
	struct tpf_plan_stats ps;
	tpf_plan_get_stats(b.plan, &ps);
	for (int mode = 0; mode < 2 && !st; mode++) {
		int graph = mode == 1;
		if (graph && (no_graph || backend != TPF_BACKEND_CUDA))
			break;
		for (long it = 0; it < warmup + (graph ? 2 : 0) && !st; it++) {
#ifdef TPF_HAVE_CUDA
			st = graph ? tpf_cuda_device_run_graph(b.dev, 1, run_steps, &b, d) : run_steps(&b, d);
#else
			st = run_steps(&b, d);
#endif
		}
		if (st || (st = b.dev->sync(b.dev, d)) || (st = b.comm->ops->barrier(b.comm, d)))
			break;
		double t0 = now_s();
		for (long it = 0; it < iters && !st; it++) {
#ifdef TPF_HAVE_CUDA
			st = graph ? tpf_cuda_device_run_graph(b.dev, 1, run_steps, &b, d) : run_steps(&b, d);
#else
			st = run_steps(&b, d);
#endif
		}
		if (st || (st = b.dev->sync(b.dev, d)))
			break;
		double us = (now_s() - t0) / (double)iters * 1e6;
		double worst = us;
		/* the slowest rank's time */
		if (b.comm->world > 1) {
			double *all = calloc((size_t)b.comm->world, sizeof(double));
			if (all && !b.comm->ops->allgather(b.comm, &us, all, sizeof(double), NULL, d))
				for (int r = 0; r < b.comm->world; r++)
					worst = all[r] > worst ? all[r] : worst;
			free(all);
		}
		if (b.comm->rank == 0) {
			printf("{\"impl\": \"tpfuse\", \"mode\": \"%s\", \"label\": \"%s\", \"backend\": \"%s\", "
			       "\"world\": %d, \"us_per_step\": %.2f, \"steps\": %zu, \"kernels\": %zu, "
			       "\"collectives\": %zu, \"arena_bytes\": %zu}\n",
			       graph ? "cuda-graph" : "eager", label, backend_name, b.comm->world, worst, ps.n_steps,
			       ps.n_kernel_steps, ps.n_collective_steps, ps.arena_bytes);
			fflush(stdout);
		}
	}
out:
	if (st) {
		tpf_diag_print(d, stderr);
		if (b.comm && b.comm->world > 1)
			tpf_comm_abort(b.comm, 1);
	}
	/* process exit releases device memory */
	if (b.dev)
		tpf_device_free(b.dev);
	if (b.plan)
		tpf_plan_free(b.plan);
	for (size_t i = 0; in && i < n_in; i++)
		free(in[i].data);
	free(in);
	tpf_model_free(m);
	tpf_comm_free(b.comm);
	tpf_diag_free(d);
	return st ? 1 : 0;
}
