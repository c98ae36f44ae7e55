/* SPDX-License-Identifier: MIT */
/*
 * Runtime unit tests: lowering (schedule, folding of shape computations,
 * kernel choice), liveness-based buffer reuse, plan rebuilds when input
 * shapes change, the fused collectives' lowering on one rank, input errors,
 * the world-size check, the self communicator, the structure hash and the
 * TensorProto reader/writer.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "runtime-internal.h"
#include "test-util.h"

/* A chain x -> Neg -> Reciprocal -> Neg -> Neg -> Reciprocal -> Neg -> ...
 * (n ops, op i is Reciprocal when i % 3 == 1), f32[T, 16] with a symbolic
 * T.  Its result depends on the input's sign and magnitude, and leaving out
 * any one step changes it (a missing Neg flips the sign, a missing
 * Reciprocal inverts the magnitude of every element but +-1). */
static const char *chain_op(int i)
{
	return i % 3 == 1 ? "Reciprocal" : "Neg";
}

static struct tpf_model *chain_model(int n)
{
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	struct tpf_graph *g = m->graph;
	tpf_model_set_opset(m, "", 23);
	const char *dims[2] = {"T", "16"};
	struct tpf_value *v = tpf_graph_add_input_sym(g, "x", TPF_DTYPE_FLOAT, 2, dims);
	assert_non_null(v);
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "op%d", i);
		struct tpf_node *nd = tpf_graph_add_node(g, "", chain_op(i), name, &v, 1, 1, NULL);
		assert_non_null(nd);
		v = nd->outputs[0];
	}
	assert_int_equal(tpf_graph_add_output(g, v), TPF_OK);
	return m;
}

/* The chain's result for one element, step by step as the CPU kernels
 * compute it (in double, rounded to float after every step). */
static float chain_expect(int n, float x)
{
	for (int i = 0; i < n; i++)
		x = i % 3 == 1 ? (float)(1.0 / (double)x) : -x;
	return x;
}

