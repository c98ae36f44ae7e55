/*
 * Pass statistics, the pass registry and the pipeline runner.
 *
 * Passes are listed once, in pass-list.h.  Named pipelines are lists of pass
 * names below; "default" is what `tpfuse optimize -O2` runs.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "pattern.h"

/* ------------------------------------------------------------------ registry */

static const struct tpf_pass *const registry[] = {
#define TPF_PASS(id) &tpf_pass_##id,
#include "pass-list.h"
#undef TPF_PASS
};

#define REGISTRY_COUNT (sizeof(registry) / sizeof(registry[0]))

const struct tpf_pass *const *tpf_pass_list(size_t *count)
{
	if (count)
		*count = REGISTRY_COUNT;
	return registry;
}

const struct tpf_pass *tpf_pass_find(const char *name)
{
	size_t i;

	if (!name)
		return NULL;
	for (i = 0; i < REGISTRY_COUNT; i++)
		if (strcmp(registry[i]->name, name) == 0)
			return registry[i];
	return NULL;
}

/* ------------------------------------------------------------ named pipelines
 * Lists of pass names (or other pipeline names).  Edit these to change what
 * `-O1` ("cleanup") and `-O2` ("default") run. */

static const char *const cleanup_pipeline[] = {
	"remove-identity",
	"remove-noop-cast",
	"dce",
	NULL,
};

static const char *const default_pipeline[] = {
	"cleanup",
	"fold-constants",
	"cse",
	"canonicalize-rmsnorm",
	"canonicalize-allgather",
	"fuse-allreduce-rmsnorm",
	"fuse-allreduce-rmsnorm-quant",
	"fuse-sharded-rmsnorm",
	"fuse-sigmoid-gate",
	"fuse-residual-rmsnorm",
	"merge-parallel-matmuls",
	"fuse-swiglu",
	"fuse-rotary-embedding",
	"fuse-attention",
	"coalesce-alltoall",
	"dce",
	NULL,
};

/* Lowering to a backend (passes/lower.c, tpf_lower_for_backend): the
 * backend ops whose kernels the backend has, on a model about to run. */
static const char *const lower_cpu_pipeline[] = {
	"lower-matmul-transb",
	"lower-matmul-transb-int",
	"lower-matmul-fp8",
	"lower-gated-matmul",
	NULL,
};

static const char *const lower_cuda_pipeline[] = {
	"lower-matmul-transb",
	"lower-matmul-fp8",
	"lower-gated-matmul",
	NULL,
};

struct named_pipeline {
	const char *name;
	const char *const *passes;
};

static const struct named_pipeline named_pipelines[] = {
	{"cleanup", cleanup_pipeline},
	{"default", default_pipeline},
	{"lower-cpu", lower_cpu_pipeline},
	{"lower-cuda", lower_cuda_pipeline},
};

#define NAMED_COUNT (sizeof(named_pipelines) / sizeof(named_pipelines[0]))

const char *tpf_pipeline_name(size_t i)
{
	if (i == 0)
		return "none";
	return i <= NAMED_COUNT ? named_pipelines[i - 1].name : NULL;
}

int tpf_pipeline_known(const char *name)
{
	const char *known;

	for (size_t i = 0; name && (known = tpf_pipeline_name(i)); i++)
		if (strcmp(known, name) == 0)
			return 1;
	return 0;
}

/* ---------------------------------------------------------------- statistics */

struct stat_entry {
	char *pass;
	char *counter;
	int64_t value;
};

struct tpf_pass_stats {
	struct stat_entry *entries;
	size_t count, capacity;
};

struct tpf_pass_stats *tpf_pass_stats_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_pass_stats));
}

void tpf_pass_stats_free(struct tpf_pass_stats *s)
{
	size_t i;

	if (!s)
		return;
	for (i = 0; i < s->count; i++) {
		tpf_free(s->entries[i].pass);
		tpf_free(s->entries[i].counter);
	}
	tpf_free(s->entries);
	tpf_free(s);
}

static struct stat_entry *stats_lookup(const struct tpf_pass_stats *s, const char *pass,
				       const char *counter)
{
	size_t i;

	for (i = 0; i < s->count; i++)
		if (strcmp(s->entries[i].pass, pass) == 0 &&
		    strcmp(s->entries[i].counter, counter) == 0)
			return &s->entries[i];
	return NULL;
}

