/* SPDX-License-Identifier: MIT */
/* The collectives a session chooses for a plan's steps: direct all-to-alls
 * (a Pack -> AllToAll -> Unpack run as one exchange) and, on the CUDA
 * backend with every rank on one host, the one-shot and two-shot
 * collectives through peer memory; the strategy table (strategy.c) decides
 * between those and NCCL. */
#include "session-internal.h"

#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------ direct all-to-all
 * coalesce-alltoall writes Pack -> one AllToAll -> Unpack; where the
 * communicator can exchange several pieces in one group (NCCL: one group
 * of sends and receives), the three steps run as that exchange straight
 * from the pieces' producers' buffers into their consumers': no packing
 * copies, one launch, for up to TPF_A2A_DIRECT_MAX_PIECES pieces (16;
 * beyond, the packed path is faster).  Only for the pass's layout (each piece's chunk j at
 * j*S + offset in the packed buffer, read back the same way), when the
 * packed and received buffers have no other reader, and the steps are
 * consecutive in the plan. */

/* Whether a value is read by any step but `except`, or is a graph output. */
static int value_used_elsewhere(const struct tpf_plan *p, int v, size_t except)
{
	for (size_t o = 0; o < p->n_outputs; o++)
		if (p->outputs[o] == v)
			return 1;
	for (size_t k = 0; k < p->n_steps; k++) {
		if (k == except)
			continue;
		for (size_t i = 0; i < p->steps[k].n_in; i++)
			if (p->steps[k].ins[i] == v)
				return 1;
	}
	return 0;
}

/* The segments of a Pack (pack = 1) or Unpack node are exactly the pass's
 * layout for pieces of c[i] elements per rank chunk. */
static int segments_canonical(const struct tpf_node *n, const int64_t *c, size_t pieces, int world, int pack)
{
	const struct tpf_attr *a = tpf_node_attr(n, "segments");
	if (!a || a->kind != TPF_ATTR_INTS || a->n != 4 * pieces * (size_t)world)
		return 0;
	int64_t S = 0;
	for (size_t i = 0; i < pieces; i++)
		S += c[i];
	unsigned char *seen = tpf_calloc(pieces * (size_t)world, 1);
	if (!seen)
		return 0;
	int ok = 1;
	for (size_t q = 0; q < a->n / 4 && ok; q++) {
		const int64_t *e = &a->ints[4 * q];
		int64_t i = e[0], local = pack ? e[1] : e[2], packed = pack ? e[2] : e[1], len = e[3];
		if (i < 0 || (size_t)i >= pieces || len != c[i] || c[i] <= 0 || local % c[i]) {
			ok = 0;
			break;
		}
		int64_t j = local / c[i], off = 0;
		for (int64_t t = 0; t < i; t++)
			off += c[t];
		if (j >= world || packed != j * S + off || seen[(size_t)i * (size_t)world + (size_t)j]) {
			ok = 0;
			break;
		}
		seen[(size_t)i * (size_t)world + (size_t)j] = 1;
	}
	tpf_free(seen);
	return ok;
}

#ifdef TPF_HAVE_CUDA
#define TPF_A2A_PEER_MAX_PIECES TPF_CUDA_A2A_MAX_PIECES
#else
#define TPF_A2A_PEER_MAX_PIECES 16
#endif

enum a2a_mode {
	A2A_GROUPED = 1, /* the communicator's alltoall_pieces (NCCL: one group of sends and receives) */
	A2A_PEER = 2,    /* CUDA peer memory: one kernel (tpf_cuda_a2a_run) */
};

static int peer_a2a_possible(const struct tpf_session *s);

/* The most pieces a direct run takes through the communicator's grouped
 * calls (TPF_A2A_DIRECT_MAX_PIECES, default 16). */
static long grouped_max_pieces(void)
{
	return (long)tpf_env_int("TPF_A2A_DIRECT_MAX_PIECES", 16);
}

