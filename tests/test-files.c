/* SPDX-License-Identifier: MIT */
/*
 * ir/files.c: file identity (every spelling of a path, symbolic and hard
 * links, files that do not exist yet) and outputs written whole: a set of
 * files renamed together, where a rename that fails puts back what the
 * earlier ones replaced and leaves no temporary file.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test-util.h"
#include "tpf-ir.h"

static char dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/tpf-files-XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[128];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *at(const char *name)
{
	static char buf[4][256];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
	return buf[k];
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void expect_content(const char *path, const char *text)
{
	char buf[256] = {0};
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	assert_string_equal(buf, text);
}

/* The entries of dir, besides . and .. */
static int entries(void)
{
	DIR *dp = opendir(dir);
	struct dirent *e;
	int n = 0;
	assert_non_null(dp);
	while ((e = readdir(dp)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(dp);
	return n;
}

static enum tpf_status add_out(struct tpf_file_set *s, const char *path, struct tpf_diag *d)
{
	return tpf_file_set_add_output(s, path, "the output", d);
}

static void test_spellings_meet(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_file_set *s = tpf_file_set_create();
	char buf[512];
	put(at("in.onnx"), "model");
	assert_int_equal(mkdir(at("sub"), 0777), 0);
	assert_int_equal(symlink("in.onnx", at("link.onnx")), 0);
	assert_int_equal(link(at("in.onnx"), at("hard.onnx")), 0);
	assert_int_equal(tpf_file_set_add_input(s, at("in.onnx"), "the input model", d), TPF_OK);
	/* a missing input is left to its reader */
	assert_int_equal(tpf_file_set_add_input(s, at("none.onnx"), "x", d), TPF_OK);

	snprintf(buf, sizeof(buf), "%s/./sub/../in.onnx", dir);
	assert_int_equal(add_out(s, buf, d), TPF_ERR_CONFLICT);
	assert_true(diag_mentions(d, "the input model"));
	assert_true(diag_mentions(d, "sub/../in.onnx"));
	assert_int_equal(add_out(s, at("link.onnx"), d), TPF_ERR_CONFLICT);
	assert_int_equal(add_out(s, at("hard.onnx"), d), TPF_ERR_CONFLICT);
	/* files that do not exist yet: by the path they resolve to */
	assert_int_equal(add_out(s, at("new.onnx"), d), TPF_OK);
	snprintf(buf, sizeof(buf), "%s/missing/../new.onnx", dir);
	assert_int_equal(add_out(s, buf, d), TPF_ERR_CONFLICT);
	assert_true(diag_mentions(d, "two outputs"));
	snprintf(buf, sizeof(buf), "%s/sub/../sub/x.onnx", dir);
	assert_int_equal(add_out(s, buf, d), TPF_OK);
	assert_int_equal(add_out(s, at("sub/x.onnx"), d), TPF_ERR_CONFLICT);
	/* a model output brings its data file */
	assert_int_equal(tpf_file_set_add_model_output(s, at("m.onnx"), NULL, "the output", d),
	                 TPF_OK);
	assert_int_equal(add_out(s, at("m.onnx.data"), d), TPF_ERR_CONFLICT);
	assert_true(diag_mentions(d, "the output's data file"));
	/* a dump folder takes the names NN-NAME.txt in it */
	put(at("sub/00-input.txt"), "text model");
	assert_int_equal(tpf_file_set_add_input(s, at("sub/00-input.txt"), "the text model", d),
	                 TPF_OK);
	snprintf(buf, sizeof(buf), "%s/./sub", dir);
	assert_int_equal(tpf_file_set_add_dump_folder(s, buf, "the dump folder", d),
	                 TPF_ERR_CONFLICT);
	assert_true(diag_mentions(d, "NN-PASS.txt"));
	struct tpf_file_set *s2 = tpf_file_set_create();
	assert_int_equal(tpf_file_set_add_dump_folder(s2, at("sub"), "the dump folder", d), TPF_OK);
	assert_int_equal(add_out(s2, at("sub/notes.txt"), d), TPF_OK);
	assert_int_equal(add_out(s2, at("sub/7-x.txt"), d), TPF_OK);
	assert_int_equal(add_out(s2, at("sub/12-dce.txt"), d), TPF_ERR_CONFLICT);
	tpf_file_set_free(s2);
	/* a device is not a file to keep */
	assert_int_equal(add_out(s, "/dev/null", d), TPF_OK);
	assert_int_equal(add_out(s, "/dev/null", d), TPF_OK);
	assert_true(tpf_same_file(at("link.onnx"), at("hard.onnx")));
	assert_false(tpf_same_file(at("in.onnx"), at("new.onnx")));
	tpf_file_set_free(s);
	tpf_diag_free(d);
}

static void write_text(struct tpf_out_file *f, const char *text)
{
	assert_int_equal(write(f->fd, text, strlen(text)), (ssize_t)strlen(text));
}

static void test_commit_puts_back_on_failure(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_out_file f[3];
	put(at("a.data"), "old data");
	assert_int_equal(tpf_out_file_open(&f[0], at("a.data"), d), TPF_OK);
	assert_int_equal(tpf_out_file_open(&f[1], at("b.new"), d), TPF_OK);
	assert_int_equal(tpf_out_file_open(&f[2], at("a.onnx"), d), TPF_OK);
	write_text(&f[0], "new data");
	write_text(&f[1], "new file");
	write_text(&f[2], "new model");
	/* the last rename fails: its temporary file is gone */
	assert_int_equal(unlink(f[2].tmp), 0);
	assert_int_equal(tpf_out_files_commit(f, 3, d), TPF_ERR_IO);
	assert_true(diag_mentions(d, "a.onnx"));
	expect_content(at("a.data"), "old data");
	assert_int_equal(access(at("b.new"), F_OK), -1);
	assert_int_equal(access(at("a.onnx"), F_OK), -1);
	assert_int_equal(entries(), 1);

	/* and when all goes well, every file is in place, nothing else */
	assert_int_equal(tpf_out_file_open(&f[0], at("a.data"), d), TPF_OK);
	assert_int_equal(tpf_out_file_open(&f[1], at("a.onnx"), d), TPF_OK);
	write_text(&f[0], "new data");
	write_text(&f[1], "new model");
	assert_int_equal(tpf_out_files_commit(f, 2, d), TPF_OK);
	expect_content(at("a.data"), "new data");
	expect_content(at("a.onnx"), "new model");
	assert_int_equal(entries(), 2);

	/* a file replaced keeps its permissions */
	struct stat sb;
	assert_int_equal(chmod(at("a.onnx"), 0600), 0);
	assert_int_equal(tpf_out_file_open(&f[0], at("a.onnx"), d), TPF_OK);
	write_text(&f[0], "newer model");
	assert_int_equal(tpf_out_files_commit(f, 1, d), TPF_OK);
	expect_content(at("a.onnx"), "newer model");
	assert_int_equal(stat(at("a.onnx"), &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	tpf_diag_free(d);
}

static void test_open_refuses_folders(void **state)
{
	(void)state;
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_out_file f;
	assert_int_equal(mkdir(at("F"), 0777), 0);
	assert_int_equal(tpf_out_file_open(&f, at("F"), d), TPF_ERR_IO);
	assert_true(diag_mentions(d, "is a folder"));
	assert_int_equal(tpf_out_file_open(&f, at("nowhere/x"), d), TPF_ERR_IO);
	assert_true(diag_mentions(d, "does not exist"));
	/* discarding leaves nothing */
	assert_int_equal(tpf_out_file_open(&f, at("gone"), d), TPF_OK);
	write_text(&f, "x");
	tpf_out_file_discard(&f);
	assert_int_equal(entries(), 1);
	char **made = NULL;
	size_t n_made = 0;
	assert_int_equal(tpf_make_parent_folders(at("p/q/r.onnx"), &made, &n_made, d), TPF_OK);
	struct stat sb;
	assert_int_equal(stat(at("p/q"), &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(n_made, 2);
	assert_string_equal(made[1], at("p/q"));
	assert_int_equal(tpf_make_parent_folders(at("p/q/s.onnx"), &made, &n_made, d), TPF_OK);
	assert_int_equal(n_made, 2);
	tpf_remove_folders(made, n_made);
	assert_int_equal(entries(), 1);
	put(at("p"), "a file");
	assert_int_equal(tpf_make_parent_folders(at("p/q/r.onnx"), NULL, NULL, d), TPF_ERR_IO);
	assert_true(diag_mentions(d, "a file of that name exists"));
	tpf_diag_free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_spellings_meet, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_commit_puts_back_on_failure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_open_refuses_folders, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
