/* SPDX-License-Identifier: MIT */
/*
 * fuzz-strategy: bytes as a collective strategy table, the text that
 * `tpfuse tune -o FILE` writes and `tpfuse run --strategy-table FILE` or
 * TPF_STRATEGY_TABLE reads (runtime/strategy.c).
 *
 * Besides crashes, leaks and undefined behaviour, the target aborts when
 * the parser breaks a promise: a table it accepts holds only rows in range,
 * prints to a text that parses to the same rows, and gives every call a
 * path; a table it refuses is not returned and has its message.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-common.h"
#include "tpf-runtime.h"

static int row_ok(const struct tpf_strategy_row *r)
{
	return r->world >= 1 && r->world <= 1024 && r->kind >= 0 && r->kind < TPF_COLL_KINDS && r->hidden > 0 &&
	       (r->max_tokens == -1 || r->max_tokens > 0) && r->path >= TPF_PATH_NCCL && r->path <= TPF_PATH_TWOSHOT;
}

static void check_choices(const struct tpf_strategy_table *t, struct tpf_diag *d)
{
	static const int worlds[] = {1, 2, 3, 4, 8};
	static const int64_t hiddens[] = {1, 7, 4096, 1 << 20};
	static const int64_t tokens[] = {0, 1, 5, 129, (int64_t)1 << 40};
	for (size_t w = 0; w < sizeof(worlds) / sizeof(*worlds); w++)
		for (int k = 0; k < TPF_COLL_KINDS; k++)
			for (size_t h = 0; h < sizeof(hiddens) / sizeof(*hiddens); h++)
				for (size_t n = 0; n < sizeof(tokens) / sizeof(*tokens); n++) {
					enum tpf_coll_path p = tpf_strategy_choose(t, worlds[w], (enum tpf_coll_kind)k,
										   hiddens[h], tokens[n], 2);
					if (p < TPF_PATH_NCCL || p > TPF_PATH_TWOSHOT)
						fuzz_fail("a call got no path", TPF_ERR_INVALID, d);
				}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > (1u << 16))
		return 0;
	char *text = malloc(size + 1);
	struct tpf_diag *d = tpf_diag_create();
	if (!text || !d) {
		free(text);
		tpf_diag_free(d);
		return 0;
	}
	memcpy(text, data, size);
	text[size] = 0;
	struct tpf_strategy_table *t = NULL, *back = NULL;
	enum tpf_status st = tpf_strategy_parse(text, "fuzz.txt", &t, d);
	if (st != TPF_OK) {
		if (t)
			fuzz_fail("a refused table was returned", st, d);
		if (st != TPF_ERR_NOMEM && (!d->count || !strstr(d->entries[0].text, "fuzz.txt")))
			fuzz_fail("a refused table has no message naming its file", st, d);
		goto out;
	}
	if (!t)
		fuzz_fail("an accepted table is missing", st, d);
	for (size_t i = 0; i < t->n; i++)
		if (!row_ok(&t->rows[i]))
			fuzz_fail("an accepted row is out of range", TPF_ERR_INVALID, d);
	check_choices(t, d);

	/* printed, it parses to the same rows */
	char *printed = NULL;
	size_t plen = 0;
	FILE *f = open_memstream(&printed, &plen);
	if (!f)
		goto out;
	tpf_strategy_print(t, f);
	fclose(f);
	st = tpf_strategy_parse(printed, "printed.txt", &back, d);
	if (st == TPF_OK) {
		if (back->n != t->n)
			fuzz_fail("the printed table has another row count", TPF_ERR_INVALID, d);
		for (size_t i = 0; i < t->n; i++) {
			const struct tpf_strategy_row *a = &t->rows[i], *b = &back->rows[i];
			if (a->world != b->world || a->kind != b->kind || a->hidden != b->hidden ||
			    a->max_tokens != b->max_tokens || a->path != b->path)
				fuzz_fail("a printed row parses to another row", TPF_ERR_INVALID, d);
		}
	} else if (st != TPF_ERR_NOMEM) {
		fuzz_fail("the printed table does not parse", st, d);
	}
	free(printed);
out:
	tpf_strategy_free(back);
	tpf_strategy_free(t);
	tpf_diag_free(d);
	free(text);
	return 0;
}