/* Finds the direct runs of the current plan; every rank must agree. */
enum tpf_status tpf_rt_a2a_direct_prepare(struct tpf_session *s, struct tpf_diag *d)
{
	const struct tpf_plan *p = s->b->plan;
	int wanted = tpf_env_switch("TPF_A2A_DIRECT", 1) && s->comm->world > 1 && s->comm->ops->alltoall_pieces;
	/* Many small pieces go faster packed through NCCL's grouped calls: 2x
	 * H100, 68 MB in 4 / 16 / 64 pieces: direct 174 / 251 / 596 us, packed
	 * 239 / 259 / 261 us (bench-fusions); the default bound sits between
	 * the two.  The peer-memory kernel takes any number up to its limit at
	 * the speed of one raw all-to-all (136 / 140 / 137 us against 143). */
	long max_pieces = peer_a2a_possible(s) && tpf_env_int("TPF_A2A_DIRECT_MAX_PIECES", -1) < 0 ? TPF_A2A_PEER_MAX_PIECES : grouped_max_pieces();
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t k = 0; wanted && k + 2 < p->n_steps; k++) {
		const struct rt_step *pk = &p->steps[k], *a2a = &p->steps[k + 1], *up = &p->steps[k + 2];
		if (!tpf_plan_a2a_run(p, k) || pk->n_in != up->n_out || pk->n_in == 0 || pk->n_in > 4096)
			continue;
		if ((long)pk->n_in > max_pieces || value_used_elsewhere(p, pk->outs[0], k + 1) ||
		    value_used_elsewhere(p, a2a->outs[0], k + 2))
			continue;
		size_t n = pk->n_in;
		int64_t c[4096];
		int ok = 1;
		for (size_t i = 0; i < n && ok; i++) {
			const struct tpf_ktensor *x = &s->b->kin[k][i], *y = &s->b->kout[k + 2][i];
			ok = pk->ins[i] >= 0 && up->outs[i] >= 0 && x->dtype == s->b->kin[k + 1][0].dtype &&
			     y->dtype == x->dtype && x->numel == y->numel && x->numel % s->comm->world == 0 &&
			     tpf_dtype_bits(x->dtype) % 8 == 0; /* whole bytes a chunk */
			c[i] = ok ? x->numel / s->comm->world : 0;
		}
		if (!ok || !segments_canonical(pk->node, c, n, s->comm->world, 1) ||
		    !segments_canonical(up->node, c, n, s->comm->world, 0))
			continue;
		if (!s->b->a2a_direct && !(s->b->a2a_direct = tpf_calloc(p->n_steps + 1, 1)))
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		s->b->a2a_direct[k] = A2A_GROUPED;
		s->b->n_a2a_direct++;
		h = (h ^ (uint64_t)k) * UINT64_C(0x100000001b3);
		k += 2;
	}
	/* every rank must exchange alike (the variables are per process) */
	return s->comm->world > 1 ? tpf_comm_check_same(s->comm, h,
							"the direct all-to-alls chosen (TPF_A2A_DIRECT and "
							"TPF_A2A_DIRECT_MAX_PIECES must agree)",
							d)
				  : TPF_OK;
}

enum tpf_status tpf_rt_a2a_direct_run(struct tpf_session *s, size_t k, struct tpf_diag *d)
{
	const struct rt_step *pk = &s->b->plan->steps[k];
	size_t n = pk->n_in, es = (tpf_dtype_bits(s->b->kin[k][0].dtype) + 7) / 8;
	const void **send = tpf_calloc(n, sizeof(*send));
	void **recv = tpf_calloc(n, sizeof(*recv));
	size_t *bytes = tpf_calloc(n, sizeof(*bytes));
	enum tpf_status st;
	if (!send || !recv || !bytes) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	} else {
		for (size_t i = 0; i < n; i++) {
			send[i] = s->b->kin[k][i].data;
			recv[i] = s->b->kout[k + 2][i].data;
			bytes[i] = (size_t)s->b->kin[k][i].numel / (size_t)s->comm->world * es;
		}
#ifdef TPF_HAVE_CUDA
		if (s->b->a2a_direct[k] == A2A_PEER)
			st = tpf_cuda_a2a_run(s->os_a2a, send, (void *const *)recv, bytes, n, s->dev->stream, d);
		else
#endif
			st = s->comm->ops->alltoall_pieces(s->comm, send, (void *const *)recv, bytes, n,
							   s->dev->stream, d);
		if (st) {
			char who[256];
			tpf_diag_add(d, TPF_SEV_ERROR, "in %s (direct%s, %zu pieces)",
				     tpf_node_describe(s->b->plan->steps[k + 1].node, who, sizeof(who)),
				     s->b->a2a_direct[k] == A2A_PEER ? " through peer memory" : "", n);
		}
	}
	tpf_free(send);
	tpf_free(recv);
	tpf_free(bytes);
	return st;
}

