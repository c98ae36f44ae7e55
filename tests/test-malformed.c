/* SPDX-License-Identifier: MIT */
/*
 * Malformed input: every broken model gives a non-OK status and an error
 * naming the thing that is wrong, never a crash; `tpfuse check` exits
 * non-zero with the same message on stderr.
 *
 * Models are written byte by byte with tests/pb-writer.c, so the test does not
 * depend on the importer's own protobuf bindings.
 *
 * Usage: test-malformed [PATH-TO-TPFUSE]   (default: $TPFUSE; CLI checks are
 * skipped when neither is given)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pb-writer.h"
#include "tpf-ir.h"

enum { T_FLOAT = 1, T_INT64 = 7 };

static char tmp_root[1024];
static const struct tpf_load_options no_opt;
static const char *tpfuse_path;

/* ------------------------------------------------------------------ helpers */

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	if (n)
		assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return strdup("");
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
	if (s && n > 0 && fread(s, 1, (size_t)n, f) != (size_t)n)
		s[0] = 0;
	fclose(f);
	return s;
}

/* True when `text` contains one of the '|'-separated alternatives, ignoring case. */
static int text_has_any(const char *text, const char *alts)
{
	char buf[256];
	const char *p = alts;
	while (*p) {
		const char *bar = strchr(p, '|');
		size_t n = bar ? (size_t)(bar - p) : strlen(p);
		if (n && n < sizeof(buf)) {
			memcpy(buf, p, n);
			buf[n] = 0;
			if (strcasestr(text, buf))
				return 1;
		}
		p += n;
		if (*p == '|')
			p++;
	}
	return 0;
}

static char *diag_text(const struct tpf_diag *d)
{
	size_t n = 1;
	for (size_t i = 0; i < d->count; i++)
		n += strlen(d->entries[i].text) + 1;
	char *s = calloc(1, n);
	assert_non_null(s);
	for (size_t i = 0; i < d->count; i++) {
		strcat(s, d->entries[i].text);
		strcat(s, "\n");
	}
	return s;
}

/* Graph pieces (GraphProto fields: node 1, name 2, initializer 5, input 11, output 12). */
static void g_input(struct pbw *g, const char *name, int dtype, const int64_t *dims, int rank)
{
	struct pbw v;
	pbw_init(&v);
	onnx_value_info(&v, name, dtype, dims, rank);
	pbw_message(g, 11, &v);
	pbw_free(&v);
}

static void g_output(struct pbw *g, const char *name, int dtype, const int64_t *dims, int rank)
{
	struct pbw v;
	pbw_init(&v);
	onnx_value_info(&v, name, dtype, dims, rank);
	pbw_message(g, 12, &v);
	pbw_free(&v);
}

static void g_node(struct pbw *g, const char *op, const char *name, const char *const *ins,
		   int n_ins, const char *const *outs, int n_outs)
{
	struct pbw n;
	pbw_init(&n);
	onnx_node(&n, "", op, name, ins, n_ins, outs, n_outs);
	pbw_message(g, 1, &n);
	pbw_free(&n);
}

static void g_init_raw(struct pbw *g, const char *name, int dtype, const int64_t *dims, int rank,
		       const void *raw, size_t len)
{
	struct pbw t;
	pbw_init(&t);
	onnx_tensor_raw(&t, name, dtype, dims, rank, raw, len);
	pbw_message(g, 5, &t);
	pbw_free(&t);
}

static void g_init_ext(struct pbw *g, const char *name, const int64_t *dims, int rank,
		       const char *location, int64_t offset, int64_t length)
{
	struct pbw t;
	pbw_init(&t);
	onnx_tensor_external(&t, name, T_FLOAT, dims, rank, location, offset, length);
	pbw_message(g, 5, &t);
	pbw_free(&t);
}

static void finish_model(struct pbw *g, struct pbw *out)
{
	pbw_string(g, 2, "malformed_test");
	pbw_init(out);
	onnx_model(out, g, 11, 23);
	pbw_free(g);
	assert_false(out->oom);
}

