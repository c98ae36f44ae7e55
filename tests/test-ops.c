/* SPDX-License-Identifier: MIT */
/*
 * The op records (ir/ops/): every record agrees with itself (operands and
 * arity, attribute defaults, type constraints), one shape function serves
 * verification, inference and the runtime's concrete shapes, symbolic dims
 * proven equal unify (an exporter's invented collective dims are the
 * input's), shape arithmetic folds, and the verifier checks tpfuse's fused
 * ops fully: wrong dtypes and shapes are rejected with the node named.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops/op-def.h"
#include "test-util.h"
#include "tpf-ir.h"
#include "tpf-passes.h"

/* ------------------------------------------------------------------ helpers */

/* A model importing the ONNX domain at `opset`, com.microsoft 1 and tpfuse
 * 1, with tp_world_size `world` unless NULL. */
static struct tpf_model *tp_model(int64_t opset, const char *world)
{
	struct tpf_model *m = tpf_model_create();

	assert_non_null(m);
	m->ir_version = 10;
	assert_int_equal(tpf_model_set_opset(m, "", opset), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, TPF_MS_DOMAIN, 1), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, TPF_DOMAIN, 1), TPF_OK);
	if (world)
		assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", world), TPF_OK);
	return m;
}

static struct tpf_value *weight(struct tpf_graph *g, const char *name, enum tpf_dtype dt,
                                int64_t n)
{
	static uint8_t zeros[4096];
	size_t bytes = 0;

	assert_int_equal(tpf_dtype_storage_bytes(dt, (uint64_t)n, &bytes), 0);
	assert_true(bytes <= sizeof(zeros));
	struct tpf_value *v = tpf_graph_add_initializer(g, name, dt, 1, &n, zeros, bytes);
	assert_non_null(v);
	return v;
}

/* A type from text dims: "B" symbolic, "8" static, "" unknown. */
static void set_type(struct tpf_value *v, enum tpf_dtype dt, int rank, const char *const *dims)
{
	struct tpf_dim d[8];
	struct tpf_type t = {.kind = TPF_TYPE_TENSOR, .dtype = dt, .shape = {rank, d}};

	for (int i = 0; i < rank; i++) {
		char *end;
		long long x = strtoll(dims[i], &end, 10);

		d[i] = (struct tpf_dim){-1, NULL, NULL};
		if (*dims[i] && !*end)
			d[i].value = x;
		else if (*dims[i])
			d[i].param = dims[i];
	}
	assert_int_equal(tpf_value_copy_type(v, &t), TPF_OK);
}

/* Verifies: expects TPF_ERR_VERIFY with a message naming each needle, or
 * TPF_OK when needles is NULL. */
static void expect_verify(const struct tpf_model *m, const char *const *needles)
{
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_status st = tpf_model_verify(m, d);

	if (!needles) {
		if (st)
			tpf_diag_print(d, stderr);
		assert_int_equal(st, TPF_OK);
	} else {
		assert_int_equal(st, TPF_ERR_VERIFY);
		expect_mentions(d, needles);
	}
	tpf_diag_free(d);
}

/* The checks after a model's expected verifier failures: no message names
 * the nodes of `valid` (names quoted, as the messages quote them; NULL
 * ended), and inference gives each value of `types` (ended by a NULL
 * value) its type. */
struct typed {
	struct tpf_value *v;
	const char *type;
};

static void expect_valid(struct tpf_model *m, const char *const *valid, const struct typed *types)
{
	struct tpf_diag *d = tpf_diag_create();

	tpf_model_verify(m, d);
	for (; *valid; valid++)
		assert_false(diag_mentions(d, *valid));
	tpf_diag_clear(d);
	tpf_model_infer_shapes(m, d);
	for (; types->v; types++)
		expect_type(types->v, types->type);
	tpf_diag_free(d);
}

/* ------------------------------------------------------------------ records */

/* Every record agrees with itself: name lookups, operands against arity,
 * type constraints named and described, attributes with kinds and, for
 * defaults, a value of that kind. */
static void test_records_consistent(void **state)
{
	(void)state;
	for (int op = 1; op < TPF_OP_COUNT; op++) {
		const struct tpf_op_def *d = op_def((enum tpf_op)op);
		const struct tpf_op_info *info = &d->info;
		int n_in = 0, n_out = 0;

		assert_ptr_equal(tpf_op_info((enum tpf_op)op), info);
		assert_int_equal(tpf_op_lookup(info->domain, info->name), op);
		while (n_in < OP_MAX_OPERANDS && d->inputs[n_in].name)
			n_in++;
		while (n_out < OP_MAX_OPERANDS && d->outputs[n_out].name)
			n_out++;
		/* one declared operand a slot; variadic ones repeat the last */
		if (info->max_inputs >= 0)
			assert_int_equal(n_in, info->max_inputs);
		else
			assert_true(n_in >= 1 && n_in <= info->min_inputs + 1);
		if (info->max_outputs >= 0)
			assert_int_equal(n_out, info->max_outputs);
		else
			assert_true(n_out >= 1 && n_out <= info->min_outputs + 1);
		for (int i = 0; i < n_in + n_out; i++) {
			const struct op_operand *o = i < n_in ? &d->inputs[i] : &d->outputs[i - n_in];

			assert_true(o->type <= OP_MAX_TYPES);
			if (o->type) {
				assert_non_null(d->types[o->type].name);
				assert_non_null(d->types[o->type].expected);
				assert_true(d->types[o->type].dtypes != 0);
			}
		}
		for (const struct op_attr *a = d->attrs; a && a->name; a++) {
			assert_true(a->kind > TPF_ATTR_UNDEFINED && a->kind < TPF_ATTR_KIND_COUNT);
			if ((a->flags & ATTR_DEFAULT) && a->kind == TPF_ATTR_STRING)
				assert_non_null(a->s);
			if (a->allowed)
				assert_int_equal(a->kind, TPF_ATTR_STRING);
			assert_ptr_equal(op_def_attr(d, a->name), a); /* names are unique */
		}
		/* every known op has a shape rule: its own or its trait's */
		assert_true(d->shape || (d->traits & (TPF_OP_TRAIT_UNARY | TPF_OP_TRAIT_BROADCAST)));
	}
	assert_true(tpf_op_has_trait(TPF_OP_MS_ALLGATHER, TPF_OP_TRAIT_COLLECTIVE));
	assert_true(tpf_op_has_trait(TPF_OP_TPF_ALLREDUCE_RMS_NORM, TPF_OP_TRAIT_COLLECTIVE));
	assert_true(tpf_op_has_trait(TPF_OP_EQUAL, TPF_OP_TRAIT_COMPARISON));
	assert_false(tpf_op_has_trait(TPF_OP_MATMUL, TPF_OP_TRAIT_BROADCAST));
	assert_int_equal(tpf_op_lookup(TPF_MS_DOMAIN, "ReduceScatter"), TPF_OP_MS_REDUCE_SCATTER);
	assert_int_equal(tpf_op_info(TPF_OP_MS_ALLREDUCE)->max_inputs, -1);
}

