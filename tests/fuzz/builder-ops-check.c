/* SPDX-License-Identifier: MIT */
/*
 * builder-ops-check: keeps fuzz-builder's saved inputs building what they
 * were saved for.  A node instruction picks its op by index in the table
 * of builder-ops.h, so that table must only grow at its end:
 *
 *   builder-ops-check LIST DIR...
 *
 * fails when
 *   - the table and LIST (builder-ops.txt, the pinned copy) differ in any
 *     entry or in length: an entry edited, moved, inserted or removed, or
 *     one appended to only one of them;
 *   - an entry names an op the IR does not know (but custom.domain
 *     Mystery, the unknown op) or an op the IR knows is missing from it
 *     (If, Loop and Scan excepted: append the new op);
 *   - a saved program in a DIR gives an op table length that builds
 *     nothing (0, or past the table's end).
 */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder-ops.h"
#include "tpf-ir.h"

static int failures;

static void failf(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "builder-ops-check: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	failures++;
}

static int is_mystery(const struct builder_op *o)
{
	return strcmp(o->domain, "custom.domain") == 0 && strcmp(o->type, "Mystery") == 0;
}

/* LIST against the table, entry by entry. */
static void check_list(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[256];
	size_t n = 0;

	if (!f) {
		failf("%s: cannot open it", path);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		char *tok[3];
		int k = 0;
		unsigned long idx;
		char *end;

		if (line[0] == '#')
			continue;
		for (char *t = strtok(line, " \t\r\n"); t && k < 3; t = strtok(NULL, " \t\r\n"))
			tok[k++] = t;
		if (!k)
			continue;
		idx = strtoul(tok[0], &end, 10);
		if (*end || k < 2 || idx != n) {
			failf("%s: the line of entry %zu is not \"INDEX [DOMAIN] OP_TYPE\"", path,
			      n);
			break;
		}
		const char *domain = k == 3 ? tok[1] : "", *type = tok[k - 1];
		if (n >= N_BUILDER_OPS) {
			failf("entry %zu ('%s' '%s') is pinned but missing from builder-ops.h", n,
			      domain, type);
		} else if (strcmp(builder_ops[n].domain, domain) ||
			   strcmp(builder_ops[n].type, type)) {
			failf("entry %zu of builder-ops.h is '%s' '%s', pinned as '%s' '%s': "
			      "saved inputs would build another op; add ops at the end only",
			      n, builder_ops[n].domain, builder_ops[n].type, domain, type);
		}
		n++;
	}
	fclose(f);
	for (size_t i = n; i < N_BUILDER_OPS; i++)
		failf("entry %zu of builder-ops.h ('%s' '%s') is not pinned: append it to "
		      "builder-ops.txt",
		      i, builder_ops[i].domain, builder_ops[i].type);
}

/* Every entry is an op the IR knows, and every op the IR knows is built. */
static void check_ops(void)
{
	int seen[TPF_OP_COUNT] = {0};

	for (size_t i = 0; i < N_BUILDER_OPS; i++) {
		const struct builder_op *o = &builder_ops[i];
		enum tpf_op op = tpf_op_lookup(o->domain, o->type);
		if (op == TPF_OP_UNKNOWN && !is_mystery(o))
			failf("entry %zu ('%s' '%s') names no op of the IR", i, o->domain, o->type);
		seen[op] = 1;
	}
	for (int op = TPF_OP_UNKNOWN + 1; op < TPF_OP_COUNT; op++) {
		const struct tpf_op_info *info = tpf_op_info((enum tpf_op)op);
		if (seen[op] || op == TPF_OP_IF || op == TPF_OP_LOOP || op == TPF_OP_SCAN)
			continue;
		failf("'%s' '%s' is not in builder-ops.h: append it (entry %zu) and its line to "
		      "builder-ops.txt",
		      info->domain, info->name, N_BUILDER_OPS);
	}
}

/* Each saved program's op table length (its byte 1) builds something. */
static void check_inputs(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d) {
		failf("%s: cannot open it", dir);
		return;
	}
	while ((e = readdir(d))) {
		char path[4096];
		unsigned char head[2] = {0, 0};
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		f = fopen(path, "rb");
		if (!f) {
			failf("%s: cannot open it", path);
			continue;
		}
		size_t got = fread(head, 1, 2, f);
		fclose(f);
		if (got < 2 || !head[1] || head[1] > N_BUILDER_OPS)
			failf("%s: its op table length (byte 1) is %d: it builds nothing (the "
			      "table has %zu entries)",
			      path, got < 2 ? -1 : head[1], N_BUILDER_OPS);
	}
	closedir(d);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: builder-ops-check LIST [DIR...]\n");
		return 2;
	}
	check_list(argv[1]);
	check_ops();
	for (int i = 2; i < argc; i++)
		check_inputs(argv[i]);
	if (!failures)
		printf("builder-ops-check: %zu entries pinned, %d folders of saved programs\n",
		       N_BUILDER_OPS, argc - 2);
	return failures ? 1 : 0;
}
