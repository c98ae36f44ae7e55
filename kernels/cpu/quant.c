/* SPDX-License-Identifier: MIT */
/* QuantizeLinear / DequantizeLinear (per tensor, per axis, blocked; int8,
 * uint8, int16, uint16, int4, uint4, fp8, fp4) and TensorRT's
 * TRT_FP4DynamicQuantize.  x / scale is computed in float32, then rounded to
 * nearest even and saturated (integers), or converted exactly (fp8, fp4). */
#include "cpu-kernels.h"
#include "op-geometry.h"
#include "quant-ops.h"

#include <math.h>

/* QuantizeLinear / DequantizeLinear: how x's elements find their scale
 * (*m) and the zero point (*zp, NULL when absent), which has the scale's
 * shape. */
static enum tpf_status qdq_operands(const struct tpf_kernel_call *c, struct tpf_qmap *m,
				    const struct tpf_ktensor **zp)
{
	*zp = c->n_in > 2 && c->in[2].data ? &c->in[2] : NULL;
	if (tpf_qmap_init(c, &c->in[0], &c->in[1], m) || (*zp && (*zp)->numel != c->in[1].numel))
		return tpf_kfail(c, TPF_ERR_INVALID, "scale/zero point shape does not fit x (axis, block_size)");
	return TPF_OK;
}

/* The scale of x's element i (float), and its index in the scale (and zero
 * point) in *si. */
static float qdq_scale(const struct tpf_kernel_call *c, const struct tpf_qmap *m, int64_t i,
		       int64_t *si)
{
	*si = tpf_qmap_index(m, i);
	return (float)tpf_elem_load(c->in[1].dtype, c->in[1].data, *si);
}

TPF_CPU_KERNEL(tpf_cpu_quantize_linear)
{
	const struct tpf_ktensor *x = &c->in[0], *zp;
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_qmap m;
	TPF_KTRY(qdq_operands(c, &m, &zp));
	if (zp && zp->dtype != y->dtype)
		return tpf_kfail(c, TPF_ERR_INVALID, "zero point dtype %s differs from output %s",
				 tpf_dtype_name(zp->dtype), tpf_dtype_name(y->dtype));
	int saturate = (int)tpf_node_attr_int(c->node, "saturate", 1);
	double lo = 0, hi = 0;
	int is_int = tpf_quant_int_range(y->dtype, &lo, &hi) == 0;
	if (!is_int && !tpf_dtype_is_float(y->dtype))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "output dtype %s not supported", tpf_dtype_name(y->dtype));
	for (int64_t i = 0; i < x->numel; i++) {
		int64_t si;
		float v = (float)tpf_elem_load(x->dtype, x->data, i) / qdq_scale(c, &m, i, &si);
		if (is_int) {
			double r = nearbyint((double)v);
			if (zp)
				r += (double)tpf_elem_load_int(zp->dtype, zp->data, si);
			if (isnan(r))
				r = 0;
			r = r < lo ? lo : r > hi ? hi : r;
			tpf_elem_store_int(y->dtype, y->data, i, (int64_t)r);
		} else {
			double r = v;
			if (zp)
				r += tpf_elem_load(zp->dtype, zp->data, si);
			tpf_elem_store(y->dtype, y->data, i, r, saturate);
		}
	}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_dequantize_linear)
{
	const struct tpf_ktensor *x = &c->in[0], *zp;
	struct tpf_qmap m;
	enum tpf_status st = qdq_operands(c, &m, &zp);
	int integral = tpf_dtype_is_integral(x->dtype);
	if (st)
		return st;
	for (int64_t i = 0; i < x->numel; i++) {
		int64_t si;
		float sc = qdq_scale(c, &m, i, &si), v;
		if (integral) {
			int64_t q = tpf_elem_load_int(x->dtype, x->data, i);
			if (zp)
				q -= tpf_elem_load_int(zp->dtype, zp->data, si);
			v = (float)q * sc;
		} else {
			float q = (float)tpf_elem_load(x->dtype, x->data, i);
			if (zp)
				q -= (float)tpf_elem_load(zp->dtype, zp->data, si);
			v = q * sc;
		}
		tpf_elem_store(c->out[0].dtype, c->out[0].data, i, v, 1);
	}
	return TPF_OK;
}

/* trt::TRT_FP4DynamicQuantize(x, global_scale) -> (y: FLOAT4E2M1, scales:
 * FLOAT8E4M3FN), blocks of block_size along the last axis:
 *   scale_b = e4m3(amax_b / 6 / global_scale)
 *   y = e2m1(x / (scale_b * global_scale))   (0 where the block scale is 0) */
TPF_CPU_KERNEL(tpf_cpu_fp4_dynamic_quantize)
{
	const struct tpf_ktensor *x = &c->in[0], *gs = &c->in[1];
	struct tpf_ktensor *y = &c->out[0], *sc = &c->out[1];
	int64_t block = tpf_node_attr_int(c->node, "block_size", 16);
	if (x->rank < 1 || block <= 0 || x->dims[x->rank - 1] % block)
		return tpf_kfail(c, TPF_ERR_INVALID, "last dim must be a multiple of block_size %lld",
				 (long long)block);
	if (sc->numel * block != x->numel || y->numel != x->numel)
		return tpf_kfail(c, TPF_ERR_INVALID, "output shapes disagree with x");
	float g = (float)tpf_elem_load(gs->dtype, gs->data, 0);
	for (int64_t b = 0; b < sc->numel; b++) {
		float amax = 0;
		for (int64_t k = 0; k < block; k++) {
			float v = fabsf((float)tpf_elem_load(x->dtype, x->data, b * block + k));
			amax = v > amax ? v : amax;
		}
		tpf_elem_store(sc->dtype, sc->data, b, amax / 6.0f / g, 1);
		float sb = (float)tpf_elem_load(sc->dtype, sc->data, b) * g;
		for (int64_t k = 0; k < block; k++) {
			float v = (float)tpf_elem_load(x->dtype, x->data, b * block + k);
			tpf_elem_store(y->dtype, y->data, b * block + k, sb != 0 ? v / sb : 0.0, 1);
		}
	}
	return TPF_OK;
}
