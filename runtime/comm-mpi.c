/* SPDX-License-Identifier: MIT */
/* The MPI communicator: MPI_COMM_WORLD, nonblocking collectives polled
 * against a deadline so that a dead or diverged peer gives an error instead
 * of a hang.  Built only when MPI is found. */
#include "tpf-runtime.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mpi_impl {
	int finalize; /* we called MPI_Init */
	int aborted;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static enum tpf_status mpi_err(struct tpf_comm *c, struct tpf_diag *d, const char *what, int rc)
{
	char msg[MPI_MAX_ERROR_STRING] = "";
	int len = 0;
	MPI_Error_string(rc, msg, &len);
	return tpf_diag_fail(d, TPF_ERR_RUNTIME, "MPI %s failed on rank %d: %s", what, c->rank, msg);
}

/* Polls a request until done or the timeout passes. */
static enum tpf_status wait_req(struct tpf_comm *c, MPI_Request *req, const char *what,
				struct tpf_diag *d)
{
	double timeout = c->timeout_s > 0 ? c->timeout_s : 60;
	double end = now_s() + timeout;
	unsigned spins = 0;
	for (;;) {
		int done = 0;
		int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS)
			return mpi_err(c, d, what, rc);
		if (done)
			return TPF_OK;
		if (++spins > 1000) {
			struct timespec ts = {0, 50000}; /* 50 us: leave the core to peers */
			nanosleep(&ts, NULL);
		}
		if ((spins & 63) == 0 && now_s() > end)
			return tpf_diag_fail(d, TPF_ERR_RUNTIME,
					     "MPI %s timed out after %.0f s on rank %d of %d: a peer "
					     "stopped, failed or runs a different schedule",
					     what, timeout, c->rank, c->world);
	}
}

static int mpi_type(enum tpf_dtype t, MPI_Datatype *out)
{
	switch (t) {
	case TPF_DTYPE_FLOAT:
		*out = MPI_FLOAT;
		return 0;
	case TPF_DTYPE_DOUBLE:
		*out = MPI_DOUBLE;
		return 0;
	case TPF_DTYPE_INT32:
		*out = MPI_INT32_T;
		return 0;
	case TPF_DTYPE_INT64:
		*out = MPI_INT64_T;
		return 0;
	default:
		return -1;
	}
}

static enum tpf_status mpi_allreduce(struct tpf_comm *c, const void *send, void *recv, size_t count,
				     enum tpf_dtype dtype, void *stream, struct tpf_diag *d)
{
	MPI_Datatype mt;
	MPI_Request req;
	enum tpf_status st;
	if (count > INT32_MAX)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "allreduce of %zu elements exceeds the MPI limit", count);
	if (mpi_type(dtype, &mt) == 0) {
		int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mt, MPI_SUM,
					MPI_COMM_WORLD, &req);
		if (rc != MPI_SUCCESS)
			return mpi_err(c, d, "allreduce", rc);
		return wait_req(c, &req, "allreduce", d);
	}
	/* narrow types: sum in float32 (integers in int64), round once */
	int integral = tpf_dtype_is_integral(dtype);
	if (!integral && !tpf_dtype_is_float(dtype))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "allreduce of %s not supported",
				     tpf_dtype_name(dtype));
	size_t es = integral ? sizeof(int64_t) : sizeof(float);
	void *tmp = tpf_malloc(count ? count * es : 1);
	if (!tmp)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_dtype wide = integral ? TPF_DTYPE_INT64 : TPF_DTYPE_FLOAT;
	tpf_elem_convert(wide, tmp, dtype, send, (int64_t)count, 1);
	int rc = MPI_Iallreduce(MPI_IN_PLACE, tmp, (int)count, integral ? MPI_INT64_T : MPI_FLOAT,
				MPI_SUM, MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS) {
		st = mpi_err(c, d, "allreduce", rc);
		goto out_free;
	}
	if ((st = wait_req(c, &req, "allreduce", d)))
		goto out_free;
	tpf_elem_convert(dtype, recv, wide, tmp, (int64_t)count, 1);
out_free:
	tpf_free(tmp);
	return st;
}

/* The MPI non-blocking collectives that give every rank `bytes` bytes of
 * each rank's send (MPI_Iallgather, MPI_Ialltoall) share one signature. */
