/*
 * tpfuse: the command-line tool.
 *
 *   tpfuse dump MODEL [--format text|dot] [-o FILE]
 *   tpfuse check MODEL
 *   tpfuse optimize IN -o OUT [--passes LIST] [-O0|-O1|-O2] ...
 *   tpfuse passes
 *
 * Exit codes: 0 ok, 1 model or verification error, 2 usage error, 3 I/O
 * error, 4 unsupported.  docs/cli.md is the user guide.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli-util.h"
#include "generate-command.h"
#include "run-command.h"
#include "shard-command.h"
#include "tune-command.h"
#include "tpf-ir.h"
#include "tpf-passes.h"
#include "tpf-runtime.h"

static const char *const exit_codes_help =
	"Exit codes:\n"
	"  0  success\n"
	"  1  the model is invalid or fails verification (or a pass failed)\n"
	"  2  usage error (bad command line)\n"
	"  3  I/O error (a file could not be read or written)\n"
	"  4  unsupported (valid input tpfuse cannot handle, or graphviz missing)\n"
	"  5  run --verify: the optimized graph's outputs differ from the unfused graph's\n";

static const char *const main_help =
	"usage: tpfuse COMMAND [OPTIONS]\n"
	"\n"
	"Graph rewriting for tensor-parallel LLM ONNX models.\n"
	"\n"
	"Commands:\n"
	"  dump      print a model as deterministic text or Graphviz DOT\n"
	"  generate  generate tokens from a model with KV-cache inputs and outputs\n"
	"  env       list the environment variables that tune the runtime and kernels\n"
	"  check     load and verify a model, listing every problem\n"
	"  optimize  run a pass pipeline and write the optimized model\n"
	"  passes    list the registered passes and pipelines\n"
	"  plan      lower a model and print its schedule, buffers, kernels, peak memory\n"
	"  run       execute a model (one process per rank: mpirun -np N tpfuse run ...)\n"
	"  shard     split a single-device model into tensor-parallel rank models\n"
	"  tune      measure the collective paths on this machine's GPUs (under mpirun)\n"
	"\n"
	"Options:\n"
	"  -h, --help     show this help (`tpfuse COMMAND --help` for a command)\n"
	"  --version      print the version\n"
	"\n";

static const char *const dump_help =
	"usage: tpfuse dump MODEL [--format text|dot] [-o FILE] [--no-infer]\n"
	"\n"
	"Prints MODEL as text (values numbered %0, %1, ...; one node a line) or as\n"
	"Graphviz DOT.  Shapes are inferred first unless --no-infer is given.\n"
	"\n"
	"  --format text|dot  output format (default: from FILE's extension, else text)\n"
	"  -o FILE            write to FILE instead of standard output; FILE ending in\n"
	"                     .dot gets DOT, .svg/.png/.pdf a picture rendered by\n"
	"                     graphviz `dot`\n"
	"  --no-infer         print the types stored in the file only\n"
	"\n";

static const char *const check_help =
	"usage: tpfuse check MODEL\n"
	"\n"
	"Loads MODEL, verifies it (SSA, acyclic, inputs defined, arity and dtypes of\n"
	"known ops) and infers shapes, listing every problem on standard error.\n"
	"Prints \"MODEL: ok\" and exits 0 when there is no error.\n"
	"\n";

static const char *const optimize_help =
	"usage: tpfuse optimize IN -o OUT [OPTIONS]\n"
	"\n"
	"Loads IN, verifies it and infers shapes, runs a pass pipeline, verifies the\n"
	"result and writes it to OUT.  IN, OUT and dump paths may contain {rank},\n"
	"replaced by the --rank value.\n"
	"\n"
	"  -o FILE              the optimized model (required)\n"
	"  --passes LIST        comma-separated pass or pipeline names\n"
	"                       (`tpfuse passes` lists them); overrides -O\n"
	"  -O0, -O1, -O2        no passes, \"cleanup\", \"default\" (the default)\n"
	"  --dump-before FILE   dump the input model (after shape inference)\n"
	"  --dump-after FILE    dump the optimized model\n"
	"                       (.dot: DOT; .svg/.png/.pdf: rendered by graphviz;\n"
	"                       otherwise text; \"-\": text on standard output)\n"
	"  --print-after-all DIR  write DIR/00-input.txt and DIR/NN-PASS.txt after\n"
	"                       each pass\n"
	"  --stats              print pass counters on standard output\n"
	"  --explain            print pattern near-misses on standard error\n"
	"  --rank N --world-size N  this file's tensor-parallel rank and the world\n"
	"                       size (else read from metadata tp_rank/tp_world_size)\n"
	"  --verify-each        verify the model after every pass\n"
	"  --external-data-threshold BYTES  initializers of at least BYTES go to\n"
	"                       OUT.data next to OUT (default: only tensors already\n"
	"                       external, or all when the model exceeds 2 GB)\n"
	"\n"
	"Environment: TPF_DEBUG=PASS[,PASS] traces the matching of those passes.\n"
	"\n";

static const char *const env_help =
	"usage: tpfuse env\n"
	"\n"
	"Lists the environment variables that tune tpfuse's runtime and kernels:\n"
	"each name, what it changes, the values it takes and, where it is set, its\n"
	"value here.  An unset or empty variable keeps the default.  Exits 1 when a\n"
	"variable that is set has a value it does not take: `tpfuse run`, `plan`\n"
	"and `tune` refuse to start then, naming it.\n"
	"\n";

static const char *const passes_help =
	"usage: tpfuse passes\n"
	"\n"
	"Lists the registered passes with a one-line summary, and the named pipelines.\n"
	"\n";

/* ------------------------------------------------------------------ messages */

