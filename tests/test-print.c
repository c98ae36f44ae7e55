/* Text and DOT dumps: exact text for a small graph, determinism, value
 * numbering through subgraphs, constants, escaping, allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-ir.h"

/* The dump `print` writes, in a malloc'ed string; its status in *st. */
static char *dump_with(enum tpf_status (*print)(const struct tpf_model *, FILE *),
                       const struct tpf_model *m, enum tpf_status *st)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	*st = print(m, f);
	fclose(f);
	return buf;
}

static char *dump_text(const struct tpf_model *m, enum tpf_status *st)
{
	return dump_with(tpf_model_print_text, m, st);
}

static char *dump_dot(const struct tpf_model *m, enum tpf_status *st)
{
	return dump_with(tpf_model_print_dot, m, st);
}

/* hidden -> AllReduce -> RMSNormalization(gamma) -> output, plus a scalar
 * epsilon constant and an Add with an omitted-output node. */
static struct tpf_model *small_model(void)
{
	static uint16_t gamma[4096];
	const char *dims[] = {"T", "4096"};
	int64_t gdim[] = {4096};
	float eps = 1e-6f;
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g;
	struct tpf_value *x, *w, *e;
	struct tpf_node *ar, *norm, *add;

	assert_non_null(m);
	g = m->graph;
	m->ir_version = 10;
	m->producer_name = "unit";
	m->producer_version = "1";
	assert_int_equal(tpf_model_set_opset(m, "com.microsoft", 1), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "2"), TPF_OK);
	assert_int_equal(tpf_model_set_metadata(m, "tp_rank", "0"), TPF_OK);
	x = tpf_graph_add_input_sym(g, "hidden", TPF_DTYPE_BFLOAT16, 2, dims);
	w = tpf_graph_add_initializer(g, "norm.weight", TPF_DTYPE_BFLOAT16, 1, gdim, gamma,
				      sizeof(gamma));
	e = tpf_graph_add_initializer(g, "eps", TPF_DTYPE_FLOAT, 0, NULL, &eps, sizeof(eps));
	assert_non_null(x);
	assert_non_null(w);
	assert_non_null(e);
	ar = tpf_graph_add_node(g, "com.microsoft", "AllReduce", "layer0/ar",
				(struct tpf_value *[]){x}, 1, 1, (const char *[]){"ar_out"});
	assert_non_null(ar);
	tpf_value_copy_type(ar->outputs[0], &x->type);
	norm = tpf_graph_add_node(g, "", "RMSNormalization", "layer0/norm",
				  (struct tpf_value *[]){ar->outputs[0], w}, 2, 1,
				  (const char *[]){"normed"});
	assert_non_null(norm);
	assert_int_equal(tpf_node_set_attr_float(norm, "epsilon", 1e-6f), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(norm, "axis", -1), TPF_OK);
	tpf_value_copy_type(norm->outputs[0], &x->type);
	add = tpf_graph_add_node(g, "", "Add", "", (struct tpf_value *[]){norm->outputs[0], e}, 2,
				 1, (const char *[]){"sum"});
	assert_non_null(add);
	assert_int_equal(tpf_graph_add_output(g, add->outputs[0]), TPF_OK);
	return m;
}

static const char small_expected[] =
	"ir_version 10\n"
	"producer \"unit\" \"1\"\n"
	"opset \"\" 23\n"
	"opset \"com.microsoft\" 1\n"
	"metadata \"tp_rank\" \"0\"\n"
	"metadata \"tp_world_size\" \"2\"\n"
	"graph \"\" {\n"
	"  input %0: bf16[T,4096] \"hidden\"\n"
	"  init %1: bf16[4096] \"norm.weight\" (8192 bytes)\n"
	"  init %2: f32[] \"eps\" = 1e-06\n"
	"  %3 = com.microsoft.AllReduce(%0) : bf16[T,4096]  # layer0/ar\n"
	"  %4 = RMSNormalization(%3, %1) {axis=-1, epsilon=1e-06} : bf16[T,4096]  # layer0/norm\n"
	"  %5 = Add(%4, %2) : ?  # -> sum\n"
	"  output %5: ? \"sum\"\n"
	"}\n";

static void test_text_exact(void **state)
{
	struct tpf_model *m = small_model();
	enum tpf_status st;
	char *s = dump_text(m, &st);

	assert_int_equal(st, TPF_OK);
	assert_string_equal(s, small_expected);
	free(s);
	tpf_model_free(m);
}