/* Exact equality with the chain's result for every element. */
static void check_chain_output(const struct tpf_host_tensor *out, int n_ops, const float *x, int64_t rows)
{
	assert_int_equal(out->dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(out->rank, 2);
	assert_int_equal(out->dims[0], rows);
	assert_int_equal(out->dims[1], 16);
	const float *y = out->data;
	for (int64_t i = 0; i < rows * 16; i++) {
		float want = chain_expect(n_ops, x[i]);
		if (y[i] != want)
			fail_msg("element %lld: %.9g, expected %.9g (input %.9g)", (long long)i, (double)y[i],
				 (double)want, (double)x[i]);
	}
}

static void test_chain_reuse(void **state)
{
	struct tpf_model *m = chain_model(8);
	struct tpf_diag *d = tpf_diag_create();
	float x[4 * 16], x2[2 * 16];
	/* no zero (its reciprocal is infinite), every element different */
	for (int i = 0; i < 64; i++)
		x[i] = (float)(i - 32) * 0.75f + 0.25f;
	for (int i = 0; i < 32; i++)
		x2[i] = 3.0f - (float)i * 0.375f;
	int64_t dims[2] = {4, 16};
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, dims, x);
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_OK);
	struct tpf_plan_stats st;
	tpf_plan_get_stats(p, &st);
	assert_int_equal(st.n_steps, 8);
	assert_int_equal(st.n_kernel_steps, 8);
	assert_int_equal(st.n_buffers, 9);
	/* a chain needs at most three live buffers (input, operand, result) */
	assert_true(st.arena_bytes <= 3 * 256);
	assert_true(st.unshared_bytes == 9 * 256);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	assert_int_equal(tpf_plan_print(p, f), TPF_OK);
	fclose(f);
	assert_non_null(strstr(buf, "cpu.unary"));
	assert_non_null(strstr(buf, "arena peak"));
	free(buf);
	tpf_plan_free(p);

	/* run twice on the same plan, then with another T (the plan is
	 * rebuilt) and other values, then with the first input again: every
	 * result is the chain's, exactly */
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 1);
	check_chain_output(&out[0], 8, x, 4);
	const struct tpf_plan *p1 = tpf_session_plan(s);
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_ptr_equal(tpf_session_plan(s), p1);
	check_chain_output(&out[0], 8, x, 4);
	int64_t dims2[2] = {2, 16};
	struct tpf_host_tensor in2 = host_tensor("x", TPF_DTYPE_FLOAT, 2, dims2, x2);
	assert_int_equal(tpf_session_run(s, &in2, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 1);
	check_chain_output(&out[0], 8, x2, 2);
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	check_chain_output(&out[0], 8, x, 4);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Profiling (eager runs after a plan's first) and replays. */
static void test_profile_and_replay(void **state)
{
	struct tpf_model *m = chain_model(6);
	struct tpf_diag *d = tpf_diag_create();
	float x[4 * 16] = {0};
	int64_t dims[2] = {4, 16};
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, dims, x);
	struct tpf_session *s = NULL;
	struct tpf_session_options so = {.profile = 1};
	assert_int_equal(tpf_session_create(m, &so, &s, d), TPF_OK);
	/* nothing before the first run */
	assert_int_equal(tpf_session_replay(s, d), TPF_ERR_INVALID);
	tpf_diag_clear(d);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	tpf_session_profile_print(s, f);
	fclose(f);
	assert_non_null(strstr(buf, "no timed runs"));
	free(buf);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	/* the first run is set-up: still nothing timed */
	f = open_memstream(&buf, &len);
	tpf_session_profile_print(s, f);
	fclose(f);
	assert_non_null(strstr(buf, "no timed runs"));
	free(buf);
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	for (int i = 0; i < 3; i++)
		assert_int_equal(tpf_session_replay(s, d), TPF_OK);
	assert_int_equal(tpf_session_sync(s, d), TPF_OK);
	f = open_memstream(&buf, &len);
	tpf_session_profile_print(s, f);
	fclose(f);
	/* 1 run + 3 replays; both kernels of the chain, 3 steps each */
	assert_non_null(strstr(buf, "(4 runs, 6 steps)"));
	assert_non_null(strstr(buf, "cpu.unary"));
	assert_non_null(strstr(buf, "slowest steps"));
	assert_non_null(strstr(buf, "node 'op"));
	free(buf);
	size_t n_coll = 9, n_one = 9;
	tpf_session_collective_stats(s, &n_coll, &n_one);
	assert_int_equal(n_coll, 0);
	assert_int_equal(n_one, 0);
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A Split whose pieces are contiguous runs of its input (every dim before
 * the axis is 1) becomes views at the pieces' offsets when they keep the
 * arena's alignment; two rows (pieces strided) or unaligned offsets copy.
 * The pieces read back right either way, and a piece lives on after a
 * later step (Neg of another piece) reuses nothing it still needs. */
static void check_split(int rows, int64_t piece, int expect_views)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	tpf_model_set_opset(m, "", 23);
	int64_t xd[2] = {rows, 3 * piece};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
	struct tpf_node *r = tpf_graph_add_node(g, "", "Relu", "relu", &x, 1, 1, NULL);
	struct tpf_node *sp = tpf_graph_add_node(g, "", "Split", "split", &r->outputs[0], 1, 3, NULL);
	tpf_node_set_attr_int(sp, "axis", 1);
	tpf_node_set_attr_int(sp, "num_outputs", 3);
	struct tpf_node *ng = tpf_graph_add_node(g, "", "Neg", "neg", &sp->outputs[1], 1, 1, NULL);
	struct tpf_value *ain[2] = {sp->outputs[0], ng->outputs[0]};
	struct tpf_node *add = tpf_graph_add_node(g, "", "Add", "add", ain, 2, 1, NULL);
	tpf_graph_add_output(g, add->outputs[0]);
	tpf_graph_add_output(g, sp->outputs[2]);
	int64_t n = rows * 3 * piece;
	float *xv = calloc((size_t)n, sizeof(float));
	assert_non_null(xv);
	for (int64_t i = 0; i < n; i++)
		xv[i] = (float)(i % 11) - 3.0f;
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, xv);
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_OK);
	struct tpf_plan_stats ps;
	tpf_plan_get_stats(p, &ps);
	assert_int_equal(ps.n_views, expect_views ? 3 : 0);
	assert_int_equal(ps.n_kernel_steps, expect_views ? 3 : 4); /* relu, [split], neg, add */
	tpf_plan_free(p);
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 2);
	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < piece; j++) {
			const float *row = xv + i * 3 * piece;
			float a = row[j] > 0 ? row[j] : 0, b = row[piece + j] > 0 ? row[piece + j] : 0;
			float c = row[2 * piece + j] > 0 ? row[2 * piece + j] : 0;
			assert_float_equal(((const float *)out[0].data)[i * piece + j], a - b, 0);
			assert_float_equal(((const float *)out[1].data)[i * piece + j], c, 0);
		}
	tpf_session_free(s);
	free(xv);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_split_views(void **state)
{
	(void)state;
	check_split(1, 64, 1); /* 256-byte pieces: views */
	check_split(2, 64, 0); /* two rows: each piece strided */
	check_split(1, 20, 0); /* 80-byte offsets: not aligned */
}

/* y = Neg(op(Relu(x))), op's output an output too, through the plan and a
 * session: op is a view (no step) or not as expected, and both outputs
 * equal `want` (op's result on Relu(x)) and its negation. */
