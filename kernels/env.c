/* SPDX-License-Identifier: MIT */
/* The environment's tuning knobs, in one table: each variable's name, the
 * values it takes and what it changes.  A session checks every knob that
 * is set before it starts (tpf_env_check): a value that does not parse is
 * an error naming the variable and what it takes, not a silent default.
 * The readers return a knob's value, or the caller's default where it is
 * unset or malformed (code that runs without a session, the benchmarks'
 * direct kernel calls, gets the default rather than a guess).
 * docs/runtime.md ("Environment") lists the same table; tests/env_knobs.py
 * checks that every variable the library reads is here and there. */
#include "tpf-kernels.h"

#include "kernel-host.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Walks a TPF_PDL list: the kinds it names into *mask; the number of
 * entries that name no kind. */
static int pdl_walk(const char *spec, unsigned *mask)
{
	static const char *const names[TPF_PDL_KINDS] = {"gemv", "copy", "gated", "attention", "combine"};
	int unknown = 0;
	*mask = 0;
	for (const char *p = spec; *p;) {
		p += strspn(p, " \t");
		size_t n = strcspn(p, ",");
		const size_t adv = n + (p[n] == ',');
		while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		int known = 0;
		for (int i = 0; i < TPF_PDL_KINDS; i++)
			if (strlen(names[i]) == n && !strncmp(p, names[i], n)) {
				*mask |= 1u << i;
				known = 1;
			}
		unknown += n && !known;
		p += adv;
	}
	return unknown;
}

static int pdl_special(const char *spec)
{
	return !strcmp(spec, "0") || !strcmp(spec, "1") || !strcmp(spec, "2") || !strcmp(spec, "all");
}

unsigned tpf_pdl_kinds_parse(const char *spec)
{
	if (!spec || !*spec || !strcmp(spec, "1"))
		return TPF_PDL_DEFAULT;
	if (!strcmp(spec, "0"))
		return 0;
	if (!strcmp(spec, "all") || !strcmp(spec, "2"))
		return (1u << TPF_PDL_KINDS) - 1;
	unsigned m;
	pdl_walk(spec, &m);
	return m ? m : TPF_PDL_DEFAULT;
}

int tpf_pdl_kinds_valid(const char *spec)
{
	unsigned m;
	return pdl_special(spec) || (pdl_walk(spec, &m) == 0 && m != 0);
}

