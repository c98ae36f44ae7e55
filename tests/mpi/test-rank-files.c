/* SPDX-License-Identifier: MIT */
/*
 * A session's start-up exchange on 2 ranks (runtime/session.c):
 *
 *   - a rank's own error before the ranks compare their graphs (no model,
 *     a malformed tuning variable on that rank only) ends both ranks at
 *     once: the failing rank with its error, the other naming that rank
 *     and its error, neither blaming the graph structure, both well
 *     within the communicator's timeout;
 *   - graphs of another structure are refused on both ranks;
 *   - rank models without tp_rank metadata (check_rank_files): byte-
 *     identical weight matrices in a graph with collectives are refused on
 *     both ranks, naming them; matrices that differ only where the sampled
 *     digest does not look (the full digest tells) run, as do models whose
 *     only identical weights are vectors, models with tp_rank metadata,
 *     and sessions without check_rank_files; rank 0 alone warns, once,
 *     that the rank order is unchecked.
 *
 * Started alone, it re-launches itself under `mpirun -np 2`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpf-runtime.h"

static int failures, rank = -1;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond); \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* Entries of severity sev that contain needle. */
static int count_msgs(const struct tpf_diag *d, enum tpf_severity sev, const char *needle)
{
	int n = 0;
	for (size_t i = 0; i < d->count; i++)
		n += d->entries[i].severity == sev && strstr(d->entries[i].text, needle);
	return n;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define BIG_K 256
#define BIG_N 512 /* w: 512 KiB of float32 */
/* An element of w the sampled digest does not read: bytes 5220..5223 lie
 * after the first 4 KiB and the first 1 KiB slice (4096..5119), before
 * the second slice (at 4096 + (524288 - 8192 - 1024) / 31 = 20711). */
#define UNSAMPLED 1305

/* x[2,K] @ w[K,N], all-reduced, plus a gamma vector: the text of a rank
 * model.  meta: the tp_rank metadata line's rank, or -1 for none. */
static char *model_text(int k, int n, int meta)
{
	char *buf = malloc(4096);
	char md[64] = "";
	if (meta >= 0)
		snprintf(md, sizeof(md), "metadata \"tp_rank\" \"%d\"\n", meta);
	snprintf(buf, 4096,
		 "ir_version 10\nopset \"\" 23\nopset \"com.microsoft\" 1\n%s"
		 "graph \"\" {\n"
		 "  input %%0: f32[2,%d] \"x\"\n"
		 "  init %%1: f32[%d,%d] \"w\" (%zu bytes)\n"
		 "  init %%2: f32[%d] \"gamma\" (%zu bytes)\n"
		 "  %%3 = MatMul(%%0, %%1) : f32[2,%d]  # mm\n"
		 "  %%4 = com.microsoft.AllReduce(%%3) : f32[2,%d]  # ar\n"
		 "  %%5 = Mul(%%4, %%2) : f32[2,%d]  # scale\n"
		 "  output %%5: f32[2,%d] \"y\"\n"
		 "}\n",
		 md, k, k, n, (size_t)k * (size_t)n * 4, n, (size_t)n * 4, n, n, n, n);
	return buf;
}

/* The model with its weights' bytes: w[i] = wbase + i % 7, gamma = 1,
 * and w's element `poke` (when >= 0) set to 99. */
static struct tpf_model *make_model(int k, int n, int meta, float wbase, long poke, float **keep,
				    struct tpf_diag *d)
{
	char *text = model_text(k, n, meta);
	struct tpf_model *m = NULL;
	if (tpf_model_parse_text(text, strlen(text), "rank-files", &m, d)) {
		tpf_diag_print(d, stderr);
		free(text);
		return NULL;
	}
	free(text);
	size_t nw = (size_t)k * (size_t)n;
	float *w = malloc((nw + (size_t)n) * sizeof(float));
	for (size_t i = 0; i < nw; i++)
		w[i] = wbase + (float)(i % 7);
	if (poke >= 0)
		w[poke] = 99.0f;
	for (size_t i = 0; i < (size_t)n; i++)
		w[nw + i] = 1.0f;
	for (size_t i = 0; i < m->graph->n_initializers; i++) {
		struct tpf_tensor *t = (struct tpf_tensor *)m->graph->initializers[i]->init;
		t->data = t->rank == 2 ? (const void *)w : (const void *)(w + nw);
	}
	*keep = w;
	return m;
}

struct outcome {
	enum tpf_status st;
	double secs;
};

static struct outcome create(struct tpf_comm *c, const struct tpf_model *m, int check_files,
			     struct tpf_diag *d)
{
	struct tpf_session *s = NULL;
	double t0 = now_s();
	struct tpf_session_options o = {.comm = c, .check_rank_files = check_files};
	struct outcome r = {tpf_session_create(m, &o, &s, d), 0};
	r.secs = now_s() - t0;
	tpf_session_free(s);
	return r;
}

/* Both ranks make their model and a session of it. */
static struct outcome case_run(struct tpf_comm *c, int k, int n, int meta, float wbase, long poke,
			       int check_files, struct tpf_diag *d)
{
	float *keep = NULL;
	struct tpf_model *m = make_model(k, n, meta, wbase, poke, &keep, d);
	struct outcome r = m ? create(c, m, check_files, d) : (struct outcome){TPF_ERR_INVALID, 0};
	tpf_model_free(m);
	free(keep);
	return r;
}

int main(int argc, char **argv)
{
	if (!tpf_comm_launched_by_mpi()) {
		char *args[] = {"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", argv[0], NULL};
		execvp("mpirun", args);
		printf("mpirun not found: skipped\n");
		return 77;
	}
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	if (tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 30}, &c, d)) {
		tpf_diag_print(d, stderr);
		return 1;
	}
	rank = c->rank;
	if (c->world != 2) {
		fprintf(stderr, "rank %d: needs 2 ranks, has %d\n", rank, c->world);
		return 1;
	}
	const char *unchecked = "the rank models carry no tp_rank metadata";
	const char *structure = "ranks disagree on the graph structure";
	struct outcome r;

	/* a rank without a model */
	{
		float *keep = NULL;
		struct tpf_model *m = make_model(4, 4, -1, 1.0f, -1, &keep, d);
		tpf_diag_clear(d);
		r = create(c, rank == 1 ? NULL : m, 0, d);
		CHECK(r.st != TPF_OK);
		CHECK(r.secs < 10);
		CHECK(count_msgs(d, TPF_SEV_ERROR, structure) == 0);
		if (rank == 0)
			CHECK(count_msgs(d, TPF_SEV_ERROR,
					 "rank 1 failed while creating its session: session: no model") == 1);
		else
			CHECK(count_msgs(d, TPF_SEV_ERROR, "session: no model") == 1);
		tpf_model_free(m);
		free(keep);
	}
	/* a malformed tuning variable on rank 1 only */
	tpf_diag_clear(d);
	if (rank == 1)
		setenv("TPF_GEMV", "many", 1);
	r = case_run(c, 4, 4, -1, rank, -1, 1, d);
	unsetenv("TPF_GEMV");
	CHECK(r.st != TPF_OK);
	CHECK(r.secs < 10);
	CHECK(count_msgs(d, TPF_SEV_ERROR, structure) == 0);
	CHECK(count_msgs(d, TPF_SEV_ERROR, rank == 0 ? "rank 1 failed while creating its session: "
						       "environment variable TPF_GEMV=\"many\""
						     : "environment variable TPF_GEMV=\"many\"") == 1);
	/* another structure on rank 1 */
	tpf_diag_clear(d);
	r = case_run(c, 4, rank ? 8 : 4, -1, rank, -1, 0, d);
	CHECK(r.st == TPF_ERR_INVALID);
	CHECK(count_msgs(d, TPF_SEV_ERROR, structure) == 1);

	/* identical weights: refused on both ranks, naming them */
	tpf_diag_clear(d);
	r = case_run(c, 4, 4, -1, 1.0f, -1, 1, d);
	CHECK(r.st == TPF_ERR_INVALID);
	CHECK(count_msgs(d, TPF_SEV_ERROR, "ranks 0 and 1 loaded byte-identical weights (1 weight matrices") == 1);
	/* a large matrix equal in every sampled byte, one element apart:
	 * the digest of every byte tells them apart */
	tpf_diag_clear(d);
	r = case_run(c, BIG_K, BIG_N, -1, 1.0f, rank ? UNSAMPLED : -1, 1, d);
	CHECK(r.st == TPF_OK);
	CHECK(count_msgs(d, TPF_SEV_WARNING, unchecked) == (rank == 0));
	/* the same, identical: refused */
	tpf_diag_clear(d);
	r = case_run(c, BIG_K, BIG_N, -1, 1.0f, UNSAMPLED, 1, d);
	CHECK(r.st == TPF_ERR_INVALID);
	CHECK(count_msgs(d, TPF_SEV_ERROR,
			 "ranks 0 and 1 loaded byte-identical weights (1 weight matrices, 0.5 MiB)") == 1);
	/* shards that differ: run, and rank 0 warns once */
	tpf_diag_clear(d);
	r = case_run(c, 4, 4, -1, (float)rank, -1, 1, d);
	CHECK(r.st == TPF_OK);
	CHECK(count_msgs(d, TPF_SEV_WARNING, unchecked) == (rank == 0));
	/* identical, but named by their metadata: each checked against its rank */
	tpf_diag_clear(d);
	r = case_run(c, 4, 4, rank, 1.0f, -1, 1, d);
	CHECK(r.st == TPF_OK);
	CHECK(d->count == 0);
	/* identical without check_rank_files (a library caller's own ranks) */
	tpf_diag_clear(d);
	r = case_run(c, 4, 4, -1, 1.0f, -1, 0, d);
	CHECK(r.st == TPF_OK);
	CHECK(d->count == 0);
	/* identical vectors only (a scale: no matrix a shard would hold) */
	tpf_diag_clear(d);
	{
		static const char text[] =
			"ir_version 10\nopset \"\" 23\nopset \"com.microsoft\" 1\n"
			"graph \"\" {\n"
			"  input %0: f32[2,4] \"x\"\n"
			"  init %1: f32[4] \"gamma\" = [1.5, 0.5, -1.0, 2.0]\n"
			"  %2 = Mul(%0, %1) : f32[2,4]  # scale\n"
			"  %3 = com.microsoft.AllReduce(%2) : f32[2,4]  # ar\n"
			"  output %3: f32[2,4] \"y\"\n"
			"}\n";
		struct tpf_model *m = NULL;
		CHECK(tpf_model_parse_text(text, strlen(text), "vectors", &m, d) == TPF_OK);
		r = m ? create(c, m, 1, d) : (struct outcome){TPF_ERR_INVALID, 0};
		CHECK(r.st == TPF_OK);
		CHECK(count_msgs(d, TPF_SEV_WARNING, unchecked) == (rank == 0));
		CHECK(count_msgs(d, TPF_SEV_ERROR, "") == 0);
		tpf_model_free(m);
	}

	if (rank == 0 && failures)
		tpf_diag_print(d, stderr);
	printf("rank %d: %s\n", rank, failures ? "FAILED" : "ok");
	tpf_comm_free(c);
	tpf_diag_free(d);
	return failures ? 1 : 0;
}
