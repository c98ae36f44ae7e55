/* SPDX-License-Identifier: MIT */
/* Small helpers the tpfuse commands share (tpfuse.c, shard-command.c,
 * run-command.c): number arguments, messages, exit codes. */
#ifndef TPF_CLI_UTIL_H
#define TPF_CLI_UTIL_H

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-ir.h"

/* The exit codes every command shares (run also has 5, see run --help). */
enum cli_exit {
	CLI_OK = 0,
	CLI_ERROR = 1, /* invalid model, failed pass or other error */
	CLI_USAGE = 2,
	CLI_IO = 3,
	CLI_UNSUPPORTED = 4,
};

/* The exit code of a status. */
static inline int cli_exit_of(enum tpf_status st)
{
	switch (st) {
	case TPF_OK:
		return CLI_OK;
	case TPF_ERR_IO:
		return CLI_IO;
	case TPF_ERR_UNSUPPORTED:
		return CLI_UNSUPPORTED;
	case TPF_ERR_CONFLICT:
		return CLI_USAGE; /* an output that is an input: refused, nothing written */
	default:
		return CLI_ERROR;
	}
}

/* A whole decimal number from lo to hi: 0 and *out, or -1. */
static inline int cli_parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* Writes head, the formatted text and a newline to standard error in one
 * write, so that under mpirun another stream's output cannot land inside
 * the line (stderr is unbuffered: each fputs/fprintf is a write of its
 * own). */
static inline void cli_vline(const char *head, const char *fmt, va_list ap)
{
	va_list aq;
	size_t h = strlen(head);
	char *buf = NULL;
	int n;

	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n >= 0)
		buf = malloc(h + (size_t)n + 2);
	if (!buf) {
		fputs(head, stderr);
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
		return;
	}
	memcpy(buf, head, h);
	vsnprintf(buf + h, (size_t)n + 1, fmt, ap);
	buf[h + (size_t)n] = '\n';
	buf[h + (size_t)n + 1] = '\0';
	fputs(buf, stderr);
	free(buf);
}

/* Prints d's messages from *from on as "tpfuse: SEV: TEXT" on standard
 * error; *from becomes their count. */
static inline void cli_print_diag(const struct tpf_diag *d, size_t *from)
{
	static const char *const sev[] = {"note", "warning", "error"};

	for (size_t i = *from; i < d->count; i++) {
		unsigned s = (unsigned)d->entries[i].severity;

		fprintf(stderr, "tpfuse: %s: %s\n", s < 3 ? sev[s] : "error",
			d->entries[i].text ? d->entries[i].text : "");
	}
	*from = d->count;
}

#endif /* TPF_CLI_UTIL_H */
