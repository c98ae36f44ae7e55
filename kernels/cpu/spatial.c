/* SPDX-License-Identifier: MIT */
/* Spatial ops: Conv (direct convolution over any number of spatial dims,
 * groups, pads, strides, dilations, auto_pad; float32 sums, double for
 * DOUBLE, one rounding when stored) and Pad (constant, edge, reflect,
 * wrap).  One output element at a time, as the CUDA kernels do. */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <string.h>

/* ------------------------------------------------------------ Conv */

TPF_CPU_KERNEL(tpf_cpu_conv)
{
	const struct tpf_ktensor *x = &c->in[0], *w = &c->in[1], *b;
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_conv_geom g;
	TPF_KTRY(tpf_conv_operands(c, &g, &b));
	int dbl = x->dtype == TPF_DTYPE_DOUBLE;
	int64_t cg = g.c / g.group, mg = g.m / g.group;
	int64_t out_sp = tpf_dims_prod(g.out, 0, g.sp), in_sp = tpf_dims_prod(g.in, 0, g.sp);
	int64_t k_sp = tpf_dims_prod(g.k, 0, g.sp);
	for (int64_t i = 0; i < y->numel; i++) {
		int64_t o = i % out_sp, t = i / out_sp, m = t % g.m, nb = t / g.m;
		int64_t grp = m / mg;
		int64_t opos[TPF_KERNEL_MAX_RANK];
		tpf_unravel(o, g.out, g.sp, opos);
		float facc = 0;
		double dacc = 0;
		for (int64_t ci = 0; ci < cg; ci++) {
			int64_t xc = nb * g.c + grp * cg + ci, wc = m * cg + ci;
			for (int64_t kk = 0; kk < k_sp; kk++) {
				int64_t xoff = tpf_conv_in_offset(g.sp, opos, kk, g.k, g.in, g.stride, g.pad, g.dil);
				if (xoff < 0)
					continue;
				double xv = tpf_elem_load(x->dtype, x->data, xc * in_sp + xoff);
				double wv = tpf_elem_load(w->dtype, w->data, wc * k_sp + kk);
				if (dbl)
					dacc += xv * wv;
				else
					facc += (float)xv * (float)wv;
			}
		}
		if (b) {
			double bv = tpf_elem_load(b->dtype, b->data, m);
			dacc += bv;
			facc += (float)bv;
		}
		tpf_elem_store(y->dtype, y->data, i, dbl ? dacc : (double)facc, 1);
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ Pad */

TPF_CPU_KERNEL(tpf_cpu_pad)
{
	const struct tpf_ktensor *x = &c->in[0];
	struct tpf_ktensor *y = &c->out[0];
	int64_t begin[TPF_KERNEL_MAX_RANK];
	int mode;
	size_t es = tpf_elem_size(x->dtype);
	if (!es)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "dtype %s not supported (sub-byte)", tpf_dtype_name(x->dtype));
	if (tpf_pad_resolve(c, begin, &mode))
		return tpf_kfail(c, TPF_ERR_INVALID, "pads, axes, mode or the output shape do not agree");
	/* the constant: input 2, else attribute 'value' (opset < 11), else 0 */
	unsigned char cval[16] = {0};
	if (c->n_in > 2 && c->in[2].rank >= 0 && c->in[2].data) {
		if (c->in[2].dtype != x->dtype || c->in[2].numel != 1)
			return tpf_kfail(c, TPF_ERR_INVALID, "constant_value must be one element of the input's dtype");
		memcpy(cval, c->in[2].data, es);
	} else if (c->n_in < 2) {
		tpf_elem_store(x->dtype, cval, 0, tpf_node_attr_float(c->node, "value", 0), 1);
	}
	for (int64_t i = 0; i < y->numel; i++) {
		int64_t rem = i, src = 0, mul = 1, inside = 1;
		for (int d = y->rank - 1; d >= 0; d--) {
			int64_t o = rem % y->dims[d];
			rem /= y->dims[d];
			int64_t s = tpf_pad_source(o, begin[d], x->dims[d], mode);
			if (s < 0)
				inside = 0;
			src += s * mul;
			mul *= x->dims[d];
		}
		memcpy((char *)y->data + (size_t)i * es, inside ? (const char *)x->data + (size_t)src * es : (const char *)cval,
		       es);
	}
	return TPF_OK;
}
