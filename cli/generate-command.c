/* SPDX-License-Identifier: MIT */
/*
 * `tpfuse generate`: token generation from a model with KV-cache I/O
 * (docs/generate.md).  The arguments, the prompts (from the command line
 * or a file), the messages and the printing are here; the loop is the
 * runtime's generator (runtime/generate.c), the pairing of the cache's
 * inputs and outputs the IR's (ir/kv-cache.c).
 */
#include "cli-util.h"
#include "generate-command.h"
#include "run-command.h"

#include "tpf-passes.h"
#include "tpf-runtime.h"

#include <stdarg.h>
#include <string.h>
#include <time.h>

static const char *const generate_help =
	"usage: tpfuse generate MODEL [options]\n"
	"\n"
	"Generates tokens from MODEL, a language model that carries its key/value\n"
	"cache as inputs and outputs (input_ids, attention_mask, position_ids,\n"
	"past_key_values.N.key/value -> logits, present.N.key/value; or\n"
	"past_key.N/past_value.N -> present_key.N/present_value.N).  The prompts\n"
	"are left-padded into one batch; the first step runs them whole, each\n"
	"later step one token per prompt.  MODEL may contain {rank}, replaced by\n"
	"this process's rank: under mpirun every rank runs the same loop on its\n"
	"own model.  Prints the generated ids of each prompt, one line each.\n"
	"\n"
	"The model is compiled as `run --optimize` does (the default pipeline),\n"
	"then the pass kv-cache-in-place writes its cache in place: one buffer a\n"
	"layer of a fixed length on the device, so that every decode step has\n"
	"the same shapes (one plan, one CUDA graph).  A model the pass does not\n"
	"take runs with its cache copied from step to step.  For greedy\n"
	"generation (no --temperature, no --suppress) the pass greedy-next-token\n"
	"makes the model give each step's token ids (ArgMax on the device)\n"
	"instead of its logits, and last-position-logits computes them for\n"
	"the last position of a call only.\n"
	"\n"
	"Options:\n"
	"  --prompt-ids IDS      a prompt: token ids separated by commas or spaces\n"
	"                        (repeat for a batch)\n"
	"  --prompts FILE        prompts from FILE, one a line (ids separated by\n"
	"                        commas or spaces; empty lines skipped)\n"
	"  --max-new-tokens N    tokens to generate per prompt (default 32)\n"
	"  --eos ID[,ID]         a prompt stops after generating one of these\n"
	"  --suppress ID[,ID]    never generate these ids\n"
	"  --pad-id ID           the padding id (default 0)\n"
	"  --temperature T       sample with temperature T (default 0: greedy)\n"
	"  --top-k K             sample from the K most likely tokens only\n"
	"  --top-p P             sample from the fewest most likely tokens that\n"
	"                        hold probability P\n"
	"  --seed N              the sampling seed (default 0): the same seed and\n"
	"                        logits give the same tokens, on every rank\n"
	"  --backend cpu|cuda    backend (default cpu)\n"
	"  --cuda-graph          CUDA: capture the decode step into a graph on its\n"
	"                        second run and replay it afterwards (the prefill\n"
	"                        runs eagerly)\n"
	"  --max-length N        the in-place cache's positions (default: the\n"
	"                        longest prompt plus --max-new-tokens)\n"
	"  --prefill-chunk N     run the prompt in calls of at most N positions\n"
	"                        (the cache in place; default: whole, halved\n"
	"                        while its plan's memory does not fit, at one rank)\n"
	"  --no-in-place         keep the model's cache I/O: each step's presents\n"
	"                        are copied back in as the next pasts (a plan per\n"
	"                        length)\n"
	"  --no-optimize         run the model as exported (no fusions, no\n"
	"                        in-place cache)\n"
	"  --without PASSES      compile without these passes of the pipeline\n"
	"                        (comma-separated names, each one it runs: a\n"
	"                        fusion's effect on generation is the difference)\n"
	"  --warmup N            generate N times untimed first (the plans built\n"
	"                        and the CUDA graphs captured then; the figures\n"
	"                        are the last generation's)\n"
	"  --timeout SECONDS     a collective fails after this long (default 60)\n"
	"  --json                print {\"tokens\": [[...], ...], \"stats\": {...}}\n"
	"  --stats               print the time to the first token, decode tokens/s,\n"
	"                        the step latency (p50, p99) and the plans built\n"
	"  --profile             time every step of each plan's runs on the device\n"
	"                        (the prefill's, the decode step's; a plan's first\n"
	"                        run is left out: time the prefill with --warmup 1)\n"
	"                        and print, per plan, the time per kernel and the\n"
	"                        slowest steps (rank 0; to standard error with\n"
	"                        --json; not with --cuda-graph)\n"
	"\n"
	"Progress goes to standard error every 5 seconds of a long run.\n"
	"\n"
	"Exit codes: 0 ok, 1 error (a model without KV-cache I/O, a token id outside\n"
	"the vocabulary; on every rank when one rank fails), 2 usage, 3 I/O,\n"
	"4 unsupported.\n";

