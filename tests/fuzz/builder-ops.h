/* SPDX-License-Identifier: MIT */
/*
 * The ops a node instruction of fuzz-builder builds, by index.  Saved
 * inputs (corpus/builder/, regressions/builder/) pick an op by its index
 * here, so this table is append-only: an entry never moves, changes or
 * goes, and a new op is added at the end (with its line in
 * builder-ops.txt, which the test fuzz-builder-ops compares this table
 * with).  It is deliberately not generated from ir/ops.def, whose order
 * changes when an op is added.
 *
 * Entries 0 and 97 are an op no domain defines (custom.domain Mystery,
 * kept as TPF_OP_UNKNOWN); 78 to 80, once If, Loop and Scan, build
 * Identity (a control-flow op needs subgraphs the builder does not make).
 */
#ifndef TPF_FUZZ_BUILDER_OPS_H
#define TPF_FUZZ_BUILDER_OPS_H

struct builder_op {
	const char *domain, *type;
};

static const struct builder_op builder_ops[] = {
	/*  0 */ {"custom.domain", "Mystery"},
	/*  1 */ {"", "Abs"},
	/*  2 */ {"", "Add"},
	/*  3 */ {"", "ArgMax"},
	/*  4 */ {"", "Attention"},
	/*  5 */ {"", "Cast"},
	/*  6 */ {"", "Concat"},
	/*  7 */ {"", "Constant"},
	/*  8 */ {"", "ConstantOfShape"},
	/*  9 */ {"", "Cos"},
	/* 10 */ {"", "DequantizeLinear"},
	/* 11 */ {"", "Div"},
	/* 12 */ {"", "Equal"},
	/* 13 */ {"", "Erf"},
	/* 14 */ {"", "Exp"},
	/* 15 */ {"", "Expand"},
	/* 16 */ {"", "Gather"},
	/* 17 */ {"", "GatherElements"},
	/* 18 */ {"", "Gemm"},
	/* 19 */ {"", "Greater"},
	/* 20 */ {"", "Identity"},
	/* 21 */ {"", "LayerNormalization"},
	/* 22 */ {"", "Less"},
	/* 23 */ {"", "MatMul"},
	/* 24 */ {"", "Max"},
	/* 25 */ {"", "Min"},
	/* 26 */ {"", "Mul"},
	/* 27 */ {"", "Neg"},
	/* 28 */ {"", "Not"},
	/* 29 */ {"", "Pow"},
	/* 30 */ {"", "QuantizeLinear"},
	/* 31 */ {"", "Reciprocal"},
	/* 32 */ {"", "ReduceMax"},
	/* 33 */ {"", "ReduceMean"},
	/* 34 */ {"", "ReduceSum"},
	/* 35 */ {"", "Relu"},
	/* 36 */ {"", "Reshape"},
	/* 37 */ {"", "RMSNormalization"},
	/* 38 */ {"", "ScatterElements"},
	/* 39 */ {"", "Shape"},
	/* 40 */ {"", "Sigmoid"},
	/* 41 */ {"", "SimplifiedLayerNormalization"},
	/* 42 */ {"", "Sin"},
	/* 43 */ {"", "Slice"},
	/* 44 */ {"", "Softmax"},
	/* 45 */ {"", "Split"},
	/* 46 */ {"", "Sqrt"},
	/* 47 */ {"", "Squeeze"},
	/* 48 */ {"", "Sub"},
	/* 49 */ {"", "Tanh"},
	/* 50 */ {"", "TopK"},
	/* 51 */ {"", "Transpose"},
	/* 52 */ {"", "Unsqueeze"},
	/* 53 */ {"", "Where"},
	/* 54 */ {"", "And"},
	/* 55 */ {"", "Ceil"},
	/* 56 */ {"", "Clip"},
	/* 57 */ {"", "Floor"},
	/* 58 */ {"", "GreaterOrEqual"},
	/* 59 */ {"", "IsInf"},
	/* 60 */ {"", "IsNaN"},
	/* 61 */ {"", "LessOrEqual"},
	/* 62 */ {"", "Log"},
	/* 63 */ {"", "Mod"},
	/* 64 */ {"", "Or"},
	/* 65 */ {"", "Softplus"},
	/* 66 */ {"", "Xor"},
	/* 67 */ {"", "CumSum"},
	/* 68 */ {"", "Flatten"},
	/* 69 */ {"", "GatherND"},
	/* 70 */ {"", "OneHot"},
	/* 71 */ {"", "Range"},
	/* 72 */ {"", "ScatterND"},
	/* 73 */ {"", "Size"},
	/* 74 */ {"", "Tile"},
	/* 75 */ {"", "Trilu"},
	/* 76 */ {"", "Conv"},
	/* 77 */ {"", "Pad"},
	/* 78 */ {"", "Identity"},
	/* 79 */ {"", "Identity"},
	/* 80 */ {"", "Identity"},
	/* 81 */ {"com.microsoft", "AllReduce"},
	/* 82 */ {"com.microsoft", "AllGather"},
	/* 83 */ {"com.microsoft", "AllToAll"},
	/* 84 */ {"com.microsoft", "ReduceScatter"},
	/* 85 */ {"com.microsoft", "SkipSimplifiedLayerNormalization"},
	/* 86 */ {"com.microsoft", "SimplifiedLayerNormalization"},
	/* 87 */ {"trt", "TRT_FP4DynamicQuantize"},
	/* 88 */ {"ai.tpfuse", "RMSNorm"},
	/* 89 */ {"ai.tpfuse", "AllReduceRMSNorm"},
	/* 90 */ {"ai.tpfuse", "AllReduceRMSNormQuant"},
	/* 91 */ {"ai.tpfuse", "ShardedRMSNorm"},
	/* 92 */ {"ai.tpfuse", "SigmoidGateAdd"},
	/* 93 */ {"ai.tpfuse", "Pack"},
	/* 94 */ {"ai.tpfuse", "Unpack"},
	/* 95 */ {"ai.tpfuse", "GatedActivation"},
	/* 96 */ {"", "RotaryEmbedding"},
	/* 97 */ {"custom.domain", "Mystery"},
	/* 98 */ {"ai.tpfuse", "MatMulTransB"},
	/* 99 */ {"ai.tpfuse", "MatMulFp8"},
	/* 100 */ {"ai.tpfuse", "GatedMatMul"},
	/* 101 */ {"ai.tpfuse", "AllReduceLayerNorm"},
};
#define N_BUILDER_OPS (sizeof(builder_ops) / sizeof(builder_ops[0]))

#endif
