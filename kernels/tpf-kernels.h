/*
 * tpfuse kernels: one C interface in front of the CPU reference kernels
 * (kernels/cpu) and the CUDA kernels (kernels/cuda).
 *
 *   const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, node->op,
 *                                                TPF_PHASE_MAIN, TPF_DTYPE_BFLOAT16);
 *   struct tpf_kernel_call c = { .node = node, .in = in, .n_in = 2, .out = out, .n_out = 1 };
 *   k->run(&c);
 *
 * A kernel reads its attributes from the IR node, its operands from dense
 * row-major tensors whose shapes the runtime has already bound, and writes
 * outputs the runtime has allocated (shapes filled in by the runtime's shape
 * functions).  Kernels never allocate their outputs, never print and never
 * abort: bad operands give TPF_ERR_INVALID or TPF_ERR_UNSUPPORTED with a
 * message "node 'NAME' (OP): ..." in the call's diagnostic.
 *
 * Collectives are not kernels: the runtime runs them through a communicator.
 * Fused ops that contain a collective are lowered to several steps, each of
 * which is a kernel of the same op with a different phase (see
 * enum tpf_kernel_phase).
 *
 * Floating-point kernels accumulate in float32 (float64 for DOUBLE); bf16,
 * fp16, fp8 and fp4 values are stored with exact round-to-nearest-even.
 */
#ifndef TPF_KERNELS_H
#define TPF_KERNELS_H

#include "tpf-ir.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tpf_backend { TPF_BACKEND_CPU = 0, TPF_BACKEND_CUDA, TPF_BACKEND_COUNT };

const char *tpf_backend_name(enum tpf_backend b); /* "cpu", "cuda" */
int tpf_backend_from_name(const char *name, enum tpf_backend *out); /* 0 ok */

/* Tensors of higher rank are refused by the planner with TPF_ERR_LIMIT. */
#define TPF_KERNEL_MAX_RANK 16

/* A tensor as a kernel sees it. */
struct tpf_ktensor {
	enum tpf_dtype dtype;
	int rank;
	int64_t dims[TPF_KERNEL_MAX_RANK];
	int64_t numel;
	size_t nbytes;
	void *data;       /* backend memory; NULL for an omitted optional operand */
	const void *host; /* host copy when the value was known when the plan was built
			   * (initializers, constants, shape computations); else NULL.
			   * On the CPU backend equal to data when set. */
	int invariant;    /* no step of the same run writes it (initializers,
			   * constants, graph inputs and views of them): a GPU
			   * kernel may read it before the previous kernel of its
			   * stream has finished (programmatic dependent launch).
			   * Eager replays without new inputs (tpf_session_replay)
			   * are timing runs on the last run's bytes: an input's
			   * buffer a later step reused may be read mid-rewrite */
};

/* Most ops run as one kernel (MAIN).  Ops lowered around a collective run
 * their local parts as separate phases. */
enum tpf_kernel_phase {
	TPF_PHASE_MAIN = 0,
	/* AllReduceRMSNorm / AllReduceLayerNorm / AllReduceRMSNormQuant:
	 * everything after the sum; operand 0 is the already reduced
	 * activation. */
	TPF_PHASE_POST_REDUCE,
	/* ShardedRMSNorm: per-row partial sums of squares of each local shard,
	 * written as float32 [rows, n_pairs]. */
	TPF_PHASE_SUMSQ,
	/* ShardedRMSNorm: normalize with the reduced sums (last operand). */
	TPF_PHASE_NORMALIZE,
	/* AllGather along axis != 0: operand 0 holds the world's chunks rank
	 * after rank (as the communicator gathers them); reorder them so that
	 * they are concatenated along the node's axis. */
	TPF_PHASE_GATHER_REORDER,
	/* MatMul of a few rows by a known 2-D weight [K, N], the weight packed
	 * for the small-M kernels (runtime/plan-lower.c): operand 1 is
	 * [ceil(N / TW), K, TW], column tile t holding columns t * TW ..
	 * t * TW + TW - 1 of every row of K (the last tile's columns past N
	 * zero); N is the output's last dim.  TW is 16 or 32.  Also
	 * ai.tpfuse.GatedActivation (packed) of such a product: operands A and
	 * the merged gate/up weight packed by tpf_gemv_pack_gated, output
	 * [..., F], the product never stored (and ai.tpfuse.GatedMatMul, of
	 * the same operands). */
	TPF_PHASE_MATMUL_TILED,
	/* ai.tpfuse.GatedMatMul run as two kernels: the product A @ W,
	 * [..., 2F], into a temporary (the MatMul kernels); MAIN then runs
	 * the gated activation on it. */
	TPF_PHASE_PRODUCT,
	TPF_PHASE_COUNT
};

