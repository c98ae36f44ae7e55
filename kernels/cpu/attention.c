/* SPDX-License-Identifier: MIT */
/* ONNX Attention (opset 23), the subset decode attention needs:
 * 4-D Q [B, Hq, S, D], K/V [B, Hkv, L, D] (Hq a multiple of Hkv: grouped
 * query attention), optional attn_mask (bool or additive, broadcast to
 * [B, Hq, S, L+P]), past_key/past_value concatenated in front of K/V,
 * is_causal, scale, softcap.  Outputs Y and optionally present_key /
 * present_value.  Float32 accumulation. */
#include "cpu-kernels.h"

#include <math.h>
#include <string.h>

TPF_CPU_KERNEL(tpf_cpu_attention)
{
	const struct tpf_ktensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
	const struct tpf_ktensor *mask = c->n_in > 3 && c->in[3].data ? &c->in[3] : NULL;
	const struct tpf_ktensor *pk = c->n_in > 4 && c->in[4].data ? &c->in[4] : NULL;
	const struct tpf_ktensor *pv = c->n_in > 5 && c->in[5].data ? &c->in[5] : NULL;
	struct tpf_ktensor *y = &c->out[0];
	struct tpf_ktensor *prk = c->n_out > 1 && c->out[1].data ? &c->out[1] : NULL;
	struct tpf_ktensor *prv = c->n_out > 2 && c->out[2].data ? &c->out[2] : NULL;
	if (q->rank != 4 || k->rank != 4 || v->rank != 4 || (pk && pk->rank != 4) || (pv && pv->rank != 4))
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "only 4-D Q/K/V are supported");
	if (!!pk != !!pv)
		return tpf_kfail(c, TPF_ERR_INVALID, "past_key and past_value must come together");
	int64_t B = q->dims[0], Hq = q->dims[1], S = q->dims[2], D = q->dims[3];
	int64_t Hk = k->dims[1], L = k->dims[2], Dv = v->dims[3];
	int64_t P = pk ? pk->dims[2] : 0, T = P + L;
	if (Hk <= 0 || Hq % Hk || k->dims[3] != D || v->dims[1] != Hk || v->dims[2] != L ||
	    (pk && (pk->dims[1] != Hk || pk->dims[3] != D || pv->dims[2] != P || pv->dims[3] != Dv)))
		return tpf_kfail(c, TPF_ERR_INVALID, "Q/K/V/past shapes disagree");
	if (y->numel != B * Hq * S * Dv)
		return tpf_kfail(c, TPF_ERR_UNSUPPORTED, "only the 4-D output layout is supported");
	struct tpf_attention_attrs at;
	tpf_attention_attrs(c, D, &at);
	float scale = at.scale, softcap = at.softcap;
	int causal = at.causal;
	struct tpf_ktensor full = {0};
	full.rank = 4;
	full.dims[0] = B, full.dims[1] = Hq, full.dims[2] = S, full.dims[3] = T;
	struct tpf_bcast it;
	const struct tpf_ktensor *mv[1] = {mask};
	if (mask && tpf_bcast_init(&it, &full, mv, 1))
		return tpf_kfail(c, TPF_ERR_INVALID, "attn_mask does not broadcast to [B, H, S, T]");
	float *sc = tpf_calloc(T > 0 ? (size_t)T : 1, sizeof(float));
	if (!sc)
		return tpf_kfail(c, TPF_ERR_NOMEM, "out of memory");
#define KV(t, past, b, h, j, d, dd)                                                                \
	((j) < P ? tpf_elem_load((past)->dtype, (past)->data,                                     \
				 (((b) * Hk + (h)) * P + (j)) * (dd) + (d))                         \
		 : tpf_elem_load((t)->dtype, (t)->data, (((b) * Hk + (h)) * L + (j) - P) * (dd) + (d)))
	for (int64_t b = 0; b < B; b++) {
		for (int64_t h = 0; h < Hq; h++) {
			int64_t hk = h / (Hq / Hk);
			for (int64_t s = 0; s < S; s++) {
				float mx = -INFINITY;
				for (int64_t j = 0; j < T; j++) {
					float acc = 0;
					for (int64_t d = 0; d < D; d++)
						acc += (float)tpf_elem_load(q->dtype, q->data, ((b * Hq + h) * S + s) * D + d) *
						       (float)KV(k, pk, b, hk, j, d, D);
					acc *= scale;
					if (softcap > 0)
						acc = softcap * tanhf(acc / softcap);
					if (mask) {
						int64_t mo = tpf_dims_prod(full.dims, 0, 0);
						(void)mo;
						/* broadcast offset of (b, h, s, j) */
						int64_t off = 0;
						for (int dd = 0; dd < 4; dd++) {
							int64_t id = dd == 0 ? b : dd == 1 ? h : dd == 2 ? s : j;
							off += id * it.strides[0][dd];
						}
						if (mask->dtype == TPF_DTYPE_BOOL) {
							if (!((const uint8_t *)mask->data)[off])
								acc = -INFINITY;
						} else {
							acc += (float)tpf_elem_load(mask->dtype, mask->data, off);
						}
					}
					if (causal && j > s + P)
						acc = -INFINITY;
					sc[j] = acc;
					mx = acc > mx ? acc : mx;
				}
				float sum = 0;
				for (int64_t j = 0; j < T; j++) {
					sc[j] = mx == -INFINITY ? 0 : expf(sc[j] - mx);
					sum += sc[j];
				}
				for (int64_t d = 0; d < Dv; d++) {
					float acc = 0;
					for (int64_t j = 0; j < T; j++)
						acc += sc[j] * (float)KV(v, pv, b, hk, j, d, Dv);
					tpf_elem_store(y->dtype, y->data, ((b * Hq + h) * S + s) * Dv + d,
						       sum > 0 ? acc / sum : 0, 1);
				}
			}
		}
	}
	for (int64_t b = 0; b < B && (prk || prv); b++)
		for (int64_t h = 0; h < Hk; h++)
			for (int64_t j = 0; j < T; j++) {
				for (int64_t d = 0; prk && d < D; d++)
					tpf_elem_store(prk->dtype, prk->data, ((b * Hk + h) * T + j) * D + d,
						       KV(k, pk, b, h, j, d, D), 1);
				for (int64_t d = 0; prv && d < Dv; d++)
					tpf_elem_store(prv->dtype, prv->data, ((b * Hk + h) * T + j) * Dv + d,
						       KV(v, pv, b, h, j, d, Dv), 1);
			}
#undef KV
	tpf_free(sc);
	return TPF_OK;
}
