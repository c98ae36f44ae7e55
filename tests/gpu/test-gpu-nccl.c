/* SPDX-License-Identifier: MIT */
/*
 * The NCCL communicator and the CUDA device under `mpirun -np 2` (or more):
 * allreduce (float32, bfloat16, int64, in place too), allgather, alltoall
 * and broadcast on device buffers; the host-memory path (structure and
 * status agreement) through MPI; CUDA graph capture of a collective; the
 * peer-memory kernels (one-shot and two-shot all-reduce + RMSNorm, the
 * sharded norm's exchange) over a sequence of calls of changing sizes,
 * each checked against the host; their FP8, NVFP4 and FP8-group outputs
 * (each kind its own kernel instance, and all three in one call) byte for
 * byte against the single-GPU fused kernel; the peer-memory all-to-all over calls of
 * changing piece counts, sizes and alignments, checked byte for byte.
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
 * With --mpi: the MPI communicator for CUDA (tpf_comm_create_cuda_mpi,
 * `tpfuse run --comm mpi`) instead of NCCL, which refuses two ranks on
 * one GPU: its collectives on device buffers (as above), calls of nothing,
 * its refusal inside a CUDA graph capture (and an allreduce after it),
 * then the peer-memory tests (the sequence, the quantized outputs, the
 * all-to-all).  Ranks may share GPUs (a host's rank r takes GPU r modulo
 * the count): world sizes above the GPU count, such as 4 or 8 ranks on 2
 * GPUs, run the kernels' code for those worlds.  The ranks on one GPU are
 * separate processes: their kernels take turns on it, so their waits for
 * each other end at the next turn (slow, but each result is as exact as
 * at one rank per GPU).  Skipped only where a rank sees no GPU; any other
 * failure to open the device fails.
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

enum { N = 1 << 16 }; /* floats a rank sends in the device collectives' checks */

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

/* --stall-peer: one rank skips peer-memory calls (one-shot, two-shot, the
 * all-to-all); the other's waits must give up within the 3 s timeouts. */
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
	struct tpf_cuda_a2a *a2a = NULL;
	if ((st = tpf_cuda_a2a_create(c->rank, c->world, 1 << 20, &ex, &a2a, d))) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	tpf_cuda_a2a_set_timeout(a2a, 3);
	const size_t ab = (1 << 20) / 4;
	const void *asend[4];
	void *arecv[4];
	size_t abytes[4];
	for (int i = 0; i < 4; i++) {
		asend[i] = dev->alloc(dev, ab * (size_t)c->world);
		arecv[i] = dev->alloc(dev, ab * (size_t)c->world);
		abytes[i] = ab;
	}
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
	st = st ? st : tpf_cuda_a2a_run(a2a, asend, arecv, abytes, 4, dev->stream, d);
	st = st ? st : dev->sync(dev, d);
	st = st ? st : tpf_cuda_arnorm_check(ar, d);
	st = st ? st : tpf_cuda_a2a_check(a2a, d);
	expect(st == TPF_OK, "one-shot all-reduce + norm and peer-memory all-to-all with every rank");
	if (st) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	c->ops->barrier(c, d);
	if (c->rank == c->world - 1) {
		printf("rank %d: skipping peer-memory all-reduces and an all-to-all\n", RANK);
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
	st = st ? st : tpf_cuda_a2a_run(a2a, asend, arecv, abytes, 4, dev->stream, d);
	st = st ? st : dev->sync(dev, d);
	enum tpf_status st_ar = st ? st : tpf_cuda_arnorm_check(ar, d);
	enum tpf_status st_a2a = st ? st : tpf_cuda_a2a_check(a2a, d);
	double dt = now_s() - t0;
	tpf_diag_print(d, stdout);
	int in_time = st_ar != TPF_OK && st_a2a != TPF_OK && dt < 30;
	printf("rank %d: %s: stalled peer-memory all-reduce and all-to-all failed after %.1f s (timeouts 3 s); "
	       "aborting the job\n",
	       RANK, in_time ? "PASS" : "FAIL", dt);
	fflush(stdout);
	tpf_comm_abort(c, in_time ? 3 : 1);
	return 1;
}

/* Small multiples of 1/8, exact in bfloat16 and in float sums of a few
 * ranks: the reduced sums have one right answer. */
static float seq_val(int rank, int call, int64_t i, int salt)
{
	return (float)((int)((i * 7 + call * 13 + rank * 5 + salt * 3) % 17) - 8) / 8.0f;
}

/* The peer-memory kernels over a sequence of calls on one context: row
 * counts (and so grids) and hidden sizes change from call to call, one-shot
 * and two-shot alternate, and the sharded norm's exchange runs on its own
 * float context in between.  Each call's outputs are checked against the
 * host: the residual sum exactly (the rank-order sum is exact here), the
 * norm within two bfloat16 roundings.  A buffer rotation or reset that goes
 * wrong shows as stale or missing rows in a later call. */
/* Rows of 1024 for the two-shot kernel's instance for many rows: more than
 * four a block of its largest grid (a few hundred blocks on an H100). */
enum { MANY = 4501 };

