/* SPDX-License-Identifier: MIT */
/*
 * Reader for the deterministic text dump (print-text.c): a dump becomes a
 * model again, so a pass test or a bug report can be written as text.
 *
 * The grammar is the printer's layout, one construct a line:
 *
 *   ir_version 10                       model lines, any order
 *   producer "pytorch" "2.5"
 *   opset "" 18
 *   metadata "tp_rank" "0"
 *   graph "main" {
 *     input %0: bf16[T,4096] "hidden"   [default = [...] | default (N bytes)]
 *     init %1: bf16[4096] "w" (8192 bytes)
 *     %2 = RMSNormalization(%0, %1) {epsilon=1e-06} : bf16[T,4096]  # norm
 *     %3, _ = dom.Op:overload(%2, _) {...} : (f32[4], ?)  # -> out_name [pass/pattern]
 *       body: graph "name" {            subgraph blocks follow their node
 *         ...
 *       }
 *     output %2: bf16[T,4096] "out"
 *   }
 *   function "domain" "name" [overload "x"] { attribute/opset/metadata lines, a body }
 *
 * What a dump leaves out comes back as follows.  Values are referred to by
 * their labels (%N): a label is only a name for the reference, the printer
 * renumbers.  Node outputs that the dump does not name are named after
 * their label ("%7"); a nameless node's "# -> NAME" comment and the graph
 * output lines give the real names.  A tensor printed as "(N bytes)" reads
 * back filled with zeros (all such tensors share one zero buffer); external
 * and "not loaded" tensors come back without data.  Lines whose first
 * non-blank character is '#' are comments, and input, init and output lines
 * may end with a "# ..." comment.  Hand-written text may leave out node
 * types and comments, list more than 8 tensor elements, write element
 * values that round to the dtype, and refer to a value before the line
 * that defines it (within one graph; the nodes are then sorted).
 *
 * Printing a model read from a dump reproduces the dump byte for byte.  Not
 * readable, because the dump does not hold their contents: sparse_tensor
 * and type_proto attributes, graph-valued attributes of functions.
 *
 * Untrusted input: every count is bounded by the text, nesting by
 * MAX_DEPTH, a zero-filled tensor by MAX_ZERO_TENSOR bytes and all of them
 * together by MAX_ZERO_TOTAL; every error is a TPF_ERR_PARSE with
 * "NAME:LINE:COL: " in front of the message (TPF_ERR_IO for an external
 * data file that cannot be read).  Names follow ONNX's rules: a graph
 * input, initializer or output, a function and an attribute need one.
 * External data locations follow the ONNX importer's: a relative path
 * inside the model's folder; read from a file, the data is read from
 * there (a missing file is an error), read from memory it is left out.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype-private.h"
#include "onnx-io-private.h"

#define MAX_TEXT_FILE ((size_t)256 << 20)
#define MAX_ZERO_TENSOR ((size_t)256 << 20)
/* what all of a model's "(N bytes)" tensors may ask for together: the
 * text holds none of it, an export writes all of it */
#define MAX_ZERO_TOTAL ((size_t)64 << 20)
#define MAX_DEPTH 64
#define MAX_NODE_ATTRS 4096
#define MAX_NODE_OUTPUTS 4096
#define MAX_STRINGS ((size_t)1 << 20)
#define MAX_LABEL UINT32_MAX
/* marks a value whose name is only its label; cleared at the end */
#define LABEL_ONLY_MARK 0x50484c44u

/* ------------------------------------------------------------------ labels */

struct label_entry {
	uint64_t label;
	struct tpf_value *value; /* NULL: free slot */
	unsigned line;
};

struct label_map {
	struct label_entry *slots;
	size_t cap, count;
};

static size_t label_hash(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)x;
}

static struct label_entry *label_find(const struct label_map *lm, uint64_t label)
{
	if (!lm->cap)
		return NULL;
	for (size_t i = label_hash(label) & (lm->cap - 1);; i = (i + 1) & (lm->cap - 1)) {
		if (!lm->slots[i].value)
			return NULL;
		if (lm->slots[i].label == label)
			return &lm->slots[i];
	}
}

/* 0 ok, -1 out of memory.  The label must not be in the map. */
static int label_put(struct label_map *lm, uint64_t label, struct tpf_value *v, unsigned line)
{
	if ((lm->count + 1) * 2 > lm->cap) {
		size_t cap = lm->cap ? lm->cap * 2 : 64;
		struct label_entry *slots = tpf_calloc(cap, sizeof(*slots));
		if (!slots)
			return -1;
		for (size_t i = 0; i < lm->cap; i++) {
			if (!lm->slots[i].value)
				continue;
			size_t j = label_hash(lm->slots[i].label) & (cap - 1);
			while (slots[j].value)
				j = (j + 1) & (cap - 1);
			slots[j] = lm->slots[i];
		}
		tpf_free(lm->slots);
		lm->slots = slots;
		lm->cap = cap;
	}
	size_t j = label_hash(label) & (lm->cap - 1);
	while (lm->slots[j].value)
		j = (j + 1) & (lm->cap - 1);
	lm->slots[j].label = label;
	lm->slots[j].value = v;
	lm->slots[j].line = line;
	lm->count++;
	return 0;
}

/* A node input that names a label defined further down. */
struct fixup {
	struct tpf_node *node;
	size_t index;
	uint64_t label;
	unsigned line, col;
};

/* One graph being read: its labels, and the enclosing graph's scope. */
struct scope {
	struct scope *parent;
	struct tpf_graph *g;
	struct label_map labels;
	struct fixup *fixups; /* in g's arena */
	size_t n_fixups, cap_fixups;
	int depth;
};

/* The fixups live in the graph's arena. */
static void scope_free(struct scope *sc)
{
	tpf_free(sc->labels.slots);
}

/* ------------------------------------------------------------------ parser */

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

static unsigned col_of(const struct parser *ps, const char *at)
{
	if (!at || at < ps->line || at > ps->end)
		return 1;
	return (unsigned)(at - ps->line) + 1;
}

static int fail_at_line(struct parser *ps, unsigned line, unsigned col, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail_at_line(struct parser *ps, unsigned line, unsigned col, const char *fmt, ...)
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

#define FAIL(ps, at, ...) fail_at_line((ps), (ps)->line_no, col_of((ps), (at)), __VA_ARGS__)

static int nomem(struct parser *ps)
{
	if (!ps->st) {
		tpf_diag_add(ps->d, TPF_SEV_ERROR, "%s:%u: out of memory", ps->name, ps->line_no);
		ps->st = TPF_ERR_NOMEM;
	}
	return -1;
}

/* Moves to the next line that is neither blank nor a comment.  0 at the end. */
static int next_line(struct parser *ps)
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

struct line_state {
	size_t next;
	const char *line, *end, *p;
	unsigned line_no;
};

static struct line_state save_line(const struct parser *ps)
{
	return (struct line_state){ps->next, ps->line, ps->end, ps->p, ps->line_no};
}

static void restore_line(struct parser *ps, struct line_state s)
{
	ps->next = s.next;
	ps->line = s.line;
	ps->end = s.end;
	ps->p = s.p;
	ps->line_no = s.line_no;
}

static void skip_spaces(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

static int at_end(struct parser *ps)
{
	return ps->p >= ps->end;
}

static int peek(struct parser *ps)
{
	return ps->p < ps->end ? (unsigned char)*ps->p : -1;
}

/* Skips spaces and consumes `c` if it comes next. */
static int accept(struct parser *ps, char c)
{
	skip_spaces(ps);
	if (peek(ps) == (unsigned char)c) {
		ps->p++;
		return 1;
	}
	return 0;
}

static const char *describe_here(const struct parser *ps, char *buf, size_t size)
{
	if (ps->p >= ps->end)
		return "the end of the line";
	size_t n = (size_t)(ps->end - ps->p);
	if (n > 16)
		n = 16;
	snprintf(buf, size, "'%.*s'", (int)n, ps->p);
	return buf;
}

static int expect(struct parser *ps, char c, const char *what)
{
	char buf[40];

	if (accept(ps, c))
		return 0;
	return FAIL(ps, ps->p, "expected %s, found %s", what, describe_here(ps, buf, sizeof(buf)));
}

/* Consumes `word` when it comes next as a whole word. */
static int accept_word(struct parser *ps, const char *word)
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
static int expect_line_end(struct parser *ps)
{
	char buf[40];

	skip_spaces(ps);
	if (at_end(ps) || *ps->p == '#')
		return 0;
	return FAIL(ps, ps->p, "unexpected %s at the end of the line",
		    describe_here(ps, buf, sizeof(buf)));
}

/* A run of characters up to a space or one of `stops`, copied into buf.
 * -1 (with an error) when empty or longer than buf. */
static int read_token(struct parser *ps, const char *stops, char *buf, size_t size, const char *what)
{
	const char *s;
	char tmp[40];

	skip_spaces(ps);
	s = ps->p;
	while (ps->p < ps->end && *ps->p != ' ' && *ps->p != '\t' && !strchr(stops, *ps->p))
		ps->p++;
	if (ps->p == s)
		return FAIL(ps, s, "expected %s, found %s", what, describe_here(ps, tmp, sizeof(tmp)));
	if ((size_t)(ps->p - s) >= size)
		return FAIL(ps, s, "%s is too long", what);
	memcpy(buf, s, (size_t)(ps->p - s));
	buf[ps->p - s] = '\0';
	return 0;
}

static int parse_int64(struct parser *ps, int64_t *out, const char *what)
{
	const char *at;
	char buf[32], *end;
	long long v;

	skip_spaces(ps);
	at = ps->p;
	if (read_token(ps, ",)]}>:", buf, sizeof(buf), what))
		return -1;
	errno = 0;
	v = strtoll(buf, &end, 10);
	if (*end || errno || end == buf)
		return FAIL(ps, at, "expected %s (an integer), found '%s'", what, buf);
	*out = v;
	return 0;
}

/* A quoted string with the printer's escapes: \" \\ \n \t \xHH.  The result
 * is allocated in `a` and NUL-terminated; *len (if given) is its length,
 * which may include NUL bytes.  Names (len == NULL) must not hold any. */
static int parse_string(struct parser *ps, struct tpf_arena *a, const char **out, size_t *len)
{
	char *buf;
	size_t n = 0;
	char tmp[40];
	const char *start;

	skip_spaces(ps);
	start = ps->p;
	if (peek(ps) != '"')
		return FAIL(ps, ps->p, "expected a quoted string, found %s",
			    describe_here(ps, tmp, sizeof(tmp)));
	ps->p++;
	buf = tpf_malloc((size_t)(ps->end - ps->p) + 1);
	if (!buf)
		return nomem(ps);
	for (;;) {
		if (ps->p >= ps->end) {
			tpf_free(buf);
			return FAIL(ps, start, "unterminated string");
		}
		char c = *ps->p++;
		if (c == '"')
			break;
		if (c != '\\') {
			buf[n++] = c;
			continue;
		}
		c = ps->p < ps->end ? *ps->p++ : '\0';
		if (c == '"' || c == '\\') {
			buf[n++] = c;
		} else if (c == 'n') {
			buf[n++] = '\n';
		} else if (c == 't') {
			buf[n++] = '\t';
		} else if (c == 'x' && ps->end - ps->p >= 2 && strchr("0123456789abcdefABCDEF", ps->p[0]) &&
			   strchr("0123456789abcdefABCDEF", ps->p[1]) && ps->p[0] && ps->p[1]) {
			char hex[3] = {ps->p[0], ps->p[1], '\0'};
			buf[n++] = (char)strtol(hex, NULL, 16);
			ps->p += 2;
		} else {
			tpf_free(buf);
			return FAIL(ps, ps->p - 1, "unknown escape '\\%c' in a string (known: \\\" \\\\ \\n \\t \\xHH)",
				    c ? c : '?');
		}
	}
	if (!len && memchr(buf, '\0', n)) {
		tpf_free(buf);
		return FAIL(ps, start, "a name may not contain a NUL byte");
	}
	*out = tpf_arena_strndup(a, buf, n);
	tpf_free(buf);
	if (!*out)
		return nomem(ps);
	if (len)
		*len = n;
	return 0;
}

/* Grows an arena array by one element; returns the new (zeroed) slot. */
static void *arena_push(struct tpf_arena *a, void **arr, size_t *n, size_t *cap, size_t elem)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 4, bytes;
		if (tpf_mul_size(ncap, elem, &bytes))
			return NULL;
		void *p = tpf_arena_alloc(a, bytes);
		if (!p)
			return NULL;
		if (*n)
			memcpy(p, *arr, *n * elem);
		*arr = p;
		*cap = ncap;
	}
	unsigned char *slot = (unsigned char *)*arr + *n * elem;
	memset(slot, 0, elem);
	(*n)++;
	return slot;
}

