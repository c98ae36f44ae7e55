/* SPDX-License-Identifier: MIT */
/* Dims and shape values at the ends of int64 in shape inference and in the
 * sharder: sums and products that do not fit are errors or unknown values,
 * never wrapped numbers (under scripts/test-sanitizers.sh, never undefined
 * behaviour either), and the sharder's interpreter does not trap on
 * INT64_MIN / -1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

/* Verifies m and infers its shapes (the shape functions run in both);
 * the diagnostics (the caller frees them). */
static struct tpf_diag *infer(struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();

	assert_non_null(d);
	if (!tpf_model_verify(m, d))
		tpf_model_infer_shapes(m, d);
	return d;
}

/* Pad of a 2^62 axis by 2^62 on both sides: an error naming the overflow,
 * not "pads remove more than" a wrapped size. */
static void test_pad_overflow(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model("ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
					  "  input %0: f32[4611686018427387904] \"x\"\n"
					  "  init %1: i64[2] \"pads\" = [4611686018427387904, 4611686018427387904]\n"
					  "  %2 = Pad(%0, %1) # pad\n"
					  "  output %2: ? \"y\"\n}\n");
	struct tpf_diag *d = infer(m);
	const char *needles[] = {"'pad'", "overflow", NULL};
	expect_mentions(d, needles);
	assert_false(diag_mentions(d, "remove more"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Conv whose W says 2^62 channels a group times 4 groups: refused, the
 * product is not compared wrapped. */
static void test_conv_group_overflow(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model("ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
					  "  input %0: f32[1,4,8] \"x\"\n"
					  "  input %1: f32[4,4611686018427387904,1] \"w\"\n"
					  "  %2 = Conv(%0, %1) {group=4} # conv\n"
					  "  output %2: ? \"y\"\n}\n");
	struct tpf_diag *d = infer(m);
	const char *needles[] = {"'conv'", "X has 4 channels", NULL};
	expect_mentions(d, needles);
	assert_false(diag_mentions(d, "W expects 0")); /* 2^62 * 4, wrapped */
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Range from -2^63 + 1 to 2^63 - 1 by 2^62: four values, the last 2^62 + 1
 * (i * delta alone does not fit). */
static void test_range_values(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model("ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
					  "  init %0: i64[] \"s\" = -9223372036854775807\n"
					  "  init %1: i64[] \"l\" = 9223372036854775807\n"
					  "  init %2: i64[] \"d\" = 4611686018427387904\n"
					  "  %3 = Range(%0, %1, %2) # range\n"
					  "  output %3: ? \"y\"\n}\n");
	struct tpf_diag *d = infer(m);
	int64_t v[8];
	size_t n = 0;
	struct tpf_value *y = m->graph->outputs[0];

	assert_int_equal(d->error_count, 0);
	assert_int_equal(tpf_value_ints(y, v, 8, &n), 0);
	assert_int_equal(n, 4);
	assert_true(v[0] == INT64_MIN + 1);
	assert_true(v[3] == ((int64_t)1 << 62) + 1);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* The sharder's interpreter on shape arithmetic at the ends of int64: Div
 * and Mod of INT64_MIN by -1 (a SIGFPE on x86), 2^62 * 4, Neg of INT64_MIN;
 * the MLP beside it still splits column then row. */
static void test_shard_interp(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(
		"ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
		"  input %0: f32[B,4] \"x\"\n"
		"  init %1: f32[4,8] \"w1\" (128 bytes)\n"
		"  init %2: f32[8,4] \"w2\" (128 bytes)\n"
		"  init %3: i64[1] \"lowest\" = [-9223372036854775808]\n"
		"  init %4: i64[1] \"m1\" = [-1]\n"
		"  init %5: i64[1] \"q\" = [4611686018427387904]\n"
		"  init %6: i64[1] \"four\" = [4]\n"
		"  %7 = MatMul(%0, %1) # up\n"
		"  %8 = Relu(%7) # act\n"
		"  %9 = MatMul(%8, %2) # down\n"
		"  %10 = Div(%3, %4) # div\n"
		"  %11 = Mod(%3, %4) # mod\n"
		"  %12 = Mul(%5, %6) # mul\n"
		"  %13 = Neg(%3) # neg\n"
		"  %14 = Concat(%10, %11, %12, %13) {axis=0} # cat\n"
		"  output %9: ? \"y\"\n"
		"  output %14: ? \"c\"\n}\n");
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_shard *sh = NULL;
	struct tpf_shard_stats st;

	assert_int_equal(tpf_shard_create(m, &(struct tpf_shard_options){.world_size = 2}, &sh, d), TPF_OK);
	tpf_shard_get_stats(sh, &st);
	assert_int_equal(st.column, 1);
	assert_int_equal(st.row, 1);
	assert_int_equal(tpf_shard_rank(sh, 1, d), TPF_OK);
	tpf_shard_free(sh);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A reshape whose dims' products pass 2^63 (x [2^62, 4, 16]): the split of
 * the first product does not survive it, and nothing is computed wrapped. */
static void test_shard_reshape_products(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(
		"ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
		"  input %0: f32[4611686018427387904,4,16] \"x\"\n"
		"  init %1: f32[16,32] \"w1\" (2048 bytes)\n"
		"  init %2: f32[32,16] \"w2\" (2048 bytes)\n"
		"  init %3: i64[2] \"t1\" = [4611686018427387904, 128]\n"
		"  init %4: i64[3] \"t2\" = [4611686018427387904, 4, 32]\n"
		"  %5 = MatMul(%0, %1) # up\n"
		"  %6 = Reshape(%5, %3) # flat\n"
		"  %7 = Relu(%6) # act\n"
		"  %8 = Reshape(%7, %4) # unflat\n"
		"  %9 = MatMul(%8, %2) # down\n"
		"  output %9: ? \"y\"\n}\n");
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_shard *sh = NULL;
	struct tpf_shard_stats st;

	assert_int_equal(tpf_shard_create(m, &(struct tpf_shard_options){.world_size = 2}, &sh, d), TPF_OK);
	tpf_shard_get_stats(sh, &st);
	assert_int_equal(st.replicated, 1);
	assert_int_equal(st.row, 0);
	tpf_shard_free(sh);
	tpf_diag_free(d);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pad_overflow),
		cmocka_unit_test(test_conv_group_overflow),
		cmocka_unit_test(test_range_values),
		cmocka_unit_test(test_shard_interp),
		cmocka_unit_test(test_shard_reshape_products),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