static const struct tpf_env_knob knobs[] = {
    {"TPF_A2A_DIRECT", TPF_ENV_SWITCH, 0, 0, NULL,
     "0: direct all-to-all runs keep the packed path"},
    {"TPF_A2A_DIRECT_MAX_PIECES", TPF_ENV_INT, 0, 1 << 20, NULL,
     "the most pieces a direct all-to-all run takes (default 16, 128 through peer memory)"},
    {"TPF_A2A_PEER", TPF_ENV_SWITCH, 0, 0, NULL,
     "0: all-to-alls through NCCL, not the peer-memory kernel"},
    {"TPF_AR_WIDE_ROWS", TPF_ENV_INT, 0, INT64_MAX, NULL,
     "the most rows the wide one-shot all-reduce kernel takes (default: as many as stay resident)"},
    {"TPF_CPU_COPY_CONSTANTS", TPF_ENV_SWITCH, 0, 0, NULL,
     "1: the CPU backend copies constants instead of reading the model's memory"},
    {"TPF_CUDA_TIMEOUT_S", TPF_ENV_SECONDS, 0, 0, NULL,
     "seconds a CUDA wait lasts before it fails (default: the communicator's timeout, else 60)"},
    {"TPF_DEBUG", TPF_ENV_TEXT, 0, 0, NULL,
     "passes whose every match and near miss is traced to stderr: PASS[,PASS] or all"},
    {"TPF_DECODE_ATTENTION", TPF_ENV_SWITCH, 0, 0, NULL, "0: no split-key decode attention kernel"},
    {"TPF_DECODE_MMA", TPF_ENV_SWITCH, 0, 0, NULL, "0: decode attention on the float kernel only"},
    {"TPF_DECODE_SPLIT_TILES", TPF_ENV_INT, 0, 1 << 20, NULL,
     "the fewest 16-key tiles a split of the decode attention takes (0: at least 4, chosen by "
     "size)"},
    {"TPF_FP8_GEMM", TPF_ENV_SWITCH, 0, 0, NULL,
     "0: FP8 matrix products dequantize, then multiply (no lower-matmul-fp8)"},
    {"TPF_GEMV", TPF_ENV_INT, 0, 16, NULL,
     "the most rows the small-M kernels take (0: cuBLASLt for every product)"},
    {"TPF_GEMV_COLS", TPF_ENV_CHOICE, 0, 0, "0|16|32",
     "the FMA GEMV's tile width (0: chosen by the SM count)"},
    {"TPF_GEMV_GATED", TPF_ENV_SWITCH, 0, 0, NULL,
     "0: no gated activation lowered with its matrix product (no lower-gated-matmul)"},
    {"TPF_GEMV_MMA", TPF_ENV_INT, 0, 17, NULL,
     "the fewest rows the tensor-core GEMV takes (0: never; default 2)"},
    {"TPF_GEMV_TILED", TPF_ENV_CHOICE, 0, 0, "0|16|32",
     "the packed weights' tile width (0: row-major; default: chosen by shape)"},
    {"TPF_HOSTNAME", TPF_ENV_TEXT, 0, 0, NULL,
     "the host name ranks are grouped by (default: gethostname): {rank} is the rank, a comma-separated "
     "list names each rank's"},
    {"TPF_MEMORY_LIMIT", TPF_ENV_INT, 1, INT64_MAX, NULL,
     "bytes a session may count on: memory checks see at most this much available"},
    {"TPF_ONESHOT", TPF_ENV_SWITCH, 0, 0, NULL, "0: no peer-memory collectives, as --no-oneshot"},
    {"TPF_ONESHOT_MAX_BYTES", TPF_ENV_INT, 0, INT64_MAX, NULL,
     "the largest all-reduce, in bytes, that peer memory takes (default 64 MiB)"},
    {"TPF_PDL", TPF_ENV_PDL, 0, 0, NULL,
     "the kinds of kernel launched as programmatic dependents (default: gemv, copy, gated)"},
    {"TPF_PREFILL_ATTENTION", TPF_ENV_CHOICE, 0, 0, "0|1|2",
     "the attention kernel for prompts of 64 tokens and more (float16/bfloat16, head 64 or 128): 1 the tiled "
     "tensor-core kernel (default), 2 its flash form (scores and output in registers), 0 the row kernel"},
    {"TPF_STRATEGY_TABLE", TPF_ENV_FILE, 0, 0, NULL,
     "the collective strategy table to use, as --strategy-table"},
};

const struct tpf_env_knob *tpf_env_knobs(size_t *n)
{
	*n = sizeof(knobs) / sizeof(knobs[0]);
	return knobs;
}

static const struct tpf_env_knob *find(const char *name)
{
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		if (!strcmp(knobs[i].name, name))
			return &knobs[i];
	return NULL;
}

/* The value of a set knob; NULL where it is unset or empty. */
static const char *value_of(const char *name)
{
	const char *e = getenv(name);
	return e && *e ? e : NULL;
}

static int parse_int(const struct tpf_env_knob *k, const char *s, long long *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || errno || v < k->lo || v > k->hi)
		return 0;
	*out = v;
	return 1;
}

static int parse_seconds(const char *s, double *out)
{
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno || !isfinite(v) || v <= 0)
		return 0;
	*out = v;
	return 1;
}

static int in_choices(const char *choices, const char *s)
{
	const size_t n = strlen(s);
	for (const char *p = choices; *p;) {
		size_t m = strcspn(p, "|");
		if (m == n && !strncmp(p, s, n))
			return 1;
		p += m + (p[m] == '|');
	}
	return 0;
}

/* Why path is not a readable regular file (stat does not block on a
 * named pipe, as opening one would); NULL when it is one. */
static const char *file_problem(const char *path)
{
	struct stat sb;

	if (stat(path, &sb) != 0)
		return strerror(errno);
	if (!S_ISREG(sb.st_mode))
		return "not a regular file";
	if (access(path, R_OK) != 0)
		return strerror(errno);
	return NULL;
}

