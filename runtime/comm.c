/* SPDX-License-Identifier: MIT */
/* The communicator interface's common parts and the one-rank communicator. */
#include "tpf-runtime.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
	c->hosts = (struct tpf_comm_hosts){.n_hosts = 1, .host = 0, .local_rank = 0, .local_size = 1};
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

/* ------------------------------------------------------------ hosts */

void tpf_comm_hosts(const struct tpf_comm *c, struct tpf_comm_hosts *out)
{
	if (c && c->hosts.n_hosts > 0)
		*out = c->hosts;
	else
		*out = (struct tpf_comm_hosts){.n_hosts = 1, .host = 0, .local_rank = c ? c->rank : 0,
					       .local_size = c && c->world > 0 ? c->world : 1};
}

/* Writes text[0 .. len) into buf with every "{rank}" replaced by the rank;
 * 0 when it does not fit. */
static int put_name(const char *text, size_t len, int rank, char *buf, size_t size)
{
	size_t at = 0;
	for (size_t i = 0; i < len; i++) {
		if (len - i >= 6 && !strncmp(text + i, "{rank}", 6)) {
			int n = snprintf(buf + at, size - at, "%d", rank);
			if (n < 0 || (size_t)n >= size - at)
				return 0;
			at += (size_t)n;
			i += 5;
		} else {
			if (at + 1 >= size)
				return 0;
			buf[at++] = text[i];
		}
	}
	buf[at] = 0;
	return 1;
}

enum tpf_status tpf_comm_host_name(int rank, int world, char *buf, size_t size, struct tpf_diag *d)
{
	const char *e = tpf_env_text("TPF_HOSTNAME");
	if (!size)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "host name: no room");
	buf[0] = 0;
	if (!e) {
		if (gethostname(buf, size - 1) || !buf[0])
			return tpf_diag_fail(d, TPF_ERR_RUNTIME, "rank %d: gethostname failed (set TPF_HOSTNAME)",
					     rank);
		buf[size - 1] = 0;
		return TPF_OK;
	}
	const char *text = e;
	size_t len = strlen(e);
	if (strchr(e, ',')) {
		/* a list: this rank's entry, blanks around it left out */
		int n = 1;
		for (const char *p = e; *p; p++)
			n += *p == ',';
		if (n != world)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "TPF_HOSTNAME=\"%s\" lists %d names for %d ranks (one per rank, "
					     "or one name)",
					     e, n, world);
		for (int i = 0; i < rank; i++)
			text = strchr(text, ',') + 1;
		len = strcspn(text, ",");
		while (len && (*text == ' ' || *text == '\t'))
			text++, len--;
		while (len && (text[len - 1] == ' ' || text[len - 1] == '\t'))
			len--;
	}
	if (!len)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "TPF_HOSTNAME=\"%s\" gives rank %d an empty host name",
				     e, rank);
	if (!put_name(text, len, rank, buf, size))
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "TPF_HOSTNAME=\"%s\" gives rank %d a host name longer than %zu bytes", e,
				     rank, size - 1);
	return TPF_OK;
}

void tpf_comm_hosts_group(const char *names, size_t stride, int world, int rank,
			  struct tpf_comm_hosts *out)
{
	const char *mine = names + (size_t)rank * stride;
	struct tpf_comm_hosts h = {0};
	/* quadratic in the world size, once per communicator */
	for (int r = 0; r < world; r++) {
		const char *name = names + (size_t)r * stride;
		int first = 1; /* the host's lowest rank */
		for (int q = 0; q < r && first; q++)
			first = strcmp(names + (size_t)q * stride, name) != 0;
		h.n_hosts += first;
		if (strcmp(name, mine))
			continue;
		if (first)
			h.host = h.n_hosts - 1;
		h.local_rank += r < rank;
		h.local_size++;
	}
	*out = h;
}

enum tpf_status tpf_comm_group_hosts(struct tpf_comm *c, struct tpf_diag *d)
{
	if (c->world <= 1) {
		c->hosts = (struct tpf_comm_hosts){.n_hosts = 1, .host = 0, .local_rank = 0, .local_size = 1};
		return TPF_OK;
	}
	char mine[TPF_HOST_NAME_MAX];
	char *all = tpf_calloc((size_t)c->world, TPF_HOST_NAME_MAX);
	/* every rank takes part in the exchange, or none does */
	enum tpf_status st = tpf_comm_agree(c, all ? TPF_OK : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory"),
					    "gathering the host names", d);
	if (st) {
		tpf_free(all);
		return st;
	}
	memset(mine, 0, sizeof(mine));
	if (tpf_comm_host_name(c->rank, c->world, mine, sizeof(mine), d))
		mine[0] = 0; /* an empty name tells the others */
	st = c->ops->allgather(c, mine, all, TPF_HOST_NAME_MAX, NULL, d);
	for (int r = 0; r < c->world && !st; r++)
		if (!all[(size_t)r * TPF_HOST_NAME_MAX])
			st = r == c->rank ? TPF_ERR_INVALID
					  : tpf_diag_fail(d, TPF_ERR_INVALID, "rank %d has no host name (see its "
									      "messages)", r);
	if (!st)
		tpf_comm_hosts_group(all, TPF_HOST_NAME_MAX, c->world, c->rank, &c->hosts);
	tpf_free(all);
	return st;
}

int tpf_comm_hosts_peer_ok(const struct tpf_comm_hosts *h, const char *comm_name, char *why, size_t size)
{
	if (!h || h->n_hosts <= 1)
		return 1;
	if (why && size)
		snprintf(why, size,
			 "ranks span %d hosts: peer-memory collectives are off (CUDA IPC reaches the GPUs "
			 "of one host only), the communicator (%s) runs them",
			 h->n_hosts, comm_name ? comm_name : "NCCL");
	return 0;
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
