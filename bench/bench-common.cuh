// SPDX-License-Identifier: MIT
// Shared by the GPU benchmarks (bench-arnorm.cu, bench-fusions.cu): error
// checks, the MPI exchange for peer-memory set-up, and the timing method
// (20 calls captured in one CUDA graph, best of 10 replays, slowest rank).
#ifndef TPF_BENCH_COMMON_CUH
#define TPF_BENCH_COMMON_CUH

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <stdio.h>

#include "tpf-cuda.h"

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
			MPI_Abort(MPI_COMM_WORLD, 1);                                              \
		}                                                                                  \
	} while (0)
#define NK(x)                                                                                      \
	do {                                                                                       \
		ncclResult_t r_ = (x);                                                             \
		if (r_ != ncclSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, ncclGetErrorString(r_)); \
			MPI_Abort(MPI_COMM_WORLD, 1);                                              \
		}                                                                                  \
	} while (0)

static struct tpf_diag *g_diag;
static void ok(enum tpf_status st)
{
	if (st != TPF_OK) {
		tpf_diag_print(g_diag, stderr);
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
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
