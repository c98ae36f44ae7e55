/* SPDX-License-Identifier: MIT */
/* The KV-cache I/O pairing (tpf_kv_io_find, ir/kv-cache.c): every model of
 * tests/corpus/kv/ pairs its pasts with its presents along axis 2 with 4
 * KV heads of dim 16; hand-written graphs cover the other spelling, the
 * axis found from symbolic dims, and each refusal with its message. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

static void test_corpus(void **state)
{
	(void)state;
	const char *root = getenv("TPF_SOURCE_ROOT");
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/tests/corpus/kv", root ? root : ".");
	DIR *dp = opendir(dir);
	assert_non_null(dp);
	size_t seen = 0;
	for (struct dirent *e; (e = readdir(dp));) {
		if (e->d_name[0] == '.')
			continue;
		char path[8192];
		snprintf(path, sizeof(path), "%s/%s/model.onnx", dir, e->d_name);
		struct tpf_diag *d = tpf_diag_create();
		struct tpf_model *m = NULL;
		struct tpf_kv_io io;
		assert_int_equal(tpf_model_load_file(path, &(struct tpf_load_options){0}, &m, d), TPF_OK);
		enum tpf_status st = tpf_kv_io_find(m->graph, &io, d);
		if (st)
			tpf_diag_print(d, stderr);
		assert_int_equal(st, TPF_OK);
		assert_int_equal(io.input_ids, 0);
		assert_int_equal(io.attention_mask, 1);
		assert_int_equal(io.position_ids, 2);
		assert_int_equal(io.logits, 0);
		assert_int_equal(io.vocab, 128);
		assert_int_equal(io.n_pairs, 4);
		for (size_t i = 0; i < io.n_pairs; i++) {
			const struct tpf_kv_pair *p = &io.pairs[i];
			char want[64];
			snprintf(want, sizeof(want), "present.%zu.%s", i / 2, i % 2 ? "value" : "key");
			assert_string_equal(p->present->name, want);
			assert_int_equal(p->input, i + 3);
			assert_int_equal(p->output, i + 1);
			assert_int_equal(p->axis, 2);
			assert_int_equal(p->kv_heads, 4);
			assert_int_equal(p->head_dim, 16);
		}
		tpf_kv_io_release(&io);
		tpf_model_free(m);
		tpf_diag_free(d);
		seen++;
	}
	closedir(dp);
	assert_true(seen >= 20);
}

/* A small graph of the convention: PAST is the past input's declaration,
 * PRESENT the present's producer line and OUTPUT its output line. */
static char *kv_text(const char *inputs, const char *past, const char *present, const char *output)
{
	static char buf[4096];
	snprintf(buf, sizeof(buf),
		 "ir_version 10\n"
		 "opset \"\" 18\n"
		 "graph \"g\" {\n"
		 "%s"
		 "  input %%2: %s\n"
		 "  init %%3: i64[1] \"axes\" = [2]\n"
		 "  %%4 = Cast(%%0) {to=1} : f32[batch,sequence]\n"
		 "  %%5 = Unsqueeze(%%4, %%3) : f32[batch,sequence,1]\n"
		 "  %s\n"
		 "  output %%5: f32[batch,sequence,1] \"logits\"\n"
		 "  output %s\n"
		 "}\n",
		 inputs, past, present, output);
	return buf;
}

static const char ids_mask[] = "  input %0: i64[batch,sequence] \"input_ids\"\n"
			       "  input %1: i64[batch,total] \"attention_mask\"\n";

/* Finds the pairing of text: the status, and d's messages. */
static enum tpf_status find(const char *text, struct tpf_kv_io *io, struct tpf_diag *d)
{
	struct tpf_model *m = parse_model(text);
	enum tpf_status st = tpf_kv_io_find(m->graph, io, d);
	tpf_model_free(m);
	return st;
}

static void expect_refused(const char *text, const char *message)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_kv_io io;
	assert_int_equal(find(text, &io, d), TPF_ERR_INVALID);
	assert_null(io.pairs);
	expect_mentions(d, (const char *const[]){message, NULL});
	tpf_diag_free(d);
}