void tpf_pass_stats_add(struct tpf_pass_stats *s, const char *pass, const char *counter,
			int64_t delta)
{
	struct stat_entry *e;

	if (!s || !pass || !counter)
		return;
	e = stats_lookup(s, pass, counter);
	if (!e) {
		struct stat_entry ne = {0};

		if (s->count == s->capacity) {
			size_t cap = s->capacity ? s->capacity * 2 : 16, bytes;
			struct stat_entry *grown;

			if (tpf_mul_size(cap, sizeof(*grown), &bytes))
				return;
			grown = tpf_realloc(s->entries, bytes);
			if (!grown)
				return; /* the counter is lost; statistics are best effort */
			s->entries = grown;
			s->capacity = cap;
		}
		ne.pass = tpf_strdup(pass);
		ne.counter = tpf_strdup(counter);
		if (!ne.pass || !ne.counter) {
			tpf_free(ne.pass);
			tpf_free(ne.counter);
			return;
		}
		s->entries[s->count] = ne;
		e = &s->entries[s->count++];
	}
	e->value += delta;
}

int64_t tpf_pass_stats_get(const struct tpf_pass_stats *s, const char *pass, const char *counter)
{
	const struct stat_entry *e;

	if (!s || !pass || !counter)
		return 0;
	e = stats_lookup(s, pass, counter);
	return e ? e->value : 0;
}

void tpf_pass_stats_print(const struct tpf_pass_stats *s, FILE *f)
{
	size_t i, wp = 4, wc = 7;

	if (!s || !f)
		return;
	for (i = 0; i < s->count; i++) {
		size_t lp = strlen(s->entries[i].pass), lc = strlen(s->entries[i].counter);

		if (lp > wp)
			wp = lp;
		if (lc > wc)
			wc = lc;
	}
	for (i = 0; i < s->count; i++)
		fprintf(f, "%-*s  %-*s  %" PRId64 "\n", (int)wp, s->entries[i].pass, (int)wc,
			s->entries[i].counter, s->entries[i].value);
}

const char *tpf_pass_counter(const struct tpf_pass *p, size_t k)
{
	size_t i, j;

	if (!p)
		return NULL;
	for (i = 0; p->patterns && p->patterns[i]; i++) {
		const char *name = p->patterns[i]->name;
		for (j = 0; j < i && strcmp(p->patterns[j]->name, name) != 0; j++)
			;
		if (j < i)
			continue; /* a name shared with an earlier pattern */
		if (k-- == 0)
			return name;
	}
	for (i = 0; p->counters && p->counters[i]; i++)
		if (k-- == 0)
			return p->counters[i];
	return NULL;
}

/* Sum of a pass's counters: its pattern names and declared counters, or
 * every counter under its name when it has none. */
static int64_t pass_counter_total(const struct tpf_pass_stats *s, const struct tpf_pass *p)
{
	int64_t total = 0;
	const char *name;
	size_t i;

	if (tpf_pass_counter(p, 0)) {
		for (i = 0; (name = tpf_pass_counter(p, i)); i++)
			total += tpf_pass_stats_get(s, p->name, name);
		return total;
	}
	for (i = 0; i < s->count; i++)
		if (strcmp(s->entries[i].pass, p->name) == 0)
			total += s->entries[i].value;
	return total;
}

/* ------------------------------------------------------------ pipeline parse */

struct pass_seq {
	const struct tpf_pass **items;
	size_t count, capacity;
};

static enum tpf_status seq_push(struct pass_seq *q, const struct tpf_pass *p)
{
	if (q->count == q->capacity) {
		size_t cap = q->capacity ? q->capacity * 2 : 16, bytes;
		const struct tpf_pass **grown;

		if (tpf_mul_size(cap, sizeof(*grown), &bytes))
			return TPF_ERR_LIMIT;
		grown = tpf_realloc(q->items, bytes);
		if (!grown)
			return TPF_ERR_NOMEM;
		q->items = grown;
		q->capacity = cap;
	}
	q->items[q->count++] = p;
	return TPF_OK;
}

static enum tpf_status unknown_pass(const char *name, struct tpf_diag *d)
{
	char known[2048];
	size_t i, used = 0;

	known[0] = '\0';
	for (i = 0; i < REGISTRY_COUNT && used < sizeof(known); i++)
		used += (size_t)snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "",
					 registry[i]->name);
	return tpf_diag_fail(d, TPF_ERR_INVALID,
			     "unknown pass '%s' (passes: %s; pipelines: cleanup, default, lower-cpu, lower-cuda, none)",
			     name, known);
}

