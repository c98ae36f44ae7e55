/* SPDX-License-Identifier: MIT */
/*
 * ONNX backend node tests on the CPU runtime.
 *
 *   run-node-tests DATA_DIR [FILTER] [--verbose] [--list-failures] [--results FILE]
 *
 * DATA_DIR holds test_NAME/model.onnx and test_data_set_N/{input,output}_M.pb
 * (tests/conformance/gen-node-data.py writes them from the installed onnx
 * package).  Each test is one of:
 *   pass         every data set within ONNX's default tolerance (rtol 1e-3,
 *                atol 1e-7; two units in the last place for bf16 and fp16
 *                outputs; NaNs equal)
 *   unsupported  the loader or the planner (tpf_plan_build) reports
 *                TPF_ERR_UNSUPPORTED (an op, dtype or form the runtime does
 *                not have), or the test data are not tensors
 *   fail         wrong numbers, any other error, a kernel that reports
 *                TPF_ERR_UNSUPPORTED while running a plan the planner
 *                accepted (the planner must refuse what it cannot run), or a
 *                test folder without model.onnx or without test_data_set_0
 * Prints a summary; --results FILE writes one line per test:
 * NAME<TAB>pass|fail|unsupported<TAB>reason.
 * Exit status: 0 when no test fails, 1 when one does or when DATA_DIR is
 * missing or holds no test_* folder (the data were not generated), 2 on a
 * usage error.
 */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tpf-runtime.h"

enum result { R_PASS, R_UNSUPPORTED, R_FAIL };

static int verbose;

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int exists(const char *p)
{
	struct stat sb;
	return stat(p, &sb) == 0;
}

static int close_enough(const struct tpf_host_tensor *got, const struct tpf_host_tensor *want, char *why,
			size_t n_why)
{
	if (got->dtype != want->dtype) {
		snprintf(why, n_why, "dtype %s, expected %s", tpf_dtype_name(got->dtype),
			 tpf_dtype_name(want->dtype));
		return 0;
	}
	if (got->rank != want->rank) {
		snprintf(why, n_why, "rank %d, expected %d", got->rank, want->rank);
		return 0;
	}
	int64_t n = 1;
	for (int i = 0; i < got->rank; i++) {
		if (got->dims[i] != want->dims[i]) {
			snprintf(why, n_why, "dim %d is %lld, expected %lld", i, (long long)got->dims[i],
				 (long long)want->dims[i]);
			return 0;
		}
		n *= got->dims[i];
	}
	int integral = tpf_dtype_is_integral(want->dtype);
	for (int64_t i = 0; i < n; i++) {
		if (integral) {
			int64_t x = tpf_elem_load_int(got->dtype, got->data, i);
			int64_t y = tpf_elem_load_int(want->dtype, want->data, i);
			if (x != y) {
				snprintf(why, n_why, "element %lld is %lld, expected %lld", (long long)i, (long long)x,
					 (long long)y);
				return 0;
			}
			continue;
		}
		double x = tpf_elem_load(got->dtype, got->data, i), y = tpf_elem_load(want->dtype, want->data, i);
		if (isnan(x) && isnan(y))
			continue;
		if (x == y)
			continue;
		/* ONNX's default tolerance; 16-bit floats within two units in the last place (the reference rounds every step) */
		double rtol = want->dtype == TPF_DTYPE_BFLOAT16 ? 1.0 / 64
			      : want->dtype == TPF_DTYPE_FLOAT16 ? 1.0 / 512
								  : 1e-3;
		if (!(fabs(x - y) <= 1e-7 + rtol * fabs(y))) {
			snprintf(why, n_why, "element %lld is %.9g, expected %.9g", (long long)i, x, y);
			return 0;
		}
	}
	return 1;
}

/* The first error message of d, or "". */
static const char *first_error(const struct tpf_diag *d)
{
	for (size_t i = 0; i < d->count; i++)
		if (d->entries[i].severity == TPF_SEV_ERROR)
			return d->entries[i].text;
	return "";
}

