/* SPDX-License-Identifier: MIT */
/* fuse-sharded-rmsnorm and fuse-sigmoid-gate, the parts that need C: a
 * float evaluation of the fused sharded norm against the unfused graph for
 * two simulated ranks (each rank's graph holds its own gamma shard), the
 * checks of the part form's record (the form fused without a rank; its
 * numerics under MPI are in test-mpi-fusions.c), and allocation failures
 * inside the passes.  Positive cases, operand orders,
 * near misses, counters and idempotence are text tests
 * (tests/passes/fuse-sharded-rmsnorm*.tpf, fuse-sigmoid-gate*.tpf). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "test-util.h"

enum { D_FULL = 8, W2 = 2 };

static const float GAMMA[D_FULL] = {0.5f, 1.5f, -0.25f, 2.0f, 1.0f, 0.75f, -1.25f, 3.0f};
static const float GAMMA_K[4] = {2.0f, -1.0f, 0.5f, 1.25f};

/* ------------------------------------------------------------------ models */

/* Writes "[v0, v1, ...]" (every float printed so that it reads back exactly). */
static void put_floats(FILE *f, const float *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%.9g", i ? ", " : "", v[i]);
	fputc(']', f);
}

/* x_local [T,D/2] -> AllGather -> RMSNorm(gamma[D]) -> rank r's half (a
 * Slice, or output r of a Split) as `y`, for a model of two ranks.  `pre`
 * prefixes names, `first` is the first free value number, `x` the number
 * of the input (a new graph input "x" when < 0); returns the next free
 * number and the number of y in *y. */
static int sharded_norm(FILE *f, const char *pre, int first, int x, const float *gamma, int D,
			int rank, int use_split, float offset, int *y)
{
	int v = first, d = D / 2;

	if (x < 0) {
		x = v++;
		fprintf(f, "  input %%%d: f32[T,%d] \"%sx\"\n", x, d, pre);
	}
	int g = v++;
	fprintf(f, "  init %%%d: f32[%d] \"%sgamma\" = ", g, D, pre);
	put_floats(f, gamma, D);
	fputc('\n', f);
	int ag = v++, norm = v++;
	fprintf(f, "  %%%d = com.microsoft.AllGather(%%%d) {axis=-1, group_size=2} : f32[T,%d]  # %sag\n",
		ag, x, D, pre);
	fprintf(f, "  %%%d = ai.tpfuse.RMSNorm(%%%d, %%%d) {axis=-1, epsilon=1e-06, stash_type=1, "
		"weight_offset=%.1f} : f32[T,%d]  # %snorm\n", norm, ag, g, offset, D, pre);
	if (!use_split) {
		int s = v++, e = v++, a = v++, st = v++;
		fprintf(f, "  init %%%d: i64[1] \"%sstarts\" = [%d]\n", s, pre, rank * d);
		fprintf(f, "  init %%%d: i64[1] \"%sends\" = [%d]\n", e, pre, rank * d + d);
		fprintf(f, "  init %%%d: i64[1] \"%saxes\" = [-1]\n", a, pre);
		fprintf(f, "  init %%%d: i64[1] \"%ssteps\" = [1]\n", st, pre);
		*y = v++;
		fprintf(f, "  %%%d = Slice(%%%d, %%%d, %%%d, %%%d, %%%d) : f32[T,%d]  # %sslice\n", *y, norm,
			s, e, a, st, d, pre);
	} else {
		int p0 = v++, p1 = v++;
		fprintf(f, "  %%%d, %%%d = Split(%%%d) {axis=-1, num_outputs=2} : (f32[T,%d], f32[T,%d])  "
			"# %ssplit\n", p0, p1, norm, d, d, pre);
		*y = rank ? p1 : p0;
	}
	return v;
}

/* One sharded norm of gamma, rank r of 2. */
static struct tpf_model *shard_model(int rank, int use_split, float offset)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int y;

	assert_non_null(f);
	fputs("opset \"\" 23\nopset \"com.microsoft\" 1\nopset \"ai.tpfuse\" 1\ngraph \"\" {\n", f);
	sharded_norm(f, "", 0, -1, GAMMA, D_FULL, rank, use_split, offset, &y);
	fprintf(f, "  output %%%d: f32[T,4] \"y\"\n}\n", y);
	fclose(f);
	struct tpf_model *m = parse_model(text);
	free(text);
	return m;
}

/* `layers` attention layers of rank r: Split h [T,6] into Q [T,4] and K
 * [T,2], a sharded norm of each (Q full dim 8 by Slice, K full dim 4 by
 * Split), the next layer reads Concat(q, k). */