struct gen_opts {
	const char *model;
	int64_t **prompts;
	size_t *prompt_len, n_prompts;
	int64_t *eos, *suppress;
	size_t n_eos, n_suppress;
	struct tpf_generate_options g;
	enum tpf_backend backend;
	double timeout;
	int json, stats, profile;
	int no_optimize, no_in_place, cuda_graph;
	size_t warmup; /* untimed generations first */
	const char *without; /* --without: passes taken out of the pipeline */
};

static int say_rank = -1; /* the rank in messages; -1 alone */

static void say(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void say(const char *kind, const char *fmt, ...)
{
	va_list ap;
	char head[64];
	if (say_rank >= 0)
		snprintf(head, sizeof(head), "tpfuse: rank %d: %s: ", say_rank, kind);
	else
		snprintf(head, sizeof(head), "tpfuse: %s: ", kind);
	va_start(ap, fmt);
	cli_vline(head, fmt, ap);
	va_end(ap);
}

static void say_diag(struct tpf_diag *d)
{
	static const char *const kinds[] = {"note", "warning", "error"};
	for (size_t i = 0; i < d->count; i++) {
		unsigned sv = (unsigned)d->entries[i].severity;
		say(sv < 3 ? kinds[sv] : "error", "%s", d->entries[i].text ? d->entries[i].text : "");
	}
	tpf_diag_clear(d);
}

/* Token ids separated by commas and blanks into a tpf_malloc'ed array:
 * their count, or -1 when one is not a whole number of 0 or more (or out
 * of memory: *ids NULL). */
static long parse_ids(const char *s, int64_t **ids)
{
	size_t n = 0, cap = 16;
	*ids = tpf_malloc(cap * sizeof(**ids));
	while (*ids) {
		while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
			s++;
		if (!*s)
			return (long)n;
		char *end;
		errno = 0;
		long long v = strtoll(s, &end, 10);
		if (end == s || errno || v < 0 || (*end && !strchr(", \t\r\n", *end)))
			break; /* not a token id */
		if (n == cap) {
			int64_t *grown = tpf_realloc(*ids, 2 * cap * sizeof(**ids));
			if (!grown)
				break;
			*ids = grown;
			cap *= 2;
		}
		(*ids)[n++] = v;
		s = end;
	}
	tpf_free(*ids);
	*ids = NULL;
	return -1;
}

static int add_prompt(struct gen_opts *o, int64_t *ids, size_t n)
{
	int64_t **p = tpf_realloc(o->prompts, (o->n_prompts + 1) * sizeof(*p));
	if (p)
		o->prompts = p;
	size_t *l = p ? tpf_realloc(o->prompt_len, (o->n_prompts + 1) * sizeof(*l)) : NULL;
	if (!l) {
		tpf_free(ids);
		say("error", "out of memory");
		return CLI_ERROR;
	}
	o->prompt_len = l;
	o->prompts[o->n_prompts] = ids;
	o->prompt_len[o->n_prompts++] = n;
	return -1;
}

/* --prompts FILE: one prompt a line.  -1 when read, else the exit code. */
static int read_prompts(struct gen_opts *o, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		say("error", "--prompts: cannot read '%s': %s", path, strerror(errno));
		return CLI_IO;
	}
	char *line = NULL;
	size_t cap = 0, no = 0;
	int rc = -1;
	while (rc < 0 && getline(&line, &cap, f) >= 0) {
		int64_t *ids;
		long n = parse_ids(line, &ids);
		no++;
		if (n < 0) {
			say("error", "--prompts: %s:%zu: not token ids (whole numbers separated by commas "
				     "or spaces)", path, no);
			rc = CLI_USAGE;
		} else if (n == 0) {
			tpf_free(ids);
		} else {
			rc = add_prompt(o, ids, (size_t)n);
		}
	}
	free(line);
	fclose(f);
	return rc;
}

