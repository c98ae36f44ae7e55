/* SPDX-License-Identifier: MIT */
/*
 * Collective strategy tables (runtime/strategy.c): the text format (CRLF
 * line endings too), its errors (line numbers, what was expected), the choice of a path by world
 * size, kind, nearest hidden size and token count (scaled to bytes), the
 * FP8 kind's fallback to the plain fused kind, the size rule without rows,
 * and the built-in table's sanity (every kind and hidden it measures has an
 * unbounded row, and one-shot wins at one token).
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"
#include "tpf-runtime.h"

static const char table[] =
	"# world kind hidden max_tokens path\n"
	"2 allreduce-rmsnorm 4096 128 oneshot   # decode\n"
	"2 allreduce-rmsnorm 4096 1024 twoshot\n"
	"2 allreduce-rmsnorm 4096 inf nccl\n"
	"\n"
	"2 allreduce-rmsnorm 8192 16 oneshot\n"
	"2 allreduce-rmsnorm 8192 inf twoshot\n"
	"4 allreduce-rmsnorm 4096 8 oneshot\n"
	"4 allreduce-rmsnorm 4096 inf nccl\n"
	"2 allreduce 4096 2 nccl\n"
	"2 allreduce 4096 inf oneshot\n";

static struct tpf_strategy_table *parse_ok(const char *text)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_strategy_table *t = NULL;
	assert_int_equal(tpf_strategy_parse(text, "t.txt", &t, d), TPF_OK);
	assert_non_null(t);
	tpf_diag_free(d);
	return t;
}

static void test_parse_and_choose(void **state)
{
	(void)state;
	struct tpf_strategy_table *t = parse_ok(table);
	assert_int_equal(t->n, 9);
	assert_int_equal(t->rows[0].world, 2);
	assert_int_equal(t->rows[0].kind, TPF_COLL_ARNORM);
	assert_int_equal(t->rows[0].hidden, 4096);
	assert_int_equal(t->rows[0].max_tokens, 128);
	assert_int_equal(t->rows[0].path, TPF_PATH_ONESHOT);
	assert_int_equal(t->rows[2].max_tokens, -1);

	/* by tokens, at the measured hidden size */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 1, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 128, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 129, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 1024, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 1025, 2), TPF_PATH_NCCL);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 4096, 1 << 20, 2), TPF_PATH_NCCL);
	/* the nearest hidden size: 6000 is nearer 8192 than 4096 in log scale
	 * (25 tokens of 6000 are 18.3 of 8192) */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 8192, 16, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 8192, 17, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 6000, 25, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 6000, 10, 2), TPF_PATH_ONESHOT);
	/* tokens scale with the bytes: 2048 wide, 256 tokens = 128 tokens at 4096 */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 2048, 256, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 2048, 258, 2), TPF_PATH_TWOSHOT);
	/* the world size selects its rows */
	assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ARNORM, 4096, 8, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ARNORM, 4096, 9, 2), TPF_PATH_NCCL);
	/* the FP8 kind falls back to the plain fused kind's rows */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM_FP8, 4096, 500, 1), TPF_PATH_TWOSHOT);
	/* a kind of its own */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ALLREDUCE, 4096, 1, 2), TPF_PATH_NCCL);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ALLREDUCE, 4096, 3, 2), TPF_PATH_ONESHOT);
	/* no rows: the size rule (one-shot small, two-shot to 64 MiB, NCCL beyond) */
	assert_int_equal(tpf_strategy_choose(t, 8, TPF_COLL_ARNORM, 4096, 1, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(t, 8, TPF_COLL_ARNORM, 4096, 1024, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(t, 8, TPF_COLL_ARNORM, 8192, 8192, 2), TPF_PATH_NCCL);
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_SHARDED, 2, 1, 4), TPF_PATH_ONESHOT);
	/* nonsense sizes never pick a peer path */
	assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 0, 1, 2), TPF_PATH_NCCL);

	/* printing gives the same table back */
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tpf_strategy_print(t, f);
	fclose(f);
	struct tpf_strategy_table *u = parse_ok(buf);
	assert_int_equal(u->n, t->n);
	for (size_t i = 0; i < t->n; i++) {
		assert_int_equal(u->rows[i].world, t->rows[i].world);
		assert_int_equal(u->rows[i].kind, t->rows[i].kind);
		assert_int_equal(u->rows[i].hidden, t->rows[i].hidden);
		assert_int_equal(u->rows[i].max_tokens, t->rows[i].max_tokens);
		assert_int_equal(u->rows[i].path, t->rows[i].path);
	}
	free(buf);
	tpf_strategy_free(u);
	tpf_strategy_free(t);
}

