/* SPDX-License-Identifier: MIT */
/* Collective strategy tables: which path (NCCL, one-shot or two-shot
 * through peer memory) runs an all-reduce, a fused all-reduce + norm or a
 * sharded norm's exchange, by world size, fused op, hidden size and token
 * count.  See docs/runtime.md ("Collective strategies").
 *
 * A table is text, one row per line:
 *
 *     # comment
 *     WORLD KIND HIDDEN MAX_TOKENS PATH
 *     2 allreduce-rmsnorm 4096 256 oneshot
 *     2 allreduce-rmsnorm 4096 inf nccl
 *
 * KIND: allreduce, allreduce-rmsnorm, allreduce-rmsnorm-fp8,
 * sharded-rmsnorm.  PATH: nccl, oneshot, twoshot.  For a call, the rows of
 * its world size and kind (allreduce-rmsnorm-fp8 falls back to
 * allreduce-rmsnorm's) at the nearest measured hidden size are read in
 * order of MAX_TOKENS; the first whose MAX_TOKENS holds the call's tokens
 * (scaled to that hidden size: what counts is the bytes) decides.  Without
 * rows, a size rule decides (tpf_strategy_choose). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime-internal.h"

static const char *const kind_names[TPF_COLL_KINDS] = {"allreduce", "allreduce-rmsnorm", "allreduce-rmsnorm-fp8",
						       "sharded-rmsnorm"};
static const char *const path_names[] = {"nccl", "oneshot", "twoshot"};

const char *tpf_coll_kind_name(enum tpf_coll_kind k)
{
	return k >= 0 && k < TPF_COLL_KINDS ? kind_names[k] : "?";
}

const char *tpf_coll_path_name(enum tpf_coll_path p)
{
	return p >= TPF_PATH_NCCL && p <= TPF_PATH_TWOSHOT ? path_names[p] : "?";
}

/* Measured by `tpfuse tune` (docs/benchmarks.md has the figures): H100
 * rows, for H100 and every GPU without rows of its own; H200 rows. */
static const struct tpf_strategy_row builtin_rows[] = {
#include "strategy-table.inc"
};
static const struct tpf_strategy_row builtin_rows_h200[] = {
#include "strategy-table-h200.inc"
};

const struct tpf_strategy_table *tpf_strategy_builtin(void)
{
	static const struct tpf_strategy_table t = {
		.rows = (struct tpf_strategy_row *)builtin_rows,
		.n = sizeof(builtin_rows) / sizeof(builtin_rows[0]),
		.source = "built-in",
	};
	return &t;
}

const struct tpf_strategy_table *tpf_strategy_builtin_for(const char *gpu)
{
	static const struct tpf_strategy_table h200 = {
		.rows = (struct tpf_strategy_row *)builtin_rows_h200,
		.n = sizeof(builtin_rows_h200) / sizeof(builtin_rows_h200[0]),
		.source = "built-in (H200)",
	};
	/* H200 boards, not the Grace Hopper GH200 (another interconnect) */
	return gpu && strstr(gpu, "H200") && !strstr(gpu, "GH200") ? &h200 : tpf_strategy_builtin();
}

void tpf_strategy_free(struct tpf_strategy_table *t)
{
	if (!t || t == tpf_strategy_builtin())
		return;
	tpf_free(t->rows);
	tpf_free(t);
}

static int parse_kind(const char *w, enum tpf_coll_kind *k)
{
	for (int i = 0; i < TPF_COLL_KINDS; i++)
		if (!strcmp(w, kind_names[i])) {
			*k = (enum tpf_coll_kind)i;
			return 0;
		}
	return -1;
}

static int parse_path(const char *w, enum tpf_coll_path *p)
{
	for (int i = 0; i <= TPF_PATH_TWOSHOT; i++)
		if (!strcmp(w, path_names[i])) {
			*p = (enum tpf_coll_path)i;
			return 0;
		}
	return -1;
}

