/* SPDX-License-Identifier: MIT */
/*
 * tpfuse's own operators (domain ai.tpfuse, docs/ops.md): the canonical
 * RMSNorm and the fused ops the passes create.  Their shape functions
 * check everything the fused kernels rely on, so the verifier rejects a
 * fused node with a wrong dtype or shape (a mixed-dtype match that
 * miscompiled is the bug peers hit).
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

enum { T = 1, V, S, Q, G };

#define FLOAT_TYPE(nm) {nm, DT_FLOATS, "a float type (float16, bfloat16, float, double)"}
#define ANY_TYPE(nm) {nm, DT_ALL, "a tensor type"}
/* A string attribute with a default and the list of the values it may take. */
#define ATTR_CHOICE(nm, dflt, list) \
	{.name = (nm), .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = (dflt), .allowed = (list)}

/* The attributes the fused RMSNorms share: norm_attrs below and
 * AllReduceRMSNormQuant's. */
#define NORM_ATTRS \
	ATTR_FLOAT("epsilon", 1e-5f), \
	ATTR_INT("axis", -1), \
	{.name = "stash_type", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE, \
	 .i = TPF_DTYPE_FLOAT}, \
	ATTR_FLOAT("weight_offset", 0.0f), \
	ATTR_OF("group_size", TPF_ATTR_INT)

static const struct op_attr norm_attrs[] = {
	NORM_ATTRS,
	{.name = "output_type", .kind = TPF_ATTR_INT, .flags = ATTR_DTYPE},
	{0},
};

/* ------------------------------------------------------------------ checks */

/* The norm output's dtype when the attribute output_type names it (the
 * canonical norm of a float16 model computed in float32 records it, so
 * that the choice between X's type and gamma's never rests on a declared
 * type): 1 and *dt set, 0 when absent, -1 reported. */
static int norm_output_type(struct tpf_shape_call *c, enum tpf_dtype *dt)
{
	int64_t v;

	if (!op_attr_given(c, "output_type") || !op_attr_int(c, "output_type", &v))
		return 0;
	if (!op_valid_dtype(v) || !tpf_dtype_is_float((enum tpf_dtype)v)) {
		op_error(c, "attribute 'output_type' = %" PRId64 " is not a float type", v);
		return -1;
	}
	*dt = (enum tpf_dtype)v;
	return 1;
}

/* Input gi (a norm weight) broadcasts to the normalized dims of input xi,
 * x.shape[ax:]. */
static int check_gamma(struct tpf_shape_call *c, size_t xi, size_t gi, int64_t ax)
{
	const struct tpf_op_type *x = op_in(c, xi), *g = op_in(c, gi);
	int n = x->rank - (int)ax, i;
	char a[256], b[256];

	if (x->rank < 0 || g->rank < 0)
		return 0;
	for (i = 1; i <= g->rank; i++) {
		const struct tpf_dim *gd = &g->dims[g->rank - i];
		const struct tpf_dim *xd = i <= n ? &x->dims[x->rank - i] : NULL;

		if (dim_is_static(gd) && gd->value == 1)
			continue;
		if (!xd || op_dims_equal(c, gd, xd) == TPF_ANSWER_NO) {
			op_error(c,
				 "weight %zu '%s' %s does not broadcast to the normalized dims of input "
				 "%zu '%s' %s",
				 gi, op_in_name(c, gi), op_type_str(g, a, sizeof(a)), xi,
				 op_in_name(c, xi), op_type_str(x, b, sizeof(b)));
			return -1;
		}
		op_dims_unify(c, gd, xd);
	}
	return 0;
}

/* Input ri has exactly input xi's shape (no broadcast). */
static int check_same_shape(struct tpf_shape_call *c, size_t ri, size_t xi, const char *what)
{
	const struct tpf_op_type *x = op_in(c, xi), *r = op_in(c, ri);
	char a[256], b[256];
	int i, bad;

	if (!r->present || x->rank < 0 || r->rank < 0)
		return 0;
	bad = r->rank != x->rank;
	for (i = 0; !bad && i < x->rank; i++)
		bad = op_dims_equal(c, &r->dims[i], &x->dims[i]) == TPF_ANSWER_NO;
	if (bad) {
		op_error(c, "%s %zu '%s' is %s but input %zu '%s' is %s; expected the same shape", what,
			 ri, op_in_name(c, ri), op_type_str(r, a, sizeof(a)), xi, op_in_name(c, xi),
			 op_type_str(x, b, sizeof(b)));
		return -1;
	}
	for (i = 0; i < x->rank; i++)
		op_dims_unify(c, &r->dims[i], &x->dims[i]);
	return 0;
}

/* The norm axis: 1 and *ax when known, 0 unknown, -1 reported.  Fused norms
 * run over the last axis only. */
static int last_axis(struct tpf_shape_call *c, int rank, int64_t *ax)
{
	int r = op_attr_axis(c, "axis", rank, ax);

	if (r > 0 && *ax != rank - 1 && c->node->op != TPF_OP_TPF_RMS_NORM) {
		op_error(c, "attribute 'axis' = %" PRId64 "; the fused norm runs over the last axis "
			 "(%d)", *ax, rank - 1);
		return -1;
	}
	return r;
}

