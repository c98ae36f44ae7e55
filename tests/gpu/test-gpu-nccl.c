/* SPDX-License-Identifier: MIT */
/*
 * The NCCL communicator and the CUDA device under `mpirun -np 2` (or more):
 * allreduce (float32, bfloat16, int64, in place too), allgather, alltoall
 * and broadcast on device buffers; the host-memory path (structure and
 * status agreement) through MPI; CUDA graph capture of a collective.
 *
 * With --stall: a stalled collective (the last rank skips it and sleeps
 * for 10 minutes, so it never ends the job itself) must end in an error
 * within the 8 s timeout on the waiting rank instead of a hang; that rank
 * then ends the job as `tpfuse run` does after an error (tpf_comm_abort,
 * exit code 3 when the error came in time).  tests/gpu/stall-check.sh runs
 * it and requires exit 3, the timeout's message, and an end well before
 * the stalled rank would wake up.
 *
 * With --stall-peer: the same for the peer-memory kernels (the one-shot
 * and two-shot all-reduce + RMSNorm): the last rank skips the call; the
 * waiting rank's kernel gives up after its 3 s timeout instead of spinning
 * forever, and tpf_cuda_arnorm_check names what happened.
 *
 * Exit 0 passed, 1 failed, 77 no GPU or fewer GPUs than ranks (skipped).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpf-cuda-runtime.h"
#include "cuda/tpf-cuda.h"

static int fails;
static int RANK;

static void expect(int cond, const char *what)
{
	printf("rank %d: %s %s\n", RANK, cond ? "PASS" : "FAIL", what);
	fflush(stdout);
	if (!cond)
		fails++;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct ctx {
	struct tpf_comm *c;
	struct tpf_device *dev;
	void *buf;
	size_t n;
};

static enum tpf_status body(void *p, struct tpf_diag *d)
{
	struct ctx *x = p;
	return x->c->ops->allreduce_sum(x->c, x->buf, x->buf, x->n, TPF_DTYPE_FLOAT, x->dev->stream, d);
}

static int host_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
	struct tpf_comm *c = ctx;
	return c->ops->allgather(c, send, recv, bytes, NULL, NULL) != TPF_OK;
}

/* --stall-peer: one rank skips a peer-memory call (one-shot, then
 * two-shot); the other's waits must give up within the 3 s timeout. */
static int stall_peer(struct tpf_comm *c, struct tpf_device *dev, struct tpf_diag *d)
{
	enum { ROWS = 64, H = 4096 };
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = c};
	struct tpf_cuda_arnorm *ar = NULL;
	enum tpf_status st = tpf_cuda_arnorm_create(c->rank, c->world, TPF_DTYPE_BFLOAT16, ROWS * H, &ex, &ar, d);
	if (st) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	tpf_cuda_arnorm_set_timeout(ar, 3);
	struct tpf_cuda_norm_args a;
	memset(&a, 0, sizeof(a));
	a.dtype = TPF_DTYPE_BFLOAT16;
	a.rows = ROWS;
	a.hidden = H;
	a.x = dev->alloc(dev, ROWS * H * 2);
	a.gamma = dev->alloc(dev, H * 2);
	a.norm_out = dev->alloc(dev, ROWS * H * 2);
	a.epsilon = 1e-6f;
	/* one call together first: the kernels work when every rank comes */
	st = tpf_cuda_arnorm_run(ar, &a, dev->stream, d);
	st = st ? st : dev->sync(dev, d);
	st = st ? st : tpf_cuda_arnorm_check(ar, d);
	expect(st == TPF_OK, "one-shot all-reduce + norm with every rank");
	if (st) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	c->ops->barrier(c, d);
	if (c->rank == c->world - 1) {
		printf("rank %d: skipping a peer-memory all-reduce\n", RANK);
		fflush(stdout);
		alarm(700);
		sleep(600);
		return 1;
	}
	double t0 = now_s();
	for (int path = 0; path < 2 && !st; path++) {
		a.path = path ? TPF_CUDA_AR_TWOSHOT : TPF_CUDA_AR_ONESHOT;
		st = tpf_cuda_arnorm_run(ar, &a, dev->stream, d);
	}
	st = st ? st : dev->sync(dev, d);
	st = st ? st : tpf_cuda_arnorm_check(ar, d);
	double dt = now_s() - t0;
	tpf_diag_print(d, stdout);
	int in_time = st != TPF_OK && dt < 30;
	printf("rank %d: %s: stalled peer-memory all-reduce failed after %.1f s (timeout 3 s); aborting the job\n",
	       RANK, in_time ? "PASS" : "FAIL", dt);
	fflush(stdout);
	tpf_comm_abort(c, in_time ? 3 : 1);
	return 1;
}