static void peer_sequence(struct tpf_comm *c, struct tpf_device *dev, struct tpf_diag *d)
{
	static const struct {
		int rows, hidden, two;
	} seq[] = {{1, 4096, 0}, {7, 4096, 1}, {64, 2048, 0}, {3, 8192, 1}, {200, 4096, 0}, {1, 8192, 1},
		   {130, 1024, 1}, {5, 4096, 0}, {1, 4096, 0}, {1, 4096, 1}, {2, 8192, 0}, {300, 2048, 1},
		   /* more rows not owned by a rank than the two-shot grid: blocks
		    * walk several of them (a count no world size divides) */
		   {1199, 1024, 1},
		   /* more than tpf_cuda_arnorm_many_rows: the instance for many
		    * rows (checked below; at more than two ranks the one whose
		    * grid halves take the owned and the gathered rows) */
		   {MANY, 1024, 1}, {5, 1024, 1}};
	/* QROWS: more sharded-norm rows than the kernel's grid (a few hundred
	 * blocks), so that blocks take several groups of rows */
	enum { MAXE = MANY * 1024, QROWS = 2000 };
	const int W = c->world;
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = c};
	struct tpf_cuda_arnorm *ar = NULL, *sh = NULL;
	enum tpf_status st = tpf_cuda_arnorm_create(c->rank, W, TPF_DTYPE_BFLOAT16, MAXE, &ex, &ar, d);
	st = st ? st : tpf_cuda_arnorm_create(c->rank, W, TPF_DTYPE_FLOAT, 2 * QROWS, &ex, &sh, d);
	expect(st == TPF_OK, "peer-memory contexts (bfloat16 sums, float exchange)");
	if (st) {
		tpf_diag_print(d, stdout);
		tpf_cuda_arnorm_free(ar);
		tpf_cuda_arnorm_free(sh);
		return;
	}
	const int64_t many = tpf_cuda_arnorm_many_rows(ar, 1024);
	printf("rank %d: the two-shot kernel takes many rows of 1024 from %lld\n", RANK, (long long)many);
	expect(many > 5 && many <= MANY, "the sequence's two-shot calls of 1024 reach both instances");
	uint16_t *hx = malloc(MAXE * 2), *hr = malloc(MAXE * 2), *hg = malloc(8192 * 2);
	uint16_t *ho = malloc(MAXE * 2), *hs = malloc(MAXE * 2);
	void *x = dev->alloc(dev, MAXE * 2), *r = dev->alloc(dev, MAXE * 2), *g = dev->alloc(dev, 8192 * 2);
	void *out = dev->alloc(dev, MAXE * 2), *sum = dev->alloc(dev, MAXE * 2);
	void *qx[2], *qg[2], *qo[2];
	uint16_t *hq[2];
	for (int i = 0; i < 2; i++) {
		qx[i] = dev->alloc(dev, QROWS * 48 * 2);
		qg[i] = dev->alloc(dev, 48 * 2);
		qo[i] = dev->alloc(dev, QROWS * 48 * 2);
		hq[i] = malloc(QROWS * 48 * 2);
	}
	if (!hx || !hr || !hg || !ho || !hs || !hq[0] || !hq[1])
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "peer sequence: out of host memory");
	int bad_sum = 0, bad_norm = 0, bad_sharded = 0, calls = 0;
	for (int k = 0; k < (int)(sizeof(seq) / sizeof(seq[0])) && !st; k++) {
		const int T = seq[k].rows, H = seq[k].hidden;
		const int64_t n = (int64_t)T * H;
		for (int64_t i = 0; i < n; i++) {
			hx[i] = tpf_f32_to_bf16(seq_val(c->rank, k, i, 0));
			hr[i] = tpf_f32_to_bf16(seq_val(0, k, i, 1));
		}
		if (c->rank == 0)
			hx[0] = 0x8000; /* -0.0: a value that looks like the kernels' placeholder */
		for (int i = 0; i < H; i++)
			hg[i] = tpf_f32_to_bf16(seq_val(0, k, i, 2) + 1.0f);
		st = dev->upload(dev, x, hx, (size_t)n * 2, d);
		st = st ? st : dev->upload(dev, r, hr, (size_t)n * 2, d);
		st = st ? st : dev->upload(dev, g, hg, (size_t)H * 2, d);
		struct tpf_cuda_norm_args a;
		memset(&a, 0, sizeof(a));
		a.dtype = TPF_DTYPE_BFLOAT16;
		a.rows = T;
		a.hidden = H;
		a.x = x;
		a.residual = r;
		a.gamma = g;
		a.epsilon = 1e-6f;
		a.norm_out = out;
		a.residual_out = sum;
		a.path = seq[k].two ? TPF_CUDA_AR_TWOSHOT : TPF_CUDA_AR_ONESHOT;
		st = st ? st : tpf_cuda_arnorm_run(ar, &a, dev->stream, d);
		st = st ? st : dev->download(dev, ho, out, (size_t)n * 2, d);
		st = st ? st : dev->download(dev, hs, sum, (size_t)n * 2, d);
		if (st)
			break;
		calls++;
		for (int t = 0; t < T; t++) {
			double ss = 0;
			for (int i = 0; i < H; i++) {
				const int64_t e = (int64_t)t * H + i;
				float acc = 0.f;
				for (int q = 0; q < W; q++)
					acc += q == 0 && e == 0 ? -0.0f : seq_val(q, k, e, 0);
				const float want = tpf_bf16_to_f32(tpf_f32_to_bf16(acc + seq_val(0, k, e, 1)));
				bad_sum += tpf_bf16_to_f32(hs[e]) != want;
				ss += (double)want * want;
			}
			const double inv = 1.0 / sqrt(ss / H + 1e-6);
			for (int i = 0; i < H; i++) {
				const int64_t e = (int64_t)t * H + i;
				const double want = (double)tpf_bf16_to_f32(hs[e]) * inv * tpf_bf16_to_f32(hg[i]);
				bad_norm += fabs(tpf_bf16_to_f32(ho[e]) - want) > fabs(want) / 64.0 + 1e-3;
			}
		}
		/* a sharded Q/K norm exchange (parts of 48 and 16 per rank) between */
		struct tpf_cuda_sharded_args sa;
		memset(&sa, 0, sizeof(sa));
		sa.dtype = TPF_DTYPE_BFLOAT16;
		sa.n = 2;
		sa.rows = k % 4 == 3 ? QROWS : 1 + k % 3;
		uint16_t hgq[2][48];
		for (int i = 0; i < 2; i++) {
			sa.width[i] = i ? 16 : 48;
			sa.full_dim[i] = sa.width[i] * W;
			sa.epsilon[i] = 1e-6f;
			for (int64_t e = 0; e < sa.rows * sa.width[i]; e++)
				hq[i][e] = tpf_f32_to_bf16(seq_val(c->rank, k, e, 3 + i));
			for (int e = 0; e < sa.width[i]; e++)
				hgq[i][e] = tpf_f32_to_bf16(seq_val(c->rank, k, e, 5 + i) + 1.0f);
			sa.x[i] = qx[i];
			sa.gamma[i] = qg[i];
			sa.out[i] = qo[i];
			st = st ? st : dev->upload(dev, qx[i], hq[i], (size_t)(sa.rows * sa.width[i]) * 2, d);
			st = st ? st : dev->upload(dev, qg[i], hgq[i], (size_t)sa.width[i] * 2, d);
		}
		st = st ? st : tpf_cuda_sharded_rmsnorm_run(sh, &sa, dev->stream, d);
		for (int i = 0; i < 2 && !st; i++) {
			st = dev->download(dev, hq[i], qo[i], (size_t)(sa.rows * sa.width[i]) * 2, d);
			for (int t = 0; t < sa.rows && !st; t++) {
				double ss = 0;
				for (int q = 0; q < W; q++)
					for (int e = 0; e < sa.width[i]; e++) {
						const double v = seq_val(q, k, t * sa.width[i] + e, 3 + i);
						ss += v * v;
					}
				const double inv = 1.0 / sqrt(ss / (double)sa.full_dim[i] + 1e-6);
				for (int e = 0; e < sa.width[i]; e++) {
					const double want = seq_val(c->rank, k, t * sa.width[i] + e, 3 + i) * inv *
							    tpf_bf16_to_f32(hgq[i][e]);
					bad_sharded += fabs(tpf_bf16_to_f32(hq[i][t * sa.width[i] + e]) - want) >
						       fabs(want) / 64.0 + 1e-3;
				}
			}
		}
	}
	if (st)
		tpf_diag_print(d, stdout);
	printf("rank %d: peer sequence: %d calls, %d sums, %d norms and %d sharded norms off\n", RANK, calls, bad_sum,
	       bad_norm, bad_sharded);
	expect(!st && calls == (int)(sizeof(seq) / sizeof(seq[0])) && !bad_sum && !bad_norm && !bad_sharded,
	       "one-shot and two-shot all-reduce + norm and the sharded norm's exchange over a sequence of calls of changing sizes");
	tpf_diag_clear(d);
	dev->free(dev, x);
	dev->free(dev, r);
	dev->free(dev, g);
	dev->free(dev, out);
	dev->free(dev, sum);
	for (int i = 0; i < 2; i++) {
		dev->free(dev, qx[i]);
		dev->free(dev, qg[i]);
		dev->free(dev, qo[i]);
		free(hq[i]);
	}
	free(hx);
	free(hr);
	free(hg);
	free(ho);
	free(hs);
	tpf_cuda_arnorm_free(ar);
	tpf_cuda_arnorm_free(sh);
}