static int check_group_size(struct tpf_shape_call *c)
{
	int64_t gs;

	if (!op_attr_given(c, "group_size") || !op_attr_int(c, "group_size", &gs))
		return 0;
	if (gs <= 0) {
		op_error(c, "attribute 'group_size' = %" PRId64 "; expected > 0", gs);
		return -1;
	}
	if (c->mode != TPF_SHAPE_CONCRETE && c->world > 0 && gs != c->world) {
		op_error(c, "attribute 'group_size' = %" PRId64 " differs from the model's tp_world_size %" PRId64,
			 gs, c->world);
		return -1;
	}
	return 0;
}

/* ------------------------------------------------------------------ RMSNorm */

static void rms_norm_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t ax;
	int r = last_axis(c, x->rank, &ax);

	if (r < 0 || (r > 0 && check_gamma(c, 0, 1, ax)) || check_same_shape(c, 2, 0, "residual") || !y)
		return;
	op_type_shape_of(y, x);
	/* residual_out: the sum X + residual, X's shape and type */
	if (c->n_out > 1 && op_out(c, 1))
		op_type_shape_of(op_out(c, 1), x);
	/* Y is gamma's type (V), as in RMSNormalization, which it stands for
	 * one to one: a Y declared with X's type is accepted there, so here;
	 * output_type, when given, decides */
	enum tpf_dtype ot;
	int r2 = norm_output_type(c, &ot);
	if (r2 < 0)
		return;
	if (r2 > 0) {
		if (ot != x->dtype && ot != op_in(c, 1)->dtype && x->dtype && op_in(c, 1)->dtype) {
			op_error(c, "attribute 'output_type' names %s; expected X's type %s or gamma's %s",
				 tpf_dtype_name(ot), tpf_dtype_name(x->dtype),
				 tpf_dtype_name(op_in(c, 1)->dtype));
			return;
		}
		y->dtype = ot;
		y->dtype_why = "attribute 'output_type'";
		return;
	}
	if (!op_in(c, 1)->dtype)
		y->dtype = x->dtype;
	y->alt_dtype = x->dtype;
}

const struct tpf_op_def tpf_op_def_TPF_RMS_NORM = {
	.info = {TPF_DOMAIN, "RMSNorm", 2, 3, 1, 2},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"X", T}, {"gamma", V}, {"residual", T}},
	.outputs = {{"Y", V}, {"residual_out", T}},
	.types = {[T] = FLOAT_TYPE("T"), [V] = FLOAT_TYPE("V")},
	.attrs = norm_attrs,
	.shape = rms_norm_shape,
	.shard = SHARD(NORM, 1),
};

/* ------------------------------------------------------------------ AllReduceRMSNorm */

/* input, gamma, and the residual (input `ri`, may be absent): the checks
 * AllReduceRMSNorm and its quantizing form share.  Returns the norm axis
 * state as last_axis does. */
static int allreduce_norm_checks(struct tpf_shape_call *c, size_t ri, int64_t *ax)
{
	const struct tpf_op_type *x = op_in(c, 0);
	int r;

	if (check_group_size(c))
		return -1;
	r = last_axis(c, x->rank, ax);
	if (r < 0 || (r > 0 && check_gamma(c, 0, 1, *ax)) ||
	    check_same_shape(c, ri, 0, "residual"))
		return -1;
	return r;
}

/* The optional norm weights after the residual of AllReduceRMSNorm and
 * AllReduceLayerNorm, each over the normalized (last) dim: input 3, the
 * bias added once to the reduced value, and AllReduceLayerNorm's beta. */
static int allreduce_norm_weights(struct tpf_shape_call *c, int r, int64_t ax)
{
	for (size_t i = 3; r > 0 && i < c->n_in; i++)
		if (check_gamma(c, 0, i, ax))
			return -1;
	return 0;
}

static void allreduce_rms_norm_shape(struct tpf_shape_call *c)
{
	int64_t ax;
	size_t j;

	int r = allreduce_norm_checks(c, 2, &ax);
	if (r < 0 || allreduce_norm_weights(c, r, ax))
		return;
	for (j = 0; j < c->n_out; j++)
		op_type_shape_of(&c->out[j], op_in(c, 0));
	/* the sum has the residual's type R (the reduced value widened to it,
	 * a float32 residual stream of a float16 model), else the input's;
	 * norm_out has the sum's type, or gamma's, as RMSNorm allows */
	enum tpf_dtype sum_t = op_in(c, 2)->present && op_in(c, 2)->dtype ? op_in(c, 2)->dtype
									  : op_in(c, 0)->dtype;
	enum tpf_dtype ot;
	int r2 = norm_output_type(c, &ot);
	if (r2 < 0)
		return;
	if (r2 > 0 && ot != sum_t && ot != op_in(c, 1)->dtype && sum_t && op_in(c, 1)->dtype) {
		op_error(c, "attribute 'output_type' names %s; expected the sum's type %s or gamma's %s",
			 tpf_dtype_name(ot), tpf_dtype_name(sum_t), tpf_dtype_name(op_in(c, 1)->dtype));
		return;
	}
	if (c->n_out > 0 && op_out(c, 0)) {
		op_out(c, 0)->dtype = r2 > 0 ? ot : sum_t;
		op_out(c, 0)->alt_dtype = r2 > 0 ? ot : op_in(c, 1)->dtype;
	}
	if (c->n_out > 1 && op_out(c, 1))
		op_out(c, 1)->dtype = sum_t;
}