int tpf_env_well_formed(const struct tpf_env_knob *k, const char *s)
{
	long long i;
	double x;
	switch (k->kind) {
	case TPF_ENV_SWITCH:
		return !strcmp(s, "0") || !strcmp(s, "1");
	case TPF_ENV_INT:
		return parse_int(k, s, &i);
	case TPF_ENV_SECONDS:
		return parse_seconds(s, &x);
	case TPF_ENV_CHOICE:
		return in_choices(k->choices, s);
	case TPF_ENV_PDL:
		return tpf_pdl_kinds_valid(s);
	case TPF_ENV_TEXT:
		return 1;
	case TPF_ENV_FILE:
		return file_problem(s) == NULL;
	}
	return 0;
}

void tpf_env_takes(const struct tpf_env_knob *k, char *buf, size_t size)
{
	if (!size)
		return;
	switch (k->kind) {
	case TPF_ENV_SWITCH:
		snprintf(buf, size, "0 or 1");
		break;
	case TPF_ENV_INT:
		if (k->hi == INT64_MAX)
			snprintf(buf, size, "a whole number, %lld or more", k->lo);
		else
			snprintf(buf, size, "a whole number from %lld to %lld", k->lo, k->hi);
		break;
	case TPF_ENV_SECONDS:
		snprintf(buf, size, "a number of seconds above 0");
		break;
	case TPF_ENV_CHOICE: {
		size_t at = (size_t)snprintf(buf, size, "one of ");
		for (const char *c = k->choices; *c && at + 3 < size; c++) {
			if (*c == '|') {
				buf[at++] = ',';
				buf[at++] = ' ';
			} else {
				buf[at++] = *c;
			}
		}
		buf[at < size ? at : size - 1] = 0;
		break;
	}
	case TPF_ENV_PDL:
		snprintf(buf, size, "0, 1, 2, all, or a comma-separated list of gemv, copy, gated, attention, combine");
		break;
	case TPF_ENV_TEXT:
		snprintf(buf, size, "any text");
		break;
	case TPF_ENV_FILE:
		snprintf(buf, size, "the path of a readable regular file");
		break;
	}
}

enum tpf_status tpf_env_check(struct tpf_diag *d)
{
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++) {
		const char *s = value_of(knobs[i].name);
		if (!s || tpf_env_well_formed(&knobs[i], s))
			continue;
		char want[128];
		tpf_env_takes(&knobs[i], want, sizeof(want));
		if (knobs[i].kind == TPF_ENV_FILE)
			tpf_diag_fail(d, TPF_ERR_INVALID,
			              "environment variable %s=\"%s\": expected %s (%s)",
			              knobs[i].name, s, want, file_problem(s));
		else
			tpf_diag_fail(d, TPF_ERR_INVALID,
			              "environment variable %s=\"%s\": expected %s", knobs[i].name,
			              s, want);
		tpf_diag_add(d, TPF_SEV_NOTE, "%s: %s (`tpfuse env` lists every such variable)", knobs[i].name,
			     knobs[i].what);
		return TPF_ERR_INVALID;
	}
	return TPF_OK;
}

int tpf_env_switch(const char *name, int def)
{
	const char *s = value_of(name);
	if (!s || !find(name))
		return def;
	return !strcmp(s, "1") ? 1 : !strcmp(s, "0") ? 0 : def;
}

long long tpf_env_int(const char *name, long long def)
{
	const struct tpf_env_knob *k = find(name);
	const char *s = value_of(name);
	if (!k || !s)
		return def;
	long long v;
	if (k->kind == TPF_ENV_INT)
		return parse_int(k, s, &v) ? v : def;
	char *end = NULL;
	if (k->kind == TPF_ENV_CHOICE && in_choices(k->choices, s) && (v = strtoll(s, &end, 10), !*end))
		return v;
	return def;
}

double tpf_env_seconds(const char *name, double def)
{
	const struct tpf_env_knob *k = find(name);
	const char *s = value_of(name);
	double v;
	return k && s && k->kind == TPF_ENV_SECONDS && parse_seconds(s, &v) ? v : def;
}

const char *tpf_env_text(const char *name)
{
	const struct tpf_env_knob *k = find(name);
	const char *s = value_of(name);
	return k && s && tpf_env_well_formed(k, s) ? s : NULL;
}
