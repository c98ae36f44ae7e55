/* SPDX-License-Identifier: MIT */
/*
 * CPU kernels of the mask, guard and lookup ops that exporters emit
 * (kernels/cpu/indexing.c and the elementwise additions) against values
 * computed by hand: And/Or/Xor, LessOrEqual/GreaterOrEqual (uint64 beyond
 * INT64_MAX too), Mod (both fmod modes, signed zeros and infinities),
 * IsNaN/IsInf, Clip, Floor/Ceil/Log/Softplus, Range (int64, float, empty,
 * negative delta), Flatten, GatherND (batch_dims), ScatterND (every
 * reduction, repeated indices), OneHot (negative and out-of-range
 * indices), Tile, Trilu, CumSum (exclusive, reverse), Size, Conv (grouped
 * 1-D with pads and bias, strided 2-D), Pad (every mode, negative pads,
 * axes); and the errors
 * for bad operands (a message naming the node, never a crash), and the
 * forms no kernel runs (tpf_kernel_supports).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-kernels.h"
#include "test-util.h"

static struct tpf_node *mknode(const char *op, size_t nin)
{
	struct tpf_value *ins[8] = {0};
	struct tpf_node *n = tpf_graph_add_node(kernel_graph, "", op, op, ins, nin, 1, NULL);
	assert_non_null(n);
	assert_int_not_equal(n->op, TPF_OP_UNKNOWN);
	return n;
}

/* A tensor of dtype dt and dims (rank r) holding v (numel values, as doubles). */
static struct tpf_ktensor ten(enum tpf_dtype dt, int r, const int64_t *dims, const double *v)
{
	struct tpf_ktensor t = zero_ktensor(dt, r, dims);
	for (int64_t i = 0; v && i < t.numel; i++)
		tpf_elem_store(dt, t.data, i, v[i], 0);
	return t;
}

static struct tpf_ktensor scalar(enum tpf_dtype dt, double v)
{
	return ten(dt, 0, NULL, &v);
}

static struct tpf_ktensor out(enum tpf_dtype dt, int r, const int64_t *dims)
{
	struct tpf_ktensor t = ten(dt, r, dims, NULL);
	t.host = NULL;
	memset(t.data, 0xab, t.nbytes); /* unwritten elements show */
	return t;
}

static void release(struct tpf_ktensor *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(t[i].data);
		t[i].data = NULL;
	}
}

static enum tpf_status run(struct tpf_node *n, struct tpf_ktensor *in, size_t nin, struct tpf_ktensor *y)
{
	enum tpf_dtype key = in[0].dtype;
	const struct tpf_kernel *any = tpf_kernel_find_any(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN);
	assert_non_null(any);
	if (any->key_input < 0)
		key = y->dtype;
	const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, n->op, TPF_PHASE_MAIN, key);
	assert_non_null(k);
	struct tpf_kernel_call c = {.node = n, .opset = 21, .in = in, .n_in = nin, .out = y, .n_out = 1,
				    .rank = 0, .world = 1, .diag = kernel_diag};
	return k->run(&c);
}

/* y's values equal want exactly (NaN matching NaN, the sign of zero too). */
static void expect(const struct tpf_ktensor *y, const double *want)
{
	for (int64_t i = 0; i < y->numel; i++) {
		double g = tpf_elem_load(y->dtype, y->data, i);
		if (isnan(want[i]) && isnan(g))
			continue;
		if (g != want[i] || signbit(g) != signbit(want[i]))
			fail_msg("element %lld: got %.9g, want %.9g", (long long)i, g, want[i]);
	}
}

/* the last diagnostic names the node and says `what` */
static void expect_error(const char *what)
{
	assert_true(kernel_diag->count > 0);
	const char *msg = kernel_diag->entries[kernel_diag->count - 1].text;
	if (!strstr(msg, "node '") || !strstr(msg, what))
		fail_msg("message '%s' does not name the node or say '%s'", msg, what);
	tpf_diag_clear(kernel_diag);
}

/* ------------------------------------------------------------------ elementwise */

static void test_logic(void **state)
{
	(void)state;
	const char *ops[] = {"And", "Or", "Xor"};
	const double want[3][8] = {{0, 0, 0, 1, 0, 0, 0, 1}, {0, 1, 1, 1, 0, 1, 1, 1}, {0, 1, 1, 0, 0, 1, 1, 0}};
	for (int o = 0; o < 3; o++) {
		struct tpf_node *n = mknode(ops[o], 2);
		int64_t da[] = {2, 4}, db[] = {4};
		struct tpf_ktensor in[2] = {ten(TPF_DTYPE_BOOL, 2, da, (double[]){0, 0, 1, 1, 0, 0, 1, 1}),
					    ten(TPF_DTYPE_BOOL, 1, db, (double[]){0, 1, 0, 1})};
		struct tpf_ktensor y = out(TPF_DTYPE_BOOL, 2, da);
		assert_int_equal(run(n, in, 2, &y), TPF_OK);
		expect(&y, want[o]);
		release(in, 2);
		release(&y, 1);
	}
	/* And of int64 operands is refused with a message */
	struct tpf_node *n = mknode("And", 2);
	int64_t d[] = {2};
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_INT64, 1, d, (double[]){1, 0}), ten(TPF_DTYPE_INT64, 1, d, (double[]){1, 1})};
	struct tpf_ktensor y = out(TPF_DTYPE_BOOL, 1, d);
	const struct tpf_kernel *k = tpf_kernel_find(TPF_BACKEND_CPU, TPF_OP_AND, TPF_PHASE_MAIN, TPF_DTYPE_INT64);
	assert_null(k); /* the planner says so first */
	struct tpf_kernel_call c = {.node = n, .in = in, .n_in = 2, .out = &y, .n_out = 1, .diag = kernel_diag};
	assert_int_equal(tpf_kernel_find_any(TPF_BACKEND_CPU, TPF_OP_AND, TPF_PHASE_MAIN)->run(&c), TPF_ERR_INVALID);
	expect_error("must be bool");
	release(in, 2);
	release(&y, 1);
}

