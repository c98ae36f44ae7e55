/* SPDX-License-Identifier: MIT */
/* `tpfuse run` and `tpfuse plan`: load a (per-rank) model, optionally
 * optimize it, bind inputs from ONNX test data or random values, run it on
 * a backend under MPI or alone, time it, write outputs, and --verify the
 * optimized graph against the unfused one (tpf_verify_outputs, from the
 * runtime).  The argument parsing, help texts, start-up watchdog, messages
 * and exit codes are the command's; the library only returns statuses and
 * diagnostics, which this file prints. */
#include "cli-util.h"
#include "run-command.h"

#include "tpf-passes.h"
#include "tpf-runtime.h"
#ifdef TPF_HAVE_CUDA
#include "tpf-cuda-runtime.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

enum {
	RUN_MISMATCH = 5, /* --verify: the outputs differ (the others: cli-util.h) */
};

static const char *const run_help =
	"usage: tpfuse run MODEL [options]\n"
	"\n"
	"Runs MODEL (a path that may contain {rank}, replaced by this process's\n"
	"rank) on a backend.  Under mpirun every rank runs its own model and the\n"
	"collectives go through MPI; alone it runs as a single rank.\n"
	"\n"
	"Options:\n"
	"  --inputs DIR          inputs from DIR/input_N.pb (ONNX test-data format;\n"
	"                        DIR may contain {rank}); a rank model of tpfuse shard\n"
	"                        takes the inputs it splits (a KV cache) whole or cut\n"
	"  --random-inputs SEED  random inputs from SEED (floats in [-1, 1), integers\n"
	"                        in [0, 4)); symbolic dims are 1 unless --dim is given\n"
	"  --dim NAME=VALUE      value of a symbolic input dim: the size of that dim\n"
	"                        in --random-inputs; with --inputs, an input whose\n"
	"                        dim NAME has another size is an error (NAME a\n"
	"                        symbolic dim of some input, VALUE at least 1)\n"
	"  --outputs DIR         write DIR/output_N.pb (DIR may contain {rank}; under\n"
	"                        several ranks without {rank}: DIR/rank{R}/output_N.pb)\n"
	"  --iters N             timed iterations (default 1); prints each one's time\n"
	"  --warmup N            untimed iterations first (default 0)\n"
	"  --optimize            run the default pass pipeline (-O2) before running\n"
	"  --verify              run the unfused and the optimized graph on the same\n"
	"                        inputs and compare every output: per-dtype bounds;\n"
	"                        after an FP8/FP4 quantizer a share of the elements\n"
	"                        may be one FP8 step off\n"
	"  --backend cpu|cuda    backend (default cpu); cuda under mpirun uses NCCL\n"
	"                        unless --comm mpi\n"
	"  --comm nccl|mpi       (cuda, under mpirun) the communicator: nccl (the\n"
	"                        default; one GPU per rank) or mpi: collectives on\n"
	"                        GPU memory go through host memory and MPI, and\n"
	"                        ranks may share GPUs (a host's rank r takes its\n"
	"                        GPU r modulo the count): a plan for 8 ranks runs on\n"
	"                        2 GPUs, slowly, with the same kernels and peer-\n"
	"                        memory collectives; not with --cuda-graph\n"
	"  --cuda-graph          (cuda) capture the plan into a CUDA graph on the\n"
	"                        second run and replay it afterwards\n"
	"  --profile             time every step of the eager runs on the device and\n"
	"                        print the time per kernel and the slowest steps\n"
	"                        (rank 0; not with --cuda-graph)\n"
	"  --no-oneshot          (cuda, several ranks) run every collective through\n"
	"                        NCCL (MPI with --comm mpi); by default all-reduces\n"
	"                        and fused norms that fit run as one-shot kernels\n"
	"                        through peer memory\n"
	"  --strategy-table FILE (cuda, several ranks) the collective strategy\n"
	"                        table (`tpfuse tune -o FILE`) that picks NCCL,\n"
	"                        one-shot or two-shot per call; default\n"
	"                        TPF_STRATEGY_TABLE, else the built-in table of the GPU\n"
	"  --timeout SECONDS     a collective fails after this long (default 60)\n"
	"  --quiet               print no output summary\n"
	"\n"
	"Ops the backend cannot run are all listed in one error (rank 0), before\n"
	"any input is read or made.  The TPF_* tuning variables (`tpfuse env`\n"
	"lists them) are checked first: one set to a value it does not take is\n"
	"an error naming it.\n"
	"\n"
	"Exit codes: 0 ok, 1 error (also on every rank when one rank fails),\n"
	"2 usage, 3 I/O, 4 unsupported, 5 --verify found a mismatch.\n";

static const char *const plan_help =
	"usage: tpfuse plan MODEL [--inputs DIR | --random-inputs SEED] [--dim NAME=VALUE]\n"
	"                  [--optimize] [--backend cpu|cuda] [--rank N --world-size N]\n"
	"\n"
	"Lowers MODEL for concrete input shapes (from test data, or the declared\n"
	"shapes with symbolic dims from --dim, default 1) and prints the plan: the\n"
	"schedule with the kernel of every step, the communicator steps, the\n"
	"buffers with their arena offsets and live ranges, and peak memory.\n"
	"The TPF_* tuning variables that change kernel choices (`tpfuse env`)\n"
	"apply, and one set to a value it does not take is an error.\n";

struct run_opts {
	const char *model;
	const char *inputs, *outputs;
	int have_seed;
	unsigned long long seed;
	const char *dims[64];
	int n_dims;
	long iters, warmup;
	int optimize, verify, quiet, cuda_graph, no_oneshot, profile;
	const char *comm; /* --comm: NULL (the backend's default), "nccl", "mpi" */
	const char *strategy_table;
	enum tpf_backend backend;
	double timeout;
	int rank, world; /* plan only */
};

static int rank_prefix_rank = -1, rank_prefix_world = 1;