const struct tpf_op_def tpf_op_def_TPF_ALLREDUCE_RMS_NORM = {
	.info = {TPF_DOMAIN, "AllReduceRMSNorm", 2, 4, 1, 2},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED | TPF_OP_TRAIT_COLLECTIVE,
	.inputs = {{"input", T}, {"gamma", G}, {"residual", S}, {"bias", S}},
	.outputs = {{"norm_out", V}, {"residual_out", S}},
	.types = {[T] = FLOAT_TYPE("T"), [V] = FLOAT_TYPE("V"), [S] = FLOAT_TYPE("R"),
		  [G] = FLOAT_TYPE("G")},
	.attrs = norm_attrs,
	.shape = allreduce_rms_norm_shape,
};

/* ------------------------------------------------------------------ AllReduceLayerNorm */

/* AllReduceRMSNorm's operands and shapes, and beta (input 4, gamma's type)
 * added after the scale; the mean is subtracted before the variance. */
const struct tpf_op_def tpf_op_def_TPF_ALLREDUCE_LAYER_NORM = {
	.info = {TPF_DOMAIN, "AllReduceLayerNorm", 2, 5, 1, 2},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED | TPF_OP_TRAIT_COLLECTIVE,
	.inputs = {{"input", T}, {"gamma", G}, {"residual", S}, {"bias", S}, {"beta", G}},
	.outputs = {{"norm_out", V}, {"residual_out", S}},
	.types = {[T] = FLOAT_TYPE("T"), [V] = FLOAT_TYPE("V"), [S] = FLOAT_TYPE("R"),
		  [G] = FLOAT_TYPE("G")},
	.attrs = norm_attrs,
	.shape = allreduce_rms_norm_shape,
};

/* ------------------------------------------------------------------ AllReduceRMSNormQuant */

enum { OUT_Y, OUT_RESIDUAL, OUT_Y_SCALE, OUT_NORM };

static const char *const quant_kinds[] = {"fp8", "nvfp4", "nvfp4-block", "fp8-group", NULL};

static int64_t numel_static(const struct tpf_op_type *t)
{
	int64_t n = 1;
	int i;

	if (t->rank < 0)
		return -1;
	for (i = 0; i < t->rank; i++)
		if (!dim_is_static(&t->dims[i]) || __builtin_mul_overflow(n, t->dims[i].value, &n))
			return -1;
	return n;
}

static void allreduce_rms_norm_quant_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *scale = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, OUT_Y), *ys = op_out(c, OUT_Y_SCALE);
	const char *quant = "fp8";
	int64_t ax, bs = 16, n;
	int fp8, blocked, group, r;
	size_t j;
	char a[256];

	op_attr_string(c, "quant", &quant);
	group = strcmp(quant, "fp8-group") == 0;
	fp8 = strcmp(quant, "fp8") == 0 || group;
	blocked = strcmp(quant, "nvfp4-block") == 0;
	if (group) {
		/* the group size: block_size when given, else 128 */
		const struct tpf_attr *ba = tpf_node_attr(c->node, "block_size");

		bs = ba && ba->kind == TPF_ATTR_INT ? ba->i : 128;
		if (bs <= 0) {
			op_error(c, "attribute 'block_size' = %" PRId64 "; fp8-group needs a positive group size",
				 bs);
			return;
		}
	} else if (!fp8) {
		op_attr_int(c, "block_size", &bs);
	}
	if (!fp8 && bs != 16) {
		op_error(c, "attribute 'block_size' = %" PRId64 "; NVFP4 blocks hold 16 values", bs);
		return;
	}
	r = allreduce_norm_checks(c, 3, &ax);
	if (r < 0)
		return;
	if (ys && ys->present && strcmp(quant, "nvfp4") != 0 && !group) {
		op_error(c, "output %d '%s' (block scales) is produced only with quant \"nvfp4\" or \"fp8-group\"",
			 OUT_Y_SCALE, c->node->outputs[OUT_Y_SCALE]->name);
		return;
	}
	if (group && !(ys && ys->present)) {
		op_error(c, "quant \"fp8-group\" needs output %d (the group scales)", OUT_Y_SCALE);
		return;
	}
	if (group && r > 0 && x->rank > 0 && dim_is_static(&x->dims[x->rank - 1]) &&
	    x->dims[x->rank - 1].value % bs) {
		op_error(c, "the last dim %" PRId64 " is not a multiple of the group size %" PRId64,
			 x->dims[x->rank - 1].value, bs);
		return;
	}
	/* the scale: one element (fp8's per-tensor scale, nvfp4's global
	 * scale), or the blocked quantizer's scales: norm_out's shape with
	 * the last dim in 16-element blocks */
	n = numel_static(scale);
	if (!blocked && n > 1) {
		op_error(c, "scale '%s' %s has %" PRId64 " elements; quant \"%s\" takes one",
			 op_in_name(c, 2), op_type_str(scale, a, sizeof(a)), n, quant);
		return;
	}
	if (blocked && r > 0 && scale->rank >= 0 && x->rank >= 0) {
		const struct tpf_dim *h = &x->dims[x->rank - 1];
		int bad = scale->rank != x->rank;

		if (!bad && dim_is_static(h) && dim_is_static(&scale->dims[x->rank - 1]))
			bad = scale->dims[x->rank - 1].value != h->value / bs + (h->value % bs != 0);
		if (bad) {
			op_error(c, "block scales '%s' %s: expected the input's shape with the last dim "
				 "in blocks of %" PRId64, op_in_name(c, 2), op_type_str(scale, a, sizeof(a)),
				 bs);
			return;
		}
	}
	for (j = 0; j < c->n_out; j++)
		op_type_shape_of(&c->out[j], x);
	if (y) {
		y->dtype = fp8 ? TPF_DTYPE_FLOAT8E4M3FN : TPF_DTYPE_FLOAT4E2M1;
		y->dtype_why = "attribute 'quant'";
	}
	if (ys && ys->present) {
		ys->dtype = group ? TPF_DTYPE_FLOAT : TPF_DTYPE_FLOAT8E4M3FN;
		ys->dtype_why = group ? "fp8-group scales are float32" : "NVFP4 block scales are float8e4m3fn";
		if (x->rank > 0) {
			/* one scale a block of the last axis (a partial block too) */
			struct tpf_dim *h = &ys->dims[x->rank - 1];

			*h = dim_is_static(h) ? dim_of(h->value / bs + (h->value % bs != 0)) : dim_unknown();
		}
	}
}

