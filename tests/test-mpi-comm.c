/* SPDX-License-Identifier: MIT */
/*
 * The MPI communicator on 2 ranks: allreduce (float32, bfloat16, int64),
 * allgather, alltoall, broadcast, barrier, the agreement helpers, and a
 * collective that one rank never joins in time: the other must fail with a
 * timeout message instead of hanging.  Started alone, it re-launches itself
 * under `mpirun -np 2` (exit 77, skipped, when mpirun is missing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tpf-runtime.h"

static int failures;

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank, __LINE__, #cond); \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static int diag_mentions(const struct tpf_diag *d, const char *needle)
{
	for (size_t i = 0; i < d->count; i++)
		if (strstr(d->entries[i].text, needle))
			return 1;
	return 0;
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
	int rank = -1;
	if (tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 2}, &c, d)) {
		tpf_diag_print(d, stderr);
		return 1;
	}
	rank = c->rank;
	CHECK(c->world == 2);

	/* allreduce: float32 in place, bf16 summed in float32, int64 exactly */
	float f[3] = {1.5f, -2.0f, (float)rank};
	CHECK(c->ops->allreduce_sum(c, f, f, 3, TPF_DTYPE_FLOAT, NULL, d) == TPF_OK);
	CHECK(f[0] == 3.0f && f[1] == -4.0f && f[2] == 1.0f);
	uint16_t b[2] = {tpf_f32_to_bf16(1.0f), tpf_f32_to_bf16(rank ? 0.00390625f : 256.0f)}, br[2];
	CHECK(c->ops->allreduce_sum(c, b, br, 2, TPF_DTYPE_BFLOAT16, NULL, d) == TPF_OK);
	CHECK(tpf_bf16_to_f32(br[0]) == 2.0f && tpf_bf16_to_f32(br[1]) == 256.0f);
	int64_t i64[1] = {INT64_C(1) << 40};
	CHECK(c->ops->allreduce_sum(c, i64, i64, 1, TPF_DTYPE_INT64, NULL, d) == TPF_OK);
	CHECK(i64[0] == INT64_C(1) << 41);
	/* allgather and alltoall */
	int32_t mine[2] = {rank * 10, rank * 10 + 1}, all[4];
	CHECK(c->ops->allgather(c, mine, all, sizeof(mine), NULL, d) == TPF_OK);
	CHECK(all[0] == 0 && all[1] == 1 && all[2] == 10 && all[3] == 11);
	int32_t send[2] = {rank * 100, rank * 100 + 1}, recv[2];
	CHECK(c->ops->alltoall(c, send, recv, sizeof(int32_t), NULL, d) == TPF_OK);
	CHECK(recv[0] == rank && recv[1] == 100 + rank);
	int32_t bc = rank ? 0 : 77;
	CHECK(c->ops->broadcast(c, &bc, sizeof(bc), 0, NULL, d) == TPF_OK);
	CHECK(bc == 77);
	CHECK(c->ops->barrier(c, d) == TPF_OK);
	/* agreement helpers */
	CHECK(tpf_comm_check_same(c, 5, "five", d) == TPF_OK);
	CHECK(tpf_comm_check_same(c, (uint64_t)rank, "the rank", d) == TPF_ERR_INVALID);
	CHECK(diag_mentions(d, "ranks disagree on the rank"));
	tpf_diag_clear(d);
	CHECK(tpf_comm_agree(c, rank == 1 ? TPF_ERR_IO : TPF_OK, "testing", d) != TPF_OK);
	if (rank == 0)
		CHECK(diag_mentions(d, "rank 1 failed while testing"));
	tpf_diag_clear(d);
	/* rank 1 joins 4 s late: rank 0 times out after 2 s with a message */
	float x = 1.0f;
	if (rank == 0) {
		enum tpf_status st = c->ops->allreduce_sum(c, &x, &x, 1, TPF_DTYPE_FLOAT, NULL, d);
		CHECK(st == TPF_ERR_RUNTIME);
		CHECK(diag_mentions(d, "timed out after 2 s on rank 0 of 2"));
	} else {
		sleep(4);
		float y = 1.0f;
		CHECK(c->ops->allreduce_sum(c, &y, &y, 1, TPF_DTYPE_FLOAT, NULL, d) == TPF_OK);
	}
	tpf_diag_clear(d);
	c->timeout_s = 30;
	CHECK(c->ops->barrier(c, d) == TPF_OK);
	printf("rank %d: %s\n", rank, failures ? "FAILED" : "ok");
	tpf_comm_free(c);
	tpf_diag_free(d);
	return failures ? 1 : 0;
}
