/* SPDX-License-Identifier: MIT */
/*
 * Verifier and shape inference: a valid tensor-parallel decoder block that
 * verifies and whose types are inferred (symbolic dims kept), and broken
 * graphs, each reported with the node's name, op and what was expected: a
 * cycle, nodes out of order, an undefined input, wrong arity, missing and
 * mistyped attributes, dtype mismatches, MatMul and broadcast mismatches,
 * Reshape element counts, damaged use lists, duplicate names, subgraph
 * problems and missing model fields.  A 15,000-node graph checks that both
 * passes stay linear.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "test-util.h"
#include "tpf-ir.h"

/* ------------------------------------------------------------------ helpers */

/* A model of IR version 10 importing the ONNX domain at `opset` (none when
 * opset is 0) and com.microsoft 1. */
static struct tpf_model *ir10_model(int64_t opset)
{
	struct tpf_model *m = tpf_model_create();

	assert_non_null(m);
	m->ir_version = 10;
	if (opset > 0)
		assert_int_equal(tpf_model_set_opset(m, "", opset), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, "com.microsoft", 1), TPF_OK);
	return m;
}

/* Verifies; expects TPF_ERR_VERIFY and a message containing each needle. */
static void expect_verify_errors(const struct tpf_model *m, const char *const *needles)
{
	struct tpf_diag *d = tpf_diag_create();

	assert_int_equal(tpf_model_verify(m, d), TPF_ERR_VERIFY);
	expect_mentions(d, needles);
	tpf_diag_free(d);
}

static void expect_infer_errors(struct tpf_model *m, const char *const *needles)
{
	struct tpf_diag *d = tpf_diag_create();

	assert_int_equal(tpf_model_infer_shapes(m, d), TPF_ERR_VERIFY);
	expect_mentions(d, needles);
	tpf_diag_free(d);
}

static void expect_ok(struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_status v = tpf_model_verify(m, d);
	enum tpf_status s = tpf_model_infer_shapes(m, d);

	if (v || s)
		tpf_diag_print(d, stderr);
	assert_int_equal(v, TPF_OK);
	assert_int_equal(s, TPF_OK);
	assert_int_equal(d->error_count, 0);
	tpf_diag_free(d);
}

/* ------------------------------------------------------------------ valid graphs */

