/* SPDX-License-Identifier: MIT */
/*
 * fuzz-shard: a model as `tpfuse shard` brings it, split for tensor
 * parallelism.
 *
 * Input: byte 0 says how, the rest is the model (ONNX bytes).
 *   bits 0-1  the world size is 1 + these bits (1 to 4)
 *   bit  2    --vocab-parallel-embedding
 *
 *   load from memory -> what `tpfuse shard` asks of its input (verify,
 *   shape inference without an error, verify again) -> tpf_shard_create ->
 *   for every rank: tpf_shard_rank, then the rank graph is verified,
 *   its shapes inferred, verified again, exported, reloaded and verified
 *
 * Besides crashes, leaks and undefined behaviour (shape arithmetic at the
 * ends of int64 included), a finding (abort()) is a broken promise: a rank
 * graph that tpf_shard_rank returned OK for must verify, infer without an
 * error and verify with the inferred types (docs/cli.md: the rank graphs
 * pass `tpfuse optimize` like any other model), and export to ONNX that
 * loads and verifies.  Work is bounded: at most MAX_NODES nodes.
 * TPF_FUZZ_VERBOSE=1 prints the model and why an input went no further.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "fuzz-common.h"

#define MAX_NODES 512

static void note(const char *what, const struct tpf_diag *d)
{
	if (!getenv("TPF_FUZZ_VERBOSE"))
		return;
	fprintf(stderr, "---- %s\n", what);
	if (d)
		tpf_diag_print(d, stderr);
}

/* The input check of `tpfuse shard` (and `tpfuse check`): 0 when m is valid. */
static int valid_input(struct tpf_model *m, struct tpf_diag *d)
{
	size_t errors = d->error_count;

	return tpf_model_verify(m, d) == TPF_OK && tpf_model_infer_shapes(m, d) == TPF_OK &&
	       tpf_model_verify(m, d) == TPF_OK && d->error_count == errors ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tpf_shard_options o = {0};
	struct tpf_model *m = NULL;
	struct tpf_shard *sh = NULL;
	struct tpf_diag *d;
	enum tpf_status st;

	if (size < 1)
		return 0;
	o.world_size = 1 + (data[0] & 3);
	o.vocab_parallel_embedding = (data[0] >> 2) & 1;
	d = tpf_diag_create();
	if (!d)
		return 0;
	d->max_entries = 64;
	if (tpf_model_load_memory(data + 1, size - 1, NULL, NULL, &m, d) != TPF_OK) {
		note("load", d);
		goto out;
	}
	if (m->graph->n_nodes > MAX_NODES || valid_input(m, d)) {
		note("not a valid model", d);
		goto out;
	}
	fuzz_print(m);
	st = tpf_shard_create(m, &o, &sh, d);
	note(st ? "shard_create failed" : "shard_create", d);
	if (st)
		goto out;
	for (int r = 0; r < o.world_size; r++) {
		tpf_diag_clear(d);
		st = tpf_shard_rank(sh, r, d);
		if (st) {
			/* the same structure on every rank: one failing, the next may not
			 * be tried (as `tpfuse shard` stops) */
			note("shard_rank failed", d);
			break;
		}
		fuzz_print(m);
		if ((st = tpf_model_verify(m, d)))
			fuzz_fail("a rank graph shard returned does not verify", st, d);
		st = tpf_model_infer_shapes(m, d);
		if (st || d->error_count)
			fuzz_fail("a rank graph shard returned has shapes that do not infer", st, d);
		if ((st = tpf_model_verify(m, d)))
			fuzz_fail("a rank graph shard returned does not verify with its inferred types", st, d);
		fuzz_check_export(m);
	}
out:
	tpf_shard_free(sh);
	tpf_model_free(m);
	tpf_diag_free(d);
	return 0;
}