static struct tpf_model *qk_model(int rank, int layers)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	int v = 1, h = 0, ys[8];

	assert_non_null(f);
	assert_true(layers <= 4);
	fputs("opset \"\" 23\nopset \"com.microsoft\" 1\nopset \"ai.tpfuse\" 1\ngraph \"\" {\n"
	      "  input %0: f32[T,6] \"h\"\n", f);
	for (int l = 0; l < layers; l++) {
		char pq[16], pk[16];
		int sizes = v++, q = v++, k = v++;
		fprintf(f, "  init %%%d: i64[2] \"qk_sizes%d\" = [4, 2]\n", sizes, l);
		fprintf(f, "  %%%d, %%%d = Split(%%%d, %%%d) {axis=1} : (f32[T,4], f32[T,2])  # qkv_split%d\n",
			q, k, h, sizes, l);
		snprintf(pq, sizeof(pq), "q%d_", l);
		snprintf(pk, sizeof(pk), "k%d_", l);
		v = sharded_norm(f, pq, v, q, GAMMA, 8, rank, 0, 0.0f, &ys[2 * l]);
		v = sharded_norm(f, pk, v, k, GAMMA_K, 4, rank, 1, 0.0f, &ys[2 * l + 1]);
		if (l + 1 < layers) {
			h = v++;
			fprintf(f, "  %%%d = Concat(%%%d, %%%d) {axis=1} : f32[T,6]  # next%d\n", h, ys[2 * l],
				ys[2 * l + 1], l);
		}
	}
	for (int l = 0; l < layers; l++) {
		fprintf(f, "  output %%%d: f32[T,4] \"yq%d\"\n", ys[2 * l], l);
		fprintf(f, "  output %%%d: f32[T,2] \"yk%d\"\n", ys[2 * l + 1], l);
	}
	fputs("}\n", f);
	fclose(f);
	struct tpf_model *m = parse_model(text);
	free(text);
	return m;
}

static const float *init_data(const struct tpf_value *v, size_t *n)
{
	const struct tpf_tensor *t = tpf_value_constant(v);
	assert_non_null(t);
	assert_int_equal(t->dtype, TPF_DTYPE_FLOAT);
	*n = t->nbytes / sizeof(float);
	return t->data;
}

/* Runs `passes` as rank r of 2 with the verifier after each pass. */
static void run_as_rank(struct tpf_model *m, const char *passes, int rank)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options o = {.passes = passes, .ctx = {.rank = rank, .world_size = W2},
					 .verify_each = 1};
	enum tpf_status s = tpf_pipeline_run(m, &o, d);

	if (s)
		tpf_diag_print(d, stderr);
	assert_int_equal(s, TPF_OK);
	tpf_diag_free(d);
}

/* ------------------------------------------------------ sharded numerics */

enum { NT = 3 };

/* Reference: gather the ranks' parts, RMSNorm over D with the full gamma,
 * keep rank r's columns. */
static void reference_norm(const float *x_full, const float *gamma, int64_t D, int W, int r,
                           float eps, float offset, float *out)
{
	int64_t d = D / W;
	for (int t = 0; t < NT; t++) {
		double ss = 0;
		for (int64_t i = 0; i < D; i++)
			ss += (double)x_full[t * D + i] * x_full[t * D + i];
		double inv = 1.0 / sqrt(ss / (double)D + eps);
		for (int64_t i = 0; i < d; i++) {
			int64_t c = r * d + i;
			out[t * d + i] = (float)(x_full[t * D + c] * inv * (gamma[c] + offset));
		}
	}
}

/* The fused formula for tensor `k` of node n on every rank at once: local
 * sums of squares, summed across ranks (the all-reduce), local normalize
 * with the gamma shard each rank's own optimized graph holds. */
