/* SPDX-License-Identifier: MIT */
/*
 * merge-parallel-matmuls: sibling projections of one input become one GEMM,
 *
 *   q = MatMul(x, Wq)  k = MatMul(x, Wk)  v = MatMul(x, Wv)
 *       => qkv = MatMul(x, Concat(Wq, Wk, Wv) along N)
 *          q, k, v = Split(qkv, [Nq, Nk, Nv]) {axis = -1}
 *
 * and the same for FP8 QDQ projections, MatMul(x, DequantizeLinear(Wq8,
 * scale, zero)), which become one DequantizeLinear of the concatenated FP8
 * weight (so the runtime's FP8 GEMM still sees its pattern).  The merged
 * weight is a new initializer computed at compile time; the old ones go.
 *
 * Not a tree pattern: it groups the MatMul readers of each value.  A
 * MatMul joins a group when its weight is an initializer [..., K, N] (a
 * batched expert weight [E, K, N] too; or the per-tensor DequantizeLinear
 * of a 2-D one) that nothing else reads; the group is the set of such
 * readers with the same weight dtype, K and batch dims (and, for FP8, the
 * same scale and zero point).  Only whole groups of two or more
 * merge.  A weight another node also reads is left alone: the merged
 * copy would stream the same bytes twice (the merged GEMM would read more
 * than the separate ones did).  Decisions depend only on structure, dtypes
 * and shapes, so every rank of a tensor-parallel model takes the same ones.
 *
 * Counters: `groups-merged` (merged GEMMs created), `matmuls-merged`
 * (MatMuls they replaced).  --explain prints, for each value read by two
 * or more MatMuls that did not all merge, why each one stayed alone.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "merge-parallel-matmuls"

static const char *const counters[] = {"groups-merged", "matmuls-merged", NULL};

/* What one MatMul reader of x offers. */
struct cand {
	struct tpf_node *mm;
	struct tpf_node *dq;       /* FP8: the weight's DequantizeLinear, else NULL */
	struct tpf_value *w;       /* the 2-D initializer (the FP8 codes for dq) */
	const struct tpf_tensor *t;
	enum tpf_dtype dt;
	int64_t k, n;
	double scale;              /* FP8 */
	const struct tpf_tensor *zero; /* the zero point, or NULL */
	enum tpf_dtype out_dt;     /* the dequantized dtype */
	int group;                 /* -1: stays alone */
	const char *why;
	char buf[160];
};

static void explain(struct tpf_pass_context *ctx, const struct tpf_node *n, const char *why)
{
	char b[256];

	if (ctx && ctx->explain)
		fprintf(ctx->explain, "near-miss: %s at %s: %s\n", PASS_NAME,
		        tpf_node_describe(n, b, sizeof(b)), why);
}

/* The weight operand as a plain or FP8-dequantized initializer; NULL and
 * c->why when it is not one this pass can concatenate. */