/* The peer-memory kernels with quantized outputs: FP8 per tensor, NVFP4,
 * FP8 per group of 128, and all three in one call, one-shot and two-shot.
 * Each kind runs as its own kernel instance; every output byte (sum, norm,
 * codes, scales) must equal that of the single-GPU fused kernel run on the
 * reduced sum (exact here, so both finish the same rows).  Values are
 * multiples of 1/8 with gamma 1 + multiples of 1/8, which put many
 * quotients exactly on rounding boundaries of the narrow formats. */
enum { QK_FP8 = 1, QK_FP4 = 2, QK_GROUP = 4 };

static void peer_quant(struct tpf_comm *c, struct tpf_device *dev, struct tpf_diag *d)
{
	static const struct {
		int rows, hidden, two, kinds;
	} cs[] = {{1, 8192, 0, QK_FP8}, {1, 8192, 1, QK_FP4}, {5, 4096, 0, QK_FP4}, {5, 4096, 1, QK_GROUP},
		  {64, 2048, 0, QK_GROUP}, {3, 4096, 0, QK_FP8 | QK_FP4 | QK_GROUP},
		  {2, 8192, 1, QK_FP8 | QK_FP4 | QK_GROUP}, {33, 1024, 1, QK_FP8},
		  /* one-shot rows of 1024 chunks: the wide instances */
		  {4, 8192, 0, QK_FP4}, {3, 8192, 0, QK_FP8 | QK_FP4 | QK_GROUP},
		  /* the two-shot instance for many rows (peer_sequence checks MANY) */
		  {MANY, 1024, 1, QK_GROUP}, {MANY, 1024, 1, QK_FP8 | QK_FP4 | QK_GROUP}, {MANY, 1024, 1, QK_FP4},
		  {MANY, 1024, 1, QK_FP8}};
	enum { MAXE = MANY * 1024, NB = 8 };
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = c};
	struct tpf_cuda_arnorm *ar = NULL;
	enum tpf_status st = tpf_cuda_arnorm_create(c->rank, c->world, TPF_DTYPE_BFLOAT16, MAXE, &ex, &ar, d);
	expect(st == TPF_OK, "peer-memory context for the quantized outputs");
	if (st) {
		tpf_diag_print(d, stdout);
		return;
	}
	/* the outputs, each twice (peer kernel, reference): norm, sum, fp8,
	 * fp4 codes, fp4 scales, group codes, group scales */
	static const size_t bytes_per_elem_x16[] = {32, 32, 16, 8, 1, 16, 0};
	void *o[2][NB] = {{0}};
	unsigned char *h[2][NB] = {{0}};
	const size_t cap = (size_t)MAXE * 2 + 64;
	for (int v = 0; v < 2; v++)
		for (int b = 0; b < 7; b++) {
			o[v][b] = dev->alloc(dev, cap);
			h[v][b] = malloc(cap);
		}
	uint16_t *hx = malloc(MAXE * 2), *hs = malloc(MAXE * 2), *hr = malloc(MAXE * 2), *hg = malloc(8192 * 2);
	void *x = dev->alloc(dev, MAXE * 2), *xs = dev->alloc(dev, MAXE * 2), *r = dev->alloc(dev, MAXE * 2);
	void *g = dev->alloc(dev, 8192 * 2);
	if (!hx || !hs || !hr || !hg || !x || !xs || !r || !g)
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "peer quant: out of memory");
	for (int v = 0; v < 2; v++)
		for (int b = 0; b < 7; b++)
			if (!h[v][b] || !o[v][b])
				st = tpf_diag_fail(d, TPF_ERR_NOMEM, "peer quant: out of memory");
	long off_bytes = 0, calls = 0;
	for (int k = 0; k < (int)(sizeof(cs) / sizeof(cs[0])) && !st; k++) {
		const int T = cs[k].rows, H = cs[k].hidden;
		const int64_t n = (int64_t)T * H;
		for (int64_t i = 0; i < n; i++) {
			float acc = 0.f;
			for (int q = 0; q < c->world; q++)
				acc += seq_val(q, 20 + k, i, 7);
			hx[i] = tpf_f32_to_bf16(seq_val(c->rank, 20 + k, i, 7));
			hs[i] = tpf_f32_to_bf16(acc);
			hr[i] = tpf_f32_to_bf16(seq_val(0, 20 + k, i, 8));
		}
		for (int i = 0; i < H; i++)
			hg[i] = tpf_f32_to_bf16(seq_val(0, 20 + k, i, 9) + 1.0f);
		st = dev->upload(dev, x, hx, (size_t)n * 2, d);
		st = st ? st : dev->upload(dev, xs, hs, (size_t)n * 2, d);
		st = st ? st : dev->upload(dev, r, hr, (size_t)n * 2, d);
		st = st ? st : dev->upload(dev, g, hg, (size_t)H * 2, d);
		for (int v = 0; v < 2 && !st; v++) {
			/* a different filler in each copy: a byte a kernel leaves unwritten differs */
			for (int b = 0; b < 7 && !st; b++) {
				memset(h[v][b], v ? 0x5a : 0xa5, cap);
				st = dev->upload(dev, o[v][b], h[v][b], cap, d);
			}
			struct tpf_cuda_norm_args a;
			memset(&a, 0, sizeof(a));
			a.dtype = TPF_DTYPE_BFLOAT16;
			a.rows = T;
			a.hidden = H;
			a.x = v ? xs : x;
			a.residual = r;
			a.gamma = g;
			a.epsilon = 1e-6f;
			a.norm_out = o[v][0];
			a.residual_out = o[v][1];
			if (cs[k].kinds & QK_FP8)
				a.fp8_out = o[v][2], a.fp8_scale = 1.0f / 64;
			if (cs[k].kinds & QK_FP4)
				a.fp4_out = o[v][3], a.fp4_scales = o[v][4], a.fp4_global = 1.0f / 96;
			if (cs[k].kinds & QK_GROUP)
				a.group_out = o[v][5], a.group_scales = o[v][6], a.group = 128, a.group_floor = 1e-6f;
			a.path = cs[k].two ? TPF_CUDA_AR_TWOSHOT : TPF_CUDA_AR_ONESHOT;
			st = v ? tpf_cuda_add_rmsnorm(&a, dev->stream, d) : tpf_cuda_arnorm_run(ar, &a, dev->stream, d);
		}
		for (int v = 0; v < 2 && !st; v++)
			for (int b = 0; b < 7 && !st; b++) {
				size_t nb = b == 6 ? (size_t)(n / 128) * 4 : (size_t)n * bytes_per_elem_x16[b] / 16;
				int used = b < 2 || (b == 2 && (cs[k].kinds & QK_FP8)) ||
					   ((b == 3 || b == 4) && (cs[k].kinds & QK_FP4)) ||
					   (b >= 5 && (cs[k].kinds & QK_GROUP));
				if (used)
					st = dev->download(dev, h[v][b], o[v][b], nb, d);
			}
		if (st)
			break;
		calls++;
		long off = 0;
		for (int b = 0; b < 7; b++) {
			size_t nb = b == 6 ? (size_t)(n / 128) * 4 : (size_t)n * bytes_per_elem_x16[b] / 16;
			int used = b < 2 || (b == 2 && (cs[k].kinds & QK_FP8)) || ((b == 3 || b == 4) && (cs[k].kinds & QK_FP4)) ||
				   (b >= 5 && (cs[k].kinds & QK_GROUP));
			for (size_t i = 0; used && i < nb; i++)
				off += h[0][b][i] != h[1][b][i];
		}
		if (off)
			printf("rank %d: peer quant case %d (%d x %d, %s, kinds %d): %ld bytes differ\n", RANK, k, T, H,
			       cs[k].two ? "two-shot" : "one-shot", cs[k].kinds, off);
		off_bytes += off;
	}
	if (st)
		tpf_diag_print(d, stdout);
	printf("rank %d: peer quant: %ld calls, %ld output bytes differ from the single-GPU kernel\n", RANK, calls,
	       off_bytes);
	expect(!st && calls == (long)(sizeof(cs) / sizeof(cs[0])) && off_bytes == 0,
	       "one-shot and two-shot all-reduce + norm with FP8, NVFP4, FP8-group and all three outputs, byte for byte");
	tpf_diag_clear(d);
	for (int v = 0; v < 2; v++)
		for (int b = 0; b < 7; b++) {
			dev->free(dev, o[v][b]);
			free(h[v][b]);
		}
	dev->free(dev, x);
	dev->free(dev, xs);
	dev->free(dev, r);
	dev->free(dev, g);
	free(hx);
	free(hs);
	free(hr);
	free(hg);
	tpf_cuda_arnorm_free(ar);
}