const struct tpf_op_def tpf_op_def_TPF_ALLREDUCE_RMS_NORM_QUANT = {
	.info = {TPF_DOMAIN, "AllReduceRMSNormQuant", 3, 4, 1, 4},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED | TPF_OP_TRAIT_COLLECTIVE,
	.inputs = {{"input", T}, {"gamma", G}, {"scale", S}, {"residual", T}},
	.outputs = {{"y", Q}, {"residual_out", T}, {"y_scale", V}, {"norm_out", T}},
	.types = {[T] = FLOAT_TYPE("T"),
		  [V] = {"T2", DT(FLOAT8E4M3FN) | DT(FLOAT), "float8e4m3fn (nvfp4) or float (fp8-group)"},
		  [S] = {"S", DT_FLOATS | DT(FLOAT8E4M3FN), "a float type"},
		  [Q] = {"Q", DT(FLOAT8E4M3FN) | DT(FLOAT4E2M1), "float8e4m3fn or float4e2m1"},
		  [G] = FLOAT_TYPE("G")},
	.attrs = (const struct op_attr[]){
		NORM_ATTRS,
		ATTR_CHOICE("quant", "fp8", quant_kinds),
		ATTR_INT("saturate", 1),
		ATTR_INT("block_size", 16),
		{0},
	},
	.shape = allreduce_rms_norm_quant_shape,
};

/* ------------------------------------------------------------------ ShardedRMSNorm */

