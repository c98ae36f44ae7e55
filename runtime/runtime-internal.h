/* SPDX-License-Identifier: MIT */
/* Private to runtime/: the plan's data structures and shape functions. */
#ifndef TPF_RUNTIME_INTERNAL_H
#define TPF_RUNTIME_INTERNAL_H

#include "tpf-runtime.h"

/* A value of the plan: a graph value or a temporary of a lowered node. */
struct rt_value {
	const struct tpf_value *v; /* NULL for temporaries */
	const char *name;
	struct tpf_ktensor t;      /* dtype and bound dims; data NULL */
	int known;                 /* value known when the plan was built */
	void *host;                /* its bytes when known */
	int owns_host;             /* host allocated by the plan (folded) */
	int lasting;               /* host outlives the plan: the model's own
				    * bytes (an initializer, an input's default,
				    * a Constant's tensor) or a copy the
				    * session's store owns; only these are
				    * shared between plans */
	int host_hint;             /* a small integer input: host holds this run's
				    * values for shape functions; the plan is
				    * rebuilt when they change */
	int buffer;                /* arena buffer, -1 none (constants) */
	int alias;                 /* a view (Reshape, Squeeze, Unsqueeze, Identity,
				    * a Split whose pieces are contiguous): the
				    * value whose buffer it shares, else -1 */
	size_t alias_off;          /* a view's first byte in that buffer */
	int def_step, last_step;   /* live range in steps (-1: before the first) */
	int is_input, is_output;
	int written;               /* is_input: a step updates it in place (its
				    * views are not invariant) */
	int kept;                  /* is_input: one of the options' kept_inputs,
				    * outside the arena (no buffer of the plan) */
	int input_index;           /* is_input: index into the user's inputs */
	int value_dep;             /* is_input with host_hint: the plan depends on its
				    * values (a shape, or a kernel reads them on the
				    * host); other hints are dropped after lowering */
	int poisoned;              /* produced by a node the runtime cannot run: no
				    * shape (planning goes on to list every such node) */
	int packed_tw;             /* known weight packed in column tiles of this
				    * width for the small-M MatMul kernel
				    * (TPF_PHASE_MATMUL_TILED), else 0 */
	int packed_src;            /* packed_tw: the value it was packed from */
	int packed_gated;          /* packed_tw: a merged gate/up weight packed
				    * by tpf_gemv_pack_gated */
};

enum rt_step_kind {
	RT_STEP_KERNEL,
	RT_STEP_ALLREDUCE,
	RT_STEP_ALLGATHER,
	RT_STEP_ALLTOALL,
	RT_STEP_KIND_COUNT
};

struct rt_step {
	enum rt_step_kind kind;
	const struct tpf_node *node;
	const struct tpf_kernel *kernel; /* RT_STEP_KERNEL */
	enum tpf_kernel_phase phase;
	int *ins, *outs;                 /* rt_value indices; -1 omitted */
	size_t n_in, n_out;
};

struct rt_buffer {
	size_t offset, size;
	int first, last; /* live range in steps */
	int value;
};

struct tpf_plan {
	const struct tpf_model *model;
	const struct tpf_graph *graph;
	struct tpf_plan_options opt;
	int64_t opset;
	struct rt_value *values;
	size_t n_values, cap_values;
	int *value_of_id; /* tpf_value id -> rt value index, -1 */
	size_t n_ids;
	struct rt_step *steps;
	size_t n_steps, cap_steps;
	struct rt_buffer *buffers;
	size_t n_buffers;
	size_t arena_bytes, unshared_bytes, constant_bytes;
	size_t n_folded;
	size_t n_views; /* nodes that became views of their input (no step) */
	int *outputs; /* rt value per graph output */
	size_t n_outputs;
	uint64_t shape_hash; /* of the bound inputs */
	struct tpf_const_store *store; /* the session's, while building; may be NULL */
};

/* The constants a session's plans share (const-store.c): derived host
 * copies of the model's weights (packed, transposed) and device copies of
 * constant bytes, each made once per session and freed with it.  Only bytes
 * that outlive every plan may be keys (rt_value.lasting): the model's
 * tensors and the store's own copies.  A derived copy is keyed by its
 * source's address and its geometry (rows, columns, element size: two
 * tensors may share bytes, external data mapped at one offset). */
