/* SPDX-License-Identifier: MIT */
/*
 * The environment's tuning knobs (kernels/env.c, docs/runtime.md
 * "Environment"):
 *   - the table: sorted, unique names, a range or choices where the kind
 *     needs one, a line saying what each changes;
 *   - tpf_env_check: every well-formed value passes; each malformed one
 *     (a word for a switch, a suffix or an out-of-range number, a choice
 *     not listed, seconds not above 0, an unknown TPF_PDL kind) is
 *     TPF_ERR_INVALID naming the variable, its value and what it takes;
 *   - the readers: a knob's value, the caller's default where it is unset,
 *     empty, malformed or not in the table;
 *   - a session and a plan refuse to start under a malformed knob, and start
 *     once it is fixed;
 *   - TPF_PDL (kernels/env.c: tpf_pdl_kinds_parse; docs/gpu.md): the
 *     default set when unset, empty, "1" or a list that names no kind; none
 *     for "0"; every kind for "all" and "2"; a list's names with blanks
 *     around them, repeated or empty entries, unknown names ignored by the
 *     parser and refused by tpf_pdl_kinds_valid.
 */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernel-host.h"
#include "test-util.h"
#include "tpf-runtime.h"

#define K(k) (1u << TPF_PDL_##k)

static void test_levels(void **state)
{
	(void)state;
	const unsigned every = K(GEMV) | K(COPY) | K(GATED) | K(ATTENTION) | K(COMBINE);
	assert_int_equal(TPF_PDL_DEFAULT, K(GEMV) | K(COPY) | K(GATED));
	assert_int_equal(tpf_pdl_kinds_parse(NULL), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse(""), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("1"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("0"), 0);
	assert_int_equal(tpf_pdl_kinds_parse("all"), every);
	assert_int_equal(tpf_pdl_kinds_parse("2"), every);
}

static void test_lists(void **state)
{
	(void)state;
	assert_int_equal(tpf_pdl_kinds_parse("gemv"), K(GEMV));
	assert_int_equal(tpf_pdl_kinds_parse("attention"), K(ATTENTION));
	assert_int_equal(tpf_pdl_kinds_parse("combine,"), K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse("gemv,copy,gated,combine"), K(GEMV) | K(COPY) | K(GATED) | K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse(" gemv , copy ,\tcombine "), K(GEMV) | K(COPY) | K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse("gemv,,gated,gemv"), K(GEMV) | K(GATED));
	/* a name counts only whole: no prefix, no suffix, no case folding */
	assert_int_equal(tpf_pdl_kinds_parse("gem,copyx,GATED,attention"), K(ATTENTION));
	/* nothing named: the default */
	assert_int_equal(tpf_pdl_kinds_parse("bogus"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse(" , ,"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("none"), TPF_PDL_DEFAULT);
}

static void test_pdl_valid(void **state)
{
	(void)state;
	const char *ok[] = {"0", "1", "2", "all", "gemv", "combine,", " gemv , copy ,\tcombine ", "gemv,,gated,gemv",
			    "attention"};
	const char *bad[] = {"", " , ,", "none", "bogus", "gem", "gemv,bogus", "GATED", "3", "all,gemv"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!tpf_pdl_kinds_valid(ok[i]))
			fail_msg("TPF_PDL=\"%s\" refused", ok[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (tpf_pdl_kinds_valid(bad[i]))
			fail_msg("TPF_PDL=\"%s\" taken", bad[i]);
}

/* Every knob unset, so that the caller's environment does not leak in. */
static int clear_knobs(void **state)
{
	(void)state;
	size_t n;
	const struct tpf_env_knob *k = tpf_env_knobs(&n);
	for (size_t i = 0; i < n; i++)
		unsetenv(k[i].name);
	return 0;
}

static void test_table(void **state)
{
	(void)state;
	size_t n;
	const struct tpf_env_knob *k = tpf_env_knobs(&n);
	assert_true(n >= 19);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(strncmp(k[i].name, "TPF_", 4), 0);
		if (i)
			assert_true(strcmp(k[i - 1].name, k[i].name) < 0);
		assert_non_null(k[i].what);
		assert_true(strlen(k[i].what) > 10);
		if (k[i].kind == TPF_ENV_INT)
			assert_true(k[i].lo <= k[i].hi);
		assert_true((k[i].kind == TPF_ENV_CHOICE) == (k[i].choices != NULL));
	}
}

static void expect_refused(const char *name, const char *value, const char *want)
{
	struct tpf_diag *d = tpf_diag_create();
	setenv(name, value, 1);
	enum tpf_status st = tpf_env_check(d);
	if (st != TPF_ERR_INVALID)
		fail_msg("%s=\"%s\" taken (status %d)", name, value, (int)st);
	char quoted[96];
	snprintf(quoted, sizeof(quoted), "%s=\"%s\"", name, value);
	const char *needles[] = {quoted, want, NULL};
	expect_mentions(d, needles);
	unsetenv(name);
	tpf_diag_free(d);
}

static void expect_taken(const char *name, const char *value)
{
	struct tpf_diag *d = tpf_diag_create();
	setenv(name, value, 1);
	if (tpf_env_check(d) != TPF_OK) {
		dump_diag(d);
		fail_msg("%s=\"%s\" refused", name, value);
	}
	unsetenv(name);
	tpf_diag_free(d);
}

static void test_check(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	assert_int_equal(tpf_env_check(d), TPF_OK);
	tpf_diag_free(d);

	expect_taken("TPF_ONESHOT", "0");
	expect_taken("TPF_ONESHOT", "1");
	expect_taken("TPF_ONESHOT", ""); /* empty: unset */
	expect_taken("TPF_ONESHOT_MAX_BYTES", "0");
	expect_taken("TPF_ONESHOT_MAX_BYTES", "67108864");
	expect_taken("TPF_GEMV", "16");
	expect_taken("TPF_GEMV_TILED", "32");
	expect_taken("TPF_GEMV_COLS", "0");
	expect_taken("TPF_CUDA_TIMEOUT_S", "2.5");
	expect_taken("TPF_PDL", "gemv,attention");
	/* a strategy table must be a readable regular file, as run reads it */
	char table[] = "/tmp/tpf-test-env-XXXXXX";
	int fd = mkstemp(table);
	assert_true(fd >= 0);
	close(fd);
	expect_taken("TPF_STRATEGY_TABLE", table);
	unlink(table);
	expect_refused("TPF_STRATEGY_TABLE", table, "a readable regular file (No such file");
	expect_refused("TPF_STRATEGY_TABLE", "/tmp", "a readable regular file (not a regular file)");

	expect_refused("TPF_ONESHOT", "off", "expected 0 or 1");
	expect_refused("TPF_A2A_PEER", "yes", "expected 0 or 1");
	expect_refused("TPF_ONESHOT_MAX_BYTES", "64M", "a whole number, 0 or more");
	expect_refused("TPF_ONESHOT_MAX_BYTES", "-1", "a whole number, 0 or more");
	expect_refused("TPF_ONESHOT_MAX_BYTES", "99999999999999999999", "a whole number");
	expect_refused("TPF_GEMV", "17", "a whole number from 0 to 16");
	expect_refused("TPF_AR_WIDE_ROWS", "lots", "a whole number");
	expect_refused("TPF_GEMV_TILED", "8", "one of 0, 16, 32");
	expect_refused("TPF_GEMV_COLS", "16x", "one of 0, 16, 32");
	expect_refused("TPF_CUDA_TIMEOUT_S", "0", "seconds above 0");
	expect_refused("TPF_CUDA_TIMEOUT_S", "nan", "seconds above 0");
	expect_refused("TPF_CUDA_TIMEOUT_S", "1e999", "seconds above 0");
	expect_refused("TPF_PDL", "gemv,bogus", "gemv, copy, gated, attention, combine");
	expect_refused("TPF_DECODE_SPLIT_TILES", "2097153", "from 0 to 1048576");

	/* the first malformed knob is named, with what it changes */
	setenv("TPF_FP8_GEMM", "false", 1);
	d = tpf_diag_create();
	assert_int_equal(tpf_env_check(d), TPF_ERR_INVALID);
	const char *needles[] = {"TPF_FP8_GEMM", "dequantize", NULL};
	expect_mentions(d, needles);
	tpf_diag_free(d);
	unsetenv("TPF_FP8_GEMM");
}

static void test_readers(void **state)
{
	(void)state;
	assert_int_equal(tpf_env_switch("TPF_ONESHOT", 7), 7);
	setenv("TPF_ONESHOT", "0", 1);
	assert_int_equal(tpf_env_switch("TPF_ONESHOT", 1), 0);
	setenv("TPF_ONESHOT", "1", 1);
	assert_int_equal(tpf_env_switch("TPF_ONESHOT", 0), 1);
	setenv("TPF_ONESHOT", "no", 1); /* malformed: the default, not "on" */
	assert_int_equal(tpf_env_switch("TPF_ONESHOT", 7), 7);
	unsetenv("TPF_ONESHOT");

	assert_int_equal(tpf_env_int("TPF_GEMV", 16), 16);
	setenv("TPF_GEMV", "8", 1);
	assert_int_equal(tpf_env_int("TPF_GEMV", 16), 8);
	setenv("TPF_GEMV", "", 1);
	assert_int_equal(tpf_env_int("TPF_GEMV", 16), 16);
	setenv("TPF_GEMV", "99", 1); /* outside its range: the default, not the bound */
	assert_int_equal(tpf_env_int("TPF_GEMV", 5), 5);
	unsetenv("TPF_GEMV");
	setenv("TPF_ONESHOT_MAX_BYTES", "1048576", 1);
	assert_int_equal(tpf_env_int("TPF_ONESHOT_MAX_BYTES", 5), 1048576);
	unsetenv("TPF_ONESHOT_MAX_BYTES");

	/* a numeric choice reads as a number */
	setenv("TPF_GEMV_TILED", "16", 1);
	assert_int_equal(tpf_env_int("TPF_GEMV_TILED", -1), 16);
	setenv("TPF_GEMV_TILED", "0", 1);
	assert_int_equal(tpf_env_int("TPF_GEMV_TILED", -1), 0);
	setenv("TPF_GEMV_TILED", "24", 1);
	assert_int_equal(tpf_env_int("TPF_GEMV_TILED", -1), -1);
	unsetenv("TPF_GEMV_TILED");

	setenv("TPF_CUDA_TIMEOUT_S", "0.25", 1);
	assert_true(tpf_env_seconds("TPF_CUDA_TIMEOUT_S", 60) == 0.25);
	setenv("TPF_CUDA_TIMEOUT_S", "-3", 1);
	assert_true(tpf_env_seconds("TPF_CUDA_TIMEOUT_S", 60) == 60);
	unsetenv("TPF_CUDA_TIMEOUT_S");

	setenv("TPF_PDL", "gemv", 1);
	assert_string_equal(tpf_env_text("TPF_PDL"), "gemv");
	setenv("TPF_PDL", "gemv,bogus", 1);
	assert_null(tpf_env_text("TPF_PDL"));
	unsetenv("TPF_PDL");
	assert_null(tpf_env_text("TPF_PDL"));

	/* a name the table lacks reads as its default, even when set */
	setenv("TPF_NOT_A_KNOB", "5", 1);
	assert_int_equal(tpf_env_int("TPF_NOT_A_KNOB", 3), 3);
	assert_int_equal(tpf_env_switch("TPF_NOT_A_KNOB", 1), 1);
	assert_null(tpf_env_text("TPF_NOT_A_KNOB"));
	unsetenv("TPF_NOT_A_KNOB");
}

/* y = Neg(x): a session and a plan of it start only under well-formed knobs. */
static void test_session_refuses(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model("opset \"\" 17\n"
					  "graph \"\" {\n"
					  "  input %0: f32[2,3] \"x\"\n"
					  "  %1 = Neg(%0) : f32[2,3]\n"
					  "  output %1: f32[2,3] \"y\"\n"
					  "}\n");
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_session *s = NULL;
	setenv("TPF_ONESHOT_MAX_BYTES", "1G", 1);
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_ERR_INVALID);
	assert_null(s);
	const char *needles[] = {"TPF_ONESHOT_MAX_BYTES=\"1G\"", "whole number", NULL};
	expect_mentions(d, needles);
	tpf_diag_free(d);

	d = tpf_diag_create();
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, NULL, 0, NULL, &p, d), TPF_ERR_INVALID);
	assert_null(p);
	expect_mentions(d, needles);
	tpf_diag_free(d);

	unsetenv("TPF_ONESHOT_MAX_BYTES");
	d = tpf_diag_create();
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	float x[6] = {1, -2, 3, -4, 5, -6};
	int64_t dims[2] = {2, 3};
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, dims, x);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 1);
	assert_true(((const float *)out[0].data)[3] == 4.0f);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_lists),
		cmocka_unit_test(test_pdl_valid),
		cmocka_unit_test_setup(test_table, clear_knobs),
		cmocka_unit_test_setup(test_check, clear_knobs),
		cmocka_unit_test_setup(test_readers, clear_knobs),
		cmocka_unit_test_setup(test_session_refuses, clear_knobs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
