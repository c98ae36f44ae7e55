/* SPDX-License-Identifier: MIT */
/* Private to runtime/: a session's state, shared by session.c (binding and
 * running plans) and session-collectives.c (the direct all-to-alls and the
 * peer-memory collectives a plan's steps go through). */
#ifndef TPF_SESSION_INTERNAL_H
#define TPF_SESSION_INTERNAL_H

#include "runtime-internal.h"

#ifdef TPF_HAVE_CUDA
#include "tpf-cuda-runtime.h"
#include "cuda/tpf-cuda.h"
#endif

/* Plans kept per input signature (LRU): prefill and decode shapes in one
 * process each keep theirs. */
#define TPF_SESSION_PLANS 8

/* A plan bound to the session's device: everything a run of it needs. */
struct bound {
	struct tpf_plan *plan;     /* NULL: a free slot */
	uint64_t shape_key;        /* input names, dtypes and dims */
	/* inputs whose values the plan depends on (tpf_plan_value_inputs): graph
	 * input names and their bytes when the plan was built */
	const char **dep_names;
	size_t *dep_len;
	unsigned char *dep_bytes;
	size_t n_dep;
	uint64_t used;             /* LRU stamp */
	void *arena;               /* the arena the operands point into */
	/* device copies of constants (non-CPU), operand arrays, outputs */
	void **const_dev;
	struct tpf_ktensor **kin, **kout;
	struct tpf_host_tensor *outs;
	size_t n_outs;
	/* per step: where a Pack -> AllToAll -> Unpack run starts that goes
	 * as one exchange between the pieces' own buffers, how (enum
	 * a2a_mode) */
	unsigned char *a2a_direct;
	size_t n_a2a_direct; /* runs found */
	/* CUDA one-shot collectives (peer memory): per step of the plan what
	 * runs there (enum oneshot_mode) */
	unsigned char *oneshot;
	size_t n_oneshot;
	/* profiling (opt.profile, eager runs): per step, the device time summed
	 * over prof_runs runs; a step that starts a multi-step one-shot kernel
	 * holds the whole kernel's time */
	double *prof_ms;
	size_t prof_runs;
	unsigned char *prof_marked; /* marks recorded by the current run */
	int prof_seen_first;        /* the plan's first run went by */
	/* per value: the kept input (tpf_session_keep_inputs) it is, or a
	 * view of, else -1; NULL until bound or without kept inputs */
	int *kept_of;
	uint64_t kept_gen;          /* the session's kept_gen its operands point into */
};

/* An input kept on the device between runs (session-kept.c). */
struct kept_input {
	char *name;
	void *buf; /* NULL until a plan binds it */
	size_t bytes;
};

struct tpf_session {
	const struct tpf_model *model;
	struct tpf_session_options opt;
	struct tpf_comm *comm;
	int owns_comm;
	struct tpf_device *dev;
	struct bound slots[TPF_SESSION_PLANS];
	struct bound *b;           /* the current plan's slot (never NULL) */
	uint64_t clock;            /* LRU clock */
	uint64_t builds;           /* plans built so far */
	void *arena;
	size_t arena_cap;
	/* scratch of the kernels that ask for it (tpf_kernel.workspace): the
	 * largest need of any bound plan; grows when a plan needs more */
	void *ws;
	size_t ws_cap;
#ifdef TPF_HAVE_CUDA
	/* one-shot contexts live as long as the session and grow when a plan
	 * needs more */
	struct tpf_cuda_arnorm *os_ctx[TPF_DTYPE_COUNT]; /* sums, by dtype */
	struct tpf_cuda_arnorm *os_sharded;               /* sharded-norm exchange */
	struct tpf_cuda_a2a *os_a2a;                      /* direct all-to-alls */
	int os_failed;                                    /* set-up failed once: NCCL only */
#endif
	/* constants shared by the plans: derived copies of the weights and
	 * device copies (const-store.c) */
	struct tpf_const_store *consts;
	/* constants live in memory of their own, uploaded (a GPU; on the CPU
	 * backend with TPF_CPU_COPY_CONSTANTS=1, for tests); else the kernels
	 * read the host bytes */
	int dev_consts;
	/* the strategy table: options', TPF_STRATEGY_TABLE's (owned) or built-in */
	const struct tpf_strategy_table *strategy;
	struct tpf_strategy_table *strategy_owned;
	/* kept inputs (session-kept.c); kept_gen counts their (re)allocations */
	struct kept_input *kept;
	const char **kept_names;
	size_t n_kept;
	uint64_t kept_gen;
};

/* What b->oneshot[k] holds: the path of the collective at step k. */
enum oneshot_mode {
	OS_NONE,      /* as planned */
	OS_ARNORM,    /* this all-reduce and the next step (post-reduce): one kernel */
	OS_ALLREDUCE, /* a bare all-reduce through peer memory */
	OS_SHARDED,   /* sum of squares, all-reduce, normalize: one kernel */
	OS_MODE_MASK = 0x0f,
	OS_TWOSHOT = 0x10 /* with OS_ARNORM or OS_ALLREDUCE: the two-shot kernel */
};

/* The call of step k of the current plan (d: its diagnostic). */
void tpf_rt_session_call(struct tpf_session *s, size_t k, struct tpf_kernel_call *call,
			 struct tpf_diag *d);

/* Frees the current slot's plan and everything bound to it (session.c). */
void tpf_rt_session_unbind(struct tpf_session *s);

/* session-kept.c: the kept inputs freed; the device memory of value idx of
 * the current plan when it is (a view of) a kept input, else NULL; the
 * current plan's kept inputs given memory of their size (*moved: the
 * plan's operands must be pointed again). */
void tpf_rt_kept_free(struct tpf_session *s);
void *tpf_rt_kept_data(const struct tpf_session *s, int idx);
enum tpf_status tpf_rt_kept_bind(struct tpf_session *s, int *moved, struct tpf_diag *d);

/* session-collectives.c.  Direct all-to-alls: the current plan's Pack ->
 * AllToAll -> Unpack runs that go as one exchange (b->a2a_direct), chosen
 * alike on every rank; run: the run that starts at step k (three steps). */
enum tpf_status tpf_rt_a2a_direct_prepare(struct tpf_session *s, struct tpf_diag *d);
enum tpf_status tpf_rt_a2a_direct_run(struct tpf_session *s, size_t k, struct tpf_diag *d);
#ifdef TPF_HAVE_CUDA
/* One-shot collectives (CUDA peer memory): each step's path for the
 * current plan (b->oneshot) and the contexts they need; the check after a
 * synchronized run; the run of the steps from k (*used: how many); the
 * contexts freed. */
enum tpf_status tpf_rt_oneshot_prepare(struct tpf_session *s, struct tpf_diag *d);
enum tpf_status tpf_rt_oneshot_check(struct tpf_session *s, struct tpf_diag *d);
enum tpf_status tpf_rt_oneshot_run(struct tpf_session *s, size_t k, size_t *used, struct tpf_diag *d);
void tpf_rt_oneshot_free(struct tpf_session *s);
#endif

/* The device's captured graphs, all of them: memory they point into is
 * about to move (the arena, the workspace, kept inputs, peer-memory
 * contexts).  Nothing on the CPU backend. */
static inline void tpf_rt_drop_graphs(struct tpf_session *s)
{
#ifdef TPF_HAVE_CUDA
	tpf_cuda_device_drop_graph(s->dev);
#else
	(void)s;
#endif
}

#endif /* TPF_SESSION_INTERNAL_H */
