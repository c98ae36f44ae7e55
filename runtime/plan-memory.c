/* SPDX-License-Identifier: MIT */
/* The plan's memory: every step's operands placed in one arena by their
 * live ranges, views sharing their root's buffer. */
#include "plan-internal.h"

#include <string.h>

/* ------------------------------------------------------------ memory */

static int cmp_buf_size(const void *a, const void *b, void *ctx)
{
	const struct rt_buffer *bufs = ctx;
	const struct rt_buffer *x = &bufs[*(const int *)a], *y = &bufs[*(const int *)b];
	if (x->size != y->size)
		return x->size > y->size ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* insertion sort with a context (qsort_r is not C11) */
static void sort_by_size(int *idx, size_t n, struct rt_buffer *bufs)
{
	for (size_t i = 1; i < n; i++) {
		int v = idx[i];
		size_t j = i;
		while (j > 0 && cmp_buf_size(&idx[j - 1], &v, bufs) > 0) {
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = v;
	}
}

int tpf_plan_a2a_run(const struct tpf_plan *p, size_t s)
{
	if (s + 2 >= p->n_steps)
		return 0;
	const struct rt_step *pk = &p->steps[s], *a2a = &p->steps[s + 1], *up = &p->steps[s + 2];
	return pk->kind == RT_STEP_KERNEL && pk->node->op == TPF_OP_TPF_PACK && pk->n_out >= 1 &&
	       a2a->kind == RT_STEP_ALLTOALL && a2a->n_in >= 1 && a2a->n_out >= 1 && a2a->ins[0] == pk->outs[0] &&
	       up->kind == RT_STEP_KERNEL && up->node->op == TPF_OP_TPF_UNPACK && up->n_in >= 1 &&
	       up->ins[0] == a2a->outs[0];
}

enum tpf_status tpf_rt_plan_memory(struct tpf_plan *p, struct tpf_diag *d)
{
	size_t align = p->opt.alignment ? p->opt.alignment : 256;
	int last = (int)p->n_steps;
	/* live ranges */
	for (size_t s = 0; s < p->n_steps; s++) {
		const struct rt_step *st = &p->steps[s];
		/* a fused norm's all-reduce input lives through its post-reduce
		 * step: a backend may run both as one kernel (the CUDA one-shot
		 * path), which reads the input while it writes the outputs */
		int upto = (int)s;
		if (st->kind == RT_STEP_ALLREDUCE && s + 1 < p->n_steps && p->steps[s + 1].node == st->node &&
		    p->steps[s + 1].phase == TPF_PHASE_POST_REDUCE)
			upto = (int)s + 1;
		/* likewise a Pack -> AllToAll -> Unpack run, which the session may
		 * run as one grouped exchange from the Pack's inputs straight into
		 * the Unpack's outputs: the inputs live through the Unpack step, so
		 * no piece is received into bytes another piece still sends from */
		if (tpf_plan_a2a_run(p, s))
			upto = (int)s + 2;
		for (size_t i = 0; i < st->n_in; i++)
			if (st->ins[i] >= 0 && p->values[st->ins[i]].last_step < upto)
				p->values[st->ins[i]].last_step = upto;
		for (size_t i = 0; i < st->n_out; i++)
			if (st->outs[i] >= 0 && p->values[st->outs[i]].def_step < 0)
				p->values[st->outs[i]].def_step = (int)s;
	}
	/* a view keeps the buffer it shares alive as long as itself */
	for (size_t i = 0; i < p->n_values; i++) {
		const struct rt_value *r = &p->values[i];
		if (r->alias < 0)
			continue;
		struct rt_value *root = &p->values[r->alias];
		int end = r->is_output ? last : r->last_step;
		if (end > root->last_step)
			root->last_step = end;
	}
	size_t n_buf = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		struct rt_value *r = &p->values[i];
		if (r->known) {
			/* what goes to the device: the constants a step reads (not
			 * a weight only its packed or transposed copy is read for) */
			if (r->last_step >= 0)
				p->constant_bytes += r->t.nbytes;
			continue;
		}
		if (r->alias >= 0)
			continue; /* placed with the value it views */
		if (!r->is_input && r->def_step < 0)
			continue; /* never produced by a step (an omitted or folded output) */
		if (r->kept)
			continue; /* lives outside the arena */
		if (r->is_output || (r->is_input && p->opt.inputs_live))
			r->last_step = last;
		if (r->last_step < r->def_step)
			r->last_step = r->def_step;
		n_buf++;
	}
	p->buffers = tpf_calloc(n_buf + 1, sizeof(*p->buffers));
	int *idx = tpf_calloc(n_buf + 1, sizeof(int));
	if (!p->buffers || !idx) {
		tpf_free(idx);
		return TPF_ERR_NOMEM;
	}
	size_t b = 0;
	for (size_t i = 0; i < p->n_values; i++) {
		struct rt_value *r = &p->values[i];
		if (r->known || r->alias >= 0 || (!r->is_input && r->def_step < 0) || r->kept)
			continue;
		size_t sz = r->t.nbytes;
		if (sz % align && tpf_add_size(sz, align - sz % align, &sz)) {
			tpf_free(idx);
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "buffer of '%s' too large", r->name);
		}
		if (sz == 0)
			sz = align;
		p->buffers[b].size = sz;
		p->buffers[b].first = r->is_input ? -1 : r->def_step;
		p->buffers[b].last = r->last_step;
		p->buffers[b].value = (int)i;
		r->buffer = (int)b;
		if (tpf_add_size(p->unshared_bytes, sz, &p->unshared_bytes)) {
			tpf_free(idx);
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "arena size overflows");
		}
		idx[b] = (int)b;
		b++;
	}
	p->n_buffers = n_buf;
	sort_by_size(idx, n_buf, p->buffers);
	/* greedy by size: lowest offset that does not collide with a placed
	 * buffer whose live range overlaps */
	int *placed = tpf_calloc(n_buf + 1, sizeof(int));
	if (!placed) {
		tpf_free(idx);
		return TPF_ERR_NOMEM;
	}
	size_t n_placed = 0;
	for (size_t k = 0; k < n_buf; k++) {
		struct rt_buffer *x = &p->buffers[idx[k]];
		size_t off = 0;
		int moved = 1;
		while (moved) {
			moved = 0;
			for (size_t j = 0; j < n_placed; j++) {
				const struct rt_buffer *y = &p->buffers[placed[j]];
				if (y->last < x->first || x->last < y->first)
					continue;
				if (off < y->offset + y->size && y->offset < off + x->size) {
					off = y->offset + y->size;
					moved = 1;
				}
			}
		}
		x->offset = off;
		placed[n_placed++] = idx[k];
		if (off + x->size > p->arena_bytes)
			p->arena_bytes = off + x->size;
	}
	tpf_free(placed);
	tpf_free(idx);
	for (size_t i = 0; i < p->n_values; i++)
		if (p->values[i].alias >= 0)
			p->values[i].buffer = p->values[p->values[i].alias].buffer;
	return TPF_OK;
}