typedef int (*mpi_bytes_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm,
			    MPI_Request *);

static enum tpf_status mpi_bytes_collective(struct tpf_comm *c, mpi_bytes_fn fn, const char *what,
					    const void *send, void *recv, size_t bytes,
					    struct tpf_diag *d)
{
	MPI_Request req;
	if (bytes > INT32_MAX)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s of %zu bytes exceeds the MPI limit", what, bytes);
	int rc = fn(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, what, rc);
	return wait_req(c, &req, what, d);
}

static enum tpf_status mpi_allgather(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				     void *stream, struct tpf_diag *d)
{
	return mpi_bytes_collective(c, MPI_Iallgather, "allgather", send, recv, bytes, d);
}

static enum tpf_status mpi_alltoall(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				    void *stream, struct tpf_diag *d)
{
	return mpi_bytes_collective(c, MPI_Ialltoall, "alltoall", send, recv, bytes, d);
}

static enum tpf_status mpi_broadcast(struct tpf_comm *c, void *buf, size_t bytes, int root,
				     void *stream, struct tpf_diag *d)
{
	MPI_Request req;
	if (bytes > INT32_MAX || root < 0 || root >= c->world)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: bad size or root %d", root);
	int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "broadcast", rc);
	return wait_req(c, &req, "broadcast", d);
}

static enum tpf_status mpi_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	MPI_Request req;
	int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "barrier", rc);
	return wait_req(c, &req, "barrier", d);
}

static void mpi_abort(struct tpf_comm *c, int code)
{
	struct mpi_impl *im = c->impl;
	im->aborted = 1;
	MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void mpi_destroy(struct tpf_comm *c)
{
	struct mpi_impl *im = c->impl;
	int fin = 0;
	MPI_Finalized(&fin);
	if (im && im->finalize && !im->aborted && !fin)
		MPI_Finalize();
	tpf_free(im);
	tpf_free(c);
}

/* Host buffers: one exchange per piece (the CPU backend gains nothing from
 * grouping; the session's direct path is the same as on the GPU). */
static enum tpf_status mpi_alltoall_pieces(struct tpf_comm *c, const void *const *send, void *const *recv,
					   const size_t *bytes, size_t n, void *stream, struct tpf_diag *d)
{
	enum tpf_status st;
	for (size_t i = 0; i < n; i++)
		if ((st = mpi_alltoall(c, send[i], recv[i], bytes[i], stream, d)))
			return st;
	return TPF_OK;
}

static const struct tpf_comm_ops mpi_ops = {
	.name = "mpi",
	.allreduce_sum = mpi_allreduce,
	.allgather = mpi_allgather,
	.alltoall = mpi_alltoall,
	.alltoall_pieces = mpi_alltoall_pieces,
	.broadcast = mpi_broadcast,
	.barrier = mpi_barrier,
	.abort = mpi_abort,
	.destroy = mpi_destroy,
};

enum tpf_status tpf_comm_create_mpi_impl(const struct tpf_comm_options *o, struct tpf_comm **out,
					 struct tpf_diag *d);

enum tpf_status tpf_comm_create_mpi_impl(const struct tpf_comm_options *o, struct tpf_comm **out,
					 struct tpf_diag *d)
{
	int inited = 0, provided = 0;
	*out = NULL;
	struct tpf_comm *c = tpf_calloc(1, sizeof(*c));
	struct mpi_impl *im = tpf_calloc(1, sizeof(*im));
	if (!c || !im) {
		tpf_free(c);
		tpf_free(im);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	}
	MPI_Initialized(&inited);
	if (!inited) {
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
			tpf_free(c);
			tpf_free(im);
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "MPI_Init_thread failed");
		}
		im->finalize = 1;
	}
	MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
	MPI_Comm_size(MPI_COMM_WORLD, &c->world);
	MPI_Comm local;
	if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local) ==
	    MPI_SUCCESS) {
		MPI_Comm_rank(local, &c->local_rank);
		MPI_Comm_free(&local);
	}
	c->ops = &mpi_ops;
	c->impl = im;
	c->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : 60;
	*out = c;
	return TPF_OK;
}
