/* SPDX-License-Identifier: MIT */
/*
 * last-position-logits: a language model that computes its logits for the
 * last position of the call only.
 *
 * A model with KV-cache I/O (tpf_kv_io_find) outputs `logits` [batch,
 * sequence, vocab], one row per position of the call, yet a generator reads
 * only each sequence's last (the prompts are left-padded, so the last
 * position is every sequence's last token).  For a prompt that is most of
 * the work after the layers: the final norm and the vocabulary projection
 * of every position (Llama-3-8B, a prompt of 2,048 tokens: 2.15 TFLOP of
 * its 32 layers' 30, and 525 MB of bfloat16 logits a sequence), and of a
 * model of few layers most of its last layer after the attention.  This
 * pass takes the position-wise cone of `logits`: its producer and, back
 * from it, every position-wise node (MatMul by a constant 2-D weight,
 * normalizations over the last axis with their residual input and output,
 * the gated activation, Cast, unary math and arithmetic whose constants
 * broadcast over the positions, a vocabulary-parallel lm_head's AllGather
 * along the last axis, an AllReduce) whose outputs only nodes of the cone
 * use.  Each value that enters the cone from outside (the attention's
 * output, the residual stream) is sliced to its last position:
 *
 *   x [batch, sequence, hidden] -> Slice(x, starts [-1], ends [max], axes [1])
 *
 * so the cone's values and the output are [batch, 1, ...].  Run before
 * greedy-next-token (next_token is then [batch, 1]).  The outputs of a
 * call of one position (a decode step) do not change.  Refused, with a
 * near-miss reason: no KV-cache I/O, no `logits` output, logits not of rank
 * 3 or already of one position (this pass's own output: a second run
 * changes nothing), or no position-wise producer.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "last-position-logits"

/* A constant input that broadcasts over the positions: a scalar or a
 * vector along the last axis. */
static int broadcasts(const struct tpf_value *c)
{
	if (!c || !tpf_value_constant(c))
		return 0;
	int r = c->type.shape.rank;
	return r >= 0 && r <= 1;
}

static int is(const struct tpf_node *n, const char *domain, const char *op)
{
	return !strcmp(n->domain ? n->domain : "", domain) && !strcmp(n->op_type, op);
}

/* A value indexed by position like the logits: rank 3, dim 1 the
 * sequence. */
static int by_position(const struct tpf_graph *g, const struct tpf_value *v, const struct tpf_dim *seq)
{
	return v && v->type.shape.rank == 3 && tpf_graph_dims_equal(g, &v->type.shape.dims[1], seq) == TPF_ANSWER_YES;
}

/* Node n is position-wise: its outputs at a position depend on that
 * position of its inputs only.  Its constant inputs do not vary by
 * position (a 2-D weight on the right of a MatMul, scalars and vectors
 * along the last axis elsewhere); every other input and every output is
 * indexed by position (by_position).  The op kinds: MatMul by a constant
 * weight, Cast and unary math, arithmetic, normalizations over the last
 * axis (ai.tpfuse.RMSNorm with its residual input and output too), the
 * gated activation, a vocabulary-parallel lm_head's AllGather along the
 * last axis and an AllReduce (every rank slices alike; the reduction is
 * elementwise across ranks). */
