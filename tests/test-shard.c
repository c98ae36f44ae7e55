/* SPDX-License-Identifier: MIT */
/* tpf_shard on small hand-built graphs: the splits it chooses (through
 * Transpose too), the collectives it inserts, each rank's weight slices (a
 * fused q/k/v weight section by section), literal head counts rewritten
 * (inside a Concat part too), the LM head's gather, the vocab-parallel
 * embedding, what it refuses (a model already tensor-parallel, by its
 * metadata or its collectives' group_size) and what it leaves replicated
 * (a dim not divisible by W, a split meeting an op without a rule), and
 * allocation failures.  The example families and the export corpus are
 * covered end to end, with runs under mpirun, by tests/shard/shard_check.py. */
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

enum { T = 2, D = 4, F = 8 };

/* A float weight [r, c] whose element (i, j) is 100 * i + j. */
static struct tpf_value *weight(struct tpf_graph *g, const char *name, int64_t r, int64_t c)
{
	int64_t dims[2] = {r, c};
	float *v = malloc((size_t)(r * c) * sizeof(float));
	struct tpf_value *w;

	assert_non_null(v);
	for (int64_t i = 0; i < r; i++)
		for (int64_t j = 0; j < c; j++)
			v[i * c + j] = (float)(100 * i + j);
	w = tpf_graph_add_initializer(g, name, TPF_DTYPE_FLOAT, 2, dims, v,
				      (size_t)(r * c) * sizeof(float));
	free(v);
	assert_non_null(w);
	return w;
}

static float elem(const struct tpf_model *m, const char *name, int64_t i, int64_t j)
{
	struct tpf_value *v = tpf_graph_find_value(m->graph, name);
	const struct tpf_tensor *t;
	float x;

	assert_non_null(v);
	t = v->init;
	assert_non_null(t);
	assert_non_null(t->data);
	memcpy(&x, (const char *)t->data + (size_t)(i * t->dims[1] + j) * sizeof(float), sizeof(x));
	return x;
}

/* x [T, D] -> MatMul(up [D, F]) -> op -> MatMul(down [F, D]) -> y.  With
 * Relu, an MLP, its up projection column-parallel, its down row-parallel. */
static struct tpf_model *mlp_with(const char *domain, const char *op, const char *name)
{
	struct tpf_model *m = new_model(17);
	struct tpf_graph *g = m->graph;
	const char *dims[2] = {"2", "4"};
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 2, dims);
	struct tpf_value *up = weight(g, "up.weight", D, F), *down = weight(g, "down.weight", F, D);
	struct tpf_node *a = add_node(g, "", "MatMul", "up", 2, IN(x, up), 1);
	struct tpf_node *r = add_node(g, domain, op, name, 1, IN(a->outputs[0]), 1);
	struct tpf_node *b = add_node(g, "", "MatMul", "down", 2, IN(r->outputs[0], down), 1);

	assert_int_equal(tpf_value_rename(b->outputs[0], "y"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, b->outputs[0]), TPF_OK);
	return m;
}

static struct tpf_model *mlp(void)
{
	return mlp_with("", "Relu", "act");
}

/* A model whose one input `name` has the given text dims. */
static struct tpf_model *model_with_input(const char *name, enum tpf_dtype dt, int rank,
					  const char *const *dims, struct tpf_value **x)
{
	struct tpf_model *m = new_model(17);

	*x = add_input(m->graph, name, dt, rank, dims);
	return m;
}

/* One tpf_shard_create call: the model, its messages, the sharder, its
 * --explain text and its status. */
struct shard_run {
	struct tpf_model *m;
	struct tpf_diag *d;
	struct tpf_shard *sh;
	char *ex;
	enum tpf_status s;
};

/* Shards m at W = world (the embedding vocab-parallel when vocab) into r;
 * the status must be `want` (the messages are printed when it is not). */
static void shard(struct shard_run *r, struct tpf_model *m, int world, int vocab,
		  enum tpf_status want)
{
	size_t len = 0;
	FILE *f;

	r->m = m;
	r->d = tpf_diag_create();
	r->sh = NULL;
	r->ex = NULL;
	f = open_memstream(&r->ex, &len);
	assert_non_null(f);
	r->s = tpf_shard_create(m, &(struct tpf_shard_options){.world_size = world,
							       .vocab_parallel_embedding = vocab,
							       .explain = f},
				&r->sh, r->d);
	fclose(f);
	if (r->s != want)
		dump_diag(r->d);
	assert_int_equal(r->s, want);
}

static void expect_explained(const struct shard_run *r, const char *line)
{
	if (!strstr(r->ex, line))
		fail_msg("--explain does not say \"%s\":\n%s", line, r->ex);
}