static void verror_msg(const char *fmt, va_list ap)
{
	fputs("tpfuse: error: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

static void error_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void error_msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror_msg(fmt, ap);
	va_end(ap);
}

static int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	verror_msg(fmt, ap);
	va_end(ap);
	fprintf(stderr, "try 'tpfuse %s--help'\n", cmd ? cmd : "");
	return CLI_USAGE;
}

/* ------------------------------------------------------------- arguments */

struct args {
	int argc, i;
	char **argv;
	const char *cmd; /* "dump ", ... for messages */
};

/* Matches "--name VALUE" or "--name=VALUE" (and "-o VALUE"/"-oVALUE" for a
 * one-letter name).  Returns 1 and sets *val on a match, 0 if argv[i] is
 * another option, -1 (after a message) when the value is missing. */
static int opt_value(struct args *a, const char *name, const char **val)
{
	const char *arg = a->argv[a->i];
	size_t len = strlen(name);

	if (strncmp(arg, name, len) != 0)
		return 0;
	if (arg[len] == '=' && name[1] == '-') {
		*val = arg + len + 1;
		return 1;
	}
	if (arg[len] != '\0') {
		if (name[1] != '-' && len == 2) { /* -oFILE */
			*val = arg + len;
			return 1;
		}
		return 0;
	}
	if (a->i + 1 >= a->argc) {
		usage_error(a->cmd, "option '%s' needs a value", name);
		return -1;
	}
	*val = a->argv[++a->i];
	return 1;
}

static int is_help(const char *s)
{
	return strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0;
}

/* A command's --help: its usage, then the exit codes. */
static void print_help(const char *help)
{
	fputs(help, stdout);
	fputs(exit_codes_help, stdout);
}

/* Takes `arg`, not an option, as the command's one model: 0, or the exit
 * code of a usage error. */
static int model_arg(const char *cmd, const char *arg, const char **model)
{
	if (arg[0] == '-' && arg[1])
		return usage_error(cmd, "unknown option '%s'", arg);
	if (*model)
		return usage_error(cmd, "more than one model given ('%s')", arg);
	*model = arg;
	return 0;
}

/* Replaces every "{rank}" in path by rank; a malloc'ed string or NULL. */
static char *subst_rank(const char *path, long rank)
{
	char num[32];
	size_t n = 0, len, nl;
	const char *p;
	char *out, *w;

	snprintf(num, sizeof(num), "%ld", rank);
	nl = strlen(num);
	for (p = strstr(path, "{rank}"); p; p = strstr(p + 6, "{rank}"))
		n++;
	len = strlen(path) + n * nl + 1;
	out = malloc(len);
	if (!out)
		return NULL;
	for (w = out, p = path; *p;) {
		if (strncmp(p, "{rank}", 6) == 0) {
			memcpy(w, num, nl);
			w += nl;
			p += 6;
		} else {
			*w++ = *p++;
		}
	}
	*w = '\0';
	return out;
}