static void msg(const char *kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void msg(const char *kind, const char *fmt, ...)
{
	va_list ap;
	char head[64];
	if (rank_prefix_world > 1)
		snprintf(head, sizeof(head), "tpfuse: rank %d: %s: ", rank_prefix_rank, kind);
	else
		snprintf(head, sizeof(head), "tpfuse: %s: ", kind);
	va_start(ap, fmt);
	cli_vline(head, fmt, ap);
	va_end(ap);
}

static void print_diag(struct tpf_diag *d)
{
	for (size_t i = 0; i < d->count; i++) {
		const struct tpf_diag_entry *e = &d->entries[i];
		msg(e->severity == TPF_SEV_ERROR ? "error" : e->severity == TPF_SEV_WARNING ? "warning" : "note",
		    "%s", e->text);
	}
	tpf_diag_clear(d);
}

/* A refusal every rank reaches alike (status `alike`: unsupported ops of
 * the one graph structure, --outputs of ranks that would share a folder)
 * is printed by rank 0; the other ranks only exit. */
static void print_refusal(struct tpf_diag *d, enum tpf_status st, enum tpf_status alike,
			  const struct tpf_comm *comm)
{
	if (st == alike && comm->world > 1 && comm->rank != 0)
		tpf_diag_clear(d);
	print_diag(d);
}

/* Returns -1 ok, else an exit code. */
/* --dim NAME=VALUE: NAME not empty, VALUE a whole number of at least 1, a
 * NAME given once.  -1 when taken, else the exit code (a usage error). */
static int parse_dim(struct run_opts *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	long v;

	if (!eq || eq == arg) {
		msg("error",
		    "--dim needs NAME=VALUE (a symbolic dim of an input and its size), not '%s'",
		    arg);
		return CLI_USAGE;
	}
	if (cli_parse_long(eq + 1, LONG_MIN, LONG_MAX, &v)) {
		msg("error", "--dim %s: the size '%s' is not a whole number", arg, eq + 1);
		return CLI_USAGE;
	}
	if (v < 1) {
		msg("error", "--dim %s: a dim's size must be at least 1, not %ld", arg, v);
		return CLI_USAGE;
	}
	for (int j = 0; j < o->n_dims; j++) {
		size_t len = (size_t)(eq - arg);
		if (!strncmp(o->dims[j], arg, len) && o->dims[j][len] == '=') {
			msg("error", "--dim %s: dim '%.*s' was already given (--dim %s)", arg,
			    (int)len, arg, o->dims[j]);
			return CLI_USAGE;
		}
	}
	if (o->n_dims >= (int)(sizeof(o->dims) / sizeof(o->dims[0]))) {
		msg("error", "--dim %s: at most %zu --dim options", arg,
		    sizeof(o->dims) / sizeof(o->dims[0]));
		return CLI_USAGE;
	}
	o->dims[o->n_dims++] = arg;
	return -1;
}

static int parse_args(int argc, char **argv, struct run_opts *o, int is_plan)
{
	memset(o, 0, sizeof(*o));
	o->iters = 1;
	o->rank = 0;
	o->world = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *next = i + 1 < argc ? argv[i + 1] : NULL;
		long v;
		int rc;
#define NEED()                                                                                     \
	do {                                                                                       \
		if (!next) {                                                                       \
			msg("error", "%s needs a value", a);                                       \
			return CLI_USAGE;                                                          \
		}                                                                                  \
		i++;                                                                               \
	} while (0)
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(is_plan ? plan_help : run_help, stdout);
			return CLI_OK;
		} else if (!strcmp(a, "--inputs")) {
			NEED();
			o->inputs = next;
		} else if (!strcmp(a, "--outputs") && !is_plan) {
			NEED();
			o->outputs = next;
		} else if (!strcmp(a, "--random-inputs")) {
			NEED();
			char *end;
			errno = 0;
			o->seed = strtoull(next, &end, 10);
			if (!*next || *end || errno) {
				msg("error", "--random-inputs needs a number, not '%s'", next);
				return CLI_USAGE;
			}
			o->have_seed = 1;
		} else if (!strcmp(a, "--dim")) {
			NEED();
			if ((rc = parse_dim(o, next)) >= 0)
				return rc;
		} else if ((!strcmp(a, "--iters") || !strcmp(a, "--warmup")) && !is_plan) {
			NEED();
			if (cli_parse_long(next, 0, LONG_MAX, &v) || (a[2] == 'i' && v < 1)) {
				msg("error", "%s needs a count, not '%s'", a, next);
				return CLI_USAGE;
			}
			if (a[2] == 'i')
				o->iters = v;
			else
				o->warmup = v;
		} else if (!strcmp(a, "--optimize") || !strcmp(a, "-O2")) {
			o->optimize = 1;
		} else if (!strcmp(a, "--verify") && !is_plan) {
			o->verify = 1;
		} else if (!strcmp(a, "--quiet") && !is_plan) {
			o->quiet = 1;
		} else if (!strcmp(a, "--cuda-graph") && !is_plan) {
			o->cuda_graph = 1;
		} else if (!strcmp(a, "--no-oneshot") && !is_plan) {
			o->no_oneshot = 1;
		} else if (!strcmp(a, "--strategy-table") && !is_plan) {
			NEED();
			o->strategy_table = next;
		} else if (!strcmp(a, "--profile") && !is_plan) {
			o->profile = 1;
		} else if (!strcmp(a, "--backend")) {
			NEED();
			if (tpf_backend_from_name(next, &o->backend)) {
				msg("error", "unknown backend '%s' (cpu, cuda)", next);
				return CLI_USAGE;
			}
		} else if (!strcmp(a, "--comm") && !is_plan) {
			NEED();
			if (strcmp(next, "nccl") && strcmp(next, "mpi")) {
				msg("error", "--comm takes nccl or mpi, not '%s'", next);
				return CLI_USAGE;
			}
			o->comm = next;
		} else if (!strcmp(a, "--timeout") && !is_plan) {
			NEED();
			char *end;
			o->timeout = strtod(next, &end);
			if (!*next || *end || !(o->timeout > 0)) {
				msg("error", "--timeout needs a positive number of seconds");
				return CLI_USAGE;
			}
		} else if ((!strcmp(a, "--rank") || !strcmp(a, "--world-size")) && is_plan) {
			NEED();
			if (cli_parse_long(next, 0, LONG_MAX, &v) || v > 1 << 20) {
				msg("error", "%s needs a number", a);
				return CLI_USAGE;
			}
			if (a[2] == 'r')
				o->rank = (int)v;
			else
				o->world = (int)v;
		} else if (a[0] == '-' && a[1]) {
			msg("error", "unknown option '%s' (see tpfuse %s --help)", a, is_plan ? "plan" : "run");
			return CLI_USAGE;
		} else if (!o->model) {
			o->model = a;
		} else {
			msg("error", "more than one model given ('%s', '%s')", o->model, a);
			return CLI_USAGE;
		}
#undef NEED
	}
	if (!o->model) {
		msg("error", "no model given (see tpfuse %s --help)", is_plan ? "plan" : "run");
		return CLI_USAGE;
	}
	if (o->inputs && o->have_seed) {
		msg("error", "--inputs and --random-inputs exclude each other");
		return CLI_USAGE;
	}
	if (o->comm && !strcmp(o->comm, "nccl") && o->backend != TPF_BACKEND_CUDA) {
		msg("error", "--comm nccl needs --backend cuda (the cpu backend's ranks talk through MPI)");
		return CLI_USAGE;
	}
	if (o->comm && !strcmp(o->comm, "mpi") && o->backend == TPF_BACKEND_CUDA && o->cuda_graph) {
		msg("error", "--cuda-graph needs --comm nccl: a collective through host memory cannot be "
			     "captured in a CUDA graph");
		return CLI_USAGE;
	}
	return -1;
}