static void check_view_op(struct tpf_model *m, struct tpf_node *op, const int64_t *xd, int rank,
			  const float *want, int64_t n_want, int expect_view)
{
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_node *ng = tpf_graph_add_node(g, "", "Neg", "neg", &op->outputs[0], 1, 1, NULL);
	tpf_graph_add_output(g, op->outputs[0]);
	tpf_graph_add_output(g, ng->outputs[0]);
	int64_t n = 1;
	for (int i = 0; i < rank; i++)
		n *= xd[i];
	float *xv = calloc((size_t)n, sizeof(float));
	assert_non_null(xv);
	for (int64_t i = 0; i < n; i++)
		xv[i] = (float)(i % 13) - 2.0f;
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, rank, xd, xv);
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_OK);
	struct tpf_plan_stats ps;
	tpf_plan_get_stats(p, &ps);
	assert_int_equal(ps.n_views, expect_view ? 1 : 0);
	assert_int_equal(ps.n_kernel_steps, expect_view ? 2 : 3); /* relu, [op], neg */
	tpf_plan_free(p);
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 2);
	assert_int_equal(out[0].nbytes, (size_t)n_want * sizeof(float));
	for (int64_t i = 0; i < n_want; i++) {
		assert_float_equal(((const float *)out[0].data)[i], want[i], 0);
		assert_float_equal(((const float *)out[1].data)[i], -want[i], 0);
	}
	tpf_session_free(s);
	free(xv);
	tpf_diag_free(d);
}

/* Relu(x) for check_view_op's x at flat index i. */
static float relu_x(int64_t i)
{
	float v = (float)(i % 13) - 2.0f;
	return v > 0 ? v : 0;
}

/* A Transpose that moves only axes of size 1 is a view; one that swaps
 * two axes of more than one element is a step. */
static void check_transpose(int rank, const int64_t *xd, const int64_t *perm, int expect_view)
{
	struct tpf_model *m = tpf_model_create();
	tpf_model_set_opset(m, "", 23);
	struct tpf_value *x = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, rank, xd);
	struct tpf_node *r = tpf_graph_add_node(m->graph, "", "Relu", "relu", &x, 1, 1, NULL);
	struct tpf_node *t = tpf_graph_add_node(m->graph, "", "Transpose", "tr", &r->outputs[0], 1, 1, NULL);
	int64_t pm[8], yd[8], xs[8], n = 1;
	for (int i = 0; i < rank; i++)
		pm[i] = perm ? perm[i] : rank - 1 - i;
	if (perm)
		tpf_node_set_attr_ints(t, "perm", perm, (size_t)rank);
	for (int i = rank - 1; i >= 0; i--) {
		xs[i] = n;
		n *= xd[i];
	}
	for (int i = 0; i < rank; i++)
		yd[i] = xd[pm[i]];
	float *want = calloc((size_t)n, sizeof(float));
	assert_non_null(want);
	for (int64_t j = 0; j < n; j++) { /* y's flat index j -> x's */
		int64_t rest = j, src = 0;
		for (int i = rank - 1; i >= 0; i--) {
			src += (rest % yd[i]) * xs[pm[i]];
			rest /= yd[i];
		}
		want[j] = relu_x(src);
	}
	check_view_op(m, t, xd, rank, want, n, expect_view);
	free(want);
	tpf_model_free(m);
}

static void test_transpose_views(void **state)
{
	(void)state;
	static const int64_t d1[] = {2, 1, 3, 4}, p1[] = {0, 2, 1, 3}; /* [B,1,H,D] -> [B,H,1,D] */
	static const int64_t d2[] = {2, 3, 1, 4};                      /* and back */
	static const int64_t d3[] = {1, 2, 3, 1}, p3[] = {3, 0, 2, 1}; /* 2 and 3 swap */
	static const int64_t d4[] = {2, 3}, d5[] = {1, 5};
	check_transpose(4, d1, p1, 1);
	check_transpose(4, d2, p1, 1);
	check_transpose(4, d3, p3, 0);
	check_transpose(2, d4, NULL, 0); /* the default perm reverses: a real transpose */
	check_transpose(2, d5, NULL, 1);
}

/* Slice(Relu(x), starts, ends, axes, steps) of x [B, S, H]: the last
 * position of one sequence is a view at its row when the row keeps the
 * arena's alignment; several sequences, an unaligned row or a reversed
 * axis are a step. */