/* After an item of a list that ends at `close`: 1 after a comma (another
 * item follows), 0 at `close`, -1 (reported: `expected`) otherwise. */
static int list_next(struct parser *ps, char close, const char *expected)
{
	if (accept(ps, close))
		return 0;
	return expect(ps, ',', expected) ? -1 : 1;
}

/* arena_push for a node line's lists: out of memory is reported. */
static void *push_item(struct parser *ps, struct tpf_arena *a, void **arr, size_t *n, size_t *cap,
		       size_t elem)
{
	void *p = arena_push(a, arr, n, cap, elem);

	if (!p)
		nomem(ps);
	return p;
}

/* ------------------------------------------------------------------ types */

static int parse_dtype(struct parser *ps, enum tpf_dtype *out)
{
	const char *at;
	char buf[32];

	skip_spaces(ps);
	at = ps->p;
	if (read_token(ps, "[]<>(),=:", buf, sizeof(buf), "a dtype"))
		return -1;
	if (strcmp(buf, "?") == 0) {
		*out = TPF_DTYPE_UNDEFINED;
		return 0;
	}
	if (tpf_dtype_from_name(buf, out) || *out == TPF_DTYPE_UNDEFINED)
		return FAIL(ps, at, "unknown dtype '%s'", buf);
	return 0;
}

/* "bf16[T,4096]", "f32[*]", "?[4]", "?" or "opaque" into t (dims in a). */
static int parse_type(struct parser *ps, struct tpf_arena *a, struct tpf_type *t)
{
	struct tpf_dim dims[TPF_MAX_RANK];
	int rank = 0;
	const char *at;

	memset(t, 0, sizeof(*t));
	t->shape.rank = -1;
	skip_spaces(ps);
	at = ps->p;
	if (accept_word(ps, "opaque")) {
		t->kind = TPF_TYPE_OPAQUE;
		return 0;
	}
	if (peek(ps) == '?' && (ps->p + 1 >= ps->end || ps->p[1] != '[')) {
		ps->p++;
		return 0;
	}
	t->kind = TPF_TYPE_TENSOR;
	if (parse_dtype(ps, &t->dtype))
		return -1;
	if (peek(ps) != '[')
		return FAIL(ps, ps->p, "expected '[' and the dims after the dtype");
	ps->p++;
	if (ps->p + 1 < ps->end && ps->p[0] == '*' && ps->p[1] == ']') {
		ps->p += 2;
		return 0;
	}
	if (peek(ps) == ']') {
		ps->p++;
		t->shape.rank = 0;
		return 0;
	}
	for (;;) {
		const char *s = ps->p;
		while (ps->p < ps->end && *ps->p != ',' && *ps->p != ']')
			ps->p++;
		if (ps->p >= ps->end)
			return FAIL(ps, at, "missing ']' after the dims");
		if (ps->p == s)
			return FAIL(ps, s, "empty dim");
		if (rank >= TPF_MAX_RANK)
			return FAIL(ps, s, "more than %d dims", TPF_MAX_RANK);
		struct tpf_dim *dd = &dims[rank++];
		size_t n = (size_t)(ps->p - s), k;
		memset(dd, 0, sizeof(*dd));
		for (k = 0; k < n && s[k] >= '0' && s[k] <= '9'; k++)
			;
		if (n == 1 && s[0] == '?') {
			dd->value = -1;
		} else if (k == n) {
			char buf[24];
			if (n >= sizeof(buf))
				return FAIL(ps, s, "dim too large");
			memcpy(buf, s, n);
			buf[n] = '\0';
			errno = 0;
			dd->value = strtoll(buf, NULL, 10);
			if (errno)
				return FAIL(ps, s, "dim too large");
		} else {
			dd->value = -1;
			dd->param = tpf_arena_strndup(a, s, n);
			if (!dd->param)
				return nomem(ps);
		}
		if (*ps->p++ == ']')
			break;
	}
	t->shape.rank = rank;
	t->shape.dims = tpf_arena_memdup(a, dims, (size_t)rank * sizeof(*dims));
	if (!t->shape.dims)
		return nomem(ps);
	return 0;
}

/* "dtype[d0,d1]" with static dims: a tensor's dtype and shape. */
static int parse_tensor_shape(struct parser *ps, enum tpf_dtype *dt, int *rank, int64_t *dims)
{
	const char *at;
	char buf[40];

	skip_spaces(ps);
	at = ps->p;
	if (parse_dtype(ps, dt))
		return -1;
	if (*dt == TPF_DTYPE_UNDEFINED)
		return FAIL(ps, at, "a tensor needs a dtype");
	if (peek(ps) != '[')
		return FAIL(ps, ps->p, "expected '[' and the dims after the dtype");
	ps->p++;
	*rank = 0;
	if (peek(ps) == ']') {
		ps->p++;
		return 0;
	}
	for (;;) {
		int64_t v;
		const char *s = ps->p;
		if (*rank >= TPF_MAX_RANK)
			return FAIL(ps, s, "more than %d dims", TPF_MAX_RANK);
		if (parse_int64(ps, &v, "a static dim"))
			return -1;
		if (v < 0)
			return FAIL(ps, s, "a tensor dim must not be negative");
		dims[(*rank)++] = v;
		if (peek(ps) == ']') {
			ps->p++;
			return 0;
		}
		if (peek(ps) != ',')
			return FAIL(ps, ps->p, "expected ',' or ']' in the dims, found %s",
				    describe_here(ps, buf, sizeof(buf)));
		ps->p++;
	}
}

/* ---------------------------------------------------------- tensor elements */

/* Round to nearest even; NaN stays NaN, overflow becomes infinity. */
static uint16_t float_to_half(float f)
{
	uint32_t x, sign, exp, man, half, rem;
	int e;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000;
	exp = (x >> 23) & 0xff;
	man = x & 0x7fffff;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
	e = (int)exp - 127 + 15;
	if (e >= 31)
		return (uint16_t)(sign | 0x7c00);
	if (e <= 0) {
		if (e < -10)
			return (uint16_t)sign;
		man |= 0x800000;
		unsigned shift = (unsigned)(14 - e);
		half = man >> shift;
		rem = man & ((1u << shift) - 1);
		uint32_t halfway = 1u << (shift - 1);
		if (rem > halfway || (rem == halfway && (half & 1)))
			half++;
		return (uint16_t)(sign | half);
	}
	half = sign | ((uint32_t)e << 10) | (man >> 13);
	rem = man & 0x1fff;
	if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
		half++; /* a carry into the exponent is the right result */
	return (uint16_t)half;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40);
	x += 0x7fff + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

/* The code of a small float format nearest to v (exact when v is one of
 * its values, sign of zero included).  -1 when v cannot be represented. */
static int encode_small(enum tpf_dtype dt, double v, unsigned *code)
{
	unsigned n = dt == TPF_DTYPE_FLOAT4E2M1 ? 16 : 256, c;
	double best = INFINITY;
	int found = 0;

	for (c = 0; c < n; c++) {
		float f = ir_small_float_to_float(dt, c);
		if (isnan(v) || isnan(f)) {
			if (isnan(v) && isnan(f)) {
				*code = c;
				return 0;
			}
			continue;
		}
		if ((double)f == v && !signbit(f) == !signbit(v)) {
			*code = c;
			return 0;
		}
		double diff = fabs((double)f - v);
		if (diff < best) {
			best = diff;
			*code = c;
			found = 1;
		}
	}
	return found && !isinf(v) && !isnan(v) ? 0 : -1;
}

