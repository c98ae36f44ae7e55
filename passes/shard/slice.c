/* SPDX-License-Identifier: MIT */
/*
 * Per-rank data of a sharded graph: what differs between the ranks' models
 * (slices of split weights, the bounds of the Slices that take a rank's
 * part, the tp_rank metadata), filled in for one rank at a time over the
 * structure every rank shares.
 */
#include <string.h>

#include "shard.h"

int sh_push(void **arr, size_t *n, size_t *cap, size_t esz)
{
	if (*n == *cap) {
		size_t nc = *cap ? 2 * *cap : 16;
		void *p = tpf_realloc(*arr, nc * esz);
		if (!p)
			return -1;
		*arr = p;
		*cap = nc;
	}
	memset((char *)*arr + *n * esz, 0, esz);
	(*n)++;
	return 0;
}

enum tpf_status sh_split_metadata(struct shard *s, int output, const struct tpf_value *v, struct sh x)
{
	char key[600], val[64 + SH_MAX_SECT * 24];
	const struct sh_sections *sec = sh_sect(s, x.sect);
	const struct sh_fact *f = sh_full(s, v);
	int at;

	if (x.kind != SH_S || x.outer > 1)
		return TPF_OK;
	snprintf(key, sizeof(key), "%s%s", output ? TPF_SPLIT_OUTPUT_KEY : TPF_SPLIT_INPUT_KEY, v->name);
	at = snprintf(val, sizeof(val), "axis=%d world=%d", x.axis, s->W);
	if (sec && sec->n > 1) {
		for (int j = 0; j < sec->n; j++)
			at += snprintf(val + at, sizeof(val) - (size_t)at, "%s%lld", j ? "," : " sections=",
				       (long long)sec->size[j]);
	} else if (f->rank > x.axis && f->dims[x.axis] > 0) {
		snprintf(val + at, sizeof(val) - (size_t)at, " sections=%lld", (long long)f->dims[x.axis]);
	}
	return tpf_model_set_metadata(s->m, key, val);
}

size_t sh_rank_count(const struct sh_rank_data *rd, const char *what)
{
	if (!strcmp(what, "allreduce"))
		return rd->allreduce;
	if (!strcmp(what, "allgather"))
		return rd->allgather;
	if (!strcmp(what, "slices"))
		return rd->slices;
	if (!strcmp(what, "inputs"))
		return rd->inputs_split;
	if (!strcmp(what, "outputs"))
		return rd->outputs_split;
	if (!strcmp(what, "weights"))
		return rd->weights_split;
	return 0;
}

static size_t tensor_bytes(enum tpf_dtype dt, int64_t count)
{
	size_t out = 0;
	if (count < 0 || tpf_dtype_storage_bytes(dt, (uint64_t)count, &out))
		return (size_t)-1;
	return out;
}

enum tpf_status sh_rank_fill(struct sh_rank_data *rd, int rank, struct tpf_diag *d)
{
	int64_t W = rd->s->W;

	for (size_t i = 0; i < rd->n_w; i++) {
		struct rd_weight *w = &rd->w[i];
		const struct tpf_tensor *src = w->src;
		unsigned bits = tpf_dtype_bits(src->dtype);
		int64_t outer = 1, inner = 1, D = src->dims[w->axis];
		size_t nbytes = tensor_bytes(src->dtype, tpf_tensor_numel(w->dst));
		unsigned char *out;
		size_t pos = 0;

		if (!src->data || (src->nbytes && src->nbytes < tensor_bytes(src->dtype, tpf_tensor_numel(src))))
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "initializer '%s': its data is not loaded", src->name);
		for (int k = 0; k < w->axis; k++)
			outer *= src->dims[k];
		for (int k = w->axis + 1; k < src->rank; k++)
			inner *= src->dims[k];
		tpf_free(w->buf);
		w->buf = out = tpf_malloc(nbytes ? nbytes : 1);
		if (!out)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory slicing '%s'", src->name);
		for (int64_t o = 0; o < outer; o++) {
			int64_t off = 0;
			for (int j = 0; j < w->sec.n; j++) {
				int64_t part = w->sec.size[j] / W;
				uint64_t first = (uint64_t)((o * D + off + rank * part) * inner) * bits;
				uint64_t len = (uint64_t)(part * inner) * bits;
				memcpy(out + pos, (const unsigned char *)src->data + first / 8, len / 8);
				pos += len / 8;
				off += w->sec.size[j];
			}
		}
		w->dst->data = out;
		w->dst->nbytes = nbytes;
	}
	for (size_t i = 0; i < rd->n_b; i++) {
		struct rd_bound *b = &rd->b[i];
		int64_t v = b->base + rank * b->step;
		if (b->t) {
			if (b->dtype == TPF_DTYPE_INT32) {
				int32_t x = (int32_t)v;
				memcpy((void *)b->t->data, &x, 4);
			} else {
				memcpy((void *)b->t->data, &v, 8);
			}
		} else if (b->node) {
			const struct tpf_attr *a = tpf_node_attr(b->node, b->attr);
			if (a && a->kind == TPF_ATTR_INTS && a->n == 1)
				a->ints[0] = v;
		}
	}
	{
		char buf[32];
		snprintf(buf, sizeof(buf), "%d", rank);
		if (tpf_model_set_metadata(rd->s->m, "tp_rank", buf))
			return TPF_ERR_NOMEM;
	}
	return TPF_OK;
}

void sh_rank_release(struct sh_rank_data *rd)
{
	for (size_t i = 0; rd && i < rd->n_w; i++) {
		tpf_free(rd->w[i].buf);
		rd->w[i].buf = NULL;
		rd->w[i].dst->data = NULL;
		rd->w[i].dst->nbytes = 0;
	}
}

void sh_rank_data_free(struct sh_rank_data *rd)
{
	if (!rd)
		return;
	sh_rank_release(rd);
	tpf_free(rd->w);
	tpf_free(rd->b);
	tpf_free(rd);
}

enum tpf_status sh_rank_keep(struct sh_rank_data *rd, struct tpf_graph *g, struct tpf_diag *d)
{
	for (size_t i = 0; i < rd->n_w; i++) {
		struct rd_weight *w = &rd->w[i];
		void *p = tpf_arena_memdup(g->arena, w->buf, w->dst->nbytes ? w->dst->nbytes : 1);
		if (!p)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory slicing '%s'", w->src->name);
		tpf_free(w->buf);
		w->buf = NULL;
		w->dst->data = p;
	}
	rd->n_w = 0; /* the graph owns them now */
	return TPF_OK;
}