static const float w_values[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

/* The valid base model: z = Relu(MatMul(x[2,4], W[4,3])). */
static void build_valid(struct pbw *out)
{
	struct pbw g;
	const int64_t xd[2] = {2, 4}, wd[2] = {4, 3}, zd[2] = {2, 3};
	pbw_init(&g);
	g_node(&g, "MatMul", "mm", (const char *[]){"x", "W"}, 2, (const char *[]){"y"}, 1);
	g_node(&g, "Relu", "relu", (const char *[]){"y"}, 1, (const char *[]){"z"}, 1);
	g_init_raw(&g, "W", T_FLOAT, wd, 2, w_values, sizeof(w_values));
	g_input(&g, "x", T_FLOAT, xd, 2);
	g_output(&g, "z", T_FLOAT, zd, 2);
	finish_model(&g, out);
}

/* ------------------------------------------------------------------ cases */

struct bad_case {
	const char *file;      /* written under tmp_root/cases/ (external ones under ext/) */
	void (*build)(struct pbw *out);
	const char *expect;    /* '|'-separated substrings, one must appear */
	const char *expect2;   /* optional second requirement */
	int external;          /* written next to data.bin in ext/ */
};

static void build_empty(struct pbw *out)
{
	pbw_init(out);
}

static void build_truncated(struct pbw *out)
{
	build_valid(out);
	/* The graph is the last field: cutting the tail leaves it incomplete. */
	out->len -= 7;
}

static void build_random(struct pbw *out)
{
	uint32_t s = 12345;
	pbw_init(out);
	for (int i = 0; i < 2048; i++) {
		s = s * 1103515245u + 12345u;
		uint8_t b = (uint8_t)(s >> 16);
		pbw_raw(out, &b, 1);
	}
}

static void build_cycle(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_node(&g, "Add", "cyc_first", (const char *[]){"x", "c_out"}, 2, (const char *[]){"a_out"},
	       1);
	g_node(&g, "Relu", "cyc_second", (const char *[]){"a_out"}, 1, (const char *[]){"c_out"}, 1);
	g_input(&g, "x", T_FLOAT, d, 1);
	g_output(&g, "c_out", T_FLOAT, d, 1);
	finish_model(&g, out);
}

static void build_undefined(struct pbw *out)
{
	struct pbw g;
	const int64_t d[2] = {2, 4};
	pbw_init(&g);
	g_node(&g, "MatMul", "mm", (const char *[]){"x", "ghost_weight"}, 2, (const char *[]){"y"},
	       1);
	g_input(&g, "x", T_FLOAT, d, 2);
	g_output(&g, "y", T_FLOAT, NULL, -1);
	finish_model(&g, out);
}

static void build_duplicate(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_node(&g, "Relu", "first", (const char *[]){"x"}, 1, (const char *[]){"dup_value"}, 1);
	g_node(&g, "Neg", "second", (const char *[]){"x"}, 1, (const char *[]){"dup_value"}, 1);
	g_input(&g, "x", T_FLOAT, d, 1);
	g_output(&g, "dup_value", T_FLOAT, d, 1);
	finish_model(&g, out);
}

static void build_input_clash(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_node(&g, "Relu", "redefines", (const char *[]){"clash_x"}, 1, (const char *[]){"clash_x"},
	       1);
	g_input(&g, "clash_x", T_FLOAT, d, 1);
	g_output(&g, "clash_x", T_FLOAT, d, 1);
	finish_model(&g, out);
}

/* A graph that uses initializer `name` (already added to g) through Relu. */
static void use_init(struct pbw *g, const char *name)
{
	g_node(g, "Relu", "use", (const char *[]){name}, 1, (const char *[]){"out"}, 1);
	g_output(g, "out", T_FLOAT, NULL, -1);
}

static void build_negative_dim(struct pbw *out)
{
	struct pbw g;
	const int64_t d[2] = {-3, 4};
	pbw_init(&g);
	g_init_raw(&g, "neg_w", T_FLOAT, d, 2, w_values, sizeof(w_values));
	use_init(&g, "neg_w");
	finish_model(&g, out);
}

static void build_overflow_dim(struct pbw *out)
{
	struct pbw g;
	const int64_t d[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 16};
	pbw_init(&g);
	g_init_raw(&g, "huge_w", T_FLOAT, d, 3, w_values, sizeof(w_values));
	use_init(&g, "huge_w");
	finish_model(&g, out);
}

static void build_overflow_bytes(struct pbw *out)
{
	/* 2^62 elements of 4 bytes: the element count fits int64, the byte size does not. */
	struct pbw g;
	const int64_t d[2] = {INT64_C(1) << 31, INT64_C(1) << 31};
	pbw_init(&g);
	g_init_raw(&g, "wide_w", T_FLOAT, d, 2, w_values, sizeof(w_values));
	use_init(&g, "wide_w");
	finish_model(&g, out);
}

static void build_short_raw(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_raw(&g, "short_w", T_FLOAT, d, 1, w_values, 12); /* 3 floats for 4 */
	use_init(&g, "short_w");
	finish_model(&g, out);
}

static void build_bad_dtype(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_raw(&g, "bad_type_w", 99, d, 1, w_values, 16);
	use_init(&g, "bad_type_w");
	finish_model(&g, out);
}

static void build_arity(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_node(&g, "Add", "lonely_add", (const char *[]){"x"}, 1, (const char *[]){"y"}, 1);
	g_input(&g, "x", T_FLOAT, d, 1);
	g_output(&g, "y", T_FLOAT, d, 1);
	finish_model(&g, out);
}

static char outside_abs[1100];

static void build_ext_absolute(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_abs", d, 1, outside_abs, 0, 16);
	use_init(&g, "ext_abs");
	finish_model(&g, out);
}

static void build_ext_dotdot(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_up", d, 1, "../outside.bin", 0, 16);
	use_init(&g, "ext_up");
	finish_model(&g, out);
}

static void build_ext_dotdot_inner(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_up_inner", d, 1, "sub/../../outside.bin", 0, 16);
	use_init(&g, "ext_up_inner");
	finish_model(&g, out);
}

static void build_ext_missing(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_missing", d, 1, "nothere.bin", 0, 16);
	use_init(&g, "ext_missing");
	finish_model(&g, out);
}

static void build_ext_range(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_range", d, 1, "data.bin", 48, 16); /* data.bin holds 48 bytes */
	use_init(&g, "ext_range");
	finish_model(&g, out);
}

static void build_ext_wrong_length(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_len", d, 1, "data.bin", 0, 12); /* 16 bytes needed */
	use_init(&g, "ext_len");
	finish_model(&g, out);
}

static void build_ext_valid(struct pbw *out)
{
	struct pbw g;
	const int64_t d[1] = {4};
	pbw_init(&g);
	g_init_ext(&g, "ext_ok", d, 1, "data.bin", 16, 16);
	use_init(&g, "ext_ok");
	finish_model(&g, out);
}

static const struct bad_case cases[] = {
	{"empty.onnx", build_empty, "empty|graph|parse|protobuf|truncat|empty.onnx", NULL, 0},
	{"truncated.onnx", build_truncated,
	 "truncat|parse|protobuf|malformed|invalid|truncated.onnx", NULL, 0},
	{"random.onnx", build_random, "parse|protobuf|malformed|invalid|random.onnx", NULL, 0},
	{"cycle.onnx", build_cycle, "cycle", "cyc_first|cyc_second", 0},
	{"undefined.onnx", build_undefined, "ghost_weight", NULL, 0},
	{"duplicate.onnx", build_duplicate, "dup_value", NULL, 0},
	{"input-clash.onnx", build_input_clash, "clash_x", NULL, 0},
	{"negative-dim.onnx", build_negative_dim, "neg_w", NULL, 0},
	{"overflow-dim.onnx", build_overflow_dim, "huge_w", NULL, 0},
	{"overflow-bytes.onnx", build_overflow_bytes, "wide_w", NULL, 0},
	{"short-raw.onnx", build_short_raw, "short_w", NULL, 0},
	{"bad-dtype.onnx", build_bad_dtype, "bad_type_w", NULL, 0},
	{"arity.onnx", build_arity, "lonely_add", NULL, 0},
	{"ext-absolute.onnx", build_ext_absolute, "ext_abs", NULL, 1},
	{"ext-dotdot.onnx", build_ext_dotdot, "ext_up|../outside.bin", NULL, 1},
	{"ext-dotdot-inner.onnx", build_ext_dotdot_inner, "ext_up_inner|sub/../../outside.bin",
	 NULL, 1},
	{"ext-missing.onnx", build_ext_missing, "ext_missing|nothere.bin", NULL, 1},
	{"ext-range.onnx", build_ext_range, "ext_range", NULL, 1},
	{"ext-wrong-length.onnx", build_ext_wrong_length, "ext_len", NULL, 1},
};

static void case_path(const struct bad_case *c, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s/%s", tmp_root, c->external ? "ext" : "cases", c->file);
}

static void write_case(const struct bad_case *c, char *path, size_t size)
{
	struct pbw bytes;
	c->build(&bytes);
	assert_false(bytes.oom);
	case_path(c, path, size);
	write_file(path, bytes.data, bytes.len);
	pbw_free(&bytes);
}

/* Loads and verifies; returns the first non-OK status (or TPF_OK). */
static enum tpf_status load_and_verify(const char *path, struct tpf_diag *d)
{
	struct tpf_model *m = NULL;
	struct tpf_load_options opt = {0};
	enum tpf_status st = tpf_model_load_file(path, &opt, &m, d);
	if (st == TPF_OK) {
		assert_non_null(m);
		st = tpf_model_verify(m, d);
	}
	tpf_model_free(m);
	return st;
}

/* Runs `tpfuse check PATH`; returns the wait status, stderr text in *err. */
static int run_check(const char *path, char **err)
{
	char errpath[PATH_MAX];
	snprintf(errpath, sizeof(errpath), "%s/check-stderr.txt", tmp_root);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int nul = open("/dev/null", O_RDWR);
		if (fd < 0 || nul < 0)
			_exit(126);
		dup2(fd, 2);
		dup2(nul, 1);
		dup2(nul, 0);
		alarm(60); /* a hang becomes SIGALRM: reported as a failure */
		execl(tpfuse_path, tpfuse_path, "check", path, (char *)NULL);
		_exit(127);
	}
	int ws = 0;
	assert_int_equal(waitpid(pid, &ws, 0), pid);
	*err = read_text(errpath);
	return ws;
}