static int parse_count(const char *w, int64_t *v, int allow_inf)
{
	if (allow_inf && !strcmp(w, "inf")) {
		*v = -1;
		return 0;
	}
	char *end;
	errno = 0;
	long long x = strtoll(w, &end, 10);
	if (!*w || *end || errno || x <= 0)
		return -1;
	*v = x;
	return 0;
}

enum tpf_status tpf_strategy_parse(const char *text, const char *source, struct tpf_strategy_table **out,
				   struct tpf_diag *d)
{
	*out = NULL;
	struct tpf_strategy_table *t = tpf_calloc(1, sizeof(*t));
	if (!t)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "strategy table: out of memory");
	snprintf(t->source, sizeof(t->source), "%s", source ? source : "table");
	size_t cap = 0, line_no = 0;
	const char *p = text;
	while (*p) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		line_no++;
		char line[512];
		if (len >= sizeof(line)) {
			enum tpf_status st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s:%zu: line too long (at most %zu characters)",
							   t->source, line_no, sizeof(line) - 1);
			tpf_strategy_free(t);
			return st;
		}
		memcpy(line, p, len);
		line[len] = 0;
		p = eol ? eol + 1 : p + len;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		char *w[6];
		int n = 0;
		for (char *tok = strtok(line, " \t\r"); tok; tok = strtok(NULL, " \t\r"))
			if (n < 6)
				w[n++] = tok;
			else
				n = 7;
		if (n == 0)
			continue;
		struct tpf_strategy_row r;
		int64_t world;
		if (n != 5 || parse_count(w[0], &world, 0) || world > 1024 || parse_kind(w[1], &r.kind) ||
		    parse_count(w[2], &r.hidden, 0) || parse_count(w[3], &r.max_tokens, 1) || parse_path(w[4], &r.path)) {
			enum tpf_status st =
				tpf_diag_fail(d, TPF_ERR_INVALID,
					      "%s:%zu: expected 'WORLD KIND HIDDEN MAX_TOKENS PATH' (KIND: allreduce, "
					      "allreduce-rmsnorm, allreduce-rmsnorm-fp8, sharded-rmsnorm; MAX_TOKENS: a "
					      "positive count or inf; PATH: nccl, oneshot, twoshot)",
					      t->source, line_no);
			tpf_strategy_free(t);
			return st;
		}
		r.world = (int)world;
		if (t->n == cap) {
			size_t nc = cap ? 2 * cap : 32;
			void *nr = tpf_realloc(t->rows, nc * sizeof(*t->rows));
			if (!nr) {
				tpf_strategy_free(t);
				return tpf_diag_fail(d, TPF_ERR_NOMEM, "strategy table: out of memory");
			}
			t->rows = nr;
			cap = nc;
		}
		t->rows[t->n++] = r;
	}
	*out = t;
	return TPF_OK;
}

enum tpf_status tpf_strategy_load(const char *path, struct tpf_strategy_table **out, struct tpf_diag *d)
{
	*out = NULL;
	enum tpf_status ost;
	FILE *f = tpf_fopen_regular(path, "strategy table", d, &ost);
	if (!f)
		return ost;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	for (;;) {
		if (n + 4096 + 1 > cap) {
			if (cap > ((size_t)1 << 24)) {
				tpf_free(buf);
				fclose(f);
				return tpf_diag_fail(d, TPF_ERR_LIMIT, "strategy table %s: larger than 16 MiB", path);
			}
			size_t nc = cap ? 2 * cap : 8192;
			char *nb = tpf_realloc(buf, nc);
			if (!nb) {
				tpf_free(buf);
				fclose(f);
				return tpf_diag_fail(d, TPF_ERR_NOMEM, "strategy table: out of memory");
			}
			buf = nb;
			cap = nc;
		}
		size_t got = fread(buf + n, 1, 4096, f);
		n += got;
		if (got < 4096)
			break;
	}
	int err = ferror(f);
	fclose(f);
	if (err) {
		tpf_free(buf);
		return tpf_diag_fail(d, TPF_ERR_IO, "strategy table %s: read error", path);
	}
	buf[n] = 0;
	if (memchr(buf, 0, n)) {
		tpf_free(buf);
		return tpf_diag_fail(d, TPF_ERR_INVALID, "strategy table %s: not a text file", path);
	}
	enum tpf_status st = tpf_strategy_parse(buf, path, out, d);
	tpf_free(buf);
	return st;
}

