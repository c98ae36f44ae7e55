/* SPDX-License-Identifier: MIT */
/*
 * Decode-step benchmark of one model per rank through a runtime session,
 * with the step's device time alone: one tpf_session_run uploads the inputs
 * (the new tokens' hidden states and the KV cache) and builds the plan, then
 * tpf_session_replay runs the plan's steps N times back to back, launched
 * eagerly and (CUDA) as one captured graph; the time per step is the wall
 * time of N steps divided by N after the device has drained, the slowest
 * rank's.  Every rank runs; rank 0 prints one JSON line per mode.
 *
 *   mpirun -np 2 bench-decode 'dense.rank{rank}.onnx' --backend cuda \
 *          --iters 200 --warmup 20 --label batch=8 [--optimize] [--no-oneshot]
 *
 * Under mpirun the communicator is NCCL for --backend cuda, MPI otherwise.
 * Inputs are random (floats in [-1, 1), integers 0), from --seed; a
 * symbolic dim takes its --dim NAME=N value (else 1), an integer input
 * named by --fill INPUT=V holds V everywhere (a language model's decode
 * step: --dim max_sequence=1280 --fill attention_mask=1 --fill
 * past_sequence_length=1024).  --passes LIST compiles with that pipeline
 * (default,kv-cache-in-place,cleanup: the generation's decode step).
 * --optimize runs the default pass pipeline first (the fused graph);
 * --no-oneshot keeps every collective on NCCL; --no-fp8-gemm dequantizes
 * FP8 operands before bf16 GEMMs; --variant names the configuration in
 * the output; --profile prints the eager mode's time per kernel to stderr
 * (its replays then wait for the device one by one: the eager figure is
 * then not a throughput).
 *
 * --trace PATH (CUDA, needs libcupti) writes the kernel timeline of
 * --trace-steps more replays (default 20) after the timed ones, every rank
 * to PATH with {rank} and {mode} (eager, cuda-graph) replaced; without
 * {mode} only the last mode (the CUDA graph) is traced.  The records are on
 * from the start, so the timings of a traced run say "traced": true and
 * are not the ones to report; bench/decode_trace.py turns the file into a
 * profile per step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpf-passes.h"
#include "tpf-runtime.h"
#ifdef TPF_HAVE_CUDA
#include "tpf-cuda-runtime.h"
#endif
#ifdef TPF_HAVE_CUPTI
#include "cupti-trace.h"
#endif

/* --dim NAME=N and --fill NAME=V: at most this many of each */
#define MAX_SETS 16

struct args {
	const char *model, *label, *variant, *backend_name, *trace, *passes;
	const char *dims[MAX_SETS], *fills[MAX_SETS];
	size_t n_dims, n_fills;
	enum tpf_backend backend;
	long iters, warmup, trace_steps;
	unsigned long long seed;
	int no_graph, optimize, no_oneshot, no_fp8_gemm, profile;
	double timeout;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned long long lcg(unsigned long long *s)
{
	*s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
	return *s >> 33;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench-decode MODEL [--backend cpu|cuda] [--iters N] [--warmup N] [--seed S]\n"
			"                    [--label TEXT] [--variant NAME] [--optimize] [--no-oneshot]\n"
			"                    [--no-fp8-gemm] [--no-graph] [--profile] [--timeout S]\n"
			"                    [--trace PATH] [--trace-steps N] [--passes LIST]\n"
			"                    [--dim NAME=N]... [--fill INPUT=V]...\n");
	return 2;
}

