/* SPDX-License-Identifier: MIT */
/* The pattern engine: matching rules, the rewriter, the greedy driver,
 * the context checks see, statistics (counters are pattern names),
 * near-miss reports and tracing, on small hand-built graphs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pattern.h"
#include "test-util.h"

/* ------------------------------------------------------------------ builders */

static const int64_t dim4[] = {4};

static struct tpf_value *in_f32(struct tpf_graph *g, const char *name)
{
	struct tpf_value *v = tpf_graph_add_input(g, name, TPF_DTYPE_FLOAT, 1, dim4);
	assert_non_null(v);
	return v;
}

static struct tpf_value *const_f32(struct tpf_graph *g, const char *name, float x)
{
	struct tpf_value *v = tpf_graph_add_initializer(g, name, TPF_DTYPE_FLOAT, 0, NULL, &x, 4);
	assert_non_null(v);
	return v;
}

/* A one-output ONNX node with a float32[4] output. */
static struct tpf_value *op(struct tpf_graph *g, const char *op_type, const char *name,
			    struct tpf_value *a, struct tpf_value *b)
{
	struct tpf_value *in[2] = {a, b};
	struct tpf_node *n = tpf_graph_add_node(g, "", op_type, name, in, b ? 2 : 1, 1, NULL);
	assert_non_null(n);
	tpf_value_set_type(n->outputs[0], TPF_DTYPE_FLOAT, 1, dim4);
	return n->outputs[0];
}

static struct tpf_value *cast(struct tpf_graph *g, const char *name, struct tpf_value *a,
			      enum tpf_dtype to)
{
	struct tpf_node *n = tpf_graph_add_node(g, "", "Cast", name, &a, 1, 1, NULL);
	assert_non_null(n);
	assert_int_equal(tpf_node_set_attr_int(n, "to", to), TPF_OK);
	tpf_value_set_type(n->outputs[0], to, 1, dim4);
	return n->outputs[0];
}

/* ------------------------------------------------------------------ patterns */

static enum tpf_status rewrite_nothing(struct tpf_rewriter *rw, struct tpf_match *m)
{
	(void)rw;
	(void)m;
	return TPF_OK;
}

static const struct tpf_pattern pat_add_comm = {
	.name = "add-comm",
	.root = TPF_PAT_OP(ADD, "add", TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x"),
			   TPF_PAT_CONST("c")),
	.rewrite = rewrite_nothing,
};

static const struct tpf_pattern pat_add_fixed = {
	.name = "add-fixed",
	.root = TPF_PAT_OP(ADD, "add", 0, NULL, TPF_PAT_ANY("x"), TPF_PAT_CONST("c")),
	.rewrite = rewrite_nothing,
};

static void test_commutative(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = in_f32(g, "x"), *c = const_f32(g, "c", 1.0f);
	struct tpf_value *a1 = op(g, "Add", "a1", x, c), *a2 = op(g, "Add", "a2", c, x);
	struct tpf_match mt;
	char why[256];

	assert_true(tpf_pattern_match(&pat_add_comm, NULL, a1->producer, &mt, NULL, 0, NULL));
	assert_ptr_equal(tpf_match_value(&mt, "x"), x);
	assert_ptr_equal(tpf_match_value(&mt, "c"), c);
	assert_true(tpf_pattern_match(&pat_add_comm, NULL, a2->producer, &mt, NULL, 0, NULL));
	assert_ptr_equal(tpf_match_value(&mt, "x"), x);
	assert_ptr_equal(tpf_match_value(&mt, "c"), c);

	assert_true(tpf_pattern_match(&pat_add_fixed, NULL, a1->producer, &mt, NULL, 0, NULL));
	assert_false(tpf_pattern_match(&pat_add_fixed, NULL, a2->producer, &mt, why, sizeof(why), NULL));
	assert_non_null(strstr(why, "not a constant"));
	tpf_model_free(m);
}