static void test_decoder_block(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(23);
	struct tpf_graph *g = m->graph;
	const char *xd[] = {"B", "S", "64"};
	static uint16_t wdata[64 * 32], gdata[64];
	const int64_t wd[2] = {64, 32}, gd[1] = {64};

	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "2"), TPF_OK);
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 3, xd);
	struct tpf_value *gamma =
	    tpf_graph_add_initializer(g, "gamma", TPF_DTYPE_BFLOAT16, 1, gd, gdata, sizeof(gdata));
	struct tpf_value *w =
	    tpf_graph_add_initializer(g, "w", TPF_DTYPE_BFLOAT16, 2, wd, wdata, sizeof(wdata));
	struct tpf_node *norm = add_node(g, "", "RMSNormalization", "norm", 2, IN(x, gamma), 1);
	assert_int_equal(tpf_node_set_attr_float(norm, "epsilon", 1e-6f), TPF_OK);
	struct tpf_node *mm = add_node(g, "", "MatMul", "q_proj", 2, IN(norm->outputs[0], w), 1);
	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", 1, IN(mm->outputs[0]), 1);
	struct tpf_node *rs =
	    add_node(g, "", "Reshape", "heads", 2,
	        IN(ar->outputs[0], add_ints(g, "shp", 4, (int64_t[]){0, 0, 4, -1})), 1);
	struct tpf_node *tr = add_node(g, "", "Transpose", "tr", 1, IN(rs->outputs[0]), 1);
	tpf_node_set_attr_ints(tr, "perm", (int64_t[]){0, 2, 1, 3}, 4);
	struct tpf_node *tr2 = add_node(g, "", "Transpose", "tr2", 1, IN(tr->outputs[0]), 1);
	tpf_node_set_attr_ints(tr2, "perm", (int64_t[]){0, 2, 1, 3}, 4);
	struct tpf_node *rs2 =
	    add_node(g, "", "Reshape", "merge", 2,
	        IN(tr2->outputs[0], add_ints(g, "back", 3, (int64_t[]){0, 0, -1})), 1);
	struct tpf_node *ag = add_node(g, TPF_MS_DOMAIN, "AllGather", "ag", 1, IN(rs2->outputs[0]), 1);
	tpf_node_set_attr_int(ag, "axis", -1); /* group size from tp_world_size */
	struct tpf_node *res = add_node(g, "", "Add", "res", 2, IN(ag->outputs[0], x), 1);
	struct tpf_node *split = add_node(g, "", "Split", "split", 2,
	                             IN(res->outputs[0], add_ints(g, "sp", 2, (int64_t[]){16, 48})), 2);
	tpf_node_set_attr_int(split, "axis", 2);
	struct tpf_node *cat =
	    add_node(g, "", "Concat", "cat", 2, IN(split->outputs[1], split->outputs[0]), 1);
	tpf_node_set_attr_int(cat, "axis", -1);
	struct tpf_value *axis2 = add_ints(g, "axis2", 1, (int64_t[]){2});
	struct tpf_node *sl = add_node(g, "", "Slice", "tail", 4,
	                          IN(cat->outputs[0], add_ints(g, "st", 1, (int64_t[]){-8}),
	                             add_ints(g, "en", 1, (int64_t[]){INT64_MAX}), axis2),
	                          1);
	struct tpf_node *rm = add_node(g, "", "ReduceMean", "rm", 2, IN(sl->outputs[0], axis2), 1);
	struct tpf_node *sq = add_node(g, "", "Squeeze", "sq", 2, IN(rm->outputs[0], axis2), 1);
	struct tpf_node *usq = add_node(g, "", "Unsqueeze", "usq", 2,
	                           IN(sq->outputs[0], add_ints(g, "ax0", 1, (int64_t[]){0})), 1);
	struct tpf_node *cast = add_node(g, "", "Cast", "cast", 1, IN(usq->outputs[0]), 1);
	tpf_node_set_attr_int(cast, "to", TPF_DTYPE_FLOAT);
	float half = 0.5f;
	uint8_t zero = 0;
	uint16_t bf_one = 0x3f80;
	struct tpf_value *scale =
	    tpf_graph_add_initializer(g, "scale", TPF_DTYPE_FLOAT, 0, NULL, &half, 4);
	struct tpf_value *zp =
	    tpf_graph_add_initializer(g, "zp", TPF_DTYPE_FLOAT8E4M3FN, 0, NULL, &zero, 1);
	struct tpf_value *scale_bf =
	    tpf_graph_add_initializer(g, "scale_bf", TPF_DTYPE_BFLOAT16, 0, NULL, &bf_one, 2);
	struct tpf_node *q =
	    add_node(g, "", "QuantizeLinear", "q", 3, IN(res->outputs[0], scale, zp), 1);
	struct tpf_node *dq =
	    add_node(g, "", "DequantizeLinear", "dq", 2, IN(q->outputs[0], scale_bf), 1);
	struct tpf_node *q8 =
	    add_node(g, "", "QuantizeLinear", "q8", 2, IN(res->outputs[0], scale_bf), 1);
	struct tpf_node *skip = add_node(g, TPF_MS_DOMAIN, "SkipSimplifiedLayerNormalization", "skip", 3,
	                            IN(dq->outputs[0], x, gamma), 4);
	struct tpf_node *topk =
	    add_node(g, "", "TopK", "topk", 2, IN(skip->outputs[3], add_ints(g, "k", 1, (int64_t[]){3})), 2);
	struct tpf_node *shape = add_node(g, "", "Shape", "shape", 1, IN(x), 1);
	struct tpf_value *cs = add_ints(g, "cs", 2, (int64_t[]){2, 5});
	struct tpf_node *cos = add_node(g, "", "ConstantOfShape", "cos", 1, IN(cs), 1);
	struct tpf_node *ex = add_node(g, "", "Expand", "ex", 2,
	                          IN(cos->outputs[0], add_ints(g, "exs", 3, (int64_t[]){3, 1, 5})), 1);
	struct tpf_node *gat = add_node(g, "", "Gather", "gat", 2, IN(x, cs), 1);
	tpf_node_set_attr_int(gat, "axis", 2);
	struct tpf_node *sg = add_node(g, "", "Sigmoid", "sg", 1, IN(res->outputs[0]), 1);
	struct tpf_node *gt = add_node(g, "", "Greater", "gt", 2, IN(sg->outputs[0], x), 1);
	struct tpf_node *wh =
	    add_node(g, "", "Where", "wh", 3, IN(gt->outputs[0], sg->outputs[0], x), 1);
	struct tpf_node *sm = add_node(g, "", "Softmax", "sm", 1, IN(wh->outputs[0]), 1);
	struct tpf_node *a2a = add_node(g, TPF_MS_DOMAIN, "AllToAll", "a2a", 1, IN(sm->outputs[0]), 1);
	struct tpf_node *fp4 =
	    add_node(g, "trt", "TRT_FP4DynamicQuantize", "fp4", 2, IN(res->outputs[0], scale), 2);
	struct tpf_node *gm = add_node(g, "", "Gemm", "gemm", 2, IN(w, w), 1);
	tpf_node_set_attr_int(gm, "transA", 1);
	static uint16_t g32data[32];
	struct tpf_value *g32 = tpf_graph_add_initializer(g, "g32", TPF_DTYPE_BFLOAT16, 1,
	                                                  (int64_t[]){32}, g32data, sizeof(g32data));
	struct tpf_node *arn = add_node(g, TPF_DOMAIN, "AllReduceRMSNorm", "arn", 3,
	                           IN(mm->outputs[0], g32, ar->outputs[0]), 2);
	assert_int_equal(tpf_graph_add_output(g, a2a->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, topk->outputs[0]), TPF_OK);

	expect_ok(m);
	expect_type(norm->outputs[0], "bf16[B,S,64]");
	expect_type(mm->outputs[0], "bf16[B,S,32]");
	expect_type(ar->outputs[0], "bf16[B,S,32]");
	expect_type(rs->outputs[0], "bf16[B,S,4,8]");
	expect_type(tr->outputs[0], "bf16[B,4,S,8]");
	expect_type(rs2->outputs[0], "bf16[B,S,32]");
	expect_type(ag->outputs[0], "bf16[B,S,64]");
	expect_type(res->outputs[0], "bf16[B,S,64]");
	expect_type(split->outputs[0], "bf16[B,S,16]");
	expect_type(split->outputs[1], "bf16[B,S,48]");
	expect_type(cat->outputs[0], "bf16[B,S,64]");
	expect_type(sl->outputs[0], "bf16[B,S,8]");
	expect_type(rm->outputs[0], "bf16[B,S,1]");
	expect_type(sq->outputs[0], "bf16[B,S]");
	expect_type(usq->outputs[0], "bf16[1,B,S]");
	expect_type(cast->outputs[0], "f32[1,B,S]");
	expect_type(q->outputs[0], "f8e4m3fn[B,S,64]");
	expect_type(dq->outputs[0], "bf16[B,S,64]");
	expect_type(q8->outputs[0], "u8[B,S,64]");
	expect_type(skip->outputs[0], "bf16[B,S,64]");
	expect_type(skip->outputs[3], "bf16[B,S,64]");
	expect_type(topk->outputs[0], "bf16[B,S,3]");
	expect_type(topk->outputs[1], "i64[B,S,3]");
	expect_type(shape->outputs[0], "i64[3]");
	expect_type(cos->outputs[0], "f32[2,5]");
	expect_type(ex->outputs[0], "f32[3,2,5]");
	expect_type(gat->outputs[0], "bf16[B,S,2]");
	expect_type(gt->outputs[0], "bool[B,S,64]");
	expect_type(wh->outputs[0], "bf16[B,S,64]");
	expect_type(a2a->outputs[0], "bf16[B,S,64]");
	expect_type(fp4->outputs[0], "f4e2m1[B,S,64]");
	expect_type(fp4->outputs[1], "f8e4m3fn[B,S,4]");
	expect_type(gm->outputs[0], "bf16[32,32]");
	expect_type(arn->outputs[0], "bf16[B,S,32]");
	expect_type(arn->outputs[1], "bf16[B,S,32]");

	/* a second run changes nothing and still verifies */
	expect_ok(m);
	expect_type(rs->outputs[0], "bf16[B,S,4,8]");
	tpf_model_free(m);
}