static void check_slice(int64_t b, int64_t sq, int64_t h, int64_t start, int64_t end, int64_t step,
			int expect_view)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	tpf_model_set_opset(m, "", 23);
	int64_t xd[3] = {b, sq, h}, one = 1, axis = 1;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 3, xd);
	struct tpf_node *r = tpf_graph_add_node(g, "", "Relu", "relu", &x, 1, 1, NULL);
	struct tpf_value *sin[5] = {r->outputs[0],
				    tpf_graph_add_initializer(g, "starts", TPF_DTYPE_INT64, 1, &one, &start, 8),
				    tpf_graph_add_initializer(g, "ends", TPF_DTYPE_INT64, 1, &one, &end, 8),
				    tpf_graph_add_initializer(g, "axes", TPF_DTYPE_INT64, 1, &one, &axis, 8),
				    tpf_graph_add_initializer(g, "steps", TPF_DTYPE_INT64, 1, &one, &step, 8)};
	struct tpf_node *sl = tpf_graph_add_node(g, "", "Slice", "slice", sin, 5, 1, NULL);
	/* the positions taken, as the kernels clamp them */
	int64_t pos[64], np = 0;
	for (int64_t t = start < 0 ? start + sq : start; step > 0 ? t < (end > sq ? sq : end) : t > end;
	     t += step)
		if (t >= 0 && t < sq)
			pos[np++] = t;
	float *want = calloc((size_t)(b * np * h), sizeof(float));
	assert_non_null(want);
	for (int64_t i = 0; i < b; i++)
		for (int64_t k = 0; k < np; k++)
			for (int64_t j = 0; j < h; j++)
				want[(i * np + k) * h + j] = relu_x((i * sq + pos[k]) * h + j);
	check_view_op(m, sl, xd, 3, want, b * np * h, expect_view);
	free(want);
	tpf_model_free(m);
}

static void test_slice_views(void **state)
{
	(void)state;
	check_slice(1, 5, 64, -1, INT64_MAX, 1, 1);  /* the last position: 1,024 bytes in */
	check_slice(1, 5, 64, 1, 3, 1, 1);           /* positions 1 and 2: contiguous */
	check_slice(2, 1, 20, -1, INT64_MAX, 1, 1);  /* all of it (a decode step) */
	check_slice(2, 5, 64, -1, INT64_MAX, 1, 0);  /* two sequences: strided */
	check_slice(1, 5, 20, -1, INT64_MAX, 1, 0);  /* 80-byte rows: unaligned */
	check_slice(1, 20, 20, 16, 17, 1, 0);        /* 80-byte rows, an aligned start: still a step */
	check_slice(1, 5, 64, -1, -6, -1, 0);        /* reversed */
	check_slice(1, 5, 64, 0, 5, 2, 0);           /* every other position */
}

/* Reshape / Identity / Squeeze / Unsqueeze become views of their input's
 * buffer: no step, and the viewed buffer lives as long as its views (the
 * Neg chain in between would reuse it otherwise). */
static void test_views(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	tpf_model_set_opset(m, "", 23);
	int64_t xd[2] = {4, 16}, flat[1] = {64}, sq_axes[1] = {0}, d1 = 1;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
	struct tpf_value *shp = tpf_graph_add_initializer(g, "flat", TPF_DTYPE_INT64, 1, &d1, flat, 8);
	struct tpf_value *ax = tpf_graph_add_initializer(g, "ax", TPF_DTYPE_INT64, 1, &d1, sq_axes, 8);
	struct tpf_node *r = tpf_graph_add_node(g, "", "Relu", "relu", &x, 1, 1, NULL);
	struct tpf_value *rin[2] = {r->outputs[0], shp};
	struct tpf_node *v = tpf_graph_add_node(g, "", "Reshape", "view", rin, 2, 1, NULL); /* [64] */
	struct tpf_value *uin[2] = {v->outputs[0], ax};
	struct tpf_node *u = tpf_graph_add_node(g, "", "Unsqueeze", "view2", uin, 2, 1, NULL); /* [1,64] */
	struct tpf_value *cur = x;
	for (int i = 0; i < 6; i++) {
		char name[16];
		snprintf(name, sizeof(name), "neg%d", i);
		struct tpf_node *n = tpf_graph_add_node(g, "", "Neg", name, &cur, 1, 1, NULL);
		cur = n->outputs[0];
	}
	struct tpf_value *fin[2] = {cur, shp};
	struct tpf_node *cf = tpf_graph_add_node(g, "", "Reshape", "cur_flat", fin, 2, 1, NULL);
	struct tpf_value *ain[2] = {u->outputs[0], cf->outputs[0]};
	struct tpf_node *add = tpf_graph_add_node(g, "", "Add", "add", ain, 2, 1, NULL); /* relu(x) + x */
	struct tpf_node *id = tpf_graph_add_node(g, "", "Identity", "x_out", &x, 1, 1, NULL);
	tpf_graph_add_output(g, add->outputs[0]);
	tpf_graph_add_output(g, v->outputs[0]);
	tpf_graph_add_output(g, id->outputs[0]);
	float xv[64];
	for (int i = 0; i < 64; i++)
		xv[i] = (float)(i % 9) - 4.0f;
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, xv);
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_OK);
	struct tpf_plan_stats ps;
	tpf_plan_get_stats(p, &ps);
	assert_int_equal(ps.n_views, 4);        /* view, view2, cur_flat, x_out */
	assert_int_equal(ps.n_kernel_steps, 8); /* relu, 6 x neg, add */
	tpf_plan_free(p);
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	const struct tpf_host_tensor *out;
	size_t n_out;
	for (int run = 0; run < 2; run++) {
		assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
		assert_int_equal(n_out, 3);
		assert_int_equal(out[0].rank, 2);
		assert_int_equal(out[1].rank, 1);
		for (int i = 0; i < 64; i++) {
			float rl = xv[i] > 0 ? xv[i] : 0;
			assert_true(((float *)out[0].data)[i] == rl + xv[i]);
			assert_true(((float *)out[1].data)[i] == rl);
			assert_true(((float *)out[2].data)[i] == xv[i]);
		}
	}
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Each kernel operand says whether a step of the run writes it
 * (tpf_ktensor.invariant): initializers, graph inputs and views of them do
 * not, and GPU kernels read those before the previous kernel has finished;
 * anything computed in the run, a weight included, must say it may change. */