static int position_wise(const struct tpf_graph *g, const struct tpf_node *n, const struct tpf_dim *seq)
{
	size_t max_out = 1;
	/* the inputs that must be constants that broadcast (bit i), and those
	 * that may be either such a constant or indexed by position */
	unsigned constant = 0, any = 0;
	if (is(n, "", "MatMul")) {
		const struct tpf_value *w = n->n_inputs == 2 ? n->inputs[1] : NULL;
		if (!w || !tpf_value_constant(w) || w->type.shape.rank != 2)
			return 0;
		if (!by_position(g, n->inputs[0], seq) || tpf_value_constant(n->inputs[0]))
			return 0;
		goto outputs;
	}
	static const char *const unary[] = {"Cast", "Tanh", "Identity", "Relu", "Sigmoid", "Neg", NULL};
	static const char *const binary[] = {"Mul", "Div", "Add", "Sub", NULL};
	int known = 0;
	for (size_t k = 0; unary[k] && !known; k++)
		known = is(n, "", unary[k]) && n->n_inputs == 1;
	for (size_t k = 0; binary[k] && !known; k++)
		if (is(n, "", binary[k]) && n->n_inputs == 2)
			known = 1, any = 3;
	if (!known && (is(n, "com.microsoft", "AllGather") || is(n, "ai.tpfuse", "AllGather"))) {
		int64_t ax = tpf_node_attr_int(n, "axis", 0);
		known = n->n_inputs == 1 && (ax == -1 || ax == 2);
	}
	if (!known && (is(n, "com.microsoft", "AllReduce") || is(n, "ai.tpfuse", "AllReduce")))
		known = n->n_inputs == 1;
	if (!known && (is(n, "", "RMSNormalization") || is(n, "", "LayerNormalization") ||
		       is(n, "com.microsoft", "SimplifiedLayerNormalization"))) {
		known = n->n_inputs >= 2 && n->n_inputs <= 3 && tpf_node_attr_int(n, "axis", -1) == -1;
		constant = n->n_inputs == 3 ? 6 : 2;
	}
	if (!known && is(n, "ai.tpfuse", "RMSNorm")) {
		/* (x, scale[, residual]) -> y[, x + residual] */
		known = n->n_inputs >= 2 && n->n_inputs <= 3 && tpf_node_attr_int(n, "axis", -1) == -1;
		constant = 2;
		max_out = 2;
	}
	if (!known && is(n, "ai.tpfuse", "GatedActivation"))
		known = n->n_inputs >= 1 && n->n_inputs <= 2;
	if (!known)
		return 0;
	int position_inputs = 0;
	for (size_t i = 0; i < n->n_inputs; i++) {
		const struct tpf_value *v = n->inputs[i];
		if (!v)
			return 0;
		int must_const = (constant >> i) & 1u, may_const = (any >> i) & 1u;
		if (must_const || (may_const && tpf_value_constant(v))) {
			if (!broadcasts(v))
				return 0;
		} else if (tpf_value_constant(v) || !by_position(g, v, seq)) {
			return 0;
		} else {
			position_inputs++;
		}
	}
	if (!position_inputs)
		return 0;
outputs:
	if (n->n_outputs < 1 || n->n_outputs > max_out)
		return 0;
	for (size_t i = 0; i < n->n_outputs; i++)
		if (n->outputs[i] && !by_position(g, n->outputs[i], seq))
			return 0;
	return 1;
}

/* The value with its dim 1 made 1 (a static size). */
static enum tpf_status one_position(struct tpf_value *v)
{
	const struct tpf_shape *sh = &v->type.shape;
	if (sh->rank < 2)
		return TPF_OK;
	struct tpf_dim dims[TPF_MAX_RANK];
	if (sh->rank > TPF_MAX_RANK)
		return TPF_ERR_INVALID;
	memcpy(dims, sh->dims, (size_t)sh->rank * sizeof(dims[0]));
	dims[1] = (struct tpf_dim){.value = 1};
	struct tpf_type t = v->type;
	t.shape.dims = dims;
	return tpf_value_copy_type(v, &t);
}

/* Marks (node->mark = 1) the position-wise cone of `logits`: its producer
 * and, walking back in graph order, every position-wise node whose outputs
 * are used only by marked nodes (and are no graph outputs).  Returns how
 * many were marked. */
static size_t mark_cone(struct tpf_graph *g, struct tpf_value *logits, const struct tpf_dim *seq)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		n->mark = 0;
	struct tpf_node *top = logits->producer;
	size_t count = 0;
	for (struct tpf_node *n = top; n; n = n->prev) {
		if (!position_wise(g, n, seq))
			continue;
		int used = n == top, ok = 1;
		for (size_t i = 0; i < n->n_outputs && ok; i++) {
			const struct tpf_value *o = n->outputs[i];
			if (!o)
				continue;
			if (o == logits) /* the output slot alone (checked by the caller) */
				continue;
			ok = !o->n_output_refs;
			for (size_t u = 0; u < o->n_uses && ok; u++)
				ok = o->uses[u].index >= 0 && o->uses[u].node->mark;
			used |= o->n_uses > 0;
		}
		if (ok && used) {
			n->mark = 1;
			count++;
		}
	}
	return count;
}

enum { MAX_FRONTIER = 32 };

