/*
 * CUDA kernels of tpfuse that the CUDA backend and the benchmarks call
 * directly: the residual-add + RMSNorm family, with and without the
 * all-reduce fused in, and FP8 output.
 *
 * Pointers are device pointers; `stream` is a cudaStream_t (NULL: the legacy
 * default stream).  Every function only enqueues work; errors of the launch
 * come back as a status with a message, errors during execution surface at
 * the next synchronization.  Supported dtypes: FLOAT, FLOAT16, BFLOAT16.
 */
#ifndef TPF_CUDA_H
#define TPF_CUDA_H

#include "tpf-ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a peer-memory all-reduce moves the data (every rank must pass the
 * same): one-shot stores each rank's whole tensor into every peer and
 * every rank sums all of it (least latency: small tensors); two-shot
 * scatters rows to their owners, which sum them and gather the sums back
 * (2 x (world-1)/world of the tensor per rank: large tensors). */
enum tpf_cuda_ar_path { TPF_CUDA_AR_ONESHOT = 0, TPF_CUDA_AR_TWOSHOT = 1 };

/* Output side of one norm: any of the pointers may be NULL. */
struct tpf_cuda_norm_args {
	enum tpf_dtype dtype;
	int64_t rows, hidden;
	const void *x;        /* [rows, hidden]: the (reduced) activation */
	const void *residual; /* [rows, hidden] or NULL */
	const void *gamma;    /* [hidden] */
	float epsilon;
	float weight_offset;  /* 1 for (1 + gamma) norms, else 0 */
	void *norm_out;       /* [rows, hidden] in dtype, or NULL */
	void *residual_out;   /* [rows, hidden]: x + residual, or NULL */
	void *fp8_out;        /* [rows, hidden] FLOAT8E4M3FN of norm / fp8_scale, or NULL */
	float fp8_scale;
	/* NVFP4 (hidden a multiple of 16): fp4_out [rows, hidden] FLOAT4E2M1
	 * (two per byte, low nibble first), fp4_scales [rows, hidden/16]
	 * FLOAT8E4M3FN block scales of norm / fp4_global (docs/ops.md) */
	void *fp4_out, *fp4_scales;
	float fp4_global;
	/* FP8 per group of `group` values along the row (group / values per
	 * 16 bytes at most 32, a power of two): group_out [rows, hidden]
	 * FLOAT8E4M3FN codes of norm / scale, group_scales [rows, hidden/group]
	 * float32 max(amax / 448, group_floor) */
	void *group_out, *group_scales;
	float group_floor;
	int64_t group;
	enum tpf_cuda_ar_path path; /* tpf_cuda_arnorm_run only */
};

/* residual_out = x + residual; norm_out = rmsnorm(residual_out) * (gamma + offset);
 * fp8_out = saturate(norm / scale).  One kernel. */
enum tpf_status tpf_cuda_add_rmsnorm(const struct tpf_cuda_norm_args *a, void *stream,
				     struct tpf_diag *d);

/* The unfused pieces, one kernel each (the baseline a graph without fusion runs). */
enum tpf_status tpf_cuda_add(enum tpf_dtype dt, const void *a, const void *b, void *out,
			     int64_t n, void *stream, struct tpf_diag *d);
enum tpf_status tpf_cuda_rmsnorm(enum tpf_dtype dt, const void *x, const void *gamma, void *out,
				 int64_t rows, int64_t hidden, float epsilon, float weight_offset,
				 void *stream, struct tpf_diag *d);
enum tpf_status tpf_cuda_quantize_fp8(enum tpf_dtype dt, const void *x, void *out, int64_t n,
				      float scale, void *stream, struct tpf_diag *d);

/* ------------------------------------------------ one-shot all-reduce fusion
 *
 * Each rank stores its rows straight into every peer's receive buffer (peer
 * memory mapped through CUDA IPC); every reader spins until no -0.0
 * placeholder is left in what it reads, sums in float, and finishes the
 * residual add, the norm and the quantization in registers.  Three rotating
 * buffers and a device-side call counter make it barrier-free and safe to
 * capture in a CUDA graph; every rank must make the same sequence of calls.
 */
struct tpf_cuda_arnorm;

/* Gathers `bytes` from every rank into recv (rank-major), as MPI_Allgather. */
struct tpf_cuda_exchange {
	int (*allgather)(void *ctx, const void *send, void *recv, size_t bytes);
	void *ctx;
};

/* max_rows * hidden elements of `dtype` is the largest call accepted. */
enum tpf_status tpf_cuda_arnorm_create(int rank, int world, enum tpf_dtype dtype,
				       size_t max_elems, const struct tpf_cuda_exchange *ex,
				       struct tpf_cuda_arnorm **out, struct tpf_diag *d);