/* A list option (--prompt-ids, --eos, --suppress).  -1 when taken. */
static int list_arg(const char *opt, const char *val, int64_t **ids, size_t *n)
{
	long k = parse_ids(val, ids);
	if (k <= 0) {
		say("error", "%s needs token ids (whole numbers separated by commas or spaces), not '%s'",
		    opt, val);
		tpf_free(*ids);
		*ids = NULL;
		return CLI_USAGE;
	}
	*n = (size_t)k;
	return -1;
}

/* A number option.  -1 when taken. */
static int number_arg(const char *opt, const char *val, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(val, &end);
	if (!*val || *end || errno || !(v >= lo && v <= hi)) {
		say("error", "%s needs a number from %g to %g, not '%s'", opt, lo, hi, val);
		return CLI_USAGE;
	}
	*out = v;
	return -1;
}

/* The value options: -1 when taken, else the exit code. */
static int value_arg(struct gen_opts *o, const char *a, const char *v)
{
	double x;
	int rc;
	if (!strcmp(a, "--prompt-ids")) {
		int64_t *ids = NULL;
		size_t n;
		return (rc = list_arg(a, v, &ids, &n)) >= 0 ? rc : add_prompt(o, ids, n);
	}
	if (!strcmp(a, "--prompts"))
		return read_prompts(o, v);
	if (!strcmp(a, "--eos"))
		return tpf_free(o->eos), list_arg(a, v, &o->eos, &o->n_eos);
	if (!strcmp(a, "--suppress"))
		return tpf_free(o->suppress), list_arg(a, v, &o->suppress, &o->n_suppress);
	if (!strcmp(a, "--without")) {
		/* every name a pass (the pipeline says whether it runs it) */
		char name[128];
		for (const char *p = v; *p;) {
			size_t n = strcspn(p, ",");
			if (!n || n >= sizeof(name)) {
				say("error", "--without needs pass names separated by commas, not '%s'", v);
				return CLI_USAGE;
			}
			memcpy(name, p, n);
			name[n] = '\0';
			if (!tpf_pass_find(name)) {
				say("error", "--without: unknown pass '%s' (`tpfuse passes` lists them)", name);
				return CLI_USAGE;
			}
			p += n + (p[n] == ',');
		}
		if (!*v) {
			say("error", "--without needs pass names separated by commas");
			return CLI_USAGE;
		}
		o->without = v;
		return -1;
	}
	if (!strcmp(a, "--seed")) {
		char *end;
		errno = 0;
		o->g.seed = strtoull(v, &end, 10);
		if (!*v || *v == '-' || *end || errno) {
			say("error", "--seed needs a whole number of 0 or more, not '%s'", v);
			return CLI_USAGE;
		}
		return -1;
	}
	if (!strcmp(a, "--backend")) {
		if (strcmp(v, "cpu") && strcmp(v, "cuda")) {
			say("error", "--backend must be cpu or cuda, not '%s'", v);
			return CLI_USAGE;
		}
		o->backend = v[1] == 'p' ? TPF_BACKEND_CPU : TPF_BACKEND_CUDA;
		return -1;
	}
	if ((rc = !strcmp(a, "--temperature")   ? number_arg(a, v, 0, 1e6, &o->g.temperature)
		  : !strcmp(a, "--top-p")       ? number_arg(a, v, 0, 1, &o->g.top_p)
		  : !strcmp(a, "--timeout")     ? number_arg(a, v, 0, 1e9, &o->timeout)
						: -2) != -2)
		return rc;
	if ((rc = number_arg(a, v, !strcmp(a, "--max-new-tokens") ? 1 : 0, 1e9, &x)) >= 0)
		return rc;
	if (x != (double)(int64_t)x) {
		say("error", "%s needs a whole number, not '%s'", a, v);
		return CLI_USAGE;
	}
	if (!strcmp(a, "--max-new-tokens"))
		o->g.max_new_tokens = (size_t)x;
	else if (!strcmp(a, "--top-k"))
		o->g.top_k = (long)x;
	else if (!strcmp(a, "--max-length"))
		o->g.max_length = (size_t)x;
	else if (!strcmp(a, "--prefill-chunk"))
		o->g.prefill_chunk = (size_t)x;
	else if (!strcmp(a, "--warmup"))
		o->warmup = (size_t)x;
	else
		o->g.pad_id = (int64_t)x;
	return -1;
}