static void test_invariant_operands(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	tpf_model_set_opset(m, "", 23);
	int64_t xd[2] = {4, 16}, wd[2] = {16, 8}, d2 = 2, shape[2] = {4, 16};
	float w[128], xv[64], wv[128];
	for (int i = 0; i < 128; i++)
		w[i] = (float)(i % 7) - 3.0f, wv[i] = (float)(i % 5) - 2.0f;
	for (int i = 0; i < 64; i++)
		xv[i] = (float)(i % 9) - 4.0f;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
	struct tpf_value *win = tpf_graph_add_input(g, "w_in", TPF_DTYPE_FLOAT, 2, wd);
	struct tpf_value *wi = tpf_graph_add_initializer(g, "w", TPF_DTYPE_FLOAT, 2, wd, w, sizeof(w));
	struct tpf_value *shp = tpf_graph_add_initializer(g, "shape", TPF_DTYPE_INT64, 1, &d2, shape, sizeof(shape));
	struct tpf_node *r = tpf_graph_add_node(g, "", "Relu", "relu", &x, 1, 1, NULL);
	struct tpf_value *m1in[2] = {r->outputs[0], wi};
	struct tpf_node *mm1 = tpf_graph_add_node(g, "", "MatMul", "mm1", m1in, 2, 1, NULL);
	struct tpf_node *neg = tpf_graph_add_node(g, "", "Neg", "neg", &win, 1, 1, NULL);
	struct tpf_value *vin[2] = {x, shp};
	struct tpf_node *view = tpf_graph_add_node(g, "", "Reshape", "x_view", vin, 2, 1, NULL);
	struct tpf_value *m2in[2] = {view->outputs[0], neg->outputs[0]};
	struct tpf_node *mm2 = tpf_graph_add_node(g, "", "MatMul", "mm2", m2in, 2, 1, NULL);
	/* a view of a computed value is not invariant either */
	struct tpf_value *rvin[2] = {r->outputs[0], shp};
	struct tpf_node *rview = tpf_graph_add_node(g, "", "Reshape", "relu_view", rvin, 2, 1, NULL);
	struct tpf_value *m3in[2] = {rview->outputs[0], wi};
	struct tpf_node *mm3 = tpf_graph_add_node(g, "", "MatMul", "mm3", m3in, 2, 1, NULL);
	struct tpf_value *ain[2] = {mm1->outputs[0], mm2->outputs[0]};
	struct tpf_node *add = tpf_graph_add_node(g, "", "Add", "add", ain, 2, 1, NULL);
	tpf_graph_add_output(g, add->outputs[0]);
	tpf_graph_add_output(g, mm3->outputs[0]);
	struct tpf_host_tensor in[2] = {host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, xv),
					host_tensor("w_in", TPF_DTYPE_FLOAT, 2, wd, wv)};
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	assert_null(tpf_session_bound_input(s, "mm1", 0)); /* nothing bound yet */
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, in, 2, &out, &n_out, d), TPF_OK);
	const struct tpf_ktensor *t;
	assert_non_null(t = tpf_session_bound_input(s, "mm1", 0)); /* relu(x) */
	assert_int_equal(t->invariant, 0);
	assert_non_null(t = tpf_session_bound_input(s, "mm1", 1)); /* initializer */
	assert_int_equal(t->invariant, 1);
	assert_non_null(t = tpf_session_bound_input(s, "neg", 0)); /* graph input */
	assert_int_equal(t->invariant, 1);
	assert_non_null(t = tpf_session_bound_input(s, "mm2", 0)); /* view of x */
	assert_int_equal(t->invariant, 1);
	assert_non_null(t = tpf_session_bound_input(s, "mm2", 1)); /* computed weight */
	assert_int_equal(t->invariant, 0);
	assert_non_null(t = tpf_session_bound_input(s, "add", 0));
	assert_int_equal(t->invariant, 0);
	assert_non_null(t = tpf_session_bound_input(s, "mm3", 0)); /* view of relu(x) */
	assert_int_equal(t->invariant, 0);
	assert_non_null(t = tpf_session_bound_input(s, "mm3", 1));
	assert_int_equal(t->invariant, 1);
	assert_null(tpf_session_bound_input(s, "x_view", 0)); /* a view: no step */
	assert_null(tpf_session_bound_input(s, "mm1", 2));
	/* relu(x) @ w - x @ w_in */
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 8; j++) {
			float want = 0;
			for (int k = 0; k < 16; k++) {
				float a = xv[i * 16 + k];
				want += (a > 0 ? a : 0) * w[k * 8 + j] - a * wv[k * 8 + j];
			}
			assert_true(fabsf(((float *)out[0].data)[i * 8 + j] - want) < 1e-4f);
		}
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A fused norm's all-reduce input stays live through its post-reduce step
 * (the CUDA one-shot kernel reads it while writing the outputs): its buffer
 * never overlaps an output of that step. */
