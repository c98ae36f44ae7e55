/* SPDX-License-Identifier: MIT */
/*
 * CPU reference kernels of the decode fusions: ai.tpfuse.GatedActivation
 * (SiLU / GELU gate times up, docs/ops.md) and ONNX RotaryEmbedding
 * (opset 23; the rotate-half and interleaved forms, partial rotary,
 * caches indexed by position_ids or given per token).  GatedActivation
 * rounds to T where the decomposed chain does (SiLU: the sigmoid, gate *
 * sigmoid, the product; GELU: the activation, the product); RotaryEmbedding rounds each product and
 * each sum to T, as the ONNX reference computes in T.  Arithmetic in
 * double, rounded to T at those steps, as the unfused CPU kernels do.
 */
#include <math.h>

#include "cpu-kernels.h"
#include "fused-decode-host.h"

/* v rounded to dtype t, as a kernel storing it in t would. */
static double to_t(enum tpf_dtype t, double v)
{
	unsigned char tmp[8];

	tpf_elem_store(t, tmp, 0, v, 1);
	return tpf_elem_load(t, tmp, 0);
}

/* act(g) as the decomposed chains compute it in dtype t: silu rounds the
 * sigmoid and the product; the GELU forms round the activation once. */
/* act(g) in dtype t, rounded at every step of the decomposed chain that
 * exporters write (constants in t too), so that a fused float16/bfloat16
 * graph computes what the unfused one did:
 *   silu       g * Sigmoid(g)
 *   gelu_tanh  g * (0.5 * (1 + Tanh(c1 * (g + c2 * g^3))))   (g^3 rounded
 *              once, or as g * (g * g) with cube_as_product)
 *   gelu       (g * (1 + Erf(g / sqrt(2)))) * 0.5
 * (the products by 0.5 are exact, so their place does not matter). */
static double gated_act(const struct tpf_gated_geom *gm, enum tpf_dtype t, double g)
{
	enum tpf_gated_act a = gm->act;
	double c;

	switch (a) {
	case TPF_GATED_GELU:
		c = to_t(t, erf(to_t(t, g / to_t(t, 1.4142135623730951))));
		return to_t(t, to_t(t, g * to_t(t, 1.0 + c)) * 0.5);
	case TPF_GATED_GELU_TANH:
		c = gm->cube_as_product ? to_t(t, g * to_t(t, g * g)) : to_t(t, g * g * g);
		c = to_t(t, g + to_t(t, to_t(t, 0.044715) * c));
		c = to_t(t, tanh(to_t(t, to_t(t, 0.79788456080286536) * c)));
		return to_t(t, g * to_t(t, 0.5 * to_t(t, 1.0 + c)));
	case TPF_GATED_SILU:
	default:
		return to_t(t, g * to_t(t, 1.0 / (1.0 + exp(-g))));
	}
}

TPF_CPU_KERNEL(tpf_cpu_gated_activation)
{
	struct tpf_gated_geom g;
	if (tpf_gated_geom(c, &g))
		return TPF_ERR_INVALID;
	const struct tpf_ktensor *x = &c->in[0];
	const struct tpf_ktensor *u = g.packed ? x : &c->in[1];
	struct tpf_ktensor *y = &c->out[0];
	int64_t up_off = g.packed ? g.n : 0;
	for (int64_t r = 0; r < g.rows; r++)
		for (int64_t j = 0; j < g.n; j++) {
			double gv = tpf_elem_load(x->dtype, x->data, r * g.stride + j);
			double uv = tpf_elem_load(u->dtype, u->data, r * g.stride + up_off + j);
			double a = gated_act(&g, y->dtype, gv);
			tpf_elem_store(y->dtype, y->data, r * g.n + j, a * uv, 1);
		}
	return TPF_OK;
}

TPF_CPU_KERNEL(tpf_cpu_rotary_embedding)
{
	struct tpf_rotary_geom g;
	if (tpf_rotary_geom(c, &g))
		return TPF_ERR_INVALID;
	const struct tpf_ktensor *x = &c->in[0], *cc = &c->in[1], *sc = &c->in[2];
	const struct tpf_ktensor *pos = g.has_pos ? &c->in[3] : NULL;
	struct tpf_ktensor *y = &c->out[0];
	enum tpf_dtype dt = x->dtype;
	int64_t half = g.rot / 2;
	for (int64_t b = 0; b < g.batch; b++)
		for (int64_t s = 0; s < g.seq; s++) {
			int64_t row;
			if (pos) {
				int64_t p = tpf_elem_load_int(TPF_DTYPE_INT64, pos->data,
							      (g.pos_batch == 1 ? 0 : b) * g.seq + s);
				if (p < 0 || p >= g.cache_rows)
					return tpf_kfail(c, TPF_ERR_INVALID,
							 "position id %lld is outside the cache's %lld rows",
							 (long long)p, (long long)g.cache_rows);
				row = p;
			} else {
				row = (g.cache_batch == 1 ? 0 : b) * g.seq + s;
			}
			for (int64_t h = 0; h < g.heads; h++) {
				int64_t base = b * g.sb + s * g.ss + h * g.sh;
				for (int64_t i = 0; i < half; i++) {
					double cs = tpf_elem_load(dt, cc->data, row * half + i);
					double sn = tpf_elem_load(dt, sc->data, row * half + i);
					int64_t i1 = g.interleaved ? 2 * i : i;
					int64_t i2 = g.interleaved ? 2 * i + 1 : i + half;
					double x1 = tpf_elem_load(dt, x->data, base + i1);
					double x2 = tpf_elem_load(dt, x->data, base + i2);
					tpf_elem_store(dt, y->data, base + i1,
						       to_t(dt, cs * x1) - to_t(dt, sn * x2), 1);
					tpf_elem_store(dt, y->data, base + i2,
						       to_t(dt, sn * x1) + to_t(dt, cs * x2), 1);
				}
				for (int64_t d = g.rot; d < g.head; d++)
					tpf_elem_store(dt, y->data, base + d,
						       tpf_elem_load(dt, x->data, base + d), 1);
			}
		}
	return TPF_OK;
}
