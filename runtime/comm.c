/* SPDX-License-Identifier: MIT */
/* The communicator interface's common parts and the one-rank communicator. */
#include "tpf-runtime.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static enum tpf_status self_allreduce(struct tpf_comm *c, const void *send, void *recv, size_t count,
				      enum tpf_dtype dtype, void *stream, struct tpf_diag *d)
{
	size_t nb;
	if (tpf_dtype_storage_bytes(dtype, count, &nb))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "allreduce: bad dtype or count");
	if (send != recv && nb)
		memmove(recv, send, nb);
	return TPF_OK;
}

static enum tpf_status self_copy(struct tpf_comm *c, const void *send, void *recv, size_t bytes,
				 void *stream, struct tpf_diag *d)
{
	if (send != recv && bytes)
		memmove(recv, send, bytes);
	return TPF_OK;
}

static enum tpf_status self_broadcast(struct tpf_comm *c, void *buf, size_t bytes, int root,
				      void *stream, struct tpf_diag *d)
{
	if (root != 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "broadcast: root %d outside world size 1", root);
	return TPF_OK;
}

static enum tpf_status self_barrier(struct tpf_comm *c, struct tpf_diag *d)
{
	return TPF_OK;
}

static void self_destroy(struct tpf_comm *c)
{
	tpf_free(c);
}

static const struct tpf_comm_ops self_ops = {
	.name = "self",
	.allreduce_sum = self_allreduce,
	.allgather = self_copy,
	.alltoall = self_copy,
	.broadcast = self_broadcast,
	.barrier = self_barrier,
	.abort = NULL,
	.destroy = self_destroy,
};

enum tpf_status tpf_comm_create_self(const struct tpf_comm_options *o, struct tpf_comm **out,
				     struct tpf_diag *d)
{
	struct tpf_comm *c = tpf_calloc(1, sizeof(*c));
	if (!c)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	c->ops = &self_ops;
	c->rank = 0;
	c->world = 1;
	c->local_rank = 0;
	c->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : 60;
	*out = c;
	return TPF_OK;
}

void tpf_comm_free(struct tpf_comm *c)
{
	if (c && c->ops && c->ops->destroy)
		c->ops->destroy(c);
}

void tpf_comm_abort(struct tpf_comm *c, int code)
{
	if (c && c->ops && c->ops->abort)
		c->ops->abort(c, code);
}

int tpf_comm_launched_by_mpi(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") ||
	       getenv("MPI_LOCALNRANKS");
}

enum tpf_status tpf_comm_check_same(struct tpf_comm *c, uint64_t value, const char *what,
				    struct tpf_diag *d)
{
	if (!c || c->world <= 1)
		return TPF_OK;
	uint64_t *all = tpf_calloc((size_t)c->world, sizeof(uint64_t));
	if (!all)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = c->ops->allgather(c, &value, all, sizeof(value), NULL, d);
	if (st) {
		tpf_free(all);
		return st;
	}
	char buf[512];
	size_t at = 0;
	int differ = 0;
	for (int r = 0; r < c->world; r++) {
		if (all[r] != all[0])
			differ = 1;
		if (at < sizeof(buf) - 48)
			at += (size_t)snprintf(buf + at, sizeof(buf) - at, "%srank %d: %016" PRIx64,
					       r ? ", " : "", r, all[r]);
	}
	tpf_free(all);
	if (differ)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "ranks disagree on %s (%s); every rank must run the same "
				     "structure with the same input shapes",
				     what, buf);
	return TPF_OK;
}

enum tpf_status tpf_comm_agree(struct tpf_comm *c, enum tpf_status st, const char *phase,
			       struct tpf_diag *d)
{
	if (!c || c->world <= 1)
		return st;
	int32_t *all = tpf_calloc((size_t)c->world, sizeof(int32_t));
	int32_t mine = (int32_t)st;
	if (!all)
		return st ? st : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status cst = c->ops->allgather(c, &mine, all, sizeof(mine), NULL, d);
	if (cst) {
		tpf_free(all);
		return st ? st : cst;
	}
	for (int r = 0; r < c->world && !st; r++)
		if (all[r])
			st = tpf_diag_fail(d, TPF_ERR_RUNTIME, "rank %d failed while %s (see its messages)", r,
					   phase);
	tpf_free(all);
	return st;
}

/* Defined by comm-mpi.c, which is linked only when MPI was found. */
extern enum tpf_status tpf_comm_create_mpi_impl(const struct tpf_comm_options *o,
						struct tpf_comm **out, struct tpf_diag *d)
	__attribute__((weak));

enum tpf_status tpf_comm_create_mpi(const struct tpf_comm_options *o, struct tpf_comm **out,
				    struct tpf_diag *d)
{
	*out = NULL;
	if (tpf_comm_create_mpi_impl)
		return tpf_comm_create_mpi_impl(o, out, d);
	return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
			     "this tpfuse was built without MPI (install Open MPI and rebuild; meson "
			     "option -Dmpi=enabled)");
}