void tpf_cuda_arnorm_free(struct tpf_cuda_arnorm *c);
size_t tpf_cuda_arnorm_max_elems(const struct tpf_cuda_arnorm *c);
/* a->x is this rank's partial sum; every output is the same on all ranks
 * (bit for bit: every rank sums the ranks' rows in rank order), by
 * a->path. */
enum tpf_status tpf_cuda_arnorm_run(struct tpf_cuda_arnorm *c, const struct tpf_cuda_norm_args *a,
				    void *stream, struct tpf_diag *d);
/* The fewest rows (of `hidden` elements) for which the two-shot path takes
 * its instance for many rows (narrow blocks, whole rows taken at a time,
 * at more than two ranks the grid's halves on the owned and the gathered
 * rows); INT64_MAX where that instance's grid would be a single block;
 * -1 where the hidden size is not accepted.  For tests and tuning. */
int64_t tpf_cuda_arnorm_many_rows(const struct tpf_cuda_arnorm *c, int64_t hidden);
/* A wait for a peer's data gives up after this long (default 60 s). */
void tpf_cuda_arnorm_set_timeout(struct tpf_cuda_arnorm *c, double seconds);
/* After the stream is synchronized: an error when a wait gave up (a rank
 * did not reach the same collective).  The context stays unusable. */
enum tpf_status tpf_cuda_arnorm_check(struct tpf_cuda_arnorm *c, struct tpf_diag *d);


/* ------------------------------------------------ peer-memory all-to-all
 *
 * Several all-to-alls as one exchange, each piece from and into its own
 * buffers (tpf_comm_ops.alltoall_pieces' contract): one kernel stores each
 * destination's chunk of every piece into that rank's receive area (peer
 * memory mapped through CUDA IPC; its own chunk straight into recv), counts
 * itself in at every peer, waits for every peer's count and copies the
 * received chunks into recv.  No packing copy on the sender; a device-side
 * call counter and two alternating buffers make it safe in CUDA graphs.
 * Every rank must make the same sequence of calls with the same piece
 * sizes. */
struct tpf_cuda_a2a;

#define TPF_CUDA_A2A_MAX_PIECES 128 /* pieces a call */

/* max_bytes: the most bytes a call sends one destination, over all pieces
 * (each rounded up to 16). */
enum tpf_status tpf_cuda_a2a_create(int rank, int world, size_t max_bytes, const struct tpf_cuda_exchange *ex,
				    struct tpf_cuda_a2a **out, struct tpf_diag *d);
void tpf_cuda_a2a_free(struct tpf_cuda_a2a *c);
size_t tpf_cuda_a2a_max_bytes(const struct tpf_cuda_a2a *c);
/* send[i] is world chunks of bytes_per_rank[i] (chunk q for rank q); recv[i]
 * receives world such chunks (chunk q from rank q). */
enum tpf_status tpf_cuda_a2a_run(struct tpf_cuda_a2a *c, const void *const *send, void *const *recv,
				 const size_t *bytes_per_rank, size_t n, void *stream, struct tpf_diag *d);
void tpf_cuda_a2a_set_timeout(struct tpf_cuda_a2a *c, double seconds);
/* After the stream is synchronized: an error when a wait gave up. */
enum tpf_status tpf_cuda_a2a_check(struct tpf_cuda_a2a *c, struct tpf_diag *d);

/* ------------------------------------------------ sharded RMSNorm
 * n tensors (Q and K of one projection, say), each sharded over the last
 * dimension: y_i = x_i * rsqrt(sum over ranks of sum(x_i^2) / full_dim_i + eps_i)
 * * (gamma_i + weight_offset), with one exchange of n floats per row through
 * peer memory.  `c` must have been created with dtype FLOAT and room for
 * rows * n floats. */
#define TPF_CUDA_SHARDED_MAX 4
struct tpf_cuda_sharded_args {
	enum tpf_dtype dtype;
	int n;
	int64_t rows;
	const void *x[TPF_CUDA_SHARDED_MAX];     /* [rows, width_i] */
	const void *gamma[TPF_CUDA_SHARDED_MAX]; /* [width_i]: this rank's shard */
	void *out[TPF_CUDA_SHARDED_MAX];         /* [rows, width_i] */
	int64_t width[TPF_CUDA_SHARDED_MAX];
	int64_t full_dim[TPF_CUDA_SHARDED_MAX];
	float epsilon[TPF_CUDA_SHARDED_MAX];
	float weight_offset;
};
enum tpf_status tpf_cuda_sharded_rmsnorm_run(struct tpf_cuda_arnorm *c,
					     const struct tpf_cuda_sharded_args *a, void *stream,
					     struct tpf_diag *d);
/* The same without peer memory: per-row partial sums of squares written as
 * float [rows, n] (then all-reduced by the caller), and the local normalize. */
