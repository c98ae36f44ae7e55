/* SPDX-License-Identifier: MIT */
/* tpf_compile's policies: strict and lenient shape inference, which
 * messages are kept, the step that failed (the input, the pipeline, the
 * target's lowering, the result), and that a zeroed options struct runs
 * nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

/* Verifies (the Relu's output has no declared type, so Flatten's shape
 * rule sees an unknown rank), but inference gives the Relu's output rank
 * 2, and then axis 5 is out of range. */
static const char *const infer_fails =
	"ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
	"  input %0: f32[2,3] \"x\"\n"
	"  %1 = Relu(%0)  # relu\n"
	"  %2 = Flatten(%1) {axis=5}  # flat\n"
	"  output %2: ? \"y\"\n}\n";

/* Valid, and nothing in it for dce to remove. */
static const char *const valid =
	"ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
	"  input %0: f32[2,3] \"x\"\n"
	"  %1 = Relu(%0) : f32[2,3]  # relu\n"
	"  output %1: f32[2,3] \"y\"\n}\n";

/* Fails verification: Add of a float and an integer tensor. */
static const char *const invalid =
	"ir_version 9\nopset \"\" 18\ngraph \"g\" {\n"
	"  input %0: f32[2] \"x\"\n"
	"  input %1: i64[2] \"z\"\n"
	"  %2 = Add(%0, %1)  # add\n"
	"  output %2: ? \"y\"\n}\n";

static const struct tpf_compile_options check_steps = {TPF_COMPILE_CHECK};

/* Strict inference: the compile stops with inference's status, its
 * message naming the node, the input's step named as the one that failed. */