/* ----------------------------------------------------------------- dumping */

enum dump_format { FORMAT_AUTO, FORMAT_TEXT, FORMAT_DOT };

static const char *file_ext(const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *dot = strrchr(path, '.');

	if (!dot || (slash && dot < slash))
		return "";
	return dot + 1;
}

static int is_picture_ext(const char *ext)
{
	return strcmp(ext, "svg") == 0 || strcmp(ext, "png") == 0 || strcmp(ext, "pdf") == 0;
}

static int have_program(const char *name)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (!path || !*path)
		path = "/usr/bin:/bin";
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t len = colon ? (size_t)(colon - path) : strlen(path);

		if (len && len + strlen(name) + 2 < sizeof(buf)) {
			memcpy(buf, path, len);
			buf[len] = '/';
			strcpy(buf + len + 1, name);
			if (access(buf, X_OK) == 0)
				return 1;
		}
		path += len;
		if (*path == ':')
			path++;
	}
	return 0;
}

/* Checks a dump destination before any work is done. */
static int check_dump_target(const char *path, enum dump_format fmt)
{
	if (!path || strcmp(path, "-") == 0 || fmt == FORMAT_TEXT)
		return CLI_OK;
	if (is_picture_ext(file_ext(path)) && !have_program("dot")) {
		error_msg("cannot render '%s': graphviz `dot` is not installed "
			  "(install graphviz, or dump to a .dot or .txt file)",
			  path);
		return CLI_UNSUPPORTED;
	}
	return CLI_OK;
}

/* Pipes the DOT form of m into `dot -TEXT -o file` (`path` names it in
 * messages). */
