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
/* a->x is this rank's partial sum; every output is the same on all ranks. */
enum tpf_status tpf_cuda_arnorm_run(struct tpf_cuda_arnorm *c, const struct tpf_cuda_norm_args *a,
				    void *stream, struct tpf_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* TPF_CUDA_H */
