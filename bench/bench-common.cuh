// SPDX-License-Identifier: MIT
// Shared by the GPU benchmarks (bench-arnorm.cu, bench-fusions.cu): error
// checks, the start (MPI, --json, GPU, NCCL, stream), the MPI exchange for
// peer-memory set-up, and the timing method
// (20 calls captured in one CUDA graph, best of 10 replays, slowest rank).
#ifndef TPF_BENCH_COMMON_CUH
#define TPF_BENCH_COMMON_CUH

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-cuda.h"
#include "tpf-kernels.h"

/* Aborts the MPI job when call `x`'s result is not `good`, with `text` of it. */
#define BENCH_CHECK(type, x, good, text)                                                           \
	do {                                                                                       \
		type e_ = (x);                                                                     \
		if (e_ != good) {                                                                  \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, text(e_));              \
			MPI_Abort(MPI_COMM_WORLD, 1);                                              \
		}                                                                                  \
	} while (0)
#define CK(x) BENCH_CHECK(cudaError_t, x, cudaSuccess, cudaGetErrorString)
#define NK(x) BENCH_CHECK(ncclResult_t, x, ncclSuccess, ncclGetErrorString)

static struct tpf_diag *g_diag;
static void ok(enum tpf_status st)
{
	if (st != TPF_OK) {
		tpf_diag_print(g_diag, stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
}

/* What every benchmark starts with: MPI, --json PATH, g_diag, the rank's
 * GPU (OMPI_COMM_WORLD_LOCAL_RANK modulo the GPUs), an NCCL communicator
 * over all ranks and a non-blocking stream. */
struct bench_env {
	int rank, world;
	const char *json_path;
	cudaDeviceProp prop;
	ncclComm_t comm;
	cudaStream_t s;
};

static void bench_start(int *argc, char ***argv, struct bench_env *e)
{
	MPI_Init(argc, argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &e->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &e->world);
	e->json_path = NULL;
	for (int i = 1; i < *argc; i++)
		if (strcmp((*argv)[i], "--json") == 0 && i + 1 < *argc)
			e->json_path = (*argv)[++i];
	g_diag = tpf_diag_create();
	// the kernels' tuning variables, as a session checks them: a value
	// a variable does not take stops the run instead of timing a default
	if (tpf_env_check(g_diag) != TPF_OK) {
		if (e->rank == 0)
			tpf_diag_print(g_diag, stderr);
		MPI_Finalize();
		exit(2);
	}

	int ndev = 0;
	CK(cudaGetDeviceCount(&ndev));
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	int local = lr ? atoi(lr) : e->rank;
	CK(cudaSetDevice(local % ndev));
	CK(cudaGetDeviceProperties(&e->prop, local % ndev));

	ncclUniqueId id;
	if (e->rank == 0)
		NK(ncclGetUniqueId(&id));
	MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
	NK(ncclCommInitRank(&e->comm, e->world, id, e->rank));
	CK(cudaStreamCreateWithFlags(&e->s, cudaStreamNonBlocking));
}

static int mpi_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
	(void)ctx;
	return MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD) ==
			       MPI_SUCCESS
		       ? 0
		       : -1;
}

static const int kReps = 20, kReplays = 10;

template <typename F> static double graph_time(cudaStream_t s, F fn)
{
	for (int i = 0; i < 3; i++)
		fn();
	CK(cudaStreamSynchronize(s));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	for (int i = 0; i < kReps; i++)
		fn();
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	double best = 1e30;
	for (int r = 0; r < kReplays; r++) {
		MPI_Barrier(MPI_COMM_WORLD);
		CK(cudaEventRecord(a, s));
		CK(cudaGraphLaunch(ge, s));
		CK(cudaEventRecord(b, s));
		CK(cudaEventSynchronize(b));
		float ms;
		CK(cudaEventElapsedTime(&ms, a, b));
		if (ms * 1000.0 / kReps < best)
			best = ms * 1000.0 / kReps;
	}
	double worst;
	MPI_Allreduce(&best, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return worst;
}

#endif /* TPF_BENCH_COMMON_CUH */