/* ------------------------------------------------------------------ one function, three callers */

/* The same shape function gives static shapes, symbolic ones, and the
 * runtime's concrete ones. */
static void test_one_shape_function(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 3, (const char *[]){"B", "S", "64"});
	struct tpf_node *rs =
	    add_node(g, "", "Reshape", "rs", 2, IN(x, add_ints(g, "shp", 4, (int64_t[]){0, 0, 4, -1})), 1);

	infer_ok(m);
	expect_type(rs->outputs[0], "f32[B,S,4,16]");

	/* the runtime's view: every dim concrete, the target's values known */
	struct tpf_op_type types[3];
	struct tpf_shape_call c = {.node = rs, .mode = TPF_SHAPE_CONCRETE, .opset = 18,
	                           .in = types, .n_in = 2, .out = types + 2, .n_out = 1};
	tpf_op_type_unknown(&types[0]);
	types[0].dtype = TPF_DTYPE_FLOAT;
	types[0].rank = 3;
	types[0].dims[0] = dim_of(2);
	types[0].dims[1] = dim_of(5);
	types[0].dims[2] = dim_of(64);
	tpf_op_type_unknown(&types[1]);
	types[1].dtype = TPF_DTYPE_INT64;
	types[1].rank = 1;
	types[1].dims[0] = dim_of(4);
	types[1].n_values = 4;
	for (int i = 0; i < 4; i++)
		types[1].values[i] = (struct tpf_dim){(int64_t[]){0, 0, 4, -1}[i], NULL, NULL};
	assert_int_equal(tpf_op_infer(&c), TPF_OK);
	assert_int_equal(types[2].dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(types[2].rank, 4);
	assert_int_equal(types[2].dims[0].value, 2);
	assert_int_equal(types[2].dims[1].value, 5);
	assert_int_equal(types[2].dims[3].value, 16);

	/* a concrete contradiction is an error naming the node */
	struct tpf_diag *d = tpf_diag_create();
	c.diag = d;
	types[1].values[3].value = 7;
	assert_int_equal(tpf_op_infer(&c), TPF_ERR_VERIFY);
	assert_true(diag_mentions(d, "node 'rs' (Reshape): element count mismatch"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what the TorchScript
 * exporter writes) gives the Reshape its target, symbolic dims included. */
static void test_shape_arithmetic_folds(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(17, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT16, 3, (const char *[]){"batch", "seq", "64"});
	struct tpf_node *sh = add_node(g, "", "Shape", "shape", 1, IN(x), 1);
	struct tpf_value *zero = add_ints(g, "zero", 1, (int64_t[]){0});
	struct tpf_value *one = add_ints(g, "one", 1, (int64_t[]){1});
	struct tpf_node *b = add_node(g, "", "Gather", "g0", 2, IN(sh->outputs[0], zero), 1);
	struct tpf_node *s = add_node(g, "", "Gather", "g1", 2, IN(sh->outputs[0], one), 1);
	struct tpf_node *heads = add_node(g, "", "Constant", "heads", 0, NULL, 1);
	tpf_node_set_attr_ints(heads, "value_ints", (int64_t[]){4, 16}, 2);
	struct tpf_node *cat = add_node(g, "", "Concat", "cat", 3,
	                           IN(b->outputs[0], s->outputs[0], heads->outputs[0]), 1);
	tpf_node_set_attr_int(cat, "axis", 0);
	struct tpf_node *rs = add_node(g, "", "Reshape", "rs", 2, IN(x, cat->outputs[0]), 1);
	struct tpf_node *sc = add_node(g, "", "Shape", "shape2", 1, IN(rs->outputs[0]), 1);
	struct tpf_node *two = add_node(g, "", "Mul", "twice", 2, IN(sc->outputs[0], add_ints(g, "k2", 1, (int64_t[]){2})), 1);
	struct tpf_node *cos = add_node(g, "", "ConstantOfShape", "zeros", 1, IN(two->outputs[0]), 1);

	infer_ok(m);
	expect_type(cat->outputs[0], "i64[4]");
	expect_type(rs->outputs[0], "f16[batch,seq,4,16]");
	expect_type(cos->outputs[0], "f32[?,?,8,32]");
	expect_verify(m, NULL);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ unification */

/* The TorchScript exporter gives a custom op's outputs invented dims
 * (AllReduce_output_0_dim_0): inference proves them equal to the input's,
 * the IR answers so, the residual Add keeps `batch`, and the fusion that
 * needs the residual and the reduced value to have one shape happens. */
static void test_exporter_dims_unify(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(17, "2");
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 3, (const char *[]){"batch", "seq", "64"});
	struct tpf_value *res = add_input(g, "res", TPF_DTYPE_FLOAT, 3, (const char *[]){"batch", "seq", "64"});
	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", 1, IN(x), 1);
	set_type(ar->outputs[0], TPF_DTYPE_FLOAT, 3,
	         (const char *[]){"AllReduce_output_0_dim_0", "AllReduce_output_0_dim_1", "64"});
	struct tpf_node *sum = add_node(g, "", "Add", "residual_add", 2, IN(ar->outputs[0], res), 1);
	struct tpf_node *norm = add_node(g, "", "SimplifiedLayerNormalization", "norm", 2,
	                            IN(sum->outputs[0], weight(g, "gamma", TPF_DTYPE_FLOAT, 64)), 1);
	assert_int_equal(tpf_graph_add_output(g, norm->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, sum->outputs[0]), TPF_OK);

	/* before inference nothing says the names are one size */
	assert_int_equal(tpf_value_shapes_equal(ar->outputs[0], x), TPF_ANSWER_UNKNOWN);
	expect_verify(m, NULL);
	infer_ok(m);
	assert_int_equal(tpf_value_shapes_equal(ar->outputs[0], x), TPF_ANSWER_YES);
	assert_int_equal(tpf_value_shapes_equal(ar->outputs[0], res), TPF_ANSWER_YES);
	expect_type(ar->outputs[0], "f32[AllReduce_output_0_dim_0,AllReduce_output_0_dim_1,64]");
	expect_type(sum->outputs[0], "f32[AllReduce_output_0_dim_0,AllReduce_output_0_dim_1,64]");
	const struct tpf_dim *d0 = &ar->outputs[0]->type.shape.dims[0];
	assert_int_equal(tpf_graph_dims_equal(g, d0, &x->type.shape.dims[0]), TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, d0, &x->type.shape.dims[1]), TPF_ANSWER_UNKNOWN);
	struct tpf_dim d64 = {64, NULL, NULL}, d65 = {65, NULL, NULL};
	assert_int_equal(tpf_graph_dims_equal(g, &x->type.shape.dims[2], &d64), TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, &x->type.shape.dims[2], &d65), TPF_ANSWER_NO);

	/* the fusion that needs one shape for the residual and the reduced value */
	struct tpf_pass_stats *st = tpf_pass_stats_create();
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options o = {.passes = "canonicalize-rmsnorm,fuse-allreduce-rmsnorm",
	                                 .verify_each = 1};
	o.ctx.stats = st;
	o.ctx.rank = -1;
	o.ctx.world_size = -1;
	if (tpf_pipeline_run(m, &o, d))
		tpf_diag_print(d, stderr);
	assert_int_equal(tpf_pass_stats_get(st, "fuse-allreduce-rmsnorm",
	                                    "allreduce-residual-rmsnorm"),
	                 1);
	tpf_pass_stats_free(st);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Symbolic dims join when a shape function proves them equal: MatMul's
 * inner dims, broadcast operands, Concat's other dims; a declared name that
 * a static dim flows into learns the value. */
static void test_unify_rules(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *a = add_input(g, "a", TPF_DTYPE_FLOAT, 2, (const char *[]){"M", "K"});
	struct tpf_value *b = add_input(g, "b", TPF_DTYPE_FLOAT, 2, (const char *[]){"K2", "N"});
	struct tpf_value *c = add_input(g, "c", TPF_DTYPE_FLOAT, 2, (const char *[]){"M2", "N2"});
	struct tpf_value *e = add_input(g, "e", TPF_DTYPE_FLOAT, 2, (const char *[]){"4", "8"});
	struct tpf_node *mm = add_node(g, "", "MatMul", "mm", 2, IN(a, b), 1);
	struct tpf_node *sum = add_node(g, "", "Add", "sum", 2, IN(mm->outputs[0], c), 1);
	struct tpf_node *r = add_node(g, "", "Relu", "r", 1, IN(e), 1);
	set_type(r->outputs[0], TPF_DTYPE_FLOAT, 2, (const char *[]){"rows", "8"});

	infer_ok(m);
	const struct tpf_dim *K = &a->type.shape.dims[1], *K2 = &b->type.shape.dims[0];
	const struct tpf_dim *M = &a->type.shape.dims[0], *M2 = &c->type.shape.dims[0];
	const struct tpf_dim *N = &b->type.shape.dims[1], *N2 = &c->type.shape.dims[1];
	assert_int_equal(tpf_graph_dims_equal(g, K, K2), TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, M, M2), TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, N, N2), TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, M, N), TPF_ANSWER_UNKNOWN);
	expect_type(sum->outputs[0], "f32[M,N]");
	expect_type(r->outputs[0], "f32[rows,8]"); /* a declared name stays */
	struct tpf_dim four = {4, NULL, NULL}, five = {5, NULL, NULL};
	assert_int_equal(tpf_graph_dims_equal(g, &r->outputs[0]->type.shape.dims[0], &four),
	                 TPF_ANSWER_YES);
	assert_int_equal(tpf_graph_dims_equal(g, &r->outputs[0]->type.shape.dims[0], &five),
	                 TPF_ANSWER_NO);
	/* a fact that contradicts a class is dropped, not believed */
	struct tpf_dim rows = {-1, "rows", NULL};
	assert_int_equal(tpf_graph_dims_unify(g, &rows, &five), TPF_OK);
	assert_int_equal(tpf_graph_dims_equal(g, &rows, &four), TPF_ANSWER_YES);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ collectives */

