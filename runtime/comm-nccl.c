/* SPDX-License-Identifier: MIT */
/* The NCCL communicator: GPU ranks under an MPI launcher.  MPI starts the
 * ranks and carries the unique id; NCCL runs in non-blocking mode so that
 * every wait (initialization, enqueueing, finalization) is bounded by the
 * timeout, and asynchronous errors are polled (here and by the CUDA
 * device's watchdog while it waits for the stream) and end in an abort
 * instead of a hang.  NVLink multicast is switched off before NCCL starts.
 * Calls with a NULL stream work on host memory through MPI: the runtime's
 * start-up agreements (structure hash, shapes, statuses). */
#include "tpf-cuda-runtime.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct nccl_impl {
	struct tpf_comm *mpi; /* host-side collectives and bootstrap */
	ncclComm_t comm;
	int device;
	int failed;
	char why[200];
};

struct abort_job {
	ncclComm_t comm;
	int device;
};

static void *abort_main(void *p)
{
	struct abort_job *j = p;
	cudaSetDevice(j->device);
	ncclCommAbort(j->comm);
	free(j);
	return NULL;
}

/* Aborts the NCCL communicator without waiting for it: an abort behind a
 * stuck kernel must not stall the rank that reports the error. */
static void abort_comm(struct nccl_impl *im)
{
	if (!im->comm)
		return;
	struct abort_job *j = malloc(sizeof(*j));
	pthread_t t;
	im->failed = 1;
	if (j) {
		j->comm = im->comm;
		j->device = im->device;
		if (pthread_create(&t, NULL, abort_main, j) == 0) {
			pthread_detach(t);
			im->comm = NULL;
			return;
		}
		free(j);
	}
	ncclCommAbort(im->comm);
	im->comm = NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(unsigned spins)
{
	if (spins > 1000) {
		struct timespec ts = {0, 20000};
		nanosleep(&ts, NULL);
	}
}

static enum tpf_status nccl_fail(struct tpf_comm *c, struct tpf_diag *d, const char *what,
				 ncclResult_t r)
{
	struct nccl_impl *im = c->impl;
	const char *last = ncclGetLastError(im->comm);
	im->failed = 1;
	snprintf(im->why, sizeof(im->why), "NCCL %s failed on rank %d: %s%s%s", what, c->rank,
		 ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "%s", im->why);
}

/* Waits until the communicator leaves ncclInProgress (non-blocking mode). */
static enum tpf_status nccl_settle(struct tpf_comm *c, const char *what, ncclResult_t r,
				   struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	double limit = c->timeout_s > 0 ? c->timeout_s : 60;
	double end = now_s() + limit;
	unsigned spins = 0;
	while (r == ncclInProgress) {
		ncclResult_t a = ncclSuccess;
		ncclCommGetAsyncError(im->comm, &a);
		r = a;
		if (r != ncclInProgress)
			break;
		nap(++spins);
		if ((spins & 63) == 0 && now_s() > end) {
			abort_comm(im);
			return tpf_diag_fail(d, TPF_ERR_RUNTIME,
					     "NCCL %s timed out after %.3g s on rank %d of %d: a peer "
					     "stopped, failed or runs a different schedule",
					     what, limit, c->rank, c->world);
		}
	}
	if (r != ncclSuccess)
		return nccl_fail(c, d, what, r);
	/* an earlier collective may have failed asynchronously */
	ncclResult_t a = ncclSuccess;
	ncclCommGetAsyncError(im->comm, &a);
	if (a != ncclSuccess && a != ncclInProgress)
		return nccl_fail(c, d, what, a);
	return TPF_OK;
}

static int nccl_type(enum tpf_dtype t, ncclDataType_t *out)
{
	switch (t) {
	case TPF_DTYPE_FLOAT: *out = ncclFloat32; return 0;
	case TPF_DTYPE_FLOAT16: *out = ncclFloat16; return 0;
	case TPF_DTYPE_BFLOAT16: *out = ncclBfloat16; return 0;
	case TPF_DTYPE_DOUBLE: *out = ncclFloat64; return 0;
	case TPF_DTYPE_INT8: *out = ncclInt8; return 0;
	case TPF_DTYPE_UINT8: *out = ncclUint8; return 0;
	case TPF_DTYPE_INT32: *out = ncclInt32; return 0;
	case TPF_DTYPE_UINT32: *out = ncclUint32; return 0;
	case TPF_DTYPE_INT64: *out = ncclInt64; return 0;
	case TPF_DTYPE_UINT64: *out = ncclUint64; return 0;
	default: return -1;
	}
}

static enum tpf_status check_alive(struct tpf_comm *c, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	if (im->failed || !im->comm)
		return tpf_diag_fail(d, TPF_ERR_RUNTIME, "NCCL communicator of rank %d is unusable%s%s",
				     c->rank, im->why[0] ? ": " : "", im->why);
	return TPF_OK;
}

static enum tpf_status nccl_allreduce(struct tpf_comm *c, const void *send, void *recv,
				      size_t count, enum tpf_dtype dtype, void *stream,
				      struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	ncclDataType_t t;
	enum tpf_status st;
	if (!stream)
		return im->mpi->ops->allreduce_sum(im->mpi, send, recv, count, dtype, NULL, d);
	if ((st = check_alive(c, d)))
		return st;
	if (nccl_type(dtype, &t))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "NCCL allreduce of %s not supported",
				     tpf_dtype_name(dtype));
	if (!count)
		return TPF_OK;
	ncclResult_t r = ncclAllReduce(send, recv, count, t, ncclSum, im->comm, (cudaStream_t)stream);
	return nccl_settle(c, "allreduce", r, d);
}