static void test_text_deterministic_and_rename_stable(void **state)
{
	struct tpf_model *a = small_model(), *b = small_model();
	struct tpf_node *n;
	enum tpf_status st;
	char *sa, *sb, *sa2;

	sa = dump_text(a, &st);
	sa2 = dump_text(a, &st);
	/* renaming intermediate values does not change the dump */
	for (n = b->graph->first; n; n = n->next)
		if (n->name[0] && n->outputs[0])
			assert_int_equal(tpf_value_rename(n->outputs[0],
							  tpf_graph_unique_name(b->graph, "r")),
					 TPF_OK);
	sb = dump_text(b, &st);
	assert_string_equal(sa, sa2);
	assert_string_equal(sa, sb);
	free(sa);
	free(sa2);
	free(sb);
	tpf_model_free(a);
	tpf_model_free(b);
}

static void test_text_attrs_and_origin(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, (int64_t[]){4});
	struct tpf_node *n;
	enum tpf_status st;
	char *s;

	n = tpf_graph_add_node(g, "ai.tpfuse", "Thing", "t", (struct tpf_value *[]){NULL, x}, 2, 3,
			       (const char *[]){"a", "", "c"});
	assert_non_null(n);
	tpf_node_set_attr_float(n, "zf", 1.0f);
	tpf_node_set_attr_float(n, "pf", 0.1f);
	tpf_node_set_attr_string(n, "s", "q\"\\\n\x01");
	tpf_node_set_attr_floats(n, "fl", (float[]){0.5f, 2.0f}, 2);
	tpf_node_set_attr_ints(n, "il", (int64_t[]){1, -2}, 2);
	tpf_node_set_attr_tensor(n, "tv",
				 tpf_tensor_create(g->arena, "tv", TPF_DTYPE_INT32, 1,
						   (int64_t[]){2}, (int32_t[]){7, -8}, 8));
	n->origin_pass = "fuse-x";
	n->origin_pattern = "p1";
	tpf_graph_add_output(g, n->outputs[2]);
	s = dump_text(m, &st);
	assert_int_equal(st, TPF_OK);
	assert_non_null(strstr(s, "%1, _, %2 = ai.tpfuse.Thing(_, %0) {fl=[0.5, 2.0], il=[1, -2], "
				  "pf=0.1, s=\"q\\\"\\\\\\n\\x01\", "
				  "tv=tensor<i32[2] = [7, -8]>, zf=1.0} : (?, ?)  # t [fuse-x/p1]\n"));
	free(s);
	tpf_model_free(m);
}

static void test_text_subgraph_numbering(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph, *then_g, *else_g;
	struct tpf_value *c = tpf_graph_add_input(g, "cond", TPF_DTYPE_BOOL, 0, NULL);
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, (int64_t[]){4});
	struct tpf_value *cap;
	struct tpf_node *ifn, *sn;
	struct tpf_attr a = {0};
	enum tpf_status st;
	char *s;

	ifn = tpf_graph_add_node(g, "", "If", "branch", (struct tpf_value *[]){c}, 1, 1,
				 (const char *[]){"y"});
	then_g = tpf_graph_create(g);
	else_g = tpf_graph_create(g);
	then_g->name = "then";
	else_g->name = "else";
	/* the then-branch captures x */
	cap = tpf_graph_new_value(then_g, "x");
	cap->kind = TPF_VALUE_OUTER;
	cap->outer = x;
	sn = tpf_graph_add_node(then_g, "", "Neg", "neg", (struct tpf_value *[]){cap}, 1, 1, NULL);
	tpf_graph_add_output(then_g, sn->outputs[0]);
	sn = tpf_graph_add_node(else_g, "", "Constant", "k", NULL, 0, 1, NULL);
	tpf_node_set_attr_float(sn, "value_float", 2.5f);
	tpf_graph_add_output(else_g, sn->outputs[0]);
	a.name = "then_branch";
	a.kind = TPF_ATTR_GRAPH;
	a.g = then_g;
	assert_int_equal(tpf_node_add_attr(ifn, &a), TPF_OK);
	a.name = "else_branch";
	a.g = else_g;
	assert_int_equal(tpf_node_add_attr(ifn, &a), TPF_OK);
	sn = tpf_graph_add_node(g, "", "Relu", "after", (struct tpf_value *[]){ifn->outputs[0]}, 1,
				1, NULL);
	tpf_graph_add_output(g, sn->outputs[0]);

	s = dump_text(m, &st);
	assert_int_equal(st, TPF_OK);
	assert_non_null(strstr(s, "  %2 = If(%0) {else_branch=graph, then_branch=graph} : ?  # branch\n"
				  "    else_branch: graph \"else\" {\n"
				  "      %3 = Constant() {value_float=2.5} : ?  # k\n"
				  "      output %3: ? "));
	assert_non_null(strstr(s, "    then_branch: graph \"then\" {\n"
				  "      %4 = Neg(%1) : ?  # neg\n"));
	assert_non_null(strstr(s, "  %5 = Relu(%2) : ?  # after\n"));
	free(s);

	s = dump_dot(m, &st);
	assert_int_equal(st, TPF_OK);
	assert_non_null(strstr(s, "subgraph cluster_g"));
	assert_non_null(strstr(s, "g0_v1 -> g1_n0 [style=dashed, label=\"f32[4]\"]")); /* capture */
	free(s);
	tpf_model_free(m);
}