#ifdef TPF_HAVE_CUDA
/* ------------------------------------------------------------ one-shot collectives
 * On the CUDA backend with more than one rank (NCCL, or MPI through host
 * memory where ranks share GPUs), all-reduces that fit go through peer
 * memory (kernels/cuda/tpf-cuda.h): the fused norms in one kernel each,
 * bare all-reduces without NCCL's latency.  Plans are the
 * same on every rank (structure and shapes are checked), so every rank
 * makes the same choices and the same collective set-up calls. */

static size_t oneshot_max_bytes(void)
{
	return (size_t)tpf_env_int("TPF_ONESHOT_MAX_BYTES", (long long)64 << 20);
}

/* Where peer memory could run collectives but for the hosts: CUDA ranks
 * under NCCL or MPI. */
static int peer_backend(const struct tpf_session *s)
{
	return s->dev->kind == TPF_BACKEND_CUDA && s->comm->world > 1 &&
	       (strcmp(s->comm->ops->name, "nccl") == 0 || strcmp(s->comm->ops->name, "mpi-cuda") == 0);
}

/* Whether the communicator's ranks share one host (every collective spans
 * every rank, and CUDA IPC maps the GPUs of one host only); else why. */
static int one_host(const struct tpf_session *s, char *why, size_t size)
{
	struct tpf_comm_hosts h;
	tpf_comm_hosts(s->comm, &h);
	return tpf_comm_hosts_peer_ok(&h, s->comm->ops->name, why, size);
}

/* Where one-shot collectives can run at all: the same on every rank (the
 * grouping by host is the communicator's, the same everywhere). */
static int oneshot_possible(const struct tpf_session *s)
{
	return peer_backend(s) && one_host(s, NULL, 0);
}

/* Whether this rank wants them (options and environment: checked against
 * the other ranks' choice in oneshot_prepare). */
static int oneshot_wanted(const struct tpf_session *s)
{
	return !s->opt.no_oneshot && !s->os_failed && tpf_env_switch("TPF_ONESHOT", 1);
}

/* Whether direct all-to-alls go through the peer-memory kernel (as the
 * one-shot collectives; TPF_A2A_PEER=0 keeps NCCL's grouped calls). */
static int peer_a2a_possible(const struct tpf_session *s)
{
	return oneshot_possible(s) && oneshot_wanted(s) && tpf_env_switch("TPF_A2A_PEER", 1);
}

/* Marks the direct all-to-alls that fit the peer-memory kernel; the most
 * bytes one of them sends a destination. */
static size_t peer_a2a_mark(struct tpf_session *s)
{
	size_t need = 0;
	const struct tpf_plan *p = s->b->plan;
	for (size_t k = 0; s->b->a2a_direct && peer_a2a_possible(s) && k < p->n_steps; k++) {
		if (!s->b->a2a_direct[k] || p->steps[k].n_in > TPF_CUDA_A2A_MAX_PIECES)
			continue;
		size_t total = 0, es = (tpf_dtype_bits(s->b->kin[k][0].dtype) + 7) / 8;
		for (size_t i = 0; i < p->steps[k].n_in; i++)
			total += ((size_t)s->b->kin[k][i].numel / (size_t)s->comm->world * es + 15) / 16 * 16;
		if (total > oneshot_max_bytes()) /* the receive area is 2 (world - 1) times this */
			continue;
		s->b->a2a_direct[k] = A2A_PEER;
		need = total > need ? total : need;
	}
	return need;
}

/* Without the peer-memory kernel (its set-up failed on some rank): in
 * every bound plan, a run marked for it goes through the communicator's
 * grouped calls, or packed where it has more pieces than those take well.
 * The same on every rank (after tpf_comm_agree). */
static void peer_a2a_unmark(struct tpf_session *s)
{
	for (int i = 0; i < TPF_SESSION_PLANS; i++) {
		struct bound *b = &s->slots[i];
		for (size_t k = 0; b->plan && b->a2a_direct && k < b->plan->n_steps; k++) {
			if (b->a2a_direct[k] != A2A_PEER)
				continue;
			if ((long)b->plan->steps[k].n_in > grouped_max_pieces()) {
				b->a2a_direct[k] = 0;
				b->n_a2a_direct--;
			} else {
				b->a2a_direct[k] = A2A_GROUPED;
			}
		}
	}
}

static int host_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
	struct tpf_comm *c = ctx;
	return c->ops->allgather(c, send, recv, bytes, NULL, NULL) != TPF_OK;
}