static void test_collective_shapes(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, "4");
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *y = add_input(g, "y", TPF_DTYPE_BFLOAT16, 1, (const char *[]){"16"});
	struct tpf_node *ar = add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", 2, IN(x, y), 2);
	struct tpf_node *ag = add_node(g, TPF_MS_DOMAIN, "AllGather", "ag", 1, IN(x), 1);
	tpf_node_set_attr_int(ag, "axis", 1);
	struct tpf_node *ag1 = add_node(g, TPF_MS_DOMAIN, "AllGather", "ag1", 1, IN(x), 1);
	tpf_node_set_attr_int(ag1, "axis", 0);
	struct tpf_node *a2a = add_node(g, TPF_MS_DOMAIN, "AllToAll", "a2a", 1, IN(x), 1);
	struct tpf_node *rsc = add_node(g, TPF_MS_DOMAIN, "ReduceScatter", "rsc", 1, IN(x), 1);
	tpf_node_set_attr_int(rsc, "axis", -1);

	expect_verify(m, NULL);
	infer_ok(m);
	expect_type(ar->outputs[0], "bf16[T,64]");
	expect_type(ar->outputs[1], "bf16[16]"); /* output k has input k's shape */
	expect_type(ag->outputs[0], "bf16[T,256]");
	expect_type(ag1->outputs[0], "bf16[?,64]");
	expect_type(a2a->outputs[0], "bf16[T,64]");
	expect_type(rsc->outputs[0], "bf16[T,16]");
	tpf_model_free(m);

	m = tp_model(18, "4");
	g = m->graph;
	x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "6"});
	add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar2", 2, IN(x, x), 1);
	tpf_node_set_attr_int(add_node(g, TPF_MS_DOMAIN, "ReduceScatter", "rs6", 1, IN(x), 1), "axis", 1);
	tpf_node_set_attr_int(add_node(g, TPF_MS_DOMAIN, "AllGather", "ag2", 1, IN(x), 1), "group_size", 2);
	add_node(g, TPF_MS_DOMAIN, "AllToAll", "bad", 1, IN(add_input(g, "s", TPF_DTYPE_STRING, 1,
	                                                       (const char *[]){"4"})), 1);
	expect_verify(m, (const char *[]){
	                     "node 'ar2' (com.microsoft::AllReduce): has 2 inputs but 1 outputs",
	                     "node 'rs6' (com.microsoft::ReduceScatter): dimension 1 = 6 does not "
	                     "divide by the group size 4",
	                     "node 'ag2' (com.microsoft::AllGather): attribute 'group_size' = 2 "
	                     "differs from the model's tp_world_size 4",
	                     "node 'bad' (com.microsoft::AllToAll): input 0 's' is string; expected",
	                     NULL});
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ fused ops */