static int render_picture(const struct tpf_model *m, const char *path, const char *file,
			  const char *ext)
{
	char fmt_arg[16];
	int fds[2], status, rc = CLI_OK;
	enum tpf_status st;
	pid_t pid;
	FILE *f;

	snprintf(fmt_arg, sizeof(fmt_arg), "-T%s", ext);
	if (pipe(fds) != 0) {
		error_msg("cannot run graphviz: %s", strerror(errno));
		return CLI_IO;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		error_msg("cannot run graphviz: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return CLI_IO;
	}
	if (pid == 0) {
		char *argv[] = {"dot", fmt_arg, "-o", (char *)file, NULL};

		dup2(fds[0], STDIN_FILENO);
		close(fds[0]);
		close(fds[1]);
		execvp("dot", argv);
		_exit(127);
	}
	close(fds[0]);
	f = fdopen(fds[1], "w");
	if (!f) {
		close(fds[1]);
		rc = CLI_IO;
	} else {
		st = tpf_model_print_dot(m, f);
		if (fclose(f) != 0 || st)
			rc = CLI_IO;
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
			error_msg("cannot render '%s': graphviz `dot` could not be started", path);
		else
			error_msg("graphviz `dot` failed to render '%s'", path);
		return CLI_IO;
	}
	if (rc)
		error_msg("cannot write the graph to graphviz for '%s'", path);
	return rc;
}

/* Writes the dump of m to `path` ("-" or NULL: standard output), under a
 * temporary name renamed into place once complete (ir/files.c). */
static int write_dump(const struct tpf_model *m, const char *path, enum dump_format fmt)
{
	const char *ext = path && strcmp(path, "-") != 0 ? file_ext(path) : "";
	struct tpf_out_file of = {.fd = -1};
	struct tpf_diag *d = NULL;
	enum tpf_status st;
	size_t shown = 0;
	FILE *f;
	int to_stdout = !path || strcmp(path, "-") == 0, rc = CLI_OK;

	if (fmt == FORMAT_AUTO)
		fmt = strcmp(ext, "dot") == 0 || is_picture_ext(ext) ? FORMAT_DOT : FORMAT_TEXT;
	if (to_stdout) {
		st = fmt == FORMAT_DOT ? tpf_model_print_dot(m, stdout) : tpf_model_print_text(m, stdout);
		if (fflush(stdout) != 0 && !st)
			st = TPF_ERR_IO;
		if (st) {
			error_msg("cannot write the dump to '<stdout>': %s", tpf_status_name(st));
			return st == TPF_ERR_IO ? CLI_IO : CLI_ERROR;
		}
		return CLI_OK;
	}
	if (!(d = tpf_diag_create())) {
		error_msg("out of memory");
		return CLI_ERROR;
	}
	if ((st = tpf_out_file_open(&of, path, d))) {
		cli_print_diag(d, &shown);
		tpf_diag_free(d);
		return cli_exit_of(st);
	}
	if (fmt == FORMAT_DOT && is_picture_ext(ext)) {
		tpf_out_file_close(&of, d);
		rc = render_picture(m, path, of.tmp ? of.tmp : of.path, ext);
		st = rc ? TPF_ERR_IO : TPF_OK;
	} else {
		f = fdopen(of.fd, "w");
		if (!f) {
			error_msg("cannot write '%s': %s", path, strerror(errno));
			st = TPF_ERR_IO;
		} else {
			of.fd = -1; /* the stream owns it */
			st = fmt == FORMAT_DOT ? tpf_model_print_dot(m, f) : tpf_model_print_text(m, f);
			if (fclose(f) != 0 && !st)
				st = TPF_ERR_IO;
			if (st)
				error_msg("cannot write the dump to '%s': %s", path,
					  st == TPF_ERR_IO ? strerror(errno) : tpf_status_name(st));
		}
		rc = st == TPF_ERR_IO ? CLI_IO : cli_exit_of(st);
	}
	if (st)
		tpf_out_file_discard(&of);
	else if ((st = tpf_out_files_commit(&of, 1, d)))
		rc = cli_exit_of(st);
	cli_print_diag(d, &shown);
	tpf_diag_free(d);
	return rc;
}

static int parse_format(const char *cmd, const char *s, enum dump_format *out)
{
	if (strcmp(s, "text") == 0)
		*out = FORMAT_TEXT;
	else if (strcmp(s, "dot") == 0)
		*out = FORMAT_DOT;
	else
		return usage_error(cmd, "unknown format '%s' (text or dot)", s);
	return CLI_OK;
}

/* An ONNX file, or a text dump (a name ending in .txt or .tpf). */
static int load_model(const char *path, struct tpf_model **m, struct tpf_diag *d, size_t *shown)
{
	struct tpf_load_options lo = {0};
	size_t len = strlen(path);
	int text = len > 4 && (strcmp(path + len - 4, ".txt") == 0 || strcmp(path + len - 4, ".tpf") == 0);
	enum tpf_status st = text ? tpf_model_load_text_file(path, m, d)
				  : tpf_model_load_file(path, &lo, m, d);

	if (st) {
		cli_print_diag(d, shown);
		error_msg("cannot load '%s': %s", path, tpf_status_name(st));
		*m = NULL;
		return cli_exit_of(st);
	}
	return CLI_OK;
}

/* A new diagnostic in *d and the model read from `path` into *m: CLI_OK,
 * or the exit code after the messages. */
static int open_model(const char *path, struct tpf_model **m, struct tpf_diag **d, size_t *shown)
{
	*d = tpf_diag_create();
	if (!*d) {
		error_msg("out of memory");
		return CLI_ERROR;
	}
	return load_model(path, m, *d, shown);
}

/* Refuses (TPF_ERR_CONFLICT, the error naming both files) an output that
 * is one of the files the loaded model m comes from (`in` and its external
 * data) or another output: `out` with its data file when out_opt is given,
 * then the dumps (NULL or "-" for none) and the --print-after-all folder's
 * NN-PASS.txt files. */
static enum tpf_status check_outputs(const struct tpf_model *m, const char *in, const char *out,
				     const struct tpf_save_options *out_opt, const char *dump1,
				     const char *dump2, const char *dump_dir, struct tpf_diag *d)
{
	struct tpf_file_set *fs = tpf_file_set_create();
	enum tpf_status st;

	if (!fs)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	st = tpf_file_set_add_model(fs, m, in, d);
	if (!st && out && out_opt)
		st = tpf_file_set_add_model_output(fs, out, out_opt, "the output", d);
	else if (!st && out && strcmp(out, "-") != 0)
		st = tpf_file_set_add_output(fs, out, "the output", d);
	if (!st && dump1 && strcmp(dump1, "-") != 0)
		st = tpf_file_set_add_output(fs, dump1, out_opt ? "--dump-before" : "the dump", d);
	if (!st && dump2 && strcmp(dump2, "-") != 0)
		st = tpf_file_set_add_output(fs, dump2, "--dump-after", d);
	if (!st && dump_dir)
		st = tpf_file_set_add_dump_folder(fs, dump_dir, "the --print-after-all folder", d);
	tpf_file_set_free(fs);
	return st;
}

/* ------------------------------------------------------------------- dump */

static int cmd_dump(int argc, char **argv)
{
	struct args a = {.argc = argc, .argv = argv, .cmd = "dump "};
	enum dump_format fmt = FORMAT_AUTO;
	const char *model = NULL, *out = NULL, *val;
	struct tpf_model *m = NULL;
	struct tpf_diag *d;
	size_t shown = 0;
	int rc, no_infer = 0, r;

	for (a.i = 1; a.i < argc; a.i++) {
		const char *arg = argv[a.i];

		if (is_help(arg)) {
			print_help(dump_help);
			return CLI_OK;
		}
		if ((r = opt_value(&a, "--format", &val)) != 0) {
			if (r < 0)
				return CLI_USAGE;
			if ((rc = parse_format(a.cmd, val, &fmt)) != 0)
				return rc;
		} else if ((r = opt_value(&a, "-o", &val)) != 0) {
			if (r < 0)
				return CLI_USAGE;
			out = val;
		} else if (strcmp(arg, "--no-infer") == 0) {
			no_infer = 1;
		} else if ((rc = model_arg(a.cmd, arg, &model)) != 0) {
			return rc;
		}
	}
	if (!model)
		return usage_error(a.cmd, "no model given");
	if ((rc = check_dump_target(out, fmt)) != 0)
		return rc;

	rc = open_model(model, &m, &d, &shown);
	if (rc)
		goto out_free_diag;
	if (out && (rc = cli_exit_of(check_outputs(m, model, out, NULL, NULL, NULL, NULL, d)))) {
		cli_print_diag(d, &shown);
		tpf_model_free(m);
		goto out_free_diag;
	}
	/* a dump shows what can be inferred; problems are for `check` */
	if (!no_infer)
		tpf_compile(m, &(struct tpf_compile_options){.infer = TPF_INFER_LENIENT}, d);
	rc = write_dump(m, out, fmt);
	cli_print_diag(d, &shown);
	tpf_model_free(m);
out_free_diag:
	tpf_diag_free(d);
	return rc;
}

/* ------------------------------------------------------------------ check */

static int cmd_check(int argc, char **argv)
{
	const char *model = NULL;
	struct tpf_model *m = NULL;
	struct tpf_diag *d;
	enum tpf_status st;
	size_t shown = 0;
	int i, rc;

	for (i = 1; i < argc; i++) {
		if (is_help(argv[i])) {
			print_help(check_help);
			return CLI_OK;
		}
		if ((rc = model_arg("check ", argv[i], &model)) != 0)
			return rc;
	}
	if (!model)
		return usage_error("check ", "no model given");

	rc = open_model(model, &m, &d, &shown);
	if (rc)
		goto out_free_diag;
	st = tpf_compile(m, &(struct tpf_compile_options){TPF_COMPILE_CHECK}, d);
	cli_print_diag(d, &shown);
	if (st || d->error_count) {
		error_msg("'%s': %zu error%s found", model, d->error_count,
			  d->error_count == 1 ? "" : "s");
		rc = st ? cli_exit_of(st) : CLI_ERROR;
		if (rc == CLI_OK)
			rc = CLI_ERROR;
	} else {
		printf("%s: ok (%zu nodes, %zu initializers, %zu functions)\n", model,
		       tpf_graph_count_nodes(m->graph, 1), m->graph->n_initializers,
		       m->n_functions);
	}
	tpf_model_free(m);
out_free_diag:
	tpf_diag_free(d);
	return rc;
}

/* --------------------------------------------------------------- optimize */

struct optimize_opts {
	const char *in, *out, *passes, *dump_before, *dump_after, *print_after_dir;
	const char *olevel;
	int stats, explain, verify_each;
	long rank, world_size;
	const char *external_threshold; /* --external-data-threshold, or NULL */
	size_t external_bytes;
};

/* Checks every name of a --passes list before any work is done. */
static int check_pass_list(const char *list)
{
	const char *p = list;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char name[128];

		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len >= sizeof(name))
			return usage_error("optimize ", "pass name too long in '%s'", list);
		memcpy(name, p, len);
		name[len] = '\0';
		/* "-NAME": a pass taken out of what the names before it run */
		const char *look = name[0] == '-' ? name + 1 : name;
		if (len && !(name[0] != '-' && tpf_pipeline_known(name)) && !tpf_pass_find(look))
			return usage_error("optimize ",
					   "unknown pass '%s' (`tpfuse passes` lists them)", look);
		p += len;
		while (*p && *p != ',')
			p++;
		if (*p == ',')
			p++;
	}
	return CLI_OK;
}