static void test_hand_written(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_kv_io io;
	/* the other spelling, Concat on the last axis given as -1 */
	assert_int_equal(find(kv_text(ids_mask, "f32[batch,4,16,past] \"past_key.0\"",
				      "%6 = Concat(%2, %2) {axis=-1} : f32[batch,4,16,total]",
				      "%6: f32[batch,4,16,total] \"present_key.0\""), &io, d), TPF_OK);
	assert_int_equal(io.n_pairs, 1);
	assert_int_equal(io.position_ids, -1);
	assert_int_equal(io.vocab, 1);
	assert_int_equal(io.pairs[0].axis, 3);
	assert_int_equal(io.pairs[0].kv_heads, 4);
	assert_int_equal(io.pairs[0].head_dim, 16);
	tpf_kv_io_release(&io);
	/* no Concat: the axis where the past's symbolic dim differs; heads symbolic */
	assert_int_equal(find(kv_text(ids_mask, "f32[batch,heads,past,16] \"past_value.3\"",
				      "%6 = Relu(%2) : f32[batch,heads,total,16]",
				      "%6: f32[batch,heads,total,16] \"present_value.3\""), &io, d), TPF_OK);
	assert_int_equal(io.pairs[0].axis, 2);
	assert_int_equal(io.pairs[0].kv_heads, -1);
	assert_int_equal(io.pairs[0].head_dim, 16);
	tpf_kv_io_release(&io);
	tpf_diag_free(d);
}

static void test_refusals(void **state)
{
	(void)state;
	const char *past = "f32[batch,4,past,16] \"past_key_values.1.value\"";
	const char *concat = "%6 = Concat(%2, %2) {axis=2} : f32[batch,4,total,16]";
	expect_refused(kv_text(ids_mask, past, concat, "%6: f32[batch,4,total,16] \"present.1.key\""),
		       "input 'past_key_values.1.value' has no present output");
	expect_refused(kv_text(ids_mask, past, "%6 = Cast(%2) {to=10} : f16[batch,4,total,16]",
			       "%6: f16[batch,4,total,16] \"present.1.value\""),
		       "input 'past_key_values.1.value' (f32) and output 'present.1.value' (f16) differ in dtype");
	expect_refused(kv_text(ids_mask, "f32[batch,past,16] \"past_key_values.1.value\"",
			       "%6 = Concat(%2, %2) {axis=1} : f32[batch,total,16]",
			       "%6: f32[batch,total,16] \"present.1.value\""),
		       "must be tensors of rank 4");
	expect_refused(kv_text(ids_mask, "f32[batch,heads,past,16] \"past_key_values.1.value\"",
			       "%6 = Relu(%2) : f32[batch,h2,total,16]",
			       "%6: f32[batch,h2,total,16] \"present.1.value\""),
		       "input 'past_key_values.1.value': cannot tell along which axis");
	expect_refused(kv_text("  input %0: i64[batch,sequence] \"input_ids\"\n"
			       "  input %1: i64[batch,total] \"token_type_ids\"\n",
			       past, concat, "%6: f32[batch,4,total,16] \"present.1.value\""),
		       "input 'token_type_ids' is not a KV-cache model input");
	expect_refused(kv_text("  input %0: i64[batch,sequence] \"input_ids\"\n"
			       "  input %1: i64[batch,total] \"position_ids\"\n",
			       past, concat, "%6: f32[batch,4,total,16] \"present.1.value\""),
		       "the model has no input 'attention_mask'");
	expect_refused(kv_text("  input %0: i64[batch,sequence] \"input_ids\"\n"
			       "  input %1: i32[batch,total] \"attention_mask\"\n",
			       past, concat, "%6: f32[batch,4,total,16] \"present.1.value\""),
		       "input 'attention_mask' must be int64 of rank 2");
	expect_refused(kv_text(ids_mask, "i64[batch,sequence] \"position_ids\"",
			       "%6 = Relu(%4) : f32[batch,sequence]", "%6: f32[batch,sequence] \"out\""),
		       "the model has no past key/value inputs");
	/* the logits are looked for after the pasts */
	char *text = kv_text(ids_mask, past, concat, "%6: f32[batch,4,total,16] \"present.1.value\"");
	char *at = strstr(text, "\"logits\"");
	memcpy(at, "\"logitz\"", 8);
	expect_refused(text, "the model has no output 'logits'");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_corpus),
		cmocka_unit_test(test_hand_written),
		cmocka_unit_test(test_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