static void test_text_tensor_forms(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	uint16_t bf[2] = {0x3f80, 0xc000}; /* 1, -2 */
	uint8_t fp4[2] = {0x21, 0x0f};     /* 0.5, 1, -6, 0 */
	uint8_t big[64] = {0};
	struct tpf_value *v;
	enum tpf_status st;
	char *s;

	tpf_graph_add_initializer(g, "bf", TPF_DTYPE_BFLOAT16, 1, (int64_t[]){2}, bf, sizeof(bf));
	tpf_graph_add_initializer(g, "fp4", TPF_DTYPE_FLOAT4E2M1, 1, (int64_t[]){4}, fp4, 2);
	tpf_graph_add_initializer(g, "big", TPF_DTYPE_UINT8, 1, (int64_t[]){64}, big, sizeof(big));
	v = tpf_graph_add_initializer(g, "ext", TPF_DTYPE_FLOAT, 2, (int64_t[]){2, 2}, NULL, 16);
	v->init->is_external = 1;
	v->init->ext_location = "w.data";
	v->init->ext_offset = 4096;
	v->init->ext_length = 16;
	s = dump_text(m, &st);
	assert_int_equal(st, TPF_OK);
	assert_non_null(strstr(s, "init %0: bf16[2] \"bf\" = [1.0, -2.0]\n"));
	assert_non_null(strstr(s, "init %1: fp4e2m1[4] \"fp4\" = [0.5, 1.0, -6.0, 0.0]\n") ||
			strstr(s, "\"fp4\" = [0.5, 1.0, -6.0, 0.0]\n"));
	assert_non_null(strstr(s, "init %2: u8[64] \"big\" (64 bytes)\n") ||
			strstr(s, "\"big\" (64 bytes)\n"));
	assert_non_null(strstr(s, "\"ext\" (16 bytes, external \"w.data\" offset 4096)\n"));
	free(s);
	tpf_model_free(m);
}

static void test_dot_origin_and_escape(void **state)
{
	struct tpf_model *m = small_model();
	struct tpf_node *n = m->graph->first->next;
	enum tpf_status st;
	char *s, *s2;

	n->origin_pass = "fuse-allreduce-rmsnorm";
	n->origin_pattern = "ar+norm";
	n->name = "has \"quotes\" \\ and\nnewline";
	s = dump_dot(m, &st);
	assert_int_equal(st, TPF_OK);
	s2 = dump_dot(m, &st);
	assert_string_equal(s, s2);
	assert_non_null(strstr(s, "digraph "));
	assert_non_null(strstr(s, "has \\\"quotes\\\" \\\\ and\\nnewline"));
	assert_non_null(strstr(s, "[fuse-allreduce-rmsnorm/ar+norm]"));
	assert_non_null(strstr(s, "fillcolor="));
	assert_non_null(strstr(s, "label=\"bf16[T,4096]\""));
	assert_non_null(strstr(s, "2 initializers"));
	free(s);
	free(s2);
	tpf_model_free(m);
}

static void test_print_alloc_failures(void **state)
{
	struct tpf_model *m = small_model();
	enum tpf_status st;
	uint64_t i;
	char *s;

	for (i = 1; i < 40; i++) {
		tpf_alloc_fail_after(i);
		s = dump_text(m, &st);
		tpf_alloc_fail_after(0);
		assert_true(st == TPF_OK || st == TPF_ERR_NOMEM);
		free(s);
		tpf_alloc_fail_after(i);
		s = dump_dot(m, &st);
		tpf_alloc_fail_after(0);
		assert_true(st == TPF_OK || st == TPF_ERR_NOMEM);
		free(s);
	}
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text_exact),
		cmocka_unit_test(test_text_deterministic_and_rename_stable),
		cmocka_unit_test(test_text_attrs_and_origin),
		cmocka_unit_test(test_text_subgraph_numbering),
		cmocka_unit_test(test_text_tensor_forms),
		cmocka_unit_test(test_dot_origin_and_escape),
		cmocka_unit_test(test_print_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