/* The value --dim NAME=VALUE gives NAME (NAME's length `len`), or -1. */
static int64_t dim_value(const struct run_opts *o, const char *name, size_t len)
{
	for (int j = 0; j < o->n_dims; j++)
		if (!strncmp(o->dims[j], name, len) && o->dims[j][len] == '=')
			return strtoll(o->dims[j] + len + 1, NULL, 10);
	return -1;
}

/* Whether some graph input of m has a symbolic dim named `name` (its length
 * `len`). */
static int model_has_dim(const struct tpf_model *m, const char *name, size_t len)
{
	const struct tpf_graph *g = m->graph;

	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_type *t = &g->inputs[i]->type;
		if (t->kind != TPF_TYPE_TENSOR)
			continue;
		for (int k = 0; k < t->shape.rank; k++) {
			const char *p = t->shape.dims[k].param;
			if (p && strlen(p) == len && !strncmp(p, name, len))
				return 1;
		}
	}
	return 0;
}

/* Every --dim names a symbolic dim of some input of m: CLI_OK, or
 * CLI_USAGE after an error naming the first that does not. */
static int check_dim_names(const struct tpf_model *m, const struct run_opts *o, const char *path,
                           int say)
{
	for (int j = 0; j < o->n_dims; j++) {
		const char *b = o->dims[j];
		size_t len = (size_t)(strchr(b, '=') - b);
		if (model_has_dim(m, b, len))
			continue;
		if (!say)
			return CLI_USAGE;
		msg("error", "--dim %s: no input of '%s' has a symbolic dim named '%.*s'", b, path,
		    (int)len, b);
		const struct tpf_graph *g = m->graph;
		size_t shown = 0;
		for (size_t i = 0; i < g->n_inputs; i++) {
			const struct tpf_type *t = &g->inputs[i]->type;
			for (int k = 0; t->kind == TPF_TYPE_TENSOR && k < t->shape.rank; k++) {
				const char *p = t->shape.dims[k].param;
				if (p && *p && model_has_dim(m, p, strlen(p)) && shown < 16) {
					msg("note", "input '%s' has symbolic dim '%s'",
					    g->inputs[i]->name, p);
					shown++;
				}
			}
		}
		if (!shown)
			msg("note", "the model's inputs have no symbolic dims");
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* Replaces every {rank} in s; a tpf_malloc'ed string. */
static char *subst_rank(const char *s, int rank)
{
	size_t n = strlen(s) + 1;
	for (const char *p = strstr(s, "{rank}"); p; p = strstr(p + 1, "{rank}"))
		n += 16;
	char *out = tpf_malloc(n);
	if (!out)
		return NULL;
	char *w = out;
	while (*s) {
		if (!strncmp(s, "{rank}", 6)) {
			w += sprintf(w, "%d", rank);
			s += 6;
		} else {
			*w++ = *s++;
		}
	}
	*w = 0;
	return out;
}

static int mkdir_p(const char *dir)
{
	char buf[4096];
	size_t n = strlen(dir);
	if (n >= sizeof(buf))
		return -1;
	memcpy(buf, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] == '/' || buf[i] == 0) {
			char c = buf[i];
			buf[i] = 0;
			if (mkdir(buf, 0777) && errno != EEXIST)
				return -1;
			buf[i] = c;
		}
	}
	return 0;
}

/* ------------------------------------------------------------ inputs */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static int is_runtime_input(const struct tpf_value *v)
{
	return !v->init;
}

/* The rank and dims of the random input for v: its declared dims, the
 * --dim value of a symbolic one, 1 for one without either. */
static void random_input_dims(const struct tpf_value *v, const struct run_opts *o,
			      struct tpf_host_tensor *t)
{
	t->rank = v->type.shape.rank;
	for (int k = 0; k < t->rank; k++) {
		const struct tpf_dim *dim = &v->type.shape.dims[k];
		int64_t val = dim->value >= 0 && !dim->param ? dim->value : 1;
		if (dim->param && dim_value(o, dim->param, strlen(dim->param)) > 0)
			val = dim_value(o, dim->param, strlen(dim->param));
		t->dims[k] = val;
	}
}

/* Bytes of the inputs --random-inputs would make (declared shapes, --dim
 * values for symbolic dims, 1 otherwise); -1 when they overflow. */
static int random_input_bytes(const struct tpf_model *m, const struct run_opts *o, size_t *total)
{
	const struct tpf_graph *g = m->graph;
	*total = 0;
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (!is_runtime_input(v) || v->type.kind != TPF_TYPE_TENSOR || v->type.shape.rank < 0 ||
		    v->type.shape.rank > TPF_KERNEL_MAX_RANK)
			continue;
		struct tpf_host_tensor t = {.dtype = v->type.dtype};
		random_input_dims(v, o, &t);
		size_t nb;
		if (tpf_host_tensor_bytes(&t, &nb) || *total + nb < *total)
			return -1;
		*total += nb;
	}
	return 0;
}

/* Data a dry plan is given for an input it need not read (its values
 * decide nothing): never read, never freed. */
static unsigned char shape_only_data;

static void release_inputs(struct tpf_host_tensor *t, size_t count)
{
	for (size_t i = 0; t && i < count; i++)
		if (t[i].data == &shape_only_data)
			t[i].data = NULL;
	tpf_host_tensors_release(t, count);
}

/* The random inputs of seed o->seed; with `shape_only`, an input of more
 * than 4096 elements gets no data of its own (&shape_only_data: a plan
 * reads the values of small inputs only, and those are the same as in the
 * real inputs). */