static void shard_done(struct shard_run *r)
{
	free(r->ex);
	tpf_shard_free(r->sh);
	tpf_model_free(r->m);
	tpf_diag_free(r->d);
}

static void test_mlp_column_row(void **state)
{
	struct shard_run r;
	struct tpf_shard_stats st;
	struct tpf_graph *g;

	(void)state;
	shard(&r, mlp(), 2, 0, TPF_OK);
	g = r.m->graph;
	expect_explained(&r, "MatMul 'up' (weight 'up.weight' [4,8]): column-parallel");
	expect_explained(&r, "MatMul 'down' (weight 'down.weight' [8,4]): row-parallel");
	tpf_shard_get_stats(r.sh, &st);
	assert_int_equal(st.column, 1);
	assert_int_equal(st.row, 1);
	assert_int_equal(st.allreduce, 1);
	assert_int_equal(st.allgather, 0);
	assert_int_equal(st.weights_split, 2);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	/* the AllReduce gives the graph output, which keeps its name */
	assert_int_equal(g->outputs[0]->producer->op, TPF_OP_MS_ALLREDUCE);
	assert_string_equal(g->outputs[0]->name, "y");
	expect_type(tpf_graph_find_value(g, "up.weight"), "f32[4,4]");
	expect_type(tpf_graph_find_value(g, "down.weight"), "f32[4,4]");
	verify_ok(r.m);
	/* each rank's slices: columns of up, rows of down */
	for (int k = 0; k < 2; k++) {
		assert_int_equal(tpf_shard_rank(r.sh, k, r.d), TPF_OK);
		assert_true(elem(r.m, "up.weight", 1, 0) == (float)(100 + 4 * k));
		assert_true(elem(r.m, "up.weight", 3, 3) == (float)(300 + 4 * k + 3));
		assert_true(elem(r.m, "down.weight", 0, 2) == (float)(100 * 4 * k + 2));
		assert_true(elem(r.m, "down.weight", 3, 1) == (float)(100 * (4 * k + 3) + 1));
		assert_string_equal(tpf_model_metadata(r.m, "tp_rank"), k ? "1" : "0");
		assert_string_equal(tpf_model_metadata(r.m, "tp_world_size"), "2");
	}
	assert_int_equal(tpf_shard_rank(r.sh, 2, r.d), TPF_ERR_INVALID);
	shard_done(&r);
}

/* Attention-like: q = x Wq [T, 8] -> Reshape [T, 2 heads, 4] -> Softmax
 * over the head dim -> Reshape [T, 8] -> Wo.  The literal head count 2
 * becomes 1 on each rank, the merged size 8 becomes 4. */
static void test_head_counts_rewritten(void **state)
{
	const char *dims[2] = {"2", "4"};
	int64_t heads[3] = {T, 2, 4}, merged[2] = {T, 8};
	struct tpf_value *x;
	struct tpf_model *m = model_with_input("x", TPF_DTYPE_FLOAT, 2, dims, &x);
	struct tpf_graph *g = m->graph;
	struct tpf_value *wq = weight(g, "q.weight", D, F), *wo = weight(g, "o.weight", F, D);
	struct tpf_value *sh1 = add_ints(g, "heads_shape", 3, heads);
	struct tpf_value *sh2 = add_ints(g, "merged_shape", 2, merged);
	struct tpf_node *q = add_node(g, "", "MatMul", "q", 2, IN(x, wq), 1);
	struct tpf_node *r1 = add_node(g, "", "Reshape", "split_heads", 2, IN(q->outputs[0], sh1), 1);
	struct tpf_node *sm = add_node(g, "", "Softmax", "softmax", 1, IN(r1->outputs[0]), 1);
	struct tpf_node *r2 = add_node(g, "", "Reshape", "merge_heads", 2, IN(sm->outputs[0], sh2), 1);
	struct tpf_node *o = add_node(g, "", "MatMul", "o", 2, IN(r2->outputs[0], wo), 1);
	struct shard_run r;
	size_t k;
	int64_t v[3];

	(void)state;
	assert_int_equal(tpf_node_set_attr_int(sm->outputs[0]->producer, "axis", -1), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, o->outputs[0]), TPF_OK);
	shard(&r, m, 2, 0, TPF_OK);
	assert_int_equal(tpf_pattern_const_ints(r1->inputs[1], v, 3, &k), 0);
	assert_int_equal(k, 3);
	assert_true(v[0] == T && v[1] == 1 && v[2] == 4);
	assert_int_equal(tpf_pattern_const_ints(r2->inputs[1], v, 3, &k), 0);
	assert_true(k == 2 && v[0] == T && v[1] == 4);
	expect_type(r1->outputs[0], "f32[2,1,4]");
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLGATHER), 0);
	verify_ok(m);
	shard_done(&r);
}