static const struct tpf_pattern pat_neg_add = {
	.name = "neg-add",
	.root = TPF_PAT_OP(ADD, NULL, TPF_PNODE_COMMUTE, NULL,
			   TPF_PAT_OP(NEG, "neg", 0, NULL, TPF_PAT_ANY("x")), TPF_PAT_CONST("c")),
	.rewrite = rewrite_nothing,
};

static const struct tpf_pattern pat_neg_add_multi = {
	.name = "neg-add-multi",
	.root = TPF_PAT_OP(ADD, NULL, TPF_PNODE_COMMUTE, NULL,
			   TPF_PAT_OP(NEG, "neg", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("x")),
			   TPF_PAT_CONST("c")),
	.rewrite = rewrite_nothing,
};

static void test_single_use(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = in_f32(g, "x"), *c = const_f32(g, "c", 1.0f);
	struct tpf_value *n = op(g, "Neg", "neg", x, NULL);
	struct tpf_value *a = op(g, "Add", "add", n, c);
	struct tpf_match mt;
	char why[256];
	int progress;

	assert_true(tpf_pattern_match(&pat_neg_add, NULL, a->producer, &mt, NULL, 0, NULL));
	assert_int_equal(mt.n_nodes, 2);

	/* a second user of the intermediate */
	op(g, "Relu", "relu", n, NULL);
	assert_false(tpf_pattern_match(&pat_neg_add, NULL, a->producer, &mt, why, sizeof(why), &progress));
	assert_non_null(strstr(why, "has 2 uses"));
	assert_non_null(strstr(why, "at Add[0] > Neg 'neg'"));
	assert_int_equal(progress, 1);
	assert_true(tpf_pattern_match(&pat_neg_add_multi, NULL, a->producer, &mt, NULL, 0, NULL));

	/* a graph output counts as a use */
	struct tpf_model *m2 = new_model(18);
	g = m2->graph;
	x = in_f32(g, "x");
	c = const_f32(g, "c", 1.0f);
	n = op(g, "Neg", "neg", x, NULL);
	a = op(g, "Add", "add", c, n);
	assert_int_equal(tpf_graph_add_output(g, n), TPF_OK);
	assert_false(tpf_pattern_match(&pat_neg_add, NULL, a->producer, &mt, NULL, 0, NULL));
	tpf_model_free(m2);
	tpf_model_free(m);
}

static const struct tpf_pattern pat_square = {
	.name = "square",
	.root = TPF_PAT_OP(MUL, NULL, 0, NULL, TPF_PAT_ANY("x"), TPF_PAT_ANY("x")),
	.rewrite = rewrite_nothing,
};

static void test_same_name_same_value(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = in_f32(g, "x"), *y = in_f32(g, "y");
	struct tpf_value *sq = op(g, "Mul", "sq", x, x), *xy = op(g, "Mul", "xy", x, y);
	struct tpf_match mt;
	char why[256];

	assert_true(tpf_pattern_match(&pat_square, NULL, sq->producer, &mt, NULL, 0, NULL));
	assert_false(tpf_pattern_match(&pat_square, NULL, xy->producer, &mt, why, sizeof(why), NULL));
	assert_non_null(strstr(why, "'x' is already 'x', here 'y'"));
	tpf_model_free(m);
}

static const struct tpf_pattern pat_sqrt_cast = {
	.name = "sqrt-cast",
	.root = TPF_PAT_OP(SQRT, NULL, 0, NULL, TPF_PAT_ANY_F("x", TPF_PNODE_OPT_CAST)),
	.rewrite = rewrite_nothing,
};