static int parse_optimize(int argc, char **argv, struct optimize_opts *o)
{
	struct args a = {.argc = argc, .argv = argv, .cmd = "optimize "};
	const char *val;
	int r;

	o->rank = -1;
	o->world_size = -1;
	for (a.i = 1; a.i < argc; a.i++) {
		const char *arg = argv[a.i];

		if (is_help(arg)) {
			print_help(optimize_help);
			return -1;
		}
		if (strcmp(arg, "-O0") == 0 || strcmp(arg, "-O1") == 0 || strcmp(arg, "-O2") == 0) {
			o->olevel = arg;
			continue;
		}
		if (strcmp(arg, "--stats") == 0) {
			o->stats = 1;
			continue;
		}
		if (strcmp(arg, "--explain") == 0) {
			o->explain = 1;
			continue;
		}
		if (strcmp(arg, "--verify-each") == 0) {
			o->verify_each = 1;
			continue;
		}
#define VALUE_OPT(name, field)                                                                     \
	if ((r = opt_value(&a, name, &val)) != 0) {                                                \
		if (r < 0)                                                                         \
			return CLI_USAGE;                                                         \
		field = val;                                                                       \
		continue;                                                                          \
	}
		VALUE_OPT("-o", o->out)
		VALUE_OPT("--passes", o->passes)
		VALUE_OPT("--dump-before", o->dump_before)
		VALUE_OPT("--dump-after", o->dump_after)
		VALUE_OPT("--print-after-all", o->print_after_dir)
		VALUE_OPT("--external-data-threshold", o->external_threshold)
#undef VALUE_OPT
		if ((r = opt_value(&a, "--rank", &val)) != 0) {
			if (r < 0)
				return CLI_USAGE;
			if (cli_parse_long(val, 0, 1 << 20, &o->rank))
				return usage_error(a.cmd, "--rank needs a number >= 0, not '%s'",
						   val);
			continue;
		}
		if ((r = opt_value(&a, "--world-size", &val)) != 0) {
			if (r < 0)
				return CLI_USAGE;
			if (cli_parse_long(val, 1, 1 << 20, &o->world_size))
				return usage_error(a.cmd,
						   "--world-size needs a number >= 1, not '%s'",
						   val);
			continue;
		}
		if (arg[0] == '-' && arg[1])
			return usage_error(a.cmd, "unknown option '%s'", arg);
		if (o->in)
			return usage_error(a.cmd, "more than one input model given ('%s')", arg);
		o->in = arg;
	}
	if (!o->in)
		return usage_error(a.cmd, "no input model given");
	if (!o->out)
		return usage_error(a.cmd, "no output file given (-o OUT)");
	if (o->external_threshold) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(o->external_threshold, &end, 10);
		if (errno || !isdigit((unsigned char)*o->external_threshold) || *end || v == 0)
			return usage_error(a.cmd, "--external-data-threshold needs a byte count > 0, not '%s'",
					   o->external_threshold);
		o->external_bytes = (size_t)v;
	}
	if (o->passes && o->olevel)
		return usage_error(a.cmd, "--passes and %s cannot be combined", o->olevel);
	if (o->passes && check_pass_list(o->passes))
		return CLI_USAGE;
	if ((o->rank < 0) != (o->world_size < 0))
		return usage_error(a.cmd, "--rank and --world-size go together");
	if (o->rank >= 0 && o->rank >= o->world_size)
		return usage_error(a.cmd, "--rank %ld is not below --world-size %ld", o->rank,
				   o->world_size);
	return CLI_OK;
}

