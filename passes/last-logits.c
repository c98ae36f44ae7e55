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
 * its 32 layers' 30, and 525 MB of bfloat16 logits a sequence).  This pass
 * walks back from `logits` through the position-wise chain that makes it
 * (MatMul by a constant 2-D weight, normalizations over the last axis,
 * Cast, unary math and arithmetic with constants that broadcast over the
 * positions, a vocabulary-parallel lm_head's AllGather along the last axis,
 * an AllReduce), as far as each value there has that one use, and slices the
 * chain's input to its last position:
 *
 *   x [batch, sequence, hidden] -> Slice(x, starts [-1], ends [max], axes [1])
 *
 * so the chain and the output are [batch, 1, ...].  Run before
 * greedy-next-token (next_token is then [batch, 1]).  The outputs of a
 * call of one position (a decode step) do not change.  Refused, with a
 * near-miss reason: no KV-cache I/O, no `logits` output, logits not of rank
 * 3, or no position-wise producer.
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

/* Node n (one output) is position-wise in its input `in` (the chain's
 * value): its output at a position depends on that position of `in` only,
 * and every other input is a constant that does not vary by position. */
static int position_wise(const struct tpf_node *n, size_t in)
{
	if (n->n_outputs != 1 || in != 0)
		return 0;
	if (is(n, "", "MatMul")) {
		const struct tpf_value *w = n->inputs[1];
		return n->n_inputs == 2 && w && tpf_value_constant(w) && w->type.shape.rank == 2;
	}
	static const char *const unary[] = {"Cast", "Tanh", "Identity", "Relu", "Sigmoid", "Neg", NULL};
	for (size_t k = 0; unary[k]; k++)
		if (is(n, "", unary[k]))
			return n->n_inputs == 1;
	static const char *const binary[] = {"Mul", "Div", "Add", "Sub", NULL};
	for (size_t k = 0; binary[k]; k++)
		if (is(n, "", binary[k]))
			return n->n_inputs == 2 && broadcasts(n->inputs[1]);
	/* a vocabulary-parallel lm_head's gather along the last axis (every
	 * rank slices alike), an all-reduce (elementwise across ranks) */
	if (is(n, "com.microsoft", "AllGather") || is(n, "ai.tpfuse", "AllGather")) {
		int64_t ax = tpf_node_attr_int(n, "axis", 0);
		int r = n->inputs[0] ? n->inputs[0]->type.shape.rank : -1;
		return n->n_inputs == 1 && r > 1 && (ax == -1 || ax == r - 1);
	}
	if (is(n, "com.microsoft", "AllReduce") || is(n, "ai.tpfuse", "AllReduce"))
		return n->n_inputs == 1;
	/* normalizations over the last axis, their scale (and bias) constants */
	if (is(n, "", "RMSNormalization") || is(n, "", "LayerNormalization") ||
	    is(n, "com.microsoft", "SimplifiedLayerNormalization")) {
		if (tpf_node_attr_int(n, "axis", -1) != -1)
			return 0;
		for (size_t i = 1; i < n->n_inputs; i++)
			if (n->inputs[i] && !broadcasts(n->inputs[i]))
				return 0;
		return 1;
	}
	return 0;
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
	struct tpf_node *chain[64];
	size_t n_chain = 0;
	if (tpf_kv_io_find(g, &io, quiet)) {
		snprintf(why, sizeof(why), "no KV-cache I/O (%s)", quiet->count ? quiet->entries[0].text : "?");
	} else if (io.logits < 0) {
		snprintf(why, sizeof(why), "no output 'logits'");
	} else if (g->outputs[io.logits]->type.shape.rank != 3) {
		snprintf(why, sizeof(why), "output 'logits' is not of rank 3 ([batch, sequence, vocab])");
	} else {
		/* back from logits while the producer is position-wise and its
		 * output has no other use (the logits: only the output slot) */
		struct tpf_value *v = g->outputs[io.logits];
		while (n_chain < sizeof(chain) / sizeof(chain[0]) && v->kind == TPF_VALUE_NODE_OUTPUT && v->producer &&
		       position_wise(v->producer, 0) && v->type.shape.rank == 3 &&
		       tpf_value_use_count(v) == 1 && (n_chain || v->n_output_refs == 1)) {
			struct tpf_value *x = v->producer->inputs[0];
			if (!x || x->type.shape.rank != 3)
				break;
			chain[n_chain++] = v->producer;
			v = x;
		}
		if (!n_chain)
			snprintf(why, sizeof(why), "the producer of 'logits' (%s) is not a position-wise op of it",
				 g->outputs[io.logits]->producer ? g->outputs[io.logits]->producer->op_type
								 : "a graph input or initializer");
	}
	if (n_chain) {
		/* Slice the top node's input x to its last position */
		struct tpf_node *top = chain[n_chain - 1];
		struct tpf_value *x = top->inputs[0];
		static const int64_t one = 1;
		const int64_t starts = -1, ends = INT64_MAX, axes = 1;
		struct tpf_value *c[3] = {
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_starts"), TPF_DTYPE_INT64, 1,
					      &one, &starts, sizeof(starts)),
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_ends"), TPF_DTYPE_INT64, 1,
					      &one, &ends, sizeof(ends)),
		    tpf_graph_add_initializer(g, tpf_graph_unique_name(g, "last_position_axes"), TPF_DTYPE_INT64, 1,
					      &one, &axes, sizeof(axes))};
		struct tpf_value *ins[4] = {x, c[0], c[1], c[2]};
		const char *out_name = tpf_graph_unique_name(g, "last_position");
		struct tpf_node *sl = c[0] && c[1] && c[2]
					      ? tpf_graph_add_node(g, "", "Slice", tpf_graph_unique_name(g, "last_position_slice"),
								   ins, 4, 1, (const char *const[]){out_name})
					      : NULL;
		if (!sl) {
			st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		} else {
			sl->origin_pass = PASS_NAME;
			sl->origin_pattern = "last-position";
			/* the Slice goes right before the chain's top node */
			tpf_graph_move_node_before(g, sl, top);
			if (!(st = tpf_value_copy_type(sl->outputs[0], &x->type)) && !(st = one_position(sl->outputs[0])) &&
			    !(st = tpf_node_set_input(top, 0, sl->outputs[0]))) {
				for (size_t i = 0; i < n_chain && !st; i++)
					st = one_position(chain[i]->outputs[0]);
				if (!st && !(st = tpf_graph_infer_shapes(g, m, d))) {
					*changed = 1;
					if (ctx && ctx->stats) {
						tpf_pass_stats_add(ctx->stats, PASS_NAME, "outputs-sliced", 1);
						tpf_pass_stats_add(ctx->stats, PASS_NAME, "nodes-per-position",
								   (int64_t)n_chain);
					}
				}
			}
		}
	}
	if (!st && why[0] && ctx && ctx->explain)
		fprintf(ctx->explain, "near-miss: %s: %s\n", PASS_NAME, why);
	tpf_diag_free(quiet);
	tpf_kv_io_release(&io);
	return st;
}

static const char *const last_counters[] = {"outputs-sliced", "nodes-per-position", NULL};

const struct tpf_pass tpf_pass_last_position_logits = {
	.name = PASS_NAME,
	.summary = "output logits [batch, sequence, vocab] computed for the last position only ([batch, 1, "
		   "vocab]): the final norm and vocabulary projection of a prompt run once a sequence",
	.run = run_last,
	.counters = last_counters,
};