static void test_strict_inference(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(infer_fails);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_compile_options o = check_steps;
	enum tpf_compile_stage failed = TPF_COMPILE_DONE;

	/* verification alone passes: the error is inference's */
	assert_int_equal(tpf_compile(m, &(struct tpf_compile_options){.verify_before = 1}, d),
			 TPF_OK);
	assert_int_equal(d->count, 0);
	o.failed = &failed;
	assert_int_equal(tpf_compile(m, &o, d), TPF_ERR_VERIFY);
	assert_int_equal(failed, TPF_COMPILE_INPUT);
	assert_true(diag_mentions(d, "'flat'"));
	assert_true(d->error_count > 0);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Lenient inference (run's policy): the compile goes on, none of
 * inference's messages is kept, and messages already in the diagnostic
 * stay. */
static void test_lenient_inference(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(infer_fails);
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_compile_stage failed = TPF_COMPILE_INPUT;
	struct tpf_compile_options o = {
		.verify_before = 1,
		.infer = TPF_INFER_LENIENT,
		.optimize = 1,
		.pipeline = {.passes = "dce"},
		.failed = &failed,
	};

	tpf_diag_add(d, TPF_SEV_WARNING, "said before");
	assert_int_equal(tpf_compile(m, &o, d), TPF_OK);
	assert_int_equal(failed, TPF_COMPILE_DONE);
	assert_int_equal(d->error_count, 0);
	assert_true(diag_mentions(d, "said before"));
	assert_false(diag_mentions(d, "'flat'"));
	/* what could be inferred was: the Relu's output */
	expect_type(find_node(m->graph, "relu")->outputs[0], "f32[2,3]");
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* "pass NAME matched nothing" is a note: kept by default, left out when
 * only errors are asked for. */
static void test_notes_kept_or_not(void **state)
{
	(void)state;
	struct tpf_compile_options o = {.optimize = 1, .pipeline = {.passes = "dce"}};

	for (int errors_only = 0; errors_only < 2; errors_only++) {
		struct tpf_model *m = parse_model(valid);
		struct tpf_diag *d = tpf_diag_create();

		o.min_severity = errors_only ? TPF_SEV_ERROR : TPF_SEV_NOTE;
		tpf_diag_add(d, TPF_SEV_NOTE, "a note of the caller");
		assert_int_equal(tpf_compile(m, &o, d), TPF_OK);
		assert_int_equal(diag_mentions(d, "pass dce matched nothing"), !errors_only);
		assert_true(diag_mentions(d, "a note of the caller"));
		tpf_diag_free(d);
		tpf_model_free(m);
	}
}

/* Errors are kept whatever min_severity asks: the input's verification
 * error, in the order it was made. */
static void test_errors_kept(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(invalid);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_compile_options o = check_steps;

	o.min_severity = TPF_SEV_ERROR;
	assert_int_not_equal(tpf_compile(m, &o, d), TPF_OK);
	assert_true(d->error_count > 0);
	assert_true(diag_mentions(d, "'add'"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* verify_after checks the result: a model the compile did not check on
 * the way in and that is not valid fails there, the result's step named. */
static void test_verify_after(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(invalid);
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_compile_stage failed = TPF_COMPILE_DONE;
	struct tpf_compile_options o = {
		.optimize = 1,
		.pipeline = {.passes = "none"},
		.verify_after = 1,
		.failed = &failed,
	};

	assert_int_not_equal(tpf_compile(m, &o, d), TPF_OK);
	assert_int_equal(failed, TPF_COMPILE_OUTPUT);
	assert_true(diag_mentions(d, "'add'"));
	tpf_diag_free(d);
	tpf_model_free(m);

	/* verify_after infers strictly: inference's error is the result's */
	m = parse_model(infer_fails);
	d = tpf_diag_create();
	o.verify_after = 1;
	assert_int_equal(tpf_compile(m, &o, d), TPF_ERR_VERIFY);
	assert_int_equal(failed, TPF_COMPILE_OUTPUT);
	assert_true(diag_mentions(d, "'flat'"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A failing pipeline is the pipeline's step: an unknown pass name. */
static void test_pipeline_fails(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(valid);
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_compile_stage failed = TPF_COMPILE_DONE;
	struct tpf_compile_options o = check_steps;

	o.optimize = 1;
	o.pipeline.passes = "no-such-pass";
	o.verify_after = 1;
	o.failed = &failed;
	assert_int_equal(tpf_compile(m, &o, d), TPF_ERR_INVALID);
	assert_int_equal(failed, TPF_COMPILE_PIPELINE);
	assert_true(diag_mentions(d, "unknown pass 'no-such-pass'"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A target without a lowering pipeline is an error naming the pipeline;
 * no target lowers nothing. */
static void test_target(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(valid);
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_compile_stage failed = TPF_COMPILE_DONE;
	struct tpf_compile_options o = check_steps;

	o.failed = &failed;
	assert_int_equal(tpf_compile(m, &o, d), TPF_OK);
	assert_int_equal(failed, TPF_COMPILE_DONE);
	assert_int_equal(d->count, 0);

	o.target = "no-such-backend";
	assert_int_equal(tpf_compile(m, &o, d), TPF_ERR_UNSUPPORTED);
	assert_int_equal(failed, TPF_COMPILE_LOWER);
	assert_true(diag_mentions(d, "'lower-no-such-backend'"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* No options, or zeroed ones: nothing runs, not even on an invalid model. */
static void test_nothing(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model(invalid);
	struct tpf_diag *d = tpf_diag_create();
	char *before = dump_text(m);
	char *after;

	assert_int_equal(tpf_compile(m, NULL, d), TPF_OK);
	assert_int_equal(tpf_compile(m, &(struct tpf_compile_options){0}, d), TPF_OK);
	assert_int_equal(d->count, 0);
	after = dump_text(m);
	assert_string_equal(before, after);
	free(before);
	free(after);
	assert_int_equal(tpf_compile(NULL, NULL, d), TPF_ERR_INVALID);
	tpf_diag_free(d);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strict_inference),
		cmocka_unit_test(test_lenient_inference),
		cmocka_unit_test(test_notes_kept_or_not),
		cmocka_unit_test(test_errors_kept),
		cmocka_unit_test(test_verify_after),
		cmocka_unit_test(test_pipeline_fails),
		cmocka_unit_test(test_target),
		cmocka_unit_test(test_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