/* -1 when the arguments are taken, else the exit code. */
static int parse_args(int argc, char **argv, struct gen_opts *o)
{
	static const char *const with_value[] = {
		"--prompt-ids", "--prompts", "--max-new-tokens", "--eos", "--suppress", "--pad-id",
		"--temperature", "--top-k", "--top-p", "--seed", "--backend", "--timeout", "--max-length",
		"--prefill-chunk", "--warmup", "--without"};
	o->g.max_new_tokens = 32;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int takes = 0, rc;
		for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
			takes |= !strcmp(a, with_value[k]);
		if (takes) {
			if (i + 1 >= argc) {
				say("error", "%s needs a value", a);
				return CLI_USAGE;
			}
			if ((rc = value_arg(o, a, argv[++i])) >= 0)
				return rc;
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(generate_help, stdout);
			return CLI_OK;
		} else if (!strcmp(a, "--json") || !strcmp(a, "--stats") || !strcmp(a, "--profile")) {
			*(a[2] == 'j' ? &o->json : a[2] == 's' ? &o->stats : &o->profile) = 1;
		} else if (!strcmp(a, "--no-optimize") || !strcmp(a, "--no-in-place") || !strcmp(a, "--cuda-graph")) {
			*(a[2] == 'c' ? &o->cuda_graph : a[5] == 'o' ? &o->no_optimize : &o->no_in_place) = 1;
		} else if (a[0] == '-' && a[1]) {
			say("error", "unknown option '%s' (see tpfuse generate --help)", a);
			return CLI_USAGE;
		} else if (o->model) {
			say("error", "one MODEL only ('%s' and '%s')", o->model, a);
			return CLI_USAGE;
		} else {
			o->model = a;
		}
	}
	if (o->profile && o->cuda_graph) {
		say("error", "--profile times the steps of eager runs: not with --cuda-graph");
		return CLI_USAGE;
	}
	if (!o->model || !o->n_prompts) {
		say("error", !o->model ? "no MODEL (see tpfuse generate --help)"
				       : "no prompt: give --prompt-ids or --prompts");
		return CLI_USAGE;
	}
	o->g.eos_ids = o->eos;
	o->g.n_eos = o->n_eos;
	o->g.suppress_ids = o->suppress;
	o->g.n_suppress = o->n_suppress;
	return -1;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

struct progress {
	double start, last;
	size_t max_steps;
};

static void show_progress(void *arg, size_t step)
{
	struct progress *p = arg;
	double t = now_ms();
	if (t - p->last < 5000)
		return;
	p->last = t;
	say("note", "step %zu of at most %zu (%.1f s)", step, p->max_steps, (t - p->start) / 1e3);
}

/* load_ms: from the start of loading to a session ready to run (the model
 * read and compiled, its constants on the device, the prompts added). */