/* Without measured rows: one-shot while the tensor is small (its latency
 * wins; the bound shrinks as the world grows, since each rank then sends
 * world-1 copies), two-shot up to the peer buffers' size, NCCL beyond. */
static enum tpf_coll_path size_rule(int world, double bytes)
{
	double oneshot_max = world <= 2 ? 1 << 20 : world <= 4 ? 256 << 10 : 128 << 10;
	if (bytes <= oneshot_max)
		return TPF_PATH_ONESHOT;
	return bytes <= (double)(64 << 20) ? TPF_PATH_TWOSHOT : TPF_PATH_NCCL;
}

enum tpf_coll_path tpf_strategy_choose(const struct tpf_strategy_table *t, int world, enum tpf_coll_kind kind,
				       int64_t hidden, int64_t tokens, size_t elem_bytes)
{
	if (!t)
		t = tpf_strategy_builtin();
	if (hidden <= 0 || tokens < 0)
		return TPF_PATH_NCCL;
	for (int pass = 0; pass < 2; pass++) {
		enum tpf_coll_kind k = pass == 0 ? kind : kind == TPF_COLL_ARNORM_FP8 ? TPF_COLL_ARNORM : TPF_COLL_KINDS;
		if (k == TPF_COLL_KINDS)
			break;
		/* the nearest measured hidden size (log scale; ties: the larger) */
		int64_t best_h = 0;
		double best = 0;
		for (size_t i = 0; i < t->n; i++) {
			const struct tpf_strategy_row *r = &t->rows[i];
			if (r->world != world || r->kind != k)
				continue;
			double dist = fabs(log2((double)r->hidden / (double)hidden));
			if (!best_h || dist < best - 1e-9 || (fabs(dist - best) <= 1e-9 && r->hidden > best_h)) {
				best_h = r->hidden;
				best = dist;
			}
		}
		if (!best_h)
			continue;
		double eq = (double)tokens * (double)hidden / (double)best_h;
		const struct tpf_strategy_row *pick = NULL, *last = NULL;
		for (size_t i = 0; i < t->n; i++) {
			const struct tpf_strategy_row *r = &t->rows[i];
			if (r->world != world || r->kind != k || r->hidden != best_h)
				continue;
			if (r->max_tokens < 0) {
				if (!last || last->max_tokens >= 0)
					last = r;
				continue;
			}
			if (!last || (last->max_tokens >= 0 && r->max_tokens > last->max_tokens))
				last = r;
			if (eq <= (double)r->max_tokens && (!pick || r->max_tokens < pick->max_tokens))
				pick = r;
		}
		return pick ? pick->path : last->path;
	}
	return size_rule(world, (double)tokens * (double)hidden * (double)elem_bytes);
}

void tpf_strategy_print(const struct tpf_strategy_table *t, FILE *f)
{
	fprintf(f, "# world kind hidden max_tokens path  (%s, %zu rows)\n", t->source, t->n);
	for (size_t i = 0; i < t->n; i++) {
		const struct tpf_strategy_row *r = &t->rows[i];
		char mt[32];
		if (r->max_tokens < 0)
			snprintf(mt, sizeof(mt), "inf");
		else
			snprintf(mt, sizeof(mt), "%lld", (long long)r->max_tokens);
		fprintf(f, "%d %s %lld %s %s\n", r->world, tpf_coll_kind_name(r->kind), (long long)r->hidden, mt,
			tpf_coll_path_name(r->path));
	}
}
