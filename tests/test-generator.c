/* SPDX-License-Identifier: MIT */
/* The generator (tpf_generator_*, runtime/generate.c) on the llama KV-cache
 * export of tests/corpus/kv/: greedy tokens of transformers' reference,
 * top-k 1 sampling equal to greedy, EOS stops, the statistics, and the
 * refusals (an empty prompt, an id outside the vocabulary, a prompt after
 * the first step); the model's own next_token (greedy-next-token). */
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
#include "tpf-passes.h"
#include "tpf-runtime.h"

/* transformers' greedy tokens of prompt0 (reference_tokens.json), first 8 */
static const int64_t prompt0[] = {26, 35, 35, 86, 75, 17, 20};
static const int64_t greedy0[] = {65, 109, 109, 54, 62, 13, 96, 23};
static const int64_t prompt1[] = {45, 59, 54, 14};
static const int64_t greedy1[] = {47, 51, 51, 51, 51, 51, 125, 5};

struct fixture {
	struct tpf_diag *d;
	struct tpf_model *m;
	struct tpf_session *s;
	struct tpf_kv_io io;
};

static int setup(void **state)
{
	static struct fixture f;
	const char *root = getenv("TPF_SOURCE_ROOT");
	char path[4096];
	snprintf(path, sizeof(path), "%s/tests/corpus/kv/llama-dynamo-kv-fp32-w1/model.onnx",
		 root ? root : ".");
	f.d = tpf_diag_create();
	assert_int_equal(tpf_model_load_file(path, &(struct tpf_load_options){0}, &f.m, f.d), TPF_OK);
	assert_int_equal(tpf_kv_io_find(f.m->graph, &f.io, f.d), TPF_OK);
	assert_int_equal(tpf_session_create(f.m, &(struct tpf_session_options){0}, &f.s, f.d), TPF_OK);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (!f) /* the set-up failed */
		return 0;
	tpf_session_free(f->s);
	tpf_kv_io_release(&f->io);
	tpf_model_free(f->m);
	tpf_diag_free(f->d);
	return 0;
}

/* Generates from both prompts with o; expects want0/want1 (n tokens each). */
static void expect_tokens(struct fixture *f, const struct tpf_generate_options *o, const int64_t *want0,
			  size_t n0, const int64_t *want1, size_t n1)
{
	struct tpf_generator *g;
	assert_int_equal(tpf_generator_create(f->s, &f->io, o, &g, f->d), TPF_OK);
	assert_int_equal(tpf_generator_add_prompt(g, prompt0, 7, f->d), TPF_OK);
	assert_int_equal(tpf_generator_add_prompt(g, prompt1, 4, f->d), TPF_OK);
	assert_int_equal(tpf_generator_run(g, NULL, NULL, f->d), TPF_OK);
	const int64_t *ids;
	assert_int_equal(tpf_generator_count(g), 2);
	assert_int_equal(tpf_generator_tokens(g, 0, &ids), n0);
	assert_memory_equal(ids, want0, n0 * sizeof(*ids));
	assert_int_equal(tpf_generator_tokens(g, 1, &ids), n1);
	assert_memory_equal(ids, want1, n1 * sizeof(*ids));
	int done = 0;
	assert_int_equal(tpf_generator_step(g, &done, f->d), TPF_OK); /* nothing left to do */
	assert_true(done);
	struct tpf_generate_stats st;
	tpf_generator_stats(g, &st);
	assert_int_equal(st.new_tokens, n0 + n1);
	assert_true(st.steps == (n0 > n1 ? n0 : n1) && st.plans_built >= 1 && st.ttft_ms > 0);
	assert_true(st.step_p50_ms <= st.step_p99_ms && st.decode_ms >= st.step_p99_ms);
	tpf_generator_free(g);
}

static void test_greedy_and_sampling(void **state)
{
	struct fixture *f = *state;
	const int64_t eos[] = {2}, stop[] = {109};
	struct tpf_generate_options o = {.max_new_tokens = 8, .suppress_ids = eos, .n_suppress = 1};
	expect_tokens(f, &o, greedy0, 8, greedy1, 8);
	/* sampling from the most likely token only is greedy, whatever the seed */
	o.temperature = 0.7;
	o.top_k = 1;
	o.seed = 12345;
	expect_tokens(f, &o, greedy0, 8, greedy1, 8);
	/* so is a tiny top-p */
	o.top_k = 0;
	o.top_p = 1e-9;
	expect_tokens(f, &o, greedy0, 8, greedy1, 8);
	/* prompt 0 stops after its first 109 (its second token); prompt 1 goes on */
	o = (struct tpf_generate_options){.max_new_tokens = 8, .suppress_ids = eos, .n_suppress = 1,
					  .eos_ids = stop, .n_eos = 1};
	expect_tokens(f, &o, greedy0, 2, greedy1, 8);
}