static void test_order(void **state)
{
	(void)state;
	int64_t d[] = {5};
	struct tpf_node *le = mknode("LessOrEqual", 2), *ge = mknode("GreaterOrEqual", 2);
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_INT64, 1, d, (double[]){-3, 0, 2, 7, 9}),
				    ten(TPF_DTYPE_INT64, 1, d, (double[]){-3, 1, 1, 7, -9})};
	struct tpf_ktensor y = out(TPF_DTYPE_BOOL, 1, d);
	assert_int_equal(run(le, in, 2, &y), TPF_OK);
	expect(&y, (double[]){1, 1, 0, 1, 0});
	assert_int_equal(run(ge, in, 2, &y), TPF_OK);
	expect(&y, (double[]){1, 0, 1, 1, 1});
	release(in, 2);
	/* float with NaN: every comparison false */
	struct tpf_ktensor f[2] = {ten(TPF_DTYPE_FLOAT, 1, d, (double[]){NAN, 1, 2, -INFINITY, 0}),
				   ten(TPF_DTYPE_FLOAT, 1, d, (double[]){1, NAN, 2, -INFINITY, -0.0})};
	assert_int_equal(run(le, f, 2, &y), TPF_OK);
	expect(&y, (double[]){0, 0, 1, 1, 1});
	release(f, 2);
	/* uint64 past INT64_MAX compares as unsigned */
	int64_t d2[] = {2};
	struct tpf_ktensor u[2] = {ten(TPF_DTYPE_UINT64, 1, d2, NULL), ten(TPF_DTYPE_UINT64, 1, d2, NULL)};
	((uint64_t *)u[0].data)[0] = UINT64_C(0x8000000000000001);
	((uint64_t *)u[1].data)[0] = 5;
	((uint64_t *)u[0].data)[1] = 5;
	((uint64_t *)u[1].data)[1] = UINT64_MAX;
	struct tpf_ktensor y2 = out(TPF_DTYPE_BOOL, 1, d2);
	assert_int_equal(run(ge, u, 2, &y2), TPF_OK);
	expect(&y2, (double[]){1, 0});
	release(u, 2);
	release(&y2, 1);
	release(&y, 1);
}

static void test_mod(void **state)
{
	(void)state;
	int64_t d[] = {6};
	struct tpf_node *m0 = mknode("Mod", 2), *m1 = mknode("Mod", 2);
	tpf_node_set_attr_int(m1, "fmod", 1);
	/* integers: floored (the divisor's sign) and truncated */
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_INT32, 1, d, (double[]){-4, 7, 5, 4, -7, 8}),
				    ten(TPF_DTYPE_INT32, 1, d, (double[]){2, -3, 8, -2, 3, 5})};
	struct tpf_ktensor y = out(TPF_DTYPE_INT32, 1, d);
	assert_int_equal(run(m0, in, 2, &y), TPF_OK);
	expect(&y, (double[]){0, -2, 5, 0, 2, 3});
	assert_int_equal(run(m1, in, 2, &y), TPF_OK);
	expect(&y, (double[]){0, 1, 5, 0, -1, 3});
	/* a zero divisor gives 0, INT_MIN % -1 too (no trap) */
	tpf_elem_store_int(TPF_DTYPE_INT32, in[1].data, 0, 0);
	assert_int_equal(run(m0, in, 2, &y), TPF_OK);
	assert_int_equal(tpf_elem_load_int(TPF_DTYPE_INT32, y.data, 0), 0);
	release(in, 2);
	release(&y, 1);
	/* floats, fmod = 0: numpy's mod (edge cases of ONNX's test) */
	int64_t e[] = {8};
	struct tpf_ktensor f[2] = {ten(TPF_DTYPE_FLOAT, 1, e, (double[]){0, -0.0, -3, 3, -1, 1, INFINITY, 1}),
				   ten(TPF_DTYPE_FLOAT, 1, e, (double[]){-2, 2, INFINITY, INFINITY, -INFINITY, -INFINITY, 2, 0})};
	struct tpf_ktensor fy = out(TPF_DTYPE_FLOAT, 1, e);
	assert_int_equal(run(m0, f, 2, &fy), TPF_OK);
	expect(&fy, (double[]){-0.0, 0.0, INFINITY, 3, -1, -INFINITY, NAN, NAN});
	/* fmod = 1: C's fmod, the dividend's sign */
	tpf_elem_store(TPF_DTYPE_FLOAT, f[0].data, 2, -7.5, 0);
	tpf_elem_store(TPF_DTYPE_FLOAT, f[1].data, 2, 2, 0);
	assert_int_equal(run(m1, f, 2, &fy), TPF_OK);
	assert_true(tpf_elem_load(TPF_DTYPE_FLOAT, fy.data, 2) == -1.5);
	release(f, 2);
	release(&fy, 1);
}

