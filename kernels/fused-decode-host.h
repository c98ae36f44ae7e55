/* SPDX-License-Identifier: MIT */
/* Private to kernels/: how the CPU and the CUDA kernels of the decode
 * fusions (ai.tpfuse.GatedActivation, ONNX RotaryEmbedding) read a node
 * and its operands, so that both backends accept and refuse the same
 * calls with the same message.  Header-only (static inline), C and C++. */
#ifndef TPF_FUSED_DECODE_HOST_H
#define TPF_FUSED_DECODE_HOST_H

#include <string.h>

#include "kernel-host.h"

#ifdef __cplusplus
extern "C" {
#endif

enum tpf_gated_act { TPF_GATED_SILU = 0, TPF_GATED_GELU = 1, TPF_GATED_GELU_TANH = 2 };

/* GatedActivation: the activation, and the output as rows x n with the
 * gate of row r at gate[r * gate_stride] and up at up[r * gate_stride]
 * (packed: one [rows, 2n] input, up = gate + n).  0, or -1 with the
 * message added. */
struct tpf_gated_geom {
	enum tpf_gated_act act;
	int packed;
	int cube_as_product; /* gelu_tanh: x^3 as x * (x * x), the square rounded */
	int64_t rows, n, stride;
};

/* The node's activation, packed and cube_as_product attributes; 0, or -1
 * with the message added. */
static inline int tpf_gated_attrs(const struct tpf_kernel_call *c, struct tpf_gated_geom *g)
{
	memset(g, 0, sizeof(*g));
	const char *a = tpf_node_attr_string(c->node, "activation", "silu");
	if (!strcmp(a, "silu"))
		g->act = TPF_GATED_SILU;
	else if (!strcmp(a, "gelu"))
		g->act = TPF_GATED_GELU;
	else if (!strcmp(a, "gelu_tanh"))
		g->act = TPF_GATED_GELU_TANH;
	else {
		tpf_kfail(c, TPF_ERR_INVALID, "activation '%s' is not silu, gelu or gelu_tanh", a);
		return -1;
	}
	g->packed = (int)tpf_node_attr_int(c->node, "packed", 0);
	g->cube_as_product = tpf_node_attr_int(c->node, "cube_as_product", 0) != 0;
	return 0;
}

static inline int tpf_gated_geom(const struct tpf_kernel_call *c, struct tpf_gated_geom *g)
{
	const struct tpf_ktensor *x = &c->in[0], *y = &c->out[0];
	if (tpf_gated_attrs(c, g))
		return -1;
	if (c->n_out != 1 || (g->packed ? c->n_in != 1 : c->n_in != 2)) {
		tpf_kfail(c, TPF_ERR_INVALID, "expects %s and one output",
			  g->packed ? "one packed input [..., 2N]" : "gate and up");
		return -1;
	}
	g->n = y->rank ? y->dims[y->rank - 1] : 1;
	g->rows = g->n ? y->numel / g->n : 0;
	g->stride = g->packed ? 2 * g->n : g->n;
	int ok = x->rank == y->rank && x->dtype == y->dtype;
	for (int d = 0; ok && d < y->rank; d++)
		ok = x->dims[d] == (d == y->rank - 1 ? g->stride : y->dims[d]);
	if (!y->rank)
		ok = ok && !g->packed;
	if (ok && !g->packed) {
		const struct tpf_ktensor *u = &c->in[1];
		ok = u->rank == y->rank && u->dtype == y->dtype;
		for (int d = 0; ok && d < y->rank; d++)
			ok = u->dims[d] == y->dims[d];
	}
	if (!ok) {
		tpf_kfail(c, TPF_ERR_INVALID, "operand shapes or dtypes do not match the output (%s)",
			  g->packed ? "packed: [..., 2N] -> [..., N]" : "gate, up and Y of one shape");
		return -1;
	}
	return 0;
}

/* RotaryEmbedding: X as [batch, seq, heads, head] element strides, the
 * rotary width and where each (batch, seq) finds its cos/sin row. */
struct tpf_rotary_geom {
	int64_t batch, seq, heads, head, rot;
	int64_t sb, ss, sh; /* element strides of X (and Y) for batch, seq, head */
	int interleaved;
	int has_pos;
	int64_t cache_rows;      /* with position_ids: rows of the caches */
	int64_t cache_batch;     /* without: 1 or batch */
	int64_t pos_batch;       /* with: 1 or batch */
};

static inline int tpf_rotary_geom(const struct tpf_kernel_call *c, struct tpf_rotary_geom *g)
{
	memset(g, 0, sizeof(*g));
	const struct tpf_ktensor *x = &c->in[0], *cc = &c->in[1], *sc = &c->in[2];
	const struct tpf_ktensor *pos = c->n_in > 3 && c->in[3].data ? &c->in[3] : NULL;
	int64_t nh = tpf_node_attr_int(c->node, "num_heads", 0);
	if (c->n_out != 1 || c->n_in < 3 || c->out[0].numel != x->numel) {
		tpf_kfail(c, TPF_ERR_INVALID, "expects X, cos_cache, sin_cache[, position_ids] and Y of X's shape");
		return -1;
	}
	if (x->rank == 4) {
		g->batch = x->dims[0], g->heads = x->dims[1], g->seq = x->dims[2], g->head = x->dims[3];
		g->sh = g->seq * g->head, g->ss = g->head, g->sb = g->heads * g->seq * g->head;
	} else if (x->rank == 3) {
		if (nh <= 0 || x->dims[2] % nh) {
			tpf_kfail(c, TPF_ERR_INVALID, "3-D input needs num_heads dividing the hidden size %lld",
				  (long long)x->dims[2]);
			return -1;
		}
		g->batch = x->dims[0], g->seq = x->dims[1], g->heads = nh, g->head = x->dims[2] / nh;
		g->sh = g->head, g->ss = x->dims[2], g->sb = g->seq * x->dims[2];
	} else {
		tpf_kfail(c, TPF_ERR_INVALID, "input X has rank %d; expected 3 or 4", x->rank);
		return -1;
	}
	g->rot = tpf_node_attr_int(c->node, "rotary_embedding_dim", 0);
	if (!g->rot)
		g->rot = g->head;
	g->interleaved = tpf_node_attr_int(c->node, "interleaved", 0) != 0;
	if (g->rot % 2 || g->rot > g->head || g->rot < 0) {
		tpf_kfail(c, TPF_ERR_INVALID, "rotary dim %lld is odd or exceeds the head size %lld",
			  (long long)g->rot, (long long)g->head);
		return -1;
	}
	int same = cc->rank == sc->rank && cc->dtype == x->dtype && sc->dtype == x->dtype;
	for (int d = 0; same && d < cc->rank; d++)
		same = cc->dims[d] == sc->dims[d];
	if (!same || !cc->rank || cc->dims[cc->rank - 1] != g->rot / 2) {
		tpf_kfail(c, TPF_ERR_INVALID, "cos_cache and sin_cache must have one shape and dtype X's, "
			  "last dim rotary_dim/2 = %lld", (long long)(g->rot / 2));
		return -1;
	}
	g->has_pos = pos != NULL;
	if (pos) {
		if (cc->rank != 2 || pos->rank != 2 || pos->dtype != TPF_DTYPE_INT64 || pos->dims[1] != g->seq ||
		    (pos->dims[0] != g->batch && pos->dims[0] != 1)) {
			tpf_kfail(c, TPF_ERR_INVALID, "with position_ids [batch, seq] (int64) the caches are "
				  "[max_position, rotary_dim/2]");
			return -1;
		}
		g->cache_rows = cc->dims[0];
		g->pos_batch = pos->dims[0];
	} else {
		if (cc->rank != 3 || cc->dims[1] != g->seq || (cc->dims[0] != g->batch && cc->dims[0] != 1)) {
			tpf_kfail(c, TPF_ERR_INVALID, "without position_ids the caches are [batch, seq, "
				  "rotary_dim/2] (batch %lld, seq %lld)", (long long)g->batch, (long long)g->seq);
			return -1;
		}
		g->cache_batch = cc->dims[0];
	}
	return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* TPF_FUSED_DECODE_HOST_H */