struct tpf_const_store;
struct tpf_const_key {
	const void *src;
	int64_t rows, cols;
	int elem_bytes;
	int kind;  /* enum tpf_const_derivation */
	int param; /* the tile width, or 0 */
};
enum tpf_const_derivation {
	TPF_CS_PACKED,       /* param: tile width (tpf_gemv_pack) */
	TPF_CS_PACKED_GATED, /* param: tile width (tpf_gemv_pack_gated) */
	TPF_CS_FP8_TRANSPOSED
};
struct tpf_const_store *tpf_const_store_create(void);
/* Frees the device copies on dev (which must still exist) and the host copies. */
void tpf_const_store_free(struct tpf_const_store *cs, struct tpf_device *dev);
/* The derived copy made earlier; NULL when there is none (or no store). */
void *tpf_const_store_derived(const struct tpf_const_store *cs, const struct tpf_const_key *k);
/* Keeps host (from tpf_malloc; the store frees it) as that copy. */
enum tpf_status tpf_const_store_add_derived(struct tpf_const_store *cs, const struct tpf_const_key *k,
					    void *host, size_t nbytes);
/* Whether host's bytes already have a device copy. */
int tpf_const_store_on_device(const struct tpf_const_store *cs, const void *host, size_t nbytes);
/* The device copy of host's bytes, uploaded on the first call (name: for
 * the error message). */
enum tpf_status tpf_const_store_device(struct tpf_const_store *cs, struct tpf_device *dev, const void *host,
				       size_t nbytes, const char *name, void **out, struct tpf_diag *d);
size_t tpf_const_store_device_bytes(const struct tpf_const_store *cs);
size_t tpf_const_store_host_bytes(const struct tpf_const_store *cs);

/* tpf_plan_build with a session's store: derived copies of the model's
 * weights come from it (made there when missing) instead of being owned
 * by the plan. */
enum tpf_status tpf_plan_build_shared(const struct tpf_model *m, const struct tpf_host_tensor *inputs,
				      size_t n_inputs, const struct tpf_plan_options *o,
				      struct tpf_const_store *store, struct tpf_plan **out, struct tpf_diag *d);

/* Integer inputs of at most this many elements (and float scalars) are
 * read when the plan is built (Split sizes, Reshape shapes, Range bounds
 * given as inputs).  The plan keeps the values of those its shapes or
 * kernels depend on (rt_value.value_dep); a session keys its plans by them
 * (tpf_plan_value_inputs). */
#define TPF_RT_HINT_MAX_ELEMS 64

/* Inputs whose values the plan depends on: their indices into the inputs
 * the plan was built with, in graph input order; the count. */
size_t tpf_plan_value_inputs(const struct tpf_plan *p, int *idx, size_t max);

/* Ops the runtime cannot run, each (op, dtype) once with its node count and
 * first node; reported as one error (tpf_unsupported_report). */
struct tpf_unsupported;
struct tpf_unsupported *tpf_unsupported_create(void);
void tpf_unsupported_free(struct tpf_unsupported *u);
/* reason: why (from a message "node 'X' (Op): REASON", the prefix is dropped). */
void tpf_unsupported_add(struct tpf_unsupported *u, const struct tpf_node *n, enum tpf_dtype dt,
			 const char *reason);
size_t tpf_unsupported_count(const struct tpf_unsupported *u);
/* One error listing every entry; returns TPF_ERR_UNSUPPORTED (TPF_OK when
 * the list is empty). */
enum tpf_status tpf_unsupported_report(const struct tpf_unsupported *u, enum tpf_backend b,
				       struct tpf_diag *d);

/* "node 'NAME' (OP): MESSAGE" as an error in d; returns st. */
enum tpf_status tpf_rt_node_fail(struct tpf_diag *d, const struct tpf_node *n, enum tpf_status st,
				 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Fills the output dtypes and dims of a call whose inputs are bound (host
 * copies set where known).  out[i] of omitted outputs are left alone (the
 * caller marks them with dtype UNDEFINED and rank -1). */
enum tpf_status tpf_rt_infer(const struct tpf_node *n, struct tpf_kernel_call *c,
			     struct tpf_diag *d);

/* Steps s, s + 1, s + 2 of the plan are a Pack, the AllToAll of its output
 * and the Unpack of that (coalesce-alltoall's layout): the run the session
 * may do as one grouped exchange, whose Pack inputs the planner keeps live
 * through the Unpack. */
int tpf_plan_a2a_run(const struct tpf_plan *p, size_t s);

/* "input_ids:i64[1,6], ...": the plan's graph inputs with the dtypes and
 * dims it was built for, as tpf_plan_print lists them (the profile's
 * heading of a plan). */
void tpf_plan_print_inputs(const struct tpf_plan *p, FILE *f);

/* Operand `input` of the first step of the session's current plan that runs
 * node `node`, as bound for its kernel (data, invariant, ...); NULL when
 * there is no such step or no plan is bound yet.  For tests. */
const struct tpf_ktensor *tpf_session_bound_input(const struct tpf_session *s, const char *node, size_t input);

#endif /* TPF_RUNTIME_INTERNAL_H */