static void test_bad_case(void **state)
{
	const struct bad_case *c = *state;
	char path[PATH_MAX];
	write_case(c, path, sizeof(path));

	struct tpf_diag *d = tpf_diag_create();
	assert_non_null(d);
	enum tpf_status st = load_and_verify(path, d);
	char *text = diag_text(d);
	print_message("%s: status %s\n%s", c->file, tpf_status_name(st), text);
	assert_int_not_equal(st, TPF_OK);
	assert_int_not_equal(st, TPF_ERR_NOMEM); /* bad sizes are refused, not attempted */
	assert_true(d->error_count >= 1);
	if (!text_has_any(text, c->expect))
		fail_msg("%s: no message mentions any of '%s'", c->file, c->expect);
	if (c->expect2 && !text_has_any(text, c->expect2))
		fail_msg("%s: no message mentions any of '%s'", c->file, c->expect2);
	free(text);
	tpf_diag_free(d);

	if (!tpfuse_path)
		return;
	char *err = NULL;
	int ws = run_check(path, &err);
	print_message("tpfuse check %s: %s%d\n%s", c->file,
		      WIFEXITED(ws) ? "exit " : "signal ",
		      WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), err);
	assert_true(WIFEXITED(ws));
	/* docs/cli.md: 1 model or verification error, 3 I/O error, 4 unsupported */
	int want = st == TPF_ERR_IO ? 3 : st == TPF_ERR_UNSUPPORTED ? 4 : 1;
	if (WEXITSTATUS(ws) != want)
		fail_msg("tpfuse check %s: exit %d, expected %d for status %s", c->file,
			 WEXITSTATUS(ws), want, tpf_status_name(st));
	if (!text_has_any(err, c->expect))
		fail_msg("tpfuse check %s: stderr mentions none of '%s'", c->file, c->expect);
	free(err);
}