/* A valid AllReduceRMSNorm, then one broken thing at a time. */
static struct tpf_model *arn_model(enum tpf_dtype gamma_t, int64_t gamma_n,
                                   const char *const *res_dims, const char *const *out_dims,
                                   enum tpf_dtype out_t)
{
	struct tpf_model *m = tp_model(18, "2");
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *r = add_input(g, "r", TPF_DTYPE_BFLOAT16, 2, res_dims);
	struct tpf_node *f = add_node(g, TPF_DOMAIN, "AllReduceRMSNorm", "arn", 3,
	                         IN(x, weight(g, "gamma", gamma_t, gamma_n), r), 2);
	set_type(f->outputs[0], out_t, 2, out_dims);
	assert_int_equal(tpf_graph_add_output(g, f->outputs[0]), TPF_OK);
	return m;
}

/* Each row builds arn_model(gamma_t, gamma_n, res_dims, out_dims, out_t)
 * (with the attribute 'axis' = 0 where axis0 is set): it verifies where
 * needle is NULL, else it fails with a message containing needle. */
static void test_fused_norm_rejects(void **state)
{
	(void)state;
	const char *td[] = {"T", "64"}, *t32[] = {"T", "32"};
	const struct {
		enum tpf_dtype gamma_t;
		int64_t gamma_n;
		const char *const *res_dims, *const *out_dims;
		enum tpf_dtype out_t;
		int axis0;
		const char *needle;
	} cases[] = {
	    {TPF_DTYPE_BFLOAT16, 64, td, td, TPF_DTYPE_BFLOAT16, 0, NULL},
	    /* a float32 gamma of a bf16 stream (weights kept in float32): gamma
	     * is read in the compute type, norm_out has the input's type */
	    {TPF_DTYPE_FLOAT, 64, td, td, TPF_DTYPE_BFLOAT16, 0, NULL},
	    {TPF_DTYPE_BFLOAT16, 64, td, td, TPF_DTYPE_FLOAT16, 0,
	     "node 'arn' (ai.tpfuse::AllReduceRMSNorm): output 0 '_t' is f16; expected bf16"},
	    {TPF_DTYPE_BFLOAT16, 32, td, td, TPF_DTYPE_BFLOAT16, 0,
	     "weight 1 'gamma' bf16[32] does not broadcast to the normalized dims of input 0 'x' "
	     "bf16[T,64]"},
	    {TPF_DTYPE_BFLOAT16, 64, t32, td, TPF_DTYPE_BFLOAT16, 0,
	     "residual 2 'r' is bf16[T,32] but input 0 'x' is bf16[T,64]; expected the same shape"},
	    {TPF_DTYPE_BFLOAT16, 64, td, t32, TPF_DTYPE_BFLOAT16, 0,
	     "output 0 '_t' has shape [T,32] but its inputs give [T,64]"},
	    /* the axis of a fused norm is the last one */
	    {TPF_DTYPE_BFLOAT16, 64, td, td, TPF_DTYPE_BFLOAT16, 1,
	     "attribute 'axis' = 0; the fused norm runs over the last axis"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct tpf_model *m = arn_model(cases[i].gamma_t, cases[i].gamma_n, cases[i].res_dims,
		                                cases[i].out_dims, cases[i].out_t);

		if (cases[i].axis0)
			tpf_node_set_attr_int(m->graph->first, "axis", 0);
		expect_verify(m, cases[i].needle ? (const char *const[]){cases[i].needle, NULL} : NULL);
		tpf_model_free(m);
	}
}

static void test_fused_quant_rejects(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, "2");
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *gamma = weight(g, "gamma", TPF_DTYPE_BFLOAT16, 64);
	struct tpf_value *scale = weight(g, "scale", TPF_DTYPE_FLOAT, 1);
	struct tpf_value *scales = weight(g, "scales", TPF_DTYPE_FLOAT, 4);
	struct tpf_node *ok = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "nv", 2 + 1,
	                          IN(x, gamma, scale), 3);
	tpf_node_set_attr_string(ok, "quant", "nvfp4");
	struct tpf_node *q8 = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "q8", 3,
	                          IN(x, gamma, scale), 1);
	set_type(q8->outputs[0], TPF_DTYPE_FLOAT4E2M1, 2, (const char *[]){"T", "64"});
	struct tpf_node *odd = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "odd", 3,
	                           IN(x, gamma, scale), 1);
	tpf_node_set_attr_string(odd, "quant", "int4");
	struct tpf_node *many = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "many", 3,
	                            IN(x, gamma, scales), 1);
	struct tpf_node *sc8 = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "sc8", 3,
	                           IN(x, gamma, scale), 3);
	struct tpf_node *grp = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "grp", 3,
	                           IN(x, gamma, scale), 3);
	tpf_node_set_attr_string(grp, "quant", "fp8-group");
	tpf_node_set_attr_int(grp, "block_size", 32);
	struct tpf_node *grp1 = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "grp1", 3,
	                            IN(x, gamma, scale), 1);
	tpf_node_set_attr_string(grp1, "quant", "fp8-group");
	struct tpf_node *grp48 = add_node(g, TPF_DOMAIN, "AllReduceRMSNormQuant", "grp48", 3,
	                             IN(x, gamma, scale), 3);
	tpf_node_set_attr_string(grp48, "quant", "fp8-group");
	tpf_node_set_attr_int(grp48, "block_size", 48);
	(void)many;
	(void)sc8;

	expect_verify(m, (const char *[]){
	                     "node 'q8' (ai.tpfuse::AllReduceRMSNormQuant): output 0",
	                     "is f4e2m1; expected f8e4m3fn (attribute 'quant')",
	                     "node 'odd' (ai.tpfuse::AllReduceRMSNormQuant): attribute 'quant' is "
	                     "\"int4\"; expected one of \"fp8\", \"nvfp4\", \"nvfp4-block\", \"fp8-group\"",
	                     "node 'many' (ai.tpfuse::AllReduceRMSNormQuant): scale 'scales' f32[4] "
	                     "has 4 elements; quant \"fp8\" takes one",
	                     "node 'sc8' (ai.tpfuse::AllReduceRMSNormQuant): output 2",
	                     "produced only with quant \"nvfp4\" or \"fp8-group\"",
	                     "node 'grp1' (ai.tpfuse::AllReduceRMSNormQuant): quant \"fp8-group\" needs output 2",
	                     "node 'grp48' (ai.tpfuse::AllReduceRMSNormQuant): the last dim 64 is not a multiple "
	                     "of the group size 48",
	                     NULL});
	expect_valid(m, (const char *const[]){"'nv'", "'grp'", NULL},
	             (const struct typed[]){
	                 {ok->outputs[0], "f4e2m1[T,64]"},
	                 {grp->outputs[0], "f8e4m3fn[T,64]"},
	                 {grp->outputs[2], "f32[T,2]"},
	                 {ok->outputs[2], "f8e4m3fn[T,4]"},
	                 {NULL, NULL},
	             });
	tpf_model_free(m);
}