static enum tpf_status nccl_allgather(struct tpf_comm *c, const void *send, void *recv,
				      size_t bytes, void *stream, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	enum tpf_status st;
	if (!stream)
		return im->mpi->ops->allgather(im->mpi, send, recv, bytes, NULL, d);
	if ((st = check_alive(c, d)))
		return st;
	if (!bytes)
		return TPF_OK;
	ncclResult_t r = ncclAllGather(send, recv, bytes, ncclUint8, im->comm, (cudaStream_t)stream);
	return nccl_settle(c, "allgather", r, d);
}

static enum tpf_status nccl_alltoall(struct tpf_comm *c, const void *send, void *recv,
				     size_t bytes, void *stream, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	enum tpf_status st;
	if (!stream)
		return im->mpi->ops->alltoall(im->mpi, send, recv, bytes, NULL, d);
	if ((st = check_alive(c, d)))
		return st;
	if (!bytes)
		return TPF_OK;
	ncclResult_t r = ncclGroupStart();
	for (int p = 0; p < c->world && r == ncclSuccess; p++) {
		r = ncclSend((const char *)send + (size_t)p * bytes, bytes, ncclUint8, p, im->comm,
			     (cudaStream_t)stream);
		if (r == ncclSuccess || r == ncclInProgress)
			r = ncclRecv((char *)recv + (size_t)p * bytes, bytes, ncclUint8, p, im->comm,
				     (cudaStream_t)stream);
		if (r == ncclInProgress)
			r = ncclSuccess;
	}
	ncclResult_t e = ncclGroupEnd();
	if (r != ncclSuccess)
		return nccl_fail(c, d, "alltoall", r);
	return nccl_settle(c, "alltoall", e, d);
}

static enum tpf_status nccl_alltoall_pieces(struct tpf_comm *c, const void *const *send, void *const *recv,
					    const size_t *bytes, size_t n, void *stream, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	enum tpf_status st;
	if (!stream) {
		for (size_t i = 0; i < n; i++)
			if ((st = im->mpi->ops->alltoall(im->mpi, send[i], recv[i], bytes[i], NULL, d)))
				return st;
		return TPF_OK;
	}
	if ((st = check_alive(c, d)))
		return st;
	ncclResult_t r = ncclGroupStart();
	for (size_t i = 0; i < n && r == ncclSuccess; i++) {
		if (!bytes[i])
			continue;
		for (int p = 0; p < c->world && r == ncclSuccess; p++) {
			r = ncclSend((const char *)send[i] + (size_t)p * bytes[i], bytes[i], ncclUint8, p, im->comm,
				     (cudaStream_t)stream);
			if (r == ncclSuccess || r == ncclInProgress)
				r = ncclRecv((char *)recv[i] + (size_t)p * bytes[i], bytes[i], ncclUint8, p, im->comm,
					     (cudaStream_t)stream);
			if (r == ncclInProgress)
				r = ncclSuccess;
		}
	}
	ncclResult_t e = ncclGroupEnd();
	if (r != ncclSuccess)
		return nccl_fail(c, d, "alltoall (pieces)", r);
	return nccl_settle(c, "alltoall (pieces)", e, d);
}