static void test_infer_more_ops(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(11);
	struct tpf_graph *g = m->graph;
	const char *xd[] = {"T", "6"};
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);

	/* opset 11: axes and split are attributes */
	struct tpf_node *usq = add_node(g, "", "Unsqueeze", "usq", 1, IN(x), 1);
	tpf_node_set_attr_ints(usq, "axes", (int64_t[]){0, -1}, 2);
	struct tpf_node *sq = add_node(g, "", "Squeeze", "sq", 1, IN(usq->outputs[0]), 1);
	tpf_node_set_attr_ints(sq, "axes", (int64_t[]){0}, 1);
	struct tpf_node *rs = add_node(g, "", "ReduceSum", "rsum", 1, IN(x), 1);
	tpf_node_set_attr_ints(rs, "axes", (int64_t[]){1}, 1);
	tpf_node_set_attr_int(rs, "keepdims", 0);
	struct tpf_node *sp = add_node(g, "", "Split", "sp", 1, IN(x), 3);
	tpf_node_set_attr_int(sp, "axis", 1);
	struct tpf_node *mv =
	    add_node(g, "", "MatMul", "mv", 2,
	        IN(x, tpf_graph_add_input(g, "v", TPF_DTYPE_FLOAT, 1, (int64_t[]){6})), 1);
	struct tpf_node *tr = add_node(g, "", "Transpose", "tr", 1, IN(x), 1);
	struct tpf_node *ln =
	    add_node(g, "", "LayerNormalization", "ln", 2,
	        IN(x, tpf_graph_add_input(g, "s", TPF_DTYPE_FLOAT, 1, (int64_t[]){6})), 3);
	struct tpf_node *k = add_node(g, "", "Constant", "k", 0, NULL, 1);
	tpf_node_set_attr_ints(k, "value_ints", (int64_t[]){1, 2, 3}, 3);
	struct tpf_node *ge =
	    add_node(g, "", "GatherElements", "ge", 2,
	        IN(x, tpf_graph_add_input(g, "idx", TPF_DTYPE_INT64, 2, (int64_t[]){2, 6})), 1);
	expect_ok(m);
	expect_type(usq->outputs[0], "f32[1,T,6,1]");
	expect_type(sq->outputs[0], "f32[T,6,1]");
	expect_type(rs->outputs[0], "f32[T]");
	expect_type(sp->outputs[0], "f32[T,2]");
	expect_type(sp->outputs[2], "f32[T,2]");
	expect_type(mv->outputs[0], "f32[T]");
	expect_type(tr->outputs[0], "f32[6,T]");
	expect_type(ln->outputs[0], "f32[T,6]");
	expect_type(ln->outputs[1], "f32[T,1]");
	expect_type(k->outputs[0], "i64[3]");
	expect_type(ge->outputs[0], "f32[2,6]");
	tpf_model_free(m);
}

