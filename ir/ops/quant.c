/* SPDX-License-Identifier: MIT */
/*
 * Quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis
 * and blocked; FP8 and FP4 codes) and TensorRT's NVFP4
 * trt::TRT_FP4DynamicQuantize (16-element blocks with FP8 block scales).
 */
#include "op-def.h"

#include <inttypes.h>

enum { T1 = 1, T2, T3 };

#define CODES                                                                                      \
	(DT(INT8) | DT(UINT8) | DT(INT16) | DT(UINT16) | DT_FLOAT8 | DT(INT4) | DT(UINT4) |        \
	 DT(FLOAT4E2M1) | DT(INT2) | DT(UINT2))

static void quantize_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *zp = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t od = 0;
	int has_od = op_attr_int(c, "output_dtype", &od) && od != 0;

	if (has_od && zp->present && zp->dtype && op_valid_dtype(od) &&
	    (enum tpf_dtype)od != zp->dtype)
		op_error(c,
			 "attribute 'output_dtype' is %s but zero point '%s' is %s; they must agree",
			 tpf_dtype_name((enum tpf_dtype)od), op_in_name(c, 2), tpf_dtype_name(zp->dtype));
	if (!y)
		return;
	op_type_shape_of(y, x);
	if (zp->present) {
		y->dtype = zp->dtype;
		y->dtype_why = "the zero point's dtype";
	} else if (has_od) {
		y->dtype = op_valid_dtype(od) ? (enum tpf_dtype)od : TPF_DTYPE_UNDEFINED;
		y->dtype_why = "attribute 'output_dtype'";
	} else {
		y->dtype = TPF_DTYPE_UINT8;
		y->dtype_why = "the default uint8";
	}
}

const struct tpf_op_def tpf_op_def_QUANTIZE_LINEAR = {
	.info = {"", "QuantizeLinear", 2, 3, 1, 1},
	.since = 10,
	.inputs = {{"x", T1}, {"y_scale", T2}, {"y_zero_point", T3}},
	.outputs = {{"y", T3}},
	.types = {[T1] = {"T1", DT_FLOATS | DT(INT32), "a float type or int32"},
		  [T2] = {"T2", DT_FLOATS | DT(INT32) | DT(FLOAT8E8M0), "a float type or int32"},
		  [T3] = {"T3", CODES, "an integer, FLOAT8 or FLOAT4 type"}},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", 1),
		ATTR_INT("block_size", 0),
		{.name = "output_dtype", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE | ATTR_DTYPE_ZERO},
		ATTR_INT("saturate", 1),
		ATTR_INT("precision", 0),
		{0},
	},
	.shape = quantize_shape,
	.shard = SHARD(QUANT, 0),
};

static void dequantize_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t od = 0;

	if (!y)
		return;
	op_type_shape_of(y, x);
	if (op_attr_int(c, "output_dtype", &od) && od != 0) {
		y->dtype = op_valid_dtype(od) ? (enum tpf_dtype)od : TPF_DTYPE_UNDEFINED;
		y->dtype_why = "attribute 'output_dtype'";
	} else if (c->opset > 0 && c->opset < 19) {
		y->dtype = TPF_DTYPE_FLOAT;
		y->dtype_why = "float before opset 19";
	} else {
		y->dtype = op_in(c, 1)->dtype;
		y->dtype_why = "the scale's dtype";
	}
}

const struct tpf_op_def tpf_op_def_DEQUANTIZE_LINEAR = {
	.info = {"", "DequantizeLinear", 2, 3, 1, 1},
	.since = 10,
	.inputs = {{"x", T1}, {"x_scale", T2}, {"x_zero_point", T1}},
	.outputs = {{"y", T3}},
	.types = {[T1] = {"T1", CODES | DT(INT32), "an integer, FLOAT8 or FLOAT4 type"},
		  [T2] = {"T2", DT_FLOATS | DT(FLOAT8E8M0), "a float type"},
		  [T3] = {"T3", DT_FLOATS, "a float type"}},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", 1),
		ATTR_INT("block_size", 0),
		{.name = "output_dtype", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE | ATTR_DTYPE_ZERO},
		{0},
	},
	.shape = dequantize_shape,
	.shard = SHARD(QUANT, 0),
};

static void fp4_quantize_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0), *sc = op_out(c, 1);
	int64_t bs = 16, st = TPF_DTYPE_FLOAT8E4M3FN, ax;
	int r;

	if (op_attr_int(c, "block_size", &bs) && bs <= 0)
		op_error(c, "attribute 'block_size' = %" PRId64 "; expected > 0", bs);
	if (y) {
		op_type_shape_of(y, x);
		y->dtype = TPF_DTYPE_FLOAT4E2M1;
		y->dtype_why = "NVFP4 data is float4e2m1";
	}
	if (!sc)
		return;
	if (op_attr_int(c, "scale_type", &st) && op_valid_dtype(st)) {
		sc->dtype = (enum tpf_dtype)st;
		sc->dtype_why = "attribute 'scale_type'";
	}
	r = op_attr_axis(c, "axis", x->rank, &ax);
	if (r <= 0)
		return;
	op_type_shape_of(sc, x);
	/* one scale a block; a partial last block has one too */
	if (bs > 0 && dim_is_static(&x->dims[ax])) {
		int64_t v = x->dims[ax].value; /* ceil(v / bs) without overflowing near INT64_MAX */
		sc->dims[ax] = dim_of(v / bs + (v % bs != 0));
	} else {
		sc->dims[ax] = dim_unknown();
	}
}

const struct tpf_op_def tpf_op_def_TRT_FP4_DYNAMIC_QUANTIZE = {
	.info = {"trt", "TRT_FP4DynamicQuantize", 2, 2, 2, 2},
	.since = 1,
	.inputs = {{"X", T1}, {"global_scale", T2}},
	.outputs = {{"Y", T3}, {"block_scale", 0}},
	.types = {[T1] = {"T1", DT_FLOATS, "a float type"},
		  [T2] = {"T2", DT_FLOATS, "a float type"},
		  [T3] = {"T3", DT(FLOAT4E2M1), "float4e2m1"}},
	.attrs = (const struct op_attr[]){
		ATTR_INT("axis", -1),
		ATTR_INT("block_size", 16),
		{.name = "scale_type", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE,
		 .i = TPF_DTYPE_FLOAT8E4M3FN},
		{0},
	},
	.shape = fp4_quantize_shape,
};