static void test_unary(void **state)
{
	(void)state;
	int64_t d[] = {6};
	const double x[] = {-1.5, -0.5, 0.5, 2.0, NAN, -INFINITY};
	struct {
		const char *op;
		enum tpf_dtype out;
		double want[6];
	} cases[] = {
		{"Floor", TPF_DTYPE_FLOAT, {-2, -1, 0, 2, NAN, -INFINITY}},
		{"Ceil", TPF_DTYPE_FLOAT, {-1, -0.0, 1, 2, NAN, -INFINITY}},
		{"IsNaN", TPF_DTYPE_BOOL, {0, 0, 0, 0, 1, 0}},
		{"IsInf", TPF_DTYPE_BOOL, {0, 0, 0, 0, 0, 1}},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct tpf_node *n = mknode(cases[k].op, 1);
		struct tpf_ktensor in = ten(TPF_DTYPE_FLOAT, 1, d, x), y = out(cases[k].out, 1, d);
		assert_int_equal(run(n, &in, 1, &y), TPF_OK);
		expect(&y, cases[k].want);
		release(&in, 1);
		release(&y, 1);
	}
	/* IsInf: only the positive infinity */
	struct tpf_node *inf = mknode("IsInf", 1);
	tpf_node_set_attr_int(inf, "detect_negative", 0);
	int64_t d3[] = {3};
	struct tpf_ktensor in = ten(TPF_DTYPE_FLOAT16, 1, d3, (double[]){INFINITY, -INFINITY, 1});
	struct tpf_ktensor y = out(TPF_DTYPE_BOOL, 1, d3);
	assert_int_equal(run(inf, &in, 1, &y), TPF_OK);
	expect(&y, (double[]){1, 0, 0});
	release(&in, 1);
	release(&y, 1);
	/* Log and Softplus in double, rounded once; Softplus does not overflow */
	struct tpf_node *lg = mknode("Log", 1), *sp = mknode("Softplus", 1);
	struct tpf_ktensor l = ten(TPF_DTYPE_DOUBLE, 1, d3, (double[]){1, 0.25, 0});
	struct tpf_ktensor ly = out(TPF_DTYPE_DOUBLE, 1, d3);
	assert_int_equal(run(lg, &l, 1, &ly), TPF_OK);
	expect(&ly, (double[]){0, log(0.25), -INFINITY});
	struct tpf_ktensor s = ten(TPF_DTYPE_DOUBLE, 1, d3, (double[]){0, 1000, -1000});
	assert_int_equal(run(sp, &s, 1, &ly), TPF_OK);
	assert_true(fabs(tpf_elem_load(TPF_DTYPE_DOUBLE, ly.data, 0) - log(2.0)) < 1e-15);
	assert_true(tpf_elem_load(TPF_DTYPE_DOUBLE, ly.data, 1) == 1000);
	assert_true(tpf_elem_load(TPF_DTYPE_DOUBLE, ly.data, 2) >= 0 && tpf_elem_load(TPF_DTYPE_DOUBLE, ly.data, 2) < 1e-300);
	release(&l, 1);
	release(&s, 1);
	release(&ly, 1);
}

static void test_clip(void **state)
{
	(void)state;
	int64_t d[] = {5};
	struct tpf_node *n = mknode("Clip", 3);
	struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 1, d, (double[]){-3, -0.5, 0.25, 9, NAN}),
				    scalar(TPF_DTYPE_FLOAT, -1), scalar(TPF_DTYPE_FLOAT, 2)};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 1, d);
	assert_int_equal(run(n, in, 3, &y), TPF_OK);
	expect(&y, (double[]){-1, -0.5, 0.25, 2, NAN});
	/* min > max: every value becomes max */
	tpf_elem_store(TPF_DTYPE_FLOAT, in[1].data, 0, 5, 0);
	assert_int_equal(run(n, in, 3, &y), TPF_OK);
	expect(&y, (double[]){2, 2, 2, 2, NAN});
	/* no min */
	struct tpf_ktensor omit = {.rank = -1};
	struct tpf_ktensor in2[3] = {in[0], omit, in[2]};
	assert_int_equal(run(n, in2, 3, &y), TPF_OK);
	expect(&y, (double[]){-3, -0.5, 0.25, 2, NAN});
	release(in, 3);
	release(&y, 1);
	/* int8 */
	struct tpf_ktensor ii[3] = {ten(TPF_DTYPE_INT8, 1, d, (double[]){-128, -5, 0, 5, 127}),
				    scalar(TPF_DTYPE_INT8, -4), scalar(TPF_DTYPE_INT8, 100)};
	struct tpf_ktensor iy = out(TPF_DTYPE_INT8, 1, d);
	assert_int_equal(run(n, ii, 3, &iy), TPF_OK);
	expect(&iy, (double[]){-4, -4, 0, 5, 100});
	/* a bound of another dtype is refused */
	struct tpf_ktensor bad[3] = {ii[0], scalar(TPF_DTYPE_FLOAT, 1), ii[2]};
	assert_int_equal(run(n, bad, 3, &iy), TPF_ERR_INVALID);
	expect_error("min must be a scalar");
	release(&bad[1], 1);
	release(ii, 3);
	release(&iy, 1);
}

/* ------------------------------------------------------------------ indexing */