/* Declared types are kept: a symbolic dim is not replaced by a static one,
 * an unknown dim is filled in. */
static void test_infer_keeps_declared(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, (int64_t[]){4, 8});
	struct tpf_node *r = add_node(g, "", "Relu", "r", 1, IN(x), 1);
	struct tpf_value *y = r->outputs[0];

	tpf_value_set_type(y, TPF_DTYPE_FLOAT, 2, (int64_t[]){-1, 8});
	y->type.shape.dims[0].param = "rows";
	expect_ok(m);
	expect_type(y, "f32[rows,8]");
	tpf_value_set_type(y, TPF_DTYPE_UNDEFINED, 2, (int64_t[]){-1, 8});
	expect_ok(m);
	expect_type(y, "f32[4,8]");
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ broken graphs */

/* Each case builds a broken graph around the input x (f32[4]) of a model
 * of IR version 10 at `opset`: the verifier must fail with a message
 * containing each of `needles` and none of `absent`. */
struct verify_case {
	const char *name;
	int64_t opset;
	void (*build)(struct tpf_model *m, struct tpf_value *x);
	const char *const *needles;
	const char *const *absent;
};

static void build_cycle(struct tpf_model *m, struct tpf_value *x)
{
	struct tpf_graph *g = m->graph;
	struct tpf_node *a = add_node(g, "", "Add", "A", 2, IN(x, x), 1);
	struct tpf_node *b = add_node(g, "", "Relu", "B", 1, IN(a->outputs[0]), 1);
	struct tpf_node *c = add_node(g, "", "Neg", "C", 1, IN(b->outputs[0]), 1);

	assert_int_equal(tpf_node_set_input(a, 1, c->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, c->outputs[0]), TPF_OK);
}

static void build_out_of_order(struct tpf_model *m, struct tpf_value *x)
{
	struct tpf_graph *g = m->graph;
	struct tpf_node *a = add_node(g, "", "Relu", "A", 1, IN(x), 1);
	struct tpf_node *b = add_node(g, "", "Neg", "B", 1, IN(a->outputs[0]), 1);

	tpf_graph_move_node_before(g, b, a);
	assert_int_equal(tpf_graph_add_output(g, b->outputs[0]), TPF_OK);
}

static void build_undefined_input(struct tpf_model *m, struct tpf_value *x)
{
	struct tpf_graph *g = m->graph;
	struct tpf_value *ghost = tpf_graph_new_value(g, "ghost");
	struct tpf_value *lost = tpf_graph_new_value(g, "lost");

	add_node(g, "", "Add", "A", 2, IN(x, ghost), 1);
	assert_int_equal(tpf_graph_add_output(g, lost), TPF_OK);
}

static void build_arity_and_attributes(struct tpf_model *m, struct tpf_value *x)
{
	struct tpf_graph *g = m->graph;

	add_node(g, "", "Add", "A", 3, IN(x, x, x), 1);
	add_node(g, "", "Cast", "C", 1, IN(x), 1);
	tpf_node_set_attr_int(add_node(g, "", "Cast", "C2", 1, IN(x), 1), "to", 99);
	tpf_node_set_attr_float(add_node(g, "", "Concat", "cat", 1, IN(x), 1), "axis", 1.0f);
	tpf_node_set_attr_ints(add_node(g, "", "Squeeze", "sq", 1, IN(x), 1), "axes", (int64_t[]){0}, 1);
	tpf_node_set_attr_int(add_node(g, TPF_MS_DOMAIN, "AllGather", "ag", 1, IN(x), 1), "group_size",
	                      0);
	tpf_node_set_attr_int(add_node(g, TPF_MS_DOMAIN, "AllGather", "ag2", 1, IN(x), 1), "axis", 3);
	add_node(g, "", "Unsqueeze", "usq", 1, IN(x), 1);
	add_node(g, "", "TopK", "tk", 2, IN(x, add_ints(g, "k", 1, (int64_t[]){1})), 1);
}