static int weight_of(struct cand *c)
{
	struct tpf_value *w = c->mm->inputs[1];
	struct tpf_node *p = w ? w->producer : NULL;

	if (c->mm->n_inputs != 2 || !w)
		return (c->why = "not a two-operand MatMul"), 0;
	if (p && p->op == TPF_OP_DEQUANTIZE_LINEAR) {
		struct tpf_value *q = p->inputs[0];
		if (tpf_value_use_count(w) != 1) {
			snprintf(c->buf, sizeof(c->buf),
			         "the dequantized weight '%s' has %zu uses", w->name,
			         tpf_value_use_count(w));
			return (c->why = c->buf), 0;
		}
		if (p->n_inputs < 2 || !p->inputs[1] ||
		    tpf_pattern_const_scalar(p->inputs[1], &c->scale))
			return (c->why = "the weight's DequantizeLinear has no constant scalar scale"), 0;
		c->zero = NULL;
		if (p->n_inputs > 2 && p->inputs[2]) {
			c->zero = tpf_value_constant(p->inputs[2]);
			if (!c->zero || tpf_tensor_numel(c->zero) != 1 || !c->zero->data)
				return (c->why = "the weight's DequantizeLinear has no constant scalar "
				                 "zero point"),
				       0;
		}
		c->out_dt = tpf_pattern_dtype(w);
		if (tpf_node_attr_int(p, "block_size", 0) != 0)
			return (c->why = "the weight's DequantizeLinear is blocked"), 0;
		c->dq = p;
		w = q;
	}
	if (!w || w->kind != TPF_VALUE_INITIALIZER || w->is_graph_input || !w->init ||
	    (!w->init->data && w->init->nbytes)) {
		snprintf(c->buf, sizeof(c->buf), "the weight '%s' is not an initializer",
		         w ? w->name : "");
		return (c->why = c->buf), 0;
	}
	if (w->init->rank < 2 || (c->dq && w->init->rank != 2)) {
		snprintf(c->buf, sizeof(c->buf), "the weight '%s' has rank %d, not %s", w->name,
		         w->init->rank, c->dq ? "2 (an FP8 GEMM's)" : "2 or more");
		return (c->why = c->buf), 0;
	}
	if (tpf_value_use_count(w) != 1) {
		snprintf(c->buf, sizeof(c->buf),
		         "the weight '%s' has %zu other use(s); a merged copy would stream it "
		         "twice",
		         w->name, tpf_value_use_count(w) - 1);
		return (c->why = c->buf), 0;
	}
	size_t bytes;
	if (tpf_dtype_storage_bytes(w->init->dtype, (uint64_t)tpf_tensor_numel(w->init), &bytes) ||
	    tpf_dtype_bits(w->init->dtype) % 8 || bytes != w->init->nbytes) {
		snprintf(c->buf, sizeof(c->buf), "the weight '%s' (%s) is not byte-addressable",
		         w->name, tpf_dtype_name(w->init->dtype));
		return (c->why = c->buf), 0;
	}
	if (c->mm->outputs[0] && tpf_pattern_rank(c->mm->outputs[0]) == 0)
		return (c->why = "the product is a scalar"), 0;
	/* a product nobody reads: merged, its weight would still be streamed */
	if (!c->mm->outputs[0] || !tpf_value_use_count(c->mm->outputs[0]))
		return (c->why = "its product is not used (the merged GEMM would read its weight "
		                 "for nothing)"),
		       0;
	c->w = w;
	c->t = w->init;
	c->dt = w->init->dtype;
	/* [..., K, N]: the merged weight concatenates each of its numel / N
	 * rows */
	c->n = w->init->dims[w->init->rank - 1];
	c->k = c->n ? tpf_tensor_numel(w->init) / c->n : 0;
	if (!c->n || c->k <= 0)
		return (c->why = "the weight is empty"), 0;
	return 1;
}

static int same_group(const struct cand *a, const struct cand *b)
{
	if ((a->dq != NULL) != (b->dq != NULL) || a->dt != b->dt || a->k != b->k ||
	    a->t->rank != b->t->rank)
		return 0;
	for (int i = 0; i + 1 < a->t->rank; i++)
		if (a->t->dims[i] != b->t->dims[i])
			return 0;
	if (a->dq) {
		if (a->scale != b->scale || a->out_dt != b->out_dt || (a->zero != NULL) != (b->zero != NULL))
			return 0;
		if (a->zero && (a->zero->dtype != b->zero->dtype || a->zero->nbytes != b->zero->nbytes ||
		                memcmp(a->zero->data, b->zero->data, a->zero->nbytes)))
			return 0;
	}
	return 1;
}

/* Concatenates the weights of the group's members along N and emits the
 * merged MatMul and the Split before the first member. */