static enum tpf_status random_inputs_as(const struct tpf_model *m, const struct run_opts *o,
                                        int shape_only, struct tpf_host_tensor **out, size_t *count,
                                        struct tpf_diag *d)
{
	const struct tpf_graph *g = m->graph;
	struct tpf_host_tensor *arr = tpf_calloc(g->n_inputs + 1, sizeof(*arr));
	size_t n = 0;
	uint64_t state = o->seed;
	if (!arr)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (!is_runtime_input(v))
			continue;
		struct tpf_host_tensor *t = &arr[n++];
		if (v->type.kind != TPF_TYPE_TENSOR || v->type.shape.rank < 0 ||
		    v->type.shape.rank > TPF_KERNEL_MAX_RANK || v->type.dtype == TPF_DTYPE_UNDEFINED) {
			release_inputs(arr, n - 1);
			return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
					     "input '%s' has no declared dtype and shape: give --inputs", v->name);
		}
		t->name = tpf_strdup(v->name);
		t->dtype = v->type.dtype;
		random_input_dims(v, o, t);
		size_t nb;
		int64_t numel = 1;
		for (int k = 0; k < t->rank; k++)
			if (__builtin_mul_overflow(numel, t->dims[k], &numel))
				numel = INT64_MAX;
		if (shape_only && numel > 4096 && !tpf_host_tensor_bytes(t, &nb) && t->name) {
			t->data = &shape_only_data;
			t->nbytes = nb;
			/* the generator's state after numel draws, as the real inputs leave it */
			state += (uint64_t)numel * UINT64_C(0x9e3779b97f4a7c15);
			continue;
		}
		if (tpf_host_tensor_bytes(t, &nb) || !(t->data = tpf_calloc(nb ? nb : 1, 1)) || !t->name) {
			release_inputs(arr, n);
			return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': cannot make random data", v->name);
		}
		t->nbytes = nb;
		for (int64_t k = 0; k < numel; k++) {
			uint64_t r = rng_next(&state);
			if (tpf_dtype_is_integral(t->dtype))
				tpf_elem_store_int(t->dtype, t->data, k, (int64_t)(r % 4));
			else
				tpf_elem_store(t->dtype, t->data, k, (double)(r >> 11) * 0x1p-52 - 1.0, 1);
		}
	}
	*out = arr;
	*count = n;
	return TPF_OK;
}

static enum tpf_status random_inputs(const struct tpf_model *m, const struct run_opts *o,
                                     struct tpf_host_tensor **out, size_t *count,
                                     struct tpf_diag *d)
{
	return random_inputs_as(m, o, 0, out, count, d);
}

/* Random inputs this large are made only after a plan for their shapes
 * (built without their data) is known to fit beside them. */
#define DRY_PLAN_MIN_BYTES ((size_t)16 << 20)

/* Before `input_bytes` of random inputs are made: they and the buffers of
 * the plan for their shapes must fit in the memory there is.  A plan that
 * cannot be built here is left for the session to report. */
static enum tpf_status check_random_plan(const struct tpf_model *m, const struct run_opts *o,
                                         int rank, int world, size_t input_bytes,
                                         struct tpf_diag *d)
{
	struct tpf_host_tensor *in = NULL;
	struct tpf_plan *p = NULL;
	struct tpf_plan_stats ps;
	struct tpf_diag *scratch;
	size_t n = 0, need;
	enum tpf_status st;

	if (input_bytes < DRY_PLAN_MIN_BYTES)
		return TPF_OK;
	scratch = tpf_diag_create();
	if (!scratch)
		return TPF_OK;
	st = random_inputs_as(m, o, 1, &in, &n, scratch);
	if (!st) {
		struct tpf_plan_options po = {.backend = o->backend, .rank = rank, .world = world};
		po.dims = o->dims;
		po.n_dims = (size_t)o->n_dims;
		st = tpf_plan_build(m, in, n, &po, &p, scratch);
	}
	release_inputs(in, n);
	tpf_diag_free(scratch);
	if (st)
		return TPF_OK;
	tpf_plan_get_stats(p, &ps);
	tpf_plan_free(p);
	if (o->backend == TPF_BACKEND_CPU) {
		if (tpf_add_size(input_bytes, ps.arena_bytes, &need))
			need = SIZE_MAX;
		st = tpf_memory_check(TPF_BACKEND_CPU, need,
		                      "the random inputs and the plan's buffers", d);
	} else {
		st = tpf_memory_check(o->backend, ps.arena_bytes, "the plan's buffers", d);
	}
	if (st)
		tpf_diag_add(
		    d, TPF_SEV_NOTE,
		    "the inputs take %zu bytes, the plan's arena %zu bytes at its peak (with --dim "
		    "sizes, other symbolic dims 1); nothing was allocated",
		    input_bytes, ps.arena_bytes);
	return st;
}

/* Test-data inputs: matched by name, else by position among the graph
 * inputs that have no initializer. */
static enum tpf_status data_inputs(const struct tpf_model *m, const char *dir,
				   struct tpf_host_tensor **out, size_t *count, struct tpf_diag *d)
{
	/* the files' sizes first: what reading them takes is refused at once */
	size_t bytes = 0;
	char path[4096];
	struct stat sb;
	for (size_t k = 0;
	     (size_t)snprintf(path, sizeof(path), "%s/input_%zu.pb", dir, k) < sizeof(path) &&
	     stat(path, &sb) == 0;
	     k++)
		if (S_ISREG(sb.st_mode) && tpf_add_size(bytes, (size_t)sb.st_size, &bytes))
			bytes = SIZE_MAX;
	enum tpf_status st = tpf_memory_check(TPF_BACKEND_CPU, bytes, "the input files", d);
	if (st)
		return st;
	st = tpf_tensor_read_dir(dir, "input", out, count, d);
	if (st)
		return st;
	const struct tpf_graph *g = m->graph;
	/* Every input without a default needs its file: say which one is
	 * missing here, before the ranks compare their inputs. */
	size_t needed = 0;
	for (size_t i = 0; i < g->n_inputs; i++)
		needed += is_runtime_input(g->inputs[i]);
	if (*count < needed)
		return tpf_diag_fail(d, TPF_ERR_IO,
				     "%s: missing input file input_%zu.pb (the model has %zu inputs "
				     "without a default, the folder holds %zu)",
				     dir, *count, needed, *count);
	size_t pos = 0;
	for (size_t k = 0; k < *count; k++) {
		struct tpf_host_tensor *t = &(*out)[k];
		int named = 0;
		for (size_t i = 0; i < g->n_inputs; i++)
			named |= t->name && !strcmp(t->name, g->inputs[i]->name);
		while (pos < g->n_inputs && !is_runtime_input(g->inputs[pos]))
			pos++;
		if (!named && pos < g->n_inputs) {
			char *nn = tpf_strdup(g->inputs[pos]->name);
			if (!nn)
				return TPF_ERR_NOMEM;
			tpf_free((void *)t->name);
			t->name = nn;
		}
		pos++;
	}
	return TPF_OK;
}