static void print_results(const struct gen_opts *o, const struct tpf_generator *gen, double load_ms)
{
	struct tpf_generate_stats s;
	tpf_generator_stats(gen, &s);
	size_t first = tpf_generator_count(gen);
	double tps = s.decode_ms > 0 ? (double)(s.new_tokens - first) * 1e3 / s.decode_ms : 0;
	if (o->json)
		fputs("{\"tokens\": [", stdout);
	for (size_t i = 0; i < tpf_generator_count(gen); i++) {
		const int64_t *ids;
		size_t n = tpf_generator_tokens(gen, i, &ids);
		if (o->json)
			fputs(i ? ", [" : "[", stdout);
		else
			printf("prompt %zu:", i);
		for (size_t j = 0; j < n; j++)
			printf(o->json ? (j ? ", %lld" : "%lld") : " %lld", (long long)ids[j]);
		fputs(o->json ? "]" : "\n", stdout);
	}
	if (o->json)
		printf("], \"stats\": {\"steps\": %zu, \"new_tokens\": %zu, \"ttft_ms\": %.3f, "
		       "\"decode_ms\": %.3f, \"decode_tokens_per_s\": %.1f, \"step_p50_ms\": %.3f, "
		       "\"step_p99_ms\": %.3f, \"plans_built\": %zu, \"cache_in_place\": %s, "
		       "\"cache_length\": %zu, \"cache_bytes\": %zu, \"prefill_calls\": %zu, "
		       "\"graphs_captured\": %lu, \"graph_replays\": %lu, \"device_bytes\": %zu, "
		       "\"peak_rss_bytes\": %zu, \"load_ms\": %.3f}}\n",
		       s.steps, s.new_tokens, s.ttft_ms, s.decode_ms, tps, s.step_p50_ms, s.step_p99_ms,
		       s.plans_built, s.in_place ? "true" : "false", s.cache_length, s.cache_bytes,
		       s.prefill_calls, s.graphs_captured, s.graph_replays, s.device_bytes, s.peak_rss_bytes,
		       load_ms);
	else if (o->stats)
		printf("model load: %.3f ms (read, compiled, session ready)\n"
		       "time to first token: %.3f ms\n"
		       "decode: %zu tokens in %.3f ms (%.1f tokens/s)\n"
		       "step latency: p50 %.3f ms, p99 %.3f ms (%zu decode steps)\n"
		       "plans built: %zu; CUDA graphs captured: %lu, replayed: %lu\n"
		       "memory: %.1f MiB held by the session on the %s, peak resident %.1f MiB\n",
		       load_ms, s.ttft_ms, s.new_tokens - first, s.decode_ms, tps, s.step_p50_ms, s.step_p99_ms,
		       s.steps ? s.steps - 1 : 0, s.plans_built, s.graphs_captured, s.graph_replays,
		       (double)s.device_bytes / 1048576.0, o->backend == TPF_BACKEND_CUDA ? "GPU" : "host",
		       (double)s.peak_rss_bytes / 1048576.0);
	if (!o->json && o->stats && s.in_place)
		printf("cache: in place, %zu positions, %.1f MiB; the prompt in %zu call%s\n", s.cache_length,
		       (double)s.cache_bytes / 1048576.0, s.prefill_calls, s.prefill_calls == 1 ? "" : "s");
	else if (!o->json && o->stats)
		printf("cache: copied from each step to the next\n");
}

/* FNV-1a over every sequence's tokens: what the ranks compare. */
static uint64_t tokens_hash(const struct tpf_generator *gen)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < tpf_generator_count(gen); i++) {
		const int64_t *ids;
		size_t n = tpf_generator_tokens(gen, i, &ids);
		for (size_t j = 0; j <= n; j++)
			h = (h ^ (uint64_t)(j < n ? ids[j] : -1)) * 0x100000001b3ull;
	}
	return h;
}

/* Loads and compiles the model as `run --optimize` does, then writes its
 * cache in place (unless told not to); only errors are kept. */
static enum tpf_status load(const struct gen_opts *o, const char *path, const struct tpf_comm *comm,
			    struct tpf_model **m, struct tpf_diag *d)
{
	/* [in place][greedy]: greedy generation without suppressed ids reads
	 * the model's own next_token (greedy-next-token) */
	static const char *const pipelines[2][2] = {
		{"default,last-position-logits", "default,last-position-logits,greedy-next-token"},
		{"default,kv-cache-in-place,cleanup,last-position-logits",
		 "default,kv-cache-in-place,cleanup,last-position-logits,greedy-next-token"},
	};
	int greedy = o->g.temperature <= 0 && !o->n_suppress;
	enum tpf_status st = tpf_model_load_file(path, &(struct tpf_load_options){0}, m, d);
	if (st)
		return st;
	/* --without a,b: "PIPELINE,-a,-b" (each must be a pass it runs) */
	char passes[1024];
	const char *base = pipelines[!o->no_in_place][greedy];
	size_t used = (size_t)snprintf(passes, sizeof(passes), "%s", base);
	for (const char *p = o->without; p && *p && used < sizeof(passes);) {
		size_t n = strcspn(p, ",");
		used += (size_t)snprintf(passes + used, sizeof(passes) - used, ",-%.*s", (int)n, p);
		p += n + (p[n] == ',');
	}
	if (used >= sizeof(passes))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "--without: too many pass names");
	struct tpf_compile_options co = {
		.verify_before = 1,
		.infer = TPF_INFER_LENIENT,
		.optimize = !o->no_optimize,
		.pipeline = {.passes = passes},
		.min_severity = TPF_SEV_ERROR,
		.target = o->no_optimize ? NULL : tpf_backend_name(o->backend),
	};
	co.pipeline.ctx.rank = comm->world > 1 ? comm->rank : -1;
	co.pipeline.ctx.world_size = comm->world > 1 ? comm->world : -1;
	return tpf_compile(*m, &co, d);
}