static void test_fused_norm_input_lifetime(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	tpf_model_set_opset(m, "", 23);
	int64_t xd[2] = {8, 256}, d256 = 256;
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, xd);
	float gamma[256];
	for (int i = 0; i < 256; i++)
		gamma[i] = 1.0f;
	struct tpf_value *gv = tpf_graph_add_initializer(g, "gamma", TPF_DTYPE_FLOAT, 1, &d256, gamma, sizeof(gamma));
	struct tpf_node *neg = tpf_graph_add_node(g, "", "Neg", "partial", &x, 1, 1, NULL);
	struct tpf_value *fin[2] = {neg->outputs[0], gv};
	struct tpf_node *f = tpf_graph_add_node(g, TPF_DOMAIN, "AllReduceRMSNorm", "arn", fin, 2, 1, NULL);
	tpf_graph_add_output(g, f->outputs[0]);
	static float xv[8 * 256];
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, xv);
	struct tpf_plan *p = NULL;
	enum tpf_status st = tpf_plan_build(m, &in, 1, NULL, &p, d);
	if (st)
		dump_diag(d);
	assert_int_equal(st, TPF_OK);
	const struct rt_value *part = NULL, *y = NULL;
	for (size_t i = 0; i < p->n_values; i++) {
		if (p->values[i].v == neg->outputs[0])
			part = &p->values[i];
		if (p->values[i].v == f->outputs[0])
			y = &p->values[i];
	}
	assert_non_null(part);
	assert_non_null(y);
	assert_true(part->buffer >= 0 && y->buffer >= 0);
	const struct rt_buffer *a = &p->buffers[part->buffer], *b = &p->buffers[y->buffer];
	assert_true(a->offset + a->size <= b->offset || b->offset + b->size <= a->offset);
	tpf_plan_free(p);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_input_errors(void **state)
{
	struct tpf_model *m = chain_model(2);
	struct tpf_diag *d = tpf_diag_create();
	float x[64] = {0};
	int64_t dims[2] = {4, 16}, bad[2] = {4, 15};
	struct tpf_plan *p = NULL;
	/* missing */
	assert_int_equal(tpf_plan_build(m, NULL, 0, NULL, &p, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "missing input 'x'"));
	tpf_diag_clear(d);
	/* extra */
	struct tpf_host_tensor two[2] = {host_tensor("x", TPF_DTYPE_FLOAT, 2, dims, x),
					 host_tensor("y", TPF_DTYPE_FLOAT, 2, dims, x)};
	assert_int_equal(tpf_plan_build(m, two, 2, NULL, &p, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "unexpected input 'y'"));
	tpf_diag_clear(d);
	/* dtype, static dim, rank */
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_BFLOAT16, 2, dims, x);
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "dtype bf16, the model expects f32"));
	tpf_diag_clear(d);
	in = host_tensor("x", TPF_DTYPE_FLOAT, 2, bad, x);
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "dim 1 is 15, the model expects 16"));
	tpf_diag_clear(d);
	in = host_tensor("x", TPF_DTYPE_FLOAT, 1, dims, x);
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "rank 1, the model expects 2"));
	tpf_diag_clear(d);
	assert_null(p);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_unsupported_and_world(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_diag *d = tpf_diag_create();
	int64_t dims[1] = {4};
	float x[4] = {1, 2, 3, 4};
	struct tpf_value *v = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_FLOAT, 1, dims);
	struct tpf_node *n = tpf_graph_add_node(m->graph, "", "Hardmax", "hm", &v, 1, 1, NULL);
	tpf_graph_add_output(m->graph, n->outputs[0]);
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 1, dims, x);
	struct tpf_plan *p = NULL;
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_ERR_UNSUPPORTED);
	assert_true(diag_mentions(d, "node 'hm' (Hardmax)"));
	assert_true(diag_mentions(d, "not supported"));
	tpf_diag_clear(d);
	/* Softmax has no integer kernel: named with the dtype */
	tpf_model_free(m);
	m = tpf_model_create();
	v = tpf_graph_add_input(m->graph, "x", TPF_DTYPE_INT64, 1, dims);
	n = tpf_graph_add_node(m->graph, "", "Softmax", "sm", &v, 1, 1, NULL);
	tpf_graph_add_output(m->graph, n->outputs[0]);
	int64_t xi[4] = {1, 2, 3, 4};
	in = host_tensor("x", TPF_DTYPE_INT64, 1, dims, xi);
	assert_int_equal(tpf_plan_build(m, &in, 1, NULL, &p, d), TPF_ERR_UNSUPPORTED);
	assert_true(diag_mentions(d, "no cpu kernel for dtype i64"));
	tpf_diag_clear(d);
	/* a model made for 2 ranks refuses to run on 1 */
	tpf_model_set_metadata(m, "tp_world_size", "2");
	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_ERR_INVALID);
	assert_true(diag_mentions(d, "world size 2"));
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* Shape computations (Shape -> Gather -> Concat -> Reshape) fold on the
 * host; collectives and fused norms lower to communicator steps + kernels. */
