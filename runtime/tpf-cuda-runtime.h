/*
 * tpfuse runtime on NVIDIA GPUs: the CUDA device (memory, one stream per
 * rank, copies at the graph's edges, whole-plan CUDA graphs) and the NCCL
 * communicator.  Built when the `cuda` (and `nccl`) features find the
 * toolkit; the calls below then exist, TPF_HAVE_CUDA / TPF_HAVE_NCCL are
 * defined for the library's sources.  No CUDA header is needed to use them.
 *
 *   struct tpf_comm *comm;   under mpirun, one rank per GPU
 *   tpf_comm_create_nccl(&(struct tpf_comm_options){.timeout_s = 60}, &comm, d);
 *   struct tpf_session_options so = {.backend = TPF_BACKEND_CUDA, .comm = comm};
 *
 * NVLink multicast (NVLS) is never used: the communicator sets
 * NCCL_NVLS_ENABLE=0 before NCCL starts.  Stalls never hang: device
 * synchronization polls with the communicator's timeout, checks NCCL's
 * asynchronous errors while it waits, and aborts the communicator when a
 * peer is gone.
 */
#ifndef TPF_CUDA_RUNTIME_H
#define TPF_CUDA_RUNTIME_H

#include "tpf-runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA device of this rank: GPU local_rank modulo the visible count,
 * a non-blocking stream, cudaMalloc'ed memory.  TPF_ERR_UNSUPPORTED when no
 * GPU is visible. */
enum tpf_status tpf_device_create_cuda(int local_rank, struct tpf_device **out, struct tpf_diag *d);
/* The same; the name tpf_device_create() dispatches to. */
enum tpf_status tpf_cuda_device_create(int local_rank, struct tpf_device **out, struct tpf_diag *d);

/* Whole-plan CUDA graphs, one a key (a plan), up to 8 kept
 * (runtime/graph-cache.h).  Runs body(ctx) on dev's stream: the first call
 * with a given key runs it eagerly (first-use allocations happen there),
 * the second captures it into a graph and launches that, later calls with
 * the same key only launch the graph, whatever ran between (another plan's
 * graph or eager steps: a generation's decode step keeps its graph across
 * prefills).  body must enqueue work on the device's stream only and must
 * not synchronize. */
enum tpf_status tpf_cuda_device_run_graph(struct tpf_device *dev, uint64_t key,
					  enum tpf_status (*body)(void *ctx, struct tpf_diag *d), void *ctx,
					  struct tpf_diag *d);
/* Forgets every captured graph (call when memory a graph points into
 * moves: the arena, the workspace, kept inputs, peer-memory contexts). */
void tpf_cuda_device_drop_graph(struct tpf_device *dev);
/* Forgets key's graph (its plan is gone). */
void tpf_cuda_device_drop_graph_key(struct tpf_device *dev, uint64_t key);
/* Graphs captured, graph launches and eager runs so far (for tests). */
void tpf_cuda_device_graph_stats(const struct tpf_device *dev, unsigned long *captures,
				 unsigned long *replays, unsigned long *eager);

/* The NCCL communicator over MPI_COMM_WORLD (MPI is started when needed):
 * unique id broadcast over MPI, the GPU chosen from the launcher's local
 * rank (OMPI_COMM_WORLD_LOCAL_RANK, else MPI's shared-memory split), NCCL
 * in non-blocking mode with every wait bounded by o->timeout_s.
 * Collectives on device buffers (a non-NULL stream) go through NCCL and are
 * only enqueued; calls with a NULL stream work on host buffers through MPI
 * (the runtime's start-up agreements).  TPF_ERR_UNSUPPORTED when built
 * without NCCL or MPI. */
enum tpf_status tpf_comm_create_nccl(const struct tpf_comm_options *o, struct tpf_comm **out,
				     struct tpf_diag *d);

/* The MPI communicator (MPI_COMM_WORLD) for the CUDA backend, named
 * "mpi-cuda": collectives on device buffers (a non-NULL stream) wait for
 * the stream and go through host memory and MPI; calls with a NULL stream
 * work on host buffers.  Ranks may share a GPU (NCCL refuses that), so
 * world sizes above the GPU count run, slowly; the peer-memory kernels
 * work as at one GPU per rank.  A collective on a capturing stream fails
 * (TPF_ERR_UNSUPPORTED): no CUDA graphs.  TPF_ERR_UNSUPPORTED when built
 * without MPI. */
enum tpf_status tpf_comm_create_cuda_mpi(const struct tpf_comm_options *o, struct tpf_comm **out,
					 struct tpf_diag *d);

/* Device synchronization watchdog (set by the NCCL communicator): poll()
 * returns nonzero with a message when the communicator failed; abort()
 * ends it so that stuck kernels return.  timeout_s bounds every wait. */
struct tpf_cuda_watchdog {
	int (*poll)(void *ctx, char *msg, size_t size);
	void (*abort)(void *ctx);
	void *ctx;
	double timeout_s;
};
void tpf_cuda_set_watchdog(const struct tpf_cuda_watchdog *w); /* NULL: none (60 s timeout) */

#ifdef __cplusplus
}
#endif

#endif /* TPF_CUDA_RUNTIME_H */