/* The column split of `up` (axis 1 of [T, F]) goes through Transpose
 * (axis 0 of [F, T]), Relu, and a second Transpose back to axis 1, where
 * `down` reads it row-parallel: no gather, one AllReduce, and each
 * transposed value holds its rank's F / W rows or columns. */
static void test_split_through_transpose(void **state)
{
	const char *dims[2] = {"2", "4"};
	struct tpf_value *x;
	struct tpf_model *m = model_with_input("x", TPF_DTYPE_FLOAT, 2, dims, &x);
	struct tpf_graph *g = m->graph;
	struct tpf_value *up = weight(g, "up.weight", D, F), *down = weight(g, "down.weight", F, D);
	struct tpf_node *a = add_node(g, "", "MatMul", "up", 2, IN(x, up), 1);
	struct tpf_node *t1 =
		add_node(g, "", "Transpose", "to_features_first", 1, IN(a->outputs[0]), 1);
	struct tpf_node *act = add_node(g, "", "Relu", "act", 1, IN(t1->outputs[0]), 1);
	struct tpf_node *t2 =
		add_node(g, "", "Transpose", "to_tokens_first", 1, IN(act->outputs[0]), 1);
	struct tpf_node *b = add_node(g, "", "MatMul", "down", 2, IN(t2->outputs[0], down), 1);
	struct shard_run r;
	struct tpf_shard_stats st;

	(void)state;
	assert_int_equal(tpf_node_set_attr_ints(t1, "perm", (int64_t[]){1, 0}, 2), TPF_OK);
	assert_int_equal(tpf_node_set_attr_ints(t2, "perm", (int64_t[]){1, 0}, 2), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, b->outputs[0]), TPF_OK);
	shard(&r, m, 2, 0, TPF_OK);
	expect_explained(&r, "MatMul 'up' (weight 'up.weight' [4,8]): column-parallel");
	expect_explained(&r, "MatMul 'down' (weight 'down.weight' [8,4]): row-parallel");
	tpf_shard_get_stats(r.sh, &st);
	assert_int_equal(st.column, 1);
	assert_int_equal(st.row, 1);
	assert_int_equal(st.allgather, 0);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLGATHER), 0);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	expect_type(a->outputs[0], "f32[2,4]");
	expect_type(t1->outputs[0], "f32[4,2]");
	expect_type(act->outputs[0], "f32[4,2]");
	expect_type(t2->outputs[0], "f32[2,4]");
	expect_type(tpf_graph_find_value(g, "down.weight"), "f32[4,4]");
	verify_ok(m);
	shard_done(&r);
}

/* Attention-like, the head shapes built at run time as an export writes
 * them: Concat(Gather(Shape(x), [0]), [2, 4]) with the head count 2 at
 * position 1 of the Concat, element 0 of its second part.  Each rank
 * gets [T, 1, 4]: the edit lands on the head count, not on the head size
 * next to it; the merged width 8 becomes 4. */
static void test_head_count_in_concat(void **state)
{
	const char *dims[2] = {"T", "4"};
	int64_t heads[2] = {2, 4}, merged[1] = {8}, zero[1] = {0};
	struct tpf_value *x;
	struct tpf_model *m = model_with_input("x", TPF_DTYPE_FLOAT, 2, dims, &x);
	struct tpf_graph *g = m->graph;
	struct tpf_value *wq = weight(g, "q.weight", D, F), *wo = weight(g, "o.weight", F, D);
	struct tpf_value *hv = add_ints(g, "heads_and_size", 2, heads);
	struct tpf_value *mv = add_ints(g, "merged_width", 1, merged);
	struct tpf_value *z = add_ints(g, "zero", 1, zero);
	struct tpf_node *shp = add_node(g, "", "Shape", "shape", 1, IN(x), 1);
	struct tpf_node *tok = add_node(g, "", "Gather", "tokens", 2, IN(shp->outputs[0], z), 1);
	struct tpf_node *q = add_node(g, "", "MatMul", "q", 2, IN(x, wq), 1);
	struct tpf_node *c1 =
		add_node(g, "", "Concat", "heads_shape", 2, IN(tok->outputs[0], hv), 1);
	struct tpf_node *r1 =
		add_node(g, "", "Reshape", "split_heads", 2, IN(q->outputs[0], c1->outputs[0]), 1);
	struct tpf_node *sm = add_node(g, "", "Softmax", "softmax", 1, IN(r1->outputs[0]), 1);
	struct tpf_node *c2 =
		add_node(g, "", "Concat", "merged_shape", 2, IN(tok->outputs[0], mv), 1);
	struct tpf_node *r2 =
		add_node(g, "", "Reshape", "merge_heads", 2, IN(sm->outputs[0], c2->outputs[0]), 1);
	struct tpf_node *o = add_node(g, "", "MatMul", "o", 2, IN(r2->outputs[0], wo), 1);
	struct shard_run r;
	size_t k;
	int64_t v[3];

	(void)state;
	assert_int_equal(tpf_node_set_attr_int(c1, "axis", 0), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(c2, "axis", 0), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(sm, "axis", -1), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, o->outputs[0]), TPF_OK);
	shard(&r, m, 2, 0, TPF_OK);
	/* the Concats' literal parts as each rank reads them */
	assert_int_equal(tpf_pattern_const_ints(c1->inputs[1], v, 3, &k), 0);
	assert_int_equal(k, 2);
	assert_true(v[0] == 1 && v[1] == 4);
	assert_int_equal(tpf_pattern_const_ints(c2->inputs[1], v, 3, &k), 0);
	assert_true(k == 1 && v[0] == 4);
	/* the run-time part is left as it is */
	assert_ptr_equal(c1->inputs[0], tok->outputs[0]);
	expect_type(r1->outputs[0], "f32[T,1,4]");
	expect_type(r2->outputs[0], "f32[T,4]");
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLGATHER), 0);
	verify_ok(m);
	shard_done(&r);
}