static enum tpf_status merge_group(struct tpf_graph *g, int64_t opset, struct cand *cs, size_t nc,
                                   int group, struct tpf_pass_context *ctx)
{
	enum tpf_status st = TPF_ERR_NOMEM;
	size_t k = 0;
	struct cand *first = NULL;
	int64_t total = 0;

	for (size_t i = 0; i < nc; i++)
		if (cs[i].group == group) {
			if (!first)
				first = &cs[i];
			total += cs[i].n;
			k++;
		}
	/* the group's element size: its first member's, not cs[0]'s (a reader
	 * that is no candidate has no dtype) */
	const size_t esz = tpf_dtype_bits(first->dt) / 8;
	int64_t K = first->k, dims[TPF_MAX_RANK];
	int rank = first->t->rank;
	for (int i = 0; i + 1 < rank; i++)
		dims[i] = first->t->dims[i];
	dims[rank - 1] = total;
	size_t row = (size_t)total * esz;
	int64_t *sizes = tpf_calloc(k, sizeof(int64_t));
	struct tpf_value **outs_old = tpf_calloc(k, sizeof(*outs_old));
	if (!sizes || !outs_old)
		goto out;
	/* the merged weight, filled in place (no second copy of the bytes) */
	char base[160];
	snprintf(base, sizeof(base), "%s.merged", first->w->name);
	const char *wname = tpf_graph_unique_name(g, base);
	struct tpf_value *wv = wname ? tpf_graph_add_initializer(g, wname, first->dt, rank, dims, NULL,
	                                                         (size_t)K * row)
	                             : NULL;
	if (!wv || ((size_t)K * row > 0 && !wv->init->data))
		goto out;
	unsigned char *buf = (unsigned char *)wv->init->data;
	int64_t col = 0;
	size_t j = 0;
	for (size_t i = 0; i < nc; i++) {
		if (cs[i].group != group)
			continue;
		const unsigned char *src = cs[i].t->data;
		size_t w = (size_t)cs[i].n * esz;
		for (int64_t r = 0; r < K; r++)
			memcpy(buf + (size_t)r * row + (size_t)col * esz, src + (size_t)r * w, w);
		col += cs[i].n;
		sizes[j] = cs[i].n;
		outs_old[j++] = cs[i].mm->outputs[0];
	}
	struct tpf_value *rhs = wv;
	char nm[200];
	if (first->dq) {
		struct tpf_value *dq_in[3] = {wv, first->dq->inputs[1],
		                              first->dq->n_inputs > 2 ? first->dq->inputs[2] : NULL};
		snprintf(nm, sizeof(nm), "%s/merged", first->dq->name);
		struct tpf_node *dq = tpf_graph_insert_node(g, first->mm, "", "DequantizeLinear", nm, dq_in,
		                                            dq_in[2] ? 3 : 2, 1, NULL);
		if (!dq)
			goto out;
		for (size_t a = 0; a < first->dq->n_attrs; a++)
			if ((st = tpf_node_add_attr(dq, &first->dq->attrs[a])) != TPF_OK)
				goto out;
		st = TPF_ERR_NOMEM;
		dq->origin_pass = PASS_NAME;
		dq->origin_pattern = "fp8-weights";
		enum tpf_dtype odt = tpf_pattern_dtype(first->dq->outputs[0]);
		tpf_value_set_type(dq->outputs[0], odt, rank, dims);
		rhs = dq->outputs[0];
	}
	struct tpf_value *mm_in[2] = {first->mm->inputs[0], rhs};
	snprintf(nm, sizeof(nm), "%s.merged", outs_old[0]->name);
	const char *oname[1] = {tpf_graph_unique_name(g, nm)};
	if (!oname[0])
		goto out;
	snprintf(nm, sizeof(nm), "%s/merged", first->mm->name);
	struct tpf_node *mm = tpf_graph_insert_node(g, first->mm, "", "MatMul", nm, mm_in, 2, 1, oname);
	if (!mm)
		goto out;
	mm->origin_pass = PASS_NAME;
	mm->origin_pattern = "merged-gemm";
	/* the merged product: the first member's type with the last dim summed */
	const struct tpf_type *t0 = &outs_old[0]->type;
	if (t0->kind == TPF_TYPE_TENSOR && t0->shape.rank > 0) {
		if ((st = tpf_value_copy_type(mm->outputs[0], t0)) != TPF_OK)
			goto out;
		st = TPF_ERR_NOMEM;
		struct tpf_dim *last = &mm->outputs[0]->type.shape.dims[t0->shape.rank - 1];
		last->value = total;
		last->param = NULL;
	}
	struct tpf_value *split_in[2] = {mm->outputs[0], NULL};
	size_t n_split_in = 1;
	if (opset >= 13) {
		const char *sname = tpf_graph_unique_name(g, "merged_split_sizes");
		int64_t kd = (int64_t)k;
		split_in[1] = sname ? tpf_graph_add_initializer(g, sname, TPF_DTYPE_INT64, 1, &kd, sizes,
		                                                k * sizeof(int64_t))
		                    : NULL;
		if (!split_in[1])
			goto out;
		n_split_in = 2;
	}
	snprintf(nm, sizeof(nm), "%s/split", first->mm->name);
	struct tpf_node *sp = tpf_graph_insert_node(g, first->mm, "", "Split", nm, split_in, n_split_in,
	                                            k, NULL);
	if (!sp)
		goto out;
	sp->origin_pass = PASS_NAME;
	sp->origin_pattern = "merged-gemm";
	if (tpf_node_set_attr_int(sp, "axis", -1))
		goto out;
	if (opset < 13 && tpf_node_set_attr_ints(sp, "split", sizes, k))
		goto out;
	/* move the users; erase the old MatMuls, their DequantizeLinears and weights */
	j = 0;
	for (size_t i = 0; i < nc; i++) {
		if (cs[i].group != group)
			continue;
		struct tpf_value *old = outs_old[j], *nw = sp->outputs[j];
		j++;
		const char *oldname = old->name;
		if ((st = tpf_value_copy_type(nw, &old->type)) != TPF_OK ||
		    (st = tpf_value_replace_uses(old, nw)) != TPF_OK ||
		    (st = tpf_graph_erase_node(g, cs[i].mm)) != TPF_OK)
			goto out;
		if (cs[i].dq && (st = tpf_graph_erase_node(g, cs[i].dq)) != TPF_OK)
			goto out;
		if (!tpf_value_use_count(cs[i].w) &&
		    (st = tpf_graph_remove_initializer(g, cs[i].w)) != TPF_OK)
			goto out;
		/* the results keep their names (graph outputs, dumps) */
		if (tpf_value_rename(nw, oldname) == TPF_ERR_NOMEM) {
			st = TPF_ERR_NOMEM;
			goto out;
		}
	}
	if (ctx && ctx->stats) {
		tpf_pass_stats_add(ctx->stats, PASS_NAME, "groups-merged", 1);
		tpf_pass_stats_add(ctx->stats, PASS_NAME, "matmuls-merged", (int64_t)k);
	}
	st = TPF_OK;
out:
	tpf_free(sizes);
	tpf_free(outs_old);
	return st;
}