/* A table saved with CRLF line endings (an editor on Windows) reads as the
 * same rows: a '\r' ends the last field, and a line of only '\r' is blank. */
static void test_crlf(void **state)
{
	(void)state;
	char crlf[2 * sizeof(table)];
	size_t n = 0;
	for (const char *p = table; *p; p++) {
		if (*p == '\n')
			crlf[n++] = '\r';
		crlf[n++] = *p;
	}
	crlf[n] = 0;
	assert_non_null(strstr(crlf, "oneshot   # decode\r\n"));
	assert_non_null(strstr(crlf, "\r\n\r\n2 allreduce-rmsnorm 8192"));
	struct tpf_strategy_table *t = parse_ok(table), *u = parse_ok(crlf);
	assert_int_equal(u->n, 9);
	for (size_t i = 0; i < t->n; i++) {
		assert_int_equal(u->rows[i].world, t->rows[i].world);
		assert_int_equal(u->rows[i].kind, t->rows[i].kind);
		assert_int_equal(u->rows[i].hidden, t->rows[i].hidden);
		assert_int_equal(u->rows[i].max_tokens, t->rows[i].max_tokens);
		assert_int_equal(u->rows[i].path, t->rows[i].path);
	}
	assert_int_equal(u->rows[8].path, TPF_PATH_ONESHOT);
	assert_int_equal(u->rows[2].max_tokens, -1);
	tpf_strategy_free(u);
	tpf_strategy_free(t);
}

static void expect_error(const char *text, const char *needle)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_strategy_table *t = NULL;
	assert_int_equal(tpf_strategy_parse(text, "bad.txt", &t, d), TPF_ERR_INVALID);
	assert_null(t);
	assert_true(d->count > 0);
	if (!strstr(d->entries[0].text, needle))
		fail_msg("message '%s' lacks '%s'", d->entries[0].text, needle);
	tpf_diag_free(d);
}

static void test_errors(void **state)
{
	(void)state;
	expect_error("2 allreduce-rmsnorm 4096 128\n", "bad.txt:1: expected 'WORLD KIND HIDDEN MAX_TOKENS PATH'");
	expect_error("# c\n2 allreduce-norm 4096 128 oneshot\n", "bad.txt:2:");
	expect_error("2 allreduce 4096 128 fastest\n", "PATH: nccl, oneshot, twoshot");
	expect_error("0 allreduce 4096 128 nccl\n", "bad.txt:1:");
	expect_error("2 allreduce -4096 128 nccl\n", "bad.txt:1:");
	expect_error("2 allreduce 4096 12x nccl\n", "bad.txt:1:");
	expect_error("2 allreduce 4096 inf nccl extra\n", "bad.txt:1:");
	/* inf is a MAX_TOKENS only: a WORLD or HIDDEN of inf is refused */
	expect_error("2 allreduce inf 128 nccl\n", "bad.txt:1: expected 'WORLD KIND HIDDEN MAX_TOKENS PATH'");
	expect_error("inf allreduce 4096 128 nccl\n", "bad.txt:1:");
	/* a line too long for the parser: its file and line named (the table
	 * freed only after the message is made: ASan in CI) */
	char long_text[700];
	memset(long_text, 'x', sizeof(long_text));
	memcpy(long_text, "2 allreduce 4096 inf nccl\n# ", 28);
	long_text[sizeof(long_text) - 2] = '\n';
	long_text[sizeof(long_text) - 1] = 0;
	expect_error(long_text, "bad.txt:2: line too long");

	struct tpf_diag *d = tpf_diag_create();
	struct tpf_strategy_table *t = NULL;
	assert_int_equal(tpf_strategy_load("/nonexistent/table.txt", &t, d), TPF_ERR_IO);
	assert_non_null(strstr(d->entries[0].text, "/nonexistent/table.txt"));
	tpf_diag_free(d);
}

static void check_builtin(const struct tpf_strategy_table *b)
{
	assert_true(b->n > 0);
	for (size_t i = 0; i < b->n; i++)
		for (size_t j = i + 1; j < b->n; j++)
			if (b->rows[i].world == b->rows[j].world && b->rows[i].kind == b->rows[j].kind &&
			    b->rows[i].hidden == b->rows[j].hidden && b->rows[i].max_tokens == b->rows[j].max_tokens)
				fail_msg("built-in rows %zu and %zu have the same world, kind, hidden and bound", i, j);
	for (size_t i = 0; i < b->n; i++) {
		const struct tpf_strategy_row *r = &b->rows[i];
		assert_true(r->world >= 2 && r->hidden > 0);
		int unbounded = 0;
		for (size_t j = 0; j < b->n; j++)
			unbounded |= b->rows[j].world == r->world && b->rows[j].kind == r->kind &&
				     b->rows[j].hidden == r->hidden && b->rows[j].max_tokens < 0;
		if (!unbounded)
			fail_msg("built-in row %zu (world %d %s %lld) has no unbounded row", i, r->world,
				 tpf_coll_kind_name(r->kind), (long long)r->hidden);
	}
	/* one token of a fused norm goes through peer memory on two and four ranks */
	assert_int_not_equal(tpf_strategy_choose(b, 2, TPF_COLL_ARNORM, 4096, 1, 2), TPF_PATH_NCCL);
	assert_int_not_equal(tpf_strategy_choose(b, 4, TPF_COLL_ARNORM, 4096, 1, 2), TPF_PATH_NCCL);
	assert_int_not_equal(tpf_strategy_choose(b, 2, TPF_COLL_SHARDED, 2, 1, 2), TPF_PATH_NCCL);
}

