/* SPDX-License-Identifier: MIT */
/*
 * Spatial ops of hybrid decoders (the short causal convolution of linear
 * attention layers): Conv (any number of spatial dims, groups, pads,
 * strides, dilations, auto_pad) and Pad (constant, edge, reflect, wrap;
 * pads as an attribute before opset 11, an input since, axes since 18).
 */
#include "op-def.h"

#include <inttypes.h>
#include <string.h>

enum { T = 1, I64 };


/* ------------------------------------------------------------------ Conv */

static const char *const auto_pads[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", NULL};

/* One spatial output extent, -1 when it is not known. */
static int64_t conv_extent(const char *auto_pad, int64_t d, int64_t k, int64_t pb, int64_t pe, int64_t stride,
			   int64_t dil)
{
	int64_t span = dil * (k - 1) + 1;
	if (d < 0 || k < 1 || stride < 1 || dil < 1)
		return -1;
	if (!strcmp(auto_pad, "SAME_UPPER") || !strcmp(auto_pad, "SAME_LOWER"))
		return (d + stride - 1) / stride;
	if (!strcmp(auto_pad, "VALID"))
		pb = pe = 0;
	if (d + pb + pe < span)
		return -2;
	return (d + pb + pe - span) / stride + 1;
}

static void conv_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0), *w = op_in(c, 1), *b = op_in(c, 2);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t group = 1, ks[TPF_MAX_RANK], pads[2 * TPF_MAX_RANK], strides[TPF_MAX_RANK], dils[TPF_MAX_RANK];
	const char *auto_pad = "NOTSET";
	int sp, i, nk, np, ns, nd;

	if (!y)
		return;
	op_attr_int(c, "group", &group);
	op_attr_string(c, "auto_pad", &auto_pad);
	if (group < 1) {
		op_error(c, "attribute 'group' = %" PRId64 " must be 1 or more", group);
		return;
	}
	if (x->rank >= 0 && x->rank < 3) {
		op_error(c, "input X has rank %d; expected N, C and at least one spatial dim", x->rank);
		return;
	}
	if (x->rank >= 0 && w->rank >= 0 && w->rank != x->rank) {
		op_error(c, "W has rank %d but X has rank %d", w->rank, x->rank);
		return;
	}
	if (b->present && b->rank >= 0 && b->rank != 1) {
		op_error(c, "B has rank %d; expected 1", b->rank);
		return;
	}
	if (x->rank < 0 && w->rank < 0)
		return;
	op_type_set_rank(y, x->rank >= 0 ? x->rank : w->rank);
	sp = y->rank - 2;
	if (x->rank >= 0)
		y->dims[0] = x->dims[0];
	if (w->rank >= 0) {
		y->dims[1] = w->dims[0];
		if (dim_is_static(&w->dims[0]) && w->dims[0].value % group) {
			op_error(c, "W has %" PRId64 " output channels, not a multiple of group %" PRId64,
				 w->dims[0].value, group);
			return;
		}
	}
	int64_t channels;
	if (x->rank >= 0 && w->rank >= 0 && dim_is_static(&x->dims[1]) &&
	    dim_is_static(&w->dims[1]) &&
	    (__builtin_mul_overflow(w->dims[1].value, group, &channels) ||
	     x->dims[1].value != channels)) {
		op_error(c,
		         "X has %" PRId64 " channels; W expects %" PRId64
		         " per group x group %" PRId64,
		         x->dims[1].value, w->dims[1].value, group);
		return;
	}
	nk = op_attr_ints(c, "kernel_shape", ks, TPF_MAX_RANK);
	if (nk < 0) {
		if (w->rank < 0)
			return;
		nk = sp;
		for (i = 0; i < sp; i++)
			ks[i] = dim_is_static(&w->dims[2 + i]) ? w->dims[2 + i].value : -1;
	}
	np = op_attr_ints(c, "pads", pads, 2 * TPF_MAX_RANK);
	ns = op_attr_ints(c, "strides", strides, TPF_MAX_RANK);
	nd = op_attr_ints(c, "dilations", dils, TPF_MAX_RANK);
	if (nk != sp || (np >= 0 && np != 2 * sp) || (ns >= 0 && ns != sp) || (nd >= 0 && nd != sp)) {
		op_error(c, "kernel_shape, pads, strides and dilations must cover the %d spatial dims", sp);
		return;
	}
	for (i = 0; i < sp; i++) {
		int64_t e;

		if (x->rank < 0 || !dim_is_static(&x->dims[2 + i]) || ks[i] < 0)
			continue;
		e = conv_extent(auto_pad, x->dims[2 + i].value, ks[i], np >= 0 ? pads[i] : 0,
				np >= 0 ? pads[sp + i] : 0, ns >= 0 ? strides[i] : 1, nd >= 0 ? dils[i] : 1);
		if (e == -2) {
			op_error(c, "spatial dim %d (%" PRId64 ") is smaller than the kernel's span", i,
				 x->dims[2 + i].value);
			return;
		}
		if (e >= 0)
			y->dims[2 + i] = dim_of(e);
	}
}