/* The MatMul readers of x (as the left operand), grouped; merges every
 * group of two or more.  *merged: MatMuls replaced. */
static enum tpf_status merge_readers(struct tpf_graph *g, int64_t opset, struct tpf_value *x,
                                     struct tpf_pass_context *ctx, int *changed)
{
	size_t nc = 0;
	enum tpf_status st = TPF_OK;

	for (size_t u = 0; u < x->n_uses; u++) {
		const struct tpf_use *use = &x->uses[u];
		if (use->index == 0 && use->node && use->node->op == TPF_OP_MATMUL && !use->node->erased)
			nc++;
	}
	if (nc < 2)
		return TPF_OK;
	struct cand *cs = tpf_calloc(nc, sizeof(*cs));
	if (!cs)
		return TPF_ERR_NOMEM;
	/* the members in graph order (the uses list need not be after rewrites) */
	struct tpf_node **mms = tpf_calloc(nc, sizeof(*mms));
	if (!mms) {
		tpf_free(cs);
		return TPF_ERR_NOMEM;
	}
	size_t nm = 0;
	for (size_t u = 0; u < x->n_uses; u++) {
		const struct tpf_use *use = &x->uses[u];
		if (use->index != 0 || !use->node || use->node->op != TPF_OP_MATMUL || use->node->erased)
			continue;
		/* a MatMul that reads x twice (x @ x) is listed once */
		int dup = 0;
		for (size_t i = 0; i < nm; i++)
			dup |= mms[i] == use->node;
		if (!dup)
			mms[nm++] = use->node;
	}
	for (size_t i = 1; i < nm; i++)
		for (size_t j = i; j > 0 && mms[j]->mark < mms[j - 1]->mark; j--) {
			struct tpf_node *t = mms[j];
			mms[j] = mms[j - 1];
			mms[j - 1] = t;
		}
	nc = nm;
	for (size_t i = 0; i < nc; i++) {
		cs[i].mm = mms[i];
		cs[i].group = -1;
		if (mms[i]->n_inputs == 2 && mms[i]->inputs[1] == x)
			cs[i].why = "it multiplies the input by itself";
		else
			weight_of(&cs[i]);
	}
	tpf_free(mms);
	int groups = 0;
	for (size_t i = 0; i < nc; i++) {
		if (!cs[i].w || cs[i].group >= 0)
			continue;
		size_t members = 1;
		for (size_t j = i + 1; j < nc; j++)
			if (cs[j].w && cs[j].group < 0 && same_group(&cs[i], &cs[j]))
				members++;
		if (members < 2)
			continue;
		cs[i].group = groups;
		for (size_t j = i + 1; j < nc; j++)
			if (cs[j].w && cs[j].group < 0 && same_group(&cs[i], &cs[j]))
				cs[j].group = groups;
		groups++;
	}
	for (size_t i = 0; i < nc; i++) {
		if (cs[i].group >= 0)
			continue;
		if (!cs[i].why) {
			snprintf(cs[i].buf, sizeof(cs[i].buf),
			         "no sibling MatMul of '%s' has a weight of the same dtype, K%s "
			         "(weight %s [%s%" PRId64 ", %" PRId64 "])",
			         x->name, cs[i].dq ? ", FP8 scale and zero point" : " and batch dims",
			         tpf_dtype_name(cs[i].dt), cs[i].t->rank > 2 ? "..., " : "",
			         cs[i].t->dims[cs[i].t->rank - 2], cs[i].n);
			cs[i].why = cs[i].buf;
		}
		explain(ctx, cs[i].mm, cs[i].why);
	}
	for (int gi = 0; gi < groups && st == TPF_OK; gi++) {
		st = merge_group(g, opset, cs, nc, gi, ctx);
		if (st == TPF_OK)
			*changed = 1;
	}
	tpf_free(cs);
	return st;
}

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	struct tpf_graph *g = m->graph;
	enum tpf_status st = TPF_OK;
	int64_t opset = tpf_model_opset(m, "");

	*changed = 0;
	if (opset < 0)
		opset = tpf_model_opset(m, "ai.onnx");
	/* positions for ordering the members */
	uint32_t pos = 0;
	for (struct tpf_node *n = g->first; n; n = n->next)
		n->mark = pos++;
	/* the left operands of the MatMuls, each once, in graph order */
	size_t nv = 0;
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == TPF_OP_MATMUL)
			nv++;
	struct tpf_value **xs = tpf_calloc(nv ? nv : 1, sizeof(*xs));
	if (!xs)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", PASS_NAME);
	nv = 0;
	for (struct tpf_node *n = g->first; n; n = n->next) {
		if (n->op != TPF_OP_MATMUL || n->n_inputs < 1 || !n->inputs[0])
			continue;
		int seen = 0;
		for (size_t i = 0; i < nv && !seen; i++)
			seen = xs[i] == n->inputs[0];
		if (!seen)
			xs[nv++] = n->inputs[0];
	}
	for (size_t i = 0; i < nv && st == TPF_OK; i++)
		st = merge_readers(g, opset, xs[i], ctx, changed);
	tpf_free(xs);
	if (st == TPF_OK && *changed)
		st = tpf_graph_toposort(g, d);
	if (st == TPF_ERR_NOMEM)
		tpf_diag_add(d, TPF_SEV_ERROR, "%s: out of memory", PASS_NAME);
	return st;
}

const struct tpf_pass tpf_pass_merge_parallel_matmuls = {
    .name = PASS_NAME,
    .summary = "sibling MatMuls of one input with constant weights into one GEMM and a Split",
    .run = run,
    .counters = counters,
};
