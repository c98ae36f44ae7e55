/* SPDX-License-Identifier: MIT */
/*
 * Private to the text reader: the parser state and the pieces its files
 * share.  parse-lex.c reads lines, tokens, numbers and strings;
 * parse-types.c reads types, tensors and attribute values; parse-text.c
 * reads graphs, nodes, functions and the model (the grammar is described
 * there).
 */
#ifndef TPF_PARSE_TEXT_PRIVATE_H
#define TPF_PARSE_TEXT_PRIVATE_H

#include "tpf-ir.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

struct parser {
	char *text; /* NUL-terminated copy */
	size_t size;
	size_t next;      /* offset of the next line */
	const char *line; /* the current line */
	const char *end;  /* its end (no '\n', no trailing '\r') */
	const char *p;    /* the cursor in it */
	unsigned line_no;
	const char *name; /* for messages */
	struct tpf_diag *d;
	struct tpf_model *m;
	enum tpf_status st;
	const unsigned char *zero; /* shared zero bytes for "(N bytes)" tensors */
	size_t zero_size;
	size_t zero_total; /* bytes of every "(N bytes)" tensor so far */
	/* the folder external data is read from (the text file's), or NULL:
	 * external tensors are then left without data */
	const char *base_dir;
	char *base_real; /* its realpath, once needed */
};

struct line_state {
	size_t next;
	const char *line, *end, *p;
	unsigned line_no;
};

static inline unsigned col_of(const struct parser *ps, const char *at)
{
	if (!at || at < ps->line || at > ps->end)
		return 1;
	return (unsigned)(at - ps->line) + 1;
}

static inline void skip_spaces(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

static inline int at_end(struct parser *ps)
{
	return ps->p >= ps->end;
}

static inline int peek(struct parser *ps)
{
	return ps->p < ps->end ? (unsigned char)*ps->p : -1;
}

/* ------------------------------------------------------------------ parse-lex.c */

/* Reports an error at LINE:COL; returns -1.  Only the first error counts. */
int text_fail_at_line(struct parser *ps, unsigned line, unsigned col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
#define FAIL(ps, at, ...) text_fail_at_line((ps), (ps)->line_no, col_of((ps), (at)), __VA_ARGS__)

int text_nomem(struct parser *ps);
/* Moves to the next line that is neither blank nor a comment.  0 at the end. */
int text_next_line(struct parser *ps);
struct line_state text_save_line(const struct parser *ps);
void text_restore_line(struct parser *ps, struct line_state s);
/* Skips spaces and consumes `c` if it comes next. */
int text_accept(struct parser *ps, char c);
const char *text_describe_here(const struct parser *ps, char *buf, size_t size);
int text_expect(struct parser *ps, char c, const char *what);
/* Consumes `word` when it comes next as a whole word. */
int text_accept_word(struct parser *ps, const char *word);
/* Nothing but an optional "# comment" may follow. */
int text_expect_line_end(struct parser *ps);
/* A run of characters up to a space or one of `stops`, copied into buf.
 * -1 (with an error) when empty or longer than buf. */
int text_read_token(struct parser *ps, const char *stops, char *buf, size_t size, const char *what);
int text_parse_int64(struct parser *ps, int64_t *out, const char *what);
/* The body of a quoted string from p (after its opening '"') with the
 * printer's escapes (\" \\ \n \t \xHH), up to end: the position after the
 * closing '"', *n the decoded length and buf (if not NULL, room for end - p
 * bytes) the bytes; or NULL, *bad at an unknown escape's letter (at end
 * after a final '\\'; NULL when the closing '"' is missing). */
const char *text_scan_string(const char *p, const char *end, char *buf, size_t *n, const char **bad);
/* A quoted string with the printer's escapes.  The result is allocated in
 * `a` and NUL-terminated; *len (if given) is its length, which may include
 * NUL bytes.  Names (len == NULL) must not hold any. */
int text_parse_string(struct parser *ps, struct tpf_arena *a, const char **out, size_t *len);
/* Grows an arena array by one element; returns the new (zeroed) slot. */
void *text_arena_push(struct tpf_arena *a, void **arr, size_t *n, size_t *cap, size_t elem);
/* After an item of a list that ends at `close`: 1 after a comma (another
 * item follows), 0 at `close`, -1 (reported: `expected`) otherwise. */
int text_list_next(struct parser *ps, char close, const char *expected);
/* text_arena_push for a node line's lists: out of memory is reported. */
void *text_push_item(struct parser *ps, struct tpf_arena *a, void **arr, size_t *n, size_t *cap,
		       size_t elem);

/* ------------------------------------------------------------------ parse-types.c */

/* "bf16[T,4096]", "f32[*]", "?[4]", "?" or "opaque" into t (dims in a). */
int text_parse_type(struct parser *ps, struct tpf_arena *a, struct tpf_type *t);
/* "dtype[d0,d1]" with static dims: a tensor's dtype and shape. */
int text_parse_tensor_shape(struct parser *ps, enum tpf_dtype *dt, int *rank, int64_t *dims);
/* The printer's tensor summary: "= elements", "(N bytes)", "(N bytes,
 * external "loc" offset K)" or "(N bytes, not loaded)". */
int text_parse_summary(struct parser *ps, struct tpf_arena *a, struct tpf_tensor *t);
/* An attribute value as the printer writes it, into a (name set by the
 * caller).  `graphs_ok`: graph values are allowed (their blocks follow). */
int text_parse_attr_value(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at, int graphs_ok);

#pragma GCC visibility pop

#endif /* TPF_PARSE_TEXT_PRIVATE_H */