static void sharded_rms_norm_shape(struct tpf_shape_call *c)
{
	size_t n = c->n_out, i;
	int64_t world = 0, dims[TPF_MAX_VALUES];
	int n_dims = -1;

	if (c->n_in != 2 * n) {
		op_error(c, "has %zu inputs for %zu outputs; expected n inputs and n weights for n "
			 "outputs", c->n_in, n);
		return;
	}
	if (!op_attr_int(c, "world_size", &world))
		world = 0;
	else if (world <= 0) {
		op_error(c, "attribute 'world_size' = %" PRId64 "; expected > 0", world);
		return;
	}
	if (c->mode != TPF_SHAPE_CONCRETE && c->world > 0 && world > 0 && world != c->world) {
		op_error(c, "attribute 'world_size' = %" PRId64 " differs from the model's tp_world_size %" PRId64,
			 world, c->world);
		return;
	}
	if (op_attr_given(c, "full_dims")) {
		n_dims = op_attr_ints(c, "full_dims", dims, TPF_MAX_VALUES);
		if (n_dims >= 0 && (size_t)n_dims != n) {
			op_error(c, "attribute 'full_dims' has %d entries for %zu tensors", n_dims, n);
			return;
		}
	} else if (op_attr_int(c, "full_dim", &dims[0])) {
		n_dims = (int)(n <= TPF_MAX_VALUES ? n : 0);
		for (i = 1; i < (size_t)n_dims; i++)
			dims[i] = dims[0];
	}
	/* the part form: which part [start, end) of the gathered dim each
	 * output holds; the weights are then the full ones */
	int64_t pstart[TPF_MAX_VALUES], pend[TPF_MAX_VALUES];
	int parts = op_attr_given(c, "part_starts") || op_attr_given(c, "part_ends");
	if (parts) {
		int ns = op_attr_ints(c, "part_starts", pstart, TPF_MAX_VALUES);
		int ne = op_attr_ints(c, "part_ends", pend, TPF_MAX_VALUES);
		if (ns < 0 || ne < 0 || (size_t)ns != n || (size_t)ne != n) {
			op_error(c, "attributes 'part_starts' and 'part_ends' need %zu entries each "
				 "(one per tensor), got %d and %d", n, ns, ne);
			return;
		}
		if (n_dims < 0 || (size_t)n_dims != n) {
			op_error(c, "attributes 'part_starts'/'part_ends' need 'full_dim' or 'full_dims'");
			return;
		}
		for (i = 0; i < n; i++)
			if (pstart[i] < 0 || pend[i] <= pstart[i] || pend[i] > dims[i]) {
				op_error(c, "part %zu is [%" PRId64 ", %" PRId64 "); expected 0 <= start < "
					 "end <= %" PRId64 " (the full dim)", i, pstart[i], pend[i], dims[i]);
				return;
			}
	}
	if (op_attr_given(c, "epsilons")) {
		const struct tpf_attr *e = tpf_node_attr(c->node, "epsilons");

		if (e->kind == TPF_ATTR_FLOATS && !e->ref_attr_name && e->n != n) {
			op_error(c, "attribute 'epsilons' has %zu entries for %zu tensors", e->n, n);
			return;
		}
	}
	for (i = 0; i < n; i++) {
		const struct tpf_op_type *x = op_in(c, i), *x0 = op_in(c, 0);
		const struct tpf_dim *d;
		int k;

		if (x->rank == 0) {
			op_error(c, "input %zu '%s' is a scalar; expected rank >= 1", i, op_in_name(c, i));
			return;
		}
		if (x->rank < 0)
			continue;
		if (parts) {
			/* a full weight: it broadcasts to [D_i] */
			const struct tpf_op_type *g = op_in(c, n + i);
			char a[256];
			for (k = 1; g->rank >= 0 && k <= g->rank; k++) {
				const struct tpf_dim *gd = &g->dims[g->rank - k];
				if (!dim_is_static(gd) || gd->value == 1 || (k == 1 && gd->value == dims[i]))
					continue;
				op_error(c, "weight %zu '%s' %s is not the full weight [%" PRId64 "] of "
					 "the part form", n + i, op_in_name(c, n + i),
					 op_type_str(g, a, sizeof(a)), dims[i]);
				return;
			}
		} else if (check_gamma(c, i, n + i, x->rank - 1))
			return;
		/* the tensors share their leading (token) dims */
		if (i && x0->rank >= 0) {
			if (x0->rank != x->rank) {
				op_error(c, "input %zu '%s' has rank %d but input 0 has rank %d; "
					 "expected the same leading dims", i, op_in_name(c, i), x->rank,
					 x0->rank);
				return;
			}
			for (k = 0; k + 1 < x->rank; k++) {
				if (op_dims_equal(c, &x->dims[k], &x0->dims[k]) == TPF_ANSWER_NO) {
					op_error(c, "input %zu '%s' differs from input 0 in dimension %d; "
						 "expected the same leading dims", i, op_in_name(c, i), k);
					return;
				}
				op_dims_unify(c, &x->dims[k], &x0->dims[k]);
			}
		}
		/* the local last dim is the full dim divided by the world */
		d = &x->dims[x->rank - 1];
		int64_t full;
		if (n_dims > 0 && (size_t)n_dims == n && world > 0 && dim_is_static(d) &&
		    (__builtin_mul_overflow(d->value, world, &full) || full != dims[i])) {
			op_error(c, "input %zu '%s' has last dimension %" PRId64 "; expected %" PRId64
				 " / %" PRId64 " (full dim / world_size)", i, op_in_name(c, i), d->value,
				 dims[i], world);
			return;
		}
		op_type_shape_of(&c->out[i], x);
		if (parts)
			c->out[i].dims[x->rank - 1] = dim_of(pend[i] - pstart[i]);
	}
}