static int parse(int argc, char **argv, struct args *a)
{
	memset(a, 0, sizeof(*a));
	a->label = "";
	a->backend_name = "cuda";
	a->iters = 100;
	a->warmup = 10;
	a->seed = 1;
	a->timeout = 60;
	a->trace_steps = 20;
	for (int i = 1; i < argc; i++) {
		const char *o = argv[i];
		int has_v = i + 1 < argc;
		if (!strcmp(o, "--backend") && has_v)
			a->backend_name = argv[++i];
		else if (!strcmp(o, "--iters") && has_v)
			a->iters = atol(argv[++i]);
		else if (!strcmp(o, "--warmup") && has_v)
			a->warmup = atol(argv[++i]);
		else if (!strcmp(o, "--seed") && has_v)
			a->seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(o, "--label") && has_v)
			a->label = argv[++i];
		else if (!strcmp(o, "--variant") && has_v)
			a->variant = argv[++i];
		else if (!strcmp(o, "--trace") && has_v)
			a->trace = argv[++i];
		else if (!strcmp(o, "--trace-steps") && has_v)
			a->trace_steps = atol(argv[++i]);
		else if (!strcmp(o, "--timeout") && has_v)
			a->timeout = atof(argv[++i]);
		else if (!strcmp(o, "--passes") && has_v)
			a->passes = argv[++i], a->optimize = 1;
		else if (!strcmp(o, "--dim") && has_v && a->n_dims < MAX_SETS && strchr(argv[i + 1], '='))
			a->dims[a->n_dims++] = argv[++i];
		else if (!strcmp(o, "--fill") && has_v && a->n_fills < MAX_SETS && strchr(argv[i + 1], '='))
			a->fills[a->n_fills++] = argv[++i];
		else if (!strcmp(o, "--no-graph"))
			a->no_graph = 1;
		else if (!strcmp(o, "--optimize"))
			a->optimize = 1;
		else if (!strcmp(o, "--no-oneshot"))
			a->no_oneshot = 1;
		else if (!strcmp(o, "--no-fp8-gemm"))
			a->no_fp8_gemm = 1;
		else if (!strcmp(o, "--profile"))
			a->profile = 1;
		else if (o[0] != '-' && !a->model)
			a->model = o;
		else
			return -1;
	}
	if (!a->variant)
		a->variant = a->optimize ? "fused" : "unfused";
	if (!a->model || a->iters < 1 || a->warmup < 0 || a->trace_steps < 1 ||
	    tpf_backend_from_name(a->backend_name, &a->backend))
		return -1;
	if (a->trace && a->backend != TPF_BACKEND_CUDA) {
		fprintf(stderr, "bench-decode: --trace needs --backend cuda\n");
		return -1;
	}
#ifndef TPF_HAVE_CUPTI
	if (a->trace) {
		fprintf(stderr, "bench-decode: --trace: this build has no CUPTI (cupti_activity.h was not found)\n");
		return -1;
	}
#endif
	return 0;
}

/* pattern with {rank} (and, when mode is not NULL, {mode}) replaced;
 * cut at n - 1 bytes */
static void fill_path(char *out, size_t n, const char *pattern, int rank, const char *mode)
{
	size_t k = 0;
	char num[16];
	snprintf(num, sizeof(num), "%d", rank);
	for (const char *p = pattern; *p && k + 1 < n;) {
		const char *with = !strncmp(p, "{rank}", 6) ? num : mode && !strncmp(p, "{mode}", 6) ? mode : NULL;
		if (!with) {
			out[k++] = *p++;
			continue;
		}
		for (; *with && k + 1 < n; with++)
			out[k++] = *with;
		p += 6;
	}
	out[k] = 0;
}

/* --trace: the timeline of trace_steps more replays, to this rank's file */
static enum tpf_status trace_replays(const struct args *a, struct tpf_session *s, struct tpf_comm *c, int graph,
				     struct tpf_diag *d)
{
#ifdef TPF_HAVE_CUPTI
	const char *mode = graph ? "cuda-graph" : "eager";
	char path[4096], err[512];
	fill_path(path, sizeof(path), a->trace, c->rank, mode);
	FILE *f = fopen(path, "w");
	if (!f)
		return tpf_diag_fail(d, TPF_ERR_IO, "--trace: cannot write '%s'", path);
	enum tpf_status st = tpf_session_sync(s, d);
	if (!st && tpf_trace_start(err, sizeof(err)))
		st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s", err);
	double t0 = now_s();
	for (long it = 0; it < a->trace_steps && !st; it++)
		st = tpf_session_replay(s, d);
	if (!st)
		st = tpf_session_sync(s, d);
	double us = (now_s() - t0) / (double)a->trace_steps * 1e6;
	if (!st) {
		fprintf(f, "{\"trace\": \"bench-decode\", \"rank\": %d, \"world\": %d, \"mode\": \"%s\", \"variant\": ",
			c->rank, c->world, mode);
		tpf_trace_json_string(f, a->variant);
		fputs(", \"label\": ", f);
		tpf_trace_json_string(f, a->label);
		fprintf(f, ", \"replays\": %ld, \"us_per_step\": %.2f}\n", a->trace_steps, us);
		if (tpf_trace_stop(f, err, sizeof(err)) < 0)
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s", err);
	}
	if (fclose(f) && !st)
		st = tpf_diag_fail(d, TPF_ERR_IO, "--trace: cannot write '%s'", path);
	return st;
#else
	(void)s, (void)c, (void)graph;
	return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "--trace %s: this bench-decode was built without CUPTI", a->trace);