/* Where a test stopped: an UNSUPPORTED from loading or planning makes the
 * test unsupported, one from running the plan is a failure. */
enum stage { S_LOAD, S_PLAN, S_RUN };

static enum result run_test(const char *dir, char *why, size_t n_why)
{
	char path[4096 + 32];
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	struct tpf_session *s = NULL;
	enum result res = R_PASS;
	enum stage stage = S_LOAD;
	enum tpf_status st;
	int n_sets = 0;
	snprintf(path, sizeof(path), "%s/NOT_TENSORS", dir);
	if (exists(path)) {
		snprintf(why, n_why, "test data are not tensors (sequences, maps or optionals)");
		tpf_diag_free(d);
		return R_UNSUPPORTED;
	}
	snprintf(path, sizeof(path), "%s/model.onnx", dir);
	if (!exists(path)) {
		snprintf(why, n_why, "no model.onnx in the test folder");
		tpf_diag_free(d);
		return R_FAIL;
	}
	st = tpf_model_load_file(path, &(struct tpf_load_options){0}, &m, d);
	if (!st)
		st = tpf_session_create(m, &(struct tpf_session_options){.backend = TPF_BACKEND_CPU}, &s, d);
	for (int ds = 0; !st && res == R_PASS; ds++) {
		char dsdir[4096 + 32];
		snprintf(dsdir, sizeof(dsdir), "%s/test_data_set_%d", dir, ds);
		if (!exists(dsdir))
			break;
		n_sets++;
		struct tpf_host_tensor *in = NULL, *want = NULL;
		size_t n_in = 0, n_want = 0;
		stage = S_LOAD;
		st = tpf_tensor_read_dir(dsdir, "input", &in, &n_in, d);
		if (!st)
			st = tpf_tensor_read_dir(dsdir, "output", &want, &n_want, d);
		/* the N-th input file is the N-th graph input */
		for (size_t i = 0; !st && i < n_in && i < m->graph->n_inputs; i++) {
			char *nn = tpf_strdup(m->graph->inputs[i]->name);
			tpf_free((void *)in[i].name);
			in[i].name = nn;
		}
		/* the planner alone first: what it accepts must run */
		if (!st) {
			struct tpf_plan *p = NULL;
			stage = S_PLAN;
			st = tpf_plan_build(m, in, n_in, &(struct tpf_plan_options){.backend = TPF_BACKEND_CPU}, &p,
					    d);
			tpf_plan_free(p);
		}
		const struct tpf_host_tensor *got = NULL;
		size_t n_got = 0;
		if (!st) {
			stage = S_RUN;
			st = tpf_session_run(s, in, n_in, &got, &n_got, d);
		}
		if (!st) {
			if (n_got != n_want) {
				snprintf(why, n_why, "%zu outputs, expected %zu", n_got, n_want);
				res = R_FAIL;
			}
			for (size_t i = 0; res == R_PASS && i < n_got; i++) {
				char w[256];
				if (!close_enough(&got[i], &want[i], w, sizeof(w))) {
					snprintf(why, n_why, "data set %d output %zu ('%s'): %s", ds, i, got[i].name, w);
					res = R_FAIL;
				}
			}
		}
		tpf_host_tensors_release(in, n_in);
		tpf_host_tensors_release(want, n_want);
	}
	if (st) {
		if (st == TPF_ERR_UNSUPPORTED && stage == S_RUN) {
			res = R_FAIL;
			snprintf(why, n_why, "%s while running a plan the planner accepted: %s",
				 tpf_status_name(st), first_error(d));
		} else {
			res = st == TPF_ERR_UNSUPPORTED ? R_UNSUPPORTED : R_FAIL;
			snprintf(why, n_why, "%s: %s", tpf_status_name(st), first_error(d));
		}
	} else if (res == R_PASS && n_sets == 0) {
		res = R_FAIL;
		snprintf(why, n_why, "no test data (test_data_set_0 is missing)");
	}
	tpf_session_free(s);
	tpf_model_free(m);
	tpf_diag_free(d);
	return res;
}