static enum tpf_status expand_name(const char *name, struct pass_seq *q, int depth,
				   struct tpf_diag *d)
{
	const struct tpf_pass *p;
	enum tpf_status st;
	size_t i, k;

	if (strcmp(name, "none") == 0)
		return TPF_OK;
	for (i = 0; i < NAMED_COUNT; i++) {
		if (strcmp(named_pipelines[i].name, name) != 0)
			continue;
		if (depth > 8)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "pipeline '%s' names itself (nested too deep)", name);
		for (k = 0; named_pipelines[i].passes[k]; k++) {
			st = expand_name(named_pipelines[i].passes[k], q, depth + 1, d);
			if (st)
				return st;
		}
		return TPF_OK;
	}
	p = tpf_pass_find(name);
	if (!p)
		return unknown_pass(name, d);
	return seq_push(q, p);
}

/* "-NAME" in a list: every run of pass NAME that the names before it
 * gave is taken out ("default,-fuse-sigmoid-gate": the default pipeline
 * without that fusion).  A name that is no pass, or a pass not in the
 * sequence so far, is an error (a misspelt name would otherwise remove
 * nothing). */
static enum tpf_status drop_name(const char *name, struct pass_seq *q, struct tpf_diag *d)
{
	const struct tpf_pass *p = tpf_pass_find(name);
	size_t kept = 0;

	if (!p)
		return *name ? unknown_pass(name, d)
			     : tpf_diag_fail(d, TPF_ERR_INVALID, "'-' names no pass (expected -PASS)");
	for (size_t i = 0; i < q->count; i++)
		if (q->items[i] != p)
			q->items[kept++] = q->items[i];
	if (kept == q->count)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "'-%s': the names before it do not run pass '%s' (nothing to take out)", name,
				     name);
	q->count = kept;
	return TPF_OK;
}

/* Splits a comma-separated list (spaces around names ignored) and expands
 * named pipelines ("-NAME" takes a pass out: drop_name).  Reports every unknown name, then fails. */
static enum tpf_status parse_pipeline(const char *list, struct pass_seq *q, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK, first_err = TPF_OK;
	char *copy, *tok, *save = NULL;

	copy = tpf_strdup(list);
	if (!copy)
		return TPF_ERR_NOMEM;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;

		while (*tok == ' ' || *tok == '\t')
			tok++;
		end = tok + strlen(tok);
		while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (!*tok)
			continue;
		st = *tok == '-' ? drop_name(tok + 1, q, d) : expand_name(tok, q, 0, d);
		if (st == TPF_ERR_NOMEM || st == TPF_ERR_LIMIT) {
			first_err = st;
			break;
		}
		if (st && !first_err)
			first_err = st;
	}
	tpf_free(copy);
	return first_err;
}

/* ------------------------------------------------------------------- running */

static int parse_small_int(const char *s, int *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 1000000)
		return -1;
	*out = (int)v;
	return 0;
}

static enum tpf_status write_dump(const struct tpf_model *m, const char *dir, size_t index,
				  const char *name, struct tpf_diag *d)
{
	enum tpf_status st;
	size_t len = strlen(dir) + strlen(name) + 32;
	char *path = tpf_malloc(len);
	FILE *f;

	if (!path)
		return TPF_ERR_NOMEM;
	snprintf(path, len, "%s/%02zu-%s.txt", dir, index, name);
	/* under a temporary name, renamed into place once complete */
	struct tpf_out_file of;
	if ((st = tpf_out_file_open(&of, path, d)))
		goto out_free_path;
	f = fdopen(of.fd, "w");
	if (!f) {
		st = tpf_diag_fail(d, TPF_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
		tpf_out_file_discard(&of);
		goto out_free_path;
	}
	of.fd = -1; /* the stream owns it */
	st = tpf_model_print_text(m, f);
	if (fclose(f) != 0 && !st)
		st = TPF_ERR_IO;
	if (st) {
		tpf_diag_add(d, TPF_SEV_ERROR, "cannot write '%s': %s", path, tpf_status_name(st));
		tpf_out_file_discard(&of);
	} else {
		st = tpf_out_files_commit(&of, 1, d);
	}
out_free_path:
	tpf_free(path);
	return st;
}

static enum tpf_status make_dir(const char *dir, struct tpf_diag *d)
{
	struct stat sb;

	if (mkdir(dir, 0777) == 0)
		return TPF_OK;
	if (errno == EEXIST && stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode))
		return TPF_OK;
	return tpf_diag_fail(d, TPF_ERR_IO, "cannot create folder '%s': %s", dir,
			     errno == EEXIST ? "a file of that name exists" : strerror(errno));
}