static void summarize(const struct tpf_host_tensor *t, FILE *f)
{
	int64_t n = 1;
	double sum = 0, amax = 0;
	fprintf(f, "output '%s' %s[", t->name, tpf_dtype_name(t->dtype));
	for (int i = 0; i < t->rank; i++) {
		fprintf(f, "%s%lld", i ? "," : "", (long long)t->dims[i]);
		n *= t->dims[i];
	}
	for (int64_t i = 0; i < n; i++) {
		double v = tpf_elem_load(t->dtype, t->data, i);
		sum += v;
		amax = fabs(v) > amax ? fabs(v) : amax;
	}
	fprintf(f, "]: mean %.6g, absmax %.6g, first", n ? sum / (double)n : 0.0, amax);
	for (int64_t i = 0; i < n && i < 4; i++)
		fprintf(f, " %.6g", tpf_elem_load(t->dtype, t->data, i));
	fprintf(f, "\n");
}

/* ------------------------------------------------------------ commands */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Loads the model at `path` and compiles it as `run` and `plan` do: a model
 * that fails verification is refused, while what shape inference cannot
 * tell is left to the runtime, which binds concrete shapes itself; with
 * `optimize`, the default pipeline runs, and only errors are kept ("matched
 * nothing" notes are expected for many models). */
static enum tpf_status load_model(const char *path, enum tpf_backend backend, int rank, int world,
				  int optimize, struct tpf_model **out, struct tpf_diag *d)
{
	struct tpf_compile_options co = {
		.verify_before = 1,
		.infer = TPF_INFER_LENIENT,
		.optimize = optimize,
		.pipeline = {.passes = "default"},
		.min_severity = TPF_SEV_ERROR,
		/* the backend ops of the backend's kernels (passes/lower.c) */
		.target = tpf_backend_name(backend),
	};
	struct tpf_model *m = NULL;
	enum tpf_status st = tpf_model_load_file(path, &(struct tpf_load_options){0}, &m, d);

	if (st)
		return st;
	co.pipeline.ctx.rank = world > 1 ? rank : -1;
	co.pipeline.ctx.world_size = world > 1 ? world : -1;
	if ((st = tpf_compile(m, &co, d))) {
		tpf_model_free(m);
		return st;
	}
	*out = m;
	return TPF_OK;
}

static enum tpf_status get_inputs(const struct tpf_model *m, const struct run_opts *o, int rank,
                                  int world, struct tpf_host_tensor **in, size_t *n_in,
                                  struct tpf_diag *d)
{
	*in = NULL;
	*n_in = 0;
	if (o->inputs) {
		char *dir = subst_rank(o->inputs, rank);
		if (!dir)
			return TPF_ERR_NOMEM;
		enum tpf_status st = data_inputs(m, dir, in, n_in, d);
		tpf_free(dir);
		/* a rank model's split inputs given whole: the rank's part */
		return st ? st : tpf_rank_parts_cut(m, 0, *in, *n_in, d);
	}
	if (o->have_seed) {
		/* the inputs' size first: a huge declared input is refused at once */
		size_t bytes;
		if (random_input_bytes(m, o, &bytes))
			return tpf_diag_fail(d, TPF_ERR_LIMIT, "the random inputs' size overflows");
		enum tpf_status st = tpf_memory_check(TPF_BACKEND_CPU, bytes, "the random inputs", d);
		if (!st)
			st = check_random_plan(m, o, rank, world, bytes, d);
		if (st)
			return st;
		return random_inputs(m, o, in, n_in, d);
	}
	for (size_t i = 0; i < m->graph->n_inputs; i++)
		if (is_runtime_input(m->graph->inputs[i]))
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "the model has inputs: give --inputs DIR or --random-inputs SEED");
	return TPF_OK;
}

/* The folder of this rank's --outputs: DIR with {rank} replaced; under
 * several ranks DIR without {rank} becomes DIR/rank{R}, so no two ranks
 * write one file.  tpf_malloc'ed; NULL on OOM. */
static char *outputs_dir(const struct run_opts *o, int rank, int world)
{
	char *dir = subst_rank(o->outputs, rank);
	if (!dir || world <= 1 || strstr(o->outputs, "{rank}"))
		return dir;
	size_t len = strlen(dir) + 32;
	char *per = tpf_malloc(len);
	if (per)
		snprintf(per, len, "%s/rank%d", dir, rank);
	tpf_free(dir);
	return per;
}

/* Refuses (TPF_ERR_CONFLICT, naming both) an --outputs file that is one of
 * the files the run reads: the model and its external data, the --inputs
 * folder's test data (input_N.pb and the reference outputs output_N.pb),
 * the strategy table.  Before anything is run or written. */
static enum tpf_status check_outputs(const struct run_opts *o, const struct tpf_model *m,
				     const char *model_path, int rank, int world, struct tpf_diag *d)
{
	struct tpf_file_set *fs = tpf_file_set_create();
	char *dir = outputs_dir(o, rank, world), *in_dir = NULL, path[4096];
	const char *table = o->strategy_table ? o->strategy_table : getenv("TPF_STRATEGY_TABLE");
	enum tpf_status st = fs && dir ? TPF_OK : TPF_ERR_NOMEM;
	if (!st)
		st = tpf_file_set_add_model(fs, m, model_path, d);
	if (!st && o->inputs && !(in_dir = subst_rank(o->inputs, rank)))
		st = TPF_ERR_NOMEM;
	for (int k = 0; k < 2 && in_dir && !st; k++) {
		const char *prefix = k ? "output" : "input";
		for (size_t i = 0; !st; i++) {
			struct stat sb;
			snprintf(path, sizeof(path), "%s/%s_%zu.pb", in_dir, prefix, i);
			if (stat(path, &sb) != 0)
				break;
			st = tpf_file_set_add_input(fs, path,
						    k ? "a reference output of --inputs"
						      : "an input of --inputs",
						    d);
		}
	}
	if (!st && table && *table)
		st = tpf_file_set_add_input(fs, table, "the strategy table", d);
	for (size_t i = 0; !st && i < m->graph->n_outputs; i++) {
		snprintf(path, sizeof(path), "%s/output_%zu.pb", dir, i);
		st = tpf_file_set_add_output(fs, path, "the output (--outputs)", d);
	}
	tpf_free(in_dir);
	tpf_free(dir);
	tpf_file_set_free(fs);
	return st;
}

