/* SPDX-License-Identifier: MIT */
/* `tpfuse tune`: measures the collective paths on this machine's GPUs and
 * writes a strategy table (runtime/tune.c, runtime/strategy.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpf-runtime.h"
#include "tune-command.h"
#ifdef TPF_HAVE_NCCL
#include "tpf-cuda-runtime.h"
#endif

static const char tune_help[] =
	"usage: mpirun -np N tpfuse tune [-o FILE] [--hidden LIST] [--tokens LIST] [--replays N]\n"
	"                                [--timeout S]\n"
	"\n"
	"Measures, on N GPUs (one rank each, NCCL), every path the CUDA runtime\n"
	"chooses among for an all-reduce, a fused all-reduce + residual + RMSNorm\n"
	"and the same emitting FP8: NCCL with the fused op's post kernel, and the\n"
	"one-shot and two-shot kernels through peer memory (bfloat16, CUDA graphs,\n"
	"the slowest rank's time), and writes the table of the fastest path per\n"
	"hidden size and token count.  Give the table to `tpfuse run` (and any\n"
	"session) with TPF_STRATEGY_TABLE=FILE; without one, the built-in table\n"
	"decides: its H200 rows on an H200, else the rows measured on H100s.\n"
	"\n"
	"  -o FILE         write the table here (default: standard output)\n"
	"  --hidden LIST   hidden sizes, comma-separated (default 2048,4096,8192)\n"
	"  --tokens LIST   token counts, ascending (default 1,2,4,...,4096)\n"
	"  --replays N     graph launches per measurement, the best counts (default 10)\n"
	"  --timeout S     a collective fails after S seconds (default 60)\n";

static int parse_list(const char *s, int64_t *out, size_t max, size_t *n)
{
	*n = 0;
	while (*s) {
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (end == s || errno || v <= 0 || *n == max)
			return -1;
		out[(*n)++] = v;
		if (*end == ',')
			end++;
		else if (*end)
			return -1;
		s = end;
	}
	return *n ? 0 : -1;
}

int tpf_cli_tune(int argc, char **argv)
{
	int64_t hiddens[32] = {2048, 4096, 8192}, tokens[64] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
	size_t n_h = 3, n_t = 13;
	const char *out_path = NULL;
	int replays = 10;
	double timeout = 60;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(tune_help, stdout);
			return 0;
		}
		if (!next) {
			fprintf(stderr, "tpfuse tune: error: %s: unknown option or missing value (see tpfuse tune --help)\n", a);
			return 2;
		}
		if (!strcmp(a, "-o")) {
			out_path = next;
		} else if (!strcmp(a, "--hidden")) {
			if (parse_list(next, hiddens, 32, &n_h)) {
				fprintf(stderr, "tpfuse tune: error: --hidden needs positive sizes, comma-separated\n");
				return 2;
			}
		} else if (!strcmp(a, "--tokens")) {
			if (parse_list(next, tokens, 64, &n_t)) {
				fprintf(stderr, "tpfuse tune: error: --tokens needs positive counts, comma-separated\n");
				return 2;
			}
			for (size_t j = 1; j < n_t; j++)
				if (tokens[j] <= tokens[j - 1]) {
					fprintf(stderr, "tpfuse tune: error: --tokens must be ascending\n");
					return 2;
				}
		} else if (!strcmp(a, "--replays")) {
			char *end;
			long v = strtol(next, &end, 10);
			if (*end || v < 1 || v > 1000) {
				fprintf(stderr, "tpfuse tune: error: --replays needs 1..1000\n");
				return 2;
			}
			replays = (int)v;
		} else if (!strcmp(a, "--timeout")) {
			char *end;
			timeout = strtod(next, &end);
			if (*end || !(timeout > 0)) {
				fprintf(stderr, "tpfuse tune: error: --timeout needs a positive number of seconds\n");
				return 2;
			}
		} else {
			fprintf(stderr, "tpfuse tune: error: unknown option '%s' (see tpfuse tune --help)\n", a);
			return 2;
		}
		i++;
	}
#if defined(TPF_HAVE_NCCL)
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_comm *comm = NULL;
	struct tpf_strategy_table *tab = NULL;
	enum tpf_status st;
	if (!tpf_comm_launched_by_mpi()) {
		fprintf(stderr, "tpfuse tune: error: run it under mpirun, one rank per GPU (mpirun -np 2 tpfuse tune)\n");
		tpf_diag_free(d);
		return 2;
	}
	struct tpf_comm_options co = {.timeout_s = timeout};
	if ((st = tpf_env_check(d)) == TPF_OK && (st = tpf_comm_create_nccl(&co, &comm, d)) == TPF_OK) {
		FILE *f = NULL;
		if (comm->rank == 0) {
			f = out_path ? fopen(out_path, "w") : stdout;
			if (!f)
				st = tpf_diag_fail(d, TPF_ERR_IO, "cannot write %s: %s", out_path, strerror(errno));
		}
		/* every rank learns whether rank 0 can write */
		if (tpf_comm_agree(comm, st, "opening the table file", d) == TPF_OK) {
			time_t now = time(NULL);
			char when[32];
			strftime(when, sizeof(when), "%Y-%m-%d", gmtime(&now));
			if (f)
				fprintf(f, "# tpfuse collective strategy table: world %d, measured %s by tpfuse tune\n"
					   "# (times in microseconds per call, slowest rank; nccl+post is the path named nccl)\n",
					comm->world, when);
			struct tpf_tune_options o = {.hiddens = hiddens, .n_hiddens = n_h, .tokens = tokens,
						     .n_tokens = n_t, .replays = replays, .log = f};
			st = tpf_tune_collectives(comm, &o, &tab, d);
			if (!st && f)
				tpf_strategy_print(tab, f);
		} else if (!st) {
			st = TPF_ERR_IO;
		}
		if (f && f != stdout)
			fclose(f);
	}
	if (st) {
		tpf_diag_print(d, stderr);
		if (comm)
			tpf_comm_abort(comm, 1);
	}
	tpf_strategy_free(tab);
	tpf_comm_free(comm);
	tpf_diag_free(d);
	return st ? 1 : 0;
#else
	(void)out_path;
	(void)replays;
	(void)timeout;
	fprintf(stderr, "tpfuse tune: error: this tpfuse was built without CUDA and NCCL; tune measures GPUs\n");
	return 4;
#endif
}