enum tpf_status tpf_pipeline_run(struct tpf_model *m, const struct tpf_pipeline_options *o,
				 struct tpf_diag *d)
{
	static const struct tpf_pipeline_options no_options = {0};
	struct pass_seq seq = {0};
	struct tpf_pass_context ctx;
	struct tpf_pass_stats *own_stats = NULL;
	int64_t *before = NULL;
	unsigned char *matched = NULL;
	enum tpf_status st;
	size_t i, j;

	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "no model to optimize");
	if (!o)
		o = &no_options;
	ctx = o->ctx;

	st = parse_pipeline(o->passes ? o->passes : "default", &seq, d);
	if (st)
		goto out_free_seq;

	if (!ctx.stats) {
		own_stats = tpf_pass_stats_create();
		if (!own_stats) {
			st = TPF_ERR_NOMEM;
			goto out_free_seq;
		}
		ctx.stats = own_stats;
	}
	if (!ctx.debug_only) {
		const char *env = getenv("TPF_DEBUG");

		if (env && *env)
			ctx.debug_only = env;
	}
	/* world_size <= 0: unknown; fall back to the model's metadata, else -1 */
	if (ctx.world_size <= 0) {
		int r, w;

		ctx.rank = -1;
		ctx.world_size = -1;
		if (!parse_small_int(tpf_model_metadata(m, "tp_world_size"), &w) && w > 0 &&
		    !parse_small_int(tpf_model_metadata(m, "tp_rank"), &r) && r < w) {
			ctx.rank = r;
			ctx.world_size = w;
		}
	}

	if (seq.count) {
		before = tpf_calloc(seq.count, sizeof(*before));
		matched = tpf_calloc(seq.count, 1);
		if (!before || !matched) {
			st = TPF_ERR_NOMEM;
			goto out_free_counts;
		}
	}

	if (o->print_after_dir) {
		st = make_dir(o->print_after_dir, d);
		if (!st)
			st = write_dump(m, o->print_after_dir, 0, "input", d);
		if (st)
			goto out_free_counts;
	}

	for (i = 0; i < seq.count; i++) {
		const struct tpf_pass *p = seq.items[i];
		int changed = 0;

		/* the counters show up in --stats even when they stay 0 */
		const char *name;
		for (j = 0; (name = tpf_pass_counter(p, j)); j++)
			tpf_pass_stats_add(ctx.stats, p->name, name, 0);
		before[i] = pass_counter_total(ctx.stats, p);
		st = p->run(m, &ctx, &changed, d);
		if (st) {
			tpf_diag_add(d, TPF_SEV_ERROR, "pass '%s' failed: %s", p->name,
				     tpf_status_name(st));
			goto out_free_counts;
		}
		if (pass_counter_total(ctx.stats, p) != before[i] || (!tpf_pass_counter(p, 0) && changed))
			matched[i] = 1;
		if (o->verify_each) {
			st = tpf_model_verify(m, d);
			if (st) {
				tpf_diag_add(d, TPF_SEV_ERROR,
					     "the model fails verification after pass '%s'",
					     p->name);
				goto out_free_counts;
			}
		}
		if (o->print_after_dir) {
			st = write_dump(m, o->print_after_dir, i + 1, p->name, d);
			if (st)
				goto out_free_counts;
		}
	}

	/* one note per pass name, when none of its runs matched anything */
	for (i = 0; i < seq.count; i++) {
		int any = 0, first = 1;

		for (j = 0; j < seq.count; j++) {
			if (seq.items[j] != seq.items[i])
				continue;
			if (j < i)
				first = 0;
			any |= matched[j];
		}
		if (first && !any)
			tpf_diag_add(d, TPF_SEV_NOTE, "pass %s matched nothing", seq.items[i]->name);
	}
	st = TPF_OK;

out_free_counts:
	tpf_free(before);
	tpf_free(matched);
	tpf_pass_stats_free(own_stats);
out_free_seq:
	tpf_free(seq.items);
	return st;
}