const char *tpf_kernel_phase_name(enum tpf_kernel_phase p);

struct tpf_kernel_call {
	const struct tpf_node *node; /* attributes, name for messages */
	int64_t opset;               /* opset of the node's domain in its model */
	const struct tpf_ktensor *in;
	size_t n_in;
	struct tpf_ktensor *out;
	size_t n_out;
	void *workspace; /* workspace(call) bytes of backend memory, or NULL */
	size_t workspace_bytes;
	void *stream;    /* backend queue (cudaStream_t); NULL on the CPU */
	int rank, world; /* of the run, for ops that depend on them */
	struct tpf_diag *diag;
};

typedef enum tpf_status (*tpf_kernel_fn)(const struct tpf_kernel_call *c);

struct tpf_kernel {
	const char *name; /* "cpu.binary", ... shown by the plan printer */
	enum tpf_backend backend;
	enum tpf_op op;
	enum tpf_kernel_phase phase;
	/* Bit (1 << dtype) for each accepted dtype of the key operand; 0: any. */
	uint64_t dtypes;
	/* Operand whose dtype selects the kernel: input index, or -1 for the
	 * first output. */
	int key_input;
	tpf_kernel_fn run;
	/* Bytes of workspace the call needs; NULL: none. */
	size_t (*workspace)(const struct tpf_kernel_call *c);
};

/* The one kernel table: the rows of every backend built in, made from the
 * one list kernels/kernels.def.  NULL when no kernel exists for (backend,
 * op, phase, key dtype). */
const struct tpf_kernel *tpf_kernel_find(enum tpf_backend b, enum tpf_op op,
					 enum tpf_kernel_phase phase, enum tpf_dtype key);
/* Any kernel for (backend, op, phase), whatever its dtypes; NULL if none. */
const struct tpf_kernel *tpf_kernel_find_any(enum tpf_backend b, enum tpf_op op,
					     enum tpf_kernel_phase phase);
/* The phases a node of op runs as, from the op's rows of kernels.def (any
 * backend), in the list's order, each once, at most max of them: the
 * phases of its steps.  Left out: MAIN when the op has other phases (a
 * kernel some forms run besides them: ShardedRMSNorm's gathered part) and
 * TPF_PHASE_MATMUL_TILED, another kernel for MAIN's work that the plan may
 * pick instead.  0 when the op has no row. */
size_t tpf_kernel_phases(enum tpf_op op, enum tpf_kernel_phase *phases, size_t max);
/* Every row of the table, all backends built in. */
const struct tpf_kernel *const *tpf_kernel_list(size_t *count);
/* Whether the kernels of op (every backend, every phase it is lowered to)
 * run the form of the call's node and operands (shapes bound, outputs'
 * count): TPF_OK, or the status with a message "node 'NAME' (OP): ..." in d
 * for a form they do not run (the TPF_KERNEL_FORM rows of kernels.def;
 * broadcasting ops of more than 8 operands). */
enum tpf_status tpf_kernel_supports(enum tpf_op op, const struct tpf_kernel_call *c,
				    struct tpf_diag *d);

/* Fills numel and nbytes from dtype, rank and dims; -1 on overflow. */
int tpf_ktensor_finish(struct tpf_ktensor *t);

/* A weight W [K, N] row-major <-> packed in column tiles [ceil(N / tw), K,
 * tw] (TPF_PHASE_MATMUL_TILED), es-byte elements; pack writes the last
 * tile's columns past N as zero bytes. */
size_t tpf_gemv_packed_bytes(int64_t K, int64_t N, int tw, size_t es);
void tpf_gemv_pack(const void *w, void *packed, int64_t K, int64_t N, int tw, size_t es);
void tpf_gemv_unpack(const void *packed, void *w, int64_t K, int64_t N, int tw, size_t es);
/* The same for the merged gate/up weight of a gated MLP, [K, 2F] (gate
 * columns first), F a multiple of tw / 2: tile t holds gate columns
 * t * tw / 2 .. + tw / 2 - 1 then the up columns of the same indices, so a
 * tile's sums are the gate and up values of the same outputs (the
 * GatedActivation folded into the product, TPF_PHASE_MATMUL_TILED). */
void tpf_gemv_pack_gated(const void *w, void *packed, int64_t K, int64_t F, int tw, size_t es);
void tpf_gemv_unpack_gated(const void *packed, void *w, int64_t K, int64_t F, int tw, size_t es);

/* ------------------------------------------------------ scalar conversions
 * Exact: round to nearest, ties to even.  `saturate` follows ONNX Cast:
 * nonzero clamps out-of-range values (and infinities) to the largest finite
 * value; zero gives infinity where the format has one, else NaN. */

