/* SPDX-License-Identifier: MIT */
/*
 * The text reader's types, tensors and attribute values: "bf16[T,4096]",
 * the tensor summaries of init lines and "default" clauses (elements,
 * "(N bytes)", external data), and every attribute value the printer writes.
 */
#include "parse-text-private.h"
#include "dtype-private.h"
#include "onnx-io-private.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_ZERO_TENSOR ((size_t)256 << 20)
/* what all of a model's "(N bytes)" tensors may ask for together: the
 * text holds none of it, an export writes all of it */
#define MAX_ZERO_TOTAL ((size_t)64 << 20)
#define MAX_STRINGS ((size_t)1 << 20)

/* ------------------------------------------------------------------ types */

static int parse_dtype(struct parser *ps, enum tpf_dtype *out)
{
	const char *at;
	char buf[32];

	skip_spaces(ps);
	at = ps->p;
	if (text_read_token(ps, "[]<>(),=:", buf, sizeof(buf), "a dtype"))
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
int text_parse_type(struct parser *ps, struct tpf_arena *a, struct tpf_type *t)
{
	struct tpf_dim dims[TPF_MAX_RANK];
	int rank = 0;
	const char *at;

	memset(t, 0, sizeof(*t));
	t->shape.rank = -1;
	skip_spaces(ps);
	at = ps->p;
	if (text_accept_word(ps, "opaque")) {
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
		if (*s == '"') {
			/* a quoted name: the printer's form of one that would not
			 * read back bare (bare_dim_param in print-text.c) */
			if (rank >= TPF_MAX_RANK)
				return FAIL(ps, s, "more than %d dims", TPF_MAX_RANK);
			memset(&dims[rank], 0, sizeof(dims[rank]));
			dims[rank].value = -1;
			if (text_parse_string(ps, a, &dims[rank].param, NULL))
				return -1;
			rank++;
			if (ps->p >= ps->end || (*ps->p != ',' && *ps->p != ']'))
				return FAIL(ps, ps->p, "expected ',' or ']' after a quoted dim");
			if (*ps->p++ == ']')
				break;
			continue;
		}
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
				return text_nomem(ps);
		}
		if (*ps->p++ == ']')
			break;
	}
	t->shape.rank = rank;
	t->shape.dims = tpf_arena_memdup(a, dims, (size_t)rank * sizeof(*dims));
	if (!t->shape.dims)
		return text_nomem(ps);
	return 0;
}

