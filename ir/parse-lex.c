/* SPDX-License-Identifier: MIT */
/*
 * The text reader's lexer: lines (blank and comment lines skipped),
 * punctuation, words, tokens, integers and quoted strings, and the error
 * messages that carry "NAME:LINE:COL: ".
 */
#include "parse-text-private.h"
#include "graph-private.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int text_fail_at_line(struct parser *ps, unsigned line, unsigned col, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (ps->st)
		return -1;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tpf_diag_add(ps->d, TPF_SEV_ERROR, "%s:%u:%u: %s", ps->name, line, col, msg);
	ps->st = TPF_ERR_PARSE;
	return -1;
}

int text_nomem(struct parser *ps)
{
	if (!ps->st) {
		tpf_diag_add(ps->d, TPF_SEV_ERROR, "%s:%u: out of memory", ps->name, ps->line_no);
		ps->st = TPF_ERR_NOMEM;
	}
	return -1;
}

/* Moves to the next line that is neither blank nor a comment.  0 at the end. */
int text_next_line(struct parser *ps)
{
	while (ps->next < ps->size) {
		const char *s = ps->text + ps->next;
		const char *nl = memchr(s, '\n', ps->size - ps->next);
		const char *e = nl ? nl : ps->text + ps->size;

		ps->next = (size_t)(e - ps->text) + (nl ? 1 : 0);
		ps->line_no++;
		ps->line = s;
		ps->end = e;
		if (e > s && e[-1] == '\r')
			ps->end = e - 1;
		ps->p = s;
		while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
			ps->p++;
		if (ps->p < ps->end && *ps->p != '#')
			return 1;
	}
	ps->line = ps->end = ps->p = ps->text + ps->size;
	return 0;
}

struct line_state text_save_line(const struct parser *ps)
{
	return (struct line_state){ps->next, ps->line, ps->end, ps->p, ps->line_no};
}

void text_restore_line(struct parser *ps, struct line_state s)
{
	ps->next = s.next;
	ps->line = s.line;
	ps->end = s.end;
	ps->p = s.p;
	ps->line_no = s.line_no;
}

/* Skips spaces and consumes `c` if it comes next. */
int text_accept(struct parser *ps, char c)
{
	skip_spaces(ps);
	if (peek(ps) == (unsigned char)c) {
		ps->p++;
		return 1;
	}
	return 0;
}

const char *text_describe_here(const struct parser *ps, char *buf, size_t size)
{
	if (ps->p >= ps->end)
		return "the end of the line";
	size_t n = (size_t)(ps->end - ps->p);
	if (n > 16)
		n = 16;
	snprintf(buf, size, "'%.*s'", (int)n, ps->p);
	return buf;
}

int text_expect(struct parser *ps, char c, const char *what)
{
	char buf[40];

	if (text_accept(ps, c))
		return 0;
	return FAIL(ps, ps->p, "expected %s, found %s", what, text_describe_here(ps, buf, sizeof(buf)));
}