static void test_fused_misc_rejects(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, "2");
	struct tpf_graph *g = m->graph;
	struct tpf_value *f = add_input(g, "final", TPF_DTYPE_FLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *gate = add_input(g, "gate", TPF_DTYPE_FLOAT16, 2, (const char *[]){"T", "1"});
	struct tpf_value *sh = add_input(g, "shared", TPF_DTYPE_FLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *sh32 = add_input(g, "sh32", TPF_DTYPE_FLOAT16, 2, (const char *[]){"T", "32"});
	struct tpf_value *g3 = add_input(g, "g3", TPF_DTYPE_FLOAT16, 2, (const char *[]){"T", "3"});
	struct tpf_value *fi = add_input(g, "fi", TPF_DTYPE_INT32, 2, (const char *[]){"T", "64"});
	struct tpf_node *ok = add_node(g, TPF_DOMAIN, "SigmoidGateAdd", "ok", 3, IN(f, gate, sh), 1);
	add_node(g, TPF_DOMAIN, "SigmoidGateAdd", "shape", 3, IN(f, gate, sh32), 1);
	add_node(g, TPF_DOMAIN, "SigmoidGateAdd", "gate", 3, IN(f, g3, sh), 1);
	add_node(g, TPF_DOMAIN, "SigmoidGateAdd", "ints", 3, IN(fi, fi, fi), 1);
	struct tpf_value *xs = add_input(g, "xs", TPF_DTYPE_FLOAT, 2, (const char *[]){"T", "8"});
	struct tpf_node *sn = add_node(g, TPF_DOMAIN, "ShardedRMSNorm", "sharded", 2,
	                          IN(xs, weight(g, "gs", TPF_DTYPE_FLOAT, 8)), 1);
	tpf_node_set_attr_int(sn, "world_size", 2);
	tpf_node_set_attr_int(sn, "full_dim", 16);
	struct tpf_node *sb = add_node(g, TPF_DOMAIN, "ShardedRMSNorm", "sharded_dim", 2,
	                          IN(xs, weight(g, "gs2", TPF_DTYPE_FLOAT, 8)), 1);
	tpf_node_set_attr_int(sb, "world_size", 2);
	tpf_node_set_attr_int(sb, "full_dim", 32);
	tpf_node_set_attr_int(add_node(g, TPF_DOMAIN, "ShardedRMSNorm", "sharded_arity", 3,
	                          IN(xs, xs, xs), 1),
	                      "world_size", 2);
	struct tpf_value *x16 = add_input(g, "x16", TPF_DTYPE_FLOAT, 2, (const char *[]){"2", "8"});
	struct tpf_node *pk = add_node(g, TPF_DOMAIN, "Pack", "pack", 1, IN(x16), 1);
	tpf_node_set_attr_ints(pk, "segments", (int64_t[]){0, 0, 0, 8, 0, 8, 8, 9}, 8);
	struct tpf_node *pk2 = add_node(g, TPF_DOMAIN, "Pack", "pack2", 1, IN(x16), 1);
	tpf_node_set_attr_ints(pk2, "segments", (int64_t[]){0, 8, 0, 8, 0, 0, 8, 8}, 8);

	expect_verify(m, (const char *[]){
	                     "node 'shape' (ai.tpfuse::SigmoidGateAdd): shared 2 'sh32' is "
	                     "f16[T,32] but input 0 'final' is f16[T,64]; expected the same shape",
	                     "node 'gate' (ai.tpfuse::SigmoidGateAdd): gate 'g3' f16[T,3]",
	                     "node 'ints' (ai.tpfuse::SigmoidGateAdd): input 0 'fi' is i32; "
	                     "expected a float type",
	                     "node 'sharded_dim' (ai.tpfuse::ShardedRMSNorm): input 0 'xs' has last "
	                     "dimension 8; expected 32 / 2",
	                     "node 'sharded_arity' (ai.tpfuse::ShardedRMSNorm): has 3 inputs for 1 "
	                     "outputs",
	                     "node 'pack' (ai.tpfuse::Pack): segment 1 (0, 8, 8, 9) is out of range",
	                     NULL});
	expect_valid(m, (const char *const[]){"'ok'", "'sharded'", NULL},
	             (const struct typed[]){
	                 {ok->outputs[0], "f16[T,64]"},
	                 {sn->outputs[0], "f32[T,8]"},
	                 {pk2->outputs[0], "f32[16]"},
	                 {NULL, NULL},
	             });
	tpf_model_free(m);
}

/* Einsum: the output shapes of symbolic, ellipsis, broadcast, diagonal and
 * implicit equations, and the equations the verifier rejects, naming the
 * node. */
static struct tpf_node *einsum(struct tpf_graph *g, const char *name, const char *eq, size_t n,
                               struct tpf_value *const *in)
{
	struct tpf_node *e = add_node(g, "", "Einsum", name, n, in, 1);
	tpf_node_set_attr_string(e, "equation", eq);
	return e;
}

static void test_einsum_shapes(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *a =
	    add_input(g, "a", TPF_DTYPE_FLOAT, 5, (const char *[]){"B", "2", "8", "4", "16"});
	struct tpf_value *b =
	    add_input(g, "b", TPF_DTYPE_FLOAT, 5, (const char *[]){"B", "2", "8", "1", "16"});
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 3, (const char *[]){"S", "3", "3"});
	struct tpf_value *y = add_input(g, "y", TPF_DTYPE_FLOAT, 2, (const char *[]){"3", "5"});
	struct tpf_value *q = add_input(g, "q", TPF_DTYPE_FLOAT, 2, (const char *[]){"4", "5"});
	struct tpf_node *mamba = einsum(g, "mamba", "bclhn,bcshn->bclsh", 2, IN(a, b));
	struct tpf_node *diag = einsum(g, "diag", "...ii->...i", 1, IN(x));
	struct tpf_node *impl = einsum(g, "impl", "sij,jk", 2, IN(x, y));
	struct tpf_node *trace = einsum(g, "trace", " s i i -> ", 1, IN(x));
	einsum(g, "sizes", "ij,jk->ik", 2, IN(y, q));
	einsum(g, "count", "ij->ji", 2, IN(y, q));
	einsum(g, "rank", "ijk->i", 1, IN(y));
	einsum(g, "letter", "i1->i", 1, IN(y));
	einsum(g, "arrow", "ij-ji", 1, IN(y));
	einsum(g, "twice", "ij->ii", 1, IN(y));
	einsum(g, "missing", "ij->z", 1, IN(y));

	expect_verify(m, (const char *[]){
	                     "node 'sizes' (Einsum): subscript 'j' is 5 in input 0 ('y') but 4 in "
	                     "input 1 ('q')",
	                     "node 'count' (Einsum): equation 'ij->ji': it has 1 input term for 2 inputs",
	                     "node 'rank' (Einsum): equation 'ijk->i': input term 0 'ijk' has 3 "
	                     "subscripts for input 0 of rank 2",
	                     "node 'letter' (Einsum): equation 'i1->i': input term 0: '1' is not a "
	                     "subscript",
	                     "node 'arrow' (Einsum): equation 'ij-ji': '-' is not followed by '>'",
	                     "node 'twice' (Einsum): equation 'ij->ii': output subscript 'i' is "
	                     "given twice",
	                     "node 'missing' (Einsum): equation 'ij->z': output subscript 'z' is in "
	                     "no input term",
	                     NULL});
	expect_valid(m, (const char *const[]){"'mamba'", "'diag'", "'impl'", "'trace'", NULL},
	             (const struct typed[]){
	                 {mamba->outputs[0], "f32[B,2,8,8,4]"},
	                 {diag->outputs[0], "f32[S,3]"},
	                 {impl->outputs[0], "f32[3,5,S]"},
	                 {trace->outputs[0], "f32[]"},
	                 {NULL, NULL},
	             });
	tpf_model_free(m);
}