/* Parses one element token of dtype dt and stores it as element i of buf. */
static int store_element(struct parser *ps, enum tpf_dtype dt, const char *tok, const char *at,
			 unsigned char *buf, size_t i)
{
	unsigned bits = tpf_dtype_bits(dt);
	char *end;
	double v = 0;
	int is_float = tpf_dtype_is_float(dt);
	long long iv = 0;
	unsigned long long uv = 0;
	int is_unsigned = dt == TPF_DTYPE_UINT8 || dt == TPF_DTYPE_UINT16 || dt == TPF_DTYPE_UINT32 ||
			  dt == TPF_DTYPE_UINT64 || dt == TPF_DTYPE_UINT4 || dt == TPF_DTYPE_UINT2;

	errno = 0;
	if (dt == TPF_DTYPE_BOOL) {
		if (strcmp(tok, "true") == 0 || strcmp(tok, "1") == 0)
			buf[i] = 1;
		else if (strcmp(tok, "false") == 0 || strcmp(tok, "0") == 0)
			buf[i] = 0;
		else
			return FAIL(ps, at, "expected true or false, found '%s'", tok);
		return 0;
	}
	if (is_float) {
		v = strtod(tok, &end);
		if (*end || end == tok)
			return FAIL(ps, at, "expected a number, found '%s'", tok);
	} else if (is_unsigned) {
		if (tok[0] == '-')
			return FAIL(ps, at, "%s is unsigned, found '%s'", tpf_dtype_name(dt), tok);
		uv = strtoull(tok, &end, 10);
		if (*end || end == tok || errno)
			return FAIL(ps, at, "expected an integer of %s, found '%s'", tpf_dtype_name(dt), tok);
	} else {
		iv = strtoll(tok, &end, 10);
		if (*end || end == tok || errno)
			return FAIL(ps, at, "expected an integer of %s, found '%s'", tpf_dtype_name(dt), tok);
	}
	if (bits < 8) {
		unsigned per = 8 / bits, mask = (1u << bits) - 1, code;
		if (dt == TPF_DTYPE_FLOAT4E2M1) {
			if (encode_small(dt, v, &code))
				return FAIL(ps, at, "%s cannot hold '%s'", tpf_dtype_name(dt), tok);
		} else if (is_unsigned) {
			if (uv > mask)
				return FAIL(ps, at, "'%s' is out of the range of %s", tok, tpf_dtype_name(dt));
			code = (unsigned)uv;
		} else {
			long long lo = -(1ll << (bits - 1)), hi = (1ll << (bits - 1)) - 1;
			if (iv < lo || iv > hi)
				return FAIL(ps, at, "'%s' is out of the range of %s", tok, tpf_dtype_name(dt));
			code = (unsigned)iv & mask;
		}
		buf[i / per] |= (unsigned char)(code << ((i % per) * bits));
		return 0;
	}
	unsigned char *p = buf + i * (bits / 8);
	switch (dt) {
	case TPF_DTYPE_FLOAT: {
		float f = (float)v;
		memcpy(p, &f, 4);
		return 0;
	}
	case TPF_DTYPE_DOUBLE:
		memcpy(p, &v, 8);
		return 0;
	case TPF_DTYPE_FLOAT16:
	case TPF_DTYPE_BFLOAT16: {
		uint16_t h = dt == TPF_DTYPE_FLOAT16 ? float_to_half((float)v) : float_to_bf16((float)v);
		p[0] = (unsigned char)(h & 0xff);
		p[1] = (unsigned char)(h >> 8);
		return 0;
	}
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
	case TPF_DTYPE_FLOAT8E8M0: {
		unsigned code;
		if (encode_small(dt, v, &code))
			return FAIL(ps, at, "%s cannot hold '%s'", tpf_dtype_name(dt), tok);
		p[0] = (unsigned char)code;
		return 0;
	}
	case TPF_DTYPE_UINT8:
	case TPF_DTYPE_UINT16:
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_UINT64: {
		unsigned long long max = bits == 64 ? ~0ull : (1ull << bits) - 1;
		if (uv > max)
			return FAIL(ps, at, "'%s' is out of the range of %s", tok, tpf_dtype_name(dt));
		for (unsigned k = 0; k < bits / 8; k++)
			p[k] = (unsigned char)(uv >> (8 * k));
		return 0;
	}
	case TPF_DTYPE_INT8:
	case TPF_DTYPE_INT16:
	case TPF_DTYPE_INT32:
	case TPF_DTYPE_INT64: {
		if (bits < 64 && (iv < -(1ll << (bits - 1)) || iv > (1ll << (bits - 1)) - 1))
			return FAIL(ps, at, "'%s' is out of the range of %s", tok, tpf_dtype_name(dt));
		unsigned long long u = (unsigned long long)iv;
		for (unsigned k = 0; k < bits / 8; k++)
			p[k] = (unsigned char)(u >> (8 * k));
		return 0;
	}
	default:
		return FAIL(ps, at, "%s elements cannot be written as text", tpf_dtype_name(dt));
	}
}

/* Elements after "= ": a bare element for a scalar, else "[e0, e1, ...]";
 * exactly numel of them.  Fills t->data/nbytes (or t->strings). */
static int parse_elements(struct parser *ps, struct tpf_arena *a, struct tpf_tensor *t, int64_t numel)
{
	unsigned char *buf = NULL;
	const char **strs = NULL;
	size_t *lens = NULL;
	size_t count = 0, cap = 0, bytes = 0;
	int bracket = t->rank > 0, rc = -1;
	const char *open = ps->p;

	if (t->dtype == TPF_DTYPE_STRING) {
		/* numel bounds the arrays; at most one element per text byte */
		if ((size_t)numel > (size_t)(ps->end - ps->p) + 1)
			return FAIL(ps, ps->p, "%" PRId64 " strings cannot fit on this line", numel);
		strs = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(*strs));
		lens = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(*lens));
		if (!strs || !lens)
			return nomem(ps);
	} else {
		if (tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &bytes) || !tpf_dtype_bits(t->dtype))
			return FAIL(ps, ps->p, "%s elements cannot be written as text", tpf_dtype_name(t->dtype));
		/* a number takes at least one character and a separator */
		if (bytes > 8 * ((size_t)(ps->end - ps->p) + 1))
			return FAIL(ps, ps->p, "%" PRId64 " elements cannot fit on this line", numel);
		cap = bytes ? bytes : 1;
		buf = tpf_calloc(1, cap);
		if (!buf)
			return nomem(ps);
	}
	skip_spaces(ps);
	if (bracket && expect(ps, '[', "'[' before the elements"))
		goto out;
	if (bracket && accept(ps, ']'))
		goto done;
	for (;;) {
		skip_spaces(ps);
		const char *at = ps->p;
		if ((int64_t)count >= numel) {
			FAIL(ps, at, "more than the %" PRId64 " elements of the shape", numel);
			goto out;
		}
		if (t->dtype == TPF_DTYPE_STRING) {
			if (parse_string(ps, a, &strs[count], &lens[count]))
				goto out;
		} else {
			char tok[64];
			if (read_token(ps, ",]>)", tok, sizeof(tok), "an element") ||
			    store_element(ps, t->dtype, tok, at, buf, count))
				goto out;
		}
		count++;
		if (!bracket)
			break;
		if (accept(ps, ']'))
			break;
		if (expect(ps, ',', "',' or ']' between the elements"))
			goto out;
	}
done:
	if ((int64_t)count != numel) {
		FAIL(ps, open, "%zu elements for a shape of %" PRId64, count, numel);
		goto out;
	}
	if (t->dtype == TPF_DTYPE_STRING) {
		t->strings = (char **)strs;
		t->string_lens = lens;
		t->n_strings = count;
		t->data = NULL;
		t->nbytes = 0;
	} else {
		t->data = bytes ? tpf_arena_memdup(a, buf, bytes) : NULL;
		if (bytes && !t->data) {
			nomem(ps);
			goto out;
		}
		t->nbytes = bytes;
	}
	rc = 0;
out:
	tpf_free(buf);
	return rc;
}

/* `size` zero bytes that live as long as the model. */
static const void *zero_bytes(struct parser *ps, size_t size)
{
	if (size <= ps->zero_size)
		return ps->zero;
	size_t want = ps->zero_size * 2 > size ? ps->zero_size * 2 : size;
	if (want > MAX_ZERO_TENSOR)
		want = size;
	unsigned char *z = tpf_arena_alloc(ps->m->arena, want);
	if (!z)
		return NULL;
	ps->zero = z;
	ps->zero_size = want;
	return z;
}

/* Reads the external data of t from the file its location names, in the
 * folder of the text file, as the ONNX importer does: the location must
 * resolve inside that folder (symbolic links included), name a regular
 * file and hold offset + length bytes.  A file that cannot be read is
 * TPF_ERR_IO. */
static int read_external(struct parser *ps, struct tpf_arena *a, struct tpf_tensor *t,
                         const char *at)
{
	const char *loc = t->ext_location;
	char *real = NULL, where[600];
	unsigned char *buf = NULL;
	struct stat sb;
	int fd = -1, rc = -1, io = 0;

	if (ps->st)
		return -1;
	/* the importer's rule and messages, with this line's place in front */
	snprintf(where, sizeof(where), "%s:%u:%u", ps->name, ps->line_no, col_of(ps, at));
	enum tpf_status st = tpf_onnx_resolve_external(ps->base_dir, &ps->base_real, where, loc, &real, ps->d);
	if (st) {
		ps->st = st == TPF_ERR_IO || st == TPF_ERR_NOMEM ? st : TPF_ERR_PARSE;
		return -1;
	}
	/* O_NONBLOCK: a named pipe must not block the open; fstat refuses it */
	fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		io = 1;
		FAIL(ps, at, "external data \"%s\": %s", loc,
		     fd < 0 ? strerror(errno) : "not a regular file");
		goto out;
	}
	if ((uint64_t)t->ext_offset > (uint64_t)sb.st_size ||
	    (uint64_t)t->nbytes > (uint64_t)sb.st_size - (uint64_t)t->ext_offset) {
		FAIL(ps, at,
		     "external data file \"%s\" holds %lld bytes; offset %" PRId64
		     " + length %zu is "
		     "past its end",
		     loc, (long long)sb.st_size, t->ext_offset, t->nbytes);
		goto out;
	}
	if (t->nbytes) {
		buf = tpf_arena_alloc(a, t->nbytes);
		if (!buf) {
			nomem(ps);
			goto out;
		}
		for (size_t got = 0; got < t->nbytes;) {
			ssize_t r = pread(fd, buf + got, t->nbytes - got,
			                  (off_t)(t->ext_offset + (int64_t)got));
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				io = 1;
				FAIL(ps, at, "external data file \"%s\": %s", loc,
				     r < 0 ? strerror(errno) : "shorter than it was");
				goto out;
			}
			got += (size_t)r;
		}
		t->data = buf;
	}
	rc = 0;
out:
	if (rc && io && ps->st == TPF_ERR_PARSE)
		ps->st = TPF_ERR_IO;
	if (fd >= 0)
		close(fd);
	free(real); /* from realpath(), so plain free */
	return rc;
}