static enum tpf_status nccl_broadcast(struct tpf_comm *c, void *buf, size_t bytes, int root,
				      void *stream, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	enum tpf_status st;
	if (!stream)
		return im->mpi->ops->broadcast(im->mpi, buf, bytes, root, NULL, d);
	if ((st = check_alive(c, d)))
		return st;
	if (root < 0 || root >= c->world)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: root %d outside world size %d", root,
				     c->world);
	if (!bytes)
		return TPF_OK;
	ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, im->comm, (cudaStream_t)stream);
	return nccl_settle(c, "broadcast", r, d);
}

static enum tpf_status nccl_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	struct nccl_impl *im = c->impl;
	return im->mpi->ops->barrier(im->mpi, d);
}

static void nccl_abort(struct tpf_comm *c, int code)
{
	struct nccl_impl *im = c->impl;
	abort_comm(im);
	tpf_comm_abort(im->mpi, code);
}

static void nccl_destroy(struct tpf_comm *c)
{
	struct nccl_impl *im = c->impl;
	if (im) {
		tpf_cuda_set_watchdog(NULL);
		if (im->comm) {
			cudaSetDevice(im->device);
			if (im->failed) {
				abort_comm(im);
			} else {
				/* finalize is bounded like everything else */
				struct tpf_diag *d = tpf_diag_create();
				ncclResult_t r = ncclCommFinalize(im->comm);
				if (nccl_settle(c, "finalize", r, d) == TPF_OK && im->comm)
					ncclCommDestroy(im->comm);
				else
					abort_comm(im);
				tpf_diag_free(d);
			}
			im->comm = NULL;
		}
		tpf_comm_free(im->mpi);
		tpf_free(im);
	}
	tpf_free(c);
}

static const struct tpf_comm_ops nccl_ops = {
	.name = "nccl",
	.allreduce_sum = nccl_allreduce,
	.allgather = nccl_allgather,
	.alltoall = nccl_alltoall,
	.alltoall_pieces = nccl_alltoall_pieces,
	.broadcast = nccl_broadcast,
	.barrier = nccl_barrier,
	.abort = nccl_abort,
	.destroy = nccl_destroy,
};

/* ------------------------------------------------------------ watchdog */

static int watch_poll(void *ctx, char *msg, size_t size)
{
	struct tpf_comm *c = ctx;
	struct nccl_impl *im = c->impl;
	if (!im->comm)
		return 0;
	ncclResult_t a = ncclSuccess;
	ncclCommGetAsyncError(im->comm, &a);
	if (a == ncclSuccess || a == ncclInProgress)
		return 0;
	snprintf(msg, size, "NCCL failed asynchronously on rank %d: %s", c->rank, ncclGetErrorString(a));
	return 1;
}

static void watch_abort(void *ctx)
{
	struct tpf_comm *c = ctx;
	struct nccl_impl *im = c->impl;
	abort_comm(im);
	snprintf(im->why, sizeof(im->why), "aborted after a failed or stalled collective");
}

/* ------------------------------------------------------------ creation */

/* NCCL needs a GPU of its own for every rank: two ranks on one GPU (more
 * ranks on a host than it has GPUs) are named here, on every rank, instead
 * of failing inside NCCL's initialization. */