const struct tpf_op_def tpf_op_def_TPF_SHARDED_RMS_NORM = {
	.info = {TPF_DOMAIN, "ShardedRMSNorm", 2, -1, 1, -1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED | TPF_OP_TRAIT_COLLECTIVE,
	.inputs = {{"inputs_and_weights", T}},
	.outputs = {{"outputs", T}},
	.types = {[T] = FLOAT_TYPE("T")},
	.attrs = (const struct op_attr[]){
		{.name = "world_size", .kind = TPF_ATTR_INT, .flags = ATTR_REQUIRED},
		ATTR_OF("full_dim", TPF_ATTR_INT),
		ATTR_OF("full_dims", TPF_ATTR_INTS),
		ATTR_FLOAT("epsilon", 1e-5f),
		ATTR_OF("epsilons", TPF_ATTR_FLOATS),
		{.name = "stash_type", .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT | ATTR_DTYPE,
		 .i = TPF_DTYPE_FLOAT},
		ATTR_FLOAT("weight_offset", 0.0f),
		ATTR_OF("part_starts", TPF_ATTR_INTS),
		ATTR_OF("part_ends", TPF_ATTR_INTS),
		{0},
	},
	.shape = sharded_rms_norm_shape,
};

/* ------------------------------------------------------------------ SigmoidGateAdd */

static void sigmoid_gate_add_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *final = op_in(c, 0), *gate = op_in(c, 1);
	struct tpf_op_type *y = op_out(c, 0);
	char a[256], b[256];
	int i, r = final->rank;

	if (check_same_shape(c, 2, 0, "shared"))
		return;
	if (r >= 0 && gate->rank >= 0) {
		int bad = gate->rank != r;

		for (i = 0; !bad && i + 1 < r; i++)
			bad = op_dims_equal(c, &gate->dims[i], &final->dims[i]) == TPF_ANSWER_NO;
		if (!bad && r > 0) {
			const struct tpf_dim *g = &gate->dims[r - 1];

			bad = !(dim_is_static(g) && g->value == 1) &&
			      op_dims_equal(c, g, &final->dims[r - 1]) == TPF_ANSWER_NO;
		}
		if (bad) {
			op_error(c, "gate '%s' %s: expected the leading dims of final '%s' %s and a last "
				 "dim of 1 or H", op_in_name(c, 1), op_type_str(gate, a, sizeof(a)),
				 op_in_name(c, 0), op_type_str(final, b, sizeof(b)));
			return;
		}
		for (i = 0; i + 1 < r; i++)
			op_dims_unify(c, &gate->dims[i], &final->dims[i]);
	}
	if (y)
		op_type_shape_of(y, final);
}

const struct tpf_op_def tpf_op_def_TPF_SIGMOID_GATE_ADD = {
	.info = {TPF_DOMAIN, "SigmoidGateAdd", 3, 3, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"final", T}, {"gate", T}, {"shared", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = FLOAT_TYPE("T")},
	.shape = sigmoid_gate_add_shape,
};

/* ------------------------------------------------------------------ Pack, Unpack */

/* The copy table: four integers a segment (operand, source offset,
 * destination offset, length).  Checks each segment against the element
 * counts of its operand (`per`, indexed by the segment's first entry, n_per
 * of them) and of the flat side (`flat`, -1 unknown); returns the end of the
 * furthest write into the flat side (Pack) or -1 on error. */
static int64_t check_segments(struct tpf_shape_call *c, const int64_t *per, size_t n_per,
			      int64_t flat, int pack)
{
	const struct tpf_attr *a = tpf_node_attr(c->node, "segments");
	int64_t end = 0;
	size_t s;

	if (!a || a->kind != TPF_ATTR_INTS || a->ref_attr_name || (a->n && !a->ints))
		return -1;
	if (a->n % 4) {
		op_error(c, "attribute 'segments' has %zu entries; expected four a segment", a->n);
		return -1;
	}
	for (s = 0; s < a->n; s += 4) {
		int64_t i = a->ints[s], src = a->ints[s + 1], dst = a->ints[s + 2], len = a->ints[s + 3];
		int64_t op_end, flat_end, op_off = pack ? src : dst, flat_off = pack ? dst : src;

		if (i < 0 || (uint64_t)i >= n_per || src < 0 || dst < 0 || len < 0 ||
		    __builtin_add_overflow(op_off, len, &op_end) ||
		    __builtin_add_overflow(flat_off, len, &flat_end) ||
		    (per[i] >= 0 && op_end > per[i]) || (flat >= 0 && flat_end > flat)) {
			op_error(c, "segment %zu (%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
				 ") is out of range", s / 4, i, src, dst, len);
			return -1;
		}
		if (flat_end > end)
			end = flat_end;
	}
	return end;
}

static void pack_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *y = op_out(c, 0);
	int64_t per[TPF_MAX_VALUES * 4], total;
	size_t i;

	if (c->n_in > sizeof(per) / sizeof(per[0]))
		return;
	for (i = 0; i < c->n_in; i++)
		per[i] = numel_static(op_in(c, i));
	total = check_segments(c, per, c->n_in, -1, 1);
	if (total < 0 || !y)
		return;
	y->rank = 1;
	y->dims[0] = dim_of(total);
}

static const struct op_attr pack_attrs[] = {
	ATTR_OF("world_size", TPF_ATTR_INT),
	{.name = "segments", .kind = TPF_ATTR_INTS, .flags = ATTR_REQUIRED},
	{0},
};

const struct tpf_op_def tpf_op_def_TPF_PACK = {
	.info = {TPF_DOMAIN, "Pack", 1, -1, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"x", T}},
	.outputs = {{"packed", T}},
	.types = {[T] = ANY_TYPE("T")},
	.attrs = pack_attrs,
	.shape = pack_shape,
};

