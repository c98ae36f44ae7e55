/* SPDX-License-Identifier: MIT */
/* The MPI communicator for the CUDA backend: collectives on device memory
 * travel through host memory (the stream is synchronized, the buffers are
 * copied down, MPI runs the collective, the result is copied up).  Unlike
 * NCCL it lets ranks share a GPU, so a plan for 8 ranks runs on 2 GPUs:
 * slowly, but with the same kernels, the same peer-memory collectives
 * (tpf_cuda_arnorm through CUDA IPC works between processes on one GPU)
 * and the same outputs as at one GPU per rank.  What it cannot do is run
 * inside a CUDA graph capture: a collective that finds its stream capturing
 * fails with an error instead of breaking the capture.  Calls with a NULL
 * stream work on host memory (the runtime's start-up agreements). */
#include "tpf-cuda-runtime.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

struct staged_impl {
	struct tpf_comm *mpi;
	unsigned char *host[2]; /* send and receive staging, grown as needed */
	size_t cap[2];
};

static enum tpf_status cuda_fail(struct tpf_comm *c, const char *what, const char *step, cudaError_t e,
				 struct tpf_diag *d)
{
	cudaGetLastError();
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s through MPI on rank %d: %s: %s", what, c->rank, step,
			     cudaGetErrorString(e));
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for the stream's work, at most the communicator's timeout (a
 * kernel that waits for a peer which stopped must not stall this rank). */
static enum tpf_status wait_stream(struct tpf_comm *c, const char *what, const char *step, void *stream,
				   struct tpf_diag *d)
{
	const double limit = c->timeout_s > 0 ? c->timeout_s : 60;
	const double end = now_s() + limit;
	for (unsigned spins = 1;; spins++) {
		cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
		if (e == cudaSuccess)
			return TPF_OK;
		if (e != cudaErrorNotReady)
			return cuda_fail(c, what, step, e, d);
		if (spins > 2000) {
			struct timespec ts = {0, 20000};
			nanosleep(&ts, NULL);
		}
		if ((spins & 63) == 0 && now_s() > end)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME,
					     "%s through MPI on rank %d of %d: %s: the GPU's work did not finish "
					     "within %.3g s (a kernel waits for a peer that stopped or runs a "
					     "different schedule?)",
					     what, c->rank, c->world, step, limit);
	}
}

/* Ready to stage: the stream is not being captured and its work is done
 * (the device buffers hold what the collective must send). */
static enum tpf_status settle(struct tpf_comm *c, const char *what, void *stream, struct tpf_diag *d)
{
	enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
	cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
	if (e != cudaSuccess)
		return cuda_fail(c, what, "querying the stream", e, d);
	if (cs != cudaStreamCaptureStatusNone)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				     "%s through MPI on rank %d: a collective through host memory cannot be "
				     "captured in a CUDA graph (use NCCL, one GPU per rank, for --cuda-graph)",
				     what, c->rank);
	return wait_stream(c, what, "waiting for the stream", stream, d);
}

/* The staging buffers are pageable on purpose: a copy from the device into
 * pageable memory returns once it is done, and one to the device once it
 * has read the host bytes, so no wait that times out leaves a copy in
 * flight on them.  Nor does a collective: the MPI communicator runs each
 * on a buffer of its own and keeps that one while a timed-out request is
 * pending.  So these can be freed whenever a call has returned. */
static enum tpf_status staging(struct tpf_comm *c, int which, size_t bytes, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	if (bytes <= im->cap[which])
		return TPF_OK;
	unsigned char *p = tpf_realloc(im->host[which], bytes);
	if (!p)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory staging %zu bytes for MPI", bytes);
	im->host[which] = p;
	im->cap[which] = bytes;
	return TPF_OK;
}

static enum tpf_status copy(struct tpf_comm *c, const char *what, void *dst, const void *src, size_t bytes,
			    enum cudaMemcpyKind kind, void *stream, struct tpf_diag *d)
{
	if (!bytes)
		return TPF_OK;
	const char *step = kind == cudaMemcpyDeviceToHost ? "copying down" : "copying up";
	cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)stream);
	return e == cudaSuccess ? wait_stream(c, what, step, stream, d) : cuda_fail(c, what, step, e, d);
}

/* Settles the stream, makes room for the result (recv_bytes) and copies
 * send_bytes of send down into the send staging. */
static enum tpf_status stage_down(struct tpf_comm *c, const char *what, const void *send, size_t send_bytes,
				  size_t recv_bytes, void *stream, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	enum tpf_status st;
	if ((st = settle(c, what, stream, d)) || (st = staging(c, 0, send_bytes, d)) ||
	    (st = staging(c, 1, recv_bytes, d)))
		return st;
	return copy(c, what, im->host[0], send, send_bytes, cudaMemcpyDeviceToHost, stream, d);
}

static enum tpf_status copy_up(struct tpf_comm *c, const char *what, void *recv, const void *host, size_t bytes,
			       void *stream, struct tpf_diag *d)
{
	return copy(c, what, recv, host, bytes, cudaMemcpyHostToDevice, stream, d);
}