/* ------------------------------------------------------------------ positive controls */

static void test_valid_model(void **state)
{
	struct pbw bytes;
	char path[PATH_MAX];
	build_valid(&bytes);
	snprintf(path, sizeof(path), "%s/cases/valid.onnx", tmp_root);
	write_file(path, bytes.data, bytes.len);

	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	assert_int_equal(tpf_model_load_memory(bytes.data, bytes.len, NULL, &no_opt, &m, d), TPF_OK);
	assert_non_null(m);
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	assert_int_equal(d->error_count, 0);
	assert_int_equal(m->graph->n_nodes, 2);
	assert_int_equal(m->graph->n_inputs, 1);
	assert_int_equal(m->graph->n_outputs, 1);
	assert_int_equal(tpf_model_opset(m, ""), 23);
	assert_string_equal(m->graph->first->op_type, "MatMul");
	assert_int_equal(m->graph->first->op, TPF_OP_MATMUL);

	struct tpf_value *w = tpf_graph_find_value(m->graph, "W");
	assert_non_null(w);
	assert_non_null(w->init);
	assert_int_equal(w->init->dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(w->init->rank, 2);
	assert_int_equal(w->init->nbytes, sizeof(w_values));
	assert_memory_equal(w->init->data, w_values, sizeof(w_values));
	struct tpf_value *z = m->graph->outputs[0];
	assert_string_equal(z->name, "z");
	assert_non_null(z->producer);
	assert_string_equal(z->producer->name, "relu");

	/* Export to memory and load again: the same graph. */
	void *buf = NULL;
	size_t size = 0;
	assert_int_equal(tpf_model_save_memory(m, &buf, &size, d), TPF_OK);
	assert_non_null(buf);
	struct tpf_model *m2 = NULL;
	assert_int_equal(tpf_model_load_memory(buf, size, NULL, &no_opt, &m2, d), TPF_OK);
	assert_int_equal(m2->graph->n_nodes, 2);
	struct tpf_value *w2 = tpf_graph_find_value(m2->graph, "W");
	assert_non_null(w2);
	assert_non_null(w2->init);
	assert_memory_equal(w2->init->data, w_values, sizeof(w_values));
	tpf_model_free(m2);
	tpf_free(buf);
	tpf_model_free(m);
	assert_int_equal(d->error_count, 0);
	tpf_diag_free(d);
	pbw_free(&bytes);

	if (tpfuse_path) {
		char *err = NULL;
		int ws = run_check(path, &err);
		if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			fail_msg("tpfuse check valid.onnx failed: %s", err);
		free(err);
	}
}

static void test_valid_external(void **state)
{
	const struct bad_case c = {"ext-valid.onnx", build_ext_valid, "", NULL, 1};
	char path[PATH_MAX];
	write_case(&c, path, sizeof(path));
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st = tpf_model_load_file(path, &no_opt, &m, d);
	if (st != TPF_OK) {
		char *text = diag_text(d);
		fail_msg("valid external data refused: %s", text);
	}
	struct tpf_value *v = tpf_graph_find_value(m->graph, "ext_ok");
	assert_non_null(v);
	assert_non_null(v->init);
	assert_int_equal(v->init->nbytes, 16);
	assert_true(v->init->is_external);
	assert_memory_equal(v->init->data, w_values + 4, 16); /* offset 16 = the fifth float */
	assert_int_equal(tpf_model_verify(m, d), TPF_OK);
	tpf_model_free(m);
	tpf_diag_free(d);
}

/* External data is refused when loading from memory without a folder. */
static void test_external_without_folder(void **state)
{
	struct pbw bytes;
	build_ext_valid(&bytes);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st = tpf_model_load_memory(bytes.data, bytes.len, NULL, &no_opt, &m, d);
	if (st == TPF_OK)
		st = tpf_model_verify(m, d);
	assert_int_not_equal(st, TPF_OK);
	char *text = diag_text(d);
	assert_true(text_has_any(text, "ext_ok|data.bin|external"));
	free(text);
	tpf_model_free(m);
	tpf_diag_free(d);
	pbw_free(&bytes);
}

static void test_missing_file(void **state)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cases/does-not-exist.onnx", tmp_root);
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	assert_int_not_equal(tpf_model_load_file(path, &no_opt, &m, d), TPF_OK);
	char *text = diag_text(d);
	assert_true(text_has_any(text, "does-not-exist.onnx"));
	free(text);
	tpf_model_free(m);
	tpf_diag_free(d);

	if (tpfuse_path) {
		char *err = NULL;
		int ws = run_check(path, &err);
		assert_true(WIFEXITED(ws));
		assert_int_equal(WEXITSTATUS(ws), 3); /* I/O error */
		assert_true(text_has_any(err, "does-not-exist.onnx"));
		free(err);
	}
}

