/* SPDX-License-Identifier: MIT */
/* ONNX Attention (opset 23), the subset decode attention needs:
 * 4-D Q [B, Hq, S, D], K/V [B, Hkv, L, D] (Hq a multiple of Hkv: grouped
 * query attention), optional attn_mask (bool or additive, broadcast to
 * [B, Hq, S, L+P]), past_key/past_value concatenated in front of K/V,
 * is_causal, scale, softcap, nonpad_kv_seqlen (each sequence reads only
 * its first keys: an in-place cache's valid prefix).  Outputs Y and optionally present_key /
 * present_value.  Float32 accumulation; the scores (after the product, the
 * scale, the softcap and the mask) and the probabilities are rounded to
 * Q's dtype, as the ONNX reference computes in T and as the decomposed
 * MatMul/Mul/Add/Softmax/MatMul chain that fuse-attention replaces rounds
 * (a no-op for float32). */
#include "cpu-kernels.h"
#include "op-geometry.h"

#include <math.h>
#include <string.h>

/* v rounded to dtype t, as a kernel storing it in t would. */
static float to_t(enum tpf_dtype t, float v)
{
	unsigned char tmp[8];

	if (t == TPF_DTYPE_FLOAT)
		return v;
	tpf_elem_store(t, tmp, 0, v, 1);
	return (float)tpf_elem_load(t, tmp, 0);
}

TPF_CPU_KERNEL(tpf_cpu_attention)
{
	struct tpf_attention_ops o;
	TPF_KTRY(tpf_attention_operands(c, &o));
	const struct tpf_ktensor *q = o.q, *k = o.k, *v = o.v, *mask = o.mask, *pk = o.pk, *pv = o.pv;
	struct tpf_ktensor *y = o.y, *prk = o.prk, *prv = o.prv;
	int64_t B = o.B, Hq = o.Hq, S = o.S, D = o.D, Hk = o.Hk, L = o.L, Dv = o.Dv, P = o.P, T = o.T;
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
		int64_t Tb = T, coff = P; /* causal: query s sees keys up to s + coff */
		if (o.kvlen) {
			int64_t n = ((const int64_t *)o.kvlen->data)[b];
			Tb = n < 0 ? 0 : n < T ? n : T;
			coff = n - S; /* bottom-right aligned with the valid keys */
		}
		for (int64_t h = 0; h < Hq; h++) {
			int64_t hk = h / (Hq / Hk);
			for (int64_t s = 0; s < S; s++) {
				float mx = -INFINITY;
				for (int64_t j = 0; j < Tb; j++) {
					float acc = 0;
					for (int64_t d = 0; d < D; d++)
						acc += (float)tpf_elem_load(q->dtype, q->data, ((b * Hq + h) * S + s) * D + d) *
						       (float)KV(k, pk, b, hk, j, d, D);
					acc = to_t(q->dtype, to_t(q->dtype, acc) * scale);
					if (softcap > 0)
						acc = to_t(q->dtype, softcap * to_t(q->dtype, tanhf(to_t(q->dtype, acc / softcap))));
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
							acc = to_t(q->dtype, acc + (float)tpf_elem_load(mask->dtype, mask->data, off));
						}
					}
					if (causal && j > s + coff)
						acc = -INFINITY;
					sc[j] = acc;
					mx = acc > mx ? acc : mx;
				}
				float sum = 0;
				for (int64_t j = 0; j < Tb; j++) {
					sc[j] = mx == -INFINITY ? 0 : expf(sc[j] - mx);
					sum += sc[j];
				}
				/* the probabilities, rounded to T as a Softmax output */
				for (int64_t j = 0; j < Tb; j++)
					sc[j] = sum > 0 ? to_t(q->dtype, sc[j] / sum) : 0;
				for (int64_t d = 0; d < Dv; d++) {
					float acc = 0;
					for (int64_t j = 0; j < Tb; j++)
						acc += sc[j] * (float)KV(v, pv, b, hk, j, d, Dv);
					tpf_elem_store(y->dtype, y->data, ((b * Hq + h) * S + s) * Dv + d,
						       acc, 1);
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