/* Every rank passes its status: prints this rank's messages, then all
 * learn whether any failed. */
static enum tpf_status agree(struct tpf_comm *comm, enum tpf_status st, const char *phase,
			     struct tpf_diag *d)
{
	say_diag(d);
	st = tpf_comm_agree(comm, st, phase, d);
	if (st && comm->world > 1 && comm->rank != 0)
		tpf_diag_clear(d); /* rank 0 says which rank failed */
	say_diag(d);
	return st;
}

static int generate(struct gen_opts *o, struct tpf_diag *d)
{
	struct tpf_comm *comm = NULL;
	struct tpf_model *m = NULL;
	struct tpf_session *s = NULL;
	struct tpf_generator *gen = NULL;
	struct tpf_kv_io io = {0};
	char *path = NULL;
	int failed_alone = 0; /* a failure on this rank alone, after the ranks stopped agreeing */
	enum tpf_status st = tpf_cli_open_comm("generate", o->backend, NULL, o->timeout, &comm, d);
	if (st) {
		say_diag(d);
		return cli_exit_of(st);
	}
	say_rank = comm->world > 1 ? comm->rank : -1;
	path = tpf_cli_rank_path(o->model, comm->rank);
	double load_start = now_ms();
	st = path ? load(o, path, comm, &m, d) : tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	if (!st)
		st = tpf_kv_io_find(m->graph, &io, d);
	if ((st = agree(comm, st, "loading the model", d)))
		goto out;
	st = tpf_session_create(m, &(struct tpf_session_options){.backend = o->backend, .comm = comm,
								 .check_rank_files = 1, .cuda_graph = o->cuda_graph,
								 .profile = o->profile},
				&s, d);
	if (!st)
		st = tpf_generator_create(s, &io, &o->g, &gen, d);
	for (size_t i = 0; !st && i < o->n_prompts; i++)
		st = tpf_generator_add_prompt(gen, o->prompts[i], o->prompt_len[i], d);
	if ((st = agree(comm, st, "creating the session", d)))
		goto out;
	double load_ms = now_ms() - load_start;
	for (size_t w = 0; w <= o->warmup && !st; w++) {
		if (w)
			tpf_generator_reset(gen);
		struct progress p = {.start = now_ms(), .last = now_ms(), .max_steps = o->g.max_new_tokens};
		st = tpf_generator_run(gen, comm->rank == 0 ? show_progress : NULL, &p, d);
		if (w < o->warmup && (st = agree(comm, st, "generating (warm-up)", d)))
			goto out;
	}
	failed_alone = st != TPF_OK;
	if (!st && comm->world > 1 && o->backend == TPF_BACKEND_CPU)
		if ((st = tpf_comm_check_same(comm, tokens_hash(gen), "the generated tokens", d)) &&
		    comm->rank != 0)
			tpf_diag_clear(d); /* every rank knows; rank 0 says it */
	if (!st && comm->rank == 0)
		print_results(o, gen, load_ms);
	if (!st && comm->rank == 0 && o->profile) {
		FILE *f = o->json ? stderr : stdout;
		fflush(stdout);
		if (!o->json)
			fputc('\n', f);
		tpf_session_profile_print_plans(s, f);
	}
	fflush(stdout);
	if (!st)
		st = agree(comm, st, "generating", d);
out:
	say_diag(d);
	int rc = cli_exit_of(st);
	if (failed_alone && comm->world > 1) {
		fflush(stderr);
		tpf_comm_abort(comm, rc);
	}
	tpf_generator_free(gen);
	tpf_session_free(s);
	tpf_kv_io_release(&io);
	tpf_model_free(m);
	tpf_free(path);
	tpf_comm_free(comm);
	return rc;
}

int tpf_cli_generate(int argc, char **argv)
{
	struct gen_opts o = {.backend = TPF_BACKEND_CPU};
	int rc = parse_args(argc, argv, &o);
	if (rc < 0) {
		struct tpf_diag *d = tpf_diag_create();
		rc = d ? generate(&o, d) : CLI_ERROR;
		tpf_diag_free(d);
	}
	for (size_t i = 0; i < o.n_prompts; i++)
		tpf_free(o.prompts[i]);
	tpf_free(o.prompts);
	tpf_free(o.prompt_len);
	tpf_free(o.eos);
	tpf_free(o.suppress);
	return rc;
}