/* GatedActivation and RotaryEmbedding (the decode fusions): shapes, and
 * what the verifier rejects, naming the node. */
static void test_decode_fusion_ops(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(23, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *gt = add_input(g, "g", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *up = add_input(g, "u", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_value *u32 = add_input(g, "u32", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "32"});
	struct tpf_value *gu = add_input(g, "gu", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "128"});
	struct tpf_value *odd = add_input(g, "odd", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "7"});
	struct tpf_node *ga = add_node(g, TPF_DOMAIN, "GatedActivation", "ga", 2, IN(gt, up), 1);
	struct tpf_node *gp = add_node(g, TPF_DOMAIN, "GatedActivation", "gp", 1, IN(gu), 1);
	tpf_node_set_attr_int(gp, "packed", 1);
	tpf_node_set_attr_string(gp, "activation", "gelu_tanh");
	add_node(g, TPF_DOMAIN, "GatedActivation", "ga_shape", 2, IN(gt, u32), 1);
	tpf_node_set_attr_int(add_node(g, TPF_DOMAIN, "GatedActivation", "ga_odd", 1, IN(odd), 1),
	                      "packed", 1);
	tpf_node_set_attr_string(add_node(g, TPF_DOMAIN, "GatedActivation", "ga_act", 2, IN(gt, up), 1),
	                         "activation", "relu");
	tpf_node_set_attr_int(add_node(g, TPF_DOMAIN, "GatedActivation", "ga_two", 2, IN(gt, up), 1),
	                      "packed", 1);

	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 4, (const char *[]){"B", "4", "S", "16"});
	struct tpf_value *c3 = add_input(g, "c3", TPF_DTYPE_FLOAT, 3, (const char *[]){"B", "S", "8"});
	struct tpf_value *c2 = add_input(g, "c2", TPF_DTYPE_FLOAT, 2, (const char *[]){"64", "8"});
	struct tpf_value *c6 = add_input(g, "c6", TPF_DTYPE_FLOAT, 3, (const char *[]){"B", "S", "6"});
	struct tpf_value *pos = add_input(g, "pos", TPF_DTYPE_INT64, 2, (const char *[]){"B", "S"});
	struct tpf_value *x3 = add_input(g, "x3", TPF_DTYPE_FLOAT, 3, (const char *[]){"B", "S", "64"});
	struct tpf_node *re = add_node(g, "", "RotaryEmbedding", "rope", 3, IN(x, c3, c3), 1);
	struct tpf_node *rp = add_node(g, "", "RotaryEmbedding", "rope_pos", 4, IN(x, c2, c2, pos), 1);
	add_node(g, "", "RotaryEmbedding", "rope_rank", 3, IN(x, c2, c2), 1);
	add_node(g, "", "RotaryEmbedding", "rope_half", 3, IN(x, c6, c6), 1);
	add_node(g, "", "RotaryEmbedding", "rope_3d", 3, IN(x3, c3, c3), 1);
	tpf_node_set_attr_int(add_node(g, "", "RotaryEmbedding", "rope_dim", 3, IN(x, c3, c3), 1),
	                      "rotary_embedding_dim", 7);

	expect_verify(m, (const char *[]){
	                     "node 'ga_shape' (ai.tpfuse::GatedActivation): up 1 'u32' is bf16[T,32] "
	                     "but input 0 'g' is bf16[T,64]; expected the same shape",
	                     "node 'ga_odd' (ai.tpfuse::GatedActivation): input 0 'odd' bf16[T,7]: "
	                     "packed = 1 needs an even last dim",
	                     "node 'ga_act' (ai.tpfuse::GatedActivation)",
	                     "node 'ga_two' (ai.tpfuse::GatedActivation): packed = 1 takes one input",
	                     "node 'rope_rank' (RotaryEmbedding): input 1 'c2' f32[64,8]: expected rank 3",
	                     "node 'rope_half' (RotaryEmbedding): input 1 'c6' f32[B,S,6]: the last dim "
	                     "must be rotary_dim/2 = 8",
	                     "node 'rope_3d' (RotaryEmbedding): input 0 'x3' is 3-D [batch, seq, hidden]; "
	                     "attribute 'num_heads' is required",
	                     "node 'rope_dim' (RotaryEmbedding): attribute 'rotary_embedding_dim' = 7 "
	                     "must be even",
	                     NULL});
	expect_valid(m, (const char *const[]){"'ga'", "'gp'", "'rope'", "'rope_pos'", NULL},
	             (const struct typed[]){
	                 {ga->outputs[0], "bf16[T,64]"},
	                 {gp->outputs[0], "bf16[T,64]"},
	                 {re->outputs[0], "f32[B,4,S,16]"},
	                 {rp->outputs[0], "f32[B,4,S,16]"},
	                 {NULL, NULL},
	             });
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ dtype questions */

