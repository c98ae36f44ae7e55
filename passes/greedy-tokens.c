/* SPDX-License-Identifier: MIT */
/*
 * greedy-next-token: a language model that gives its next token's id, not
 * the logits over its vocabulary.
 *
 * A model with KV-cache I/O (tpf_kv_io_find) outputs `logits` [batch,
 * sequence, vocab].  A greedy generator reads only the largest logit of
 * each sequence's last position, yet every step copies all of them to the
 * host (batch x vocab values: 2 MiB at batch 8 of a 128,256-token
 * vocabulary in bfloat16) and scans them there.  This pass replaces the
 * output by
 *
 *   next_token = ArgMax(logits) {axis = -1, keepdims = 0}   (int64 [batch, sequence])
 *
 * so the step's largest logit is found on the device and the host receives
 * batch x sequence ids.  Ties go to the smaller id, as the generator's own
 * scan.  The logits are then no output: sampling and suppressed ids need
 * them, so a generator refuses this model for those (tpfuse generate runs
 * the pass only for greedy generation without --suppress).  Refused, with a
 * near-miss reason: no KV-cache I/O, or no `logits` output (a model already
 * rewritten).
 */
#include <stdio.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "greedy-next-token"

static enum tpf_status run_greedy(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
				  struct tpf_diag *d)
{
	struct tpf_graph *g = m->graph;
	struct tpf_kv_io io;
	struct tpf_diag *quiet = tpf_diag_create();
	if (!quiet)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = TPF_OK;
	char why[320] = "";
	if (tpf_kv_io_find(g, &io, quiet)) {
		snprintf(why, sizeof(why), "no KV-cache I/O (%s)", quiet->count ? quiet->entries[0].text : "?");
	} else if (io.logits < 0) {
		snprintf(why, sizeof(why), "no output 'logits' (the model gives 'next_token' already)");
	} else {
		struct tpf_value *lg = g->outputs[io.logits];
		struct tpf_node *am = tpf_graph_add_node(g, "", "ArgMax", tpf_graph_unique_name(g, "next_token_argmax"),
							 &lg, 1, 1, (const char *const[]){"next_token"});
		if (!am || tpf_node_set_attr_int(am, "axis", -1) || tpf_node_set_attr_int(am, "keepdims", 0)) {
			st = tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		} else {
			am->origin_pass = PASS_NAME;
			am->origin_pattern = "next-token";
			const struct tpf_shape *sh = &lg->type.shape;
			struct tpf_type t = {.kind = lg->type.kind, .dtype = TPF_DTYPE_INT64,
					     .shape = {.rank = 2, .dims = sh->dims}};
			if (!(st = tpf_value_copy_type(am->outputs[0], &t)) &&
			    !(st = tpf_graph_set_output(g, (size_t)io.logits, am->outputs[0])) &&
			    !(st = tpf_graph_infer_shapes(g, m, d))) {
				*changed = 1;
				if (ctx && ctx->stats)
					tpf_pass_stats_add(ctx->stats, PASS_NAME, "outputs-replaced", 1);
			}
		}
	}
	if (!st && why[0] && ctx && ctx->explain)
		fprintf(ctx->explain, "near-miss: %s: %s\n", PASS_NAME, why);
	tpf_diag_free(quiet);
	tpf_kv_io_release(&io);
	return st;
}

static const char *const greedy_counters[] = {"outputs-replaced", NULL};

const struct tpf_pass tpf_pass_greedy_next_token = {
	.name = PASS_NAME,
	.summary = "output logits [batch, sequence, vocab] replaced by next_token = ArgMax(logits) (int64 "
		   "[batch, sequence]): a greedy generator reads token ids, not the vocabulary's logits",
	.run = run_greedy,
	.counters = greedy_counters,
};