static void test_folding_and_collectives(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	tpf_model_set_opset(m, "", 23);
	const char *dims[2] = {"T", "8"};
	struct tpf_value *x = tpf_graph_add_input_sym(g, "x", TPF_DTYPE_FLOAT, 2, dims);
	float gamma[8] = {1, 1, 1, 1, 2, 2, 2, 2};
	int64_t d8 = 8, zero = 0, minus1[2] = {-1, 4}, d2 = 2, d1 = 1;
	struct tpf_value *gv = tpf_graph_add_initializer(g, "gamma", TPF_DTYPE_FLOAT, 1, &d8, gamma, sizeof(gamma));
	struct tpf_value *idx = tpf_graph_add_initializer(g, "idx0", TPF_DTYPE_INT64, 1, &d1, &zero, 8);
	struct tpf_value *tail = tpf_graph_add_initializer(g, "tail", TPF_DTYPE_INT64, 1, &d2, minus1, 16);
	/* ar = AllReduce(x); y, sum = AllReduceRMSNorm(x, gamma, x) */
	struct tpf_node *ar = tpf_graph_add_node(g, TPF_MS_DOMAIN, "AllReduce", "ar", &x, 1, 1, NULL);
	struct tpf_value *fin[3] = {x, gv, ar->outputs[0]};
	struct tpf_node *f = tpf_graph_add_node(g, TPF_DOMAIN, "AllReduceRMSNorm", "arn", fin, 3, 2, NULL);
	tpf_node_set_attr_float(f, "epsilon", 1e-6f);
	/* shape chain: s = Shape(y); t = Gather(s, idx0); sh = Concat(t, tail) -> Reshape(y, sh) */
	struct tpf_node *sh = tpf_graph_add_node(g, "", "Shape", "shape", &f->outputs[0], 1, 1, NULL);
	struct tpf_value *gin[2] = {sh->outputs[0], idx};
	struct tpf_node *ga = tpf_graph_add_node(g, "", "Gather", "gather", gin, 2, 1, NULL);
	struct tpf_value *cin[2] = {ga->outputs[0], tail};
	struct tpf_node *cc = tpf_graph_add_node(g, "", "Concat", "concat", cin, 2, 1, NULL);
	tpf_node_set_attr_int(cc, "axis", 0);
	struct tpf_value *rin[2] = {f->outputs[0], cc->outputs[0]};
	struct tpf_node *rs = tpf_graph_add_node(g, "", "Reshape", "reshape", rin, 2, 1, NULL);
	tpf_graph_add_output(g, rs->outputs[0]);
	tpf_graph_add_output(g, f->outputs[1]);

	float xv[3 * 8];
	for (int i = 0; i < 24; i++)
		xv[i] = (float)((i * 7) % 11) - 5.0f;
	int64_t xd[2] = {3, 8};
	struct tpf_host_tensor in = host_tensor("x", TPF_DTYPE_FLOAT, 2, xd, xv);
	struct tpf_plan *p = NULL;
	enum tpf_status st = tpf_plan_build(m, &in, 1, NULL, &p, d);
	if (st)
		dump_diag(d);
	assert_int_equal(st, TPF_OK);
	struct tpf_plan_stats ps;
	tpf_plan_get_stats(p, &ps);
	assert_int_equal(ps.n_folded, 3); /* Shape, Gather, Concat */
	assert_int_equal(ps.n_collective_steps, 2);
	assert_int_equal(ps.n_kernel_steps, 1); /* post-reduce norm */
	assert_int_equal(ps.n_views, 1);        /* the Reshape */
	tpf_plan_free(p);

	struct tpf_session *s = NULL;
	assert_int_equal(tpf_session_create(m, NULL, &s, d), TPF_OK);
	const struct tpf_host_tensor *out;
	size_t n_out;
	assert_int_equal(tpf_session_run(s, &in, 1, &out, &n_out, d), TPF_OK);
	assert_int_equal(n_out, 2);
	assert_int_equal(out[0].rank, 3);
	assert_int_equal(out[0].dims[0], 3);
	assert_int_equal(out[0].dims[1], 2);
	for (int r = 0; r < 3; r++) {
		double ss = 0;
		for (int k = 0; k < 8; k++)
			ss += 4.0 * xv[r * 8 + k] * xv[r * 8 + k];
		double inv = 1 / sqrt(ss / 8 + 1e-6);
		for (int k = 0; k < 8; k++) {
			assert_true(fabs(((float *)out[1].data)[r * 8 + k] - 2 * xv[r * 8 + k]) < 1e-6);
			assert_true(fabs(((float *)out[0].data)[r * 8 + k] - 2 * xv[r * 8 + k] * inv * gamma[k]) < 1e-5);
		}
	}
	tpf_session_free(s);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_comm_self_and_hash(void **state)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *c = NULL;
	assert_int_equal(tpf_comm_create_self(NULL, &c, d), TPF_OK);
	assert_int_equal(c->world, 1);
	uint16_t a[3] = {1, 2, 3}, b[3] = {0};
	assert_int_equal(c->ops->allreduce_sum(c, a, b, 3, TPF_DTYPE_BFLOAT16, NULL, d), TPF_OK);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(c->ops->allgather(c, a, b, 6, NULL, d), TPF_OK);
	assert_int_equal(c->ops->barrier(c, d), TPF_OK);
	assert_int_equal(tpf_comm_check_same(c, 42, "x", d), TPF_OK);
	assert_int_equal(c->ops->broadcast(c, a, 6, 1, NULL, d), TPF_ERR_INVALID);
	tpf_comm_free(c);
	/* same structure, different names of constants: same hash */
	struct tpf_model *m1 = chain_model(3), *m2 = chain_model(3), *m3 = chain_model(4);
	assert_true(tpf_graph_structure_hash(m1->graph) == tpf_graph_structure_hash(m2->graph));
	assert_true(tpf_graph_structure_hash(m1->graph) != tpf_graph_structure_hash(m3->graph));
	tpf_model_free(m1);
	tpf_model_free(m2);
	tpf_model_free(m3);
	tpf_diag_free(d);
}