/* Fused q/k/v: one weight [D, 3 * 8] whose output a Split cuts into three
 * sections of 8.  Each section is split on its own: rank k holds columns
 * 4k .. 4k + 3 of q, then of k, then of v, and the Split cuts [T, 12]
 * into three 4-wide parts. */
static void test_fused_qkv_sections(void **state)
{
	const char *dims[2] = {"2", "4"};
	int64_t sizes[3] = {F, F, F};
	struct tpf_value *x;
	struct tpf_model *m = model_with_input("x", TPF_DTYPE_FLOAT, 2, dims, &x);
	struct tpf_graph *g = m->graph;
	struct tpf_value *wqkv = weight(g, "qkv.weight", D, 3 * F);
	struct tpf_value *wo = weight(g, "o.weight", F, D);
	struct tpf_value *sv = add_ints(g, "qkv_sizes", 3, sizes);
	struct tpf_node *a = add_node(g, "", "MatMul", "qkv", 2, IN(x, wqkv), 1);
	struct tpf_node *sp = add_node(g, "", "Split", "split_qkv", 2, IN(a->outputs[0], sv), 3);
	struct tpf_node *qk =
		add_node(g, "", "Mul", "qk", 2, IN(sp->outputs[0], sp->outputs[1]), 1);
	struct tpf_node *qkv =
		add_node(g, "", "Add", "qkv_sum", 2, IN(qk->outputs[0], sp->outputs[2]), 1);
	struct tpf_node *o = add_node(g, "", "MatMul", "o", 2, IN(qkv->outputs[0], wo), 1);
	struct shard_run r;
	size_t k;
	int64_t v[4];

	(void)state;
	assert_int_equal(tpf_node_set_attr_int(sp, "axis", -1), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, o->outputs[0]), TPF_OK);
	shard(&r, m, 2, 0, TPF_OK);
	expect_type(tpf_graph_find_value(g, "qkv.weight"), "f32[4,12]");
	expect_type(sp->outputs[2], "f32[2,4]");
	assert_int_equal(tpf_pattern_const_ints(sp->inputs[1], v, 4, &k), 0);
	assert_true(k == 3 && v[0] == 4 && v[1] == 4 && v[2] == 4);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLGATHER), 0);
	verify_ok(m);
	for (int rank = 0; rank < 2; rank++) {
		assert_int_equal(tpf_shard_rank(r.sh, rank, r.d), TPF_OK);
		for (int i = 0; i < D; i++)
			for (int sec = 0; sec < 3; sec++)
				for (int c = 0; c < F / 2; c++) {
					int j = sec * (F / 2) + c;
					float got = elem(m, "qkv.weight", i, j);
					float want = (float)(100 * i + sec * F + rank * (F / 2) + c);
					if (got != want)
						fail_msg("rank %d: qkv.weight[%d][%d] is %g, want %g "
							 "(section %d)",
							 rank, i, j, (double)got, (double)want, sec);
				}
		assert_true(elem(m, "o.weight", 1, 0) == (float)(100 * (rank * (F / 2) + 1)));
	}
	shard_done(&r);
}

/* W = 3 does not divide the MLP's 8: both projections stay replicated
 * and --explain says why. */