/* tpf_value_dtype follows producers through their records: the passes ask
 * before inference has run. */
static void test_value_dtype(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(23, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_BFLOAT16, 2, (const char *[]){"T", "64"});
	struct tpf_node *c = add_node(g, "", "Cast", "c", 1, IN(x), 1);
	tpf_node_set_attr_int(c, "to", TPF_DTYPE_FLOAT);
	struct tpf_node *sq = add_node(g, "", "Mul", "sq", 2, IN(c->outputs[0], c->outputs[0]), 1);
	struct tpf_node *gt = add_node(g, "", "Greater", "gt", 2, IN(sq->outputs[0], c->outputs[0]), 1);
	struct tpf_node *rn = add_node(g, "", "RMSNormalization", "rn", 2,
	                          IN(x, weight(g, "w", TPF_DTYPE_FLOAT, 64)), 1);
	struct tpf_node *arn = add_node(g, TPF_DOMAIN, "AllReduceRMSNorm", "arn", 2,
	                           IN(x, weight(g, "w2", TPF_DTYPE_BFLOAT16, 64)), 2);
	struct tpf_node *sh = add_node(g, "", "Shape", "sh", 1, IN(x), 1);
	struct tpf_node *u = tpf_graph_add_node(g, "com.example", "Mystery", "u", IN(x), 1, 1, NULL);

	assert_int_equal(tpf_value_dtype(sq->outputs[0]), TPF_DTYPE_FLOAT);
	assert_int_equal(tpf_value_dtype(gt->outputs[0]), TPF_DTYPE_BOOL);
	assert_int_equal(tpf_value_dtype(rn->outputs[0]), TPF_DTYPE_FLOAT); /* the scale's */
	assert_int_equal(tpf_value_dtype(arn->outputs[0]), TPF_DTYPE_BFLOAT16);
	assert_int_equal(tpf_value_dtype(arn->outputs[1]), TPF_DTYPE_BFLOAT16);
	assert_int_equal(tpf_value_dtype(sh->outputs[0]), TPF_DTYPE_INT64);
	assert_int_equal(tpf_value_dtype(u->outputs[0]), TPF_DTYPE_UNDEFINED);
	tpf_model_free(m);
}