static int cmd_optimize(int argc, char **argv)
{
	struct optimize_opts o = {0};
	enum tpf_compile_stage failed;
	struct tpf_compile_options co = {.optimize = 1, .verify_after = 1, .failed = &failed};
	struct tpf_pass_stats *stats = NULL;
	struct tpf_model *m = NULL;
	struct tpf_diag *d = NULL;
	char *paths[5] = {NULL};
	const char **targets[5];
	enum tpf_status st;
	size_t shown = 0, k;
	int rc;

	rc = parse_optimize(argc, argv, &o);
	if (rc < 0)
		return CLI_OK; /* --help */
	if (rc)
		return rc;

	targets[0] = &o.in;
	targets[1] = &o.out;
	targets[2] = &o.dump_before;
	targets[3] = &o.dump_after;
	targets[4] = &o.print_after_dir;
	for (k = 0; k < 5; k++) {
		if (!*targets[k] || !strstr(*targets[k], "{rank}"))
			continue;
		if (o.rank < 0)
			return usage_error("optimize ", "'%s' contains {rank}: give --rank and "
							"--world-size",
					   *targets[k]);
		paths[k] = subst_rank(*targets[k], o.rank);
		if (!paths[k]) {
			error_msg("out of memory");
			rc = CLI_ERROR;
			goto out_free_paths;
		}
		*targets[k] = paths[k];
	}
	if ((rc = check_dump_target(o.dump_before, FORMAT_AUTO)) != 0 ||
	    (rc = check_dump_target(o.dump_after, FORMAT_AUTO)) != 0)
		goto out_free_paths;

	d = tpf_diag_create();
	stats = tpf_pass_stats_create();
	if (!d || !stats) {
		error_msg("out of memory");
		rc = CLI_ERROR;
		goto out_free_all;
	}
	rc = load_model(o.in, &m, d, &shown);
	if (rc)
		goto out_free_all;

	/* no output may be an input (the model, its data files) or another
	 * output: refused before anything is written */
	struct tpf_save_options so = {.external_threshold = o.external_bytes};
	if ((st = check_outputs(m, o.in, o.out, &so, o.dump_before, o.dump_after,
				o.print_after_dir, d))) {
		cli_print_diag(d, &shown);
		rc = cli_exit_of(st);
		goto out_free_model;
	}

	st = tpf_compile(m, &(struct tpf_compile_options){TPF_COMPILE_CHECK}, d);
	if (st) {
		cli_print_diag(d, &shown);
		error_msg("the input model '%s' is not valid", o.in);
		rc = cli_exit_of(st);
		goto out_free_model;
	}
	if (o.dump_before && (rc = write_dump(m, o.dump_before, FORMAT_AUTO)) != 0)
		goto out_free_model;

	if (o.passes)
		co.pipeline.passes = o.passes;
	else if (o.olevel && strcmp(o.olevel, "-O0") == 0)
		co.pipeline.passes = "none";
	else if (o.olevel && strcmp(o.olevel, "-O1") == 0)
		co.pipeline.passes = "cleanup";
	else
		co.pipeline.passes = "default";
	co.pipeline.ctx.stats = stats;
	co.pipeline.ctx.explain = o.explain ? stderr : NULL;
	co.pipeline.ctx.rank = (int)o.rank;
	co.pipeline.ctx.world_size = o.world_size > 0 ? (int)o.world_size : 0;
	co.pipeline.verify_each = o.verify_each;
	co.pipeline.print_after_dir = o.print_after_dir;
	st = tpf_compile(m, &co, d);
	if (st) {
		cli_print_diag(d, &shown);
		if (failed == TPF_COMPILE_OUTPUT) {
			error_msg("the optimized model fails verification");
			rc = CLI_ERROR;
		} else {
			error_msg("optimization failed: %s", tpf_status_name(st));
			rc = cli_exit_of(st);
		}
		goto out_print_stats;
	}
	if (o.dump_after && (rc = write_dump(m, o.dump_after, FORMAT_AUTO)) != 0)
		goto out_print_stats;

	st = tpf_model_save_file(m, o.out, &so, d);
	if (st) {
		cli_print_diag(d, &shown);
		error_msg("cannot save '%s': %s", o.out, tpf_status_name(st));
		rc = cli_exit_of(st);
		goto out_print_stats;
	}
	cli_print_diag(d, &shown);

out_print_stats:
	if (o.stats) {
		tpf_pass_stats_print(stats, stdout);
		fflush(stdout);
	}
out_free_model:
	cli_print_diag(d, &shown);
	tpf_model_free(m);
out_free_all:
	tpf_pass_stats_free(stats);
	tpf_diag_free(d);
out_free_paths:
	for (k = 0; k < 5; k++)
		free(paths[k]);
	return rc;
}

