/* SPDX-License-Identifier: MIT */
/*
 * Normalizations over the last axes: LayerNormalization, RMSNormalization
 * (opset 23), SimplifiedLayerNormalization (ONNX and com.microsoft
 * domains, from onnxruntime) and com.microsoft.SkipSimplifiedLayerNormalization.
 * The statistics outputs have X's shape with the normalized axes set to 1,
 * in the stash type.
 */
#include "op-def.h"

#include <inttypes.h>

enum { T = 1, V, U };

#define FLOAT_TYPE(nm) {nm, DT_FLOATS, "a float type"}

/* X's shape with the dims from `axis` on set to 1 (normalization statistics). */
static void reduced_from(const struct tpf_op_type *x, int64_t ax, struct tpf_op_type *out)
{
	int i;

	op_type_shape_of(out, x);
	for (i = (int)ax; i < x->rank; i++)
		out->dims[i] = dim_of(1);
}

static void stats_outputs(struct tpf_shape_call *c, size_t first, size_t last, int have_axis,
			  int64_t ax)
{
	int64_t stash = TPF_DTYPE_FLOAT;
	size_t j;

	op_attr_int(c, "stash_type", &stash);
	for (j = first; j < last && j < c->n_out; j++) {
		struct tpf_op_type *s = &c->out[j];

		if (op_valid_dtype(stash)) {
			s->dtype = (enum tpf_dtype)stash;
			s->dtype_why = "attribute 'stash_type'";
		}
		if (have_axis)
			reduced_from(op_in(c, 0), ax, s);
	}
}

/* RMSNormalization, SimplifiedLayerNormalization: Y has the scale's dtype
 * (V) and X's shape; a Y declared with X's dtype is accepted too (tools
 * that follow X). */
static void rms_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *scale = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t ax;
	int r = op_attr_axis(c, "axis", x->rank, &ax);

	if (y) {
		op_type_shape_of(y, x);
		if (!scale->dtype)
			y->dtype = x->dtype;
		y->alt_dtype = x->dtype;
	}
	if (r >= 0)
		stats_outputs(c, 1, 2, r > 0, ax);
}

#define NORM_ATTRS                                                                                 \
	(const struct op_attr[])                                                                   \
	{                                                                                          \
		ATTR_INT("axis", -1), ATTR_FLOAT("epsilon", 1e-5f),                                \
		    {.name = "stash_type", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE,     \
		     .i = TPF_DTYPE_FLOAT},                                                        \
		    {0},                                                                           \
	}

const struct tpf_op_def tpf_op_def_RMS_NORMALIZATION = {
	.info = {"", "RMSNormalization", 2, 2, 1, 1},
	.since = 23,
	.inputs = {{"X", T}, {"scale", V}},
	.outputs = {{"Y", V}},
	.types = {[T] = FLOAT_TYPE("T"), [V] = FLOAT_TYPE("V")},
	.attrs = NORM_ATTRS,
	.shape = rms_shape,
	.shard = SHARD(NORM, 1),
};

/* onnxruntime's SimplifiedLayerNormalization, registered in both domains. */
#define SIMPLIFIED_NORM(id, domain)                                                                \
	const struct tpf_op_def tpf_op_def_##id = {                                                \
		.info = {domain, "SimplifiedLayerNormalization", 2, 2, 1, 2},                      \
		.since = 1,                                                                        \
		.inputs = {{"X", T}, {"scale", V}},                                                \
		.outputs = {{"Y", V}, {"inv_std_var", U}},                                         \
		.types = {[T] = FLOAT_TYPE("T"), [V] = FLOAT_TYPE("V"),                            \
			  [U] = {"U", DT(FLOAT) | DT(DOUBLE), "float or double"}},                \
		.attrs = NORM_ATTRS,                                                               \
		.shape = rms_shape,                                                                \
		.shard = SHARD(NORM, 1),                                                           \
	}

SIMPLIFIED_NORM(SIMPLIFIED_LAYER_NORMALIZATION, "");
SIMPLIFIED_NORM(MS_SIMPLIFIED_LAYER_NORMALIZATION, TPF_MS_DOMAIN);

static void layer_norm_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t ax;
	int r = op_attr_axis(c, "axis", x->rank, &ax);

	if (y)
		op_type_shape_of(y, x);
	if (r >= 0)
		stats_outputs(c, 1, 3, r > 0, ax);
}

const struct tpf_op_def tpf_op_def_LAYER_NORMALIZATION = {
	.info = {"", "LayerNormalization", 2, 3, 1, 3},
	.since = 17,
	.inputs = {{"X", T}, {"Scale", T}, {"B", T}},
	.outputs = {{"Y", T}, {"Mean", U}, {"InvStdDev", U}},
	.types = {[T] = FLOAT_TYPE("T"), [U] = {"U", DT(FLOAT) | DT(BFLOAT16), "float or bfloat16"}},
	.attrs = NORM_ATTRS,
	.shape = layer_norm_shape,
	.shard = SHARD(NORM, 1),
};

/* input + skip (+ bias) normalized; the sum is output 3.  skip and bias
 * each broadcast to the input (checked apart: an unknown skip must not
 * hide a bias that cannot). */
static void skip_norm_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type sum;
	static const size_t with_skip[2] = {0, 1}, with_bias[2] = {0, 3};
	size_t j;

	tpf_op_type_unknown(&sum);
	if (op_in_present(c, 3) && op_broadcast(c, with_bias, 2, &sum))
		return;
	if (op_broadcast(c, with_skip, 2, &sum))
		return;
	for (j = 0; j < c->n_out; j++) {
		struct tpf_op_type *t = &c->out[j];

		op_type_shape_of(t, x);
		if ((j == 1 || j == 2) && x->rank > 0)
			t->dims[x->rank - 1] = dim_of(1);
	}
}

const struct tpf_op_def tpf_op_def_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION = {
	.info = {TPF_MS_DOMAIN, "SkipSimplifiedLayerNormalization", 3, 4, 1, 4},
	.since = 1,
	.inputs = {{"input", T}, {"skip", T}, {"gamma", T}, {"bias", T}},
	.outputs = {{"output", T}, {"mean", U}, {"inv_std_var", U}, {"input_skip_bias_sum", T}},
	.types = {[T] = FLOAT_TYPE("T"), [U] = {"U", DT(FLOAT), "float"}},
	.attrs = (const struct op_attr[]){ATTR_FLOAT("epsilon", 1e-12f), {0}},
	.shape = skip_norm_shape,
	.shard = SHARD(NORM, 2),
};