int main(int argc, char **argv)
{
	const char *root = NULL, *filter = NULL, *results = NULL;
	int list_failures = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--verbose")) {
			verbose = 1;
		} else if (!strcmp(argv[i], "--list-failures")) {
			list_failures = 1;
		} else if (!strcmp(argv[i], "--results")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "run-node-tests: --results needs a file name\n");
				return 2;
			}
			results = argv[++i];
		} else if (argv[i][0] == '-' && argv[i][1] == '-') {
			fprintf(stderr, "run-node-tests: unknown option '%s'\n", argv[i]);
			return 2;
		} else if (!root) {
			root = argv[i];
		} else if (!filter) {
			filter = argv[i];
		} else {
			fprintf(stderr, "run-node-tests: unexpected argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!root) {
		fprintf(stderr, "usage: run-node-tests DATA_DIR [FILTER] [--verbose] [--list-failures] "
				"[--results FILE]\n");
		return 2;
	}
	DIR *dp = opendir(root);
	if (!dp) {
		fprintf(stderr, "run-node-tests: cannot open the data folder %s: %s (generate it with "
				"tests/conformance/gen-node-data.py)\n",
			root, strerror(errno));
		return 1;
	}
	char **names = NULL;
	size_t n = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(dp))) {
		if (strncmp(e->d_name, "test_", 5) || (filter && !strstr(e->d_name, filter)))
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			char **nn = realloc(names, ncap * sizeof(*names));
			if (!nn) {
				fprintf(stderr, "run-node-tests: out of memory\n");
				closedir(dp);
				return 1;
			}
			names = nn;
			cap = ncap;
		}
		if (!(names[n] = strdup(e->d_name))) {
			fprintf(stderr, "run-node-tests: out of memory\n");
			closedir(dp);
			return 1;
		}
		n++;
	}
	closedir(dp);
	if (n == 0) {
		fprintf(stderr, "run-node-tests: no test_* folder in %s%s%s%s (the data were not generated)\n",
			root, filter ? " matching '" : "", filter ? filter : "", filter ? "'" : "");
		free(names);
		return 1;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	FILE *rf = NULL;
	if (results && !(rf = fopen(results, "w"))) {
		fprintf(stderr, "run-node-tests: cannot write %s: %s\n", results, strerror(errno));
		for (size_t i = 0; i < n; i++)
			free(names[i]);
		free(names);
		return 1;
	}
	static const char *const result_name[] = {[R_PASS] = "pass", [R_UNSUPPORTED] = "unsupported", [R_FAIL] = "fail"};
	size_t counts[3] = {0};
	for (size_t i = 0; i < n; i++) {
		char dir[4096], why[1024] = "";
		snprintf(dir, sizeof(dir), "%s/%s", root, names[i]);
		enum result r = run_test(dir, why, sizeof(why));
		counts[r]++;
		if (verbose || (r == R_FAIL && list_failures))
			printf("%-60s %s%s%s\n", names[i], r == R_FAIL ? "FAIL" : result_name[r], *why ? "  " : "", why);
		if (rf) {
			/* one line per test: no tabs or newlines inside the reason */
			for (char *c = why; *c; c++)
				if (*c == '\t' || *c == '\n' || *c == '\r')
					*c = ' ';
			fprintf(rf, "%s\t%s\t%s\n", names[i], result_name[r], why);
		}
		free(names[i]);
	}
	free(names);
	if (rf && fclose(rf)) {
		fprintf(stderr, "run-node-tests: cannot write %s\n", results);
		return 1;
	}
	printf("node tests: %zu total, %zu supported: %zu pass, %zu fail; %zu unsupported\n", n,
	       counts[R_PASS] + counts[R_FAIL], counts[R_PASS], counts[R_FAIL], counts[R_UNSUPPORTED]);
	return counts[R_FAIL] ? 1 : 0;
}
