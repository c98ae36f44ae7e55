// SPDX-License-Identifier: MIT
// What the peer-memory contexts share (ar-peer.cu: the one-shot and
// two-shot all-reduces and the sharded norm's exchange; a2a.cu: the
// all-to-all): the device state and call counter every kernel keeps, the
// bounded waits, and the host exchange that maps every rank's buffer.
#pragma once

#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "cuda-common.cuh"
#include "tpf-cuda.h"

namespace tpfc {

constexpr int kPeerMaxWorld = 8;

// A context's device state (its first words where it holds more).
struct PeerState {
	unsigned iter;      // calls begun (advanced once per call by its last block to read it)
	unsigned arrived;   // blocks of the current call that have read iter
	unsigned timed_out; // a wait gave up (sticky: later waits give up at once)
};

__device__ inline unsigned long long now_ns()
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Whether a wait that began at t0 gives up: after timeout_ns, or at once
// once any earlier wait of this context gave up (then marked for the host),
// so that a rank whose peer never arrives ends its kernel and the host
// reports it instead of hanging.  Callers check it every 256 spins.
__device__ inline bool wait_expired(PeerState *s, unsigned long long timeout_ns, unsigned long long t0)
{
	if (!*reinterpret_cast<volatile unsigned *>(&s->timed_out) && now_ns() - t0 <= timeout_ns)
		return false;
	atomicExch(&s->timed_out, 1u);
	return true;
}

// The call counter, in two steps so that the read overlaps a kernel's
// first loads: read_counter (thread 0 issues the read) at the kernel's
// start, then call_counter, which publishes it to the block and counts the
// block in (the atomic releases the read: the block that counts last knows
// every block has read the counter).  Returns the counter; `*ticket` is the
// block's place, for call_end.
__device__ inline unsigned read_counter(const PeerState *s)
{
	return threadIdx.x == 0 ? *reinterpret_cast<const volatile unsigned *>(&s->iter) : 0u;
}

__device__ inline unsigned call_counter(PeerState *s, unsigned it, unsigned *s_iter, unsigned *ticket)
{
	if (threadIdx.x == 0) {
		*s_iter = it;
		unsigned t;
		asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(t) : "l"(&s->arrived) : "memory");
		*ticket = t;
	}
	__syncthreads();
	return *s_iter;
}

// The end of every peer-memory kernel: the block that counted in last
// advances the counter for the next call (which reads it only after this
// kernel has finished).
__device__ inline void call_end(PeerState *s, unsigned iter, unsigned ticket)
{
	if (threadIdx.x == 0 && ticket == gridDim.x - 1) {
		*reinterpret_cast<volatile unsigned *>(&s->arrived) = 0;
		*reinterpret_cast<volatile unsigned *>(&s->iter) = iter + 1;
	}
}

// Whether the peer-memory kernels are launched as programmatic dependents:
// unless TPF_PDL=0.  Read here rather than through tpfc_pdl so that
// these kernels build without common.cu (bench/gpu/run.sh builds them
// with kernels/env.c only).
inline bool peer_pdl()
{
	const char *e = tpf_env_text("TPF_PDL");
	return !(e && !strcmp(e, "0"));
}

// What each rank contributes to the exchange: its buffer's handle and grid,
// or the news that it has none (so that every rank fails together).
struct PeerHandle {
	cudaIpcMemHandle_t handle;
	int ok, grid;
};

// Exchanges every rank's IPC handle of `local` and maps the peers' buffers
// into peer[] (peer[rank] = local); grids[] (may be NULL) gets each rank's
// `grid`.  st is this rank's set-up so far: every rank takes part in the
// exchange, failed or not, and all fail together.  A failure may leave
// some peers mapped (the caller's free closes them).  `what` names the
// context in messages.
inline enum tpf_status map_peers(int rank, int world, const struct tpf_cuda_exchange *ex, enum tpf_status st,
				 char *local, int grid, char **peer, int *grids, const char *what, struct tpf_diag *d)
{
	PeerHandle mine, scratch[kPeerMaxWorld];
	memset(&mine, 0, sizeof(mine));
	if (st == TPF_OK) {
		cudaError_t e = cudaIpcGetMemHandle(&mine.handle, local);
		if (e != cudaSuccess)
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s: cudaIpcGetMemHandle: %s", what, cudaGetErrorString(e));
	}
	mine.ok = st == TPF_OK;
	mine.grid = grid;
	if (ex->allgather(ex->ctx, &mine, scratch, sizeof(mine)) != 0)
		return st != TPF_OK ? st
				    : tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s: exchanging peer handles failed", what);
	if (st != TPF_OK)
		return st;
	for (int q = 0; q < world; q++) {
		if (!scratch[q].ok)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s: rank %d could not set up its buffer", what, q);
		if (grids)
			grids[q] = scratch[q].grid;
	}
	for (int q = 0; q < world; q++) {
		if (q == rank) {
			peer[q] = local;
			continue;
		}
		void *p = NULL;
		cudaError_t e = cudaIpcOpenMemHandle(&p, scratch[q].handle, cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s: mapping rank %d's buffer: %s", what, q,
					     cudaGetErrorString(e));
		peer[q] = (char *)p;
	}
	return TPF_OK;
}

} // namespace tpfc