static void test_range(void **state)
{
	(void)state;
	struct tpf_node *n = mknode("Range", 3);
	struct tpf_ktensor in[3] = {scalar(TPF_DTYPE_INT64, 10), scalar(TPF_DTYPE_INT64, 1),
				    scalar(TPF_DTYPE_INT64, -4)};
	assert_int_equal(tpf_range_length(TPF_DTYPE_INT64, in[0].data, in[1].data, in[2].data), 3);
	int64_t d3[] = {3};
	struct tpf_ktensor y = out(TPF_DTYPE_INT64, 1, d3);
	assert_int_equal(run(n, in, 3, &y), TPF_OK);
	expect(&y, (double[]){10, 6, 2});
	release(&y, 1);
	/* an empty range (limit behind start) */
	tpf_elem_store_int(TPF_DTYPE_INT64, in[2].data, 0, 4);
	assert_int_equal(tpf_range_length(TPF_DTYPE_INT64, in[0].data, in[1].data, in[2].data), 0);
	int64_t d0[] = {0};
	struct tpf_ktensor y0 = out(TPF_DTYPE_INT64, 1, d0);
	assert_int_equal(run(n, in, 3, &y0), TPF_OK);
	release(&y0, 1);
	/* the extreme int64 span does not overflow */
	tpf_elem_store_int(TPF_DTYPE_INT64, in[0].data, 0, INT64_MIN);
	tpf_elem_store_int(TPF_DTYPE_INT64, in[1].data, 0, INT64_MAX);
	tpf_elem_store_int(TPF_DTYPE_INT64, in[2].data, 0, INT64_MAX);
	assert_int_equal(tpf_range_length(TPF_DTYPE_INT64, in[0].data, in[1].data, in[2].data), 3);
	/* delta 0 is an error, not a hang */
	tpf_elem_store_int(TPF_DTYPE_INT64, in[2].data, 0, 0);
	assert_int_equal(tpf_range_length(TPF_DTYPE_INT64, in[0].data, in[1].data, in[2].data), -1);
	struct tpf_ktensor y1 = out(TPF_DTYPE_INT64, 1, d3);
	assert_int_equal(run(n, in, 3, &y1), TPF_ERR_INVALID);
	expect_error("delta is zero");
	release(&y1, 1);
	release(in, 3);
	/* float: ceil((5 - 1) / 1.5) = 3 */
	struct tpf_ktensor f[3] = {scalar(TPF_DTYPE_FLOAT16, 1), scalar(TPF_DTYPE_FLOAT16, 5),
				   scalar(TPF_DTYPE_FLOAT16, 1.5)};
	assert_int_equal(tpf_range_length(TPF_DTYPE_FLOAT16, f[0].data, f[1].data, f[2].data), 3);
	struct tpf_ktensor fy = out(TPF_DTYPE_FLOAT16, 1, d3);
	assert_int_equal(run(n, f, 3, &fy), TPF_OK);
	expect(&fy, (double[]){1, 2.5, 4});
	release(f, 3);
	release(&fy, 1);
}

static void test_flatten_copy(void **state)
{
	(void)state;
	struct tpf_node *n = mknode("Flatten", 1);
	int64_t d[] = {2, 3}, o[] = {1, 6};
	struct tpf_ktensor x = ten(TPF_DTYPE_BOOL, 2, d, (double[]){1, 0, 1, 1, 0, 0});
	struct tpf_ktensor y = out(TPF_DTYPE_BOOL, 2, o);
	assert_int_equal(run(n, &x, 1, &y), TPF_OK);
	expect(&y, (double[]){1, 0, 1, 1, 0, 0});
	release(&x, 1);
	release(&y, 1);
}

static void test_gather_nd(void **state)
{
	(void)state;
	/* ONNX's examples: data [2,2,2] */
	int64_t dd[] = {2, 2, 2};
	const double data[] = {0, 1, 2, 3, 4, 5, 6, 7};
	struct tpf_node *n = mknode("GatherND", 2);
	/* indices [[0,1],[1,0]] -> rows [[2,3],[4,5]] */
	int64_t di[] = {2, 2}, dy[] = {2, 2};
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_INT32, 3, dd, data), ten(TPF_DTYPE_INT64, 2, di, (double[]){0, 1, 1, 0})};
	struct tpf_ktensor y = out(TPF_DTYPE_INT32, 2, dy);
	assert_int_equal(run(n, in, 2, &y), TPF_OK);
	expect(&y, (double[]){2, 3, 4, 5});
	release(&y, 1);
	release(&in[1], 1);
	/* batch_dims 1: indices [[1],[0]] -> [[2,3],[4,5]] */
	struct tpf_node *b = mknode("GatherND", 2);
	tpf_node_set_attr_int(b, "batch_dims", 1);
	int64_t bi[] = {2, 1};
	in[1] = ten(TPF_DTYPE_INT64, 2, bi, (double[]){1, 0});
	y = out(TPF_DTYPE_INT32, 2, dy);
	assert_int_equal(run(b, in, 2, &y), TPF_OK);
	expect(&y, (double[]){2, 3, 4, 5});
	release(&y, 1);
	release(&in[1], 1);
	/* element tuples with a negative index: [[0,0,1],[-1,1,-1]] -> [1, 7] */
	int64_t ei[] = {2, 3}, ey[] = {2};
	in[1] = ten(TPF_DTYPE_INT64, 2, ei, (double[]){0, 0, 1, -1, 1, -1});
	y = out(TPF_DTYPE_INT32, 1, ey);
	assert_int_equal(run(n, in, 2, &y), TPF_OK);
	expect(&y, (double[]){1, 7});
	/* an index out of range is an error naming it */
	tpf_elem_store_int(TPF_DTYPE_INT64, in[1].data, 1, 2);
	assert_int_equal(run(n, in, 2, &y), TPF_ERR_INVALID);
	expect_error("index 2 out of range");
	release(&y, 1);
	release(in, 2);
}