/* The byte that rank `from` sends rank `to` at offset i of piece k, call n. */
static unsigned char a2a_byte(int n, int k, int from, int to, size_t i)
{
	return (unsigned char)(n * 131 + k * 31 + from * 17 + to * 7 + i * 13 + (i >> 8));
}

struct a2a_call {
	struct tpf_cuda_a2a *a2a;
	const void *const *send;
	void *const *recv;
	const size_t *bytes;
	size_t n;
	struct tpf_device *dev;
};

static enum tpf_status a2a_body(void *p, struct tpf_diag *d)
{
	struct a2a_call *x = p;
	return tpf_cuda_a2a_run(x->a2a, x->send, x->recv, x->bytes, x->n, x->dev->stream, d);
}

/* A burst of calls back to back on one context (both receive buffers
 * several times over, no host wait between), each with its own data and
 * buffers, rank 0 late to the first: checked after one synchronization,
 * with 64 canary bytes after every receive buffer that no call may touch. */
static void a2a_burst(struct tpf_cuda_a2a *a2a, struct tpf_comm *c, struct tpf_device *dev, struct tpf_diag *d)
{
	enum { CALLS = 8, PIECES = 6, CANARY = 64 };
	const int W = c->world, me = c->rank;
	const void *send[CALLS][PIECES];
	void *recv[CALLS][PIECES];
	size_t bytes[CALLS][PIECES];
	unsigned char *h = malloc(65536 * (size_t)W + CANARY);
	int ok = h != NULL;
	enum tpf_status st = TPF_OK;
	for (int n = 0; n < CALLS; n++)
		for (int k = 0; k < PIECES; k++) {
			bytes[n][k] = 4096 + 16 * (size_t)k + 32 * (size_t)n;
			const size_t all = bytes[n][k] * (size_t)W;
			send[n][k] = dev->alloc(dev, all);
			recv[n][k] = dev->alloc(dev, all + CANARY);
			ok &= send[n][k] && recv[n][k];
			if (!ok)
				continue;
			for (int to = 0; to < W; to++)
				for (size_t i = 0; i < bytes[n][k]; i++)
					h[to * bytes[n][k] + i] = a2a_byte(100 + n, k, me, to, i);
			st = st ? st : dev->upload(dev, (void *)send[n][k], h, all, d);
			memset(h, 0xa5, all + CANARY);
			st = st ? st : dev->upload(dev, recv[n][k], h, all + CANARY, d);
		}
	st = st ? st : dev->sync(dev, d);
	if (me == 0)
		usleep(50000); /* the others' kernels wait for this rank's pieces */
	for (int n = 0; n < CALLS && ok && !st; n++)
		st = tpf_cuda_a2a_run(a2a, send[n], recv[n], bytes[n], PIECES, dev->stream, d);
	st = st ? st : dev->sync(dev, d);
	st = st ? st : tpf_cuda_a2a_check(a2a, d);
	int bad_data = 0, bad_canary = 0;
	for (int n = 0; n < CALLS && ok && !st; n++)
		for (int k = 0; k < PIECES && !st; k++) {
			const size_t all = bytes[n][k] * (size_t)W;
			st = dev->download(dev, h, recv[n][k], all + CANARY, d);
			for (int from = 0; from < W; from++)
				for (size_t i = 0; i < bytes[n][k]; i++)
					bad_data += h[from * bytes[n][k] + i] != a2a_byte(100 + n, k, from, me, i);
			for (size_t i = 0; i < CANARY; i++)
				bad_canary += h[all + i] != 0xa5;
		}
	char what[160];
	snprintf(what, sizeof(what),
		 "peer-memory all-to-all: %d calls back to back, rank 0 late: %d bytes wrong, %d canary bytes "
		 "overwritten",
		 CALLS, bad_data, bad_canary);
	expect(ok && !st && !bad_data && !bad_canary, what);
	if (st)
		tpf_diag_print(d, stdout);
	tpf_diag_clear(d);
	for (int n = 0; n < CALLS; n++)
		for (int k = 0; k < PIECES; k++) {
			dev->free(dev, (void *)send[n][k]);
			dev->free(dev, recv[n][k]);
		}
	free(h);
}