static void test_optional_cast(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = in_f32(g, "x");
	struct tpf_value *s1 = op(g, "Sqrt", "s1", cast(g, "c", x, TPF_DTYPE_FLOAT16), NULL);
	struct tpf_value *s2 = op(g, "Sqrt", "s2", x, NULL);
	struct tpf_match mt;

	assert_true(tpf_pattern_match(&pat_sqrt_cast, NULL, s1->producer, &mt, NULL, 0, NULL));
	assert_ptr_equal(tpf_match_value(&mt, "x"), x);
	assert_int_equal(mt.n_nodes, 2); /* the Cast is part of the match */
	assert_true(tpf_pattern_match(&pat_sqrt_cast, NULL, s2->producer, &mt, NULL, 0, NULL));
	assert_ptr_equal(tpf_match_value(&mt, "x"), x);
	assert_int_equal(mt.n_nodes, 1);
	tpf_model_free(m);
}

/* The check rejects the first operand order; the matcher backtracks. */
static const char *check_c_is_k1(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_value *c = tpf_match_value(m, "c");
	return strcmp(c->name, "k1") == 0 ? NULL : tpf_match_reason(m, "c is '%s'", c->name);
}

static const struct tpf_pattern pat_backtrack = {
	.name = "backtrack",
	.root = TPF_PAT_OP(ADD, NULL, TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("a"), TPF_PAT_CONST("c")),
	.check = check_c_is_k1,
	.rewrite = rewrite_nothing,
};

static const struct tpf_pattern pat_alt = {
	.name = "alt",
	.root = TPF_PAT_OP(SQRT, NULL, 0, NULL,
			   TPF_PAT_ALT(TPF_PAT_OP(NEG, "neg", 0, NULL, TPF_PAT_ANY("x")),
				       TPF_PAT_OP(ABS, "abs", 0, NULL, TPF_PAT_ANY("x")))),
	.rewrite = rewrite_nothing,
};

static void test_backtracking(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *k1 = const_f32(g, "k1", 1.0f), *k2 = const_f32(g, "k2", 2.0f);
	struct tpf_value *a = op(g, "Add", "a", k2, k1), *b = op(g, "Add", "b", k2, k2);
	struct tpf_value *x = in_f32(g, "x");
	struct tpf_value *s1 = op(g, "Sqrt", "s1", op(g, "Abs", "abs", x, NULL), NULL);
	struct tpf_value *s2 = op(g, "Sqrt", "s2", op(g, "Relu", "relu", x, NULL), NULL);
	struct tpf_match mt;
	char why[256];
	int progress;

	assert_true(tpf_pattern_match(&pat_backtrack, NULL, a->producer, &mt, NULL, 0, NULL));
	assert_ptr_equal(tpf_match_value(&mt, "c"), k1);
	assert_ptr_equal(tpf_match_value(&mt, "a"), k2);
	assert_false(tpf_pattern_match(&pat_backtrack, NULL, b->producer, &mt, why, sizeof(why), &progress));
	assert_string_equal(why, "check: c is 'k2'");
	assert_int_equal(progress, 2);

	assert_true(tpf_pattern_match(&pat_alt, NULL, s1->producer, &mt, NULL, 0, NULL));
	assert_non_null(tpf_match_node(&mt, "abs"));
	assert_null(tpf_match_node(&mt, "neg"));
	assert_false(tpf_pattern_match(&pat_alt, NULL, s2->producer, &mt, why, sizeof(why), NULL));
	assert_non_null(strstr(why, "expected Neg, found Relu 'relu'"));
	tpf_model_free(m);
}

/* ------------------------------------------------------------ driver tests */