/* Under several ranks, refuses (TPF_ERR_CONFLICT, on every rank) --outputs
 * that make two ranks of one host write one folder ('{rank}/../out'): each
 * rank's resolved folder and host name, hashed, are gathered. */
static enum tpf_status check_rank_outputs(struct tpf_comm *comm, const struct run_opts *o,
					  struct tpf_diag *d)
{
	char *dir = outputs_dir(o, comm->rank, comm->world);
	char *real = dir ? tpf_path_resolve(dir) : NULL, host[256] = "";
	uint64_t key = 1469598103934665603ull, *all = tpf_calloc((size_t)comm->world, sizeof(*all));
	enum tpf_status st = TPF_OK;
	gethostname(host, sizeof(host) - 1);
	for (const char *p = host; real && *p; p++)
		key = (key ^ (unsigned char)*p) * 1099511628211ull;
	key = (key ^ 0) * 1099511628211ull;
	for (const char *p = real; real && *p; p++)
		key = (key ^ (unsigned char)*p) * 1099511628211ull;
	/* every rank takes part in the exchange, whatever failed here */
	uint64_t mine = real && all ? key : 0;
	enum tpf_status cst = all ? comm->ops->allgather(comm, &mine, all, sizeof(mine), NULL, d)
				  : TPF_ERR_NOMEM;
	if (cst)
		st = cst;
	for (int a = 0; a < comm->world && !st; a++)
		for (int b = a + 1; b < comm->world && !st; b++)
			if (all[a] && all[a] == all[b])
				st = tpf_diag_fail(d, TPF_ERR_CONFLICT,
						   "--outputs '%s': rank %d and rank %d would write their "
						   "outputs into one folder%s%s%s: refused, nothing written",
						   o->outputs, a, b, comm->rank == a || comm->rank == b ? " ('" : "",
						   comm->rank == a || comm->rank == b ? dir : "",
						   comm->rank == a || comm->rank == b ? "')" : "");
	tpf_free(all);
	tpf_free(real);
	tpf_free(dir);
	return st;
}

/* DIR/output_N.pb (outputs_dir), every file under a temporary name until
 * all are written: a failure leaves the folder as it was. */
static enum tpf_status write_outputs(const struct run_opts *o, int rank, int world,
				     const struct tpf_host_tensor *outs, size_t n, struct tpf_diag *d)
{
	char *dir = outputs_dir(o, rank, world);
	char path[4096];
	struct tpf_out_file *files = NULL;
	size_t n_open = 0;
	enum tpf_status st = TPF_OK;
	if (!dir)
		return TPF_ERR_NOMEM;
	if (mkdir_p(dir)) {
		st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(errno));
		goto out;
	}
	if (!(files = tpf_calloc(n + 1, sizeof(*files)))) {
		st = TPF_ERR_NOMEM;
		goto out;
	}
	for (size_t i = 0; i < n && !st; i++) {
		snprintf(path, sizeof(path), "%s/output_%zu.pb", dir, i);
		if ((st = tpf_out_file_open(&files[i], path, d)))
			break;
		n_open++;
		st = tpf_tensor_write_pb_to(&files[i], &outs[i], d);
	}
	if (!st)
		st = tpf_out_files_commit(files, n_open, d);
	else
		for (size_t i = 0; i < n_open; i++)
			tpf_out_file_discard(&files[i]);
out:
	tpf_free(files);
	tpf_free(dir);
	return st;
}

/* Copies outputs (the session's are overwritten by the next run). */
static enum tpf_status copy_outputs(const struct tpf_host_tensor *src, size_t n,
				    struct tpf_host_tensor **out)
{
	struct tpf_host_tensor *a = tpf_calloc(n + 1, sizeof(*a));
	if (!a)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < n; i++) {
		a[i] = src[i];
		a[i].name = tpf_strdup(src[i].name);
		a[i].data = tpf_malloc(src[i].nbytes ? src[i].nbytes : 1);
		if (!a[i].name || !a[i].data) {
			tpf_host_tensors_release(a, i + 1);
			return TPF_ERR_NOMEM;
		}
		memcpy(a[i].data, src[i].data, src[i].nbytes);
	}
	*out = a;
	return TPF_OK;
}


/* Joining the ranks (MPI_Init, the NCCL start-up) waits for every rank; a
 * rank that died before it started would make the others wait forever.  An
 * alarm bounds that wait: when it rings the process says why and exits
 * (only async-signal-safe calls in the handler). */
static const char *startup_command = "run"; /* the command the message names */

static void startup_alarm(int sig)
{
	static const char text[] = ": error: the ranks did not all start within the "
				   "--timeout (a rank exited or never started); giving up\n";
	(void)sig;
	ssize_t ignored = write(2, "tpfuse ", 7);
	ignored = write(2, startup_command, strlen(startup_command));
	ignored = write(2, text, sizeof(text) - 1);
	(void)ignored;
	_exit(1);
}

static void startup_watchdog(double timeout_s)
{
	if (timeout_s <= 0) {
		alarm(0);
		signal(SIGALRM, SIG_DFL);
		return;
	}
	signal(SIGALRM, startup_alarm);
	alarm((unsigned)ceil(timeout_s));
}

/* The communicator of a run (run-command.h). */
enum tpf_status tpf_cli_open_comm(const char *command, enum tpf_backend backend, const char *name,
				  double timeout, struct tpf_comm **comm, struct tpf_diag *d)
{
	enum tpf_status st;
	struct tpf_comm_options co = {.timeout_s = timeout};
	startup_command = command;
	startup_watchdog(timeout > 0 ? timeout : 60);
	if (tpf_comm_launched_by_mpi() && backend == TPF_BACKEND_CUDA && name && !strcmp(name, "mpi"))
#ifdef TPF_HAVE_CUDA
		st = tpf_comm_create_cuda_mpi(&co, comm, d);
#else
		st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "--backend cuda: this tpfuse was built without CUDA");