/* "dtype[d0,d1]" with static dims: a tensor's dtype and shape. */
int text_parse_tensor_shape(struct parser *ps, enum tpf_dtype *dt, int *rank, int64_t *dims)
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
		if (text_parse_int64(ps, &v, "a static dim"))
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
				    text_describe_here(ps, buf, sizeof(buf)));
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
			return text_nomem(ps);
	} else {
		if (tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &bytes) || !tpf_dtype_bits(t->dtype))
			return FAIL(ps, ps->p, "%s elements cannot be written as text", tpf_dtype_name(t->dtype));
		/* a number takes at least one character and a separator */
		if (bytes > 8 * ((size_t)(ps->end - ps->p) + 1))
			return FAIL(ps, ps->p, "%" PRId64 " elements cannot fit on this line", numel);
		cap = bytes ? bytes : 1;
		buf = tpf_calloc(1, cap);
		if (!buf)
			return text_nomem(ps);
	}
	skip_spaces(ps);
	if (bracket && text_expect(ps, '[', "'[' before the elements"))
		goto out;
	if (bracket && text_accept(ps, ']'))
		goto done;
	for (;;) {
		skip_spaces(ps);
		const char *at = ps->p;
		if ((int64_t)count >= numel) {
			FAIL(ps, at, "more than the %" PRId64 " elements of the shape", numel);
			goto out;
		}
		if (t->dtype == TPF_DTYPE_STRING) {
			if (text_parse_string(ps, a, &strs[count], &lens[count]))
				goto out;
		} else {
			char tok[64];
			if (text_read_token(ps, ",]>)", tok, sizeof(tok), "an element") ||
			    store_element(ps, t->dtype, tok, at, buf, count))
				goto out;
		}
		count++;
		if (!bracket)
			break;
		if (text_accept(ps, ']'))
			break;
		if (text_expect(ps, ',', "',' or ']' between the elements"))
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
			text_nomem(ps);
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
			text_nomem(ps);
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
int text_parse_summary(struct parser *ps, struct tpf_arena *a, struct tpf_tensor *t)
{
	int64_t numel = tpf_tensor_numel(t), n;
	char buf[40];
	const char *at;

	if (numel < 0)
		return FAIL(ps, ps->p, "the tensor's element count overflows");
	skip_spaces(ps);
	at = ps->p;
	if (text_accept(ps, '='))
		return parse_elements(ps, a, t, numel);
	if (!text_accept(ps, '('))
		return FAIL(ps, ps->p, "expected '= elements' or '(N bytes)', found %s",
			    text_describe_here(ps, buf, sizeof(buf)));
	if (text_parse_int64(ps, &n, "a byte count"))
		return -1;
	if (n < 0)
		return FAIL(ps, at, "negative byte count");
	if (!text_accept_word(ps, "bytes"))
		return FAIL(ps, ps->p, "expected 'bytes'");
	if (text_accept(ps, ')')) {
		size_t want;
		if (t->dtype == TPF_DTYPE_STRING) {
			/* the printer leaves out more than 8 strings */
			if ((uint64_t)numel > MAX_STRINGS)
				return FAIL(ps, at, "more than %zu strings", MAX_STRINGS);
			t->strings = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(*t->strings));
			t->string_lens = tpf_arena_alloc(a, (size_t)(numel ? numel : 1) * sizeof(size_t));
			if (!t->strings || !t->string_lens)
				return text_nomem(ps);
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
			return text_nomem(ps);
		t->nbytes = (size_t)n;
		return 0;
	}
	if (text_expect(ps, ',', "')' or ', external' or ', not loaded'"))
		return -1;
	if (text_accept_word(ps, "not")) {
		if (!text_accept_word(ps, "loaded"))
			return FAIL(ps, ps->p, "expected 'not loaded'");
		t->data = NULL;
		t->nbytes = (size_t)n;
		return text_expect(ps, ')', "')'");
	}
	if (!text_accept_word(ps, "external"))
		return FAIL(ps, ps->p, "expected 'external' or 'not loaded'");
	skip_spaces(ps);
	const char *loc_at = ps->p;
	if (text_parse_string(ps, a, &t->ext_location, NULL))
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
	if (text_accept_word(ps, "offset") && text_parse_int64(ps, &t->ext_offset, "an offset"))
		return -1;
	if (t->ext_offset < 0)
		return FAIL(ps, ps->p, "negative offset");
	if (text_expect(ps, ')', "')'"))
		return -1;
	return ps->base_dir ? read_external(ps, a, t, loc_at) : 0;
}

/* "tensor<dtype[dims] summary>" */
static int parse_tensor_attr(struct parser *ps, struct tpf_arena *a, struct tpf_tensor **out)
{
	int64_t dims[TPF_MAX_RANK];
	enum tpf_dtype dt;
	int rank;

	if (text_expect(ps, '<', "'<' after 'tensor'"))
		return -1;
	if (peek(ps) == '?')
		return FAIL(ps, ps->p, "an empty tensor attribute ('tensor<?>') cannot be read back");
	if (text_parse_tensor_shape(ps, &dt, &rank, dims))
		return -1;
	*out = tpf_tensor_create(a, NULL, dt, rank, dims, NULL, 0);
	if (!*out)
		return text_nomem(ps);
	if (text_parse_summary(ps, a, *out))
		return -1;
	return text_expect(ps, '>', "'>' after the tensor");
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

/* Moves past a tensor value of a list ("<...>", strings included) without
 * reading it: the first pass over a list only counts. */
static void skip_tensor_text(struct parser *ps)
{
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
}

/* The kinds of a list's elements, as its first pass finds them. */
enum list_kind {
	LIST_EMPTY,
	LIST_INTS,
	LIST_FLOATS,
	LIST_STRINGS,
	LIST_TENSORS,
};

/* Element n of a list.  The first pass (pass 0) settles *kind; the second
 * stores the element into at's array. */
static int parse_list_element(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at, int pass,
			      size_t n, enum list_kind *kind)
{
	char tok[64];

	skip_spaces(ps);
	const char *el = ps->p;
	if (peek(ps) == '"') {
		const char *s;
		size_t len;
		if (*kind && *kind != LIST_STRINGS)
			return FAIL(ps, el, "a list mixes strings with other values");
		*kind = LIST_STRINGS;
		if (text_parse_string(ps, a, &s, &len))
			return -1;
		if (pass) {
			at->strings[n] = s;
			at->string_lens[n] = len;
		}
	} else if (text_accept_word(ps, "tensor")) {
		if (*kind && *kind != LIST_TENSORS)
			return FAIL(ps, el, "a list mixes tensors with other values");
		*kind = LIST_TENSORS;
		if (!pass)
			skip_tensor_text(ps);
		else if (parse_tensor_attr(ps, a, &at->tensors[n]))
			return -1;
	} else if (text_accept_word(ps, "sparse_tensor") || text_accept_word(ps, "type_proto")) {
		return FAIL(ps, el, "sparse_tensor and type_proto attributes cannot be "
			    "read back: the dump does not hold their contents");
	} else {
		int is_int;
		int64_t iv = 0;
		double fv = 0;
		if (*kind == LIST_STRINGS || *kind == LIST_TENSORS)
			return FAIL(ps, el, "a list mixes numbers with other values");
		if (text_read_token(ps, ",]", tok, sizeof(tok), "a list element") ||
		    parse_number(ps, tok, el, &is_int, &iv, &fv))
			return -1;
		if (!pass)
			*kind = !is_int || *kind == LIST_FLOATS ? LIST_FLOATS : LIST_INTS;
		else if (*kind == LIST_INTS)
			at->ints[n] = iv;
		else
			at->floats[n] = is_int ? (float)iv : (float)fv;
	}
	return 0;
}

/* The arrays of a list of n elements of the given kind. */
static int alloc_attr_list(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at,
			   enum list_kind kind, size_t n)
{
	at->n = n;
	if (kind == LIST_INTS) {
		at->kind = TPF_ATTR_INTS;
		at->ints = tpf_arena_alloc(a, n * sizeof(*at->ints));
		if (!at->ints)
			return text_nomem(ps);
	} else if (kind == LIST_FLOATS) {
		at->kind = TPF_ATTR_FLOATS;
		at->floats = tpf_arena_alloc(a, n * sizeof(*at->floats));
		if (!at->floats)
			return text_nomem(ps);
	} else if (kind == LIST_STRINGS) {
		at->kind = TPF_ATTR_STRINGS;
		at->strings = tpf_arena_alloc(a, n * sizeof(*at->strings));
		at->string_lens = tpf_arena_alloc(a, n * sizeof(*at->string_lens));
		if (!at->strings || !at->string_lens)
			return text_nomem(ps);
	} else {
		at->kind = TPF_ATTR_TENSORS;
		at->tensors = tpf_arena_alloc(a, n * sizeof(*at->tensors));
		if (!at->tensors)
			return text_nomem(ps);
	}
	return 0;
}

/* A list value after its '[': a first pass finds the kind and the count,
 * a second reads the elements into their array. */
static int parse_attr_list(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at)
{
	const char *save = ps->p;
	enum list_kind kind = LIST_EMPTY;
	size_t n = 0;

	if (text_accept(ps, ']')) {
		at->kind = TPF_ATTR_INTS;
		return 0;
	}
	for (int pass = 0; pass < 2; pass++) {
		ps->p = save;
		n = 0;
		for (;;) {
			if (parse_list_element(ps, a, at, pass, n, &kind))
				return -1;
			n++;
			if (text_accept(ps, ']'))
				break;
			if (text_expect(ps, ',', "',' or ']' in the list"))
				return -1;
		}
		if (!pass && alloc_attr_list(ps, a, at, kind, n))
			return -1;
	}
	return 0;
}

/* An attribute value as the printer writes it, into a (name set by the
 * caller).  `graphs_ok`: graph values are allowed (their blocks follow). */
int text_parse_attr_value(struct parser *ps, struct tpf_arena *a, struct tpf_attr *at, int graphs_ok)
{
	const char *start;
	char tok[64];

	skip_spaces(ps);
	start = ps->p;
	if (text_accept(ps, '@')) {
		if (peek(ps) == '"')
			return text_parse_string(ps, a, &at->ref_attr_name, NULL);
		if (text_read_token(ps, ",}", tok, sizeof(tok), "a referenced attribute name"))
			return -1;
		at->ref_attr_name = tpf_arena_strdup(a, tok);
		return at->ref_attr_name ? 0 : text_nomem(ps);
	}
	if (peek(ps) == '"') {
		at->kind = TPF_ATTR_STRING;
		return text_parse_string(ps, a, &at->s, &at->s_len);
	}
	if (text_accept_word(ps, "tensor")) {
		at->kind = TPF_ATTR_TENSOR;
		return parse_tensor_attr(ps, a, &at->t);
	}
	if (text_accept_word(ps, "sparse_tensor") || text_accept_word(ps, "type_proto"))
		return FAIL(ps, start, "sparse_tensor and type_proto attributes cannot be read back: "
			    "the dump does not hold their contents");
	if (text_accept_word(ps, "graph")) {
		if (!graphs_ok)
			return FAIL(ps, start, "a graph attribute here cannot be read back (no block follows it)");
		at->kind = TPF_ATTR_GRAPH;
		return 0;
	}
	if (text_accept_word(ps, "graphs")) {
		int64_t n;
		if (!graphs_ok)
			return FAIL(ps, start, "a graph attribute here cannot be read back (no block follows it)");
		if (text_expect(ps, '[', "'[' after 'graphs'") || text_parse_int64(ps, &n, "a graph count") ||
		    text_expect(ps, ']', "']'"))
			return -1;
		if (n < 1 || n > 4096)
			return FAIL(ps, start, "graph count %" PRId64 " out of range (1 to 4096)", n);
		at->kind = TPF_ATTR_GRAPHS;
		at->n = (size_t)n;
		at->graphs = tpf_arena_alloc(a, (size_t)n * sizeof(*at->graphs));
		return at->graphs ? 0 : text_nomem(ps);
	}
	if (text_accept(ps, '['))
		return parse_attr_list(ps, a, at);
	/* a scalar number */
	int is_int;
	int64_t iv = 0;
	double fv = 0;
	if (text_read_token(ps, ",}", tok, sizeof(tok), "an attribute value") ||
	    parse_number(ps, tok, start, &is_int, &iv, &fv))
		return -1;
	if (is_int) {
		at->kind = TPF_ATTR_INT;
		at->i = iv;
	} else {
		at->kind = TPF_ATTR_FLOAT;
		at->f = (float)fv;
	}
	return 0;
}