static void test_not_divisible(void **state)
{
	struct shard_run r;
	struct tpf_shard_stats st;

	(void)state;
	shard(&r, mlp(), 3, 0, TPF_OK);
	expect_explained(&r, "MatMul 'up' (weight 'up.weight' [4,8]): replicated: its output dim 8 "
			     "is not divisible by 3");
	tpf_shard_get_stats(r.sh, &st);
	assert_int_equal(st.column, 0);
	assert_int_equal(st.replicated, 2);
	assert_int_equal(count_op(r.m->graph, TPF_OP_MS_ALLREDUCE), 0);
	assert_true(diag_mentions(r.d, "no weight was split"));
	shard_done(&r);
}

/* The split of `up` would meet an op tpfuse has no sharding rule for: it
 * stays replicated, and --explain names the op. */
static void test_no_rule(void **state)
{
	struct tpf_model *m = mlp_with("custom.domain", "Mystery", "mystery");
	struct tpf_node *c = find_node(m->graph, "mystery");
	struct shard_run r;

	(void)state;
	assert_int_equal(tpf_value_copy_type(c->outputs[0], &c->inputs[0]->type), TPF_OK);
	shard(&r, m, 2, 0, TPF_OK);
	expect_explained(&r, "MatMul 'up' (weight 'up.weight' [4,8]): replicated: splitting its "
			     "output meets Mystery 'mystery': Mystery has no sharding rule");
	assert_int_equal(count_op(m->graph, TPF_OP_MS_ALLGATHER), 0);
	shard_done(&r);
}

/* An LM head: its split reaches only the graph output, so it is gathered
 * right after the MatMul (axis -1, group_size W). */
static void test_lm_head_gathered(void **state)
{
	const char *dims[3] = {"B", "S", "4"};
	struct tpf_value *x;
	struct tpf_model *m = model_with_input("x", TPF_DTYPE_FLOAT, 3, dims, &x);
	struct tpf_graph *g = m->graph;
	struct tpf_value *w = weight(g, "lm_head.weight", D, F);
	struct tpf_node *a = add_node(g, "", "MatMul", "lm_head", 2, IN(x, w), 1);
	struct tpf_node *ag;
	struct shard_run r;

	(void)state;
	assert_int_equal(tpf_value_rename(a->outputs[0], "logits"), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, a->outputs[0]), TPF_OK);
	shard(&r, m, 4, 0, TPF_OK);
	expect_explained(&r, "column-parallel + AllGather");
	ag = find_op(g, TPF_OP_MS_ALLGATHER);
	assert_non_null(ag);
	assert_int_equal(tpf_node_attr_int(ag, "axis", 0), -1);
	assert_int_equal(tpf_node_attr_int(ag, "group_size", 0), 4);
	assert_string_equal(g->outputs[0]->name, "logits");
	assert_ptr_equal(g->outputs[0]->producer, ag);
	expect_type(a->outputs[0], "f32[B,S,2]");
	expect_type(g->outputs[0], "f32[B,S,8]");
	shard_done(&r);
}

/* Embedding split over the vocabulary: each rank looks up its rows of the
 * table (ids shifted, out-of-range ids masked to 0) and the partial
 * lookups are summed by an AllReduce. */
static void test_vocab_parallel(void **state)
{
	const char *dims[2] = {"B", "S"};
	struct tpf_value *ids;
	struct tpf_model *m = model_with_input("ids", TPF_DTYPE_INT64, 2, dims, &ids);
	struct tpf_graph *g = m->graph;
	struct tpf_value *e = weight(g, "embed.weight", F, D);
	struct tpf_node *n = add_node(g, "", "Gather", "embed", 2, IN(e, ids), 1);
	struct tpf_node *act = add_node(g, "", "Relu", "act", 1, IN(n->outputs[0]), 1);
	struct tpf_node *wh, *sub;
	struct shard_run r;
	int64_t first;
	size_t k;

	(void)state;
	assert_int_equal(tpf_graph_add_output(g, act->outputs[0]), TPF_OK);
	shard(&r, m, 2, 1, TPF_OK);
	assert_int_equal(count_op(g, TPF_OP_MS_ALLREDUCE), 1);
	assert_int_equal(count_op(g, TPF_OP_WHERE), 1);
	expect_type(tpf_graph_find_value(g, "embed.weight"), "f32[4,4]");
	/* the lookup reads Where(inside, ids - first row, 0): the ids shifted
	 * by the rank's first row of the table */
	wh = find_op(g, TPF_OP_WHERE);
	assert_ptr_equal(n->inputs[1], wh->outputs[0]);
	sub = wh->inputs[1]->producer;
	assert_non_null(sub);
	assert_int_equal(sub->op, TPF_OP_SUB);
	assert_ptr_equal(sub->inputs[0], ids);
	assert_int_equal(tpf_shard_rank(r.sh, 1, r.d), TPF_OK);
	assert_true(elem(m, "embed.weight", 0, 1) == 401.0f);
	assert_int_equal(tpf_pattern_const_ints(sub->inputs[1], &first, 1, &k), 0);
	assert_true(k == 1 && first == F / 2);
	verify_ok(m);
	shard_done(&r);
}

