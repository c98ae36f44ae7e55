/* SPDX-License-Identifier: MIT */
/*
 * Runs a pass test written as text (tests/passes/NAME.tpf, docs/passes.md):
 *
 *   # PASSES: canonicalize-rmsnorm,fuse-allreduce-rmsnorm
 *   # OPTIONS: rank=0 world-size=2 idempotent      (also: unchanged, no-verify)
 *   # STATS: fuse-allreduce-rmsnorm allreduce-rmsnorm 1
 *   # CHECK: = ai.tpfuse.AllReduceRMSNorm(%0, %1)
 *   # CHECK-NOT: AllReduce(
 *   # EXPLAIN: near-miss: fuse-allreduce-rmsnorm/allreduce-rmsnorm
 *   ir_version 10
 *   graph "" {
 *     ...
 *   }
 *   # -----                          the next case of the file
 *   ...
 *   # OUTPUT:                        the rest of the case: the expected dump
 *
 * The input is read with tpf_model_parse_text (directives are comments to
 * it), verified, run through the pipeline with the verifier after each
 * pass, and the checks are applied to the text dump after the pipeline
 * (CHECK), the --explain output (EXPLAIN) and the pipeline's notes (DIAG).
 * A case without PASSES or OPTIONS takes those of the case before it.
 *
 *   pass-file-test FILE...            exit 0 when every case passes
 *   pass-file-test --update FILE...   rewrites the OUTPUT blocks with what
 *                                     the pipeline now prints
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-passes.h"

#define MAX_FILE ((size_t)16 << 20)

/* ------------------------------------------------------------------ text */

struct lines {
	const char **at; /* start of each line */
	size_t *len;     /* its length without '\n' */
	size_t n;
};

static int split_lines(const char *text, struct lines *out)
{
	size_t cap = 16;

	out->n = 0;
	out->at = malloc(cap * sizeof(*out->at));
	out->len = malloc(cap * sizeof(*out->len));
	if (!out->at || !out->len)
		return -1;
	for (const char *s = text; *s;) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		if (out->n == cap) {
			cap *= 2;
			const char **a = realloc(out->at, cap * sizeof(*a));
			if (a)
				out->at = a;
			size_t *l = realloc(out->len, cap * sizeof(*l));
			if (l)
				out->len = l;
			if (!a || !l)
				return -1;
		}
		out->at[out->n] = s;
		out->len[out->n] = len;
		out->n++;
		s += len + (nl ? 1 : 0);
	}
	return 0;
}

static void free_lines(struct lines *l)
{
	free(l->at);
	free(l->len);
}

static int line_contains(const struct lines *l, size_t i, const char *pat)
{
	size_t n = strlen(pat);

	if (n == 0)
		return l->len[i] == 0;
	for (size_t k = 0; k + n <= l->len[i]; k++)
		if (memcmp(l->at[i] + k, pat, n) == 0)
			return 1;
	return 0;
}

