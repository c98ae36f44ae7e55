/* SPDX-License-Identifier: MIT */
/* The MPI communicator: MPI_COMM_WORLD, nonblocking collectives polled
 * against a deadline so that a dead or diverged peer gives an error instead
 * of a hang.  Every collective runs on the communicator's own staging
 * buffer: a request that timed out cannot be cancelled, and a late peer
 * completes it whenever this rank next makes progress (a later collective,
 * MPI_Finalize), so its buffer must outlive the call.  Built only when MPI
 * is found. */
#include "tpf-runtime.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A collective that timed out: MPI cannot cancel a nonblocking
 * collective, so the request stays pending and a late peer may still
 * complete it, reading from and writing into its buffer.  That buffer is
 * the communicator's own staging buffer, kept here until the request
 * completes or MPI is finalized. */
struct parked {
	MPI_Request req;
	void *buf;
	struct parked *next;
};

struct mpi_impl {
	int finalize; /* we called MPI_Init */
	int aborted;
	/* Every collective runs on this buffer, never on the caller's: the
	 * caller may free its buffers as soon as a call returns, timed out or
	 * not.  Grown to the largest collective. */
	unsigned char *stage;
	size_t cap;
	struct parked *parked;
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

/* Frees the staging buffers of timed-out collectives that completed since. */
static void reap_parked(struct mpi_impl *im)
{
	struct parked **pp = &im->parked;
	while (*pp) {
		struct parked *p = *pp;
		int done = 0;
		if (p->req == MPI_REQUEST_NULL ||
		    (MPI_Test(&p->req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)) {
			*pp = p->next;
			tpf_free(p->buf);
			tpf_free(p);
		} else {
			pp = &p->next;
		}
	}
}

/* The staging buffer, at least `bytes` long (NULL: out of memory, with the
 * error in d). */
static unsigned char *stage(struct tpf_comm *c, size_t bytes, const char *what, struct tpf_diag *d)
{
	struct mpi_impl *im = c->impl;
	reap_parked(im);
	if (!bytes)
		bytes = 1;
	if (bytes > im->cap) {
		unsigned char *p = tpf_malloc(bytes);
		if (!p) {
			tpf_diag_fail(d, TPF_ERR_NOMEM, "MPI %s on rank %d: out of memory staging %zu bytes",
				      what, c->rank, bytes);
			return NULL;
		}
		tpf_free(im->stage);
		im->stage = p;
		im->cap = bytes;
	}
	return im->stage;
}

/* The request still pending (timed out or failed): the staging buffer goes
 * with it (staged: the call used it), a later call stages into a new one. */
static void park(struct tpf_comm *c, MPI_Request req, int staged)
{
	struct mpi_impl *im = c->impl;
	struct parked *p = tpf_calloc(1, sizeof(*p));
	if (p) {
		p->req = req;
		p->buf = staged ? im->stage : NULL;
		p->next = im->parked;
		im->parked = p;
	}
	/* without room to record it the buffer is left allocated: a late peer
	 * may still write into it */
	if (staged) {
		im->stage = NULL;
		im->cap = 0;
	}
}

/* Polls a request until done or the timeout passes; on a timeout or
 * failure the request is parked, with the staging buffer when the call
 * ran on it (staged). */
static enum tpf_status wait_req(struct tpf_comm *c, MPI_Request *req, int staged, const char *what,
				struct tpf_diag *d)
{
	double timeout = c->timeout_s > 0 ? c->timeout_s : 60;
	double end = now_s() + timeout;
	unsigned spins = 0;
	for (;;) {
		int done = 0;
		int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
		if (rc != MPI_SUCCESS) {
			park(c, *req, staged);
			return mpi_err(c, d, what, rc);
		}
		if (done)
			return TPF_OK;
		if (++spins > 1000) {
			struct timespec ts = {0, 50000}; /* 50 us: leave the core to peers */
			nanosleep(&ts, NULL);
		}
		if ((spins & 63) == 0 && now_s() > end) {
			park(c, *req, staged);
			return tpf_diag_fail(d, TPF_ERR_RUNTIME,
					     "MPI %s timed out after %.3g s on rank %d of %d: a peer "
					     "stopped, failed or runs a different schedule",
					     what, timeout, c->rank, c->world);
		}
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
	size_t nb;
	if (count > INT32_MAX)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "allreduce of %zu elements exceeds the MPI limit", count);
	if (mpi_type(dtype, &mt) == 0) {
		if (tpf_dtype_storage_bytes(dtype, count, &nb))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "allreduce: bad dtype or count");
		unsigned char *buf = stage(c, nb, "allreduce", d);
		if (!buf)
			return TPF_ERR_NOMEM;
		if (nb)
			memcpy(buf, send, nb);
		int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mt, MPI_SUM, MPI_COMM_WORLD,
					&req);
		if (rc != MPI_SUCCESS)
			return mpi_err(c, d, "allreduce", rc);
		if ((st = wait_req(c, &req, 1, "allreduce", d)))
			return st;
		if (nb)
			memcpy(recv, buf, nb);
		return TPF_OK;
	}
	/* narrow types: sum in float32 (integers in int64), round once */
	int integral = tpf_dtype_is_integral(dtype);
	if (!integral && !tpf_dtype_is_float(dtype))
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "allreduce of %s not supported",
				     tpf_dtype_name(dtype));
	size_t es = integral ? sizeof(int64_t) : sizeof(float);
	void *tmp = stage(c, count * es, "allreduce", d);
	if (!tmp)
		return TPF_ERR_NOMEM;
	enum tpf_dtype wide = integral ? TPF_DTYPE_INT64 : TPF_DTYPE_FLOAT;
	tpf_elem_convert(wide, tmp, dtype, send, (int64_t)count, 1);
	int rc = MPI_Iallreduce(MPI_IN_PLACE, tmp, (int)count, integral ? MPI_INT64_T : MPI_FLOAT,
				MPI_SUM, MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "allreduce", rc);
	if ((st = wait_req(c, &req, 1, "allreduce", d)))
		return st;
	tpf_elem_convert(dtype, recv, wide, tmp, (int64_t)count, 1);
	return TPF_OK;
}

