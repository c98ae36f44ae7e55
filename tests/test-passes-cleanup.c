/* SPDX-License-Identifier: MIT */
/* The pass registry, pass statistics and the pipeline runner; what the
 * clean-up passes (dce, remove-identity, remove-noop-cast) do to graphs is
 * tested as text (tests/passes/cleanup.tpf). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

static int has_note(const struct tpf_diag *d, const char *text)
{
	size_t i;

	for (i = 0; i < d->count; i++)
		if (strstr(d->entries[i].text, text))
			return 1;
	return 0;
}

static enum tpf_status run(struct tpf_model *m, const char *passes, struct tpf_pass_stats *st,
			   struct tpf_diag *d)
{
	struct tpf_pipeline_options o = {.passes = passes, .ctx = {.stats = st}, .verify_each = 1};
	enum tpf_status s = tpf_pipeline_run(m, &o, d);

	if (s && s != TPF_ERR_NOMEM)
		tpf_diag_print(d, stderr); /* shown when a test fails */
	return s;
}

/* x -> Relu -> out; a dead chain Sigmoid -> Mul(w_dead); a custom-domain
 * node with an unused output; an unused initializer; a used one. */
static const char dce_text[] =
	"opset \"\" 23\n"
	"graph \"\" {\n"
	"  input %0: f32[4] \"x\"\n"
	"  init %1: f32[4] \"w_dead\" = [1.0, 2.0, 3.0, 4.0]\n"
	"  init %2: f32[4] \"w_unused\" = [1.0, 2.0, 3.0, 4.0]\n"
	"  init %3: f32[4] \"w_used\" = [1.0, 2.0, 3.0, 4.0]\n"
	"  %4 = Add(%0, %3)  # add\n"
	"  %5 = Relu(%0)  # relu\n"
	"  %6 = Sigmoid(%0)  # dead_sigmoid\n"
	"  %7 = Mul(%6, %1)  # dead_mul\n"
	"  %8 = custom.io.Print(%0)  # side_effect\n"
	"  output %4: ? \"z\"\n"
	"  output %5: ? \"y\"\n"
	"}\n";

/* A removed initializer's name is free again. */
static void test_dce_frees_names(void **state)
{
	struct tpf_model *m = parse_model(dce_text);
	struct tpf_diag *d = tpf_diag_create();

	assert_int_equal(run(m, "dce", NULL, d), TPF_OK);
	assert_null(tpf_graph_find_value(m->graph, "w_unused"));
	assert_null(find_node(m->graph, "dead_mul"));
	assert_non_null(tpf_graph_add_initializer(m->graph, "w_unused", TPF_DTYPE_FLOAT, 0, NULL,
						  (float[]){1}, 4));
	verify_ok(m);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_pipeline_names(void **state)
{
	struct tpf_model *m = parse_model(dce_text);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	size_t n, i;
	const struct tpf_pass *const *list = tpf_pass_list(&n);

	assert_true(n >= 3);
	for (i = 0; i < n; i++) {
		assert_non_null(list[i]->name);
		assert_non_null(list[i]->summary);
		assert_non_null(list[i]->run);
		assert_ptr_equal(tpf_pass_find(list[i]->name), list[i]);
	}
	assert_null(tpf_pass_find("no-such-pass"));

	/* unknown names: an error naming each, nothing run */
	assert_int_equal(run(m, "dce,bogus, other", st, d), TPF_ERR_INVALID);
	assert_true(has_note(d, "unknown pass 'bogus'"));
	assert_true(has_note(d, "unknown pass 'other'"));
	assert_true(find_node(m->graph, "dead_mul") != NULL);

	/* "none" and an empty list run nothing */
	tpf_diag_clear(d);
	assert_int_equal(run(m, "none", st, d), TPF_OK);
	assert_int_equal(run(m, "", st, d), TPF_OK);
	assert_true(find_node(m->graph, "dead_mul") != NULL);

	/* cleanup expands to the clean-up passes; the ones that found nothing say so */
	assert_int_equal(run(m, " cleanup ", st, d), TPF_OK);
	assert_false(find_node(m->graph, "dead_mul") != NULL);
	assert_true(has_note(d, "pass remove-identity matched nothing"));
	assert_true(has_note(d, "pass remove-noop-cast matched nothing"));
	assert_false(has_note(d, "pass dce matched nothing"));
	assert_int_equal(d->error_count, 0);

	/* NULL options: the default pipeline */
	assert_int_equal(tpf_pipeline_run(m, NULL, d), TPF_OK);
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_stats(void **state)
{
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	char *buf = NULL;
	size_t len = 0;
	FILE *f;

	tpf_pass_stats_add(st, "b-pass", "zeta", 2);
	tpf_pass_stats_add(st, "a", "alpha", 1);
	tpf_pass_stats_add(st, "b-pass", "zeta", 3);
	tpf_pass_stats_add(NULL, "x", "y", 1);
	assert_int_equal(tpf_pass_stats_get(st, "b-pass", "zeta"), 5);
	assert_int_equal(tpf_pass_stats_get(st, "a", "missing"), 0);
	f = open_memstream(&buf, &len);
	tpf_pass_stats_print(st, f);
	fclose(f);
	assert_string_equal(buf, "b-pass  zeta     5\n"
				 "a       alpha    1\n");
	free(buf);
	tpf_pass_stats_free(st);
}

static void test_pipeline_alloc_failures(void **state)
{
	uint64_t i;

	for (i = 1; i < 200; i++) {
		struct tpf_model *m = parse_model(dce_text);
		struct tpf_diag *d = tpf_diag_create();
		enum tpf_status s;

		tpf_alloc_fail_after(i);
		s = run(m, "cleanup", NULL, d);
		tpf_alloc_fail_after(0);
		assert_true(s == TPF_OK || s == TPF_ERR_NOMEM);
		/* whatever happened, the graph output is still produced */
		assert_non_null(m->graph->outputs[0]->producer);
		tpf_diag_free(d);
		tpf_model_free(m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_dce_frees_names),
		cmocka_unit_test(test_pipeline_names),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_pipeline_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