/* The printer's tensor summary: "= elements", "(N bytes)", "(N bytes,
 * external "loc" offset K)" or "(N bytes, not loaded)". */
static int parse_summary(struct parser *ps, struct tpf_arena *a, struct tpf_tensor *t)
{
	int64_t numel = tpf_tensor_numel(t), n;
	char buf[40];
	const char *at;

	if (numel < 0)
		return FAIL(ps, ps->p, "the tensor's element count overflows");
	skip_spaces(ps);
	at = ps->p;
	if (accept(ps, '='))
		return parse_elements(ps, a, t, numel);
	if (!accept(ps, '('))
		return FAIL(ps, ps->p, "expected '= elements' or '(N bytes)', found %s",
			    describe_here(ps, buf, sizeof(buf)));
	if (parse_int64(ps, &n, "a byte count"))
		return -1;
	if (n < 0)
		return FAIL(ps, at, "negative byte count");
	if (!accept_word(ps, "bytes"))
		return FAIL(ps, ps->p, "expected 'bytes'");
	if (accept(ps, ')')) {
		size_t want;
		if (t->dtype == TPF_DTYPE_STRING) {
			/* the printer leaves out more than 8 strings */
			if ((uint64_t)numel > MAX_STRINGS)
				return FAIL(ps, at, "more than %zu strings", MAX_STRINGS);
			t->strings = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(*t->strings));
			t->string_lens = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(size_t));
			if (!t->strings || !t->string_lens)
				return nomem(ps);
			for (int64_t i = 0; i < numel; i++)
				t->strings[i] = "";
			t->n_strings = (size_t)numel;
			t->nbytes = (size_t)n;
			return 0;
		}
		if (!tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &want) && want != (uint64_t)n)
			return FAIL(ps, at, "%" PRId64 " bytes, but %" PRId64 " elements of %s take %zu",
				    n, numel, tpf_dtype_name(t->dtype), want);
		if ((uint64_t)n > MAX_ZERO_TENSOR)
			return FAIL(ps, at, "a tensor of %" PRId64 " bytes is too large to read from text "
				    "(at most %zu)", n, MAX_ZERO_TENSOR);
		if ((uint64_t)n > MAX_ZERO_TOTAL - ps->zero_total)
			return FAIL(
			    ps, at,
			    "the tensors given by size only (\"(N bytes)\", read back as zeros) "
			    "take more than %zu bytes in all; this one adds %" PRId64,
			    MAX_ZERO_TOTAL, n);
		ps->zero_total += (size_t)n;
		t->data = n ? zero_bytes(ps, (size_t)n) : NULL;
		if (n && !t->data)
			return nomem(ps);
		t->nbytes = (size_t)n;
		return 0;
	}
	if (expect(ps, ',', "')' or ', external' or ', not loaded'"))
		return -1;
	if (accept_word(ps, "not")) {
		if (!accept_word(ps, "loaded"))
			return FAIL(ps, ps->p, "expected 'not loaded'");
		t->data = NULL;
		t->nbytes = (size_t)n;
		return expect(ps, ')', "')'");
	}
	if (!accept_word(ps, "external"))
		return FAIL(ps, ps->p, "expected 'external' or 'not loaded'");
	skip_spaces(ps);
	const char *loc_at = ps->p;
	if (parse_string(ps, a, &t->ext_location, NULL))
		return -1;
	const char *why = tpf_onnx_location_problem(t->ext_location);
	if (why)
		return FAIL(ps, loc_at,
		            "external data location \"%s\" %s; only files inside the model's "
		            "folder are allowed",
		            t->ext_location, why);
	size_t want;
	if (t->dtype != TPF_DTYPE_STRING &&
	    !tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &want) && want != (uint64_t)n)
		return FAIL(ps, at, "%" PRId64 " bytes, but %" PRId64 " elements of %s take %zu", n,
		            numel, tpf_dtype_name(t->dtype), want);
	t->is_external = 1;
	t->ext_length = n;
	t->data = NULL;
	t->nbytes = (size_t)n;
	if (accept_word(ps, "offset") && parse_int64(ps, &t->ext_offset, "an offset"))
		return -1;
	if (t->ext_offset < 0)
		return FAIL(ps, ps->p, "negative offset");
	if (expect(ps, ')', "')'"))
		return -1;
	return ps->base_dir ? read_external(ps, a, t, loc_at) : 0;
}

/* "tensor<dtype[dims] summary>" */
static int parse_tensor_attr(struct parser *ps, struct tpf_arena *a, struct tpf_tensor **out)
{
	int64_t dims[TPF_MAX_RANK];
	enum tpf_dtype dt;
	int rank;

	if (expect(ps, '<', "'<' after 'tensor'"))
		return -1;
	if (peek(ps) == '?')
		return FAIL(ps, ps->p, "an empty tensor attribute ('tensor<?>') cannot be read back");
	if (parse_tensor_shape(ps, &dt, &rank, dims))
		return -1;
	*out = tpf_tensor_create(a, NULL, dt, rank, dims, NULL, 0);
	if (!*out)
		return nomem(ps);
	if (parse_summary(ps, a, *out))
		return -1;
	return expect(ps, '>', "'>' after the tensor");
}

/* ------------------------------------------------------------------ attributes */

