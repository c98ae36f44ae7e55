/* SPDX-License-Identifier: MIT */
/*
 * A collective that times out on one rank while its peer is late: the
 * request stays pending (MPI cannot cancel a nonblocking collective), and
 * when the peer arrives its data must not land in memory the caller has
 * freed.  Rank 1 joins each collective 2 s late; rank 0 gives up after
 * 0.3 s, then makes progress in a barrier (the late data arrives there)
 * and checks that nothing it freed meanwhile was written.  Every call
 * is tried: tpf_comm_agree (its buffer is the agreement's own), an
 * allreduce of bfloat16 (summed in float32), an allgather, an alltoall
 * and a broadcast from rank 1 on buffers rank 0 frees right after the
 * timeout.
 *
 * Without a sanitizer, this program replaces free(): while rank 0 waits
 * for the collective that times out and frees its buffers, freed blocks
 * are filled with a pattern and kept, and the pattern must be intact
 * after the late peer's data came in.  Under AddressSanitizer the
 * sanitizer's own quarantine reports the write instead.
 *
 * Started alone, it re-launches itself under `mpirun -np 2`.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tpf-runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define TPF_QUARANTINE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TPF_QUARANTINE 0
#endif
#endif
#if !defined(TPF_QUARANTINE) && !defined(__GLIBC__)
#define TPF_QUARANTINE 0 /* free() is replaced through glibc's __libc_free */
#endif
#ifndef TPF_QUARANTINE
#define TPF_QUARANTINE 1
#endif

static int failures, rank = -1;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond); \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

#define PATTERN 0xA5
#define MAX_HELD 4096

static struct held {
	unsigned char *p;
	size_t n;
} held[MAX_HELD];
static size_t n_held;
static volatile int quarantine;

#if TPF_QUARANTINE
extern void __libc_free(void *p);

/* free() while quarantining: the block is filled and kept, never reused */
void free(void *p)
{
	if (p && quarantine && n_held < MAX_HELD) {
		size_t n = malloc_usable_size(p);
		memset(p, PATTERN, n);
		held[n_held].p = p;
		held[n_held].n = n;
		n_held++;
		return;
	}
	__libc_free(p);
}
#endif

/* How many bytes of the blocks freed while quarantining were written. */
static size_t written_after_free(void)
{
	size_t bad = 0;
	for (size_t i = 0; i < n_held; i++)
		for (size_t k = 0; k < held[i].n; k++)
			bad += held[i].p[k] != PATTERN;
	return bad;
}

static int diag_mentions(const struct tpf_diag *d, const char *needle)
{
	for (size_t i = 0; i < d->count; i++)
		if (strstr(d->entries[i].text, needle))
			return 1;
	return 0;
}

enum call { AGREE, ALLREDUCE_BF16, ALLGATHER, ALLTOALL, BROADCAST, N_CALLS };
static const char *const call_name[N_CALLS] = {"agree", "allreduce", "allgather", "alltoall",
					       "broadcast"};

/* One collective on buffers of the heap, freed as soon as it returns. */
static enum tpf_status run_call(struct tpf_comm *c, enum call k, struct tpf_diag *d)
{
	enum tpf_status st;
	enum { N = 4096 };
	unsigned char *a = malloc(N * 2), *b = malloc(N * 2);
	if (!a || !b) {
		free(a);
		free(b);
		return TPF_ERR_NOMEM;
	}
	memset(a, rank + 1, N * 2);
	switch (k) {
	case AGREE:
		st = tpf_comm_agree(c, TPF_OK, "testing", d);
		break;
	case ALLREDUCE_BF16:
		st = c->ops->allreduce_sum(c, a, b, N, TPF_DTYPE_BFLOAT16, NULL, d);
		break;
	case ALLGATHER:
		st = c->ops->allgather(c, a, b, N, NULL, d);
		break;
	case ALLTOALL:
		st = c->ops->alltoall(c, a, b, N, NULL, d);
		break;
	default:
		st = c->ops->broadcast(c, a, N, 1, NULL, d);
		break;
	}
	free(a);
	free(b);
	return st;
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
	for (int k = 0; k < N_CALLS; k++) {
		tpf_diag_clear(d);
		if (rank == 0) {
			c->timeout_s = 0.3;
			n_held = 0;
			quarantine = 1;
			enum tpf_status st = run_call(c, (enum call)k, d);
			quarantine = 0;
			CHECK(st == TPF_ERR_RUNTIME);
			CHECK(diag_mentions(d, "timed out after 0.3 s on rank 0 of 2"));
			if (!diag_mentions(d, "timed out"))
				tpf_diag_print(d, stderr);
		} else {
			sleep(2);
			CHECK(run_call(c, (enum call)k, d) == TPF_OK);
		}
		/* the late call completes rank 0's pending one here */
		c->timeout_s = 30;
		tpf_diag_clear(d);
		CHECK(c->ops->barrier(c, d) == TPF_OK);
		if (rank == 0) {
			size_t bad = written_after_free();
			if (bad)
				fprintf(stderr,
					"rank 0: %s: the late peer's data landed in freed memory (%zu bytes "
					"of %zu freed blocks)\n",
					call_name[k], bad, n_held);
			CHECK(bad == 0);
		}
	}
	/* the communicator still pairs collectives after the late ones */
	float x = (float)rank + 1;
	CHECK(c->ops->allreduce_sum(c, &x, &x, 1, TPF_DTYPE_FLOAT, NULL, d) == TPF_OK);
	CHECK(x == 3.0f);
	printf("rank %d: %s%s\n", rank, failures ? "FAILED" : "ok",
	       TPF_QUARANTINE ? "" : " (freed memory watched only by a sanitizer, if any)");
	tpf_comm_free(c);
	tpf_diag_free(d);
	return failures ? 1 : 0;
}