/* tpf_value_ints: what the TorchScript exporter computes from shapes (a
 * Slice's bounds) is known to the passes without inference having run. */
static void test_value_ints(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(17, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 3, (const char *[]){"B", "S", "64"});
	struct tpf_node *sh = add_node(g, "", "Shape", "shape", 1, IN(x), 1);
	struct tpf_node *last = add_node(g, "", "Gather", "last", 2,
	                            IN(sh->outputs[0], add_ints(g, "two", 1, (int64_t[]){2})), 1);
	struct tpf_node *start = add_node(g, "", "Mul", "start", 2,
	                             IN(last->outputs[0], add_ints(g, "zero", 1, (int64_t[]){0})), 1);
	struct tpf_node *cat = add_node(g, "", "Concat", "bounds", 2,
	                           IN(start->outputs[0], last->outputs[0]), 1);
	tpf_node_set_attr_int(cat, "axis", 0);
	struct tpf_node *first = add_node(g, "", "Gather", "first", 2,
	                             IN(sh->outputs[0], add_ints(g, "z", 1, (int64_t[]){0})), 1);
	int64_t v[4] = {0};
	size_t n = 0;

	/* no inference has run: the values come through the producers */
	assert_int_equal(tpf_value_ints(cat->outputs[0], v, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[1], 64);
	assert_int_equal(tpf_value_ints(first->outputs[0], v, 4, &n), -1); /* B is symbolic */
	assert_int_equal(tpf_value_ints(cat->outputs[0], v, 1, &n), -1);   /* more than max */
	assert_int_equal(tpf_value_ints(x, v, 4, &n), -1);
	tpf_model_free(m);
}

/* ------------------------------------------------------------------ attributes from records */

static void test_record_attributes(void **state)
{
	(void)state;
	struct tpf_model *m = tp_model(18, NULL);
	struct tpf_graph *g = m->graph;
	struct tpf_value *x = add_input(g, "x", TPF_DTYPE_FLOAT, 2, (const char *[]){"2", "3"});
	tpf_node_set_attr_string(add_node(g, "", "ScatterElements", "sc", 3,
	                             IN(x, add_input(g, "i", TPF_DTYPE_INT64, 2, (const char *[]){"2", "3"}), x), 1),
	                         "reduction", "sum");
	tpf_node_set_attr_int(add_node(g, "", "Split", "sp", 1, IN(x), 2), "num_outputs", 3);
	tpf_node_set_attr_int(add_node(g, "", "LayerNormalization", "ln", 2, IN(x, x), 1),
	                      "stash_type", 0);
	struct tpf_node *sx = add_node(g, "", "Softmax", "sm", 1, IN(x), 1);
	tpf_node_set_attr_int(sx, "axis", 2);
	expect_verify(m, (const char *[]){
	                     "node 'sc' (ScatterElements): attribute 'reduction' is \"sum\"; "
	                     "expected one of \"none\", \"add\", \"mul\", \"max\", \"min\"",
	                     "node 'sp' (Split): attribute 'num_outputs' = 3 but the node has 2 "
	                     "outputs",
	                     "node 'ln' (LayerNormalization): attribute 'stash_type' = 0 is not a "
	                     "valid tensor dtype",
	                     "node 'sm' (Softmax): attribute 'axis' = 2 is out of range for rank 2",
	                     NULL});
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_records_consistent),
	    cmocka_unit_test(test_one_shape_function),
	    cmocka_unit_test(test_shape_arithmetic_folds),
	    cmocka_unit_test(test_exporter_dims_unify),
	    cmocka_unit_test(test_unify_rules),
	    cmocka_unit_test(test_collective_shapes),
	    cmocka_unit_test(test_fused_norm_rejects),
	    cmocka_unit_test(test_fused_quant_rejects),
	    cmocka_unit_test(test_fused_misc_rejects),
	    cmocka_unit_test(test_decode_fusion_ops),
	    cmocka_unit_test(test_einsum_shapes),
	    cmocka_unit_test(test_value_dtype),
	    cmocka_unit_test(test_value_ints),
	    cmocka_unit_test(test_record_attributes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