static enum tpf_status check_own_gpu(struct tpf_comm *c, struct tpf_comm *mpi, int device, struct tpf_diag *d)
{
	struct where {
		char host[64], bus[32]; /* bus "": unknown, compared with none */
	} mine, *all = tpf_calloc((size_t)c->world, sizeof(*all));
	/* every rank takes part in the exchange, or none does */
	enum tpf_status st = tpf_comm_agree(mpi, all ? TPF_OK : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory"),
					    "checking that every rank has a GPU of its own", d);
	if (st) {
		tpf_free(all);
		return st;
	}
	memset(&mine, 0, sizeof(mine));
	if (gethostname(mine.host, sizeof(mine.host) - 1))
		snprintf(mine.host, sizeof(mine.host), "?");
	if (cudaDeviceGetPCIBusId(mine.bus, (int)sizeof(mine.bus), device) != cudaSuccess) {
		cudaGetLastError();
		mine.bus[0] = 0;
	}
	st = mpi->ops->allgather(mpi, &mine, all, sizeof(mine), NULL, d);
	for (int p = 0; p < c->world && !st; p++)
		for (int q = 0; q < p && !st; q++)
			if (all[p].bus[0] && !strcmp(all[p].host, all[q].host) && !strcmp(all[p].bus, all[q].bus))
				st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
						   "ranks %d and %d share the GPU at %s of host %s: NCCL needs "
						   "one GPU per rank (%d ranks; tpfuse run --comm mpi lets ranks "
						   "share GPUs, through host memory)",
						   q, p, all[p].bus, all[p].host, c->world);
	tpf_free(all);
	return st;
}

enum tpf_status tpf_comm_create_nccl(const struct tpf_comm_options *o, struct tpf_comm **out,
				     struct tpf_diag *d)
{
	enum tpf_status st;
	struct tpf_comm *mpi = NULL;
	*out = NULL;
	/* NVLink multicast must never be used, whatever the environment says */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	if ((st = tpf_comm_create_mpi(o, &mpi, d)))
		return st;
	struct tpf_comm *c = tpf_calloc(1, sizeof(*c));
	struct nccl_impl *im = tpf_calloc(1, sizeof(*im));
	if (!c || !im) {
		tpf_free(c);
		tpf_free(im);
		tpf_comm_free(mpi);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	c->ops = &nccl_ops;
	c->impl = im;
	c->rank = mpi->rank;
	c->world = mpi->world;
	c->hosts = mpi->hosts;
	c->timeout_s = mpi->timeout_s;
	im->mpi = mpi;
	const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
	if (!lr)
		lr = getenv("MPI_LOCALRANKID");
	if (!lr)
		lr = getenv("SLURM_LOCALID");
	c->local_rank = lr && *lr ? atoi(lr) : mpi->local_rank;

	/* every rank reaches the id broadcast, failed or not */
	int count = 0;
	cudaError_t ce = cudaGetDeviceCount(&count);
	if (ce != cudaSuccess || count <= 0) {
		cudaGetLastError();
		st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "rank %d: no CUDA device is visible", c->rank);
	} else {
		im->device = c->local_rank % count;
		ce = cudaSetDevice(im->device);
		if (ce != cudaSuccess)
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "rank %d: cudaSetDevice(%d): %s", c->rank,
					   im->device, cudaGetErrorString(ce));
	}
	if ((st = tpf_comm_agree(mpi, st, "selecting its GPU", d)))
		goto out_fail;
	if ((st = check_own_gpu(c, mpi, im->device, d)))
		goto out_fail;
	ncclUniqueId id;
	memset(&id, 0, sizeof(id));
	ncclResult_t r = ncclSuccess;
	if (c->rank == 0)
		r = ncclGetUniqueId(&id);
	if (r != ncclSuccess)
		st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "ncclGetUniqueId: %s", ncclGetErrorString(r));
	if ((st = tpf_comm_agree(mpi, st, "creating the NCCL id", d)))
		goto out_fail;
	if ((st = mpi->ops->broadcast(mpi, &id, sizeof(id), 0, NULL, d)))
		goto out_fail;
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	cfg.blocking = 0;
	r = ncclCommInitRankConfig(&im->comm, c->world, id, c->rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress)
		st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "ncclCommInitRankConfig on rank %d: %s", c->rank,
				   ncclGetErrorString(r));
	else
		st = nccl_settle(c, "init", r, d);
	if ((st = tpf_comm_agree(mpi, st, "initializing NCCL", d)))
		goto out_fail;
	struct tpf_cuda_watchdog w = {.poll = watch_poll, .abort = watch_abort, .ctx = c,
				      .timeout_s = c->timeout_s};
	tpf_cuda_set_watchdog(&w);
	*out = c;
	return TPF_OK;
out_fail:
	abort_comm(im);
	tpf_comm_free(mpi);
	tpf_free(im);
	tpf_free(c);
	return st;
}
