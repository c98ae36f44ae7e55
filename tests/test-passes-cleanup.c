/* Clean-up passes (dce, remove-identity, remove-noop-cast), pass statistics
 * and the pipeline runner. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-passes.h"

static struct tpf_node *add1(struct tpf_graph *g, const char *domain, const char *op,
			     const char *name, struct tpf_value *a, struct tpf_value *b,
			     const char *out)
{
	struct tpf_value *in[2] = {a, b};
	struct tpf_node *n = tpf_graph_add_node(g, domain, op, name, in, b ? 2 : 1, 1,
						out ? (const char *[]){out} : NULL);

	assert_non_null(n);
	return n;
}

static int has_node(const struct tpf_graph *g, const char *name)
{
	const struct tpf_node *n;

	for (n = g->first; n; n = n->next)
		if (strcmp(n->name, name) == 0)
			return 1;
	return 0;
}

static int has_initializer(const struct tpf_graph *g, const char *name)
{
	size_t i;

	for (i = 0; i < g->n_initializers; i++)
		if (strcmp(g->initializers[i]->name, name) == 0)
			return 1;
	return 0;
}

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

static struct tpf_model *new_model(void)
{
	struct tpf_model *m = tpf_model_create();

	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	return m;
}

/* x -> Relu -> out; a dead chain Sigmoid -> Mul(w_dead); a custom-domain
 * node with an unused output; an unused initializer; a used one. */
static struct tpf_model *dce_model(void)
{
	struct tpf_model *m = new_model();
	struct tpf_graph *g = m->graph;
	int64_t d4[] = {4};
	float w[4] = {1, 2, 3, 4};
	struct tpf_value *x, *wd, *wu;
	struct tpf_node *n, *s;

	x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, d4);
	wd = tpf_graph_add_initializer(g, "w_dead", TPF_DTYPE_FLOAT, 1, d4, w, sizeof(w));
	tpf_graph_add_initializer(g, "w_unused", TPF_DTYPE_FLOAT, 1, d4, w, sizeof(w));
	wu = tpf_graph_add_initializer(g, "w_used", TPF_DTYPE_FLOAT, 1, d4, w, sizeof(w));
	assert_int_equal(tpf_graph_add_output(g, add1(g, "", "Add", "add", x, wu, "z")->outputs[0]),
			 TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, add1(g, "", "Relu", "relu", x, NULL, "y")->outputs[0]),
			 TPF_OK);
	s = add1(g, "", "Sigmoid", "dead_sigmoid", x, NULL, NULL);
	n = add1(g, "", "Mul", "dead_mul", s->outputs[0], wd, NULL);
	(void)n;
	add1(g, "custom.io", "Print", "side_effect", x, NULL, NULL);
	return m;
}

static void test_dce(void **state)
{
	struct tpf_model *m = dce_model();
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();

	assert_int_equal(run(m, "dce", st, d), TPF_OK);
	assert_false(has_node(m->graph, "dead_sigmoid"));
	assert_false(has_node(m->graph, "dead_mul"));
	assert_true(has_node(m->graph, "relu"));
	assert_true(has_node(m->graph, "side_effect"));
	assert_false(has_initializer(m->graph, "w_dead"));
	assert_false(has_initializer(m->graph, "w_unused"));
	assert_true(has_initializer(m->graph, "w_used"));
	assert_null(tpf_graph_find_value(m->graph, "w_unused"));
	assert_int_equal(tpf_pass_stats_get(st, "dce", "nodes-removed"), 2);
	assert_int_equal(tpf_pass_stats_get(st, "dce", "initializers-removed"), 2);
	assert_int_equal(d->error_count, 0);

	/* a second run finds nothing and says so */
	tpf_diag_clear(d);
	assert_int_equal(run(m, "dce", NULL, d), TPF_OK);
	assert_true(has_note(d, "pass dce matched nothing"));
	/* the freed name can be used again */
	assert_non_null(tpf_graph_add_initializer(m->graph, "w_unused", TPF_DTYPE_FLOAT, 0, NULL,
						  (float[]){1}, 4));
	tpf_diag_free(d);
	tpf_pass_stats_free(st);
	tpf_model_free(m);
}

