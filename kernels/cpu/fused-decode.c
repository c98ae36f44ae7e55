/* SPDX-License-Identifier: MIT */
/*
 * CPU reference kernels of the decode fusions: ai.tpfuse.GatedActivation
 * (SiLU / GELU gate times up, docs/ops.md) and ONNX RotaryEmbedding
 * (opset 23; the rotate-half and interleaved forms, partial rotary,
 * caches indexed by position_ids or given per token).  Both compute in
 * float and round once into the output dtype.
 */
#include <math.h>

#include "cpu-kernels.h"
#include "fused-decode-host.h"

static float gated_act(enum tpf_gated_act a, float g)
{
	switch (a) {
	case TPF_GATED_GELU:
		return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
	case TPF_GATED_GELU_TANH:
		return 0.5f * g * (1.0f + tanhf(0.79788456080286536f * (g + 0.044715f * g * g * g)));
	case TPF_GATED_SILU:
	default:
		return g / (1.0f + expf(-g));
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
			float gv = (float)tpf_elem_load(x->dtype, x->data, r * g.stride + j);
			float uv = (float)tpf_elem_load(u->dtype, u->data, r * g.stride + up_off + j);
			tpf_elem_store(y->dtype, y->data, r * g.n + j, gated_act(g.act, gv) * uv, 1);
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
					float cs = (float)tpf_elem_load(dt, cc->data, row * half + i);
					float sn = (float)tpf_elem_load(dt, sc->data, row * half + i);
					int64_t i1 = g.interleaved ? 2 * i : i;
					int64_t i2 = g.interleaved ? 2 * i + 1 : i + half;
					float x1 = (float)tpf_elem_load(dt, x->data, base + i1);
					float x2 = (float)tpf_elem_load(dt, x->data, base + i2);
					tpf_elem_store(dt, y->data, base + i1, cs * x1 - sn * x2, 1);
					tpf_elem_store(dt, y->data, base + i2, sn * x1 + cs * x2, 1);
				}
				for (int64_t d = g.rot; d < g.head; d++)
					tpf_elem_store(dt, y->data, base + d,
						       tpf_elem_load(dt, x->data, base + d), 1);
			}
		}
	return TPF_OK;
}