static void test_tensor_pb(void **state)
{
	struct tpf_diag *d = tpf_diag_create();
	char dir[] = "/tmp/tpf-rt-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char path[512];
	snprintf(path, sizeof(path), "%s/input_0.pb", dir);
	uint16_t v[6] = {0x3f80, 0x4000, 0xbf80, 0, 0x7fc0, 0x0001};
	int64_t dims[2] = {2, 3};
	struct tpf_host_tensor t = host_tensor("h", TPF_DTYPE_BFLOAT16, 2, dims, v);
	assert_int_equal(tpf_tensor_write_pb(path, &t, d), TPF_OK);
	snprintf(path, sizeof(path), "%s/input_1.pb", dir);
	uint8_t f4[2] = {0x21, 0x0f};
	int64_t d3[1] = {3};
	t = host_tensor("q", TPF_DTYPE_FLOAT4E2M1, 1, d3, f4);
	assert_int_equal(tpf_tensor_write_pb(path, &t, d), TPF_OK);
	struct tpf_host_tensor *all = NULL;
	size_t n = 0;
	assert_int_equal(tpf_tensor_read_dir(dir, "input", &all, &n, d), TPF_OK);
	assert_int_equal(n, 2);
	assert_string_equal(all[0].name, "h");
	assert_int_equal(all[0].dtype, TPF_DTYPE_BFLOAT16);
	assert_int_equal(all[0].dims[1], 3);
	assert_memory_equal(all[0].data, v, sizeof(v));
	assert_int_equal(all[1].nbytes, 2);
	assert_memory_equal(all[1].data, f4, 2);
	tpf_host_tensors_release(all, n);
	/* garbage and a missing folder are errors, not crashes */
	FILE *f = fopen(path, "wb");
	fputs("\xff\xff\xff garbage", f);
	fclose(f);
	struct tpf_host_tensor bad;
	assert_int_not_equal(tpf_tensor_read_pb(path, &bad, d), TPF_OK);
	assert_int_not_equal(tpf_tensor_read_dir("/nonexistent-tpf", "input", &all, &n, d), TPF_OK);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
	tpf_diag_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chain_reuse),
		cmocka_unit_test(test_profile_and_replay),
		cmocka_unit_test(test_views),
		cmocka_unit_test(test_split_views),
		cmocka_unit_test(test_transpose_views),
		cmocka_unit_test(test_slice_views),
		cmocka_unit_test(test_invariant_operands),
		cmocka_unit_test(test_fused_norm_input_lifetime),
		cmocka_unit_test(test_input_errors),
		cmocka_unit_test(test_unsupported_and_world),
		cmocka_unit_test(test_folding_and_collectives),
		cmocka_unit_test(test_comm_self_and_hash),
		cmocka_unit_test(test_tensor_pb),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