#endif
	else if (tpf_comm_launched_by_mpi() && backend == TPF_BACKEND_CUDA)
#ifdef TPF_HAVE_NCCL
		st = tpf_comm_create_nccl(&co, comm, d);
#else
		st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
				   "--backend cuda under mpirun needs NCCL (this tpfuse was built without it)");
#endif
	else if (tpf_comm_launched_by_mpi())
		st = tpf_comm_create_mpi(&co, comm, d);
	else
		st = tpf_comm_create_self(&co, comm, d);
	startup_watchdog(0);
	return st;
}

/* --outputs: refused on every rank when a file it names is one the run
 * reads, or two ranks would write one folder.  TPF_OK, or the status with
 * the exit code in *rc. */
static enum tpf_status check_run_outputs(const struct run_opts *o, struct tpf_comm *comm,
					 const struct tpf_model *m, const char *path, int *rc,
					 struct tpf_diag *d)
{
	enum tpf_status mine = check_outputs(o, m, path, comm->rank, comm->world, d), st;
	print_diag(d);
	if ((st = tpf_comm_agree(comm, mine, "checking the output files", d))) {
		/* refused on a rank: a usage error on every rank */
		*rc = mine && mine != TPF_ERR_CONFLICT ? cli_exit_of(mine) : CLI_USAGE;
		return st;
	}
	if (comm->world > 1 && (st = check_rank_outputs(comm, o, d))) {
		/* every rank reaches the same verdict */
		print_refusal(d, st, TPF_ERR_CONFLICT, comm);
		*rc = cli_exit_of(st);
	}
	return st;
}

/* o->warmup untimed runs, then o->iters timed ones (each after a barrier
 * under several ranks); rank 0 prints the times when there is more than
 * one run.  *outs: the last run's outputs. */
static enum tpf_status timed_runs(struct tpf_session *s, const struct run_opts *o,
				  struct tpf_comm *comm, const struct tpf_host_tensor *in, size_t n_in,
				  const struct tpf_host_tensor **outs, size_t *n_outs,
				  struct tpf_diag *d)
{
	enum tpf_status st;
	for (long it = 0; it < o->warmup; it++)
		if ((st = tpf_session_run(s, in, n_in, outs, n_outs, d)))
			return st;
	double total = 0, best = INFINITY;
	for (long it = 0; it < o->iters; it++) {
		if (comm->world > 1 && (st = comm->ops->barrier(comm, d)))
			return st;
		double t0 = now_ms();
		if ((st = tpf_session_run(s, in, n_in, outs, n_outs, d)))
			return st;
		double ms = now_ms() - t0;
		total += ms;
		best = ms < best ? ms : best;
		if ((o->iters > 1 || o->warmup > 0) && comm->rank == 0)
			printf("iter %ld: %.3f ms\n", it, ms);
	}
	if ((o->iters > 1 || o->warmup > 0) && comm->rank == 0)
		printf("%ld iterations: mean %.3f ms, min %.3f ms (rank 0 of %d, backend %s)\n", o->iters,
		       total / (double)o->iters, best, comm->world, tpf_backend_name(o->backend));
	return TPF_OK;
}

/* Rank 0's account of the runs: the --profile table, how the collectives
 * and the all-to-alls ran. */
static void print_run_report(struct tpf_session *s, const struct run_opts *o,
			     const struct tpf_comm *comm)
{
	if (comm->rank != 0)
		return;
	if (o->profile)
		tpf_session_profile_print(s, stdout);
	if (!o->quiet && o->backend == TPF_BACKEND_CUDA && comm->world > 1) {
		size_t n_coll, n_one;
		tpf_session_collective_stats(s, &n_coll, &n_one);
		printf("collectives: %zu step%s, %zu through peer memory (one-shot kernels), the rest %s\n", n_coll,
		       n_coll == 1 ? "" : "s", n_one, strcmp(comm->ops->name, "nccl") ? "through MPI" : "NCCL");
	}
	if (!o->quiet && tpf_session_direct_alltoalls(s, NULL)) {
		size_t peer;
		size_t n = tpf_session_direct_alltoalls(s, &peer);
		printf("all-to-alls: %zu coalesced exchange%s run direct between the pieces' buffers (no packing), "
		       "%zu through peer memory\n",
		       n, n == 1 ? "" : "s", peer);
	}
}

char *tpf_cli_rank_path(const char *pattern, int rank)
{
	return subst_rank(pattern, rank);
}