/* Robustness: every prefix of a valid model and many byte mutations load or
 * fail cleanly; whatever loads also verifies and exports without crashing. */
static void exercise(const uint8_t *data, size_t len)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	d->max_entries = 16;
	if (tpf_model_load_memory(data, len, NULL, &no_opt, &m, d) == TPF_OK) {
		assert_non_null(m);
		void *buf = NULL;
		size_t size = 0;
		(void)tpf_model_verify(m, d);
		if (tpf_model_save_memory(m, &buf, &size, d) == TPF_OK)
			tpf_free(buf);
	}
	tpf_model_free(m);
	tpf_diag_free(d);
}

static void test_all_prefixes(void **state)
{
	struct pbw bytes;
	build_valid(&bytes);
	for (size_t n = 0; n < bytes.len; n++)
		exercise(bytes.data, n);
	pbw_free(&bytes);
}

static void test_mutations(void **state)
{
	struct pbw bytes;
	build_valid(&bytes);
	uint8_t *copy = malloc(bytes.len);
	assert_non_null(copy);
	uint32_t s = 777;
	for (int iter = 0; iter < 3000; iter++) {
		memcpy(copy, bytes.data, bytes.len);
		int flips = 1 + iter % 3;
		for (int k = 0; k < flips; k++) {
			s = s * 1664525u + 1013904223u;
			size_t at = (s >> 8) % bytes.len;
			s = s * 1664525u + 1013904223u;
			copy[at] = (iter & 1) ? (uint8_t)(s >> 24) : (uint8_t)(copy[at] ^ (1u << (s % 8)));
		}
		exercise(copy, bytes.len);
	}
	free(copy);
	pbw_free(&bytes);
}