static void test_builtin(void **state)
{
	(void)state;
	const struct tpf_strategy_table *b = tpf_strategy_builtin();
	check_builtin(b);
	assert_int_not_equal(tpf_strategy_choose(NULL, 2, TPF_COLL_ARNORM, 4096, 1, 2), TPF_PATH_NCCL);

	/* per GPU model: H200 has rows of its own, everything else the H100's */
	const struct tpf_strategy_table *h200 = tpf_strategy_builtin_for("NVIDIA H200");
	check_builtin(h200);
	assert_ptr_not_equal(h200, b);
	assert_string_equal(h200->source, "built-in (H200)");
	assert_ptr_equal(tpf_strategy_builtin_for("NVIDIA H100 80GB HBM3"), b);
	assert_ptr_equal(tpf_strategy_builtin_for(NULL), b);
	assert_ptr_equal(tpf_strategy_builtin_for(""), b);
	assert_ptr_equal(tpf_strategy_builtin_for("NVIDIA GH200 480GB"), b);
	assert_ptr_equal(tpf_strategy_builtin_for("NVIDIA H200 NVL"), h200);
	/* where they differ (bench/results/strategy-2xH*.txt): a plain all-reduce
	 * of 200 x 8192 stays one-shot on H200 and goes two-shot on H100 */
	assert_int_equal(tpf_strategy_choose(h200, 2, TPF_COLL_ALLREDUCE, 8192, 200, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(b, 2, TPF_COLL_ALLREDUCE, 8192, 200, 2), TPF_PATH_TWOSHOT);
	/* the fused op at hidden 4096: two-shot past 128 tokens on 2x H200,
	 * past 256 on 2x H100 */
	assert_int_equal(tpf_strategy_choose(h200, 2, TPF_COLL_ARNORM, 4096, 200, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(b, 2, TPF_COLL_ARNORM, 4096, 200, 2), TPF_PATH_ONESHOT);
	/* world 4 has rows of its own on each (bench/results/strategy-4xH*.txt):
	 * the fused op at 32 x 8192 is one-shot on H100, two-shot on H200 */
	assert_int_equal(tpf_strategy_choose(b, 4, TPF_COLL_ARNORM, 8192, 32, 2), TPF_PATH_ONESHOT);
	assert_int_equal(tpf_strategy_choose(h200, 4, TPF_COLL_ARNORM, 8192, 32, 2), TPF_PATH_TWOSHOT);
	assert_int_equal(tpf_strategy_choose(h200, 4, TPF_COLL_ARNORM, 8192, 16, 2), TPF_PATH_ONESHOT);
	/* and where they agree; at world 4, two-shot for every size past
	 * one-shot's */
	for (int g = 0; g < 2; g++) {
		const struct tpf_strategy_table *t = g ? h200 : b;
		assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 8192, 128, 2), TPF_PATH_ONESHOT);
		assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ARNORM, 8192, 129, 2), TPF_PATH_TWOSHOT);
		assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ALLREDUCE, 8192, 128, 2), TPF_PATH_ONESHOT);
		assert_int_equal(tpf_strategy_choose(t, 2, TPF_COLL_ALLREDUCE, 8192, 257, 2), TPF_PATH_TWOSHOT);
		assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ALLREDUCE, 8192, 16, 2), TPF_PATH_ONESHOT);
		assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ALLREDUCE, 8192, 4096, 2), TPF_PATH_TWOSHOT);
		assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ARNORM, 8192, 2048, 2), TPF_PATH_TWOSHOT);
		assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ARNORM_FP8, 4096, 1, 2), TPF_PATH_ONESHOT);
		assert_int_equal(tpf_strategy_choose(t, 4, TPF_COLL_ARNORM_FP8, 8192, 4096, 2), TPF_PATH_TWOSHOT);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_and_choose),
		cmocka_unit_test(test_crlf),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_builtin),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