/* Calls of the peer-memory all-to-all on one context: 16-byte, 4-byte and
 * odd piece sizes (the kernel's three unit widths), 1 to the largest
 * number of pieces, sizes from a few bytes to megabytes, each call's
 * results downloaded and checked, and the last one run again through a
 * CUDA graph. */
static void peer_alltoall(struct tpf_comm *c, struct tpf_device *dev, struct tpf_diag *d)
{
	static const struct {
		int pieces;
		size_t bytes; /* a destination's chunk of piece k: bytes + k * step */
		size_t step;
	} seq[] = {{1, 4096, 0},	{16, 65536, 16}, {4, 1000, 4},	 {TPF_CUDA_A2A_MAX_PIECES, 48, 16},
		   {3, 777, 1},		{2, 3 << 20, 0}, {64, 100, 12},	 {5, 16, 0}};
	const int W = c->world, me = c->rank, ns = (int)(sizeof(seq) / sizeof(seq[0]));
	size_t most = 0;
	for (int n = 0; n < ns; n++) {
		size_t t = 0;
		for (int k = 0; k < seq[n].pieces; k++)
			t += (seq[n].bytes + k * seq[n].step + 15) / 16 * 16;
		most = t > most ? t : most;
	}
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = c};
	struct tpf_cuda_a2a *a2a = NULL;
	enum tpf_status st = tpf_cuda_a2a_create(me, W, most, &ex, &a2a, d);
	if (W < 2) { /* one rank: no peers to exchange with, refused by name */
		expect(st != TPF_OK && d->count && strstr(d->entries[d->count - 1].text, "world size 1"),
		       "peer-memory all-to-all refused at one rank, naming the world size");
		tpf_diag_clear(d);
		return;
	}
	expect(st == TPF_OK, "peer-memory all-to-all context");
	if (st) {
		tpf_diag_print(d, stdout);
		return;
	}
	const void *send[TPF_CUDA_A2A_MAX_PIECES];
	void *recv[TPF_CUDA_A2A_MAX_PIECES];
	size_t bytes[TPF_CUDA_A2A_MAX_PIECES];
	for (int n = 0; n <= ns; n++) {
		const int q = n < ns ? n : ns - 1; /* the last one again, graph-captured */
		const int np = seq[q].pieces;
		unsigned char *h = NULL;
		int ok = 1;
		for (int k = 0; k < np; k++) {
			bytes[k] = seq[q].bytes + k * seq[q].step;
			const size_t all = bytes[k] * (size_t)W;
			unsigned char *buf = malloc(all);
			send[k] = dev->alloc(dev, all);
			recv[k] = dev->alloc(dev, all);
			ok &= buf && send[k] && recv[k];
			for (int to = 0; buf && to < W; to++)
				for (size_t i = 0; i < bytes[k]; i++)
					buf[to * bytes[k] + i] = a2a_byte(n, k, me, to, i);
			if (buf) {
				dev->upload(dev, (void *)send[k], buf, all, d);
				memset(buf, 0, all);
				dev->upload(dev, recv[k], buf, all, d);
			}
			free(buf);
		}
		if (n < ns) {
			st = ok ? tpf_cuda_a2a_run(a2a, send, recv, bytes, (size_t)np, dev->stream, d) : TPF_ERR_NOMEM;
		} else {
			/* eager, captured and launched, launched; then recv cleared
			 * and the graph launched once more, the call checked */
			struct a2a_call x = {a2a, send, recv, bytes, (size_t)np, dev};
			st = ok ? TPF_OK : TPF_ERR_NOMEM;
			for (int rep = 0; rep < 3 && !st; rep++)
				st = tpf_cuda_device_run_graph(dev, 0xa2a, a2a_body, &x, d);
			for (int k = 0; k < np && !st; k++) {
				unsigned char *z = calloc(1, bytes[k] * (size_t)W);
				st = z ? dev->upload(dev, recv[k], z, bytes[k] * (size_t)W, d) : TPF_ERR_NOMEM;
				free(z);
			}
			st = st ? st : tpf_cuda_device_run_graph(dev, 0xa2a, a2a_body, &x, d);
			tpf_cuda_device_drop_graph(dev);
		}
		st = st ? st : dev->sync(dev, d);
		st = st ? st : tpf_cuda_a2a_check(a2a, d);
		for (int k = 0; k < np && !st && ok; k++) {
			const size_t all = bytes[k] * (size_t)W;
			h = realloc(h, all);
			st = dev->download(dev, h, recv[k], all, d);
			for (int from = 0; from < W && ok && !st; from++)
				for (size_t i = 0; i < bytes[k] && ok; i++)
					ok = h[from * bytes[k] + i] == a2a_byte(n, k, from, me, i);
		}
		char what[160];
		snprintf(what, sizeof(what), "peer-memory all-to-all call %d%s: %d pieces of %zu bytes a rank%s", n,
			 n == ns ? " (CUDA graph)" : "", np, seq[q].bytes,
			 seq[q].step ? " and up" : "");
		expect(!st && ok, what);
		if (st)
			tpf_diag_print(d, stdout);
		tpf_diag_clear(d);
		free(h);
		for (int k = 0; k < np; k++) {
			dev->free(dev, (void *)send[k]);
			dev->free(dev, recv[k]);
		}
	}
	a2a_burst(a2a, c, dev, d);
	tpf_cuda_a2a_free(a2a);
}