static enum tpf_status staged_allreduce(struct tpf_comm *c, const void *send, void *recv, size_t count,
					enum tpf_dtype dtype, void *stream, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	if (!stream)
		return im->mpi->ops->allreduce_sum(im->mpi, send, recv, count, dtype, NULL, d);
	const unsigned bits = tpf_dtype_bits(dtype);
	if (!bits || bits % 8)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "allreduce of %s through MPI not supported",
				     tpf_dtype_name(dtype));
	const size_t bytes = count * (size_t)(bits / 8);
	enum tpf_status st;
	if ((st = stage_down(c, "allreduce", send, bytes, bytes, stream, d)) ||
	    (st = im->mpi->ops->allreduce_sum(im->mpi, im->host[0], im->host[1], count, dtype, NULL, d)))
		return st;
	return copy_up(c, "allreduce", recv, im->host[1], bytes, stream, d);
}

static enum tpf_status staged_allgather(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
					void *stream, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	if (!stream)
		return im->mpi->ops->allgather(im->mpi, send, recv, bytes, NULL, d);
	const size_t all = bytes * (size_t)c->world;
	enum tpf_status st;
	if ((st = stage_down(c, "allgather", send, bytes, all, stream, d)) ||
	    (st = im->mpi->ops->allgather(im->mpi, im->host[0], im->host[1], bytes, NULL, d)))
		return st;
	return copy_up(c, "allgather", recv, im->host[1], all, stream, d);
}

static enum tpf_status staged_alltoall(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				       void *stream, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	if (!stream)
		return im->mpi->ops->alltoall(im->mpi, send, recv, bytes, NULL, d);
	const size_t all = bytes * (size_t)c->world;
	enum tpf_status st;
	if ((st = stage_down(c, "alltoall", send, all, all, stream, d)) ||
	    (st = im->mpi->ops->alltoall(im->mpi, im->host[0], im->host[1], bytes, NULL, d)))
		return st;
	return copy_up(c, "alltoall", recv, im->host[1], all, stream, d);
}

static enum tpf_status staged_alltoall_pieces(struct tpf_comm *c, const void *const *send, void *const *recv,
					      const size_t *bytes, size_t n, void *stream, struct tpf_diag *d)
{
	enum tpf_status st;
	for (size_t i = 0; i < n; i++)
		if ((st = staged_alltoall(c, send[i], recv[i], bytes[i], stream, d)))
			return st;
	return TPF_OK;
}

static enum tpf_status staged_broadcast(struct tpf_comm *c, void *buf, size_t bytes, int root, void *stream,
					struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	if (!stream)
		return im->mpi->ops->broadcast(im->mpi, buf, bytes, root, NULL, d);
	if (root < 0 || root >= c->world)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: root %d outside world size %d", root,
				     c->world);
	enum tpf_status st;
	if ((st = stage_down(c, "broadcast", buf, bytes, 0, stream, d)) ||
	    (st = im->mpi->ops->broadcast(im->mpi, im->host[0], bytes, root, NULL, d)))
		return st;
	return copy_up(c, "broadcast", buf, im->host[0], bytes, stream, d);
}

static enum tpf_status staged_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	struct staged_impl *im = c->impl;
	return im->mpi->ops->barrier(im->mpi, d);
}

static void staged_abort(struct tpf_comm *c, int code)
{
	struct staged_impl *im = c->impl;
	tpf_comm_abort(im->mpi, code);
}

/* The device's waits take this communicator's timeout (the watchdog has
 * nothing else to report: MPI's errors come back from its calls). */
static int watch_poll(void *ctx, char *msg, size_t size)
{
	(void)ctx;
	(void)msg;
	(void)size;
	return 0;
}

static void watch_abort(void *ctx)
{
	(void)ctx;
}

static void staged_destroy(struct tpf_comm *c)
{
	struct staged_impl *im = c->impl;
	if (im) {
		tpf_cuda_set_watchdog(NULL);
		tpf_comm_free(im->mpi);
		tpf_free(im->host[0]);
		tpf_free(im->host[1]);
		tpf_free(im);
	}
	tpf_free(c);
}

static const struct tpf_comm_ops staged_ops = {
	.name = "mpi-cuda",
	.allreduce_sum = staged_allreduce,
	.allgather = staged_allgather,
	.alltoall = staged_alltoall,
	.alltoall_pieces = staged_alltoall_pieces,
	.broadcast = staged_broadcast,
	.barrier = staged_barrier,
	.abort = staged_abort,
	.destroy = staged_destroy,
};

enum tpf_status tpf_comm_create_cuda_mpi(const struct tpf_comm_options *o, struct tpf_comm **out,
					 struct tpf_diag *d)
{
	enum tpf_status st;
	struct tpf_comm *mpi = NULL;
	*out = NULL;
	if ((st = tpf_comm_create_mpi(o, &mpi, d)))
		return st;
	struct tpf_comm *c = tpf_calloc(1, sizeof(*c));
	struct staged_impl *im = tpf_calloc(1, sizeof(*im));
	if (!c || !im) {
		tpf_free(c);
		tpf_free(im);
		tpf_comm_free(mpi);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	im->mpi = mpi;
	c->ops = &staged_ops;
	c->impl = im;
	c->rank = mpi->rank;
	c->world = mpi->world;
	c->hosts = mpi->hosts;
	c->local_rank = mpi->local_rank;
	c->timeout_s = mpi->timeout_s;
	struct tpf_cuda_watchdog w = {.poll = watch_poll, .abort = watch_abort, .ctx = c, .timeout_s = c->timeout_s};
	tpf_cuda_set_watchdog(&w);
	*out = c;
	return TPF_OK;
}
