/* SPDX-License-Identifier: MIT */
/*
 * bench-io: time import + verify + export of one ONNX model and report the
 * memory it took.
 *
 *   bench-io MODEL [-o OUT] [--repeat N] [--threshold BYTES] [--infer]
 *            [--references-only] [--csv LABEL]
 *
 * Each repeat loads MODEL (weights mmap'ed from its external data), verifies
 * it, optionally infers shapes, and saves it to OUT (default: bench-out.onnx
 * in the current folder) with tensors of at least BYTES (default 1024) in
 * OUT's external data file.  The fastest repeat is reported.
 *
 * Memory: peak RSS from getrusage (ru_maxrss), and the peak anonymous RSS
 * (RssAnon of /proc/self/status, sampled after every phase).  RSS also counts
 * pages of the mmap'ed weight file that were touched (clean page cache);
 * RssAnon is the memory tpfuse itself allocated.
 * With --references-only the weights are not loaded at all (external data
 * kept as references), which measures the graph alone.
 *
 * --csv LABEL prints one line:
 *   label,nodes,initializers,weight_mib,load_ms,verify_ms,infer_ms,save_ms,total_ms,maxrss_mib,anon_mib
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tpf-ir.h"

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A field of /proc/self/status in KiB; -1 when absent. */
static long status_kib(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	size_t n = strlen(field);
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, field, n) == 0 && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	}
	fclose(f);
	return v;
}

static long peak_anon_kib;

static void sample_memory(void)
{
	long a = status_kib("RssAnon");
	if (a > peak_anon_kib)
		peak_anon_kib = a;
}

struct run {
	double load, verify, infer, save;
	size_t nodes, initializers;
	uint64_t weight_bytes;
};

static int run_once(const char *model, const char *out, const struct tpf_load_options *lo,
		    const struct tpf_save_options *so, int infer, struct run *r)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st;
	int rc = 1;
	double t0;

	if (!d)
		return 1;
	d->max_entries = 20;
	memset(r, 0, sizeof(*r));

	t0 = now_ms();
	st = tpf_model_load_file(model, lo, &m, d);
	r->load = now_ms() - t0;
	sample_memory();
	if (st) {
		fprintf(stderr, "bench-io: load failed: %s\n", tpf_status_name(st));
		goto out_print;
	}
	r->nodes = tpf_graph_count_nodes(m->graph, 1);
	r->initializers = m->graph->n_initializers;
	for (size_t i = 0; i < m->graph->n_initializers; i++)
		if (m->graph->initializers[i] && m->graph->initializers[i]->init)
			r->weight_bytes += m->graph->initializers[i]->init->nbytes;

	t0 = now_ms();
	st = tpf_model_verify(m, d);
	r->verify = now_ms() - t0;
	sample_memory();
	if (st) {
		fprintf(stderr, "bench-io: verify failed: %s\n", tpf_status_name(st));
		goto out_print;
	}
	if (infer) {
		t0 = now_ms();
		st = tpf_model_infer_shapes(m, d);
		r->infer = now_ms() - t0;
		sample_memory();
		if (st) {
			fprintf(stderr, "bench-io: shape inference failed: %s\n", tpf_status_name(st));
			goto out_print;
		}
	}
	t0 = now_ms();
	st = tpf_model_save_file(m, out, so, d);
	r->save = now_ms() - t0;
	sample_memory();
	if (st) {
		fprintf(stderr, "bench-io: save failed: %s\n", tpf_status_name(st));
		goto out_print;
	}
	rc = 0;
out_print:
	if (rc || d->error_count)
		tpf_diag_print(d, stderr);
	tpf_model_free(m);
	tpf_diag_free(d);
	return rc;
}

static int usage(void)
{
	fprintf(stderr, "usage: bench-io MODEL [-o OUT] [--repeat N] [--threshold BYTES] [--infer]\n"
			"                [--references-only] [--csv LABEL]\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *out = "bench-out.onnx", *csv = NULL;
	struct tpf_load_options lo = {0};
	struct tpf_save_options so = {.external_threshold = 1024};
	int repeat = 3, infer = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-o") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(a, "--repeat") && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (!strcmp(a, "--threshold") && i + 1 < argc)
			so.external_threshold = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(a, "--infer"))
			infer = 1;
		else if (!strcmp(a, "--references-only"))
			lo.no_external_data = 1;
		else if (!strcmp(a, "--csv") && i + 1 < argc)
			csv = argv[++i];
		else if (a[0] == '-')
			return usage();
		else if (!model)
			model = a;
		else
			return usage();
	}
	if (!model || repeat < 1)
		return usage();

	struct run best = {0}, r;
	double best_total = -1;
	for (int i = 0; i < repeat; i++) {
		if (run_once(model, out, &lo, &so, infer, &r))
			return 1;
		double total = r.load + r.verify + r.infer + r.save;
		if (best_total < 0 || total < best_total) {
			best = r;
			best_total = total;
		}
	}

	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double maxrss_mib = ru.ru_maxrss / 1024.0; /* KiB on Linux */
	double anon_mib = peak_anon_kib / 1024.0;
	double weight_mib = best.weight_bytes / (1024.0 * 1024.0);

	if (csv) {
		printf("%s,%zu,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n", csv, best.nodes,
		       best.initializers, weight_mib, best.load, best.verify, best.infer, best.save,
		       best_total, maxrss_mib, anon_mib);
		return 0;
	}
	printf("model         %s\n", model);
	printf("nodes         %zu (with subgraphs)\n", best.nodes);
	printf("initializers  %zu, %.1f MiB of weights%s\n", best.initializers, weight_mib,
	       lo.no_external_data ? " (external data not loaded)" : "");
	printf("best of %d:\n", repeat);
	printf("  load        %8.1f ms\n", best.load);
	printf("  verify      %8.1f ms\n", best.verify);
	if (infer)
		printf("  infer       %8.1f ms\n", best.infer);
	printf("  save        %8.1f ms  -> %s\n", best.save, out);
	printf("  total       %8.1f ms\n", best_total);
	printf("peak RSS      %8.1f MiB (getrusage ru_maxrss)\n",
	       maxrss_mib);
	printf("peak anon RSS %8.1f MiB (memory tpfuse allocated)\n", anon_mib);
	return 0;
}