static void test_scatter_nd(void **state)
{
	(void)state;
	int64_t dd[] = {4, 2}, di[] = {3, 1}, du[] = {3, 2};
	const double data[] = {1, 2, 3, 4, 5, 6, 7, 8};
	const char *red[] = {"none", "add", "mul", "max", "min"};
	/* rows 1, 3 and 1 again: "none" keeps the last write */
	const double want[5][8] = {
		{1, 2, 50, 60, 5, 6, 30, 40},
		{1, 2, 3 + 10 + 50, 4 + 20 + 60, 5, 6, 7 + 30, 8 + 40},
		{1, 2, 3 * 10 * 50, 4 * 20 * 60, 5, 6, 7 * 30, 8 * 40},
		{1, 2, 50, 60, 5, 6, 30, 40},
		{1, 2, 3, 4, 5, 6, 7, 8},
	};
	for (int m = 0; m < 5; m++) {
		struct tpf_node *n = mknode("ScatterND", 3);
		tpf_node_set_attr_string(n, "reduction", red[m]);
		struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 2, dd, data), ten(TPF_DTYPE_INT64, 2, di, (double[]){1, 3, -3}),
					    ten(TPF_DTYPE_FLOAT, 2, du, (double[]){10, 20, 30, 40, 50, 60})};
		struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 2, dd);
		assert_int_equal(run(n, in, 3, &y), TPF_OK);
		expect(&y, want[m]);
		release(in, 3);
		release(&y, 1);
	}
	struct tpf_node *n = mknode("ScatterND", 3);
	tpf_node_set_attr_string(n, "reduction", "xor");
	struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 2, dd, data), ten(TPF_DTYPE_INT64, 2, di, (double[]){1, 3, 0}),
				    ten(TPF_DTYPE_FLOAT, 2, du, NULL)};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 2, dd);
	assert_int_equal(run(n, in, 3, &y), TPF_ERR_INVALID);
	expect_error("reduction 'xor'");
	release(in, 3);
	release(&y, 1);
}

/* TensorScatter: a cache [2, 1, 4, 2] (batch 2, one head, 4 positions, 2
 * wide), an update of 2 positions written at each sequence's index:
 * linear, circular (wrapping past the end), in place (the output is the
 * cache), and an index the cache cannot hold. */
static void test_tensor_scatter(void **state)
{
	(void)state;
	int64_t dc[] = {2, 1, 4, 2}, du[] = {2, 1, 2, 2}, dw[] = {2};
	double cache[16], up[8];
	for (int i = 0; i < 16; i++)
		cache[i] = i;
	for (int i = 0; i < 8; i++)
		up[i] = 100 + i;
	const double linear[16] = {100, 101, 102, 103, 4, 5, 6, 7, 8, 9, 10, 11, 104, 105, 106, 107};
	const double circular[16] = {102, 103, 2, 3, 4, 5, 100, 101, 8, 9, 104, 105, 106, 107, 14, 15};
	const char *modes[] = {"linear", "circular"};
	const double idx[2][2] = {{0, 2}, {3, 1}};
	const double *want[] = {linear, circular};
	for (int m = 0; m < 2; m++)
		for (int inplace = 0; inplace < 2; inplace++) {
			struct tpf_node *n = mknode("TensorScatter", 3);
			tpf_node_set_attr_string(n, "mode", modes[m]);
			tpf_node_set_attr_int(n, "axis", 2);
			struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 4, dc, cache), ten(TPF_DTYPE_FLOAT, 4, du, up),
						    ten(TPF_DTYPE_INT64, 1, dw, idx[m])};
			struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 4, dc);
			struct tpf_ktensor *dst = &y;
			if (inplace) {
				release(&y, 1);
				y = in[0];
				y.host = NULL;
				dst = &y;
			}
			assert_int_equal(run(n, in, 3, dst), TPF_OK);
			expect(dst, want[m]);
			release(in, 3);
			if (!inplace)
				release(&y, 1);
		}
	struct tpf_node *n = mknode("TensorScatter", 3);
	tpf_node_set_attr_int(n, "axis", 2);
	struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 4, dc, cache), ten(TPF_DTYPE_FLOAT, 4, du, up),
				    ten(TPF_DTYPE_INT64, 1, dw, (double[]){0, 3})};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 4, dc);
	assert_int_equal(run(n, in, 3, &y), TPF_ERR_INVALID);
	expect_error("write index 3 of sequence 1");
	release(in, 3);
	release(&y, 1);
}

/* Attention with nonpad_kv_seqlen: each sequence reads only its first
 * keys; the same as attention over that prefix alone, whatever the keys
 * after it hold. */