/* Whether a number token is an integer (no '.', exponent, nan or inf). */
static int is_int_token(const char *s)
{
	if (*s == '-' || *s == '+')
		s++;
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

static int parse_number(struct parser *ps, const char *tok, const char *at, int *is_int, int64_t *i,
			double *f)
{
	char *end;

	errno = 0;
	if (is_int_token(tok)) {
		*is_int = 1;
		*i = strtoll(tok, &end, 10);
		if (errno)
			return FAIL(ps, at, "integer '%s' is out of range", tok);
		return 0;
	}
	*is_int = 0;
	*f = strtod(tok, &end);
	if (*end || end == tok)
		return FAIL(ps, at, "expected a value, found '%s'", tok);
	return 0;
}

/* An attribute value as the printer writes it, into a (name set by the
 * caller).  `graphs_ok`: graph values are allowed (their blocks follow). */
static int parse_attr_value(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at, int graphs_ok)
{
	const char *start;
	char tok[64];

	skip_spaces(ps);
	start = ps->p;
	if (accept(ps, '@')) {
		if (read_token(ps, ",}", tok, sizeof(tok), "a referenced attribute name"))
			return -1;
		at->ref_attr_name = tpf_arena_strdup(a, tok);
		return at->ref_attr_name ? 0 : nomem(ps);
	}
	if (peek(ps) == '"') {
		at->kind = TPF_ATTR_STRING;
		return parse_string(ps, a, &at->s, &at->s_len);
	}
	if (accept_word(ps, "tensor")) {
		at->kind = TPF_ATTR_TENSOR;
		return parse_tensor_attr(ps, a, &at->t);
	}
	if (accept_word(ps, "sparse_tensor") || accept_word(ps, "type_proto"))
		return FAIL(ps, start, "sparse_tensor and type_proto attributes cannot be read back: "
			    "the dump does not hold their contents");
	if (accept_word(ps, "graph")) {
		if (!graphs_ok)
			return FAIL(ps, start, "a graph attribute here cannot be read back (no block follows it)");
		at->kind = TPF_ATTR_GRAPH;
		return 0;
	}
	if (accept_word(ps, "graphs")) {
		int64_t n;
		if (!graphs_ok)
			return FAIL(ps, start, "a graph attribute here cannot be read back (no block follows it)");
		if (expect(ps, '[', "'[' after 'graphs'") || parse_int64(ps, &n, "a graph count") ||
		    expect(ps, ']', "']'"))
			return -1;
		if (n < 1 || n > 4096)
			return FAIL(ps, start, "graph count %" PRId64 " out of range (1 to 4096)", n);
		at->kind = TPF_ATTR_GRAPHS;
		at->n = (size_t)n;
		at->graphs = tpf_arena_alloc(a, (size_t)n * sizeof(*at->graphs));
		return at->graphs ? 0 : nomem(ps);
	}
	if (accept(ps, '[')) {
		/* a list: first pass finds the kind and the count */
		const char *save = ps->p;
		size_t n = 0;
		int kind = 0; /* 0 empty, 1 ints, 2 floats, 3 strings, 4 tensors */
		if (accept(ps, ']')) {
			at->kind = TPF_ATTR_INTS;
			return 0;
		}
		for (int pass = 0; pass < 2; pass++) {
			ps->p = save;
			n = 0;
			for (;;) {
				skip_spaces(ps);
				const char *el = ps->p;
				if (peek(ps) == '"') {
					const char *s;
					size_t len;
					if (kind && kind != 3)
						return FAIL(ps, el, "a list mixes strings with other values");
					kind = 3;
					if (parse_string(ps, a, &s, &len))
						return -1;
					if (pass) {
						at->strings[n] = s;
						at->string_lens[n] = len;
					}
				} else if (accept_word(ps, "tensor")) {
					struct tpf_tensor *t = NULL;
					if (kind && kind != 4)
						return FAIL(ps, el, "a list mixes tensors with other values");
					kind = 4;
					if (!pass) {
						/* skip to the closing '>' of this tensor */
						int depth = 0, in_str = 0;
						for (; ps->p < ps->end; ps->p++) {
							char c = *ps->p;
							if (in_str) {
								if (c == '\\' && ps->p + 1 < ps->end)
									ps->p++;
								else if (c == '"')
									in_str = 0;
							} else if (c == '"') {
								in_str = 1;
							} else if (c == '<') {
								depth++;
							} else if (c == '>' && --depth == 0) {
								ps->p++;
								break;
							}
						}
					} else {
						if (parse_tensor_attr(ps, a, &t))
							return -1;
						at->tensors[n] = t;
					}
				} else if (accept_word(ps, "sparse_tensor") || accept_word(ps, "type_proto")) {
					return FAIL(ps, el, "sparse_tensor and type_proto attributes cannot be "
						    "read back: the dump does not hold their contents");
				} else {
					int is_int;
					int64_t iv = 0;
					double fv = 0;
					if (kind == 3 || kind == 4)
						return FAIL(ps, el, "a list mixes numbers with other values");
					if (read_token(ps, ",]", tok, sizeof(tok), "a list element") ||
					    parse_number(ps, tok, el, &is_int, &iv, &fv))
						return -1;
					if (!pass)
						kind = !is_int || kind == 2 ? 2 : 1;
					else if (kind == 1)
						at->ints[n] = iv;
					else
						at->floats[n] = is_int ? (float)iv : (float)fv;
				}
				n++;
				if (accept(ps, ']'))
					break;
				if (expect(ps, ',', "',' or ']' in the list"))
					return -1;
			}
			if (pass)
				break;
			at->n = n;
			if (kind == 1) {
				at->kind = TPF_ATTR_INTS;
				at->ints = tpf_arena_alloc(a, n * sizeof(*at->ints));
				if (!at->ints)
					return nomem(ps);
			} else if (kind == 2) {
				at->kind = TPF_ATTR_FLOATS;
				at->floats = tpf_arena_alloc(a, n * sizeof(*at->floats));
				if (!at->floats)
					return nomem(ps);
			} else if (kind == 3) {
				at->kind = TPF_ATTR_STRINGS;
				at->strings = tpf_arena_alloc(a, n * sizeof(*at->strings));
				at->string_lens = tpf_arena_alloc(a, n * sizeof(*at->string_lens));
				if (!at->strings || !at->string_lens)
					return nomem(ps);
			} else {
				at->kind = TPF_ATTR_TENSORS;
				at->tensors = tpf_arena_alloc(a, n * sizeof(*at->tensors));
				if (!at->tensors)
					return nomem(ps);
			}
		}
		return 0;
	}
	/* a scalar number */
	{
		int is_int;
		int64_t iv = 0;
		double fv = 0;
		if (read_token(ps, ",}", tok, sizeof(tok), "an attribute value") ||
		    parse_number(ps, tok, start, &is_int, &iv, &fv))
			return -1;
		if (is_int) {
			at->kind = TPF_ATTR_INT;
			at->i = iv;
		} else {
			at->kind = TPF_ATTR_FLOAT;
			at->f = (float)fv;
		}
	}
	return 0;
}

/* ------------------------------------------------------------------ values */

/* A reference: "%N", "_" (nothing) or %?"name" (a value known by name). */
struct ref {
	int kind; /* 0 none, 1 label, 2 name */
	uint64_t label;
	const char *name; /* in the graph arena */
	const char *at;
};

static int parse_ref(struct parser *ps, struct tpf_arena *a, struct ref *r)
{
	char buf[40];

	skip_spaces(ps);
	memset(r, 0, sizeof(*r));
	r->at = ps->p;
	if (peek(ps) == '_') {
		ps->p++;
		return 0;
	}
	if (peek(ps) != '%')
		return FAIL(ps, ps->p, "expected a value (%%N or _), found %s",
			    describe_here(ps, buf, sizeof(buf)));
	ps->p++;
	if (peek(ps) == '?') {
		ps->p++;
		r->kind = 2;
		return parse_string(ps, a, &r->name, NULL);
	}
	if (peek(ps) < '0' || peek(ps) > '9')
		return FAIL(ps, ps->p, "expected a number after '%%'");
	uint64_t v = 0;
	while (peek(ps) >= '0' && peek(ps) <= '9') {
		v = v * 10 + (uint64_t)(*ps->p++ - '0');
		if (v > MAX_LABEL)
			return FAIL(ps, r->at, "value number too large");
	}
	r->kind = 1;
	r->label = v;
	return 0;
}

/* The OUTER value of `sc`'s graph for `v`, a value of an enclosing graph:
 * the capture is recorded on each owner node on the way, as the importer
 * does.  NULL on failure (reported). */
static struct tpf_value *capture(struct parser *ps, struct scope *sc, struct tpf_value *v,
				 const char *at)
{
	struct tpf_graph *g = sc->g;

	if (v->graph == g)
		return v;
	if (!sc->parent || !g->owner) {
		FAIL(ps, at, "value '%s' belongs to a graph that does not enclose this one", v->name);
		return NULL;
	}
	struct tpf_value *pv = capture(ps, sc->parent, v, at);
	if (!pv)
		return NULL;
	struct tpf_value *ov = tpf_graph_find_value(g, pv->name);
	if (ov) {
		if (ov->kind == TPF_VALUE_OUTER && ov->outer == pv)
			return ov;
		FAIL(ps, at, "the subgraph defines '%s', a name it also captures from the enclosing graph",
		     pv->name);
		return NULL;
	}
	struct tpf_node *owner = g->owner;
	struct tpf_graph *og = owner->graph;
	size_t k;
	for (k = 0; k < owner->n_implicit; k++)
		if (owner->implicit_inputs[k] == pv)
			break;
	if (k == owner->n_implicit) {
		struct tpf_value **arr = tpf_arena_alloc(og->arena, (k + 1) * sizeof(*arr));
		if (!arr) {
			nomem(ps);
			return NULL;
		}
		if (k)
			memcpy(arr, owner->implicit_inputs, k * sizeof(*arr));
		if (pv->n_uses == pv->cap_uses) {
			size_t cap = pv->cap_uses ? pv->cap_uses * 2 : 4;
			struct tpf_use *uses = tpf_arena_alloc(pv->graph->arena, cap * sizeof(*uses));
			if (!uses) {
				nomem(ps);
				return NULL;
			}
			if (pv->n_uses)
				memcpy(uses, pv->uses, pv->n_uses * sizeof(*uses));
			pv->uses = uses;
			pv->cap_uses = cap;
		}
		arr[k] = pv;
		owner->implicit_inputs = arr;
		owner->n_implicit = k + 1;
		pv->uses[pv->n_uses].node = owner;
		pv->uses[pv->n_uses].index = -1 - (int)k;
		pv->n_uses++;
	}
	ov = tpf_graph_new_value(g, pv->name);
	if (!ov) {
		nomem(ps);
		return NULL;
	}
	ov->kind = TPF_VALUE_OUTER;
	ov->outer = pv;
	return ov;
}

/* Resolves a reference in `sc`.  *out NULL and return 0 for a label not
 * defined yet (the caller records a fixup); -1 on errors. */
static int resolve_ref(struct parser *ps, struct scope *sc, const struct ref *r, struct tpf_value **out)
{
	*out = NULL;
	if (r->kind == 0)
		return 0;
	if (r->kind == 2) {
		struct tpf_value *v = tpf_graph_resolve(sc->g, r->name);
		if (!v)
			return FAIL(ps, r->at, "no value is named \"%s\"", r->name);
		*out = capture(ps, sc, v, r->at);
		return *out ? 0 : -1;
	}
	for (struct scope *s = sc; s; s = s->parent) {
		struct label_entry *e = label_find(&s->labels, r->label);
		if (e) {
			*out = capture(ps, sc, e->value, r->at);
			return *out ? 0 : -1;
		}
	}
	return 0;
}

/* Defines a label in sc; it must be new in sc and in the enclosing scopes. */
static int define_label(struct parser *ps, struct scope *sc, const struct ref *r, struct tpf_value *v)
{
	for (struct scope *s = sc; s; s = s->parent) {
		struct label_entry *e = label_find(&s->labels, r->label);
		if (e)
			return FAIL(ps, r->at, "%%%" PRIu64 " is defined twice (first on line %u)", r->label,
				    e->line);
	}
	if (label_put(&sc->labels, r->label, v, ps->line_no))
		return nomem(ps);
	return 0;
}

/* Frees `name` in g for a new value: a value holding it only as its label
 * name is renamed; a value really named so is an error. */
static int free_name(struct parser *ps, struct tpf_graph *g, const char *name, const char *at)
{
	struct tpf_value *holder;

	if (!*name)
		return FAIL(
		    ps, at,
		    "an empty name (ONNX gives every graph input, initializer and output a name)");
	holder = tpf_graph_find_value(g, name);

	if (!holder)
		return 0;
	if (holder->mark != LABEL_ONLY_MARK)
		return FAIL(ps, at, "two values are named \"%s\"", name);
	const char *fresh = tpf_graph_unique_name(g, holder->name);
	if (!fresh || tpf_value_rename(holder, fresh))
		return nomem(ps);
	return 0;
}

/* Renames OUTER values of g and its subgraphs that stand for `root`. */
static int rename_captures(struct parser *ps, struct tpf_graph *g, const struct tpf_value *root,
			   const char *name, const char *at, int depth)
{
	if (depth > MAX_DEPTH)
		return 0;
	for (size_t i = 0; i < g->n_values; i++) {
		struct tpf_value *v = g->values[i];
		const struct tpf_value *q = v;
		for (int hops = 0; q && q->kind == TPF_VALUE_OUTER && hops <= MAX_DEPTH; hops++)
			q = q->outer;
		if (!v || v == root || q != root)
			continue;
		if (free_name(ps, g, name, at))
			return -1;
		if (tpf_value_rename(v, name))
			return nomem(ps);
	}
	for (size_t i = 0; i < g->n_children; i++)
		if (rename_captures(ps, g->children[i], root, name, at, depth + 1))
			return -1;
	return 0;
}

/* Gives a value named after its label its real name, with the values that
 * subgraphs captured it as. */
static int rename_value(struct parser *ps, struct tpf_value *root, const char *name, const char *at)
{
	if (free_name(ps, root->graph, name, at))
		return -1;
	if (tpf_value_rename(root, name))
		return nomem(ps);
	root->mark = 0;
	for (size_t i = 0; i < root->graph->n_children; i++)
		if (rename_captures(ps, root->graph->children[i], root, name, at, 1))
			return -1;
	return 0;
}

/* The name a node output with label `label` gets when the dump names it not. */
static const char *label_name(struct parser *ps, struct tpf_graph *g, uint64_t label)
{
	char buf[32];
	const char *nm;

	snprintf(buf, sizeof(buf), "%%%" PRIu64, label);
	nm = tpf_graph_find_value(g, buf) ? tpf_graph_unique_name(g, buf) : tpf_arena_strdup(g->arena, buf);
	if (!nm)
		nomem(ps);
	return nm;
}

/* ------------------------------------------------------------------ graphs */

/* A function being read, with the capacities of its growing arrays. */
struct function_lists {
	struct tpf_function *fn;
	size_t cap_names, cap_protos, cap_opsets, cap_keys, cap_values;
};

static int parse_graph_body(struct parser *ps, struct scope *sc, struct function_lists *fl);

/* "input %N: TYPE "name" [default SUMMARY]" */
static int parse_input(struct parser *ps, struct scope *sc)
{
	struct tpf_graph *g = sc->g;
	struct ref r;
	struct tpf_type t;
	const char *name, *name_at;
	struct tpf_value *v;

	if (parse_ref(ps, g->arena, &r))
		return -1;
	if (r.kind != 1)
		return FAIL(ps, r.at, "an input needs a value number (%%N)");
	if (expect(ps, ':', "':' after the input's number") || parse_type(ps, g->arena, &t))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (parse_string(ps, g->arena, &name, NULL) || free_name(ps, g, name, name_at))
		return -1;
	if (accept_word(ps, "default")) {
		int64_t dims[TPF_MAX_RANK];
		if (t.kind != TPF_TYPE_TENSOR || t.shape.rank < 0 || t.dtype == TPF_DTYPE_UNDEFINED)
			return FAIL(ps, ps->p, "an input with a default value needs a dtype and a shape");
		for (int i = 0; i < t.shape.rank; i++) {
			if (t.shape.dims[i].param || t.shape.dims[i].value < 0)
				return FAIL(ps, ps->p, "an input with a default value needs static dims");
			dims[i] = t.shape.dims[i].value;
		}
		struct tpf_tensor *tn = tpf_tensor_create(g->arena, name, t.dtype, t.shape.rank, dims, NULL, 0);
		if (!tn)
			return nomem(ps);
		if (parse_summary(ps, g->arena, tn))
			return -1;
		v = tpf_graph_add_initializer_tensor(g, tn);
		if (!v)
			return nomem(ps);
		struct tpf_value **slot = arena_push(g->arena, (void **)&g->inputs, &g->n_inputs,
						     &g->cap_inputs, sizeof(*g->inputs));
		if (!slot)
			return nomem(ps);
		*slot = v;
		v->is_graph_input = 1;
	} else {
		v = tpf_graph_add_input(g, name, TPF_DTYPE_UNDEFINED, -1, NULL);
		if (!v)
			return nomem(ps);
	}
	v->type = t;
	if (expect_line_end(ps))
		return -1;
	return define_label(ps, sc, &r, v);
}

/* "init %N: dtype[dims] "name" SUMMARY" */
static int parse_init(struct parser *ps, struct scope *sc)
{
	struct tpf_graph *g = sc->g;
	int64_t dims[TPF_MAX_RANK];
	enum tpf_dtype dt;
	int rank;
	struct ref r;
	const char *name, *name_at;

	if (parse_ref(ps, g->arena, &r))
		return -1;
	if (r.kind != 1)
		return FAIL(ps, r.at, "an initializer needs a value number (%%N)");
	if (expect(ps, ':', "':' after the initializer's number") ||
	    parse_tensor_shape(ps, &dt, &rank, dims))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (parse_string(ps, g->arena, &name, NULL) || free_name(ps, g, name, name_at))
		return -1;
	struct tpf_tensor *t = tpf_tensor_create(g->arena, name, dt, rank, dims, NULL, 0);
	if (!t)
		return nomem(ps);
	if (parse_summary(ps, g->arena, t) || expect_line_end(ps))
		return -1;
	struct tpf_value *v = tpf_graph_add_initializer_tensor(g, t);
	if (!v)
		return nomem(ps);
	return define_label(ps, sc, &r, v);
}

/* "output %N: TYPE "name"" */
static int parse_output(struct parser *ps, struct scope *sc)
{
	struct tpf_graph *g = sc->g;
	struct ref r;
	struct tpf_type t;
	struct tpf_value *v;
	const char *name, *name_at;

	if (parse_ref(ps, g->arena, &r))
		return -1;
	if (r.kind == 0)
		return FAIL(ps, r.at, "an omitted graph output ('_') cannot be read back");
	if (resolve_ref(ps, sc, &r, &v))
		return -1;
	if (!v)
		return FAIL(ps, r.at, "value %%%" PRIu64 " is not defined", r.label);
	if (expect(ps, ':', "':' after the output's value") || parse_type(ps, g->arena, &t))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (parse_string(ps, g->arena, &name, NULL) || expect_line_end(ps))
		return -1;
	if (strcmp(v->name, name) != 0) {
		/* a subgraph output may be a captured value: the name is its owner's */
		struct tpf_value *root = v;
		for (int hops = 0; root->kind == TPF_VALUE_OUTER && root->outer && hops <= MAX_DEPTH; hops++)
			root = root->outer;
		if (root->mark != LABEL_ONLY_MARK)
			return FAIL(ps, name_at, "the output is named \"%s\", but its value is \"%s\"", name,
				    v->name);
		if (rename_value(ps, root, name, name_at))
			return -1;
	}
	if (v->type.kind == TPF_TYPE_NONE && t.kind != TPF_TYPE_NONE)
		v->type = t;
	if (tpf_graph_add_output(g, v))
		return nomem(ps);
	return 0;
}

/* "NAME: graph "gname" {" or "NAME[i]: graph "gname" {" after a node line:
 * reads the block into the node's graph attribute.  0 when the line is
 * not a subgraph header (nothing consumed), 1 after a block, -1 on errors. */
static int parse_subgraph_block(struct parser *ps, struct scope *sc, struct tpf_node *n)
{
	struct line_state saved = save_line(ps);
	char name[256];
	int64_t index = -1;
	const char *at;

	if (!next_line(ps)) {
		restore_line(ps, saved);
		return 0;
	}
	at = ps->p;
	{
		const char *s = ps->p;
		while (ps->p < ps->end && *ps->p != ':' && *ps->p != '[' && *ps->p != ' ' && *ps->p != '(')
			ps->p++;
		size_t len = (size_t)(ps->p - s);
		if (!len || len >= sizeof(name) || ps->p >= ps->end || (*ps->p != ':' && *ps->p != '[')) {
			restore_line(ps, saved);
			return 0;
		}
		memcpy(name, s, len);
		name[len] = '\0';
	}
	if (*ps->p == '[') {
		ps->p++;
		if (parse_int64(ps, &index, "a graph index") || expect(ps, ']', "']'"))
			return -1;
	}
	if (peek(ps) != ':') {
		restore_line(ps, saved);
		return 0;
	}
	ps->p++;
	if (!accept_word(ps, "graph")) {
		restore_line(ps, saved);
		return 0;
	}
	struct tpf_attr *a = NULL;
	for (size_t i = 0; i < n->n_attrs; i++)
		if (strcmp(n->attrs[i].name, name) == 0)
			a = &n->attrs[i];
	struct tpf_graph **slot = NULL;
	if (a && a->kind == TPF_ATTR_GRAPH && index < 0)
		slot = &a->g;
	else if (a && a->kind == TPF_ATTR_GRAPHS && index >= 0 && (uint64_t)index < a->n)
		slot = &a->graphs[index];
	if (!slot)
		return FAIL(ps, at, "the node above has no graph attribute '%s'%s", name,
			    index >= 0 ? " with that index" : "");
	if (*slot)
		return FAIL(ps, at, "a second block for graph attribute '%s'", name);
	if (sc->depth + 1 > MAX_DEPTH)
		return FAIL(ps, at, "subgraphs nested more than %d deep", MAX_DEPTH);
	struct tpf_graph *sub = tpf_graph_create(sc->g);
	if (!sub)
		return nomem(ps);
	sub->owner = n;
	*slot = sub;
	if (parse_string(ps, sub->arena, &sub->name, NULL) || expect(ps, '{', "'{' after the graph name") ||
	    expect_line_end(ps))
		return -1;
	struct scope inner = {.parent = sc, .g = sub, .depth = sc->depth + 1};
	int rc = parse_graph_body(ps, &inner, NULL);
	scope_free(&inner);
	return rc ? -1 : 1;
}

/* The part after '#' on a node line: "NAME", "-> OUT" and " [pass/pattern]". */
struct node_comment {
	const char *name, *out_name; /* in the arena; NULL when absent */
	const char *origin_pass, *origin_pattern;
};

static int parse_node_comment(struct parser *ps, struct tpf_arena *a, struct node_comment *c)
{
	const char *s, *e = ps->end, *name_end;

	memset(c, 0, sizeof(*c));
	ps->p++; /* '#' */
	if (peek(ps) == ' ')
		ps->p++;
	s = ps->p;
	name_end = e;
	if (e > s && e[-1] == ']') {
		const char *o = NULL;
		if (*s == '[')
			o = s;
		for (const char *q = e - 2; q > s; q--) {
			if (q[-1] == ' ' && q[0] == '[') {
				o = q;
				break;
			}
		}
		if (o) {
			const char *slash = memchr(o + 1, '/', (size_t)(e - 1 - (o + 1)));
			const char *pe = slash ? slash : e - 1;
			if (pe == o + 1)
				return FAIL(ps, o, "empty pass name in the origin '[pass/pattern]'");
			c->origin_pass = tpf_arena_strndup(a, o + 1, (size_t)(pe - (o + 1)));
			if (!c->origin_pass)
				return nomem(ps);
			if (slash) {
				c->origin_pattern = tpf_arena_strndup(a, slash + 1, (size_t)(e - 1 - (slash + 1)));
				if (!c->origin_pattern)
					return nomem(ps);
			}
			name_end = o > s ? o - 1 : s;
		}
	}
	if (name_end - s >= 3 && memcmp(s, "-> ", 3) == 0) {
		c->out_name = tpf_arena_strndup(a, s + 3, (size_t)(name_end - s - 3));
		if (!c->out_name)
			return nomem(ps);
	} else {
		c->name = tpf_arena_strndup(a, s, (size_t)(name_end - s));
		if (!c->name)
			return nomem(ps);
	}
	ps->p = ps->end;
	return 0;
}

static int attr_name_cmp(const void *x, const void *y)
{
	const struct tpf_attr *a = x, *b = y;
	return strcmp(a->name, b->name);
}

/* A node line and the subgraph blocks after it. */
static int parse_node(struct parser *ps, struct scope *sc)
{
	struct tpf_graph *g = sc->g;
	struct tpf_arena *a = g->arena;
	struct ref *outs = NULL, *ins = NULL;
	size_t n_outs = 0, cap_outs = 0, n_ins = 0, cap_ins = 0, n_attrs = 0, cap_attrs = 0;
	struct tpf_attr *attrs = NULL;
	struct tpf_type *types = NULL;
	size_t n_types = 0, cap_types = 0;
	struct node_comment cm = {0};
	int more = 0;
	const char **out_names = NULL;
	struct tpf_value **in_vals = NULL;
	const char *line_start = ps->p;
	unsigned node_line = ps->line_no;
	int rc = -1;
	char buf[40];

	/* outputs: "%a, _, %b = " (none when the line starts with the op) */
	if (peek(ps) == '%' || (peek(ps) == '_' && ps->p + 1 < ps->end &&
				(ps->p[1] == ',' || ps->p[1] == ' ' || ps->p[1] == '='))) {
		for (;;) {
			struct ref *r = push_item(ps, a, (void **)&outs, &n_outs, &cap_outs, sizeof(*outs));
			if (!r || parse_ref(ps, a, r))
				goto out;
			if (r->kind == 2) {
				FAIL(ps, r->at, "a node output needs a number (%%N)");
				goto out;
			}
			if (n_outs > MAX_NODE_OUTPUTS) {
				FAIL(ps, r->at, "more than %d outputs", MAX_NODE_OUTPUTS);
				goto out;
			}
			if (accept(ps, '='))
				break;
			if (expect(ps, ',', "',' or '=' after a node output"))
				goto out;
		}
	}
	/* op: [domain.]op_type[:overload] */
	skip_spaces(ps);
	const char *op_end = ps->p;
	while (op_end < ps->end && *op_end != '(' && *op_end != ' ')
		op_end++;
	if (op_end >= ps->end || *op_end != '(' || op_end == ps->p) {
		FAIL(ps, ps->p, "expected a node ('%%N = Op(...)'), input, init or output line, found %s",
		     describe_here(ps, buf, sizeof(buf)));
		goto out;
	}
	const char *colon = memchr(ps->p, ':', (size_t)(op_end - ps->p));
	const char *name_end = colon ? colon : op_end, *dot = NULL;
	for (const char *q = ps->p; q < name_end; q++)
		if (*q == '.')
			dot = q;
	const char *domain = dot ? tpf_arena_strndup(a, ps->p, (size_t)(dot - ps->p)) : "";
	const char *op_start = dot ? dot + 1 : ps->p;
	const char *op_type = tpf_arena_strndup(a, op_start, (size_t)(name_end - op_start));
	const char *overload = colon ? tpf_arena_strndup(a, colon + 1, (size_t)(op_end - colon - 1)) : NULL;
	if (!domain || !op_type || (colon && !overload)) {
		nomem(ps);
		goto out;
	}
	if (!*op_type || strcmp(op_type, "?") == 0) {
		FAIL(ps, op_start, "a node needs an op type");
		goto out;
	}
	ps->p = op_end + 1;
	/* inputs */
	if (!accept(ps, ')')) {
		for (;;) {
			struct ref *r = push_item(ps, a, (void **)&ins, &n_ins, &cap_ins, sizeof(*ins));
			if (!r || parse_ref(ps, a, r))
				goto out;
			if ((more = list_next(ps, ')', "',' or ')' after a node input")) <= 0)
				break;
		}
		if (more < 0)
			goto out;
	}
	/* attributes */
	if (accept(ps, '{')) {
		for (;;) {
			char aname[256];
			const char *an_at;
			skip_spaces(ps);
			an_at = ps->p;
			if (read_token(ps, "=,}", aname, sizeof(aname), "an attribute name"))
				goto out;
			if (strcmp(aname, "?") == 0) {
				FAIL(ps, an_at, "an attribute needs a name");
				goto out;
			}
			if (n_attrs >= MAX_NODE_ATTRS) {
				FAIL(ps, an_at, "more than %d attributes", MAX_NODE_ATTRS);
				goto out;
			}
			for (size_t i = 0; i < n_attrs; i++) {
				if (strcmp(attrs[i].name, aname) == 0) {
					FAIL(ps, an_at, "attribute '%s' is given twice", aname);
					goto out;
				}
			}
			struct tpf_attr *at = arena_push(a, (void **)&attrs, &n_attrs, &cap_attrs, sizeof(*attrs));
			if (!at || !(at->name = tpf_arena_strdup(a, aname))) {
				nomem(ps);
				goto out;
			}
			if (expect(ps, '=', "'=' after the attribute name") || parse_attr_value(ps, a, at, 1))
				goto out;
			if ((more = list_next(ps, '}', "',' or '}' between attributes")) <= 0)
				break;
		}
		if (more < 0)
			goto out;
	}
	/* types */
	if (accept(ps, ':')) {
		int paren = accept(ps, '(');
		for (;;) {
			struct tpf_type *t = push_item(ps, a, (void **)&types, &n_types, &cap_types, sizeof(*types));
			if (!t || parse_type(ps, a, t))
				goto out;
			if (!paren || accept(ps, ')'))
				break;
			if (expect(ps, ',', "',' or ')' between the output types"))
				goto out;
		}
	}
	skip_spaces(ps);
	if (peek(ps) == '#') {
		if (parse_node_comment(ps, a, &cm))
			goto out;
	} else if (!at_end(ps)) {
		FAIL(ps, ps->p, "unexpected %s after the node", describe_here(ps, buf, sizeof(buf)));
		goto out;
	}

	/* output names, types */
	size_t n_real = 0;
	for (size_t i = 0; i < n_outs; i++)
		n_real += outs[i].kind == 1;
	if (n_types && n_types != n_real) {
		FAIL(ps, line_start, "%zu output types for %zu outputs", n_types, n_real);
		goto out;
	}
	if (cm.out_name && !n_real) {
		FAIL(ps, line_start, "the comment names an output ('-> %s'), the node has none", cm.out_name);
		goto out;
	}
	if (cm.out_name && free_name(ps, g, cm.out_name, line_start))
		goto out;
	out_names = tpf_calloc(n_outs ? n_outs : 1, sizeof(*out_names));
	in_vals = tpf_calloc(n_ins ? n_ins : 1, sizeof(*in_vals));
	if (!out_names || !in_vals) {
		nomem(ps);
		goto out;
	}
	size_t named = n_outs; /* the output the comment names */
	for (size_t i = 0; i < n_outs; i++) {
		if (outs[i].kind == 0) {
			out_names[i] = "";
			continue;
		}
		for (size_t j = 0; j < i; j++) {
			if (outs[j].kind == 1 && outs[j].label == outs[i].label) {
				FAIL(ps, outs[i].at, "%%%" PRIu64 " is defined twice", outs[i].label);
				goto out;
			}
		}
		if (cm.out_name && named == n_outs) {
			out_names[i] = cm.out_name;
			named = i;
		} else if (!(out_names[i] = label_name(ps, g, outs[i].label))) {
			goto out;
		}
	}
	for (size_t i = 0; i < n_outs; i++) {
		for (size_t j = 0; j < i && *out_names[i]; j++) {
			if (strcmp(out_names[i], out_names[j]) == 0) {
				FAIL(ps, outs[i].at, "two outputs of the node are named \"%s\"", out_names[i]);
				goto out;
			}
		}
	}
	for (size_t i = 0; i < n_ins; i++)
		if (resolve_ref(ps, sc, &ins[i], &in_vals[i]))
			goto out;
	struct tpf_node *n = tpf_graph_add_node(g, domain, op_type, cm.name ? cm.name : "", in_vals, n_ins,
						n_outs, out_names);
	if (!n) {
		nomem(ps);
		goto out;
	}
	for (size_t i = 0; i < n_ins; i++) {
		if (ins[i].kind != 1 || in_vals[i])
			continue;
		struct fixup *f = arena_push(a, (void **)&sc->fixups, &sc->n_fixups, &sc->cap_fixups,
					     sizeof(*sc->fixups));
		if (!f) {
			nomem(ps);
			goto out;
		}
		f->node = n;
		f->index = i;
		f->label = ins[i].label;
		f->line = node_line;
		f->col = col_of(ps, ins[i].at);
	}
	n->overload = overload;
	n->origin_pass = cm.origin_pass;
	n->origin_pattern = cm.origin_pattern;
	if (n_attrs) {
		qsort(attrs, n_attrs, sizeof(*attrs), attr_name_cmp);
		n->attrs = attrs;
		n->n_attrs = n_attrs;
	}
	for (size_t i = 0, k = 0; i < n_outs; i++) {
		struct tpf_value *v = n->outputs[i];
		if (!v)
			continue;
		if (n_types)
			v->type = types[k++];
		if (i != named)
			v->mark = LABEL_ONLY_MARK;
		if (define_label(ps, sc, &outs[i], v))
			goto out;
	}
	/* subgraph blocks */
	for (;;) {
		int r = parse_subgraph_block(ps, sc, n);
		if (r < 0)
			goto out;
		if (r == 0)
			break;
	}
	for (size_t i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *at = &n->attrs[i];
		int missing = at->kind == TPF_ATTR_GRAPH && !at->g;
		for (size_t k = 0; at->kind == TPF_ATTR_GRAPHS && k < at->n; k++)
			missing |= !at->graphs[k];
		if (missing) {
			fail_at_line(ps, node_line, 1, "graph attribute '%s' has no block after the node",
				     at->name);
			goto out;
		}
	}
	rc = 0;
out:
	tpf_free(out_names);
	tpf_free(in_vals);
	return rc;
}

/* Inputs of nodes that named a later label; then the nodes are sorted
 * (stable: only a graph that used a value before its line changes order;
 * a cycle stays for the verifier to report). */
static int resolve_fixups(struct parser *ps, struct scope *sc)
{
	for (size_t i = 0; i < sc->n_fixups; i++) {
		const struct fixup *f = &sc->fixups[i];
		struct label_entry *e = label_find(&sc->labels, f->label);
		if (!e)
			return fail_at_line(ps, f->line, f->col, "value %%%" PRIu64 " is not defined",
					    f->label);
		if (tpf_node_set_input(f->node, f->index, e->value))
			return nomem(ps);
	}
	if (sc->n_fixups && tpf_graph_toposort(sc->g, NULL) == TPF_ERR_NOMEM)
		return nomem(ps);
	return 0;
}

/* Appends a key/value pair to two parallel arena arrays. */
static int push_pair(struct parser *ps, struct tpf_arena *a, const char ***keys, const char ***vals,
		     size_t *n, size_t *cap_keys, size_t *cap_vals, const char *k, const char *v)
{
	size_t nk = *n, nv = *n;
	const char **ks = arena_push(a, (void **)keys, &nk, cap_keys, sizeof(**keys));
	if (!ks)
		return nomem(ps);
	const char **vs = arena_push(a, (void **)vals, &nv, cap_vals, sizeof(**vals));
	if (!vs)
		return nomem(ps);
	*ks = k;
	*vs = v;
	*n = nk;
	return 0;
}

/* Function-only lines: attribute "a" [= value], opset, metadata. */
static int parse_function_line(struct parser *ps, struct function_lists *fl, int *handled)
{
	struct tpf_arena *a = ps->m->arena;
	struct tpf_function *fn = fl->fn;

	*handled = 1;
	if (accept_word(ps, "attribute")) {
		const char *name;
		skip_spaces(ps);
		const char *name_at = ps->p;
		if (parse_string(ps, a, &name, NULL))
			return -1;
		if (!*name)
			return FAIL(ps, name_at, "a function attribute needs a name");
		if (accept(ps, '=')) {
			struct tpf_attr *at = arena_push(a, (void **)&fn->attribute_protos,
							 &fn->n_attribute_protos, &fl->cap_protos, sizeof(*at));
			if (!at)
				return nomem(ps);
			at->name = name;
			if (parse_attr_value(ps, a, at, 0))
				return -1;
		} else {
			const char **slot = arena_push(a, (void **)&fn->attribute_names, &fn->n_attribute_names,
						       &fl->cap_names, sizeof(*slot));
			if (!slot)
				return nomem(ps);
			*slot = name;
		}
		return expect_line_end(ps);
	}
	if (accept_word(ps, "opset")) {
		struct tpf_opset *o = arena_push(a, (void **)&fn->opsets, &fn->n_opsets, &fl->cap_opsets,
						 sizeof(*o));
		if (!o)
			return nomem(ps);
		if (parse_string(ps, a, &o->domain, NULL) || parse_int64(ps, &o->version, "an opset version"))
			return -1;
		return expect_line_end(ps);
	}
	if (accept_word(ps, "metadata")) {
		const char *k, *v;
		if (parse_string(ps, a, &k, NULL) || parse_string(ps, a, &v, NULL) ||
		    push_pair(ps, a, &fn->metadata_keys, &fn->metadata_values, &fn->n_metadata, &fl->cap_keys,
			      &fl->cap_values, k, v))
			return -1;
		return expect_line_end(ps);
	}
	*handled = 0;
	return 0;
}

/* Lines of a graph (or function) body up to its closing '}'. */
static int parse_graph_body(struct parser *ps, struct scope *sc, struct function_lists *fl)
{
	unsigned open_line = ps->line_no;

	for (;;) {
		if (!next_line(ps))
			return fail_at_line(ps, ps->line_no, 1, "missing '}' for the graph opened on line %u",
					    open_line);
		if (*ps->p == '}') {
			ps->p++;
			if (expect_line_end(ps))
				return -1;
			return resolve_fixups(ps, sc);
		}
		if (fl) {
			int handled;
			if (parse_function_line(ps, fl, &handled))
				return -1;
			if (handled)
				continue;
		}
		int rc;
		if (accept_word(ps, "input") && peek(ps) == ' ')
			rc = parse_input(ps, sc);
		else if (accept_word(ps, "init") && peek(ps) == ' ')
			rc = parse_init(ps, sc);
		else if (accept_word(ps, "output") && peek(ps) == ' ')
			rc = parse_output(ps, sc);
		else {
			/* a keyword followed by something else is an op name */
			const char *s = ps->line;
			while (s < ps->end && (*s == ' ' || *s == '\t'))
				s++;
			ps->p = s;
			rc = parse_node(ps, sc);
		}
		if (rc)
			return -1;
	}
}

/* ------------------------------------------------------------------ model */

static int parse_function(struct parser *ps, size_t *cap_functions)
{
	struct tpf_model *m = ps->m;
	struct tpf_function *fn = arena_push(m->arena, (void **)&m->functions, &m->n_functions,
					     cap_functions, sizeof(*fn));
	if (!fn)
		return nomem(ps);
	fn->body = tpf_graph_create(NULL);
	if (!fn->body)
		return nomem(ps);
	skip_spaces(ps);
	const char *fn_at = ps->p;
	if (parse_string(ps, m->arena, &fn->domain, NULL) || parse_string(ps, m->arena, &fn->name, NULL))
		return -1;
	if (!*fn->name)
		return FAIL(ps, fn_at, "a function needs a name");
	if (accept_word(ps, "overload") && parse_string(ps, m->arena, &fn->overload, NULL))
		return -1;
	if (expect(ps, '{', "'{' after the function name") || expect_line_end(ps))
		return -1;
	struct scope sc = {.g = fn->body};
	struct function_lists fl = {.fn = fn};
	int rc = parse_graph_body(ps, &sc, &fl);
	scope_free(&sc);
	return rc;
}

static int parse_model(struct parser *ps)
{
	struct tpf_model *m = ps->m;
	struct tpf_arena *a = m->arena;
	size_t cap_opsets = 0, cap_keys = 0, cap_values = 0, cap_functions = 0;
	int have_graph = 0;
	char buf[40];

	while (next_line(ps)) {
		if (accept_word(ps, "ir_version")) {
			if (parse_int64(ps, &m->ir_version, "an IR version"))
				return -1;
		} else if (accept_word(ps, "producer")) {
			if (parse_string(ps, a, &m->producer_name, NULL) ||
			    parse_string(ps, a, &m->producer_version, NULL))
				return -1;
		} else if (accept_word(ps, "domain")) {
			if (parse_string(ps, a, &m->domain, NULL))
				return -1;
		} else if (accept_word(ps, "model_version")) {
			if (parse_int64(ps, &m->model_version, "a model version"))
				return -1;
		} else if (accept_word(ps, "opset")) {
			struct tpf_opset *o = arena_push(a, (void **)&m->opsets, &m->n_opsets, &cap_opsets,
							 sizeof(*o));
			if (!o)
				return nomem(ps);
			if (parse_string(ps, a, &o->domain, NULL) ||
			    parse_int64(ps, &o->version, "an opset version"))
				return -1;
		} else if (accept_word(ps, "metadata")) {
			const char *k, *v;
			if (parse_string(ps, a, &k, NULL) || parse_string(ps, a, &v, NULL) ||
			    push_pair(ps, a, &m->metadata_keys, &m->metadata_values, &m->n_metadata, &cap_keys,
				      &cap_values, k, v))
				return -1;
		} else if (accept_word(ps, "graph")) {
			const char *at = ps->line;
			if (have_graph)
				return FAIL(ps, at, "a second graph (a model has one; subgraphs follow their node)");
			have_graph = 1;
			if (parse_string(ps, m->graph->arena, &m->graph->name, NULL) ||
			    expect(ps, '{', "'{' after the graph name") || expect_line_end(ps))
				return -1;
			struct scope sc = {.g = m->graph};
			int rc = parse_graph_body(ps, &sc, NULL);
			scope_free(&sc);
			if (rc)
				return -1;
			continue;
		} else if (accept_word(ps, "function")) {
			if (parse_function(ps, &cap_functions))
				return -1;
			continue;
		} else {
			return FAIL(ps, ps->p,
				    "expected ir_version, producer, domain, model_version, opset, metadata, "
				    "graph or function, found %s",
				    describe_here(ps, buf, sizeof(buf)));
		}
		if (expect_line_end(ps))
			return -1;
	}
	return 0;
}

static void clear_marks(struct tpf_graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_values; i++)
		if (g->values[i])
			g->values[i]->mark = 0;
	for (size_t i = 0; i < g->n_children; i++)
		clear_marks(g->children[i]);
}