/* An attribute before its first opset: num_outputs of Split is new in 18. */
static void build_attribute_before_its_opset(struct tpf_model *m, struct tpf_value *x)
{
	tpf_node_set_attr_int(add_node(m->graph, "", "Split", "sp", 1, IN(x), 2), "num_outputs", 2);
}

static void build_group_size_vs_world(struct tpf_model *m, struct tpf_value *x)
{
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "4"), TPF_OK);
	tpf_node_set_attr_int(add_node(m->graph, TPF_MS_DOMAIN, "AllReduce", "ar", 1, IN(x), 1),
	                      "group_size", 2);
}

static void build_damaged_ir(struct tpf_model *m, struct tpf_value *x)
{
	struct tpf_graph *g = m->graph;
	struct tpf_node *a = add_node(g, "", "Relu", "A", 1, IN(x), 1);
	struct tpf_node *b = add_node(g, "", "Neg", "B", 1, IN(a->outputs[0]), 1);
	struct tpf_node *c = add_node(g, "", "Abs", "C", 1, IN(x), 1);

	assert_int_equal(tpf_graph_add_output(g, b->outputs[0]), TPF_OK);
	a->outputs[0]->n_uses = 0;   /* the use by B is lost */
	b->outputs[0]->name = "x";   /* a second value named x */
	c->outputs[0]->producer = a; /* claims another producer */
}

