/* SPDX-License-Identifier: MIT */
/*
 * tpfuse shard MODEL --world-size W -o 'OUT.rank{rank}.onnx' [--explain]
 *                    [--vocab-parallel-embedding] [--stats]
 *                    [--external-data-threshold BYTES]
 *
 * Writes W rank graphs from one single-device graph (passes/shard/):
 * column/row splits found from the weights, com.microsoft AllReduce /
 * AllGather where a split meets an op that needs the whole tensor, each
 * rank's weights in its own data file.  docs/cli.md is the user guide.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-util.h"
#include "shard-command.h"
#include "tpf-ir.h"
#include "tpf-passes.h"

static const char *const shard_help =
	"usage: tpfuse shard MODEL --world-size W -o OUT [OPTIONS]\n"
	"\n"
	"Turn a single-device model into the W rank models of tensor parallelism:\n"
	"attention and MLP projections split Megatron-style (column-parallel\n"
	"q/k/v, gate/up and experts, row-parallel o/down followed by an AllReduce;\n"
	"experts whose weights a Gather picks out of a stacked [E, ...] table split\n"
	"the table on each expert's axis; MLA by heads, its latents whole),\n"
	"the LM head column-parallel with an AllGather of the logits, norms\n"
	"replicated.  The splits are found by propagation from the weights;\n"
	"com.microsoft AllReduce/AllGather go where a split meets an op that\n"
	"needs the whole tensor.  Collectives of a world-size-1 export are dropped\n"
	"first.  A KV cache (past inputs, present outputs) is split like its\n"
	"layer's KV heads; each rank model names the inputs and outputs it holds a\n"
	"part of in its metadata (tp_split_input:NAME, tp_split_output:NAME), from\n"
	"which `tpfuse run` cuts the single-device model's inputs.\n"
	"\n"
	"Options:\n"
	"  --world-size W, -w W        ranks (W >= 1)\n"
	"  -o OUT                      output path; '{rank}' is replaced by the rank\n"
	"                              (required when W > 1); missing folders are\n"
	"                              created; no rank's files may be the input's\n"
	"                              or another rank's (exit 2)\n"
	"  --explain                   say, for every MatMul with a constant (or an\n"
	"                              expert's) weight, which split it got and why,\n"
	"                              every weight kept whole and why, and every\n"
	"                              fallback\n"
	"  --stats                     print counts (splits, collectives, weights)\n"
	"  --vocab-parallel-embedding  split embedding tables over the vocabulary\n"
	"                              (masked lookup + AllReduce); default replicated\n"
	"  --external-data-threshold BYTES\n"
	"                              initializers of at least BYTES go to each rank's\n"
	"                              data file OUT.data (default 1024)\n"
	"  -h, --help                  show this help\n"
	"\n"
	"Exit codes: 0 ok, 1 invalid model, 2 usage error, 3 I/O error, 4 the model\n"
	"cannot be sharded (the error names the node and why).\n";

static int usage(const char *fmt, const char *arg)
{
	fputs("tpfuse: error: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\ntry 'tpfuse shard --help'\n", stderr);
	return 2;
}

/* "--name VALUE" or "--name=VALUE"; 1 matched, 0 other, -1 missing value. */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
	size_t len = strlen(name);
	if (strncmp(argv[*i], name, len))
		return 0;
	if (argv[*i][len] == '=' && name[1] == '-') {
		*val = argv[*i] + len + 1;
		return 1;
	}
	if (argv[*i][len])
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*val = argv[++*i];
	return 1;
}

/* --stats: the counts of struct tpf_shard_stats, in its order. */
static const char *const stat_labels[] = {
	"column-parallel", "  gathered after", "row-parallel", "replicated", "allreduce-inserted",
	"allgather-inserted", "slices-inserted", "weights-split", "inputs-split", "outputs-split",
	"fallbacks", "collectives-dropped",
};

static void print_stats(const struct tpf_shard_stats *st)
{
	const size_t counts[] = {st->column, st->column_gather, st->row, st->replicated,
				 st->allreduce, st->allgather, st->slices, st->weights_split,
				 st->inputs_split, st->outputs_split, st->fallbacks,
				 st->collectives_dropped};

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
		printf("%-22s%zu\n", stat_labels[k], counts[k]);
}

int tpf_cli_shard(int argc, char **argv)
{
	struct tpf_shard_options o = {0};
	struct tpf_shard_stats st;
	const char *in = NULL, *out = NULL, *val;
	long world = -1, thr = 0;
	int stats = 0;
	size_t shown = 0;
	struct tpf_diag *d;
	enum tpf_status s;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int m;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(shard_help, stdout);
			return 0;
		}
		if (!strcmp(a, "--explain")) {
			o.explain = stderr;
			continue;
		}
		if (!strcmp(a, "--stats")) {
			stats = 1;
			continue;
		}
		if (!strcmp(a, "--vocab-parallel-embedding")) {
			o.vocab_parallel_embedding = 1;
			continue;
		}
		if ((m = opt_value(argc, argv, &i, "--world-size", &val)) ||
		    (m = opt_value(argc, argv, &i, "-w", &val))) {
			if (m < 0)
				return usage("option '%s' needs a value", a);
			if (cli_parse_long(val, 1, 4096, &world))
				return usage("--world-size needs a number from 1 to 4096, not '%s'", val);
			continue;
		}
		if ((m = opt_value(argc, argv, &i, "-o", &val)) ||
		    (m = opt_value(argc, argv, &i, "--output", &val))) {
			if (m < 0)
				return usage("option '%s' needs a value", a);
			out = val;
			continue;
		}
		if ((m = opt_value(argc, argv, &i, "--external-data-threshold", &val))) {
			if (m < 0)
				return usage("option '%s' needs a value", a);
			if (cli_parse_long(val, 1, 1L << 40, &thr))
				return usage("--external-data-threshold needs a byte count > 0, not '%s'", val);
			continue;
		}
		if (a[0] == '-' && a[1])
			return usage("unknown option '%s'", a);
		if (in)
			return usage("more than one model given ('%s')", a);
		in = a;
	}
	if (!in)
		return usage("no model given%s", "");
	if (world < 0)
		return usage("no world size given (--world-size W)%s", "");
	if (!out)
		return usage("no output given (-o OUT)%s", "");
	if (world > 1 && !strstr(out, "{rank}"))
		return usage("the output '%s' needs {rank} for more than one rank", out);
	o.world_size = (int)world;
	d = tpf_diag_create();
	if (!d) {
		fputs("tpfuse: error: out of memory\n", stderr);
		return 1;
	}
	s = tpf_shard_file(in, out, &o, (size_t)thr, &st, d);
	cli_print_diag(d, &shown);
	if (!s && stats)
		print_stats(&st);
	tpf_diag_free(d);
	return cli_exit_of(s);
}