static enum tpf_status parse_text(const char *text, size_t size, const char *name,
                                  const char *base_dir, struct tpf_model **out, struct tpf_diag *d)
{
	struct parser ps = {.name = name && *name ? name : "<text>", .d = d, .base_dir = base_dir};

	if (!out)
		return TPF_ERR_INVALID;
	*out = NULL;
	if (!text && size)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: no text", ps.name);
	if (size > MAX_TEXT_FILE)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s: %zu bytes of text, at most %zu", ps.name, size,
				     MAX_TEXT_FILE);
	const char *nul = size ? memchr(text, '\0', size) : NULL;
	if (nul) {
		unsigned line = 1;
		const char *ls = text;
		for (const char *q = text; q < nul; q++)
			if (*q == '\n') {
				line++;
				ls = q + 1;
			}
		return tpf_diag_fail(d, TPF_ERR_PARSE, "%s:%u:%u: a NUL byte in the text", ps.name, line,
				     (unsigned)(nul - ls) + 1);
	}
	ps.text = tpf_malloc(size + 1);
	if (!ps.text)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", ps.name);
	if (size)
		memcpy(ps.text, text, size);
	ps.text[size] = '\0';
	ps.size = size;
	ps.line = ps.end = ps.p = ps.text;
	ps.m = tpf_model_create();
	if (!ps.m) {
		tpf_free(ps.text);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", ps.name);
	}
	if (parse_model(&ps) && !ps.st)
		ps.st = TPF_ERR_PARSE;
	tpf_free(ps.text);
	free(ps.base_real); /* from realpath(), so plain free */
	if (ps.st) {
		tpf_model_free(ps.m);
		return ps.st;
	}
	clear_marks(ps.m->graph);
	for (size_t i = 0; i < ps.m->n_functions; i++)
		clear_marks(ps.m->functions[i].body);
	*out = ps.m;
	return TPF_OK;
}