void tpf_rt_oneshot_free(struct tpf_session *s)
{
	tpf_rt_drop_graphs(s); /* their kernels use the contexts' buffers */
	for (int t = 0; t < TPF_DTYPE_COUNT; t++) {
		tpf_cuda_arnorm_free(s->os_ctx[t]);
		s->os_ctx[t] = NULL;
	}
	tpf_cuda_arnorm_free(s->os_sharded);
	s->os_sharded = NULL;
	tpf_cuda_a2a_free(s->os_a2a);
	s->os_a2a = NULL;
}

/* A context holding at least `elems`; replaced when smaller (collective). */
static enum tpf_status oneshot_ctx(struct tpf_session *s, struct tpf_cuda_arnorm **slot,
				   enum tpf_dtype dt, size_t elems, struct tpf_diag *d)
{
	if (*slot && tpf_cuda_arnorm_max_elems(*slot) >= elems)
		return TPF_OK;
	if (*slot)
		tpf_rt_drop_graphs(s); /* the other plans' graphs use its buffers */
	tpf_cuda_arnorm_free(*slot);
	*slot = NULL;
	struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = s->comm};
	enum tpf_status st = tpf_cuda_arnorm_create(s->comm->rank, s->comm->world, dt, elems, &ex, slot, d);
	if (!st)
		tpf_cuda_arnorm_set_timeout(*slot, s->comm->timeout_s);
	return st;
}

/* Decides each step's mode for a new plan and sizes the contexts.  A set-up
 * failure on any rank turns the one-shot paths off on all of them (with a
 * warning) and the plan runs through NCCL; so do ranks on several hosts
 * (warned once a session). */