static void test_attention_nonpad(void **state)
{
	(void)state;
	const int64_t B = 2, H = 2, L = 6, D = 4, lens[2] = {3, 5};
	int64_t dq[] = {B, H, 1, D}, dk[] = {B, H, L, D}, dl[] = {B};
	double q[16], k[96], v[96];
	for (int i = 0; i < 16; i++)
		q[i] = (i % 7) * 0.25 - 0.75;
	for (int i = 0; i < 96; i++) {
		k[i] = ((i * 5) % 11) * 0.125 - 0.5;
		v[i] = ((i * 3) % 13) * 0.2 - 1.0;
	}
	for (int b = 0; b < 2; b++) /* the keys and values past each prefix: huge */
		for (int h = 0; h < H; h++)
			for (int64_t j = lens[b]; j < L; j++)
				for (int d = 0; d < D; d++) {
					k[((b * H + h) * L + j) * D + d] = 1e4;
					v[((b * H + h) * L + j) * D + d] = -1e4;
				}
	struct tpf_node *n = mknode("Attention", 7);
	struct tpf_ktensor none = {.rank = -1};
	struct tpf_ktensor in[7] = {ten(TPF_DTYPE_FLOAT, 4, dq, q), ten(TPF_DTYPE_FLOAT, 4, dk, k),
				    ten(TPF_DTYPE_FLOAT, 4, dk, v), none, none, none,
				    ten(TPF_DTYPE_INT64, 1, dl, (double[]){3, 5})};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 4, dq);
	assert_int_equal(run(n, in, 7, &y), TPF_OK);
	for (int b = 0; b < 2; b++) {
		int64_t pq[] = {1, H, 1, D}, pk[] = {1, H, lens[b], D};
		double kp[40], vp[40];
		for (int h = 0; h < H; h++)
			for (int64_t j = 0; j < lens[b]; j++)
				for (int d = 0; d < D; d++) {
					kp[(h * lens[b] + j) * D + d] = k[((b * H + h) * L + j) * D + d];
					vp[(h * lens[b] + j) * D + d] = v[((b * H + h) * L + j) * D + d];
				}
		struct tpf_node *m = mknode("Attention", 3);
		struct tpf_ktensor pin[3] = {ten(TPF_DTYPE_FLOAT, 4, pq, q + b * H * D), ten(TPF_DTYPE_FLOAT, 4, pk, kp),
					     ten(TPF_DTYPE_FLOAT, 4, pk, vp)};
		struct tpf_ktensor py = out(TPF_DTYPE_FLOAT, 4, pq);
		assert_int_equal(run(m, pin, 3, &py), TPF_OK);
		double want[8];
		for (int i = 0; i < H * D; i++)
			want[i] = tpf_elem_load(TPF_DTYPE_FLOAT, py.data, i);
		struct tpf_ktensor row = y;
		row.numel = H * D;
		row.data = (char *)y.data + (size_t)(b * H * D) * sizeof(float);
		expect(&row, want);
		release(pin, 3);
		release(&py, 1);
	}
	release(in, 3);
	release(&in[6], 1);
	release(&y, 1);
}

static void test_one_hot(void **state)
{
	(void)state;
	struct tpf_node *n = mknode("OneHot", 3);
	/* indices [1, -1, 5, 0] (5 out of range: all off), depth 3, axis -1 */
	int64_t di[] = {4}, dv[] = {2}, dy[] = {4, 3};
	struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 1, di, (double[]){1, -1, 5, 0}), scalar(TPF_DTYPE_FLOAT, 3),
				    ten(TPF_DTYPE_BFLOAT16, 1, dv, (double[]){-2, 7})};
	struct tpf_ktensor y = out(TPF_DTYPE_BFLOAT16, 2, dy);
	assert_int_equal(run(n, in, 3, &y), TPF_OK);
	expect(&y, (double[]){-2, 7, -2, -2, -2, 7, -2, -2, -2, 7, -2, -2});
	release(&y, 1);
	/* axis 0: the transpose */
	struct tpf_node *a0 = mknode("OneHot", 3);
	tpf_node_set_attr_int(a0, "axis", 0);
	int64_t dt[] = {3, 4};
	y = out(TPF_DTYPE_BFLOAT16, 2, dt);
	assert_int_equal(run(a0, in, 3, &y), TPF_OK);
	expect(&y, (double[]){-2, -2, -2, 7, 7, -2, -2, -2, -2, 7, -2, -2});
	release(&y, 1);
	release(in, 3);
}