/* Collectives on device buffers through the communicator (NCCL, or MPI
 * through host memory under --mpi): allreduce (float32, bfloat16 in place,
 * int64), allgather, alltoall, broadcast, each checked on the host.  h, hr
 * (host) and a, b (device) hold N * world floats. */
static void device_collectives(struct tpf_comm *c, struct tpf_device *dev, float *h, float *hr, void *a, void *b,
			       struct tpf_diag *d)
{
	const int W = c->world;
	enum tpf_status st;
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
}

/* --mpi: the MPI communicator for CUDA (tpf_comm_create_cuda_mpi) at any
 * world size, ranks sharing GPUs: its collectives on device buffers, an
 * empty call, its refusal inside a CUDA graph capture, then the
 * peer-memory kernels. */
static int peer_only(const struct tpf_comm_options *o, struct tpf_diag *d)
{
	struct tpf_comm *c = NULL;
	struct tpf_device *dev = NULL;
	enum tpf_status st = tpf_comm_create_cuda_mpi(o, &c, d);
	if (st) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	RANK = c->rank;
	expect(!strcmp(c->ops->name, "mpi-cuda"), "the MPI communicator for CUDA");
	/* every rank learns whether every rank has its device: all skip (no
	 * GPU visible somewhere) or fail (any other failure) or none does */
	st = tpf_device_create_cuda(c->local_rank, &dev, d);
	int32_t mine = (int32_t)st, *all = calloc((size_t)c->world, sizeof(int32_t));
	if (!all || c->ops->allgather(c, &mine, all, sizeof(mine), NULL, d) != TPF_OK) {
		tpf_diag_print(d, stdout);
		return 1;
	}
	int worst = 0;
	for (int q = 0; q < c->world; q++)
		if (all[q] && (!worst || all[q] != TPF_ERR_UNSUPPORTED))
			worst = all[q];
	free(all);
	if (worst) {
		const int skip = worst == TPF_ERR_UNSUPPORTED;
		printf("rank %d: %s: not every rank has a CUDA device (%s)\n", RANK, skip ? "skipped" : "FAIL",
		       mine ? "this rank's failed" : "another rank's failed");
		tpf_diag_print(d, stdout);
		tpf_device_free(dev);
		tpf_comm_free(c);
		return skip ? 77 : 1;
	}
	printf("rank %d of %d: MPI through host memory, local rank %d\n", RANK, c->world, c->local_rank);
	float *h = malloc(N * sizeof(float) * c->world), *hr = malloc(N * sizeof(float) * c->world);
	void *a = dev->alloc(dev, N * sizeof(float) * c->world), *b = dev->alloc(dev, N * sizeof(float) * c->world);
	if (!h || !hr || !a || !b) {
		printf("rank %d: FAIL: out of memory\n", RANK);
		return 1;
	}
	device_collectives(c, dev, h, hr, a, b, d);
	/* nothing to send is no error */
	st = c->ops->allreduce_sum(c, a, a, 0, TPF_DTYPE_BFLOAT16, dev->stream, d);
	st = st ? st : c->ops->allgather(c, a, b, 0, dev->stream, d);
	if (st)
		tpf_diag_print(d, stdout);
	expect(!st, "an allreduce and an allgather of nothing");
	tpf_diag_clear(d);
	/* a CUDA graph cannot capture a collective through host memory: the
	 * capture fails by name, and the stream stays usable */
	struct ctx x = {c, dev, a, 1024};
	for (int i = 0; i < 1024; i++)
		h[i] = 1.0f;
	st = dev->upload(dev, a, h, 4096, d);
	st = st ? st : tpf_cuda_device_run_graph(dev, 9, body, &x, d); /* eager */
	enum tpf_status cap = st ? st : tpf_cuda_device_run_graph(dev, 9, body, &x, d);
	int named = 0;
	for (size_t i = 0; i < d->count; i++)
		named |= strstr(d->entries[i].text, "cannot be captured in a CUDA graph") != NULL;
	expect(!st && cap == TPF_ERR_UNSUPPORTED && named, "a capture of an allreduce through MPI fails, by name");
	tpf_diag_clear(d);
	tpf_cuda_device_drop_graph(dev);
	st = tpf_cuda_device_run_graph(dev, 10, body, &x, d); /* eager again */
	st = st ? st : dev->download(dev, hr, a, 4096, d);
	int ok = !st;
	for (int i = 0; i < 1024 && ok; i++)
		ok = hr[i] == (float)c->world * (float)c->world;
	if (st)
		tpf_diag_print(d, stdout);
	expect(ok, "an allreduce after the refused capture");
	tpf_diag_clear(d);
	free(h);
	free(hr);
	dev->free(dev, a);
	dev->free(dev, b);
	peer_sequence(c, dev, d);
	peer_quant(c, dev, d);
	peer_alltoall(c, dev, d);
	const int local_fails = fails;
	tpf_device_free(dev);
	tpf_comm_free(c);
	tpf_diag_free(d);
	printf("rank %d: %s\n", RANK, local_fails ? "FAILED" : "all passed");
	return local_fails ? 1 : 0;
}