int main(int argc, char **argv)
{
	int stall = argc > 1 && !strcmp(argv[1], "--stall");
	int stall_peer_mode = argc > 1 && !strcmp(argv[1], "--stall-peer");
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	struct tpf_device *dev = NULL;
	if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK")) {
		printf("not started by mpirun: skipped\n");
		return 77;
	}
	/* a hang is a failure: end the process well before the test's limit */
	alarm(90);
	struct tpf_comm_options o = {.timeout_s = 8};
	enum tpf_status st = tpf_comm_create_nccl(&o, &c, d);
	if (st) {
		tpf_diag_print(d, stdout);
		return st == TPF_ERR_UNSUPPORTED ? 77 : 1;
	}
	RANK = c->rank;
	int W = c->world;
	const char *nvls = getenv("NCCL_NVLS_ENABLE");
	expect(nvls && !strcmp(nvls, "0"), "NCCL_NVLS_ENABLE=0 set before NCCL started");
	if ((st = tpf_device_create_cuda(c->local_rank, &dev, d))) {
		tpf_diag_print(d, stdout);
		tpf_comm_free(c);
		return 77;
	}
	enum { N = 1 << 16 };
	if (stall_peer_mode)
		return stall_peer(c, dev, d);
	if (stall) {
		void *buf = dev->alloc(dev, N * sizeof(float));
		if (c->rank == W - 1) {
			printf("rank %d: skipping an allreduce\n", RANK);
			fflush(stdout);
			/* outlives any deadline of the test: only the other rank's
			 * abort ends the job in time */
			alarm(700);
			sleep(600);
			return 1;
		}
		double t0 = now_s();
		st = c->ops->allreduce_sum(c, buf, buf, N, TPF_DTYPE_FLOAT, dev->stream, d);
		if (!st)
			st = dev->sync(dev, d);
		double dt = now_s() - t0;
		tpf_diag_print(d, stdout);
		int in_time = st != TPF_OK && dt < 30;
		printf("rank %d: %s: stalled allreduce failed after %.1f s (timeout 8 s); aborting the job\n", RANK,
		       in_time ? "PASS" : "FAIL", dt);
		fflush(stdout);
		tpf_comm_abort(c, in_time ? 3 : 1);
		return 1;
	}
	float *h = malloc(N * sizeof(float) * W);
	float *hr = malloc(N * sizeof(float) * W);
	void *a = dev->alloc(dev, N * sizeof(float) * W), *b = dev->alloc(dev, N * sizeof(float) * W);
	/* allreduce float32 */
	for (int i = 0; i < N; i++)
		h[i] = (float)(i % 97) * 0.5f + (float)c->rank;
	dev->upload(dev, a, h, N * sizeof(float), d);
	st = c->ops->allreduce_sum(c, a, b, N, TPF_DTYPE_FLOAT, dev->stream, d);
	st = st ? st : dev->download(dev, hr, b, N * sizeof(float), d);
	int ok = !st;
	for (int i = 0; i < N && ok; i++)
		ok = hr[i] == (float)(i % 97) * 0.5f * W + (float)(W * (W - 1) / 2);
	expect(ok, "allreduce float32 (65536 elements)");
	/* in place, bfloat16 */
	uint16_t *hb = (uint16_t *)h;
	for (int i = 0; i < N; i++)
		hb[i] = tpf_f32_to_bf16((float)(i % 13) + 1.0f);
	dev->upload(dev, a, hb, N * 2, d);
	st = c->ops->allreduce_sum(c, a, a, N, TPF_DTYPE_BFLOAT16, dev->stream, d);
	st = st ? st : dev->download(dev, hr, a, N * 2, d);
	ok = !st;
	for (int i = 0; i < N && ok; i++)
		ok = tpf_bf16_to_f32(((uint16_t *)hr)[i]) == ((float)(i % 13) + 1.0f) * W;
	expect(ok, "allreduce bfloat16 in place");
	/* int64 */
	int64_t *hi = (int64_t *)h;
	for (int i = 0; i < 1000; i++)
		hi[i] = (int64_t)i * 1000000007LL + c->rank;
	dev->upload(dev, a, hi, 8000, d);
	st = c->ops->allreduce_sum(c, a, b, 1000, TPF_DTYPE_INT64, dev->stream, d);
	st = st ? st : dev->download(dev, hr, b, 8000, d);
	ok = !st;
	for (int i = 0; i < 1000 && ok; i++)
		ok = ((int64_t *)hr)[i] == (int64_t)i * 1000000007LL * W + W * (W - 1) / 2;
	expect(ok, "allreduce int64");
	/* allgather */
	for (int i = 0; i < 100; i++)
		h[i] = (float)(c->rank * 1000 + i);
	dev->upload(dev, a, h, 400, d);
	st = c->ops->allgather(c, a, b, 400, dev->stream, d);
	st = st ? st : dev->download(dev, hr, b, 400 * (size_t)W, d);
	ok = !st;
	for (int r = 0; r < W && ok; r++)
		for (int i = 0; i < 100 && ok; i++)
			ok = hr[r * 100 + i] == (float)(r * 1000 + i);
	expect(ok, "allgather");
	/* alltoall: chunk j of rank r holds r*100+j */
	for (int j = 0; j < W; j++)
		for (int i = 0; i < 64; i++)
			h[j * 64 + i] = (float)(c->rank * 100 + j);
	dev->upload(dev, a, h, 256 * (size_t)W, d);
	st = c->ops->alltoall(c, a, b, 256, dev->stream, d);
	st = st ? st : dev->download(dev, hr, b, 256 * (size_t)W, d);
	ok = !st;
	for (int r = 0; r < W && ok; r++)
		for (int i = 0; i < 64 && ok; i++)
			ok = hr[r * 64 + i] == (float)(r * 100 + c->rank);
	expect(ok, "alltoall");
	/* broadcast from the last rank */
	for (int i = 0; i < 50; i++)
		h[i] = (float)(c->rank + i);
	dev->upload(dev, a, h, 200, d);
	st = c->ops->broadcast(c, a, 200, W - 1, dev->stream, d);
	st = st ? st : dev->download(dev, hr, a, 200, d);
	ok = !st;
	for (int i = 0; i < 50 && ok; i++)
		ok = hr[i] == (float)(W - 1 + i);
	expect(ok, "broadcast");
	/* host path: agreement and a difference named */
	st = tpf_comm_check_same(c, 42, "a value", d);
	expect(!st, "host-memory check_same (equal)");
	st = tpf_comm_check_same(c, (uint64_t)c->rank, "the rank", d);
	expect(st != TPF_OK, "host-memory check_same (different) fails on every rank");
	tpf_diag_clear(d);
	/* CUDA graph: eager, capture, replays of an in-place allreduce */
	struct ctx x = {c, dev, a, 1024};
	for (int i = 0; i < 1024; i++)
		h[i] = 1.0f;
	dev->upload(dev, a, h, 4096, d);
	st = TPF_OK;
	for (int it = 0; it < 4 && !st; it++)
		st = tpf_cuda_device_run_graph(dev, 7, body, &x, d);
	st = st ? st : dev->download(dev, hr, a, 4096, d);
	unsigned long caps, reps, eager;
	tpf_cuda_device_graph_stats(dev, &caps, &reps, &eager);
	ok = !st && caps == 1 && reps == 3 && eager == 1;
	for (int i = 0; i < 1024 && ok; i++)
		ok = hr[i] == powf((float)W, 4.0f);
	if (st)
		tpf_diag_print(d, stdout);
	expect(ok, "CUDA graph: 1 eager run, 1 capture, 3 launches of a captured allreduce");
	tpf_diag_clear(d);
	free(h);
	free(hr);
	int local_fails = fails;
	/* the communicator may be aborted on some ranks: only MPI is trusted now */
	dev->free(dev, a);
	dev->free(dev, b);
	tpf_device_free(dev);
	tpf_comm_free(c);
	tpf_diag_free(d);
	printf("rank %d: %s\n", RANK, local_fails ? "FAILED" : "all passed");
	return local_fails ? 1 : 0;
}