enum tpf_status tpf_rt_oneshot_prepare(struct tpf_session *s, struct tpf_diag *d)
{
	const struct tpf_plan *p = s->b->plan;
	char why[256];
	if (peer_backend(s) && oneshot_wanted(s) && !one_host(s, why, sizeof(why))) {
		/* said once: the session keeps to the communicator from here on */
		tpf_diag_add(d, TPF_SEV_WARNING, "%s", why);
		s->os_failed = 1;
	}
	if (!oneshot_possible(s))
		return TPF_OK;
	/* a rank short of memory turns it off everywhere */
	s->b->oneshot = tpf_calloc(p->n_steps + 1, 1);
	if (tpf_comm_agree(s->comm, s->b->oneshot ? TPF_OK : TPF_ERR_NOMEM, "planning one-shot collectives", NULL)) {
		tpf_free(s->b->oneshot);
		s->b->oneshot = NULL;
		return TPF_OK;
	}
	s->b->n_oneshot = p->n_steps;
	int wanted = oneshot_wanted(s);
	size_t need[TPF_DTYPE_COUNT] = {0}, need_sharded = 0, limit = oneshot_max_bytes();
	for (size_t k = 0; k < p->n_steps; k++) {
		const struct rt_step *st = &p->steps[k];
		const struct rt_step *nx = k + 1 < p->n_steps ? &p->steps[k + 1] : NULL;
		struct tpf_cuda_oneshot_need nd = {0};
		struct tpf_kernel_call a, b;
		int mode = OS_NONE;
		enum tpf_coll_kind kind = TPF_COLL_ALLREDUCE;
		if (st->kind == RT_STEP_ALLREDUCE && nx && nx->node == st->node &&
		    nx->phase == TPF_PHASE_POST_REDUCE) {
			tpf_rt_session_call(s, k + 1, &a, NULL);
			if (!tpf_cuda_oneshot_arnorm(NULL, &a, s->b->kin[k][0].data, TPF_CUDA_AR_ONESHOT, &nd)) {
				mode = OS_ARNORM;
				kind = a.node->op == TPF_OP_TPF_ALLREDUCE_RMS_NORM_QUANT ? TPF_COLL_ARNORM_FP8
											: TPF_COLL_ARNORM;
			}
		} else if (st->kind == RT_STEP_ALLREDUCE && st->node->op == TPF_OP_MS_ALLREDUCE) {
			if (!tpf_cuda_oneshot_allreduce(NULL, &s->b->kin[k][0], &s->b->kout[k][0], TPF_CUDA_AR_ONESHOT,
							NULL, NULL, &nd)) {
				mode = OS_ALLREDUCE;
				kind = TPF_COLL_ALLREDUCE;
			}
		} else if (st->kind == RT_STEP_KERNEL && st->phase == TPF_PHASE_SUMSQ && k + 2 < p->n_steps &&
			   nx->kind == RT_STEP_ALLREDUCE && nx->node == st->node && p->steps[k + 2].node == st->node &&
			   p->steps[k + 2].phase == TPF_PHASE_NORMALIZE) {
			tpf_rt_session_call(s, k, &a, NULL);
			tpf_rt_session_call(s, k + 2, &b, NULL);
			if (!tpf_cuda_oneshot_sharded(NULL, &a, &b, &nd)) {
				mode = OS_SHARDED;
				kind = TPF_COLL_SHARDED;
			}
		}
		size_t bytes;
		if (!wanted || mode == OS_NONE || tpf_dtype_storage_bytes(nd.dtype, nd.elems, &bytes) || bytes > limit)
			continue;
		/* the strategy table decides between NCCL, one-shot and two-shot */
		enum tpf_coll_path path = tpf_strategy_choose(s->strategy, s->comm->world, kind, nd.hidden,
							      nd.hidden ? (int64_t)nd.elems / nd.hidden : 0,
							      (tpf_dtype_bits(nd.dtype) + 7) / 8);
		if (path == TPF_PATH_NCCL)
			continue;
		if (path == TPF_PATH_TWOSHOT && mode != OS_SHARDED)
			mode |= OS_TWOSHOT;
		s->b->oneshot[k] = (unsigned char)mode;
		if ((mode & OS_MODE_MASK) == OS_SHARDED)
			need_sharded = nd.elems > need_sharded ? nd.elems : need_sharded;
		else if (nd.elems > need[nd.dtype])
			need[nd.dtype] = nd.elems;
	}
	/* The ranks must choose alike (TPF_ONESHOT, TPF_ONESHOT_MAX_BYTES,
	 * no_oneshot and the strategy table are per process): one rank in a
	 * one-shot kernel and another in NCCL would wait for each other
	 * forever. */
	const size_t need_a2a = peer_a2a_mark(s);
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (size_t k = 0; k < p->n_steps; k++)
		h = (h ^ s->b->oneshot[k] ^ (s->b->a2a_direct ? (unsigned)s->b->a2a_direct[k] << 8 : 0u)) *
		    UINT64_C(0x100000001b3);
	enum tpf_status cs = tpf_comm_check_same(s->comm, h,
						 "the peer-memory collectives chosen (TPF_ONESHOT, "
						 "TPF_ONESHOT_MAX_BYTES, TPF_A2A_PEER, --no-oneshot and the "
						 "strategy table must agree)",
						 d);
	if (cs)
		return cs;
	if (!wanted)
		return TPF_OK;
	/* Every rank makes the same create calls, failed or not (each is one
	 * exchange), then all learn whether any failed. */
	struct tpf_diag *local = tpf_diag_create();
	enum tpf_status st = TPF_OK, r;
	for (int t = 0; t < TPF_DTYPE_COUNT; t++)
		if (need[t] && (r = oneshot_ctx(s, &s->os_ctx[t], (enum tpf_dtype)t, need[t], local)) && !st)
			st = r;
	if (need_sharded && (r = oneshot_ctx(s, &s->os_sharded, TPF_DTYPE_FLOAT, need_sharded, local)) && !st)
		st = r;
	if (tpf_comm_agree(s->comm, st, "setting up peer memory for one-shot collectives", local)) {
		/* not an error: the run goes on through the communicator
		 * (NCCL); the caller's diagnostic says why (the library prints
		 * nothing) */
		tpf_diag_add(d, TPF_SEV_WARNING, "one-shot collectives are off, the communicator (%s) runs them",
			     s->comm->ops->name);
		for (size_t i = 0; local && i < local->count; i++)
			tpf_diag_add(d, TPF_SEV_WARNING, "%s", local->entries[i].text);
		tpf_rt_oneshot_free(s);
		/* every bound plan: a cached one must not find a freed context */
		for (int i = 0; i < TPF_SESSION_PLANS; i++)
			if (s->slots[i].oneshot)
				memset(s->slots[i].oneshot, 0, s->slots[i].n_oneshot);
		peer_a2a_unmark(s);
		s->os_failed = 1;
		tpf_diag_free(local);
		return TPF_OK;
	}
	/* the all-to-all's context on its own: its failure keeps the one-shot
	 * all-reduces */
	st = TPF_OK;
	tpf_diag_clear(local);
	if (need_a2a && (!s->os_a2a || tpf_cuda_a2a_max_bytes(s->os_a2a) < need_a2a)) {
		struct tpf_cuda_exchange ex = {.allgather = host_allgather, .ctx = s->comm};
		if (s->os_a2a)
			tpf_rt_drop_graphs(s);
		tpf_cuda_a2a_free(s->os_a2a);
		s->os_a2a = NULL;
		st = tpf_cuda_a2a_create(s->comm->rank, s->comm->world, need_a2a, &ex, &s->os_a2a, local);
		if (s->os_a2a)
			tpf_cuda_a2a_set_timeout(s->os_a2a, s->comm->timeout_s);
	}
	if (tpf_comm_agree(s->comm, st, "setting up peer memory for all-to-alls", local)) {
		tpf_diag_add(d, TPF_SEV_WARNING, "peer-memory all-to-alls are off, the communicator (%s) runs them",
			     s->comm->ops->name);
		for (size_t i = 0; local && i < local->count; i++)
			tpf_diag_add(d, TPF_SEV_WARNING, "%s", local->entries[i].text);
		tpf_rt_drop_graphs(s); /* captured with the peer path */
		tpf_cuda_a2a_free(s->os_a2a);
		s->os_a2a = NULL;
		peer_a2a_unmark(s);
	}
	tpf_diag_free(local);
	return TPF_OK;
}

