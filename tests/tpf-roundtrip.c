/* SPDX-License-Identifier: MIT */
/*
 * tpf-roundtrip: load an ONNX model, verify it, save it again.  Used by the
 * round-trip tests (tests/roundtrip.py, tests/backend_roundtrip.py).
 *
 *   tpf-roundtrip [--external-threshold BYTES] [--external-file NAME]
 *                 [--no-verify] IN OUT
 *   tpf-roundtrip --batch [options]      reads "IN<TAB>OUT" lines on stdin
 *
 * For each model one line goes to stdout:
 *   ok IN
 *   fail IN: STAGE: first message            (STAGE is load, verify or save)
 * and the diagnostics go to stderr.  Exit status: 0 when every model passed,
 * 1 when one failed, 2 on a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-ir.h"

struct options {
	struct tpf_save_options save;
	int verify;
};

static const char *first_error(const struct tpf_diag *d)
{
	for (size_t i = 0; i < d->count; i++)
		if (d->entries[i].severity == TPF_SEV_ERROR)
			return d->entries[i].text;
	return d->count ? d->entries[0].text : "(no message)";
}

static int one(const char *in, const char *out, const struct options *o)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	struct tpf_load_options lo = {0};
	const char *stage = "load";
	enum tpf_status st;
	int rc = 1;

	if (!d) {
		printf("fail %s: out of memory\n", in);
		return 1;
	}
	st = tpf_model_load_file(in, &lo, &m, d);
	if (st != TPF_OK)
		goto out_report;
	if (o->verify) {
		stage = "verify";
		st = tpf_model_verify(m, d);
		if (st != TPF_OK)
			goto out_report;
	}
	stage = "save";
	st = tpf_model_save_file(m, out, &o->save, d);
	if (st != TPF_OK)
		goto out_report;
	rc = 0;
out_report:
	if (rc == 0)
		printf("ok %s\n", in);
	else
		printf("fail %s: %s: %s: %s\n", in, stage, tpf_status_name(st), first_error(d));
	fflush(stdout);
	if (d->count) {
		fprintf(stderr, "== %s\n", in);
		tpf_diag_print(d, stderr);
	}
	tpf_model_free(m);
	tpf_diag_free(d);
	return rc;
}

static int usage(void)
{
	fprintf(stderr, "usage: tpf-roundtrip [--external-threshold BYTES] [--external-file NAME] "
			"[--no-verify] (IN OUT | --batch)\n");
	return 2;
}

int main(int argc, char **argv)
{
	struct options o = {.verify = 1};
	const char *pos[2] = {NULL, NULL};
	int n_pos = 0, batch = 0, failed = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--external-threshold") && i + 1 < argc) {
			char *end;
			o.save.external_threshold = strtoull(argv[++i], &end, 10);
			if (*end)
				return usage();
		} else if (!strcmp(argv[i], "--external-file") && i + 1 < argc) {
			o.save.external_file = argv[++i];
		} else if (!strcmp(argv[i], "--no-verify")) {
			o.verify = 0;
		} else if (!strcmp(argv[i], "--batch")) {
			batch = 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			return usage();
		} else if (n_pos < 2) {
			pos[n_pos++] = argv[i];
		} else {
			return usage();
		}
	}
	if (!batch) {
		if (n_pos != 2)
			return usage();
		return one(pos[0], pos[1], &o);
	}
	if (n_pos)
		return usage();

	char line[8192];
	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\r\n")] = 0;
		char *tab = strchr(line, '\t');
		if (!tab)
			continue;
		*tab = 0;
		failed |= one(line, tab + 1, &o);
	}
	return failed ? 1 : 0;
}