static void test_refusals(void **state)
{
	struct fixture *f = *state;
	struct tpf_generator *g;
	const int64_t bad[] = {1, 128};
	assert_int_equal(tpf_generator_create(f->s, &f->io, &(struct tpf_generate_options){.max_new_tokens = 2},
					      &g, f->d), TPF_OK);
	assert_int_equal(tpf_generator_add_prompt(g, prompt0, 0, f->d), TPF_ERR_INVALID);
	assert_int_equal(tpf_generator_add_prompt(g, bad, 2, f->d), TPF_ERR_INVALID);
	expect_mentions(f->d, (const char *const[]){"prompt 0 is empty",
		"prompt 0: token id 128 is outside the vocabulary (0 to 127)", NULL});
	assert_int_equal(tpf_generator_step(g, NULL, f->d), TPF_ERR_INVALID);
	expect_mentions(f->d, (const char *const[]){"no prompt to generate from", NULL});
	tpf_generator_free(g);
	assert_int_equal(tpf_generator_create(f->s, &f->io, &(struct tpf_generate_options){.max_new_tokens = 2},
					      &g, f->d), TPF_OK);
	assert_int_equal(tpf_generator_add_prompt(g, prompt1, 4, f->d), TPF_OK);
	assert_int_equal(tpf_generator_step(g, NULL, f->d), TPF_OK);
	assert_int_equal(tpf_generator_add_prompt(g, prompt1, 4, f->d), TPF_ERR_INVALID);
	expect_mentions(f->d, (const char *const[]){"prompts are added before the first step", NULL});
	tpf_generator_free(g);
	tpf_diag_clear(f->d);
}

/* The model rewritten by greedy-next-token gives the same greedy tokens
 * from its next_token ids, and sampling or suppressed ids are refused. */
static void test_next_token(void **state)
{
	struct fixture *f = *state, g = {.d = f->d};
	const char *root = getenv("TPF_SOURCE_ROOT");
	char path[4096];
	snprintf(path, sizeof(path), "%s/tests/corpus/kv/llama-dynamo-kv-fp32-w1/model.onnx", root ? root : ".");
	assert_int_equal(tpf_model_load_file(path, &(struct tpf_load_options){0}, &g.m, f->d), TPF_OK);
	assert_int_equal(tpf_pipeline_run(g.m, &(struct tpf_pipeline_options){.passes = "greedy-next-token"}, f->d),
			 TPF_OK);
	assert_int_equal(tpf_kv_io_find(g.m->graph, &g.io, f->d), TPF_OK);
	assert_true(g.io.logits < 0 && g.io.next_token >= 0 && g.io.vocab == 128);
	assert_int_equal(tpf_session_create(g.m, &(struct tpf_session_options){0}, &g.s, f->d), TPF_OK);
	expect_tokens(&g, &(struct tpf_generate_options){.max_new_tokens = 8}, greedy0, 8, greedy1, 8);
	struct tpf_generator *gen;
	const int64_t eos[] = {2};
	assert_int_equal(tpf_generator_create(g.s, &g.io, &(struct tpf_generate_options){.max_new_tokens = 2,
					      .temperature = 0.5}, &gen, f->d), TPF_ERR_UNSUPPORTED);
	assert_int_equal(tpf_generator_create(g.s, &g.io, &(struct tpf_generate_options){.max_new_tokens = 2,
					      .suppress_ids = eos, .n_suppress = 1}, &gen, f->d),
			 TPF_ERR_UNSUPPORTED);
	expect_mentions(f->d, (const char *const[]){"gives output 'next_token' (greedy-next-token)", NULL});
	tpf_session_free(g.s);
	tpf_kv_io_release(&g.io);
	tpf_model_free(g.m);
	tpf_diag_clear(f->d);
}

/* Every allocation of creating a generator, adding prompts and the
 * prefill and first decode step (the plans they build) failing in turn: a
 * status, no crash, nothing leaked (the sanitizers' builds). */
static void test_alloc_failures(void **state)
{
	struct fixture *f = *state;
	const struct tpf_generate_options o = {.max_new_tokens = 2, .temperature = 1, .top_k = 3};
	for (uint64_t n = 1;; n++) {
		struct tpf_generator *g = NULL;
		tpf_alloc_fail_after(n);
		enum tpf_status st = tpf_generator_create(f->s, &f->io, &o, &g, f->d);
		for (int k = 0; !st && k < 6; k++) /* the prompt table grows */
			st = tpf_generator_add_prompt(g, prompt0, 7, f->d);
		for (int k = 0; !st && k < 2; k++)
			st = tpf_generator_step(g, NULL, f->d);
		int failed = tpf_alloc_count() >= n; /* the planned failure happened */
		tpf_alloc_fail_after(0);
		tpf_generator_free(g);
		tpf_diag_clear(f->d);
		if (!failed) {
			assert_int_equal(st, TPF_OK);
			break;
		}
		assert_int_not_equal(st, TPF_OK);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_and_sampling),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_next_token),
		cmocka_unit_test(test_alloc_failures),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
