/* SPDX-License-Identifier: MIT */
/* coalesce-alltoall: the copy tables computed at compile time move every
 * element where the separate AllToAll calls would (two simulated ranks).
 * Grouping, near misses, acyclicity and idempotence are text tests
 * (tests/passes/coalesce-alltoall.tpf). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

/* Three independent AllToAll calls of float32, world size 2. */
static const char three_text[] =
	"opset \"\" 23\n"
	"opset \"com.microsoft\" 1\n"
	"metadata \"tp_world_size\" \"2\"\n"
	"graph \"\" {\n"
	"  input %0: f32[4,3] \"x0\"\n"
	"  input %1: f32[6] \"x1\"\n"
	"  input %2: f32[2,2,2] \"x2\"\n"
	"  %3 = com.microsoft.AllToAll(%0) : f32[4,3]  # a0\n"
	"  %4 = com.microsoft.AllToAll(%1) : f32[6]  # a1\n"
	"  %5 = com.microsoft.AllToAll(%2) : f32[2,2,2]  # a2\n"
	"  output %3: f32[4,3] \"y0\"\n"
	"  output %4: f32[6] \"y1\"\n"
	"  output %5: f32[2,2,2] \"y2\"\n"
	"}\n";

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

static void test_copy_tables(void **state)
{
	(void)state;
	const int W = 2;
	struct tpf_model *m = parse_model(three_text);
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options o = {.passes = "coalesce-alltoall", .verify_each = 1};

	o.ctx.rank = o.ctx.world_size = -1;
	assert_int_equal(tpf_pipeline_run(m, &o, d), TPF_OK);
	tpf_diag_free(d);
	const struct tpf_node *pack = find_op(g, TPF_OP_TPF_PACK);
	const struct tpf_node *unpack = find_op(g, TPF_OP_TPF_UNPACK);
	assert_non_null(pack);
	assert_non_null(unpack);
	assert_int_equal(pack->n_inputs, 3);
	assert_int_equal(unpack->n_outputs, 3);

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
	tpf_model_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