static void test_tile_trilu(void **state)
{
	(void)state;
	struct tpf_node *t = mknode("Tile", 2);
	int64_t d[] = {2, 2}, r[] = {2}, dy[] = {4, 4};
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_INT64, 2, d, (double[]){1, 2, 3, 4}), ten(TPF_DTYPE_INT64, 1, r, (double[]){2, 2})};
	struct tpf_ktensor y = out(TPF_DTYPE_INT64, 2, dy);
	assert_int_equal(run(t, in, 2, &y), TPF_OK);
	expect(&y, (double[]){1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4});
	release(&y, 1);
	release(in, 2);
	/* Trilu on [3,4]: upper k=1 and lower k=-1 */
	int64_t dm[] = {3, 4};
	const double m[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
	struct tpf_node *up = mknode("Trilu", 2), *lo = mknode("Trilu", 2);
	tpf_node_set_attr_int(lo, "upper", 0);
	struct tpf_ktensor ti[2] = {ten(TPF_DTYPE_FLOAT, 2, dm, m), scalar(TPF_DTYPE_INT64, 1)};
	y = out(TPF_DTYPE_FLOAT, 2, dm);
	assert_int_equal(run(up, ti, 2, &y), TPF_OK);
	expect(&y, (double[]){0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
	tpf_elem_store_int(TPF_DTYPE_INT64, ti[1].data, 0, -1);
	assert_int_equal(run(lo, ti, 2, &y), TPF_OK);
	expect(&y, (double[]){0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
	/* without k: the main diagonal */
	assert_int_equal(run(up, ti, 1, &y), TPF_OK);
	expect(&y, (double[]){1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
	release(ti, 2);
	release(&y, 1);
}

static void test_cumsum_size(void **state)
{
	(void)state;
	int64_t d[] = {2, 3};
	const double x[] = {1, 2, 3, 4, 5, 6};
	struct {
		int64_t axis;
		int excl, rev;
		double want[6];
	} cases[] = {
		{1, 0, 0, {1, 3, 6, 4, 9, 15}},
		{-1, 1, 0, {0, 1, 3, 0, 4, 9}},
		{1, 0, 1, {6, 5, 3, 15, 11, 6}},
		{0, 1, 1, {4, 5, 6, 0, 0, 0}},
	};
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct tpf_node *n = mknode("CumSum", 2);
		tpf_node_set_attr_int(n, "exclusive", cases[k].excl);
		tpf_node_set_attr_int(n, "reverse", cases[k].rev);
		enum tpf_dtype dt = k % 2 ? TPF_DTYPE_INT32 : TPF_DTYPE_FLOAT;
		struct tpf_ktensor in[2] = {ten(dt, 2, d, x), scalar(TPF_DTYPE_INT32, (double)cases[k].axis)};
		struct tpf_ktensor y = out(dt, 2, d);
		assert_int_equal(run(n, in, 2, &y), TPF_OK);
		expect(&y, cases[k].want);
		release(in, 2);
		release(&y, 1);
	}
	struct tpf_node *n = mknode("CumSum", 2);
	struct tpf_ktensor in[2] = {ten(TPF_DTYPE_FLOAT, 2, d, x), scalar(TPF_DTYPE_INT64, 2)};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 2, d);
	assert_int_equal(run(n, in, 2, &y), TPF_ERR_INVALID);
	expect_error("axis 2 is out of range");
	release(&y, 1);
	struct tpf_node *sz = mknode("Size", 1);
	y = out(TPF_DTYPE_INT64, 0, NULL);
	assert_int_equal(run(sz, in, 1, &y), TPF_OK);
	expect(&y, (double[]){6});
	release(&y, 1);
	release(in, 2);
}

static void test_conv(void **state)
{
	(void)state;
	/* depthwise causal conv1d as hybrid decoders write it: 2 channels,
	 * kernel 3, pads 2 on both sides, group 2, a bias */
	struct tpf_node *n = mknode("Conv", 3);
	tpf_node_set_attr_int(n, "group", 2);
	int64_t pads[] = {2, 2}, ks[] = {3};
	tpf_node_set_attr_ints(n, "pads", pads, 2);
	tpf_node_set_attr_ints(n, "kernel_shape", ks, 1);
	int64_t dx[] = {1, 2, 4}, dw[] = {2, 1, 3}, db[] = {2}, dy[] = {1, 2, 6};
	struct tpf_ktensor in[3] = {ten(TPF_DTYPE_FLOAT, 3, dx, (double[]){1, 2, 3, 4, 10, 20, 30, 40}),
				    ten(TPF_DTYPE_FLOAT, 3, dw, (double[]){1, 0.5, 0.25, -1, 0, 1}),
				    ten(TPF_DTYPE_FLOAT, 1, db, (double[]){0, 100})};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 3, dy);
	assert_int_equal(run(n, in, 3, &y), TPF_OK);
	/* y[c][t] = sum_k w[c][k] * x[c][t - 2 + k] (+ b[c]) */
	expect(&y, (double[]){0.25, 1.0, 2.75, 4.5, 5, 4, 100 + 10, 100 + 20, 100 + 30 - 10, 100 + 40 - 20, 100 - 30,
			      100 - 40});
	release(&y, 1);
	/* 2-D, stride 2, dilation 1, no pads, 2 input channels in one group */
	struct tpf_node *n2 = mknode("Conv", 2);
	int64_t st[] = {2, 2};
	tpf_node_set_attr_ints(n2, "strides", st, 2);
	int64_t dx2[] = {1, 2, 3, 3}, dw2[] = {1, 2, 2, 2}, dy2[] = {1, 1, 1, 1};
	double xv[18], wv[8];
	for (int i = 0; i < 18; i++)
		xv[i] = i + 1;
	for (int i = 0; i < 8; i++)
		wv[i] = i % 2 ? -1 : 1;
	struct tpf_ktensor in2[2] = {ten(TPF_DTYPE_DOUBLE, 4, dx2, xv), ten(TPF_DTYPE_DOUBLE, 4, dw2, wv)};
	y = out(TPF_DTYPE_DOUBLE, 4, dy2);
	assert_int_equal(run(n2, in2, 2, &y), TPF_OK);
	/* channel 0: 1 - 2 + 4 - 5 = -2; channel 1: 10 - 11 + 13 - 14 = -2 */
	expect(&y, (double[]){-4});
	release(&y, 1);
	/* channels that do not match the weight: an error, not a crash */
	y = out(TPF_DTYPE_FLOAT, 3, dy);
	tpf_node_set_attr_int(n, "group", 1);
	assert_int_equal(run(n, in, 3, &y), TPF_ERR_INVALID);
	expect_error("disagree");
	release(&y, 1);
	release(in, 3);
	release(in2, 2);
}

static void test_pad(void **state)
{
	(void)state;
	int64_t dx[] = {2, 3};
	const double x[] = {1, 2, 3, 4, 5, 6};
	const char *modes[] = {"constant", "edge", "reflect", "wrap"};
	/* pads: 0 rows, then 1 column before and 2 after */
	const double want[4][12] = {
		{9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9, 9},
		{1, 1, 2, 3, 3, 3, 4, 4, 5, 6, 6, 6},
		{2, 1, 2, 3, 2, 1, 5, 4, 5, 6, 5, 4},
		{3, 1, 2, 3, 1, 2, 6, 4, 5, 6, 4, 5},
	};
	for (int m = 0; m < 4; m++) {
		struct tpf_node *n = mknode("Pad", 3);
		tpf_node_set_attr_string(n, "mode", modes[m]);
		int64_t dp[] = {4}, dy[] = {2, 6};
		struct tpf_ktensor in[3] = {ten(TPF_DTYPE_INT32, 2, dx, x), ten(TPF_DTYPE_INT64, 1, dp, (double[]){0, 1, 0, 2}),
					    scalar(TPF_DTYPE_INT32, 9)};
		struct tpf_ktensor y = out(TPF_DTYPE_INT32, 2, dy);
		assert_int_equal(run(n, in, 3, &y), TPF_OK);
		expect(&y, want[m]);
		release(in, 3);
		release(&y, 1);
	}
	/* negative pads crop; axes select the padded axes (opset 18) */
	struct tpf_node *n = mknode("Pad", 4);
	int64_t dp[] = {2}, da[] = {1}, dy[] = {2, 1};
	struct tpf_ktensor in[4] = {ten(TPF_DTYPE_FLOAT, 2, dx, x), ten(TPF_DTYPE_INT64, 1, dp, (double[]){-1, -1}),
				    {.rank = -1}, ten(TPF_DTYPE_INT64, 1, da, (double[]){-1})};
	struct tpf_ktensor y = out(TPF_DTYPE_FLOAT, 2, dy);
	assert_int_equal(run(n, in, 4, &y), TPF_OK);
	expect(&y, (double[]){2, 5});
	/* pads that do not give the output's shape */
	tpf_elem_store_int(TPF_DTYPE_INT64, in[1].data, 0, 0);
	assert_int_equal(run(n, in, 4, &y), TPF_ERR_INVALID);
	expect_error("do not agree");
	release(&y, 1);
	release(&in[0], 2);
	release(&in[3], 1);
}

/* ------------------------------------------------------------------ forms */

/* The forms no kernel runs (TPF_KERNEL_FORM rows, kernels/forms.c): the
 * status and message come from the kernels, into the diagnostic given. */
static void test_forms(void **state)
{
	(void)state;
	int64_t d4[] = {1, 1, 2, 2}, d3[] = {1, 2, 2};
	struct tpf_ktensor x = zero_ktensor(TPF_DTYPE_FLOAT, 3, d3), y = zero_ktensor(TPF_DTYPE_FLOAT, 3, d3);
	struct tpf_node *n = mknode("Cast", 1);
	struct tpf_kernel_call c = {.node = n, .opset = 21, .in = &x, .n_in = 1, .out = &y, .n_out = 1,
				    .world = 1, .diag = NULL};

	assert_int_equal(tpf_node_set_attr_int(n, "to", TPF_DTYPE_FLOAT16), TPF_OK);
	assert_int_equal(tpf_kernel_supports(n->op, &c, kernel_diag), TPF_OK);
	assert_int_equal(tpf_node_set_attr_int(n, "to", TPF_DTYPE_STRING), TPF_OK);
	assert_int_equal(tpf_kernel_supports(n->op, &c, kernel_diag), TPF_ERR_UNSUPPORTED);
	expect_error("cast to dtype 8 not supported");
	/* Attention of 3-D operands */
	struct tpf_ktensor qkv[3] = {x, x, x};
	c.node = mknode("Attention", 3);
	c.in = qkv;
	c.n_in = 3;
	assert_int_equal(tpf_kernel_supports(c.node->op, &c, kernel_diag), TPF_ERR_UNSUPPORTED);
	expect_error("only 4-D Q, K, V are supported");
	for (int i = 0; i < 3; i++) {
		qkv[i].rank = 4;
		memcpy(qkv[i].dims, d4, sizeof(d4));
	}
	assert_int_equal(tpf_kernel_supports(c.node->op, &c, kernel_diag), TPF_OK);
	/* an op without a form row, and a broadcast op of too many operands */
	c.node = mknode("Add", 2);
	assert_int_equal(tpf_kernel_supports(c.node->op, &c, kernel_diag), TPF_OK);
	struct tpf_ktensor many[9];
	for (int i = 0; i < 9; i++)
		many[i] = x;
	c.node = mknode("Max", 8);
	c.in = many;
	c.n_in = 9;
	assert_int_equal(tpf_kernel_supports(c.node->op, &c, kernel_diag), TPF_ERR_LIMIT);
	expect_error("more than 8 operands");
	release(&x, 1);
	release(&y, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_logic),       cmocka_unit_test(test_order),
		cmocka_unit_test(test_mod),         cmocka_unit_test(test_unary),
		cmocka_unit_test(test_clip),        cmocka_unit_test(test_range),
		cmocka_unit_test(test_flatten_copy), cmocka_unit_test(test_gather_nd),
		cmocka_unit_test(test_scatter_nd), cmocka_unit_test(test_tensor_scatter), cmocka_unit_test(test_attention_nonpad),  cmocka_unit_test(test_one_hot),
		cmocka_unit_test(test_tile_trilu),  cmocka_unit_test(test_cumsum_size),
		cmocka_unit_test(test_conv),        cmocka_unit_test(test_pad),
		cmocka_unit_test(test_forms),
	};
	return cmocka_run_group_tests(tests, kernel_setup, kernel_teardown);
}