#endif
}

/* This rank's model (MODEL with {rank} replaced), compiled as `tpfuse run`
 * compiles it: optimized when asked, then lowered to the backend's ops
 * (--no-fp8-gemm keeps the fp8 products dequantized: TPF_FP8_GEMM=0). */
static enum tpf_status load(const struct args *a, const struct tpf_comm *c, struct tpf_model **m,
			    struct tpf_diag *d)
{
	char path[4096];
	fill_path(path, sizeof(path), a->model, c->rank, NULL);
	enum tpf_status st = tpf_model_load_file(path, &(struct tpf_load_options){0}, m, d);
	if (st)
		return st;
	if (a->no_fp8_gemm)
		setenv("TPF_FP8_GEMM", "0", 1);
	struct tpf_compile_options co = {
		.infer = TPF_INFER_STRICT,
		.optimize = a->optimize,
		.pipeline = {.passes = a->passes ? a->passes : "default"},
		.min_severity = TPF_SEV_ERROR, /* not the "matched nothing" notes */
		.target = tpf_backend_name(a->backend),
	};
	co.pipeline.ctx.rank = c->world > 1 ? c->rank : -1;
	co.pipeline.ctx.world_size = c->world > 1 ? c->world : -1;
	return tpf_compile(*m, &co, d);
}

/* The value of NAME in sets ("NAME=V"), or dflt. */
static long long set_value(const char *const *sets, size_t n, const char *name, long long dflt)
{
	size_t len = name ? strlen(name) : 0;
	for (size_t i = 0; len && i < n; i++)
		if (!strncmp(sets[i], name, len) && sets[i][len] == '=')
			return atoll(sets[i] + len + 1);
	return dflt;
}

/* Random inputs of the declared shapes (a symbolic dim: its --dim value,
 * else 1); an integer input named by --fill holds that value, others 0. */
static enum tpf_status make_inputs(const struct args *a, const struct tpf_graph *g, unsigned long long seed,
				   struct tpf_host_tensor **out, size_t *n_out, struct tpf_diag *d)
{
	struct tpf_host_tensor *in = calloc(g->n_inputs + 1, sizeof(*in));
	size_t n_in = 0;
	*out = in;
	*n_out = 0;
	if (!in)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (v->init)
			continue;
		struct tpf_host_tensor *t = &in[n_in++];
		*n_out = n_in;
		t->name = v->name;
		t->dtype = v->type.dtype;
		t->rank = v->type.shape.rank;
		if (t->rank < 0 || t->rank > TPF_KERNEL_MAX_RANK || t->dtype == TPF_DTYPE_UNDEFINED ||
		    t->dtype == TPF_DTYPE_STRING)
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "input '%s': no static shape or dtype this benchmark can fill",
					     v->name);
		for (int k = 0; k < t->rank; k++)
			t->dims[k] = v->type.shape.dims[k].value > 0
					     ? v->type.shape.dims[k].value
					     : set_value(a->dims, a->n_dims, v->type.shape.dims[k].param, 1);
		size_t nb;
		if (t->rank < 0 || tpf_host_tensor_bytes(t, &nb))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' has no static shape", v->name);
		t->data = calloc(nb ? nb : 1, 1);
		if (!t->data)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		int64_t n = 1;
		for (int k = 0; k < t->rank; k++)
			n *= t->dims[k];
		long long fill = set_value(a->fills, a->n_fills, v->name, 0);
		for (int64_t e = 0; e < n; e++)
			if (!tpf_dtype_is_integral(t->dtype))
				tpf_elem_store(t->dtype, t->data, e, (double)(lcg(&seed) % 2048) / 1024.0 - 1.0, 1);
			else if (fill)
				tpf_elem_store_int(t->dtype, t->data, e, fill);
	}
	return TPF_OK;
}