/* ------------------------------------------------------------------ setup */

static int make_dir(const char *path)
{
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int setup_tmp(void)
{
	const char *base = getenv("TPF_TEST_TMP");
	char tmpl[PATH_MAX];
	if (base && base[0]) {
		char cmd[PATH_MAX + 16];
		snprintf(cmd, sizeof(cmd), "%s", base);
		/* mkdir -p */
		for (char *p = cmd + 1; *p; p++) {
			if (*p == '/') {
				*p = 0;
				make_dir(cmd);
				*p = '/';
			}
		}
		make_dir(cmd);
		snprintf(tmpl, sizeof(tmpl), "%s/malformed-XXXXXX", base);
	} else {
		snprintf(tmpl, sizeof(tmpl), "/tmp/tpf-malformed-XXXXXX");
	}
	char resolved[PATH_MAX];
	if (!mkdtemp(tmpl) || !realpath(tmpl, resolved) || strlen(resolved) >= sizeof(tmp_root))
		return -1;
	strcpy(tmp_root, resolved);
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/cases", tmp_root);
	if (make_dir(p))
		return -1;
	snprintf(p, sizeof(p), "%s/ext", tmp_root);
	if (make_dir(p))
		return -1;
	snprintf(p, sizeof(p), "%s/ext/sub", tmp_root);
	if (make_dir(p))
		return -1;
	/* ext/data.bin: the 48 bytes of w_values; outside.bin one folder up. */
	snprintf(p, sizeof(p), "%s/ext/data.bin", tmp_root);
	FILE *f = fopen(p, "wb");
	if (!f || fwrite(w_values, 1, sizeof(w_values), f) != sizeof(w_values) || fclose(f))
		return -1;
	snprintf(outside_abs, sizeof(outside_abs), "%s/outside.bin", tmp_root);
	f = fopen(outside_abs, "wb");
	if (!f || fwrite(w_values, 1, sizeof(w_values), f) != sizeof(w_values) || fclose(f))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	tpfuse_path = argc > 1 ? argv[1] : getenv("TPFUSE");
	if (tpfuse_path && access(tpfuse_path, X_OK) != 0) {
		fprintf(stderr, "warning: %s is not executable; CLI checks skipped\n", tpfuse_path);
		tpfuse_path = NULL;
	}
	if (setup_tmp() != 0) {
		fprintf(stderr, "cannot create a scratch folder: %s\n", strerror(errno));
		return 1;
	}

	enum { N_CASES = sizeof(cases) / sizeof(cases[0]) };
	struct CMUnitTest tests[N_CASES + 8];
	size_t n = 0;
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_valid_model);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_valid_external);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_external_without_folder);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_missing_file);
	for (size_t i = 0; i < N_CASES; i++) {
		tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(test_bad_case,
									(void *)&cases[i]);
		tests[n].name = cases[i].file;
		n++;
	}
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_all_prefixes);
	tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_mutations);
	return _cmocka_run_group_tests("malformed", tests, n, NULL, NULL);
}
