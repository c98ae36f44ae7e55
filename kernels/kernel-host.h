/* SPDX-License-Identifier: MIT */
/* Private to kernels/: host-side code that both backends share (host.c):
 * messages, broadcasting, and the reading of attributes and shape-like
 * operands, so that the CPU and the CUDA kernel of an op read a node the
 * same way and refuse the same nodes with the same message.  C, included by
 * kernels/cpu/cpu-kernels.h and kernels/cuda/cuda-common.cuh. */
#ifndef TPF_KERNEL_HOST_H
#define TPF_KERNEL_HOST_H

#include "tpf-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adds "node 'NAME' (OP): MESSAGE" to the call's diagnostic, returns st. */
enum tpf_status tpf_kfail(const struct tpf_kernel_call *c, enum tpf_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same into d (the call's diag may be another). */
enum tpf_status tpf_kfail_to(const struct tpf_kernel_call *c, struct tpf_diag *d, enum tpf_status st,
			     const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Walks the elements of an output in row-major order, keeping the offsets of
 * up to TPF_BCAST_MAX inputs broadcast to it (numpy rules). */
#define TPF_BCAST_MAX 4
struct tpf_bcast {
	int rank;
	int n;
	int64_t dims[TPF_KERNEL_MAX_RANK];
	int64_t idx[TPF_KERNEL_MAX_RANK];
	int64_t strides[TPF_BCAST_MAX][TPF_KERNEL_MAX_RANK];
	int64_t off[TPF_BCAST_MAX];
};
/* 0 ok, -1 when an input does not broadcast to out. */
int tpf_bcast_init(struct tpf_bcast *b, const struct tpf_ktensor *out,
		   const struct tpf_ktensor *const *ins, int n);
void tpf_bcast_next(struct tpf_bcast *b);

/* Element size in bytes for byte-addressable dtypes; 0 for sub-byte ones. */
size_t tpf_elem_size(enum tpf_dtype t);


/* ------------------------------------------------------------ attributes
 * Each reader takes the call (its node's attributes, its operands) and
 * returns 0, or -1 when the node or its operands do not fit (the kernel
 * reports that with its own status); those returning a status have added
 * the message already. */

/* Reductions (ReduceMean/Sum/Max): red[d] = 1 for each reduced axis of a
 * rank-`rank` input, from the axes input (opset 18 on) or attribute;
 * *noop (may be NULL) = 1 when the axes are empty and noop_with_empty_axes
 * is set (nothing reduced).  The count of axes, or -1 for bad axes. */
int tpf_reduce_axes(const struct tpf_kernel_call *c, int rank, int *red, int *noop);

/* Softmax over `axis`: x as [outer, len, inner]; from opset 13 len is the
 * axis' dim, before it every dim from the axis on (inner = 1). */
int tpf_softmax_view(const struct tpf_kernel_call *c, const struct tpf_ktensor *x, int64_t *outer,
		     int64_t *len, int64_t *inner);

/* Transpose: perm[d] = the input axis of output axis d (reversed when the
 * node has no perm).  TPF_ERR_INVALID with a message for a bad perm. */
enum tpf_status tpf_transpose_perm(const struct tpf_kernel_call *c, int rank, int *perm);

/* Gemm: transA/transB, alpha/beta and the M x K by K x N product they
 * make of the 2-D operands A and B, checked against the 2-D output.
 * TPF_ERR_INVALID with a message when they do not agree. */
struct tpf_gemm_attrs {
	int trans_a, trans_b;
	double alpha, beta;
	int64_t m, k, n;
};
enum tpf_status tpf_gemm_attrs(const struct tpf_kernel_call *c, struct tpf_gemm_attrs *g);

/* The operands of the matmul-tiled phase (TPF_PHASE_MATMUL_TILED): A
 * [..., K], the weight packed as [tiles, K, tw] (tw 16 or 32) and the
 * output [..., N] of A's rows, all of one dtype; gated: the phase of a
 * packed GatedActivation, the weight packed by tpf_gemv_pack_gated and the
 * output [..., N / 2].  N is the product's columns.  TPF_ERR_INVALID with
 * a message when they do not fit. */
struct tpf_tiled_geom {
	int64_t rows, K, N, tw;
};
enum tpf_status tpf_tiled_geom(const struct tpf_kernel_call *c, int gated, struct tpf_tiled_geom *g);

/* Attention: the softmax scale (1/sqrt(head_dim) when the attribute is 0 or
 * absent), is_causal and softcap (0: none). */
struct tpf_attention_attrs {
	float scale;
	int causal;
	float softcap;
};
void tpf_attention_attrs(const struct tpf_kernel_call *c, int64_t head_dim,
			 struct tpf_attention_attrs *a);

/* Normalizations (RMSNormalization, SimplifiedLayerNormalization in both
 * domains, SkipSimplifiedLayerNormalization, LayerNormalization and the
 * ai.tpfuse norms RMSNorm, AllReduceRMSNorm, AllReduceLayerNorm,
 * AllReduceRMSNormQuant): x as [rows, cols] normalized over the dims from
 * `axis` on (the last dim for SkipSimplifiedLayerNormalization), epsilon
 * with the op's default (1e-12 for SkipSimplifiedLayerNormalization, else
 * 1e-5), weight_offset (1 for (1 + gamma) norms, else 0), and
 * AllReduceRMSNormQuant's quantization:
 * `quant` (fp8, nvfp4, nvfp4-block, fp8-group) and block_size (default 16;
 * fp8-group's group, default 128).
 * -1 when the axis is out of range for x. */
enum tpf_norm_quant {
	TPF_NORM_QUANT_NONE = 0, /* not a quantizing norm */
	TPF_NORM_QUANT_FP8,
	TPF_NORM_QUANT_NVFP4,
	TPF_NORM_QUANT_NVFP4_BLOCK,
	TPF_NORM_QUANT_FP8_GROUP, /* per-group FP8 with float32 scales (block_size: the group) */
	TPF_NORM_QUANT_OTHER, /* an unknown `quant` value (quant_name says which) */
};
struct tpf_norm_attrs {
	int axis;
	int64_t rows, cols;
	float epsilon, weight_offset;
	enum tpf_norm_quant quant;
	const char *quant_name;
	int64_t block_size;
};
int tpf_norm_attrs(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
		   struct tpf_norm_attrs *a);

/* ShardedRMSNorm, tensor i of the node: the full width its shard is part
 * of (full_dims[i], else full_dim, else local * world) and its epsilon
 * (epsilons[i], else epsilon, default 1e-5). */
int64_t tpf_sharded_full_dim(const struct tpf_kernel_call *c, size_t i, int64_t local);
float tpf_sharded_epsilon(const struct tpf_kernel_call *c, size_t i);
/* The part form (part_starts, part_ends): the part [*start, *end) of tensor
 * i, 0; -1 when the node has none.  Whether every part is this rank's shard
 * (d_i wide: [rank * d_i, rank * d_i + d_i)), as the plan decides. */
int tpf_sharded_part(const struct tpf_kernel_call *c, size_t i, int64_t *start, int64_t *end);
int tpf_sharded_parts_own(const struct tpf_kernel_call *c, size_t n);
/* Input p as rows x cols (its last dim); *rows < 0 before the first input,
 * else TPF_ERR_INVALID with a message when p's rows differ. */
enum tpf_status tpf_sharded_tokens(const struct tpf_kernel_call *c, size_t p, int64_t *rows,
				   int64_t *cols);
/* The part form on a rank that gathers (world ranks): tensor p's part
 * [start, end) of the full width, w = end - start wide, of `rows` rows of
 * output p, from gathered input p [world, rows, d] (full = d * world).
 * TPF_ERR_INVALID with a message when the node has no part for p; the
 * caller checks that the operands fit. */
struct tpf_sharded_gathered {
	int64_t start, end, w, rows, d, full;
};
enum tpf_status tpf_sharded_gathered_part(const struct tpf_kernel_call *c, size_t p, int world,
					  struct tpf_sharded_gathered *gp);

/* QuantizeLinear / DequantizeLinear: how element i of x (row-major) finds
 * its scale (and zero point) element.  mode 0: one scale; 1: per axis
 * (`axis`, default 1; scale [dim]); 2: blocked (block_size along the axis;
 * scale of x's shape with ceil(dim / block) on the axis). */
struct tpf_qmap {
	int mode;
	int64_t dim, inner, block, sdim;
};
int tpf_qmap_init(const struct tpf_kernel_call *c, const struct tpf_ktensor *x,
		  const struct tpf_ktensor *scale, struct tpf_qmap *m);

/* The `reduction` of ScatterElements and ScatterND (default none):
 * TPF_SCATTER_NONE .. TPF_SCATTER_MIN, or -1 for another value; *name (may
 * be NULL) gets the attribute's text for messages. */
enum { TPF_SCATTER_NONE, TPF_SCATTER_ADD, TPF_SCATTER_MUL, TPF_SCATTER_MAX, TPF_SCATTER_MIN };
int tpf_scatter_reduction(const struct tpf_kernel_call *c, const char **name);

/* Conv (in[0] X [N, C, D...], in[1] W [M, C/group, K...], out[0] Y): the
 * geometry, pads resolved (auto_pad included) and checked against Y's
 * shape.  0 ok, -1 when the operands, attributes and Y disagree. */
struct tpf_conv_geom {
	int sp;                          /* spatial dims */
	int64_t n, c, m, group;
	int64_t in[TPF_KERNEL_MAX_RANK], k[TPF_KERNEL_MAX_RANK], out[TPF_KERNEL_MAX_RANK];
	int64_t pad[TPF_KERNEL_MAX_RANK]; /* leading pad per spatial dim */
	int64_t stride[TPF_KERNEL_MAX_RANK], dil[TPF_KERNEL_MAX_RANK];
};
int tpf_conv_resolve(const struct tpf_kernel_call *c, struct tpf_conv_geom *g);

/* Pad: the leading pad of every axis of in[0] (negative: cropped), from the
 * `pads` attribute (before opset 11) or input (with `axes` from opset 18),
 * checked against the output's shape; *mode 0 constant, 1 edge, 2 reflect,
 * 3 wrap.  0 ok, -1 when they disagree. */
int tpf_pad_resolve(const struct tpf_kernel_call *c, int64_t *begin, int *mode);
/* tpf_pad_source (op-geometry.h): the index along one axis it reads. */

/* Einsum: the index plan of the node's equation (tpf_einsum_parse) over
 * its operands.  Loops are the labels of more than one element: the
 * output's first, in its order (so the output is row-major over them),
 * then the summed ones, those of larger strides outside.  stride[i][l]
 * is input i's element stride along loop l: 0 where the input broadcasts
 * or lacks the label, summed over the dims of a repeated label (a
 * diagonal).  TPF_ERR_INVALID (or TPF_ERR_UNSUPPORTED past the loops it
 * holds) with a message when the equation does not fit the operands. */
#define TPF_EINSUM_LOOPS 24
struct tpf_einsum_plan {
	int n_in, n_out, n_loops; /* n_out: the output's loops, first */
	int64_t size[TPF_EINSUM_LOOPS];
	int64_t stride[TPF_EINSUM_MAX_OPERANDS][TPF_EINSUM_LOOPS];
	int64_t out_numel, sum_numel; /* elements of the output and of one sum */
};
enum tpf_status tpf_einsum_plan(const struct tpf_kernel_call *c, struct tpf_einsum_plan *p);
/* The plan's checks that need no output (kernels.def's form of Einsum):
 * the equation over the inputs, and at most TPF_EINSUM_LOOPS labels of
 * more than one element (TPF_ERR_UNSUPPORTED), reported into d. */
enum tpf_status tpf_einsum_form(const struct tpf_kernel_call *c, struct tpf_diag *d);

/* ------------------------------------------------------------ launches */

/* The kinds of GPU kernel that may be launched as programmatic dependents
 * of the stream's previous kernel (docs/gpu.md). */
enum tpf_pdl_kind {
	TPF_PDL_GEMV,      /* the small-M GEMVs ("gemv") */
	TPF_PDL_COPY,      /* the 16-byte Split/Concat copy ("copy") */
	TPF_PDL_GATED,     /* the gated activation ("gated") */
	TPF_PDL_ATTENTION, /* the decode attention ("attention") */
	TPF_PDL_COMBINE,   /* its combine kernel ("combine") */
	TPF_PDL_KINDS
};
#define TPF_PDL_DEFAULT (1u << TPF_PDL_GEMV | 1u << TPF_PDL_COPY | 1u << TPF_PDL_GATED)

/* The kinds (bit 1 << kind) a TPF_PDL value names: NULL, "" or "1" the
 * default set; "0" none; "all" or "2" every kind; else a comma-separated
 * list of the kinds' names (blanks around a name dropped, unknown names
 * ignored; a list that names none: the default set). */
unsigned tpf_pdl_kinds_parse(const char *spec);
/* Whether spec is a TPF_PDL value as written: "0", "1", "2", "all", or a
 * list whose every non-empty entry names a kind (and names one at least):
 * the environment check refuses the rest rather than reading them as the
 * default set. */
int tpf_pdl_kinds_valid(const char *spec);

#ifdef __cplusplus
}
#endif

#endif /* TPF_KERNEL_HOST_H */