/* One mode: a session, one full run, warm-up replays, timed replays. */
static enum tpf_status bench_mode(const struct args *a, const struct tpf_model *m, struct tpf_comm *c,
				  const struct tpf_host_tensor *in, size_t n_in, int graph, struct tpf_diag *d)
{
	struct tpf_session *s = NULL;
	struct tpf_session_options so = {.backend = a->backend, .comm = c, .cuda_graph = graph,
					 .no_oneshot = a->no_oneshot, .profile = a->profile && !graph};
	so.plan.inputs_live = 1; /* every replay reads the inputs as uploaded */
	const struct tpf_host_tensor *outs;
	size_t n_outs;
	enum tpf_status st = tpf_session_create(m, &so, &s, d);
	if (!st)
		st = tpf_session_run(s, in, n_in, &outs, &n_outs, d);
	for (long it = 0; it < a->warmup + (graph ? 2 : 0) && !st; it++)
		st = tpf_session_replay(s, d);
	if (!st)
		st = tpf_session_sync(s, d);
	if (!st && c->world > 1)
		st = c->ops->barrier(c, d);
	double t0 = now_s();
	for (long it = 0; it < a->iters && !st; it++)
		st = tpf_session_replay(s, d);
	if (!st)
		st = tpf_session_sync(s, d);
	double us = (now_s() - t0) / (double)a->iters * 1e6, worst = us;
	if (!st && c->world > 1) {
		double *all = calloc((size_t)c->world, sizeof(double));
		if (all && !c->ops->allgather(c, &us, all, sizeof(double), NULL, d))
			for (int r = 0; r < c->world; r++)
				worst = all[r] > worst ? all[r] : worst;
		free(all);
	}
	if (!st && c->rank == 0) {
		struct tpf_plan_stats ps;
		size_t n_coll, n_one;
		tpf_plan_get_stats(tpf_session_plan(s), &ps);
		tpf_session_collective_stats(s, &n_coll, &n_one);
		printf("{\"impl\": \"tpfuse\", \"variant\": \"%s\", \"mode\": \"%s\", \"label\": \"%s\", "
		       "\"backend\": \"%s\", \"world\": %d, \"us_per_step\": %.2f, \"steps\": %zu, "
		       "\"kernels\": %zu, \"collectives\": %zu, \"oneshot\": %zu, \"arena_bytes\": %zu%s}\n",
		       a->variant, graph ? "cuda-graph" : "eager", a->label, a->backend_name, c->world, worst,
		       ps.n_steps, ps.n_kernel_steps, n_coll, n_one, ps.arena_bytes, a->trace ? ", \"traced\": true" : "");
		fflush(stdout);
	}
	if (!st && a->trace && (graph || a->no_graph || strstr(a->trace, "{mode}")))
		st = trace_replays(a, s, c, graph, d);
	if (!st && so.profile && c->rank == 0) {
		/* step times of the warm-up and timed replays (each synchronized) */
		tpf_session_profile_print(s, stderr);
	}
	tpf_session_free(s);
	return st;
}

int main(int argc, char **argv)
{
	struct args a;
	if (parse(argc, argv, &a))
		return usage();
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm_options co = {.timeout_s = a.timeout};
	struct tpf_comm *c = NULL;
	struct tpf_model *m = NULL;
	struct tpf_host_tensor *in = NULL;
	size_t n_in = 0;
	enum tpf_status st;
	if (tpf_comm_launched_by_mpi()) {
#ifdef TPF_HAVE_NCCL
		st = a.backend == TPF_BACKEND_CUDA ? tpf_comm_create_nccl(&co, &c, d) : tpf_comm_create_mpi(&co, &c, d);
#else
		st = tpf_comm_create_mpi(&co, &c, d);
#endif
	} else {
		st = tpf_comm_create_self(&co, &c, d);
	}
#ifdef TPF_HAVE_CUPTI
	char err[512];
	if (!st && a.trace && c->world > 1 && !strstr(a.trace, "{rank}"))
		st = tpf_diag_fail(d, TPF_ERR_INVALID, "--trace %s: %d ranks would write one file; put {rank} in it",
				   a.trace, c->world);
	if (!st && a.trace && tpf_trace_open(err, sizeof(err)))
		st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s", err);
#endif
	if (!st)
		st = load(&a, c, &m, d);
	if (!st)
		st = make_inputs(&a, m->graph, a.seed, &in, &n_in, d);
	for (int graph = 0; graph < 2 && !st; graph++) {
		if (graph && (a.no_graph || a.backend != TPF_BACKEND_CUDA))
			break;
		st = bench_mode(&a, m, c, in, n_in, graph, d);
	}
	if (st) {
		tpf_diag_print(d, stderr);
		if (c && c->world > 1)
			tpf_comm_abort(c, 1);
	}
	for (size_t i = 0; in && i < n_in; i++)
		free(in[i].data);
	free(in);
	tpf_model_free(m);
#ifdef TPF_HAVE_CUPTI
	tpf_trace_close();
#endif
	tpf_comm_free(c);
	tpf_diag_free(d);
	return st ? 1 : 0;
}