static enum tpf_status mpi_allgather(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				     void *stream, struct tpf_diag *d)
{
	MPI_Request req;
	enum tpf_status st;
	const size_t all = bytes * (size_t)c->world;
	if (bytes > INT32_MAX)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "allgather of %zu bytes exceeds the MPI limit",
				     bytes);
	unsigned char *buf = stage(c, all, "allgather", d);
	if (!buf)
		return TPF_ERR_NOMEM;
	if (bytes)
		memcpy(buf + bytes * (size_t)c->rank, send, bytes);
	int rc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)bytes, MPI_BYTE,
				MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "allgather", rc);
	if ((st = wait_req(c, &req, 1, "allgather", d)))
		return st;
	if (all)
		memcpy(recv, buf, all);
	return TPF_OK;
}

static enum tpf_status mpi_alltoall(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				    void *stream, struct tpf_diag *d)
{
	MPI_Request req;
	enum tpf_status st;
	const size_t all = bytes * (size_t)c->world;
	if (bytes > INT32_MAX)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "alltoall of %zu bytes exceeds the MPI limit",
				     bytes);
	/* sent from the first half, received into the second */
	unsigned char *buf = stage(c, 2 * all, "alltoall", d);
	if (!buf)
		return TPF_ERR_NOMEM;
	if (all)
		memcpy(buf, send, all);
	int rc = MPI_Ialltoall(buf, (int)bytes, MPI_BYTE, buf + all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD,
			       &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "alltoall", rc);
	if ((st = wait_req(c, &req, 1, "alltoall", d)))
		return st;
	if (all)
		memcpy(recv, buf + all, all);
	return TPF_OK;
}

static enum tpf_status mpi_broadcast(struct tpf_comm *c, void *data, size_t bytes, int root,
				     void *stream, struct tpf_diag *d)
{
	MPI_Request req;
	enum tpf_status st;
	if (bytes > INT32_MAX || root < 0 || root >= c->world)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: bad size or root %d", root);
	unsigned char *buf = stage(c, bytes, "broadcast", d);
	if (!buf)
		return TPF_ERR_NOMEM;
	if (bytes && c->rank == root)
		memcpy(buf, data, bytes);
	int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "broadcast", rc);
	if ((st = wait_req(c, &req, 1, "broadcast", d)))
		return st;
	if (bytes && c->rank != root)
		memcpy(data, buf, bytes);
	return TPF_OK;
}

static enum tpf_status mpi_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	MPI_Request req;
	reap_parked(c->impl);
	int rc = MPI_Ibarrier(MPI_COMM_WORLD, &req);
	if (rc != MPI_SUCCESS)
		return mpi_err(c, d, "barrier", rc);
	return wait_req(c, &req, 0, "barrier", d);
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
	if (!im) {
		tpf_free(c);
		return;
	}
	if (!fin)
		reap_parked(im);
	if (im->finalize && !im->aborted && !fin) {
		MPI_Finalize();
		fin = 1;
	}
	/* a collective still pending may be completed by a late peer for as
	 * long as MPI runs: its buffer is freed only once MPI has ended (when
	 * the caller initialized MPI and finalizes it later, it stays) */
	struct parked *p = im->parked;
	while (p) {
		struct parked *next = p->next;
		if (fin) {
			tpf_free(p->buf);
			tpf_free(p);
		}
		p = next;
	}
	tpf_free(im->stage);
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
	/* which ranks share a host: the peer-memory collectives need one */
	enum tpf_status st = tpf_comm_group_hosts(c, d);
	if (st) {
		mpi_destroy(c);
		return st;
	}
	*out = c;
	return TPF_OK;
}