static void fused_norm(struct tpf_node *const *nodes, size_t k, const float *x_full, int W,
                       float *out_all)
{
	const struct tpf_node *n0 = nodes[0];
	size_t nt = n0->n_outputs;
	const struct tpf_attr *fd = tpf_node_attr(n0, "full_dims");
	int64_t D = fd ? fd->ints[k] : tpf_node_attr_int(n0, "full_dim", -1);
	const struct tpf_attr *ea = tpf_node_attr(n0, "epsilons");
	float eps = ea ? ea->floats[k] : tpf_node_attr_float(n0, "epsilon", -1);
	float off = tpf_node_attr_float(n0, "weight_offset", 0);
	int64_t d = D / W;
	double ss[NT] = {0};

	assert_int_equal(tpf_node_attr_int(n0, "world_size", 0), W);
	for (int r = 0; r < W; r++)
		for (int t = 0; t < NT; t++)
			for (int64_t i = 0; i < d; i++) {
				float v = x_full[t * D + r * d + i];
				ss[t] += (double)v * v; /* rank r's local sum, all-reduced */
			}
	for (int r = 0; r < W; r++) {
		size_t gn;
		const float *gs = init_data(nodes[r]->inputs[nt + k], &gn);
		assert_int_equal(gn, (size_t)d);
		for (int t = 0; t < NT; t++) {
			double inv = 1.0 / sqrt(ss[t] / (double)D + eps);
			for (int64_t i = 0; i < d; i++)
				out_all[(r * NT + t) * d + i] =
				    (float)(x_full[t * D + r * d + i] * inv * (gs[i] + off));
		}
	}
}

static void test_sharded_numerics(void **state)
{
	(void)state;
	for (int offset = 0; offset < 2; offset++) {
		struct tpf_model *ms[W2];
		struct tpf_node *nodes[W2];
		float x_full[NT * D_FULL], ref[NT * D_FULL / W2], got[W2 * NT * D_FULL / W2];

		for (int i = 0; i < NT * D_FULL; i++)
			x_full[i] = 0.37f * (float)((i * 7) % 13) - 2.1f;
		for (int r = 0; r < W2; r++) {
			ms[r] = shard_model(r, r, (float)offset);
			run_as_rank(ms[r], "fuse-sharded-rmsnorm", r);
			nodes[r] = find_op(ms[r]->graph, TPF_OP_TPF_SHARDED_RMS_NORM);
			assert_non_null(nodes[r]);
		}
		fused_norm(nodes, 0, x_full, W2, got);
		for (int r = 0; r < W2; r++) {
			reference_norm(x_full, GAMMA, D_FULL, W2, r, 1e-6f, (float)offset, ref);
			for (int i = 0; i < NT * D_FULL / W2; i++)
				assert_float_equal(got[r * NT * D_FULL / W2 + i], ref[i], 1e-5);
		}
		for (int r = 0; r < W2; r++)
			tpf_model_free(ms[r]);
	}

	/* merged Q/K: each tensor of the merged node matches its own reference */
	struct tpf_model *ms[W2];
	struct tpf_node *nodes[W2];
	for (int r = 0; r < W2; r++) {
		ms[r] = qk_model(r, 1);
		run_as_rank(ms[r], "fuse-sharded-rmsnorm", r);
		nodes[r] = find_op(ms[r]->graph, TPF_OP_TPF_SHARDED_RMS_NORM);
		assert_non_null(nodes[r]);
		assert_int_equal(nodes[r]->n_outputs, 2);
	}
	float xq[NT * 8], xk[NT * 4], got[W2 * NT * 4], ref[NT * 4];
	for (int i = 0; i < NT * 8; i++)
		xq[i] = 0.2f * (float)(i % 9) - 0.7f;
	for (int i = 0; i < NT * 4; i++)
		xk[i] = 0.45f * (float)(i % 5) - 1.0f;
	fused_norm(nodes, 0, xq, W2, got);
	for (int r = 0; r < W2; r++) {
		reference_norm(xq, GAMMA, 8, W2, r, 1e-6f, 0, ref);
		for (int i = 0; i < NT * 4; i++)
			assert_float_equal(got[r * NT * 4 + i], ref[i], 1e-5);
	}
	fused_norm(nodes, 1, xk, W2, got);
	for (int r = 0; r < W2; r++) {
		reference_norm(xk, GAMMA_K, 4, W2, r, 1e-6f, 0, ref);
		for (int i = 0; i < NT * 2; i++)
			assert_float_equal(got[r * NT * 2 + i], ref[i], 1e-5);
	}
	for (int r = 0; r < W2; r++)
		tpf_model_free(ms[r]);
}

/* Allocation failures inside `passes` run at (rank, world) on the Q/K
 * model: an error status, never a crash; once past the last allocation,
 * three runs in a row give the full result, which `full` checks. */