static void build_model_fields(struct tpf_model *m, struct tpf_value *x)
{
	m->ir_version = 0;
	add_node(m->graph, "", "Relu", "r", 1, IN(x), 1);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static const struct verify_case verify_cases[] = {
    {"cycle", 18, build_cycle,
     NEEDLES("node 'A' (Add): is on a cycle", "'A' <- 'C' <- 'B' <- 'A'"), NULL},
    /* not a cycle */
    {"out_of_order", 18, build_out_of_order,
     NEEDLES("node 'B' (Neg): input 0", "produced by later node 'A' (Relu)",
             "not in topological order"),
     NEEDLES("cycle")},
    {"undefined_input", 18, build_undefined_input,
     NEEDLES("node 'A' (Add): input 1 'ghost' is not defined",
             "graph output 0 'lost' is not defined"),
     NULL},
    {"arity_and_attributes", 18, build_arity_and_attributes,
     NEEDLES("node 'A' (Add): has 3 inputs; expected 2",
             "node 'C' (Cast): missing required attribute 'to'",
             "node 'C2' (Cast): attribute 'to' = 99 is not a valid tensor dtype",
             "node 'cat' (Concat): attribute 'axis' is FLOAT; expected INT",
             "node 'sq' (Squeeze): attribute 'axes' is not allowed from opset 13",
             "node 'ag' (com.microsoft::AllGather): attribute 'group_size' = 0",
             "node 'ag2' (com.microsoft::AllGather): attribute 'axis' = 3 is out "
             "of range for rank 1",
             "node 'usq' (Unsqueeze): has 1 inputs; expected 2 at opset 18",
             "node 'tk' (TopK): has 1 outputs; expected 2"),
     NULL},
    {"attribute_before_its_opset", 17, build_attribute_before_its_opset,
     NEEDLES("node 'sp' (Split): attribute 'num_outputs' needs opset 18 (the model imports 17)"),
     NULL},
    {"group_size_vs_world", 18, build_group_size_vs_world,
     NEEDLES("node 'ar' (com.microsoft::AllReduce): attribute "
             "'group_size' = 2 differs from the model's "
             "tp_world_size 4"),
     NULL},
    {"damaged_ir", 18, build_damaged_ir,
     NEEDLES("value name 'x' is defined twice", "node 'B' (Neg): input 0",
             "missing from the value's use list", "node 'C' (Abs): output 0"),
     NULL},
    {"model_fields", 0, build_model_fields,
     NEEDLES("ir_version is missing", "no opset import for the default domain"), NULL},
};

/* One row of verify_cases (the test's state). */
static void test_verify_case(void **state)
{
	const struct verify_case *vc = *state;
	struct tpf_model *m = ir10_model(vc->opset);
	struct tpf_value *x = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, 1, (int64_t[]){4});

	vc->build(m, x);
	expect_verify_errors(m, vc->needles);
	if (vc->absent) {
		struct tpf_diag *d = tpf_diag_create();

		tpf_model_verify(m, d);
		for (const char *const *a = vc->absent; *a; a++)
			assert_false(diag_mentions(d, *a));
		tpf_diag_free(d);
	}
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ dtypes */

static void test_dtype_mismatches(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(23);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, (int64_t[]){2, 3});
	struct tpf_value *y = tpf_graph_add_input(g, "y", TPF_DTYPE_BFLOAT16, 2, (int64_t[]){2, 3});
	struct tpf_value *z = tpf_graph_add_input(g, "z", TPF_DTYPE_FLOAT, 2, (int64_t[]){4, 5});
	struct tpf_value *gf = tpf_graph_add_input(g, "gf", TPF_DTYPE_FLOAT, 1, (int64_t[]){3});
	struct tpf_value *zp = tpf_graph_add_input(g, "zp", TPF_DTYPE_INT8, 0, NULL);
	struct tpf_diag *d = tpf_diag_create();

	add_node(g, "", "Add", "add", 2, IN(x, y), 1);
	add_node(g, "", "MatMul", "mm", 2, IN(x, z), 1);
	add_node(g, "", "Where", "wh", 3, IN(x, x, x), 1);
	add_node(g, "", "Reshape", "rs", 2, IN(x, gf), 1);
	/* the scale of RMSNormalization may have its own dtype (opset 23) */
	struct tpf_node *rn = add_node(g, "", "RMSNormalization", "rn", 2, IN(y, gf), 1);
	struct tpf_node *q = add_node(g, "", "QuantizeLinear", "q", 3, IN(x, gf, zp), 1);
	tpf_value_set_type(q->outputs[0], TPF_DTYPE_UINT8, 2, (int64_t[]){2, 3});
	struct tpf_node *q2 = add_node(g, "", "QuantizeLinear", "q2", 2, IN(x, gf), 1);
	tpf_node_set_attr_int(q2, "output_dtype", TPF_DTYPE_FLOAT8E4M3FN);
	struct tpf_node *c = add_node(g, "", "Cast", "c", 1, IN(x), 1);
	tpf_node_set_attr_int(c, "to", TPF_DTYPE_FLOAT16);
	tpf_value_set_type(c->outputs[0], TPF_DTYPE_BFLOAT16, -1, NULL);

	expect_verify_errors(
	    m, (const char *[]){"node 'add' (Add): input 1 'y' is bf16 but input 0 'x' is f32",
	                        "node 'mm' (MatMul): inner dimensions differ: 'x' has 3 columns, "
	                        "'z' has 4 rows",
	                        "node 'wh' (Where): input 0 'x' is f32; expected bool",
	                        "node 'rs' (Reshape): input 1 'gf' is f32; expected int64",
	                        "node 'q' (QuantizeLinear): output 0",
	                        "expected i8 (the zero point's dtype)", "node 'c' (Cast): output 0",
	                        NULL});
	tpf_model_verify(m, d);
	assert_false(diag_mentions(d, "'rn'"));
	assert_false(diag_mentions(d, "'q2'"));
	tpf_diag_clear(d);
	assert_int_equal(tpf_model_infer_shapes(m, d), TPF_ERR_VERIFY);
	assert_true(diag_mentions(d, "node 'mm' (MatMul): inner dimensions differ"));
	assert_true(diag_mentions(d, "node 'q' (QuantizeLinear): output 0"));
	assert_true(diag_mentions(d, "has type u8[2,3] but its inputs give i8[2,3]"));
	expect_type(rn->outputs[0], "f32[2,3]");
	expect_type(q2->outputs[0], "f8e4m3fn[2,3]");
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ inference errors */

static void test_infer_contradictions(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(18);
	struct tpf_graph *g = m->graph;
	const char *xd[] = {"B", "6"};
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
	struct tpf_value *y = tpf_graph_add_input(g, "y", TPF_DTYPE_FLOAT, 2, (int64_t[]){2, 4});

	add_node(g, "", "Add", "badd", 2, IN(x, y), 1);
	add_node(g, "", "Reshape", "rs", 2, IN(y, add_ints(g, "s", 2, (int64_t[]){5, 5})), 1);
	add_node(g, "", "Reshape", "rs2", 2, IN(x, add_ints(g, "s2", 3, (int64_t[]){0, 4, -1})), 1);
	struct tpf_node *ok =
	    add_node(g, "", "Reshape", "rs3", 2, IN(x, add_ints(g, "s3", 3, (int64_t[]){0, 3, -1})), 1);
	add_node(g, "", "MatMul", "mm", 2, IN(y, y), 1);
	struct tpf_node *sp =
	    add_node(g, "", "Split", "sp", 2, IN(y, add_ints(g, "sizes", 2, (int64_t[]){1, 2})), 2);
	tpf_node_set_attr_int(sp, "axis", 1);
	add_node(g, "", "Concat", "cat", 2, IN(x, y), 1);
	tpf_node_set_attr_int(g->last, "axis", 0);
	expect_infer_errors(
	    m, (const char *[]){"node 'badd' (Add): inputs 0 and 1 cannot broadcast",
	                        "node 'rs' (Reshape): element count mismatch: input "
	                        "has 8 elements, shape has 25",
	                        "node 'rs2' (Reshape): cannot infer the -1 entry",
	                        "node 'mm' (MatMul): inner dimensions differ",
	                        "node 'sp' (Split): split sizes add up to 3 but "
	                        "dimension 1 is 4",
	                        "node 'cat' (Concat): input 1 'y' has 4 in dimension 1 "
	                        "where earlier inputs have 6",
	                        NULL});
	expect_type(ok->outputs[0], "f32[B,3,2]");
	tpf_model_free(m);
}

/* A tensor op's output declared as a sequence (or map, optional, sparse)
 * contradicts its inputs; left unchecked it hid a wrong declared shape
 * further down, which a fusion then carried onto its own op. */
static void test_infer_opaque_output(void **state)
{
	(void)state;
	static const char text[] =
	    "ir_version 10\n"
	    "opset \"\" 23\n"
	    "graph \"g\" {\n"
	    "  input %0: f32[2,8] \"x\"\n"
	    "  input %1: f32[2,8] \"res\"\n"
	    "  input %2: opaque \"seq\"\n"
	    "  %3 = Add(%0, %1) : opaque  # add\n"
	    "  %4 = Relu(%3) : f32[8]  # -> r\n"
	    "  %5 = Identity(%2) : opaque  # -> same\n"
	    "  output %4: f32[8] \"r\"\n"
	    "  output %5: opaque \"same\"\n"
	    "}\n";
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;

	assert_int_equal(tpf_model_parse_text(text, sizeof(text) - 1, "t", &m, d), TPF_OK);
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	tpf_model_free(m);
	tpf_diag_free(d);
	assert_int_equal(tpf_model_parse_text(text, sizeof(text) - 1, "t", &m, NULL), TPF_OK);
	/* the Identity of a sequence stays as declared: only the Add is wrong */
	expect_infer_errors(m, (const char *[]){"node 'add' (Add): output 0 '%3' is declared a "
	                                        "non-tensor type",
	                                        "its inputs give the tensor f32[2,8]", NULL});
	d = tpf_diag_create();
	tpf_model_infer_shapes(m, d);
	assert_false(diag_mentions(d, "Identity"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ subgraphs */

static void test_subgraphs(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(18);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, (int64_t[]){4});
	struct tpf_value *cond = tpf_graph_add_input(g, "c", TPF_DTYPE_BOOL, 0, NULL);
	struct tpf_node *iff = add_node(g, "", "If", "if", 1, IN(cond), 1);
	struct tpf_graph *then_g = tpf_graph_create(g), *else_g = tpf_graph_create(g);
	struct tpf_diag *d = tpf_diag_create();

	assert_non_null(then_g);
	assert_non_null(else_g);
	then_g->owner = iff;
	else_g->owner = iff;
	/* then: Relu of the outer x through an outer-scope reference */
	struct tpf_value *ox = tpf_graph_new_value(then_g, "x");
	ox->kind = TPF_VALUE_OUTER;
	ox->outer = x;
	struct tpf_node *r = add_node(then_g, "", "Relu", "inner_relu", 1, IN(ox), 1);
	assert_int_equal(tpf_graph_add_output(then_g, r->outputs[0]), TPF_OK);
	/* else: reads a name defined nowhere */
	struct tpf_node *neg =
	    add_node(else_g, "", "Neg", "inner_neg", 1, IN(tpf_graph_new_value(else_g, "ghost")), 1);
	assert_int_equal(tpf_graph_add_output(else_g, neg->outputs[0]), TPF_OK);
	struct tpf_attr at = {.name = "then_branch", .kind = TPF_ATTR_GRAPH, .g = then_g};
	struct tpf_attr ae = {.name = "else_branch", .kind = TPF_ATTR_GRAPH, .g = else_g};
	assert_int_equal(tpf_node_add_attr(iff, &at), TPF_OK);
	assert_int_equal(tpf_node_add_attr(iff, &ae), TPF_OK);
	/* the If node captures x */
	struct tpf_value **imp = tpf_arena_alloc(g->arena, sizeof(*imp));
	struct tpf_use *use = tpf_arena_alloc(g->arena, sizeof(*use));
	imp[0] = x;
	iff->implicit_inputs = imp;
	iff->n_implicit = 1;
	use->node = iff;
	use->index = -1;
	x->uses = use;
	x->n_uses = 1;
	x->cap_uses = 1;
	assert_int_equal(tpf_graph_add_output(g, iff->outputs[0]), TPF_OK);

	assert_int_equal(tpf_model_verify(m, d), TPF_ERR_VERIFY);
	assert_true(diag_mentions(d, "node 'inner_neg' (Neg): input 0 'ghost' is not defined"));
	assert_true(diag_mentions(d, "(in subgraph 'else_branch' of node 'if' (If))"));
	assert_false(diag_mentions(d, "inner_relu"));
	tpf_diag_clear(d);
	tpf_model_infer_shapes(m, d);
	expect_type(r->outputs[0], "f32[4]");
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ allocation failure */

/* Failing the N-th allocation in either pass gives TPF_ERR_NOMEM (or OK when
 * the pass needed fewer allocations), never a crash or a wrong verdict. */
static void test_allocation_failure(void **state)
{
	(void)state;
	int reached_ok = 0;

	for (uint64_t n = 1; n < 2000 && !reached_ok; n++) {
		struct tpf_model *m = ir10_model(18);
		struct tpf_graph *g = m->graph;
		const char *xd[] = {"T", "8"};
		struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
		struct tpf_value *cur = x;
		struct tpf_diag *d = tpf_diag_create();
		enum tpf_status v, s;

		for (int i = 0; i < 20; i++) {
			struct tpf_node *a = add_node(g, "", "Add", NULL, 2, IN(cur, x), 1);
			struct tpf_node *r =
			    add_node(g, "", "Reshape", NULL, 2,
			        IN(a->outputs[0], add_ints(g, NULL, 2, (int64_t[]){0, -1})), 1);
			cur = r->outputs[0];
		}
		assert_int_equal(tpf_graph_add_output(g, cur), TPF_OK);
		tpf_alloc_fail_after(n);
		v = tpf_model_verify(m, d);
		tpf_alloc_fail_after(n);
		s = tpf_model_infer_shapes(m, d);
		tpf_alloc_fail_after(0);
		assert_true(v == TPF_OK || v == TPF_ERR_NOMEM);
		assert_true(s == TPF_OK || s == TPF_ERR_NOMEM);
		reached_ok = v == TPF_OK && s == TPF_OK;
		tpf_diag_free(d);
		tpf_model_free(m);
	}
	assert_true(reached_ok);
}

/* ------------------------------------------------------------------ size */

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void test_15000_nodes(void **state)
{
	(void)state;
	struct tpf_model *m = ir10_model(18);
	struct tpf_graph *g = m->graph;
	const char *xd[] = {"T", "4096"};
	struct tpf_value *cur = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, xd);
	const int64_t gd[1] = {4096};
	struct tpf_diag *d = tpf_diag_create();
	struct timespec t0;
	double verify_ms, infer_ms;

	for (int i = 0; i < 5000; i++) {
		struct tpf_value *gamma =
		    tpf_graph_add_initializer(g, NULL, TPF_DTYPE_BFLOAT16, 1, gd, NULL, 0);
		struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", NULL, 1, IN(cur), 1);
		struct tpf_node *sum = add_node(g, "", "Add", NULL, 2, IN(ar->outputs[0], cur), 1);
		struct tpf_node *rn = add_node(g, "", "SimplifiedLayerNormalization", NULL, 2,
		                          IN(sum->outputs[0], gamma), 1);
		cur = rn->outputs[0];
	}
	assert_int_equal(tpf_graph_add_output(g, cur), TPF_OK);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	verify_ms = ms_since(&t0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(tpf_model_infer_shapes(m, d), TPF_OK);
	infer_ms = ms_since(&t0);
	expect_type(cur, "bf16[T,4096]");
	print_message("15000 nodes: verify %.1f ms, infer %.1f ms\n", verify_ms, infer_ms);
	/* generous bound (sanitizer builds): a quadratic pass would take seconds */
	assert_true(verify_ms < 1000.0);
	assert_true(infer_ms < 1000.0);
	tpf_diag_free(d);
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest fixed[] = {
	    cmocka_unit_test(test_decoder_block),
	    cmocka_unit_test(test_infer_more_ops),
	    cmocka_unit_test(test_infer_keeps_declared),
	    cmocka_unit_test(test_dtype_mismatches),
	    cmocka_unit_test(test_infer_contradictions),
	    cmocka_unit_test(test_infer_opaque_output),
	    cmocka_unit_test(test_subgraphs),
	    cmocka_unit_test(test_allocation_failure),
	    cmocka_unit_test(test_15000_nodes),
	};
	const size_t n_fixed = sizeof(fixed) / sizeof(fixed[0]);
	const size_t n_cases = sizeof(verify_cases) / sizeof(verify_cases[0]);
	struct CMUnitTest tests[sizeof(fixed) / sizeof(fixed[0]) + sizeof(verify_cases) / sizeof(verify_cases[0])];

	memcpy(tests, fixed, sizeof(fixed));
	for (size_t i = 0; i < n_cases; i++)
		tests[n_fixed + i] = (struct CMUnitTest){.name = verify_cases[i].name,
		                                         .test_func = test_verify_case,
		                                         .initial_state = (void *)&verify_cases[i]};
	return _cmocka_run_group_tests("tests", tests, n_fixed + n_cases, NULL, NULL);
}