enum tpf_status tpf_cuda_sharded_sumsq(const struct tpf_cuda_sharded_args *a, float *sums,
				       void *stream, struct tpf_diag *d);
enum tpf_status tpf_cuda_sharded_normalize(const struct tpf_cuda_sharded_args *a,
					   const float *sums, void *stream, struct tpf_diag *d);

/* ------------------------------------------------ one-shot paths of a plan
 * The CUDA runtime runs a plan's fused collectives through a one-shot
 * context instead of NCCL plus a kernel when these accept the operands.
 * With ctx NULL they only decide: TPF_OK with *need filled (the dtype and
 * the element count the context must hold) when the operands fit,
 * TPF_ERR_UNSUPPORTED without a message when they do not.  The decision
 * depends on dtypes, shapes, attributes and 16-byte alignment only, so every
 * rank of a plan makes the same one. */
struct tpf_kernel_call;
struct tpf_ktensor;
struct tpf_cuda_oneshot_need {
	enum tpf_dtype dtype;
	size_t elems;
	int64_t hidden; /* the row width (elems / hidden: the tokens) */
};
/* AllReduceRMSNorm without a bias, AllReduceRMSNormQuant (fp8, one known
 * scale): `post` is the post-reduce call, `partial` this rank's unreduced
 * input (the shape of post->in[0]).  Context of the input's dtype.
 * AllReduceLayerNorm and a bias are declined. */
enum tpf_status tpf_cuda_oneshot_arnorm(struct tpf_cuda_arnorm *ctx, const struct tpf_kernel_call *post,
					const void *partial, enum tpf_cuda_ar_path path,
					struct tpf_cuda_oneshot_need *need);
/* A bare sum over ranks of x into y (y may be x). */
enum tpf_status tpf_cuda_oneshot_allreduce(struct tpf_cuda_arnorm *ctx, const struct tpf_ktensor *x,
					   struct tpf_ktensor *y, enum tpf_cuda_ar_path path, void *stream,
					   struct tpf_diag *d, struct tpf_cuda_oneshot_need *need);
/* ShardedRMSNorm: the sum-of-squares call and the normalize call of one
 * node.  A FLOAT context of its own (not shared with the calls above). */
enum tpf_status tpf_cuda_oneshot_sharded(struct tpf_cuda_arnorm *ctx, const struct tpf_kernel_call *sumsq,
					 const struct tpf_kernel_call *norm, struct tpf_cuda_oneshot_need *need);

/* ------------------------------------------------ sigmoid gate
 * out = final + sigmoid(gate) * shared; final, shared, out [rows, hidden];
 * gate [rows, gate_cols] with gate_cols 1 (broadcast) or hidden.  Computed in
 * float, rounded once. */
enum tpf_status tpf_cuda_sigmoid_gate_add(enum tpf_dtype dt, const void *final_, const void *gate,
					  const void *shared, void *out, int64_t rows,
					  int64_t hidden, int64_t gate_cols, void *stream,
					  struct tpf_diag *d);

/* ------------------------------------------------ segment copies (Pack / Unpack)
 * Each segment copies `len` bytes.  Pack: from bufs[buf] + src to dst + dst_off.
 * Unpack: from src + src_off to bufs[buf] + dst.  `segs` and `bufs` are
 * device arrays. */
struct tpf_cuda_segment {
	int64_t buf, src, dst, len;
};
enum tpf_status tpf_cuda_pack(const void *const *bufs, void *dst, const struct tpf_cuda_segment *segs,
			      int nseg, int64_t max_len, void *stream, struct tpf_diag *d);
enum tpf_status tpf_cuda_unpack(const void *src, void *const *bufs, const struct tpf_cuda_segment *segs,
				int nseg, int64_t max_len, void *stream, struct tpf_diag *d);

/* Free and total memory of the calling thread's current device
 * (cudaMemGetInfo); 0 ok, -1 when CUDA cannot say. */
int tpf_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);

/* The column-tile width (16 or 32) the small-M MatMul kernel reads a
 * weight [K, N] in for `rows` rows of A, when that kernel takes packed
 * weights for this shape, else 0: the FMA kernel's products, bfloat16 or
 * float16, 1 to 8 rows within TPF_GEMV, the tensor-core kernel's rows only
 * where K % 16 != 0, K >= 256, N % 8 == 0, and not a weight over 1 MiB of
 * so few column tiles that they would occupy a small part of the SMs.  The
 * plan packs known weights for it (TPF_PHASE_MATMUL_TILED). */
int tpf_cuda_gemv_tile_cols(enum tpf_dtype dt, int64_t rows, int64_t K, int64_t N);

#ifdef __cplusplus
}
#endif

#endif /* TPF_CUDA_H */