/* tpfuse run with the options o: the exit code. */
static int run_model(struct run_opts o, struct tpf_diag *d)
{
	int rc = -1; /* no exit code yet */
	struct tpf_comm *comm = NULL;
	struct tpf_model *m = NULL, *ref = NULL;
	struct tpf_session *s = NULL, *sref = NULL;
	struct tpf_host_tensor *in = NULL, *ref_out = NULL;
	size_t n_in = 0, n_ref_out = 0;
	char *path = NULL;
	struct tpf_strategy_table *table = NULL;
	enum tpf_status st;
	int synced = 1; /* every rank knows about an error at this point */
	st = tpf_cli_open_comm("run", o.backend, o.comm, o.timeout, &comm, d);
	if (st) {
		print_diag(d);
		return cli_exit_of(st);
	}
	rank_prefix_rank = comm->rank;
	rank_prefix_world = comm->world;

	path = subst_rank(o.model, comm->rank);
	st = path ? TPF_OK : TPF_ERR_NOMEM;
	if (!st)
		st = load_model(path, o.backend, comm->rank, comm->world, o.optimize || o.verify, &m, d);
	if (!st && o.verify)
		st = load_model(path, o.backend, comm->rank, comm->world, 0, &ref, d);
	print_diag(d);
	if ((st = tpf_comm_agree(comm, st, "loading the model", d)))
		goto out;
	/* every rank holds the same inputs: all of them stop here, rank 0 says why */
	st = check_dim_names(m, &o, path, comm->rank == 0) != CLI_OK ? TPF_ERR_INVALID : TPF_OK;
	if ((st = tpf_comm_agree(comm, st, "checking --dim", d))) {
		rc = CLI_USAGE;
		goto out;
	}
	if (o.outputs && (st = check_run_outputs(&o, comm, m, path, &rc, d)))
		goto out;
	/* a malformed table is an error on every backend (line and file named) */
	if (o.strategy_table) {
		st = tpf_strategy_load(o.strategy_table, &table, d);
		if (st)
			tpf_diag_add(d, TPF_SEV_ERROR, "(the file --strategy-table names)");
		print_diag(d);
		if ((st = tpf_comm_agree(comm, st, "reading the strategy table", d)))
			goto out;
	}
	/* sessions before inputs: ops the backend cannot run are named before
	 * any input is read or made */
	struct tpf_session_options so = {.backend = o.backend, .comm = comm,
					 .cuda_graph = o.cuda_graph, .no_oneshot = o.no_oneshot,
					 .profile = o.profile, .strategy = table};
	so.plan.dims = o.dims;
	so.plan.n_dims = (size_t)o.n_dims;
	so.check_rank_files = 1; /* once: the reference session reads the same files */
	st = tpf_session_create(m, &so, &s, d);
	so.check_rank_files = 0;
	if (!st && ref)
		st = tpf_session_create(ref, &so, &sref, d);
	print_refusal(d, st, TPF_ERR_UNSUPPORTED, comm);
	if ((st = tpf_comm_agree(comm, st, "creating the session", d)))
		goto out;
	st = get_inputs(ref ? ref : m, &o, comm->rank, comm->world, &in, &n_in, d);
	print_diag(d);
	if ((st = tpf_comm_agree(comm, st, "reading the inputs", d)))
		goto out;
	/* plans for these inputs, every rank learning whether any failed */
	if (sref)
		st = tpf_session_prepare(sref, in, n_in, d);
	if (!st)
		st = tpf_session_prepare(s, in, n_in, d);
	print_refusal(d, st, TPF_ERR_UNSUPPORTED, comm);
	if (st)
		goto out;

	const struct tpf_host_tensor *outs = NULL;
	size_t n_outs = 0;
	if (sref) {
		synced = 0;
		if ((st = tpf_session_run(sref, in, n_in, &outs, &n_outs, d)))
			goto out;
		if ((st = copy_outputs(outs, n_outs, &ref_out)))
			goto out;
		n_ref_out = n_outs;
	}
	synced = 0;
	if ((st = timed_runs(s, &o, comm, in, n_in, &outs, &n_outs, d)))
		goto out;
	synced = 1;
	print_run_report(s, &o, comm);
	if (o.outputs)
		st = write_outputs(&o, comm->rank, comm->world, outs, n_outs, d);
	if (!o.quiet && comm->rank == 0 && !st)
		for (size_t i = 0; i < n_outs; i++)
			summarize(&outs[i], stdout);
	if (!st && sref) {
		int vr = tpf_verify_outputs(ref->graph, m->graph, ref_out, n_ref_out, outs, n_outs,
					    comm->world > 1 ? comm->rank : -1, stdout);
		fflush(stdout);
		if (vr > 0) {
			msg("error", "--verify: the optimized graph's outputs differ from the unfused graph's");
			rc = RUN_MISMATCH;
		} else if (vr) {
			st = tpf_diag_fail(d, TPF_ERR_NOMEM, "--verify: out of memory");
		}
	}
	print_diag(d);
	st = tpf_comm_agree(comm, st, "writing outputs", d);
out:
	print_diag(d);
	if (rc < 0 || rc == CLI_OK)
		rc = cli_exit_of(st);
	if (st && !synced && comm && comm->world > 1) {
		fflush(stdout);
		fflush(stderr);
		tpf_comm_abort(comm, rc ? rc : 1);
	}
	tpf_session_free(s);
	tpf_session_free(sref);
	tpf_strategy_free(table);
	tpf_host_tensors_release(in, n_in);
	tpf_host_tensors_release(ref_out, n_ref_out);
	tpf_model_free(m);
	tpf_model_free(ref);
	tpf_free(path);
	tpf_comm_free(comm);
	return rc;
}

/* tpfuse plan with the options o: the exit code. */
static int plan_model(struct run_opts o, struct tpf_diag *d)
{
	struct tpf_model *m = NULL;
	struct tpf_plan *p = NULL;
	struct tpf_host_tensor *in = NULL;
	size_t n_in = 0;
	char *path = NULL;
	enum tpf_status st;
	if (o.rank < 0 || o.world < 1 || o.rank >= o.world) {
		msg("error", "--rank %d is outside --world-size %d", o.rank, o.world);
		return CLI_USAGE;
	}
	path = subst_rank(o.model, o.rank);
	st = path ? load_model(path, o.backend, o.rank, o.world, o.optimize, &m, d) : TPF_ERR_NOMEM;
	if (!st && check_dim_names(m, &o, path, 1) != CLI_OK) {
		print_diag(d);
		tpf_model_free(m);
		tpf_free(path);
		return CLI_USAGE;
	}
	if (!st) {
		if (!o.inputs && !o.have_seed)
			o.have_seed = 1; /* shapes only: declared dims */
		/* a plan reads the values of small inputs only: large random
		 * ones are not made, and the plan's size is shown, not refused */
		if (o.inputs)
			st = get_inputs(m, &o, o.rank, o.world, &in, &n_in, d);
		else
			st = random_inputs_as(m, &o, 1, &in, &n_in, d);
	}
	if (!st) {
		struct tpf_plan_options po = {.backend = o.backend, .rank = o.rank, .world = o.world};
		st = tpf_plan_build(m, in, n_in, &po, &p, d);
	}
	if (!st)
		st = tpf_plan_print(p, stdout);
	print_diag(d);
	tpf_plan_free(p);
	release_inputs(in, n_in);
	tpf_model_free(m);
	tpf_free(path);
	return cli_exit_of(st);
}

/* Parses the command line of run (or plan) and runs the command. */
static int run_or_plan(int argc, char **argv, int is_plan)
{
	struct run_opts o;
	struct tpf_diag *d;
	int rc = parse_args(argc, argv, &o, is_plan);

	if (rc >= 0)
		return rc;
	d = tpf_diag_create();
	if (!d)
		return CLI_ERROR;
	rc = is_plan ? plan_model(o, d) : run_model(o, d);
	tpf_diag_free(d);
	return rc;
}

int tpf_cli_run(int argc, char **argv)
{
	return run_or_plan(argc, argv, 0);
}

int tpf_cli_plan(int argc, char **argv)
{
	return run_or_plan(argc, argv, 1);
}