int main(int argc, char **argv)
{
	int stall = argc > 1 && !strcmp(argv[1], "--stall");
	int stall_peer_mode = argc > 1 && !strcmp(argv[1], "--stall-peer");
	int mpi_mode = argc > 1 && !strcmp(argv[1], "--mpi");
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	struct tpf_device *dev = NULL;
	if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK")) {
		printf("not started by mpirun: skipped\n");
		return 77;
	}
	/* a hang is a failure: end the process well before the test's limit
	 * (with --mpi, ranks that share a GPU take turns on it) */
	alarm(mpi_mode ? 240 : 90);
	struct tpf_comm_options o = {.timeout_s = 8};
	if (mpi_mode)
		return peer_only(&o, d);
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
	device_collectives(c, dev, h, hr, a, b, d);
	/* the peer-memory kernels over calls of changing sizes and paths */
	peer_sequence(c, dev, d);
	peer_quant(c, dev, d);
	/* host path: agreement and a difference named */
	st = tpf_comm_check_same(c, 42, "a value", d);
	expect(!st, "host-memory check_same (equal)");
	st = tpf_comm_check_same(c, (uint64_t)c->rank, "the rank", d);
	if (W > 1)
		expect(st != TPF_OK, "host-memory check_same (different) fails on every rank");
	else /* one rank has no other value to differ from */
		expect(!st, "host-memory check_same of the rank at one rank");
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
	int ok = !st && caps == 1 && reps == 3 && eager == 1;
	for (int i = 0; i < 1024 && ok; i++)
		ok = hr[i] == powf((float)W, 4.0f);
	if (st)
		tpf_diag_print(d, stdout);
	expect(ok, "CUDA graph: 1 eager run, 1 capture, 3 launches of a captured allreduce");
	tpf_diag_clear(d);
	/* another key between (a prefill between decode steps): its own eager
	 * run and capture, and key 7's graph is launched again, not captured */
	for (int it = 0; it < 3 && !st; it++)
		st = tpf_cuda_device_run_graph(dev, it < 2 ? 8 : 7, body, &x, d);
	st = st ? st : dev->download(dev, hr, a, 4096, d);
	tpf_cuda_device_graph_stats(dev, &caps, &reps, &eager);
	ok = !st && caps == 2 && reps == 5 && eager == 2;
	for (int i = 0; i < 1024 && ok; i++)
		ok = hr[i] == powf((float)W, 7.0f);
	if (st)
		tpf_diag_print(d, stdout);
	expect(ok, "CUDA graphs of two keys: key 7's graph kept across key 8's eager run and capture");
	tpf_diag_clear(d);
	tpf_cuda_device_drop_graph(dev);
	/* after the graph counts above: it captures a graph of its own */
	peer_alltoall(c, dev, d);
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