/* Neg(Neg(x)) -> x */
static enum tpf_status rewrite_double_neg(struct tpf_rewriter *rw, struct tpf_match *m)
{
	enum tpf_status st = tpf_rewriter_replace(rw, m->root->outputs[0], tpf_match_value(m, "x"));
	return st ? st : tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_double_neg = {
	.name = "double-neg",
	.root = TPF_PAT_OP(NEG, NULL, 0, NULL, TPF_PAT_OP(NEG, NULL, 0, NULL, TPF_PAT_ANY("x"))),
	.rewrite = rewrite_double_neg,
};

/* Passes made of the test patterns: tpf_pattern_run takes the pass. */
static const struct tpf_pass double_neg_pass = {
	.name = "test-pass",
	.patterns = (const struct tpf_pattern *const[]){&pat_double_neg, NULL},
};

static void test_driver_fixed_point(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *v = in_f32(g, "x");
	for (int i = 0; i < 5; i++)
		v = op(g, "Neg", NULL, v, NULL);
	assert_int_equal(tpf_graph_add_output(g, v), TPF_OK);

	struct tpf_pass_context ctx = {.stats = tpf_pass_stats_create(), .rank = -1,
				       .world_size = -1};
	struct tpf_diag *d = tpf_diag_create();
	int changed = 0;
	assert_int_equal(tpf_pattern_run(m, &double_neg_pass, &ctx, &changed, d), TPF_OK);
	assert_true(changed);
	assert_int_equal(g->n_nodes, 1);
	assert_int_equal(tpf_pass_stats_get(ctx.stats, "test-pass", "double-neg"), 2);
	verify_ok(m);

	/* a second run is a no-op */
	assert_int_equal(tpf_pattern_run(m, &double_neg_pass, &ctx, &changed, d), TPF_OK);
	assert_false(changed);
	assert_int_equal(tpf_pass_stats_get(ctx.stats, "test-pass", "double-neg"), 2);
	tpf_pass_stats_free(ctx.stats);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Mul(x, 2) -> Add(x, x): checks origin marks and that the output keeps its name. */
static const char *check_two(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	double k;
	if (tpf_pattern_const_scalar(tpf_match_value(m, "two"), &k) || k != 2.0)
		return "not 2";
	return NULL;
}

static enum tpf_status rewrite_mul2(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *x = tpf_match_value(m, "x");
	struct tpf_value *in[2] = {x, x};
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_ADD, in, 2, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	enum tpf_status st = tpf_rewriter_replace(rw, m->root->outputs[0], n->outputs[0]);
	return st ? st : tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_mul2 = {
	.name = "mul2",
	.root = TPF_PAT_OP(MUL, NULL, TPF_PNODE_COMMUTE, NULL, TPF_PAT_ANY("x"),
			   TPF_PAT_CONST("two")),
	.check = check_two,
	.rewrite = rewrite_mul2,
};

static const struct tpf_pass mul2_pass = {
	.name = "test-pass",
	.patterns = (const struct tpf_pattern *const[]){&pat_mul2, NULL},
};

static void test_rewriter_marks_and_names(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = in_f32(g, "x"), *two = const_f32(g, "two", 2.0f);
	struct tpf_value *three = const_f32(g, "three", 3.0f);
	struct tpf_value *y = op(g, "Mul", "m", two, x);
	struct tpf_value *z = op(g, "Mul", "m3", x, three);
	assert_int_equal(tpf_value_rename(y, "y"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, y), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, z), TPF_OK);

	struct tpf_diag *d = tpf_diag_create();
	char *buf = NULL;
	size_t len = 0;
	FILE *ex = open_memstream(&buf, &len);
	assert_non_null(ex);
	struct tpf_pass_context ctx = {.explain = ex, .rank = -1, .world_size = -1};
	int changed;
	assert_int_equal(tpf_pattern_run(m, &mul2_pass, &ctx, &changed, d), TPF_OK);
	fclose(ex);
	assert_true(changed);
	assert_int_equal(count_op(g, TPF_OP_ADD), 1);
	assert_int_equal(count_op(g, TPF_OP_MUL), 1);
	const struct tpf_node *add = g->outputs[0]->producer;
	assert_int_equal(add->op, TPF_OP_ADD);
	assert_string_equal(add->origin_pass, "test-pass");
	assert_string_equal(add->origin_pattern, "mul2");
	assert_string_equal(add->name, "m/Add");
	assert_string_equal(g->outputs[0]->name, "y"); /* the output kept its name */
	assert_int_equal(g->outputs[0]->type.dtype, TPF_DTYPE_FLOAT);
	/* the Mul by 3 is a near miss: it failed in check */
	assert_non_null(strstr(buf, "near-miss: test-pass/mul2 at node 'm3' (Mul): check: not 2"));
	verify_ok(m);
	free(buf);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A rewrite that never makes progress: Neg(x) -> a fresh Neg(x). */
static enum tpf_status rewrite_neg_again(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_value *x = tpf_match_value(m, "x");
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_NEG, &x, 1, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	enum tpf_status st = tpf_rewriter_replace(rw, m->root->outputs[0], n->outputs[0]);
	return st ? st : tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_neg_again = {
	.name = "neg-again",
	.root = TPF_PAT_OP(NEG, NULL, 0, NULL, TPF_PAT_ANY("x")),
	.rewrite = rewrite_neg_again,
};

static void test_driver_limit(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *v = op(g, "Neg", "n", in_f32(g, "x"), NULL);
	assert_int_equal(tpf_graph_add_output(g, v), TPF_OK);
	const struct tpf_pass spin = {
		.name = "spin",
		.patterns = (const struct tpf_pattern *const[]){&pat_neg_again, NULL},
	};
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pass_context ctx = {.rank = -1, .world_size = -1};
	int changed;
	assert_int_equal(tpf_pattern_run(m, &spin, &ctx, &changed, d), TPF_ERR_LIMIT);
	assert_true(d->error_count > 0);
	assert_non_null(strstr(d->entries[0].text, "no fixed point"));
	verify_ok(m); /* still a valid graph */
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_trace(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *v = in_f32(g, "x");
	v = op(g, "Neg", "n1", v, NULL);
	v = op(g, "Neg", "n2", v, NULL);
	assert_int_equal(tpf_graph_add_output(g, v), TPF_OK);
	struct tpf_diag *d = tpf_diag_create();
	char *buf = NULL;
	size_t len = 0;
	FILE *tr = open_memstream(&buf, &len);
	struct tpf_pass_context ctx = {.explain = tr, .debug_only = "other,test-pass",
				       .rank = -1, .world_size = -1};
	int changed;
	assert_int_equal(tpf_pattern_run(m, &double_neg_pass, &ctx, &changed, d), TPF_OK);
	fclose(tr);
	assert_non_null(strstr(buf, "[test-pass] double-neg at node 'n2' (Neg): matched 2 nodes"));
	assert_non_null(strstr(buf, "erased node 'n1' (Neg)"));
	free(buf);
	assert_true(tpf_pattern_debug_enabled(&ctx, "test-pass"));
	assert_false(tpf_pattern_debug_enabled(&ctx, "test"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------ context */

/* Records the context it sees in the match's facts; needs a world size. */
static const char *check_context(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	int *seen = (int *)m->facts;

	seen[0] = pc->rank;
	seen[1] = pc->world_size;
	return pc->world_size > 0 ? NULL : "the world size is unknown";
}

static const struct tpf_pattern pat_context = {
	.name = "context",
	.root = TPF_PAT_OP(NEG, NULL, 0, NULL, TPF_PAT_ANY("x")),
	.check = check_context,
	.rewrite = rewrite_nothing,
	.explain_min_nodes = 1,
};

/* Checks see the rank and world size of the run: from the pass context,
 * else from the model's metadata, else unknown. */
static void test_check_context(void **state)
{
	(void)state;
	struct tpf_model *m = parse_model("opset \"\" 18\n"
					  "graph \"\" {\n"
					  "  input %0: f32[4] \"x\"\n"
					  "  %1 = Neg(%0) : f32[4]  # neg\n"
					  "  output %1: f32[4] \"y\"\n"
					  "}\n");
	struct tpf_node *neg = find_node(m->graph, "neg");
	struct tpf_pattern_context pc;
	struct tpf_match mt;
	char why[256];
	const int *seen = (const int *)mt.facts;

	/* nothing known */
	assert_false(tpf_pattern_match(&pat_context, NULL, neg, &mt, why, sizeof(why), NULL));
	assert_string_equal(why, "check: the world size is unknown");
	tpf_pattern_context_init(&pc, m, "p", NULL);
	assert_int_equal(pc.rank, -1);
	assert_int_equal(pc.world_size, -1);
	assert_ptr_equal(pc.model, m);
	assert_string_equal(pc.pass_name, "p");

	/* from the pass context */
	tpf_pattern_context_init(&pc, m, "p", &(struct tpf_pass_context){.rank = 1, .world_size = 4});
	assert_true(tpf_pattern_match(&pat_context, &pc, neg, &mt, NULL, 0, NULL));
	assert_int_equal(seen[0], 1);
	assert_int_equal(seen[1], 4);

	/* from the metadata; a context without a world size does not count */
	assert_int_equal(tpf_model_set_metadata(m, "tp_rank", "3"), TPF_OK);
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "8"), TPF_OK);
	tpf_pattern_context_init(&pc, m, "p",
				 &(struct tpf_pass_context){.rank = 1, .world_size = -1});
	assert_true(tpf_pattern_match(&pat_context, &pc, neg, &mt, NULL, 0, NULL));
	assert_int_equal(seen[0], 3);
	assert_int_equal(seen[1], 8);
	/* a world size given without a rank takes the rank from the metadata */
	tpf_pattern_context_init(&pc, m, "p",
				 &(struct tpf_pass_context){.rank = -1, .world_size = 4});
	assert_int_equal(pc.rank, 3);
	assert_int_equal(pc.world_size, 4);
	/* metadata that is not a count is unknown */
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "eight"), TPF_OK);
	tpf_pattern_context_init(&pc, m, "p", NULL);
	assert_int_equal(pc.world_size, -1);

	/* the driver resolves it for its checks: the near miss names the reason */
	const struct tpf_pass context_pass = {
		.name = "context-pass",
		.patterns = (const struct tpf_pattern *const[]){&pat_context, NULL},
	};
	char *buf = NULL;
	size_t len = 0;
	FILE *ex = open_memstream(&buf, &len);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pass_context ctx = {.explain = ex, .rank = -1, .world_size = -1};
	int changed;
	assert_int_equal(tpf_pattern_run(m, &context_pass, &ctx, &changed, d), TPF_OK);
	fclose(ex);
	assert_non_null(strstr(buf, "near-miss: context-pass/context at node 'neg' (Neg): check: "
				    "the world size is unknown"));
	free(buf);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A pattern pass's counters are its pattern names (each name once), then
 * its other counters: all of them show in the statistics of a run. */
static void test_counters_are_pattern_names(void **state)
{
	(void)state;
	size_t n, checked = 0;
	const struct tpf_pass *const *list = tpf_pass_list(&n);

	for (size_t i = 0; i < n; i++) {
		const struct tpf_pass *p = list[i];
		if (!p->patterns)
			continue;
		struct tpf_model *m = new_model(18);
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_pipeline_options o = {.passes = p->name};
		char *buf = NULL;
		size_t len = 0, lines = 0, expected = 0;
		o.ctx.stats = tpf_pass_stats_create();
		assert_int_equal(tpf_pipeline_run(m, &o, d), TPF_OK);
		FILE *f = open_memstream(&buf, &len);
		tpf_pass_stats_print(o.ctx.stats, f);
		fclose(f);
		for (const char *c = buf; (c = strchr(c, '\n')); c++)
			lines++;
		for (size_t k = 0; p->patterns[k]; k++) {
			const char *name = p->patterns[k]->name;
			int first = 1;
			for (size_t j = 0; j < k; j++)
				first &= strcmp(p->patterns[j]->name, name) != 0;
			expected += first;
			assert_non_null(strstr(buf, name));
		}
		for (size_t k = 0; p->counters && p->counters[k]; k++, expected++)
			assert_non_null(strstr(buf, p->counters[k]));
		assert_int_equal(lines, expected);
		/* tpf_pass_counter lists the same names */
		size_t listed = 0;
		for (const char *c; (c = tpf_pass_counter(p, listed)); listed++)
			assert_non_null(strstr(buf, c));
		assert_int_equal(listed, expected);
		/* nothing matched on an empty graph, and the pipeline says so */
		char note[128];
		snprintf(note, sizeof(note), "pass %s matched nothing", p->name);
		int noted = 0;
		for (size_t k = 0; k < d->count; k++)
			noted |= strstr(d->entries[k].text, note) != NULL;
		assert_true(noted);
		free(buf);
		tpf_pass_stats_free(o.ctx.stats);
		tpf_diag_free(d);
		tpf_model_free(m);
		checked++;
	}
	assert_true(checked >= 5);
}

static void test_const_helpers(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(18);
	struct tpf_graph *g = m->graph;
	uint16_t bf = 0x3fc0, hf = 0x3e00; /* 1.5 in both */
	int64_t ax[2] = {-1, 2};
	int64_t dims2[1] = {2};
	double k;
	int64_t out[4];
	size_t n;
	struct tpf_value *a = tpf_graph_add_initializer(g, "a", TPF_DTYPE_BFLOAT16, 0, NULL, &bf, 2);
	struct tpf_value *b = tpf_graph_add_initializer(g, "b", TPF_DTYPE_FLOAT16, 0, NULL, &hf, 2);
	struct tpf_value *c = tpf_graph_add_initializer(g, "c", TPF_DTYPE_INT64, 1, dims2, ax, 16);
	struct tpf_value *x = in_f32(g, "x");
	assert_int_equal(tpf_pattern_const_scalar(a, &k), 0);
	assert_true(k == 1.5);
	assert_int_equal(tpf_pattern_const_scalar(b, &k), 0);
	assert_true(k == 1.5);
	assert_int_equal(tpf_pattern_const_scalar(c, &k), -1);
	assert_int_equal(tpf_pattern_const_scalar(x, &k), -1);
	assert_int_equal(tpf_pattern_const_ints(c, out, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], -1);
	assert_int_equal(tpf_pattern_const_ints(c, out, 1, &n), -1);
	assert_int_equal(tpf_pattern_dtype(cast(g, "cc", x, TPF_DTYPE_BFLOAT16)), TPF_DTYPE_BFLOAT16);
	tpf_model_free(m);
}

/* Allocation failures inside the driver and rewrites: a status, never a crash. */
static void test_alloc_failures(void **state)
{
	(void)state;
	for (uint64_t k = 1; k < 200; k++) {
		struct tpf_model *m = new_model(18);
		struct tpf_graph *g = m->graph;
		struct tpf_value *x = in_f32(g, "x"), *two = const_f32(g, "two", 2.0f);
		struct tpf_value *v = x;
		for (int i = 0; i < 4; i++)
			v = op(g, "Mul", NULL, v, two);
		assert_int_equal(tpf_graph_add_output(g, v), TPF_OK);
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_pass_context ctx = {.rank = -1, .world_size = -1};
		int changed;
		tpf_alloc_fail_after(k);
		enum tpf_status st = tpf_pattern_run(m, &mul2_pass, &ctx, &changed, d);
		tpf_alloc_fail_after(0);
		assert_true(st == TPF_OK || st == TPF_ERR_NOMEM);
		if (st == TPF_OK)
			verify_ok(m);
		tpf_diag_free(d);
		tpf_model_free(m);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commutative),
		cmocka_unit_test(test_single_use),
		cmocka_unit_test(test_same_name_same_value),
		cmocka_unit_test(test_optional_cast),
		cmocka_unit_test(test_backtracking),
		cmocka_unit_test(test_driver_fixed_point),
		cmocka_unit_test(test_rewriter_marks_and_names),
		cmocka_unit_test(test_driver_limit),
		cmocka_unit_test(test_trace),
		cmocka_unit_test(test_check_context),
		cmocka_unit_test(test_counters_are_pattern_names),
		cmocka_unit_test(test_const_helpers),
		cmocka_unit_test(test_alloc_failures),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