/* The MLP with an AllReduce `name` after its output and metadata
 * tp_world_size = `world`: an export that was already split W ways. */
static struct tpf_model *exported_mlp(const char *name, const char *world)
{
	struct tpf_model *m = mlp();
	struct tpf_graph *g = m->graph;
	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", name, 1, IN(g->outputs[0]), 1);

	assert_int_equal(tpf_graph_set_output(g, 0, ar->outputs[0]), TPF_OK);
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", world), TPF_OK);
	return m;
}

/* The collectives of a world-size-1 export are identities: they go, and
 * the split puts its own back. */
static void test_world1_collectives(void **state)
{
	struct shard_run r;
	struct tpf_shard_stats st;

	(void)state;
	shard(&r, exported_mlp("old_allreduce", "1"), 2, 0, TPF_OK);
	tpf_shard_get_stats(r.sh, &st);
	assert_int_equal(st.collectives_dropped, 1);
	assert_int_equal(count_op(r.m->graph, TPF_OP_MS_ALLREDUCE), 1);
	assert_null(find_node(r.m->graph, "old_allreduce"));
	shard_done(&r);
}

/* A model that is already tensor-parallel is refused, naming the node. */
static void test_already_parallel(void **state)
{
	struct shard_run r;
	const char *want[] = {"node 'rank_allreduce'", "already tensor-parallel", NULL};

	(void)state;
	shard(&r, exported_mlp("rank_allreduce", "2"), 2, 0, TPF_ERR_UNSUPPORTED);
	assert_null(r.sh);
	expect_mentions(r.d, want);
	shard_done(&r);
}

/* A collective of group_size 2 is tensor-parallel even where the model has
 * no tp_world_size metadata: refused, naming the node. */
static void test_group_size_parallel(void **state)
{
	struct tpf_model *m = mlp();
	struct tpf_graph *g = m->graph;
	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", "rank_allreduce", 1,
				       IN(g->outputs[0]), 1);
	struct shard_run r;
	const char *want[] = {"node 'rank_allreduce'", "already tensor-parallel (world size 2)", NULL};

	(void)state;
	assert_int_equal(tpf_node_set_attr_int(ar, "group_size", 2), TPF_OK);
	assert_int_equal(tpf_graph_set_output(g, 0, ar->outputs[0]), TPF_OK);
	assert_null(tpf_model_metadata(m, "tp_world_size"));
	shard(&r, m, 2, 0, TPF_ERR_UNSUPPORTED);
	assert_null(r.sh);
	expect_mentions(r.d, want);
	shard_done(&r);
}

/* Every allocation of the sharder may fail: an error status, never a
 * crash, nothing left that cannot be freed. */
static void test_alloc_failures(void **state)
{
	(void)state;
	for (uint64_t n = 1; n < 200000; n++) {
		struct tpf_model *m = mlp();
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_shard *sh = NULL;
		enum tpf_status s;
		uint64_t made;
		size_t dropped = d->dropped;

		tpf_alloc_fail_after(n);
		s = tpf_shard_create(m, &(struct tpf_shard_options){.world_size = 2}, &sh, d);
		if (!s)
			s = tpf_shard_rank(sh, 1, d);
		made = tpf_alloc_count();
		tpf_alloc_fail_after(0);
		tpf_shard_free(sh);
		tpf_model_free(m);
		if (made < n) {
			assert_int_equal(s, TPF_OK);
			tpf_diag_free(d);
			return;
		}
		if (s == TPF_OK && d->dropped == dropped)
			fail_msg("allocation %llu failed and tpf_shard reported success",
				 (unsigned long long)n);
		tpf_diag_free(d);
	}
	fail_msg("tpf_shard made more than 200000 allocations");
}

/* The sharding rules come from the op records, and for ONNX ops without a
 * record from the registry's table of their semantics. */
