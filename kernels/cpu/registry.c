/* SPDX-License-Identifier: MIT */
/* The kernel table: one row per (backend, op, phase) with the dtypes of the
 * key operand it accepts.  The CUDA backend appends its rows through
 * tpf_cuda_kernel_table() when built. */
#include "cpu-kernels.h"

#include <stddef.h>

#define B(t) (UINT64_C(1) << TPF_DTYPE_##t)
#define FLOATS (B(FLOAT) | B(FLOAT16) | B(BFLOAT16) | B(DOUBLE))
#define INTS                                                                                       \
	(B(UINT8) | B(INT8) | B(UINT16) | B(INT16) | B(INT32) | B(INT64) | B(UINT32) | B(UINT64))
#define NUM (FLOATS | INTS)
#define ANY 0

#define K(name, op, phase, dtypes, key, fn)                                                        \
	{                                                                                          \
		"cpu." name, TPF_BACKEND_CPU, TPF_OP_##op, TPF_PHASE_##phase, dtypes, key, fn, NULL \
	}

static const struct tpf_kernel cpu_kernels[] = {
	K("binary", ADD, MAIN, NUM, 0, tpf_cpu_binary),
	K("binary", SUB, MAIN, NUM, 0, tpf_cpu_binary),
	K("binary", MUL, MAIN, NUM, 0, tpf_cpu_binary),
	K("binary", DIV, MAIN, NUM, 0, tpf_cpu_binary),
	K("binary", POW, MAIN, NUM, 0, tpf_cpu_binary),
	K("compare", EQUAL, MAIN, NUM | B(BOOL), 0, tpf_cpu_binary),
	K("compare", GREATER, MAIN, NUM, 0, tpf_cpu_binary),
	K("compare", LESS, MAIN, NUM, 0, tpf_cpu_binary),
	K("compare", LESS_OR_EQUAL, MAIN, NUM, 0, tpf_cpu_binary),
	K("compare", GREATER_OR_EQUAL, MAIN, NUM, 0, tpf_cpu_binary),
	K("logic", AND, MAIN, B(BOOL), 0, tpf_cpu_binary),
	K("logic", OR, MAIN, B(BOOL), 0, tpf_cpu_binary),
	K("logic", XOR, MAIN, B(BOOL), 0, tpf_cpu_binary),
	K("binary", MOD, MAIN, NUM, 0, tpf_cpu_binary),
	K("variadic", MAX, MAIN, NUM, 0, tpf_cpu_variadic),
	K("variadic", MIN, MAIN, NUM, 0, tpf_cpu_variadic),
	K("unary", SIGMOID, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", RELU, MAIN, NUM, 0, tpf_cpu_unary),
	K("unary", SQRT, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", RECIPROCAL, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", NEG, MAIN, NUM, 0, tpf_cpu_unary),
	K("unary", EXP, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", TANH, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", ERF, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", ABS, MAIN, NUM, 0, tpf_cpu_unary),
	K("unary", SIN, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", COS, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", NOT, MAIN, B(BOOL), 0, tpf_cpu_unary),
	K("unary", FLOOR, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", CEIL, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", LOG, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", SOFTPLUS, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", IS_NAN, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("unary", IS_INF, MAIN, FLOATS, 0, tpf_cpu_unary),
	K("clip", CLIP, MAIN, NUM, 0, tpf_cpu_clip),
	K("where", WHERE, MAIN, ANY, 1, tpf_cpu_where),
	K("cast", CAST, MAIN, ANY, 0, tpf_cpu_cast),
	K("matmul", MATMUL, MAIN, NUM, 0, tpf_cpu_matmul),
	K("matmul-bt", MATMUL, MATMUL_BT, NUM, 0, tpf_cpu_matmul_bt),
	K("matmul-fp8", MATMUL, FP8_GEMM, B(FLOAT8E4M3FN), 0, tpf_cpu_matmul_fp8),
	K("gemm", GEMM, MAIN, NUM, 0, tpf_cpu_gemm),
	K("reduce", REDUCE_MEAN, MAIN, NUM, 0, tpf_cpu_reduce),
	K("reduce", REDUCE_SUM, MAIN, NUM, 0, tpf_cpu_reduce),
	K("reduce", REDUCE_MAX, MAIN, NUM | B(BOOL), 0, tpf_cpu_reduce),
	K("softmax", SOFTMAX, MAIN, FLOATS, 0, tpf_cpu_softmax),
	K("topk", TOPK, MAIN, NUM, 0, tpf_cpu_topk),
	K("argmax", ARGMAX, MAIN, NUM, 0, tpf_cpu_argmax),
	K("rms-norm", RMS_NORMALIZATION, MAIN, FLOATS, 0, tpf_cpu_rms_norm),
	K("rms-norm", SIMPLIFIED_LAYER_NORMALIZATION, MAIN, FLOATS, 0, tpf_cpu_rms_norm),
	K("rms-norm", MS_SIMPLIFIED_LAYER_NORMALIZATION, MAIN, FLOATS, 0, tpf_cpu_rms_norm),
	K("skip-rms-norm", MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION, MAIN, FLOATS, 0,
	  tpf_cpu_skip_rms_norm),
	K("layer-norm", LAYER_NORMALIZATION, MAIN, FLOATS, 0, tpf_cpu_layer_norm),
	K("tpf-rms-norm", TPF_RMS_NORM, MAIN, FLOATS, 0, tpf_cpu_tpf_rms_norm),
	K("allreduce-rms-norm.post", TPF_ALLREDUCE_RMS_NORM, POST_REDUCE, FLOATS, 0,
	  tpf_cpu_allreduce_rms_norm_post),
	K("allreduce-rms-norm-quant.post", TPF_ALLREDUCE_RMS_NORM_QUANT, POST_REDUCE, FLOATS, 0,
	  tpf_cpu_allreduce_rms_norm_quant_post),
	K("sharded-rms-norm.sumsq", TPF_SHARDED_RMS_NORM, SUMSQ, FLOATS, 0, tpf_cpu_sharded_sumsq),
	K("sharded-rms-norm.normalize", TPF_SHARDED_RMS_NORM, NORMALIZE, FLOATS, 0,
	  tpf_cpu_sharded_normalize),
	K("sigmoid-gate-add", TPF_SIGMOID_GATE_ADD, MAIN, FLOATS, 0, tpf_cpu_sigmoid_gate_add),
	K("copy", RESHAPE, MAIN, ANY, 0, tpf_cpu_copy),
	K("copy", IDENTITY, MAIN, ANY, 0, tpf_cpu_copy),
	K("copy", SQUEEZE, MAIN, ANY, 0, tpf_cpu_copy),
	K("copy", UNSQUEEZE, MAIN, ANY, 0, tpf_cpu_copy),
	K("copy", FLATTEN, MAIN, ANY, 0, tpf_cpu_copy),
	K("transpose", TRANSPOSE, MAIN, ANY, 0, tpf_cpu_transpose),
	K("slice", SLICE, MAIN, ANY, 0, tpf_cpu_slice),
	K("split", SPLIT, MAIN, ANY, 0, tpf_cpu_split),
	K("concat", CONCAT, MAIN, ANY, 0, tpf_cpu_concat),
	K("gather", GATHER, MAIN, ANY, 0, tpf_cpu_gather),
	K("gather-elements", GATHER_ELEMENTS, MAIN, ANY, 0, tpf_cpu_gather_elements),
	K("scatter-elements", SCATTER_ELEMENTS, MAIN, ANY, 0, tpf_cpu_scatter_elements),
	K("expand", EXPAND, MAIN, ANY, 0, tpf_cpu_expand),
	K("shape", SHAPE, MAIN, ANY, 0, tpf_cpu_shape),
	K("constant-of-shape", CONSTANT_OF_SHAPE, MAIN, ANY, 0, tpf_cpu_constant_of_shape),
	K("range", RANGE, MAIN, NUM, 0, tpf_cpu_range),
	K("gather-nd", GATHER_ND, MAIN, ANY, 0, tpf_cpu_gather_nd),
	K("scatter-nd", SCATTER_ND, MAIN, ANY, 0, tpf_cpu_scatter_nd),
	K("one-hot", ONE_HOT, MAIN, ANY, -1, tpf_cpu_one_hot),
	K("tile", TILE, MAIN, ANY, 0, tpf_cpu_tile),
	K("trilu", TRILU, MAIN, ANY, 0, tpf_cpu_trilu),
	K("cumsum", CUMSUM, MAIN, NUM, 0, tpf_cpu_cumsum),
	K("size", SIZE, MAIN, ANY, 0, tpf_cpu_size),
	K("quantize-linear", QUANTIZE_LINEAR, MAIN, FLOATS, 0, tpf_cpu_quantize_linear),
	K("dequantize-linear", DEQUANTIZE_LINEAR, MAIN, ANY, 0, tpf_cpu_dequantize_linear),
	K("fp4-dynamic-quantize", TRT_FP4_DYNAMIC_QUANTIZE, MAIN, FLOATS, 0,
	  tpf_cpu_fp4_dynamic_quantize),
	K("gather-reorder", MS_ALLGATHER, GATHER_REORDER, ANY, 0, tpf_cpu_gather_reorder),
	K("pack", TPF_PACK, MAIN, ANY, -1, tpf_cpu_pack),
	K("unpack", TPF_UNPACK, MAIN, ANY, 0, tpf_cpu_unpack),
	K("attention", ATTENTION, MAIN, FLOATS, 0, tpf_cpu_attention),
};

#define N_CPU (sizeof(cpu_kernels) / sizeof(cpu_kernels[0]))

#ifdef TPF_HAVE_CUDA
const struct tpf_kernel *tpf_cuda_kernel_table(size_t *count);
#endif

static const struct tpf_kernel *table_at(size_t i, size_t *total)
{
	size_t n_cuda = 0;
	const struct tpf_kernel *cuda = NULL;
#ifdef TPF_HAVE_CUDA
	cuda = tpf_cuda_kernel_table(&n_cuda);
#endif
	*total = N_CPU + n_cuda;
	if (i < N_CPU)
		return &cpu_kernels[i];
	if (i < N_CPU + n_cuda)
		return &cuda[i - N_CPU];
	return NULL;
}

const struct tpf_kernel *tpf_kernel_find(enum tpf_backend b, enum tpf_op op,
					 enum tpf_kernel_phase phase, enum tpf_dtype key)
{
	size_t total = N_CPU;
	for (size_t i = 0; i < total; i++) {
		const struct tpf_kernel *k = table_at(i, &total);
		if (k && k->backend == b && k->op == op && k->phase == phase &&
		    (k->dtypes == 0 || ((unsigned)key < 64 && (k->dtypes >> key) & 1)))
			return k;
	}
	return NULL;
}

const struct tpf_kernel *tpf_kernel_find_any(enum tpf_backend b, enum tpf_op op,
					     enum tpf_kernel_phase phase)
{
	size_t total = N_CPU;
	for (size_t i = 0; i < total; i++) {
		const struct tpf_kernel *k = table_at(i, &total);
		if (k && k->backend == b && k->op == op && k->phase == phase)
			return k;
	}
	return NULL;
}

const struct tpf_kernel *const *tpf_kernel_list(size_t *count)
{
	static const struct tpf_kernel *list[N_CPU + 1];
	/* CPU rows only: CUDA rows are listed by tpf_kernel_find */
	for (size_t i = 0; i < N_CPU; i++)
		list[i] = &cpu_kernels[i];
	*count = N_CPU;
	return list;
}