/* ----------------------------------------------------------------- passes */

static int cmd_passes(int argc, char **argv)
{
	const struct tpf_pass *const *list;
	size_t n, i, w = 0;

	if (argc > 1 && is_help(argv[1])) {
		fputs(passes_help, stdout);
		return CLI_OK;
	}
	if (argc > 1)
		return usage_error("passes ", "unexpected argument '%s'", argv[1]);
	list = tpf_pass_list(&n);
	for (i = 0; i < n; i++)
		if (strlen(list[i]->name) > w)
			w = strlen(list[i]->name);
	printf("passes:\n");
	for (i = 0; i < n; i++)
		printf("  %-*s  %s\n", (int)w, list[i]->name,
		       list[i]->summary ? list[i]->summary : "");
	printf("pipelines:\n"
	       "  none     no passes (-O0)\n"
	       "  cleanup  clean-up passes (-O1)\n"
	       "  default  the full pipeline (-O2)\n");
	return CLI_OK;
}

/* -------------------------------------------------------------------- env */

static int cmd_env(int argc, char **argv)
{
	if (argc > 1 && is_help(argv[1])) {
		fputs(env_help, stdout);
		return CLI_OK;
	}
	if (argc > 1)
		return usage_error("env ", "unexpected argument '%s'", argv[1]);
	size_t n;
	const struct tpf_env_knob *k = tpf_env_knobs(&n);
	for (size_t i = 0; i < n; i++) {
		char takes[160];
		tpf_env_takes(&k[i], takes, sizeof(takes));
		printf("%s\n    %s\n    takes %s\n", k[i].name, k[i].what, takes);
		const char *v = getenv(k[i].name);
		if (v && *v)
			printf("    set here: \"%s\"%s\n", v,
			       tpf_env_well_formed(&k[i], v) ? "" : " (not a value it takes)");
	}
	fflush(stdout);
	struct tpf_diag *d = tpf_diag_create();
	if (!d)
		return CLI_ERROR;
	enum tpf_status st = tpf_env_check(d);
	size_t shown = 0;
	cli_print_diag(d, &shown);
	tpf_diag_free(d);
	return cli_exit_of(st);
}

