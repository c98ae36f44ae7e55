/* SPDX-License-Identifier: MIT */
/*
 * Shared by the fuzz targets: what happens to a model once it exists.
 *
 *   verify -> infer shapes -> text and DOT dumps -> "default" pipeline ->
 *   verify again -> export -> reload -> verify
 *
 * Besides crashes, leaks and undefined behaviour (found by the sanitizers),
 * a target stops with abort() when the library breaks one of its promises:
 * a pipeline that returns TPF_OK must leave a model that verifies, the
 * export of a valid model must load again and verify, and its text dump,
 * where the reader takes it back, must print the same again.  abort() makes
 * libFuzzer (or the replay program) keep the input.
 */
#ifndef TPF_FUZZ_COMMON_H
#define TPF_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-ir.h"
#include "tpf-passes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline void fuzz_fail(const char *what, enum tpf_status st, const struct tpf_diag *d)
{
	fprintf(stderr, "fuzz target: %s (%s)\n", what, tpf_status_name(st));
	if (d)
		tpf_diag_print(d, stderr);
	abort();
}

/* Runs the text and DOT printers into /dev/null (into stderr, text only,
 * when TPF_FUZZ_VERBOSE is set: handy when reading a finding). */
static inline void fuzz_print(const struct tpf_model *m)
{
	static FILE *sink;
	static int verbose = -1;

	if (verbose < 0)
		verbose = getenv("TPF_FUZZ_VERBOSE") != NULL;
	if (verbose) {
		fprintf(stderr, "---- model\n");
		tpf_model_print_text(m, stderr);
		return;
	}
	if (!sink)
		sink = fopen("/dev/null", "w");
	if (!sink)
		return;
	tpf_model_print_text(m, sink);
	tpf_model_print_dot(m, sink);
	fflush(sink);
}

static inline void fuzz_check_export(const struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *back = NULL;
	void *bytes = NULL;
	size_t n = 0;
	enum tpf_status st;

	if (!d)
		return;
	d->max_entries = 64;
	st = tpf_model_save_memory(m, &bytes, &n, d);
	if (st != TPF_OK) {
		/* a valid model must export; only resource limits are excused */
		if (st != TPF_ERR_NOMEM && st != TPF_ERR_LIMIT)
			fuzz_fail("export of a valid model failed", st, d);
		goto out_free_diag;
	}
	st = tpf_model_load_memory(bytes, n, NULL, NULL, &back, d);
	if (st != TPF_OK)
		fuzz_fail("the exported model does not load", st, d);
	st = tpf_model_verify(back, d);
	if (st != TPF_OK)
		fuzz_fail("the exported model does not verify", st, d);
	fuzz_print(back);
	tpf_model_free(back);
	tpf_free(bytes);
out_free_diag:
	tpf_diag_free(d);
}

/* The text dump of m, malloc'ed, or NULL. */
static inline char *fuzz_dump(const struct tpf_model *m, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f)
		return NULL;
	tpf_model_print_text(m, f);
	if (fclose(f)) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* The dump of m read back prints the same bytes.  must_parse: the dump has
 * to read back at all (m came from text); for a model from ONNX, a dump the
 * reader refuses is no finding (op, domain and attribute names outside the
 * text's identifiers), nor one holding what the dump only counts (sparse
 * initializers, training_info, device configurations, graphs nested too
 * deep), but a dump that reads back must print the same. */
static inline void fuzz_check_reprint(const struct tpf_model *m, int must_parse)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *back = NULL;
	size_t n1 = 0, n2 = 0;
	char *t1, *t2;
	enum tpf_status st;

	if (!d)
		return;
	d->max_entries = 64;
	t1 = fuzz_dump(m, &n1);
	if (!t1)
		goto out;
	if (!must_parse && (strstr(t1, " sparse initializers\n") || strstr(t1, " training_info entries\n") ||
			    strstr(t1, " device configurations\n") || strstr(t1, "# nested too deep\n")))
		goto out;
	st = tpf_model_parse_text(t1, n1, "dump", &back, d);
	if (st == TPF_ERR_NOMEM || st == TPF_ERR_LIMIT || (st && !must_parse))
		goto out;
	if (st) {
		fprintf(stderr, "%.*s", (int)(n1 < 65536 ? n1 : 65536), t1);
		fuzz_fail("the dump of a model read from text does not parse", st, d);
	}
	t2 = fuzz_dump(back, &n2);
	if (t2 && (n1 != n2 || memcmp(t1, t2, n1))) {
		fprintf(stderr, "---- first dump\n%.*s---- second dump\n%.*s", (int)n1, t1, (int)n2, t2);
		fuzz_fail("a dump read back prints other text", TPF_OK, NULL);
	}
	free(t2);
out:
	free(t1);
	tpf_model_free(back);
	tpf_diag_free(d);
}

/* Takes ownership of `m`. */
static inline void fuzz_exercise(struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_pipeline_options po = {.passes = "default"};
	enum tpf_status st;

	if (!d)
		goto out_free_model;
	d->max_entries = 64;
	po.ctx.rank = -1;
	po.ctx.world_size = 0;

	st = tpf_model_verify(m, d);
	if (st != TPF_OK) {
		/* what `tpfuse dump` does with a model that does not verify */
		tpf_model_infer_shapes(m, d);
		fuzz_print(m);
		goto out_free_diag;
	}
	st = tpf_model_infer_shapes(m, d);
	fuzz_print(m);
	fuzz_check_reprint(m, 0);
	if (st != TPF_OK)
		goto out_free_diag;
	/* inferred types can reveal what the first check could not see */
	st = tpf_model_verify(m, d);
	if (st != TPF_OK)
		goto out_free_diag;

	st = tpf_pipeline_run(m, &po, d);
	if (getenv("TPF_FUZZ_VERBOSE")) {
		fprintf(stderr, "---- pipeline: %s\n", tpf_status_name(st));
		tpf_diag_print(d, stderr);
	}
	if (st != TPF_OK)
		goto out_free_diag;
	tpf_diag_clear(d);
	st = tpf_model_verify(m, d);
	if (st != TPF_OK)
		fuzz_fail("the default pipeline returned OK but left a model that does not verify",
			  st, d);
	st = tpf_model_infer_shapes(m, d);
	fuzz_print(m);
	if (st != TPF_OK)
		goto out_free_diag;
	fuzz_check_export(m);

out_free_diag:
	tpf_diag_free(d);
out_free_model:
	tpf_model_free(m);
}

#endif /* TPF_FUZZ_COMMON_H */