static void test_dce_subgraph(void **state)
{
	struct tpf_model *m = new_model();
	struct tpf_graph *g = m->graph, *body;
	struct tpf_value *c = tpf_graph_add_input(g, "c", TPF_DTYPE_BOOL, 0, NULL);
	struct tpf_node *ifn, *dead_if, *k;
	struct tpf_attr a = {.name = "then_branch", .kind = TPF_ATTR_GRAPH};
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pass_stats *st = tpf_pass_stats_create();

	ifn = add1(g, "", "If", "live_if", c, NULL, "y");
	body = tpf_graph_create(g);
	body->owner = ifn;
	k = tpf_graph_add_node(body, "", "Constant", "k", NULL, 0, 1, NULL);
	tpf_node_set_attr_float(k, "value_float", 1.0f);
	tpf_graph_add_output(body, k->outputs[0]);
	k = tpf_graph_add_node(body, "", "Constant", "dead_in_body", NULL, 0, 1, NULL);
	tpf_node_set_attr_float(k, "value_float", 2.0f);
	a.g = body;
	assert_int_equal(tpf_node_add_attr(ifn, &a), TPF_OK);
	body = tpf_graph_create(g);
	body->owner = ifn;
	k = tpf_graph_add_node(body, "", "Constant", "k2", NULL, 0, 1, NULL);
	tpf_node_set_attr_float(k, "value_float", 3.0f);
	tpf_graph_add_output(body, k->outputs[0]);
	a.name = "else_branch";
	a.g = body;
	assert_int_equal(tpf_node_add_attr(ifn, &a), TPF_OK);
	tpf_graph_add_output(g, ifn->outputs[0]);

	/* an unused If whose body holds an op with possible side effects stays */
	dead_if = add1(g, "", "If", "dead_if_kept", c, NULL, NULL);
	body = tpf_graph_create(g);
	body->owner = dead_if;
	k = tpf_graph_add_node(body, "vendor", "Log", "log", NULL, 0, 1, NULL);
	tpf_graph_add_output(body, k->outputs[0]);
	a.name = "then_branch";
	a.g = body;
	assert_int_equal(tpf_node_add_attr(dead_if, &a), TPF_OK);
	body = tpf_graph_create(g);
	body->owner = dead_if;
	k = tpf_graph_add_node(body, "vendor", "Log", "log2", NULL, 0, 1, NULL);
	tpf_graph_add_output(body, k->outputs[0]);
	a.name = "else_branch";
	a.g = body;
	assert_int_equal(tpf_node_add_attr(dead_if, &a), TPF_OK);

	assert_int_equal(run(m, "dce", st, d), TPF_OK);
	assert_true(has_node(g, "live_if"));
	assert_true(has_node(g, "dead_if_kept"));
	assert_false(has_node(tpf_node_attr(ifn, "then_branch")->g, "dead_in_body"));
	assert_true(has_node(tpf_node_attr(ifn, "then_branch")->g, "k"));
	assert_int_equal(tpf_pass_stats_get(st, "dce", "nodes-removed"), 1);
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_remove_identity(void **state)
{
	struct tpf_model *m = new_model();
	struct tpf_graph *g = m->graph;
	int64_t d4[] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, d4);
	struct tpf_node *id1, *relu, *id_out, *id_passthrough, *neg;
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();

	id1 = add1(g, "", "Identity", "id_inner", x, NULL, "x_copy");
	relu = add1(g, "", "Relu", "relu", id1->outputs[0], NULL, "r");
	id_out = add1(g, "", "Identity", "id_out", relu->outputs[0], NULL, "out");
	id_passthrough = add1(g, "", "Identity", "id_pass", x, NULL, "x_out");
	neg = add1(g, "", "Neg", "neg", id_out->outputs[0], NULL, "n");
	tpf_graph_add_output(g, id_out->outputs[0]);
	tpf_graph_add_output(g, id_passthrough->outputs[0]);
	tpf_graph_add_output(g, neg->outputs[0]);

	assert_int_equal(run(m, "remove-identity", st, d), TPF_OK);
	assert_int_equal(tpf_pass_stats_get(st, "remove-identity", "identity-removed"), 2);
	assert_false(has_node(g, "id_inner"));
	assert_false(has_node(g, "id_out"));
	/* a graph input passed to a graph output keeps its Identity */
	assert_true(has_node(g, "id_pass"));
	assert_ptr_equal(relu->inputs[0], x);
	/* relu now produces the graph output, under the output's name */
	assert_ptr_equal(g->outputs[0], relu->outputs[0]);
	assert_string_equal(relu->outputs[0]->name, "out");
	assert_ptr_equal(tpf_graph_find_value(g, "out"), relu->outputs[0]);
	assert_ptr_equal(neg->inputs[0], relu->outputs[0]);
	assert_int_equal(d->error_count, 0);
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_remove_noop_cast(void **state)
{
	struct tpf_model *m = new_model();
	struct tpf_graph *g = m->graph;
	int64_t d4[] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_BFLOAT16, 1, d4);
	/* the output of an op tpfuse does not know has no type */
	struct tpf_value *u = add1(g, "vendor", "Op", "vendor_op", x, NULL, NULL)->outputs[0];
	struct tpf_node *same, *up, *unknown, *relu;
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();

	same = add1(g, "", "Cast", "same", x, NULL, NULL);
	tpf_node_set_attr_int(same, "to", TPF_DTYPE_BFLOAT16);
	up = add1(g, "", "Cast", "to_float", same->outputs[0], NULL, NULL);
	tpf_node_set_attr_int(up, "to", TPF_DTYPE_FLOAT);
	unknown = add1(g, "", "Cast", "unknown_input", u, NULL, NULL);
	tpf_node_set_attr_int(unknown, "to", TPF_DTYPE_FLOAT);
	relu = add1(g, "", "Relu", "relu", up->outputs[0], NULL, NULL);
	tpf_graph_add_output(g, relu->outputs[0]);
	tpf_graph_add_output(g, unknown->outputs[0]);

	assert_int_equal(run(m, "remove-noop-cast", st, d), TPF_OK);
	assert_int_equal(tpf_pass_stats_get(st, "remove-noop-cast", "cast-removed"), 1);
	assert_false(has_node(g, "same"));
	assert_true(has_node(g, "to_float"));
	assert_true(has_node(g, "unknown_input"));
	assert_ptr_equal(up->inputs[0], x);
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_pipeline_names(void **state)
{
	struct tpf_model *m = dce_model();
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
	assert_true(has_node(m->graph, "dead_mul"));

	/* "none" and an empty list run nothing */
	tpf_diag_clear(d);
	assert_int_equal(run(m, "none", st, d), TPF_OK);
	assert_int_equal(run(m, "", st, d), TPF_OK);
	assert_true(has_node(m->graph, "dead_mul"));

	/* cleanup expands to the clean-up passes; the ones that found nothing say so */
	assert_int_equal(run(m, " cleanup ", st, d), TPF_OK);
	assert_false(has_node(m->graph, "dead_mul"));
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
		struct tpf_model *m = dce_model();
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
		cmocka_unit_test(test_dce),
		cmocka_unit_test(test_dce_subgraph),
		cmocka_unit_test(test_remove_identity),
		cmocka_unit_test(test_remove_noop_cast),
		cmocka_unit_test(test_pipeline_names),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_pipeline_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