/* ------------------------------------------------------------------- main */

/* The commands, by name. */
static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
} commands[] = {
	{"dump", cmd_dump},
	{"env", cmd_env},
	{"check", cmd_check},
	{"optimize", cmd_optimize},
	{"passes", cmd_passes},
	{"run", tpf_cli_run},
	{"generate", tpf_cli_generate},
	{"plan", tpf_cli_plan},
	{"shard", tpf_cli_shard},
	{"tune", tpf_cli_tune},
};

/* Runs the command named argv[0] with argv (its options after it), or
 * returns -1 when there is no such command. */
static int run_command(int argc, char **argv)
{
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[0], commands[i].name) == 0)
			return commands[i].run(argc, argv);
	return -1;
}

int main(int argc, char **argv)
{
	const char *cmd;
	int rc;

	if (argc < 2) {
		fputs(main_help, stderr);
		fputs(exit_codes_help, stderr);
		return CLI_USAGE;
	}
	cmd = argv[1];
	if (is_help(cmd) || strcmp(cmd, "help") == 0) {
		if (strcmp(cmd, "help") == 0 && argc > 2) {
			char *sub[] = {argv[2], "--help", NULL};

			rc = run_command(2, sub);
			return rc >= 0 ? rc : usage_error(NULL, "unknown command '%s'", argv[2]);
		}
		fputs(main_help, stdout);
		fputs(exit_codes_help, stdout);
		return CLI_OK;
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("tpfuse %s\n", TPF_VERSION_STRING);
		return CLI_OK;
	}
	rc = run_command(argc - 1, argv + 1);
	if (rc >= 0)
		return rc;
	if (cmd[0] == '-')
		return usage_error(NULL, "unknown option '%s'", cmd);
	return usage_error(NULL, "unknown command '%s'", cmd);
}
