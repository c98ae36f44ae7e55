/* SPDX-License-Identifier: MIT */
/*
 * fuzz-text: a text model (`.tpf`, the text dump docs/cli.md describes) as
 * a user brings it to `tpfuse check` or `tpfuse optimize`.
 *
 *   tpf_model_parse_text -> print (text and DOT) -> verify -> shape
 *   inference -> verify again -> the text printed, parsed and printed once
 *   more -> export to ONNX, reload, verify
 *
 * Besides crashes, leaks and undefined behaviour, a finding (abort()) is a
 * broken promise:
 *   - a text model that parses and verifies (with its inferred types too)
 *     must export to ONNX that loads and verifies: the text reader holds
 *     models to the ONNX importer's rules (names, external locations);
 *   - the dump of a model read from text must parse again, and print the
 *     same bytes.
 * Read from memory, external and "not loaded" tensors come without data:
 * such a model's export refers to files the importer would have to find,
 * so it is not exported here.  Models whose tensors hold more than
 * MAX_EXPORT_BYTES are not exported either (the reader allows 64 MiB of
 * tensors given by size only).  TPF_FUZZ_VERBOSE=1 prints the model and
 * the reader's messages.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-common.h"

#define MAX_EXPORT_BYTES ((size_t)1 << 20)

/* Bytes of the tensors of g (initializers, attribute tensors, subgraphs);
 * *no_data set when one of them has bytes but no data. */
static void tensor_bytes(const struct tpf_graph *g, size_t *total, int *no_data, int depth)
{
	if (!g || depth > 64)
		return;
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_tensor *t = g->initializers[i] ? g->initializers[i]->init : NULL;
		if (!t)
			continue;
		*total += t->nbytes;
		*no_data |= t->nbytes && !t->data && t->dtype != TPF_DTYPE_STRING;
	}
	for (const struct tpf_node *n = g->first; n; n = n->next)
		for (size_t a = 0; a < n->n_attrs; a++) {
			const struct tpf_attr *at = &n->attrs[a];
			if (at->kind == TPF_ATTR_TENSOR && at->t) {
				*total += at->t->nbytes;
				*no_data |= at->t->nbytes && !at->t->data && at->t->dtype != TPF_DTYPE_STRING;
			}
			for (size_t k = 0; at->kind == TPF_ATTR_TENSORS && k < at->n; k++) {
				const struct tpf_tensor *t = at->tensors[k];
				if (!t)
					continue;
				*total += t->nbytes;
				*no_data |= t->nbytes && !t->data && t->dtype != TPF_DTYPE_STRING;
			}
		}
	for (size_t i = 0; i < g->n_children; i++)
		tensor_bytes(g->children[i], total, no_data, depth + 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st;
	size_t bytes = 0;
	int no_data = 0;

	if (!d)
		return 0;
	d->max_entries = 64;
	st = tpf_model_parse_text((const char *)data, size, "fuzz", &m, d);
	if (getenv("TPF_FUZZ_VERBOSE")) {
		fprintf(stderr, "---- parse: %s\n", tpf_status_name(st));
		tpf_diag_print(d, stderr);
	}
	if (st)
		goto out;
	fuzz_print(m);
	fuzz_check_reprint(m, 1);
	size_t errors = d->error_count;
	if (tpf_model_verify(m, d) || tpf_model_infer_shapes(m, d) || tpf_model_verify(m, d) ||
	    d->error_count != errors)
		goto out;
	fuzz_print(m);
	tensor_bytes(m->graph, &bytes, &no_data, 0);
	for (size_t i = 0; i < m->n_functions; i++)
		tensor_bytes(m->functions[i].body, &bytes, &no_data, 0);
	if (no_data || bytes > MAX_EXPORT_BYTES)
		goto out;
	fuzz_check_export(m);
out:
	tpf_model_free(m);
	tpf_diag_free(d);
	return 0;
}