static enum tpf_status run_last(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				struct tpf_diag *d)
{
	struct tpf_graph *g = m->graph;
	struct tpf_kv_io io;
	struct tpf_diag *quiet = tpf_diag_create();
	if (!quiet)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = TPF_OK;
	char why[320] = "";
	size_t n_cone = 0, n_front = 0;
	struct tpf_value *front[MAX_FRONTIER];
	if (tpf_kv_io_find(g, &io, quiet)) {
		snprintf(why, sizeof(why), "no KV-cache I/O (%s)", quiet->count ? quiet->entries[0].text : "?");
	} else if (io.logits < 0) {
		snprintf(why, sizeof(why), "no output 'logits'");
	} else if (g->outputs[io.logits]->type.shape.rank != 3) {
		snprintf(why, sizeof(why), "output 'logits' is not of rank 3 ([batch, sequence, vocab])");
	} else if (g->outputs[io.logits]->type.shape.dims[1].value == 1 &&
		   !g->outputs[io.logits]->type.shape.dims[1].param) {
		snprintf(why, sizeof(why), "output 'logits' is already of one position ([batch, 1, vocab])");
	} else {
		struct tpf_value *lg = g->outputs[io.logits];
		const struct tpf_dim seq = lg->type.shape.dims[1];
		if (lg->kind == TPF_VALUE_NODE_OUTPUT && lg->producer && lg->n_output_refs == 1 && !lg->n_uses)
			n_cone = mark_cone(g, lg, &seq);
		if (!n_cone || !lg->producer->mark) {
			n_cone = 0;
			snprintf(why, sizeof(why), "the producer of 'logits' (%s) is not a position-wise op of it",
				 lg->producer ? lg->producer->op_type : "a graph input or initializer");
		}
		/* the cone's inputs from outside it: each sliced once */
		for (struct tpf_node *n = g->first; n && n_cone && !why[0]; n = n->next) {
			if (!n->mark)
				continue;
			for (size_t i = 0; i < n->n_inputs && !why[0]; i++) {
				struct tpf_value *v = n->inputs[i];
				if (!v || tpf_value_constant(v) || (v->producer && v->producer->mark))
					continue;
				size_t k = 0;
				while (k < n_front && front[k] != v)
					k++;
				if (k < n_front)
					continue;
				if (n_front == MAX_FRONTIER)
					snprintf(why, sizeof(why), "more than %d values enter the logits' position-wise nodes",
						 MAX_FRONTIER);
				else
					front[n_front++] = v;
			}
		}
		if (why[0])
			n_cone = 0;
	}
	if (n_cone) {
		static const int64_t one = 1;
		const int64_t starts = -1, ends = INT64_MAX, axes = 1;
		struct tpf_value *c[3] = {
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_starts"), TPF_DTYPE_INT64, 1,
					      &one, &starts, sizeof(starts)),
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_ends"), TPF_DTYPE_INT64, 1,
					      &one, &ends, sizeof(ends)),
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_axes"), TPF_DTYPE_INT64, 1,
					      &one, &axes, sizeof(axes))};
		struct tpf_value *sliced[MAX_FRONTIER] = {0};
		if (!c[0] || !c[1] || !c[2])
			st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		/* a Slice of each entering value right before its first marked
		 * user, which then reads the slice (as do the later ones) */
		for (struct tpf_node *n = g->first; n && !st; n = n->next) {
			if (!n->mark)
				continue;
			for (size_t i = 0; i < n->n_inputs && !st; i++) {
				size_t k = 0;
				while (k < n_front && front[k] != n->inputs[i])
					k++;
				if (k == n_front)
					continue;
				if (!sliced[k]) {
					struct tpf_value *x = front[k];
					struct tpf_value *ins[4] = {x, c[0], c[1], c[2]};
					const char *out_name = tpf_graph_unique_name(g, "last_position");
					struct tpf_node *sl = tpf_graph_add_node(
					    g, "", "Slice", tpf_graph_unique_name(g, "last_position_slice"), ins, 4, 1,
					    (const char *const[]){out_name});
					if (!sl) {
						st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
						break;
					}
					sl->origin_pass = PASS_NAME;
					sl->origin_pattern = "last-position";
					tpf_graph_move_node_before(g, sl, n);
					if ((st = tpf_value_copy_type(sl->outputs[0], &x->type)) ||
					    (st = one_position(sl->outputs[0])))
						break;
					sliced[k] = sl->outputs[0];
				}
				st = tpf_node_set_input(n, i, sliced[k]);
			}
		}
		for (struct tpf_node *n = g->first; n && !st; n = n->next)
			for (size_t i = 0; n->mark && i < n->n_outputs && !st; i++)
				if (n->outputs[i])
					st = one_position(n->outputs[i]);
		if (!st && !(st = tpf_graph_infer_shapes(g, m, d))) {
			*changed = 1;
			if (ctx && ctx->stats) {
				tpf_pass_stats_add(ctx->stats, PASS_NAME, "outputs-sliced", 1);
				tpf_pass_stats_add(ctx->stats, PASS_NAME, "nodes-per-position", (int64_t)n_cone);
				tpf_pass_stats_add(ctx->stats, PASS_NAME, "inputs-sliced", (int64_t)n_front);
			}
		}
	}
	for (struct tpf_node *n = g->first; n; n = n->next)
		n->mark = 0;
	if (!st && why[0] && ctx && ctx->explain)
		fprintf(ctx->explain, "near-miss: %s: %s\n", PASS_NAME, why);
	tpf_diag_free(quiet);
	tpf_kv_io_release(&io);
	return st;
}

static const char *const last_counters[] = {"outputs-sliced", "nodes-per-position", "inputs-sliced", NULL};

const struct tpf_pass tpf_pass_last_position_logits = {
	.name = PASS_NAME,
	.summary = "output logits [batch, sequence, vocab] computed for the last position only ([batch, 1, "
		   "vocab]): the final norm and vocabulary projection of a prompt run once a sequence",
	.run = run_last,
	.counters = last_counters,
};