/* After the device is synchronized: whether a peer-memory wait gave up. */
enum tpf_status tpf_rt_oneshot_check(struct tpf_session *s, struct tpf_diag *d)
{
	enum tpf_status st;
	for (int t = 0; t < TPF_DTYPE_COUNT; t++)
		if (s->os_ctx[t] && (st = tpf_cuda_arnorm_check(s->os_ctx[t], d)))
			return st;
	if (s->os_sharded && (st = tpf_cuda_arnorm_check(s->os_sharded, d)))
		return st;
	return s->os_a2a ? tpf_cuda_a2a_check(s->os_a2a, d) : TPF_OK;
}

/* Runs the one-shot form of the steps from k; *used: how many steps it covered. */
enum tpf_status tpf_rt_oneshot_run(struct tpf_session *s, size_t k, size_t *used, struct tpf_diag *d)
{
	struct tpf_kernel_call a, b;
	struct tpf_ktensor *in = s->b->kin[k];
	enum tpf_status st = TPF_OK;
	char who[256];
	enum tpf_cuda_ar_path path = s->b->oneshot[k] & OS_TWOSHOT ? TPF_CUDA_AR_TWOSHOT : TPF_CUDA_AR_ONESHOT;
	switch (s->b->oneshot[k] & OS_MODE_MASK) {
	case OS_ARNORM:
		tpf_rt_session_call(s, k + 1, &a, d);
		st = tpf_cuda_oneshot_arnorm(s->os_ctx[in[0].dtype], &a, in[0].data, path, NULL);
		*used = 2;
		break;
	case OS_ALLREDUCE:
		st = tpf_cuda_oneshot_allreduce(s->os_ctx[in[0].dtype], &in[0], &s->b->kout[k][0], path,
						s->dev->stream, d, NULL);
		*used = 1;
		break;
	case OS_SHARDED:
		tpf_rt_session_call(s, k, &a, d);
		tpf_rt_session_call(s, k + 2, &b, d);
		st = tpf_cuda_oneshot_sharded(s->os_sharded, &a, &b, NULL);
		*used = 3;
		break;
	default:
		return TPF_ERR_INVALID;
	}
	if (st)
		tpf_diag_add(d, TPF_SEV_ERROR, "in %s (one-shot)",
			     tpf_node_describe(s->b->plan->steps[k].node, who, sizeof(who)));
	return st;
}
#else
static int peer_a2a_possible(const struct tpf_session *s)
{
	(void)s;
	return 0;
}
#endif

void tpf_session_collective_stats(const struct tpf_session *s, size_t *collectives, size_t *oneshot)
{
	*collectives = *oneshot = 0;
	if (!s->b->plan)
		return;
	for (size_t k = 0; k < s->b->plan->n_steps; k++) {
		if (s->b->plan->steps[k].kind != RT_STEP_KERNEL)
			(*collectives)++;
		if (s->b->oneshot && k < s->b->n_oneshot && s->b->oneshot[k])
			(*oneshot)++;
	}
}

size_t tpf_session_direct_alltoalls(const struct tpf_session *s, size_t *peer)
{
	if (peer) {
		*peer = 0;
		for (size_t k = 0; s->b->plan && s->b->a2a_direct && k < s->b->plan->n_steps; k++)
			*peer += s->b->a2a_direct[k] == A2A_PEER;
	}
	return s->b->plan ? s->b->n_a2a_direct : 0;
}