static char *read_file(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0;

	if (!f) {
		fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		if (len + 1 >= cap) {
			cap = cap ? cap * 2 : 65536;
			if (cap > MAX_FILE) {
				fprintf(stderr, "%s: larger than %zu bytes\n", path, MAX_FILE);
				goto fail;
			}
			char *nb = realloc(buf, cap);
			if (!nb)
				goto fail;
			buf = nb;
		}
		size_t got = fread(buf + len, 1, cap - len - 1, f);
		len += got;
		if (!got)
			break;
	}
	if (ferror(f))
		goto fail;
	fclose(f);
	buf[len] = '\0';
	*size = len;
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

/* ------------------------------------------------------------------ checks */

enum check_kind { CHECK_PLAIN, CHECK_NEXT, CHECK_NOT, CHECK_COUNT, CHECK_EMPTY };
enum stream { STREAM_DUMP, STREAM_EXPLAIN, STREAM_DIAG, STREAM_COUNT };

static const char *const stream_names[STREAM_COUNT] = {"CHECK", "EXPLAIN", "DIAG"};

struct check {
	enum stream stream;
	enum check_kind kind;
	long count; /* CHECK_COUNT */
	char *pattern;
	regex_t *re; /* the pattern compiled, when it has {{regex}} parts */
	unsigned line; /* in the file */
};

/* Compiles "text {{regex}} text" into ck->re: text outside the braces
 * matches itself, inside is a POSIX extended regular expression. */
static int compile_pattern(const char *path, struct check *ck)
{
	const char *p = ck->pattern;
	size_t cap = 4 * strlen(p) + 1, n = 0;
	char *ere;

	if (!strstr(p, "{{"))
		return 0;
	ere = malloc(cap);
	if (!ere)
		return -1;
	while (*p) {
		if (p[0] == '{' && p[1] == '{') {
			const char *e = strstr(p + 2, "}}");
			if (!e) {
				fprintf(stderr, "%s:%u: '{{' without '}}'\n", path, ck->line);
				free(ere);
				return -1;
			}
			ere[n++] = '(';
			memcpy(ere + n, p + 2, (size_t)(e - p - 2));
			n += (size_t)(e - p - 2);
			ere[n++] = ')';
			p = e + 2;
			continue;
		}
		if (strchr(".[]()*+?{}|^$\\", *p))
			ere[n++] = '\\';
		ere[n++] = *p++;
	}
	ere[n] = '\0';
	ck->re = malloc(sizeof(*ck->re));
	int rc = ck->re ? regcomp(ck->re, ere, REG_EXTENDED | REG_NOSUB) : REG_ESPACE;
	if (rc) {
		char msg[128] = "out of memory";
		if (ck->re)
			regerror(rc, ck->re, msg, sizeof(msg));
		fprintf(stderr, "%s:%u: bad regular expression '%s': %s\n", path, ck->line, ere, msg);
		free(ck->re);
		ck->re = NULL;
		free(ere);
		return -1;
	}
	free(ere);
	return 0;
}

/* Whether output line i matches the check's pattern. */
static int line_matches(const struct lines *l, size_t i, const struct check *ck)
{
	if (!ck->re)
		return line_contains(l, i, ck->pattern);
	char *copy = malloc(l->len[i] + 1);
	if (!copy)
		return 0;
	memcpy(copy, l->at[i], l->len[i]);
	copy[l->len[i]] = '\0';
	int hit = regexec(ck->re, copy, 0, NULL, 0) == 0;
	free(copy);
	return hit;
}

struct stat_check {
	char pass[128], counter[128];
	long long value;
	unsigned line;
};

struct test_case {
	unsigned first_line; /* 1-based line of the case's first line in the file */
	char *input;         /* the case's text before OUTPUT, with blank lines in front so
	                        line numbers match the file */
	char *output;        /* expected dump, or NULL */
	unsigned output_line;
	char *passes;
	int rank, world, idempotent, unchanged, no_verify;
	struct check *checks;
	size_t n_checks;
	struct stat_check *stats;
	size_t n_stats;
};

static void free_case(struct test_case *c)
{
	free(c->input);
	free(c->output);
	free(c->passes);
	for (size_t i = 0; i < c->n_checks; i++) {
		if (c->checks[i].re) {
			regfree(c->checks[i].re);
			free(c->checks[i].re);
		}
		free(c->checks[i].pattern);
	}
	free(c->checks);
	free(c->stats);
	memset(c, 0, sizeof(*c));
}

static char *dup_trimmed(const char *s, size_t n)
{
	while (n && (*s == ' ' || *s == '\t')) {
		s++;
		n--;
	}
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		n--;
	char *r = malloc(n + 1);
	if (r) {
		memcpy(r, s, n);
		r[n] = '\0';
	}
	return r;
}

/* Reads a directive line ("# NAME: text" after the '#').  1 when the line
 * was one, 0 when it is a plain comment, -1 on a malformed directive. */
static int parse_directive(const char *path, unsigned line_no, const char *s, size_t n,
			   struct test_case *c)
{
	const char *colon = memchr(s, ':', n);
	char name[64];
	size_t k;

	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(name))
		return 0;
	for (k = 0; s + k < colon; k++) {
		char ch = s[k];
		if (!((ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-'))
			return 0; /* not an upper-case word: a comment */
		name[k] = ch;
	}
	name[k] = '\0';
	static const char *const known[] = {"PASSES", "OPTIONS", "STATS", "OUTPUT", "CHECK", "EXPLAIN",
					    "DIAG"};
	int is_known = 0;
	for (size_t j = 0; j < sizeof(known) / sizeof(known[0]); j++)
		is_known |= strncmp(name, known[j], strlen(known[j])) == 0;
	if (!is_known)
		return 0; /* "# NOTE: ..." is a comment */
	const char *arg = colon + 1;
	size_t alen = n - (size_t)(arg - s);

	if (strcmp(name, "PASSES") == 0) {
		free(c->passes);
		c->passes = dup_trimmed(arg, alen);
		return c->passes ? 1 : -1;
	}
	if (strcmp(name, "OPTIONS") == 0) {
		char *opts = dup_trimmed(arg, alen), *save = NULL;
		if (!opts)
			return -1;
		c->rank = c->world = -1;
		c->idempotent = c->unchanged = c->no_verify = 0;
		for (char *tok = strtok_r(opts, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
			if (strncmp(tok, "rank=", 5) == 0) {
				c->rank = atoi(tok + 5);
			} else if (strncmp(tok, "world-size=", 11) == 0) {
				c->world = atoi(tok + 11);
			} else if (strcmp(tok, "idempotent") == 0) {
				c->idempotent = 1;
			} else if (strcmp(tok, "unchanged") == 0) {
				c->unchanged = 1;
			} else if (strcmp(tok, "no-verify") == 0) {
				c->no_verify = 1;
			} else {
				fprintf(stderr, "%s:%u: unknown option '%s' (rank=N, world-size=N, "
					"idempotent, unchanged, no-verify)\n", path, line_no, tok);
				free(opts);
				return -1;
			}
		}
		free(opts);
		return 1;
	}
	if (strcmp(name, "STATS") == 0) {
		struct stat_check sc = {.line = line_no};
		char *a = dup_trimmed(arg, alen);
		if (!a || sscanf(a, "%127s %127s %lld", sc.pass, sc.counter, &sc.value) != 3) {
			fprintf(stderr, "%s:%u: expected 'STATS: PASS COUNTER VALUE'\n", path, line_no);
			free(a);
			return -1;
		}
		free(a);
		struct stat_check *grown = realloc(c->stats, (c->n_stats + 1) * sizeof(*grown));
		if (!grown)
			return -1;
		c->stats = grown;
		c->stats[c->n_stats++] = sc;
		return 1;
	}
	for (int st = 0; st < STREAM_COUNT; st++) {
		size_t pl = strlen(stream_names[st]);
		struct check ck = {.stream = (enum stream)st, .line = line_no};
		if (strncmp(name, stream_names[st], pl) != 0)
			continue;
		const char *suffix = name + pl;
		if (!*suffix) {
			ck.kind = CHECK_PLAIN;
		} else if (strcmp(suffix, "-NEXT") == 0) {
			ck.kind = CHECK_NEXT;
		} else if (strcmp(suffix, "-NOT") == 0) {
			ck.kind = CHECK_NOT;
		} else if (strcmp(suffix, "-EMPTY") == 0) {
			ck.kind = CHECK_EMPTY;
		} else if (strncmp(suffix, "-COUNT-", 7) == 0 && suffix[7]) {
			char *end;
			ck.kind = CHECK_COUNT;
			ck.count = strtol(suffix + 7, &end, 10);
			if (*end || ck.count < 0) {
				fprintf(stderr, "%s:%u: bad count in %s\n", path, line_no, name);
				return -1;
			}
		} else {
			fprintf(stderr, "%s:%u: unknown directive %s (%s, -NEXT, -NOT, -COUNT-N, -EMPTY)\n",
				path, line_no, name, stream_names[st]);
			return -1;
		}
		ck.pattern = dup_trimmed(arg, alen);
		if (!ck.pattern)
			return -1;
		if (ck.kind != CHECK_EMPTY && !*ck.pattern) {
			fprintf(stderr, "%s:%u: %s needs a pattern\n", path, line_no, name);
			free(ck.pattern);
			return -1;
		}
		if (compile_pattern(path, &ck)) {
			free(ck.pattern);
			return -1;
		}
		struct check *grown = realloc(c->checks, (c->n_checks + 1) * sizeof(*grown));
		if (!grown) {
			if (ck.re) {
				regfree(ck.re);
				free(ck.re);
			}
			free(ck.pattern);
			return -1;
		}
		c->checks = grown;
		c->checks[c->n_checks++] = ck;
		return 1;
	}
	if (strcmp(name, "OUTPUT") == 0)
		return 1;
	fprintf(stderr, "%s:%u: unknown directive '%s:' (PASSES, OPTIONS, STATS, OUTPUT, CHECK..., "
		"EXPLAIN..., DIAG...)\n", path, line_no, name);
	return -1;
}

/* Whether a line from `from` on holds more than blanks. */
static int has_content(const struct lines *l, size_t from)
{
	for (size_t i = from; i < l->n; i++)
		for (size_t k = 0; k < l->len[i]; k++)
			if (l->at[i][k] != ' ' && l->at[i][k] != '\t' && l->at[i][k] != '\r')
				return 1;
	return 0;
}

/* Splits the file into cases ("# -----" lines) and reads their directives.
 * Returns the number of cases, -1 on errors. */
static long read_cases(const char *path, const char *text, struct test_case **out)
{
	struct lines l;
	struct test_case *cases = NULL;
	size_t n = 0;
	long rc = -1;

	if (split_lines(text, &l))
		return -1;
	size_t i = 0;
	for (;;) {
		struct test_case *grown = realloc(cases, (n + 1) * sizeof(*grown));
		if (!grown)
			goto out;
		cases = grown;
		struct test_case *c = &cases[n++];
		memset(c, 0, sizeof(*c));
		c->rank = c->world = -1;
		if (n > 1) { /* inherited from the case before */
			struct test_case *prev = &cases[n - 2];
			c->rank = prev->rank;
			c->world = prev->world;
			c->idempotent = prev->idempotent;
			c->unchanged = prev->unchanged;
			c->no_verify = prev->no_verify;
			c->passes = prev->passes ? strdup(prev->passes) : NULL;
		}
		c->first_line = (unsigned)i + 1;
		size_t start = i, input_end, out_start = 0, out_end = 0;
		int in_output = 0;
		for (; i < l.n; i++) {
			const char *s = l.at[i];
			size_t len = l.len[i];
			while (len && (*s == ' ' || *s == '\t')) {
				s++;
				len--;
			}
			if (len >= 7 && strncmp(s, "# -----", 7) == 0)
				break;
			if (in_output || !len || *s != '#')
				continue;
			const char *d = s + 1;
			size_t dl = len - 1;
			while (dl && *d == ' ') {
				d++;
				dl--;
			}
			if (parse_directive(path, (unsigned)i + 1, d, dl, c) < 0)
				goto out;
			if (dl >= 7 && strncmp(d, "OUTPUT:", 7) == 0) {
				in_output = 1;
				out_start = i + 1;
				c->output_line = (unsigned)i + 1;
			}
		}
		input_end = in_output ? out_start - 1 : i;
		out_end = i;
		int separator = i < l.n;
		if (separator)
			i++;
		/* the input: blank lines up to the case, then its lines before OUTPUT */
		size_t bytes = start + 1;
		for (size_t k = start; k < input_end; k++)
			bytes += l.len[k] + 1;
		c->input = malloc(bytes);
		if (!c->input)
			goto out;
		memset(c->input, '\n', start);
		char *w = c->input + start;
		for (size_t k = start; k < input_end; k++) {
			memcpy(w, l.at[k], l.len[k]);
			w += l.len[k];
			*w++ = '\n';
		}
		*w = '\0';
		if (in_output) {
			bytes = 1;
			for (size_t k = out_start; k < out_end; k++)
				bytes += l.len[k] + 1;
			c->output = malloc(bytes);
			if (!c->output)
				goto out;
			w = c->output;
			for (size_t k = out_start; k < out_end; k++) {
				memcpy(w, l.at[k], l.len[k]);
				w += l.len[k];
				*w++ = '\n';
			}
			*w = '\0';
		}
		if (separator && !has_content(&l, i)) {
			separator = 0; /* a separator at the end starts no case */
			i = l.n;
		}
		if (!c->passes) {
			fprintf(stderr, "%s:%u: the case has no '# PASSES:' line\n", path, c->first_line);
			goto out;
		}
		if (!separator)
			break;
	}
	*out = cases;
	rc = (long)n;
	cases = NULL;
out:
	if (cases) {
		for (size_t k = 0; k < n; k++)
			free_case(&cases[k]);
		free(cases);
	}
	free_lines(&l);
	return rc;
}

/* Applies the checks of one stream to `text`.  0 when they all hold. */
static int apply_checks(const char *path, const struct test_case *c, enum stream stream, const char *text)
{
	struct lines l;
	size_t pos = 0;    /* the next line a CHECK may match */
	long last = -1;    /* the line of the last positive match */
	int failed = 0;

	if (split_lines(text, &l))
		return -1;
	for (size_t k = 0; k < c->n_checks; k++) {
		const struct check *ck = &c->checks[k];
		if (ck->stream != stream)
			continue;
		switch (ck->kind) {
		case CHECK_EMPTY:
			if (l.n) {
				fprintf(stderr, "%s:%u: %s-EMPTY: the output is not empty\n", path, ck->line,
					stream_names[stream]);
				failed = 1;
			}
			break;
		case CHECK_COUNT: {
			long found = 0;
			for (size_t i = 0; i < l.n; i++)
				found += line_matches(&l, i, ck);
			if (found != ck->count) {
				fprintf(stderr, "%s:%u: %s-COUNT-%ld: '%s' is on %ld lines\n", path, ck->line,
					stream_names[stream], ck->count, ck->pattern, found);
				failed = 1;
			}
			break;
		}
		case CHECK_NOT: {
			/* up to the next positive match (or the end) */
			size_t stop = l.n;
			for (size_t j = k + 1; j < c->n_checks; j++) {
				const struct check *nx = &c->checks[j];
				if (nx->stream != stream || (nx->kind != CHECK_PLAIN && nx->kind != CHECK_NEXT))
					continue;
				for (size_t i = pos; i < l.n; i++) {
					if (line_matches(&l, i, nx)) {
						stop = i;
						break;
					}
				}
				break;
			}
			for (size_t i = pos; i < stop; i++) {
				if (line_matches(&l, i, ck)) {
					fprintf(stderr, "%s:%u: %s-NOT: '%s' found on output line %zu: %.*s\n",
						path, ck->line, stream_names[stream], ck->pattern, i + 1,
						(int)l.len[i], l.at[i]);
					failed = 1;
					break;
				}
			}
			break;
		}
		case CHECK_NEXT:
			if (last < 0 || (size_t)last + 1 >= l.n ||
			    !line_matches(&l, (size_t)last + 1, ck)) {
				fprintf(stderr, "%s:%u: %s-NEXT: '%s' is not on the line after the last match%s%.*s\n",
					path, ck->line, stream_names[stream], ck->pattern,
					last >= 0 && (size_t)last + 1 < l.n ? ", which is: " : "",
					last >= 0 && (size_t)last + 1 < l.n ? (int)l.len[last + 1] : 0,
					last >= 0 && (size_t)last + 1 < l.n ? l.at[last + 1] : "");
				failed = 1;
				break;
			}
			last = last + 1;
			pos = (size_t)last + 1;
			break;
		case CHECK_PLAIN: {
			size_t i;
			for (i = pos; i < l.n; i++)
				if (line_matches(&l, i, ck))
					break;
			if (i == l.n) {
				fprintf(stderr, "%s:%u: %s: '%s' not found%s\n", path, ck->line,
					stream_names[stream], ck->pattern,
					pos ? " after the previous match" : "");
				failed = 1;
				break;
			}
			last = (long)i;
			pos = i + 1;
			break;
		}
		}
	}
	free_lines(&l);
	return failed;
}

/* ------------------------------------------------------------------ running */

/* What print writes of obj to a stream, in a malloc'ed string; NULL when
 * the stream cannot be made or print fails (non-zero). */
static char *capture(int (*print)(const void *obj, FILE *f), const void *obj)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	if (print(obj, f)) {
		fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	return buf;
}

static int print_model(const void *m, FILE *f)
{
	return tpf_model_print_text(m, f) != TPF_OK;
}

static int print_diag(const void *d, FILE *f)
{
	tpf_diag_print(d, f);
	return 0;
}

static int print_stats(const void *st, FILE *f)
{
	tpf_pass_stats_print(st, f);
	return 0;
}

static char *dump(const struct tpf_model *m)
{
	return capture(print_model, m);
}

static char *diag_text(const struct tpf_diag *d)
{
	return capture(print_diag, d);
}

/* Runs the case's pipeline; the explain text, the notes and the stats come
 * back through the out-parameters.  0 ok. */
static int run_pipeline(const char *path, const struct test_case *c, struct tpf_model *m,
			struct tpf_pass_stats *stats, char **explain, char **notes)
{
	struct tpf_diag *d = tpf_diag_create();
	size_t len = 0;
	FILE *ex = open_memstream(explain, &len);
	int rc = 0;

	if (!d || !ex) {
		tpf_diag_free(d);
		if (ex)
			fclose(ex);
		return -1;
	}
	struct tpf_pipeline_options o = {
		.passes = c->passes,
		.ctx = {.stats = stats, .explain = ex, .rank = c->rank, .world_size = c->world},
		.verify_each = !c->no_verify,
	};
	enum tpf_status st = tpf_pipeline_run(m, &o, d);
	fclose(ex);
	*notes = diag_text(d);
	if (st) {
		fprintf(stderr, "%s:%u: the pipeline '%s' failed (%s):\n%s", path, c->first_line, c->passes,
			tpf_status_name(st), *notes ? *notes : "");
		rc = 1;
	}
	tpf_diag_free(d);
	return rc;
}

/* Counter lines ("pass counter value") whose value is not 0. */
static int nonzero_stats(const struct tpf_pass_stats *st, char **text)
{
	char *buf = capture(print_stats, st), *save = NULL;
	int any = 0;

	if (!buf)
		return 1;
	for (char *ln = strtok_r(buf, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		char *last = strrchr(ln, ' ');
		if (last && strcmp(last + 1, "0") != 0) {
			any = 1;
			if (text)
				*text = strdup(ln);
			break;
		}
	}
	free(buf);
	return any;
}

static int run_case(const char *path, struct test_case *c, int update, char **actual)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	struct tpf_pass_stats *stats = tpf_pass_stats_create();
	char *explain = NULL, *notes = NULL, *out = NULL, *before = NULL;
	int failed = 0;

	*actual = NULL;
	if (!d || !stats) {
		failed = 1;
		goto out;
	}
	if (tpf_model_parse_text(c->input, strlen(c->input), path, &m, d)) {
		tpf_diag_print(d, stderr);
		failed = 1;
		goto out;
	}
	if (!c->no_verify && tpf_model_verify(m, d)) {
		fprintf(stderr, "%s:%u: the input does not verify:\n", path, c->first_line);
		tpf_diag_print(d, stderr);
		failed = 1;
		goto out;
	}
	if (c->unchanged && !(before = dump(m))) {
		failed = 1;
		goto out;
	}
	if (run_pipeline(path, c, m, stats, &explain, &notes)) {
		failed = 1;
		goto out;
	}
	out = dump(m);
	if (!out) {
		failed = 1;
		goto out;
	}
	for (size_t k = 0; k < c->n_stats; k++) {
		const struct stat_check *s = &c->stats[k];
		long long got = tpf_pass_stats_get(stats, s->pass, s->counter);
		if (got != s->value) {
			fprintf(stderr, "%s:%u: STATS: %s %s is %lld, expected %lld\n", path, s->line, s->pass,
				s->counter, got, s->value);
			failed = 1;
		}
	}
	failed |= apply_checks(path, c, STREAM_DUMP, out) != 0;
	failed |= apply_checks(path, c, STREAM_EXPLAIN, explain ? explain : "") != 0;
	failed |= apply_checks(path, c, STREAM_DIAG, notes ? notes : "") != 0;
	if (c->output && !update && strcmp(c->output, out) != 0) {
		fprintf(stderr, "%s:%u: OUTPUT: the dump differs (run with --update to take it)\n", path,
			c->output_line);
		failed = 1;
	}
	if (before && strcmp(before, out) != 0) {
		fprintf(stderr, "%s:%u: unchanged: the pipeline changed the graph; before it:\n%s", path,
			c->first_line, before);
		failed = 1;
	}
	if (c->idempotent) {
		struct tpf_pass_stats *again = tpf_pass_stats_create();
		char *ex2 = NULL, *notes2 = NULL, *changed = NULL;
		if (!again || run_pipeline(path, c, m, again, &ex2, &notes2)) {
			failed = 1;
		} else {
			char *out2 = dump(m);
			if (!out2 || strcmp(out, out2) != 0) {
				fprintf(stderr, "%s:%u: idempotent: a second run changed the dump:\n%s", path,
					c->first_line, out2 ? out2 : "");
				failed = 1;
			}
			if (nonzero_stats(again, &changed)) {
				fprintf(stderr, "%s:%u: idempotent: a second run counted %s\n", path,
					c->first_line, changed ? changed : "something");
				failed = 1;
			}
			free(out2);
		}
		free(changed);
		free(ex2);
		free(notes2);
		tpf_pass_stats_free(again);
	}
	if (failed) {
		fprintf(stderr, "---- %s:%u: dump after '%s' ----\n%s", path, c->first_line, c->passes,
			out ? out : "");
		if (explain && *explain)
			fprintf(stderr, "---- explain ----\n%s", explain);
		if (notes && *notes)
			fprintf(stderr, "---- notes ----\n%s", notes);
		fprintf(stderr, "---- end ----\n");
	}
	*actual = out;
	out = NULL;
out:
	free(before);
	free(out);
	free(explain);
	free(notes);
	tpf_model_free(m);
	tpf_pass_stats_free(stats);
	tpf_diag_free(d);
	return failed;
}

/* Rewrites the OUTPUT block of every case that has one. */
static int update_file(const char *path, const char *text, struct test_case *cases, long n,
		       char **actual)
{
	struct lines l;
	char *tmp = NULL;
	FILE *f;
	int rc = -1;

	if (split_lines(text, &l))
		return -1;
	size_t plen = strlen(path) + 8;
	tmp = malloc(plen);
	if (!tmp)
		goto out;
	snprintf(tmp, plen, "%s.new", path);
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "%s: cannot write: %s\n", tmp, strerror(errno));
		goto out;
	}
	size_t i = 0;
	for (long k = 0; k < n; k++) {
		const struct test_case *c = &cases[k];
		size_t next = k + 1 < n ? cases[k + 1].first_line - 1 : l.n;
		if (!c->output || !actual[k]) {
			for (; i < next; i++)
				fprintf(f, "%.*s\n", (int)l.len[i], l.at[i]);
			continue;
		}
		for (; i < c->output_line; i++)
			fprintf(f, "%.*s\n", (int)l.len[i], l.at[i]);
		fputs(actual[k], f);
		/* keep the separator that ends the case */
		if (k + 1 < n)
			fprintf(f, "%.*s\n", (int)l.len[next - 1], l.at[next - 1]);
		i = next;
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0) {
		fprintf(stderr, "%s: cannot replace: %s\n", path, strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(tmp);
	free_lines(&l);
	return rc;
}

static int run_file(const char *path, int update)
{
	size_t size;
	char *text = read_file(path, &size);
	struct test_case *cases = NULL;
	long n;
	int failed = 0;

	if (!text)
		return 1;
	n = read_cases(path, text, &cases);
	if (n < 0) {
		free(text);
		return 1;
	}
	char **actual = calloc((size_t)n, sizeof(*actual));
	if (!actual) {
		failed = 1;
		goto out;
	}
	for (long k = 0; k < n; k++) {
		failed |= run_case(path, &cases[k], update, &actual[k]);
	}
	if (update && update_file(path, text, cases, n, actual))
		failed = 1;
	if (!failed)
		printf("%s: %ld case%s passed\n", path, n, n == 1 ? "" : "s");
out:
	for (long k = 0; k < n; k++) {
		if (actual)
			free(actual[k]);
		free_case(&cases[k]);
	}
	free(actual);
	free(cases);
	free(text);
	return failed;
}

int main(int argc, char **argv)
{
	int update = 0, failed = 0, files = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--update") == 0) {
			update = 1;
			continue;
		}
		failed |= run_file(argv[i], update);
		files++;
	}
	if (!files) {
		fprintf(stderr, "usage: pass-file-test [--update] FILE.tpf...\n");
		return 2;
	}
	return failed;
}