const struct tpf_op_def tpf_op_def_CONV = {
	.info = {"", "Conv", 2, 3, 1, 1},
	.since = 1,
	.inputs = {{"X", T}, {"W", T}, {"B", T, OPND_OPTIONAL}},
	.outputs = {{"Y", T}},
	.types = {[T] = TYPE_FLOATS("T")},
	.attrs = (const struct op_attr[]){
		{.name = "auto_pad", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "NOTSET",
		 .allowed = auto_pads},
		ATTR_OF("dilations", TPF_ATTR_INTS),
		ATTR_INT("group", 1),
		ATTR_OF("kernel_shape", TPF_ATTR_INTS),
		ATTR_OF("pads", TPF_ATTR_INTS),
		ATTR_OF("strides", TPF_ATTR_INTS),
		{0},
	},
	.shape = conv_shape,
	.shard = SHARD(CONV, 0),
};

/* ------------------------------------------------------------------ Pad */

static const char *const pad_modes[] = {"constant", "reflect", "edge", "wrap", NULL};

static void pad_shape(struct tpf_shape_call *c)
{
	const struct tpf_op_type *x = op_in(c, 0);
	struct tpf_op_type *y = op_out(c, 0);
	int64_t pads[2 * TPF_MAX_RANK], axes[TPF_MAX_RANK];
	int np, na, i;

	if (!y || x->rank < 0)
		return;
	op_type_set_rank(y, x->rank);
	if (op_attr_given(c, "pads") || (c->opset > 0 && c->opset < 11))
		np = op_attr_ints(c, "pads", pads, 2 * TPF_MAX_RANK);
	else
		np = op_static_values(op_in(c, 1), pads, 2 * TPF_MAX_RANK);
	na = x->rank;
	for (i = 0; i < na; i++)
		axes[i] = i;
	if (op_in_present(c, 3)) {
		na = op_static_values(op_in(c, 3), axes, TPF_MAX_RANK);
		if (na < 0)
			return;
	}
	if (np < 0)
		return;
	if (np != 2 * na) {
		op_error(c, "pads has %d entries; expected %d (two per padded axis)", np, 2 * na);
		y->rank = -1;
		return;
	}
	for (i = 0; i < x->rank; i++)
		y->dims[i] = x->dims[i];
	if (op_norm_axes(c, axes, na, x->rank, NULL)) {
		y->rank = -1;
		return;
	}
	for (i = 0; i < na; i++) {
		int64_t d, ax = axes[i];

		if (pads[i] == 0 && pads[na + i] == 0)
			continue;
		if (!dim_is_static(&x->dims[ax])) {
			y->dims[ax] = dim_unknown();
			continue;
		}
		if (__builtin_add_overflow(x->dims[ax].value, pads[i], &d) ||
		    __builtin_add_overflow(d, pads[na + i], &d)) {
			op_error(c,
			         "pads of axis %" PRId64 " (%" PRId64 " and %" PRId64
			         ") overflow its size",
			         ax, pads[i], pads[na + i]);
			y->rank = -1;
			return;
		}
		if (d < 0) {
			op_error(c, "pads remove more than axis %" PRId64 "'s %" PRId64 " elements", ax,
				 x->dims[ax].value);
			y->rank = -1;
			return;
		}
		y->dims[ax] = dim_of(d);
	}
}

const struct tpf_op_def tpf_op_def_PAD = {
	.host_inputs = 1u << 1 | 1u << 3, /* pads, axes */
	.info = {"", "Pad", 1, 4, 1, 1},
	.since = 1,
	.inputs = {{"data", T}, {"pads", I64}, {"constant_value", T, OPND_OPTIONAL}, {"axes", 0, OPND_OPTIONAL}},
	.outputs = {{"output", T}},
	.types = {[T] = TYPE_ANY("T"), [I64] = TYPE_INT64},
	.attrs = (const struct op_attr[]){
		{.name = "mode", .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = "constant",
		 .allowed = pad_modes},
		{.name = "pads", .kind = TPF_ATTR_INTS, .until = 11, .required_before = 11},
		{.name = "value", .kind = TPF_ATTR_FLOAT, .flags = ATTR_DEFAULT, .f = 0, .until = 11},
		{0},
	},
	.forms = {{11, 1, 1}, {INT64_MAX, 2, 4}},
	.shape = pad_shape,
	.shard = SHARD(PAD, 0),
};
