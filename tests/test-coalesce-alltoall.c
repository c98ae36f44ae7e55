/* coalesce-alltoall: independent AllToAll nodes of one dtype become Pack ->
 * one AllToAll -> Unpack; dependent ones, other dtypes, shapes that do not
 * split over the ranks stay alone; no cycle is ever created; a second run
 * changes nothing; and the copy tables computed at compile time move every
 * element where the separate AllToAll calls would (two simulated ranks). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-passes.h"

static struct tpf_model *new_model(int world)
{
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, TPF_MS_DOMAIN, 1), TPF_OK);
	char w[16];
	snprintf(w, sizeof(w), "%d", world);
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", w), TPF_OK);
	return m;
}

static struct tpf_value *a2a(struct tpf_graph *g, const char *name, struct tpf_value *x)
{
	struct tpf_node *n = tpf_graph_add_node(g, TPF_MS_DOMAIN, "AllToAll", name, &x, 1, 1, NULL);
	assert_non_null(n);
	tpf_value_copy_type(n->outputs[0], &x->type);
	return n->outputs[0];
}

static struct tpf_value *relu(struct tpf_graph *g, struct tpf_value *x)
{
	struct tpf_node *n = tpf_graph_add_node(g, "", "Relu", NULL, &x, 1, 1, NULL);
	assert_non_null(n);
	tpf_value_copy_type(n->outputs[0], &x->type);
	return n->outputs[0];
}

static size_t count_op(const struct tpf_graph *g, enum tpf_op op)
{
	size_t c = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next)
		c += n->op == op;
	return c;
}

static int64_t run_pass(struct tpf_model *m, FILE *explain)
{
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options o = {.passes = "coalesce-alltoall", .verify_each = 1};
	o.ctx.stats = st;
	o.ctx.explain = explain;
	o.ctx.rank = -1;
	o.ctx.world_size = -1;
	enum tpf_status s = tpf_pipeline_run(m, &o, d);
	if (s != TPF_OK)
		tpf_diag_print(d, stderr);
	assert_int_equal(s, TPF_OK);
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	int64_t removed = tpf_pass_stats_get(st, "coalesce-alltoall", "alltoall-removed");
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	return removed;
}

static const struct tpf_node *find_op(const struct tpf_graph *g, enum tpf_op op)
{
	for (const struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == op)
			return n;
	return NULL;
}

/* Applies a copy table (input, source offset, destination offset, length)
 * on float arrays. */
static void apply_segments(const struct tpf_attr *seg, float *const *src, float *const *dst, int pack)
{
	for (size_t s = 0; s + 3 < seg->n; s += 4) {
		int64_t buf = seg->ints[s], so = seg->ints[s + 1], dofs = seg->ints[s + 2], len = seg->ints[s + 3];
		const float *from = pack ? src[buf] : src[0];
		float *to = pack ? dst[0] : dst[buf];
		memcpy(to + dofs, from + so, (size_t)len * sizeof(float));
	}
}

static void test_three_independent(void **state)
{
	(void)state;
	const int W = 2;
	struct tpf_model *m = new_model(W);
	struct tpf_graph *g = m->graph;
	const int64_t d0[2] = {4, 3}, d1[1] = {6}, d2[3] = {2, 2, 2};
	struct tpf_value *x0 = tpf_graph_add_input(g, "x0", TPF_DTYPE_FLOAT, 2, d0);
	struct tpf_value *x1 = tpf_graph_add_input(g, "x1", TPF_DTYPE_FLOAT, 1, d1);
	struct tpf_value *x2 = tpf_graph_add_input(g, "x2", TPF_DTYPE_FLOAT, 3, d2);
	struct tpf_value *y0 = a2a(g, "a0", x0), *y1 = a2a(g, "a1", x1), *y2 = a2a(g, "a2", x2);
	tpf_graph_add_output(g, relu(g, y0));
	tpf_graph_add_output(g, y1);
	tpf_graph_add_output(g, relu(g, y2));
	char *y1_name = strdup(y1->name);

	assert_int_equal(run_pass(m, NULL), 3);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLTOALL), 1);
	const struct tpf_node *pack = find_op(g, TPF_OP_TPF_PACK);
	const struct tpf_node *unpack = find_op(g, TPF_OP_TPF_UNPACK);
	assert_non_null(pack);
	assert_non_null(unpack);
	assert_int_equal(pack->n_inputs, 3);
	assert_int_equal(unpack->n_outputs, 3);
	/* the graph output keeps its public name */
	assert_string_equal(g->outputs[1]->name, y1_name);
	assert_ptr_equal(g->outputs[1]->producer, unpack);
	free(y1_name);

	/* Numerics: two ranks, each holding its own inputs.  Separate AllToAll:
	 * rank r's output i = concat over source ranks q of q's chunk r of x_i. */
	const int64_t numel[3] = {12, 6, 8};
	float in[2][3][16], want[2][3][16], got[2][3][16], packed[2][32], recv[2][32];
	for (int r = 0; r < W; r++)
		for (int i = 0; i < 3; i++)
			for (int e = 0; e < numel[i]; e++)
				in[r][i][e] = (float)(1000 * r + 100 * i + e);
	for (int r = 0; r < W; r++)
		for (int i = 0; i < 3; i++) {
			int64_t c = numel[i] / W;
			for (int q = 0; q < W; q++)
				memcpy(&want[r][i][q * c], &in[q][i][r * c], (size_t)c * sizeof(float));
		}
	const struct tpf_attr *ps = tpf_node_attr(pack, "segments");
	const struct tpf_attr *us = tpf_node_attr(unpack, "segments");
	assert_non_null(ps);
	assert_non_null(us);
	assert_int_equal(ps->n, 4 * 3 * W);
	const int64_t S = (12 + 6 + 8) / W; /* elements per destination chunk */
	for (int r = 0; r < W; r++) {
		float *src[3] = {in[r][0], in[r][1], in[r][2]}, *dst[1] = {packed[r]};
		apply_segments(ps, src, dst, 1);
	}
	for (int r = 0; r < W; r++) /* the one AllToAll of the packed buffers */
		for (int q = 0; q < W; q++)
			memcpy(&recv[r][q * S], &packed[q][r * S], (size_t)S * sizeof(float));
	for (int r = 0; r < W; r++) {
		float *src[1] = {recv[r]}, *dst[3] = {got[r][0], got[r][1], got[r][2]};
		apply_segments(us, src, dst, 0);
		for (int i = 0; i < 3; i++)
			assert_memory_equal(got[r][i], want[r][i], (size_t)numel[i] * sizeof(float));
	}
	/* idempotent */
	assert_int_equal(run_pass(m, NULL), 0);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLTOALL), 1);
	tpf_model_free(m);
}