/* Consumes `word` when it comes next as a whole word. */
int text_accept_word(struct parser *ps, const char *word)
{
	size_t n = strlen(word);

	skip_spaces(ps);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return 0;
	if (ps->p + n < ps->end) {
		unsigned char c = (unsigned char)ps->p[n];
		if (c == '_' || c == '.' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'))
			return 0;
	}
	ps->p += n;
	return 1;
}

/* Nothing but an optional "# comment" may follow. */
int text_expect_line_end(struct parser *ps)
{
	char buf[40];

	skip_spaces(ps);
	if (at_end(ps) || *ps->p == '#')
		return 0;
	return FAIL(ps, ps->p, "unexpected %s at the end of the line",
		    text_describe_here(ps, buf, sizeof(buf)));
}

/* A run of characters up to a space or one of `stops`, copied into buf.
 * -1 (with an error) when empty or longer than buf. */
int text_read_token(struct parser *ps, const char *stops, char *buf, size_t size, const char *what)
{
	const char *s;
	char tmp[40];

	skip_spaces(ps);
	s = ps->p;
	while (ps->p < ps->end && *ps->p != ' ' && *ps->p != '\t' && !strchr(stops, *ps->p))
		ps->p++;
	if (ps->p == s)
		return FAIL(ps, s, "expected %s, found %s", what, text_describe_here(ps, tmp, sizeof(tmp)));
	if ((size_t)(ps->p - s) >= size)
		return FAIL(ps, s, "%s is too long", what);
	memcpy(buf, s, (size_t)(ps->p - s));
	buf[ps->p - s] = '\0';
	return 0;
}

int text_parse_int64(struct parser *ps, int64_t *out, const char *what)
{
	const char *at;
	char buf[32], *end;
	long long v;

	skip_spaces(ps);
	at = ps->p;
	if (text_read_token(ps, ",)]}>:", buf, sizeof(buf), what))
		return -1;
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (*end || errno || end == buf)
		return FAIL(ps, at, "expected %s (an integer), found '%s'", what, buf);
	*out = v;
	return 0;
}

const char *text_scan_string(const char *p, const char *end, char *buf, size_t *n, const char **bad)
{
	static const char hex[] = "0123456789abcdefABCDEF";
	size_t k = 0;

	*bad = NULL;
	while (p < end) {
		char c = *p++, v;
		if (c == '"') {
			*n = k;
			return p;
		}
		if (c != '\\') {
			v = c;
		} else if (p < end && (*p == '"' || *p == '\\')) {
			v = *p++;
		} else if (p < end && (*p == 'n' || *p == 't')) {
			v = *p++ == 'n' ? '\n' : '\t';
		} else if (p < end && *p == 'x' && end - p >= 3 && p[1] && p[2] && strchr(hex, p[1]) &&
			   strchr(hex, p[2])) {
			char h[3] = {p[1], p[2], '\0'};
			v = (char)strtol(h, NULL, 16);
			p += 3;
		} else {
			*bad = p;
			return NULL;
		}
		if (buf)
			buf[k] = v;
		k++;
	}
	return NULL;
}

/* A quoted string with the printer's escapes (text_scan_string).  The
 * result is allocated in `a` and NUL-terminated; *len (if given) is its
 * length, which may include NUL bytes.  Names (len == NULL) must not hold
 * any. */
int text_parse_string(struct parser *ps, struct tpf_arena *a, const char **out, size_t *len)
{
	char *buf;
	size_t n = 0;
	char tmp[40];
	const char *start, *bad, *after;

	skip_spaces(ps);
	start = ps->p;
	if (peek(ps) != '"')
		return FAIL(ps, ps->p, "expected a quoted string, found %s",
			    text_describe_here(ps, tmp, sizeof(tmp)));
	buf = tpf_malloc((size_t)(ps->end - ps->p) + 1);
	if (!buf)
		return text_nomem(ps);
	after = text_scan_string(ps->p + 1, ps->end, buf, &n, &bad);
	if (!after) {
		tpf_free(buf);
		if (!bad)
			return FAIL(ps, start, "unterminated string");
		/* a '\\' that ends the line: the error points at it */
		char c = bad < ps->end ? *bad : '\0';
		return FAIL(ps, c ? bad : bad - 1, "unknown escape '\\%c' in a string (known: \\\" \\\\ \\n \\t \\xHH)",
			    c ? c : '?');
	}
	ps->p = after;
	if (!len && memchr(buf, '\0', n)) {
		tpf_free(buf);
		return FAIL(ps, start, "a name may not contain a NUL byte");
	}
	*out = tpf_arena_strndup(a, buf, n);
	tpf_free(buf);
	if (!*out)
		return text_nomem(ps);
	if (len)
		*len = n;
	return 0;
}

/* Grows an arena array by one element; returns the new (zeroed) slot. */
void *text_arena_push(struct tpf_arena *a, void **arr, size_t *n, size_t *cap, size_t elem)
{
	if (ir_arena_grow(a, arr, cap, elem, *n + 1))
		return NULL;
	unsigned char *slot = (unsigned char *)*arr + *n * elem;
	memset(slot, 0, elem);
	(*n)++;
	return slot;
}

/* After an item of a list that ends at `close`: 1 after a comma (another
 * item follows), 0 at `close`, -1 (reported: `expected`) otherwise. */
int text_list_next(struct parser *ps, char close, const char *expected)
{
	if (text_accept(ps, close))
		return 0;
	return text_expect(ps, ',', expected) ? -1 : 1;
}

/* text_arena_push for a node line's lists: out of memory is reported. */
void *text_push_item(struct parser *ps, struct tpf_arena *a, void **arr, size_t *n, size_t *cap,
		       size_t elem)
{
	void *p = text_arena_push(a, arr, n, cap, elem);

	if (!p)
		text_nomem(ps);
	return p;
}