static void unpack_shape(struct tpf_shape_call *c)
{
	const struct tpf_attr *ra = tpf_node_attr(c->node, "output_ranks");
	const struct tpf_attr *da = tpf_node_attr(c->node, "output_dims");
	const struct tpf_op_type *x = op_in(c, 0);
	int64_t per[TPF_MAX_VALUES * 4];
	size_t i, at = 0;
	int k;

	if (!ra || !da || ra->kind != TPF_ATTR_INTS || da->kind != TPF_ATTR_INTS ||
	    ra->ref_attr_name || da->ref_attr_name)
		return;
	if (ra->n != c->n_out || c->n_out > sizeof(per) / sizeof(per[0])) {
		op_error(c, "attribute 'output_ranks' has %zu entries for %zu outputs", ra->n, c->n_out);
		return;
	}
	if (x->rank >= 0 && x->rank != 1) {
		op_error(c, "input 0 '%s' has rank %d; expected the 1-D received buffer",
			 op_in_name(c, 0), x->rank);
		return;
	}
	for (i = 0; i < c->n_out; i++) {
		int64_t r = ra->ints[i];
		struct tpf_op_type *y = &c->out[i];

		if (r < 0 || r > TPF_MAX_RANK || at + (size_t)r > da->n) {
			op_error(c, "attributes 'output_ranks' and 'output_dims' disagree");
			return;
		}
		y->rank = (int)r;
		for (k = 0; k < (int)r; k++) {
			if (da->ints[at + (size_t)k] < 0) {
				op_error(c, "attribute 'output_dims' holds a negative dim");
				return;
			}
			y->dims[k] = dim_of(da->ints[at + (size_t)k]);
		}
		at += (size_t)r;
		per[i] = numel_static(y);
	}
	if (at != da->n) {
		op_error(c, "attribute 'output_dims' has %zu entries; 'output_ranks' adds up to %zu",
			 da->n, at);
		return;
	}
	check_segments(c, per, c->n_out, numel_static(x), 0);
}

const struct tpf_op_def tpf_op_def_TPF_UNPACK = {
	.info = {TPF_DOMAIN, "Unpack", 1, 1, 1, -1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"received", T}},
	.outputs = {{"y", T}},
	.types = {[T] = ANY_TYPE("T")},
	.attrs = (const struct op_attr[]){
		ATTR_OF("world_size", TPF_ATTR_INT),
		{.name = "segments", .kind = TPF_ATTR_INTS, .flags = ATTR_REQUIRED},
		{.name = "output_ranks", .kind = TPF_ATTR_INTS, .flags = ATTR_REQUIRED},
		{.name = "output_dims", .kind = TPF_ATTR_INTS, .flags = ATTR_REQUIRED},
		{0},
	},
	.shape = unpack_shape,
};

/* ------------------------------------------------------------------ GatedActivation */

static const char *const gated_activations[] = {"silu", "gelu", "gelu_tanh", NULL};

/* Y = act(gate) * up: two inputs of one shape, or (packed = 1) one input
 * [..., 2N] whose halves are gate and up, giving [..., N]. */
static void gated_activation_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t packed = 0;
	char a[256];

	op_attr_int(c, "packed", &packed);
	if (packed != 0 && packed != 1) {
		op_error(c, "attribute 'packed' = %" PRId64 "; expected 0 or 1", packed);
		return;
	}
	if (packed) {
		if (c->n_in != 1) {
			op_error(c, "packed = 1 takes one input [..., 2N]; got %zu inputs", c->n_in);
			return;
		}
		if (x->rank == 0) {
			op_error(c, "input 0 '%s' is a scalar; packed = 1 splits its last dim",
				 op_in_name(c, 0));
			return;
		}
		if (x->rank > 0) {
			const struct tpf_dim *l = &x->dims[x->rank - 1];
			if (dim_is_static(l) && l->value % 2) {
				op_error(c, "input 0 '%s' %s: packed = 1 needs an even last dim",
					 op_in_name(c, 0), op_type_str(x, a, sizeof(a)));
				return;
			}
		}
		if (!y)
			return;
		op_type_shape_of(y, x);
		if (x->rank > 0) {
			const struct tpf_dim *l = &x->dims[x->rank - 1];
			y->dims[x->rank - 1] = dim_is_static(l) ? dim_of(l->value / 2) : dim_unknown();
		}
		return;
	}
	if (c->n_in != 2) {
		op_error(c, "packed = 0 takes two inputs (gate, up); got %zu", c->n_in);
		return;
	}
	if (check_same_shape(c, 1, 0, "up"))
		return;
	if (y)
		op_type_shape_of(y, x);
}

static const struct op_attr gated_activation_attrs[] = {
	ATTR_CHOICE("activation", "silu", gated_activations),
	ATTR_INT("packed", 0),
	ATTR_INT("cube_as_product", 0),
	{0},
};

const struct tpf_op_def tpf_op_def_TPF_GATED_ACTIVATION = {
	.info = {TPF_DOMAIN, "GatedActivation", 1, 2, 1, 1},
	.since = 1,
	.traits = TPF_OP_TRAIT_FUSED,
	.inputs = {{"gate", T}, {"up", T}},
	.outputs = {{"Y", T}},
	.types = {[T] = FLOAT_TYPE("T")},
	.attrs = gated_activation_attrs,
	.shape = gated_activation_shape,
};

/* ------------------------------------------------------------------ RotaryEmbedding
 * ONNX RotaryEmbedding (opset 23): X [batch, heads, seq, head] or [batch,
 * seq, hidden] (num_heads given); cos_cache / sin_cache [max_pos, rot/2]
 * with position_ids [batch, seq], else [batch, seq, rot/2]. */