enum tpf_status tpf_model_parse_text(const char *text, size_t size, const char *name,
                                     struct tpf_model **out, struct tpf_diag *d)
{
	return parse_text(text, size, name, NULL, out, d);
}

enum tpf_status tpf_model_load_text_file(const char *path, struct tpf_model **out, struct tpf_diag *d)
{
	FILE *f;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	enum tpf_status st;

	if (!out || !path)
		return TPF_ERR_INVALID;
	*out = NULL;
	f = tpf_fopen_regular(path, "text model", d, &st);
	if (!f)
		return st;
	for (;;) {
		if (len == cap) {
			size_t ncap = cap ? cap * 2 : 65536;
			if (ncap > MAX_TEXT_FILE + 1)
				ncap = MAX_TEXT_FILE + 1;
			if (ncap == cap) {
				st = tpf_diag_fail(d, TPF_ERR_LIMIT, "'%s' is larger than %zu bytes", path,
						   MAX_TEXT_FILE);
				goto out_close;
			}
			char *nb = tpf_realloc(buf, ncap);
			if (!nb) {
				st = tpf_diag_fail(d, TPF_ERR_NOMEM, "'%s': out of memory", path);
				goto out_close;
			}
			buf = nb;
			cap = ncap;
		}
		size_t got = fread(buf + len, 1, cap - len, f);
		len += got;
		if (got == 0)
			break;
	}
	if (ferror(f)) {
		st = tpf_diag_fail(d, TPF_ERR_IO, "cannot read '%s'", path);
		goto out_close;
	}
	char *dir = tpf_path_dirname(path);
	if (!dir) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "'%s': out of memory", path);
		goto out_close;
	}
	st = parse_text(buf, len, path, dir, out, d);
	tpf_free(dir);
out_close:
	fclose(f);
	tpf_free(buf);
	return st;
}