float tpf_f16_to_f32(uint16_t h);
uint16_t tpf_f32_to_f16(float f);
float tpf_bf16_to_f32(uint16_t h);
uint16_t tpf_f32_to_bf16(float f);
/* t: one of the FLOAT8 types or FLOAT4E2M1 (code in the low 4 bits) or
 * FLOAT8E8M0. */
float tpf_minifloat_to_f32(enum tpf_dtype t, uint8_t code);
uint8_t tpf_f64_to_minifloat(enum tpf_dtype t, double v, int saturate);
/* FLOAT8E8M0 with a rounding mode: 0 up (ONNX default), 1 nearest, 2 down. */
uint8_t tpf_f64_to_e8m0(double v, int round_mode, int saturate);

/* Element access for any numeric dtype (sub-byte types packed low nibble
 * first).  Loads return the exact value; stores round (float types, with
 * `saturate` for fp8) or truncate toward zero and clamp (integer types from
 * floats) or wrap (integer types from integers, as C casts do). */
double tpf_elem_load(enum tpf_dtype t, const void *base, int64_t i);
int64_t tpf_elem_load_int(enum tpf_dtype t, const void *base, int64_t i);
void tpf_elem_store(enum tpf_dtype t, void *base, int64_t i, double v, int saturate);
void tpf_elem_store_int(enum tpf_dtype t, void *base, int64_t i, int64_t v);
/* 1 for the integer and bool types, which kernels compute in int64. */
int tpf_dtype_is_integral(enum tpf_dtype t);

/* Normalizes axis into [0, rank); -1 if out of range. */
int tpf_norm_axis(int64_t axis, int rank);
/* Product of dims[from..to). */
int64_t tpf_dims_prod(const int64_t *dims, int from, int to);
/* Reads an integer operand's host copy into vals (at most max); the count,
 * or -1 when there is no host copy, the dtype is not integral or it is too
 * long. */
int tpf_kread_ints(const struct tpf_ktensor *t, int64_t *vals, int max);

/* Slice: resolves starts/ends/axes/steps (inputs from opset 10, attributes
 * before) against in[0]'s dims: per-dim start, step and output length.  The
 * index operands must have host copies.  0 ok, -1 on bad operands. */
int tpf_slice_resolve(const struct tpf_kernel_call *c, int64_t *start, int64_t *step,
		      int64_t *out_dims);

/* Range: the element count of Range(start, limit, delta), each a pointer
 * to one element of dtype dt: max(ceil((limit - start) / delta), 0); -1
 * when delta is 0, a float bound is not finite or the count overflows. */
int64_t tpf_range_length(enum tpf_dtype dt, const void *start, const void *limit, const void *delta);

/* Converts count elements between dtypes (Cast semantics). */
void tpf_elem_convert(enum tpf_dtype to, void *dst, enum tpf_dtype from, const void *src,
		      int64_t count, int saturate);

/* ------------------------------------------------------------------ environment
 * The tuning knobs read from the environment (kernels/env.c has the table,
 * docs/runtime.md "Environment" the same list).  An unset or empty
 * variable is the default. */
enum tpf_env_kind {
	TPF_ENV_SWITCH,  /* "0" or "1" */
	TPF_ENV_INT,     /* a decimal whole number in [lo, hi] */
	TPF_ENV_SECONDS, /* a decimal number above 0 */
	TPF_ENV_CHOICE,  /* one of choices, '|'-separated */
	TPF_ENV_PDL,     /* a TPF_PDL value */
	TPF_ENV_TEXT,    /* anything */
	TPF_ENV_FILE,    /* the path of a readable regular file */
};

struct tpf_env_knob {
	const char *name;
	enum tpf_env_kind kind;
	long long lo, hi;    /* TPF_ENV_INT */
	const char *choices; /* TPF_ENV_CHOICE */
	const char *what;    /* what it changes, one line */
};

/* The table, *n entries, sorted by name. */
const struct tpf_env_knob *tpf_env_knobs(size_t *n);
/* What a knob takes, as the check's messages say it ("0 or 1", ...). */
void tpf_env_takes(const struct tpf_env_knob *k, char *buf, size_t size);
/* Whether s is a value the knob takes. */
int tpf_env_well_formed(const struct tpf_env_knob *k, const char *s);
/* TPF_ERR_INVALID, naming the variable, its value and what it takes, for
 * the first knob that is set to a value it does not take. */
enum tpf_status tpf_env_check(struct tpf_diag *d);
/* A knob's value, or def where it is unset, malformed or not in the table
 * (a switch: 1 or 0; tpf_env_int also reads a numeric choice). */
int tpf_env_switch(const char *name, int def);
long long tpf_env_int(const char *name, long long def);
double tpf_env_seconds(const char *name, double def);
/* A well-formed, non-empty value, else NULL. */
const char *tpf_env_text(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* TPF_KERNELS_H */