static void rotary_embedding_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *cc = op_in(c, 1), *sc = op_in(c, 2);
	const struct tpf_op_type *pos = op_in(c, 3);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t heads = 0, rot = 0, inter = 0, head = -1;
	int has_pos = op_in_present(c, 3) && pos->present;
	char a[256], b[256];

	op_attr_int(c, "num_heads", &heads);
	op_attr_int(c, "rotary_embedding_dim", &rot);
	op_attr_int(c, "interleaved", &inter);
	if (inter != 0 && inter != 1) {
		op_error(c, "attribute 'interleaved' = %" PRId64 "; expected 0 or 1", inter);
		return;
	}
	if (heads < 0 || rot < 0) {
		op_error(c, "attributes 'num_heads' = %" PRId64 " and 'rotary_embedding_dim' = %" PRId64
			 " may not be negative", heads, rot);
		return;
	}
	if (x->rank >= 0 && x->rank != 3 && x->rank != 4) {
		op_error(c, "input 0 '%s' %s: expected [batch, heads, seq, head] or [batch, seq, hidden]",
			 op_in_name(c, 0), op_type_str(x, a, sizeof(a)));
		return;
	}
	if (x->rank == 3) {
		if (heads <= 0) {
			op_error(c, "input 0 '%s' is 3-D [batch, seq, hidden]; attribute 'num_heads' is "
				 "required", op_in_name(c, 0));
			return;
		}
		if (dim_is_static(&x->dims[2])) {
			if (x->dims[2].value % heads) {
				op_error(c, "hidden size %" PRId64 " of input 0 '%s' does not divide by "
					 "num_heads %" PRId64, x->dims[2].value, op_in_name(c, 0), heads);
				return;
			}
			head = x->dims[2].value / heads;
		}
	} else if (x->rank == 4 && dim_is_static(&x->dims[3])) {
		head = x->dims[3].value;
	}
	if (rot && (rot % 2 || (head >= 0 && rot > head))) {
		op_error(c, "attribute 'rotary_embedding_dim' = %" PRId64 " must be even and at most "
			 "the head size %" PRId64, rot, head);
		return;
	}
	if (!rot && head >= 0 && head % 2) {
		op_error(c, "head size %" PRId64 " is odd; the rotation takes pairs", head);
		return;
	}
	int want_rank = has_pos ? 2 : 3;
	for (int i = 1; i <= 2; i++) {
		const struct tpf_op_type *t = i == 1 ? cc : sc;
		if (t->rank >= 0 && t->rank != want_rank) {
			op_error(c, "input %d '%s' %s: expected rank %d (%s)", i, op_in_name(c, (size_t)i),
				 op_type_str(t, a, sizeof(a)), want_rank,
				 has_pos ? "[max_position, rotary_dim/2] with position_ids"
					 : "[batch, seq, rotary_dim/2] without position_ids");
			return;
		}
		int64_t half = rot ? rot / 2 : (head >= 0 ? head / 2 : -1);
		if (t->rank > 0 && half >= 0 && dim_is_static(&t->dims[t->rank - 1]) &&
		    t->dims[t->rank - 1].value != half) {
			op_error(c, "input %d '%s' %s: the last dim must be rotary_dim/2 = %" PRId64, i,
				 op_in_name(c, (size_t)i), op_type_str(t, a, sizeof(a)), half);
			return;
		}
	}
	if (cc->rank >= 0 && sc->rank >= 0) {
		int bad = cc->rank != sc->rank;
		for (int i = 0; !bad && i < cc->rank; i++)
			bad = op_dims_equal(c, &cc->dims[i], &sc->dims[i]) == TPF_ANSWER_NO;
		if (bad) {
			op_error(c, "cos_cache '%s' %s and sin_cache '%s' %s differ", op_in_name(c, 1),
				 op_type_str(cc, a, sizeof(a)), op_in_name(c, 2), op_type_str(sc, b, sizeof(b)));
			return;
		}
	}
	if (has_pos && pos->rank >= 0 && pos->rank != 2) {
		op_error(c, "position_ids '%s' %s: expected [batch, seq]", op_in_name(c, 3),
			 op_type_str(pos, a, sizeof(a)));
		return;
	}
	if (y)
		op_type_shape_of(y, x);
}

const struct tpf_op_def tpf_op_def_ROTARY_EMBEDDING = {
	.info = {"", "RotaryEmbedding", 3, 4, 1, 1},
	.since = 23,
	.inputs = {{"X", T}, {"cos_cache", T}, {"sin_cache", T}, {"position_ids", V, OPND_OPTIONAL}},
	.outputs = {{"Y", T}},
	.types = {[T] = {"T", DT(FLOAT) | DT(FLOAT16) | DT(BFLOAT16), "float, float16 or bfloat16"},
		  [V] = {"M", DT(INT64), "int64"}},
	.attrs = (const struct op_attr[]){
		ATTR_INT("interleaved", 0),
		ATTR_INT("rotary_embedding_dim", 0),
		ATTR_INT("num_heads", 0),
		{0},
	},
	.shape = rotary_embedding_shape,
};