static void test_rules_from_records(void **state)
{
	struct tpf_model *m = parse_model("ir_version 10\n"
					  "opset \"\" 23\n"
					  "opset \"com.microsoft\" 1\n"
					  "graph \"\" {\n"
					  "  input %0: f32[2,4] \"x\"\n"
					  "  %1 = Gelu(%0) : ?  # gelu\n"
					  "  %2 = Sum(%0, %1) : ?  # sum\n"
					  "  %3 = ReduceProd(%2) : ?  # prod\n"
					  "  %4 = com.microsoft.SkipLayerNormalization(%0, %1, %0) : ?  # skip\n"
					  "  %5 = custom.Gelu(%0) : ?  # other_domain\n"
					  "  output %3: ? \"y\"\n"
					  "  output %4: ? \"z\"\n"
					  "  output %5: ? \"w\"\n"
					  "}\n");
	struct tpf_graph *g = m->graph;
	int arg = -7;

	(void)state;
	assert_int_equal(tpf_op_shard_rule(TPF_OP_MATMUL, &arg), TPF_SHARD_RULE_MATMUL);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_NEG, &arg), TPF_SHARD_RULE_UNARY);
	assert_int_equal(arg, 1); /* partial sums pass a Neg */
	assert_int_equal(tpf_op_shard_rule(TPF_OP_RELU, &arg), TPF_SHARD_RULE_UNARY);
	assert_int_equal(arg, 0);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_SUB, &arg), TPF_SHARD_RULE_BROADCAST);
	assert_int_equal(arg, TPF_SHARD_SUM);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_DIV, &arg), TPF_SHARD_RULE_BROADCAST);
	assert_int_equal(arg, TPF_SHARD_QUOTIENT);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_REDUCE_SUM, &arg), TPF_SHARD_RULE_REDUCE);
	assert_int_equal(arg, TPF_SHARD_SUM);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_REDUCE_MEAN, &arg), TPF_SHARD_RULE_REDUCE);
	assert_int_equal(arg, TPF_SHARD_OTHER);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_SQUEEZE, &arg), TPF_SHARD_RULE_UNSQUEEZE);
	assert_int_equal(arg, 1);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_MS_SKIP_SIMPLIFIED_LAYER_NORMALIZATION, &arg),
			 TPF_SHARD_RULE_NORM);
	assert_int_equal(arg, 2);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_TPF_RMS_NORM, NULL), TPF_SHARD_RULE_NORM);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_SHAPE, NULL), TPF_SHARD_RULE_REPLICATED);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_MS_ALLREDUCE, NULL), TPF_SHARD_RULE_NONE);
	assert_int_equal(tpf_op_shard_rule(TPF_OP_TPF_ALLREDUCE_RMS_NORM, NULL), TPF_SHARD_RULE_NONE);
	/* ops without a record */
	assert_int_equal(tpf_node_shard_rule(find_node(g, "gelu"), &arg), TPF_SHARD_RULE_UNARY);
	assert_int_equal(tpf_node_shard_rule(find_node(g, "sum"), &arg), TPF_SHARD_RULE_BROADCAST);
	assert_int_equal(arg, TPF_SHARD_SUM);
	assert_int_equal(tpf_node_shard_rule(find_node(g, "prod"), &arg), TPF_SHARD_RULE_REDUCE);
	assert_int_equal(arg, TPF_SHARD_PRODUCT);
	assert_int_equal(tpf_node_shard_rule(find_node(g, "skip"), &arg), TPF_SHARD_RULE_NORM);
	assert_int_equal(arg, 2);
	assert_int_equal(tpf_node_shard_rule(find_node(g, "other_domain"), &arg), TPF_SHARD_RULE_NONE);
	assert_int_equal(arg, 0);
	tpf_model_free(m);
}

/* The pass `shard` under allocation failures: a status, never a crash; with
 * a rank, the slices it keeps are the model's. */
static void test_pass_alloc_failures(void **state)
{
	(void)state;
	for (uint64_t n = 1; n < 200000; n++) {
		struct tpf_model *m = mlp();
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_pipeline_options o = {.passes = "shard", .ctx = {.rank = 1, .world_size = 2}};
		enum tpf_status s;
		uint64_t made;
		size_t dropped = d->dropped;

		tpf_alloc_fail_after(n);
		s = tpf_pipeline_run(m, &o, d);
		made = tpf_alloc_count();
		tpf_alloc_fail_after(0);
		if (made < n) {
			assert_int_equal(s, TPF_OK);
			assert_true(elem(m, "up.weight", 1, 0) == 104.0f);
			assert_true(elem(m, "down.weight", 0, 2) == 402.0f);
			assert_string_equal(tpf_model_metadata(m, "tp_rank"), "1");
			tpf_model_free(m);
			tpf_diag_free(d);
			return;
		}
		tpf_model_free(m);
		if (s == TPF_OK && d->dropped == dropped)
			fail_msg("allocation %llu failed and the pass reported success",
				 (unsigned long long)n);
		tpf_diag_free(d);
	}
	fail_msg("the pass made more than 200000 allocations");
}

