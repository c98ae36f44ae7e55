/* SPDX-License-Identifier: MIT */
/* Times the default pass pipeline on one model:
 *   bench-pipeline MODEL [--passes LIST] [--repeat N]
 * Prints one line: nodes before/after, import ms, shape inference + pipeline
 * ms (best of N fresh imports), fusions counted, peak RSS. */
#include "tpf-ir.h"
#include "tpf-passes.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	const char *path = NULL, *passes = "default";
	int repeat = 3;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--passes") == 0 && i + 1 < argc)
			passes = argv[++i];
		else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else
			path = argv[i];
	}
	if (!path || repeat < 1) {
		fprintf(stderr, "usage: bench-pipeline MODEL [--passes LIST] [--repeat N]\n");
		return 2;
	}
	struct tpf_diag *d = tpf_diag_create();
	double best_import = 1e30, best_pipe = 1e30;
	size_t before = 0, after = 0;
	int64_t fused = 0;
	for (int r = 0; r < repeat; r++) {
		struct tpf_model *m = NULL;
		struct tpf_load_options lo = {.no_external_data = 1};
		double t0 = now_ms();
		if (tpf_model_load_file(path, &lo, &m, d) != TPF_OK) {
			tpf_diag_print(d, stderr);
			return 1;
		}
		double t1 = now_ms();
		before = tpf_graph_count_nodes(m->graph, 1);
		struct tpf_pass_stats *st = tpf_pass_stats_create();
		struct tpf_pipeline_options o = {.passes = passes};
		o.ctx.stats = st;
		o.ctx.rank = -1;
		o.ctx.world_size = -1;
		double t2 = now_ms();
		if (tpf_model_infer_shapes(m, d) != TPF_OK || tpf_pipeline_run(m, &o, d) != TPF_OK) {
			tpf_diag_print(d, stderr);
			return 1;
		}
		double t3 = now_ms();
		after = tpf_graph_count_nodes(m->graph, 1);
		fused = tpf_pass_stats_get(st, "fuse-allreduce-rmsnorm", "allreduce-residual-rmsnorm") +
			tpf_pass_stats_get(st, "fuse-allreduce-rmsnorm", "allreduce-rmsnorm");
		if (t1 - t0 < best_import)
			best_import = t1 - t0;
		if (t3 - t2 < best_pipe)
			best_pipe = t3 - t2;
		tpf_pass_stats_free(st);
		tpf_model_free(m);
		tpf_diag_clear(d);
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("%8zu %8zu %10.1f %10.1f %8lld %8ld\n", before, after, best_import, best_pipe, (long long)fused,
	       ru.ru_maxrss / 1024);
	tpf_diag_free(d);
	return 0;
}