static void test_dependent_and_near_misses(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(2);
	struct tpf_graph *g = m->graph;
	const int64_t d[2] = {4, 4}, odd[2] = {3, 4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, d);
	struct tpf_value *h = tpf_graph_add_input(g, "h", TPF_DTYPE_FLOAT16, 2, d);
	struct tpf_value *o = tpf_graph_add_input(g, "o", TPF_DTYPE_FLOAT, 2, odd);
	/* a chain: the second depends on the first */
	struct tpf_value *c1 = a2a(g, "chain1", x);
	struct tpf_value *c2 = a2a(g, "chain2", relu(g, c1));
	/* another dtype, and a first dim that does not split over 2 ranks */
	struct tpf_value *hh = a2a(g, "half", h);
	struct tpf_value *oo = a2a(g, "odd", o);
	tpf_graph_add_output(g, c2);
	tpf_graph_add_output(g, hh);
	tpf_graph_add_output(g, oo);

	char *text = NULL;
	size_t len = 0;
	FILE *ex = open_memstream(&text, &len);
	assert_non_null(ex);
	assert_int_equal(run_pass(m, ex), 0);
	fclose(ex);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLTOALL), 4);
	assert_null(find_op(g, TPF_OP_TPF_PACK));
	assert_non_null(strstr(text, "node 'odd' (com.microsoft::AllToAll): not coalesced: first dimension does not divide"));
	assert_non_null(strstr(text, "node 'half'"));
	free(text);
	tpf_model_free(m);
}

/* Two dtype groups whose members depend across the groups (A || B, C needs
 * B, D needs A): coalescing both would make a cycle.  One group forms, the
 * graph stays acyclic and verifies. */
static void test_cross_dependent_groups(void **state)
{
	(void)state;
	struct tpf_model *m = new_model(2);
	struct tpf_graph *g = m->graph;
	const int64_t d[2] = {4, 2};
	struct tpf_value *xa = tpf_graph_add_input(g, "xa", TPF_DTYPE_FLOAT, 2, d);
	struct tpf_value *xb = tpf_graph_add_input(g, "xb", TPF_DTYPE_FLOAT16, 2, d);
	struct tpf_value *ya = a2a(g, "A", xa);
	struct tpf_value *yb = a2a(g, "B", xb);
	struct tpf_node *cast_b = tpf_graph_add_node(g, "", "Cast", "cast_b", &yb, 1, 1, NULL);
	tpf_node_set_attr_int(cast_b, "to", TPF_DTYPE_FLOAT);
	tpf_value_set_type(cast_b->outputs[0], TPF_DTYPE_FLOAT, 2, d);
	struct tpf_node *cast_a = tpf_graph_add_node(g, "", "Cast", "cast_a", &ya, 1, 1, NULL);
	tpf_node_set_attr_int(cast_a, "to", TPF_DTYPE_FLOAT16);
	tpf_value_set_type(cast_a->outputs[0], TPF_DTYPE_FLOAT16, 2, d);
	struct tpf_value *yc = a2a(g, "C", cast_b->outputs[0]);
	struct tpf_value *yd = a2a(g, "D", cast_a->outputs[0]);
	tpf_graph_add_output(g, yc);
	tpf_graph_add_output(g, yd);

	assert_int_equal(run_pass(m, NULL), 2);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLTOALL), 3);
	struct tpf_diag *dg = tpf_diag_create();
	assert_int_equal(tpf_graph_toposort(g, dg), TPF_OK);
	tpf_diag_free(dg);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_three_independent),
		cmocka_unit_test(test_dependent_and_near_misses),
		cmocka_unit_test(test_cross_dependent_groups),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