/* The runtime's side of a split input: tpf_rank_parts_cut gives a rank its
 * part of a full tensor (block r of each section along the axis), keeps a
 * tensor already of the rank's size and one the model does not split, and
 * refuses a full tensor of another size and malformed metadata. */
static void test_rank_parts(void **state)
{
	static const char text[] =
		"ir_version 10\n"
		"opset \"\" 18\n"
		"metadata \"tp_rank\" \"1\"\n"
		"metadata \"tp_world_size\" \"2\"\n"
		"metadata \"tp_split_input:cache\" \"axis=1 world=2 sections=2,4\"\n"
		"graph \"\" {\n"
		"  input %0: f32[2,3] \"cache\"\n"
		"  input %1: f32[2,6] \"other\"\n"
		"  %2 = Add(%0, %0) : f32[2,3]\n"
		"  output %2: f32[2,3] \"y\"\n"
		"  output %1: f32[2,6] \"other\"\n"
		"}\n";
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	struct tpf_host_tensor t[3];
	float full[12], part[3] = {7, 7, 7};
	struct tpf_rank_split sp;

	(void)state;
	assert_non_null(d);
	assert_int_equal(tpf_model_parse_text(text, sizeof(text) - 1, "parts", &m, d), TPF_OK);
	for (int i = 0; i < 12; i++)
		full[i] = (float)i;
	memset(t, 0, sizeof(t));
	for (int k = 0; k < 3; k++) {
		t[k].name = tpf_strdup(k == 2 ? "other" : "cache");
		t[k].dtype = TPF_DTYPE_FLOAT;
		t[k].rank = 2;
		t[k].dims[0] = k == 1 ? 1 : 2;
		t[k].dims[1] = k == 1 ? 3 : 6;
		t[k].data = tpf_malloc(sizeof(full));
		assert_non_null(t[k].data);
		memcpy(t[k].data, k == 1 ? part : full, k == 1 ? sizeof(part) : sizeof(full));
	}
	t[1].dims[0] = 1;
	assert_int_equal(tpf_rank_split_find(m, 0, "cache", &sp, d), 1);
	assert_int_equal(sp.axis, 1);
	assert_int_equal(sp.rank, 1);
	assert_int_equal(sp.n_sections, 2);
	assert_int_equal(tpf_rank_split_find(m, 1, "cache", &sp, d), 0);
	assert_int_equal(tpf_rank_parts_cut(m, 0, t, 3, d), TPF_OK);
	/* rank 1: column 1 of section [0, 2), columns 4-5 of section [2, 6) */
	assert_int_equal(t[0].dims[1], 3);
	{
		const float *p = t[0].data, want[6] = {1, 4, 5, 7, 10, 11};
		for (int i = 0; i < 6; i++)
			assert_true(p[i] == want[i]);
	}
	assert_int_equal(t[1].dims[1], 3); /* the rank's size already */
	assert_true(((const float *)t[1].data)[0] == 7.0f);
	assert_int_equal(t[2].dims[1], 6); /* not split */
	t[1].dims[1] = 4;                  /* neither the part nor the whole */
	assert_int_equal(tpf_rank_parts_cut(m, 0, &t[1], 1, d), TPF_ERR_INVALID);
	assert_int_equal(tpf_model_set_metadata(m, "tp_split_input:cache", "axis=1 world=2 sections=3"),
			 TPF_OK);
	assert_int_equal(tpf_rank_split_find(m, 0, "cache", &sp, d), -1);
	assert_int_equal(tpf_model_set_metadata(m, "tp_split_input:cache", "axis=1"), TPF_OK);
	assert_int_equal(tpf_rank_parts_cut(m, 0, t, 1, d), TPF_ERR_INVALID);
	for (int k = 0; k < 3; k++)
		tpf_host_tensor_release(&t[k]);
	tpf_model_free(m);
	tpf_diag_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mlp_column_row),
		cmocka_unit_test(test_head_counts_rewritten),
		cmocka_unit_test(test_split_through_transpose),
		cmocka_unit_test(test_head_count_in_concat),
		cmocka_unit_test(test_fused_qkv_sections),
		cmocka_unit_test(test_not_divisible),
		cmocka_unit_test(test_no_rule),
		cmocka_unit_test(test_lm_head_gathered),
		cmocka_unit_test(test_vocab_parallel),
		cmocka_unit_test(test_world1_collectives),
		cmocka_unit_test(test_already_parallel),
		cmocka_unit_test(test_group_size_parallel),
		cmocka_unit_test(test_alloc_failures),
		cmocka_unit_test(test_rules_from_records),
		cmocka_unit_test(test_pass_alloc_failures),
		cmocka_unit_test(test_rank_parts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