static void alloc_sweep(const char *passes, int rank, int world, void (*full)(struct tpf_model *m))
{
	int failed = 0, passed = 0;
	for (uint64_t n = 1; n < 4000 && passed < 3; n++) {
		struct tpf_model *m = qk_model(0, 2);
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_pipeline_options o = {.passes = passes, .ctx = {.rank = rank, .world_size = world}};
		tpf_alloc_fail_after(n);
		enum tpf_status s = tpf_pipeline_run(m, &o, d);
		tpf_alloc_fail_after(0);
		assert_true(s == TPF_OK || s == TPF_ERR_NOMEM || s == TPF_ERR_LIMIT);
		if (s == TPF_OK) {
			passed++;
			full(m);
		} else {
			failed++;
			passed = 0;
		}
		tpf_diag_free(d);
		tpf_model_free(m);
	}
	assert_true(failed > 10);
	assert_int_equal(passed, 3);
}

static void both_sharded(struct tpf_model *m)
{
	assert_int_equal(count_op(m->graph, TPF_OP_TPF_SHARDED_RMS_NORM), 2);
}

/* Allocation failures inside the passes. */
static void test_alloc_failures(void **state)
{
	(void)state;
	alloc_sweep("fuse-sharded-rmsnorm,fuse-sigmoid-gate", 0, 2, both_sharded);
}

/* The part form's record (ShardedRMSNorm with part_starts/part_ends): a
 * well-formed node verifies with the part's width as its output's last dim;
 * each broken one fails naming the node and what is wrong. */
static void test_part_form_record(void **state)
{
	(void)state;
	static const struct {
		const char *attrs, *out, *gamma, *want;
	} cases[] = {
	    {"full_dim=8, part_ends=[6], part_starts=[2], world_size=2", "f32[T,4]", "f32[8]", NULL},
	    {"full_dim=8, part_ends=[6], part_starts=[2], world_size=2", "f32[T,4]", "f32[4]",
	     "is not the full weight [8] of the part form"},
	    {"full_dim=8, part_ends=[9], part_starts=[2], world_size=2", "f32[T,7]", "f32[8]",
	     "part 0 is [2, 9); expected 0 <= start < end <= 8"},
	    {"full_dim=8, part_ends=[2], part_starts=[2], world_size=2", "f32[T,0]", "f32[8]",
	     "part 0 is [2, 2)"},
	    {"full_dim=8, part_ends=[6, 8], part_starts=[2], world_size=2", "f32[T,4]", "f32[8]",
	     "need 1 entries each"},
	    {"part_ends=[6], part_starts=[2], world_size=2", "f32[T,4]", "f32[8]",
	     "need 'full_dim' or 'full_dims'"},
	    {"full_dim=8, part_ends=[6], part_starts=[2], world_size=2", "f32[T,3]", "f32[8]",
	     "has shape [T,3] but its inputs give [T,4]"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[1024];
		snprintf(text, sizeof(text),
			 "ir_version 10\nopset \"\" 23\nopset \"ai.tpfuse\" 1\ngraph \"\" {\n"
			 "  input %%0: f32[T,4] \"x\"\n  input %%1: %s \"gamma\"\n"
			 "  %%2 = ai.tpfuse.ShardedRMSNorm(%%0, %%1) {%s} : %s  # sharded\n"
			 "  output %%2: %s \"y\"\n}\n",
			 cases[i].gamma, cases[i].attrs, cases[i].out, cases[i].out);
		struct tpf_model *m = parse_model(text);
		struct tpf_diag *d = tpf_diag_create();
		enum tpf_status st = tpf_model_verify(m, d);
		if (!cases[i].want) {
			if (st)
				dump_diag(d);
			assert_int_equal(st, TPF_OK);
		} else {
			if (st == TPF_OK || !diag_mentions(d, cases[i].want))
				dump_diag(d);
			assert_int_not_equal(st, TPF_OK);
			assert_true(diag_mentions(d, "node 'sharded'"));
			assert_true(diag_mentions(d, cases[i].want));
		}
		tpf_diag_free(d);
		tpf_model_free(m);
	}
}

static void part_form_fused(struct tpf_model *m)
{
	struct tpf_node *f = find_op(m->graph, TPF_OP_TPF_SHARDED_RMS_NORM);
	assert_non_null(f);
	assert_non_null(tpf_node_attr(f, "part_starts"));
	verify_ok(m);
}

/* Allocation failures in the part form's fusion (no rank known). */
static void test_alloc_failures_part_form(void **state)
{
	(void)state;
	alloc_sweep("fuse-sharded-rmsnorm", -1, 0, part_form_fused);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sharded_numerics),
	    cmocka_unit_test(test_alloc_failures),
	    cmocka_unit_test(test_part_form_record),
	    cmocka_unit_test(test_alloc_failures_part_form),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
