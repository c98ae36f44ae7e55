/*
 * Deterministic text dump of a model or graph.
 *
 * Layout (docs/cli.md describes it for users):
 *
 *   ir_version 10
 *   producer "pytorch" "2.5"
 *   opset "" 18
 *   metadata "tp_rank" "0"
 *   graph "main" {
 *     input %0: bf16[T,4096] "hidden"
 *     init %1: bf16[4096] "w" (8192 bytes)
 *     %2 = RMSNormalization(%0, %1) {axis=-1, epsilon=1e-06} : bf16[T,4096]  # norm
 *     output %2 "out"
 *   }
 *
 * Values are numbered in order of first definition: inputs, initializers,
 * then node outputs in node order.  A subgraph continues the numbering of
 * the graph holding it (so captured outer values keep their numbers); every
 * function body starts again at %0.  Intermediate value names are not
 * printed, so renaming a value does not change the dump; each node line ends
 * with the node's name (or, for nameless nodes, its first output's name) as
 * a comment so users can still find things (quoted where the bare name would
 * read back as another one: see print_comment_name).
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype-private.h"

/* ------------------------------------------------------------ value numbers */

struct num_map {
	const void **keys;
	uint64_t *vals;
	size_t cap, count;
};

static size_t num_hash(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (size_t)x;
}

static void num_map_free(struct num_map *m)
{
	tpf_free(m->keys);
	tpf_free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* Returns 1 and sets *out when p has a number. */
static int num_map_get(const struct num_map *m, const void *p, uint64_t *out)
{
	size_t i;

	if (!m->cap)
		return 0;
	for (i = num_hash(p) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->keys[i])
			return 0;
		if (m->keys[i] == p) {
			*out = m->vals[i];
			return 1;
		}
	}
}

static void num_map_put_raw(struct num_map *m, const void *p, uint64_t v)
{
	size_t i;

	for (i = num_hash(p) & (m->cap - 1); m->keys[i]; i = (i + 1) & (m->cap - 1))
		if (m->keys[i] == p)
			return;
	m->keys[i] = p;
	m->vals[i] = v;
	m->count++;
}

/* 0 ok, -1 out of memory.  Keeps an existing number. */
static int num_map_put(struct num_map *m, const void *p, uint64_t v)
{
	uint64_t old;

	if (num_map_get(m, p, &old))
		return 0;
	if ((m->count + 1) * 2 > m->cap) {
		struct num_map n = {0};
		size_t i, cap = m->cap ? m->cap * 2 : 64;
		size_t bytes;

		if (tpf_mul_size(cap, sizeof(*n.keys), &bytes))
			return -1;
		n.keys = tpf_calloc(cap, sizeof(*n.keys));
		n.vals = tpf_calloc(cap, sizeof(*n.vals));
		if (!n.keys || !n.vals) {
			num_map_free(&n);
			return -1;
		}
		n.cap = cap;
		for (i = 0; i < m->cap; i++)
			if (m->keys[i])
				num_map_put_raw(&n, m->keys[i], m->vals[i]);
		num_map_free(m);
		*m = n;
	}
	num_map_put_raw(m, p, v);
	return 0;
}

struct printer {
	FILE *f;
	struct num_map nums;
	uint64_t next;
	int nomem;
};

/* --------------------------------------------------------------- formatting */

/* Shortest "%g" form that reads back to the same value; always looks like a
 * float ("1.0", not "1"), so float and int attributes are told apart. */
static void format_real(char *buf, size_t size, double v, int is_double)
{
	int prec;

	if (isnan(v)) {
		snprintf(buf, size, "nan");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, size, v < 0 ? "-inf" : "inf");
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (is_double ? strtod(buf, NULL) == v : strtof(buf, NULL) == (float)v)
			break;
	}
	if (!strpbrk(buf, ".en") && strlen(buf) + 3 <= size)
		strcat(buf, ".0");
}

static void print_escaped(FILE *f, const char *s, size_t n)
{
	size_t i;

	fputc('"', f);
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void print_str(FILE *f, const char *s)
{
	if (!s)
		s = "";
	print_escaped(f, s, strlen(s));
}

/* Whether s prints bare where the reader stops at any of `stops`: not
 * empty, none of them, no '"' and no control character. */
static int bare_name(const char *s, const char *stops)
{
	if (!s || !s[0])
		return 0;
	for (; *s; s++)
		if (strchr(stops, *s) || *s == '"' || (unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* A name that the reader takes as a token ending at `stops` (an attribute
 * name, a referenced one, a graph attribute's block header): bare where it
 * reads back as itself, else quoted. */
static void print_name(FILE *f, const char *s, const char *stops)
{
	if (s && bare_name(s, stops) && strcmp(s, "?") != 0)
		fputs(s, f);
	else
		print_str(f, s ? s : "?");
}

/* A name in a node line's comment: as it is where the comment reads it
 * back as the same name, else as a quoted string with print_escaped's
 * escapes (control bytes, which a line end would eat or split; a '"'; a
 * trailing ']', read as an origin; a leading "-> " when `arrow` is 0, read
 * as an output name). */
static void print_comment_name(FILE *f, const char *s, int arrow)
{
	size_t n = strlen(s);

	if (!bare_name(s, "") || s[n - 1] == ']' || (!arrow && strncmp(s, "-> ", 3) == 0))
		print_escaped(f, s, n);
	else
		fputs(s, f);
}

/* Whether a symbolic dim's name reads back as itself unquoted: a bare name
 * without ',' or ']' (read as the end of the dim), not a number, "?" or "*"
 * (read as a static, unknown dim or an unknown rank). */
static int bare_dim_param(const char *s)
{
	return bare_name(s, ",]") && s[strspn(s, "0123456789")] && strcmp(s, "?") && strcmp(s, "*");
}

static void print_dim(FILE *f, const struct tpf_dim *d)
{
	if (d->param && bare_dim_param(d->param))
		fputs(d->param, f);
	else if (d->param)
		print_str(f, d->param);
	else if (d->value >= 0)
		fprintf(f, "%" PRId64, d->value);
	else
		fputc('?', f);
}

/* "[d0,d1,...]": n dims, of `dims` (symbolic or static) or else of `values`. */
static void print_dim_list(FILE *f, const struct tpf_dim *dims, const int64_t *values, int n)
{
	int i;

	fputc('[', f);
	for (i = 0; i < n; i++) {
		if (i)
			fputc(',', f);
		if (dims)
			print_dim(f, &dims[i]);
		else
			fprintf(f, "%" PRId64, values[i]);
	}
	fputc(']', f);
}

static void print_type(FILE *f, const struct tpf_type *t)
{
	int none = !t || t->kind == TPF_TYPE_NONE;

	/* "?" or "opaque" for a type without a tensor's, a dtype's "?" when
	 * unknown, then "[*]" for an unknown rank or the dims */
	if (none || t->kind == TPF_TYPE_OPAQUE) {
		fputs(none ? "?" : "opaque", f);
		return;
	}
	fputs(t->dtype == TPF_DTYPE_UNDEFINED ? "?" : tpf_dtype_name(t->dtype), f);
	if (t->shape.rank < 0 || (t->shape.rank > 0 && !t->shape.dims)) {
		fputs("[*]", f);
		return;
	}
	print_dim_list(f, t->shape.dims, NULL, t->shape.rank);
}

/* A graph input's or output's type and name: "f32[B,8] \"x\"". */
static void print_typed_name(FILE *f, const struct tpf_value *v)
{
	print_type(f, &v->type);
	fputc(' ', f);
	print_str(f, v->name);
}

static void print_tensor_shape(FILE *f, const struct tpf_tensor *t)
{
	fputs(tpf_dtype_name(t->dtype), f);
	print_dim_list(f, NULL, t->dims, t->dims ? t->rank : 0);
}

/* ----------------------------------------------------------- tensor elements */

/* In format_element: the integer of type `ctype` at p, printed with `fmt` as `as`. */
#define FORMAT_INT(ctype, fmt, as)                                                                 \
	do {                                                                                       \
		ctype v_;                                                                          \
		memcpy(&v_, p, sizeof(v_));                                                        \
		snprintf(buf, size, fmt, (as)v_);                                                  \
		return 0;                                                                          \
	} while (0)

/* Formats element i of a packed little-endian tensor.  0 ok, -1 if the
 * dtype has no printed form or the data is too short. */
static int format_element(char *buf, size_t size, enum tpf_dtype dt, const uint8_t *p,
			  size_t nbytes, size_t i)
{
	unsigned bits = tpf_dtype_bits(dt);
	size_t need;

	if (!bits || tpf_mul_size(i + 1, bits, &need) || (need + 7) / 8 > nbytes)
		return -1;
	if (bits < 8) {
		unsigned per = 8 / bits;
		unsigned v = (p[i / per] >> ((i % per) * bits)) & ((1u << bits) - 1);

		switch (dt) {
		case TPF_DTYPE_FLOAT4E2M1:
			format_real(buf, size, ir_small_float_to_float(TPF_DTYPE_FLOAT4E2M1, v), 0);
			return 0;
		case TPF_DTYPE_INT4:
			snprintf(buf, size, "%d", (int)(v & 8 ? (int)v - 16 : (int)v));
			return 0;
		case TPF_DTYPE_INT2:
			snprintf(buf, size, "%d", (int)(v & 2 ? (int)v - 4 : (int)v));
			return 0;
		default:
			snprintf(buf, size, "%u", v);
			return 0;
		}
	}
	p += i * (bits / 8);
	switch (dt) {
	case TPF_DTYPE_FLOAT: {
		float v;
		memcpy(&v, p, 4);
		format_real(buf, size, v, 0);
		return 0;
	}
	case TPF_DTYPE_DOUBLE: {
		double v;
		memcpy(&v, p, 8);
		format_real(buf, size, v, 1);
		return 0;
	}
	case TPF_DTYPE_FLOAT16:
		format_real(buf, size, ir_half_to_float((uint16_t)(p[0] | p[1] << 8)), 0);
		return 0;
	case TPF_DTYPE_BFLOAT16:
		format_real(buf, size, ir_bf16_to_float((uint16_t)(p[0] | p[1] << 8)), 0);
		return 0;
	case TPF_DTYPE_FLOAT8E4M3FN:
	case TPF_DTYPE_FLOAT8E4M3FNUZ:
	case TPF_DTYPE_FLOAT8E5M2:
	case TPF_DTYPE_FLOAT8E5M2FNUZ:
		format_real(buf, size, ir_small_float_to_float(dt, p[0]), 0);
		return 0;
	case TPF_DTYPE_FLOAT8E8M0:
		if (p[0] == 0xff)
			snprintf(buf, size, "nan");
		else
			format_real(buf, size, ldexp(1.0, (int)p[0] - 127), 1);
		return 0;
	case TPF_DTYPE_BOOL:
		snprintf(buf, size, "%s", p[0] ? "true" : "false");
		return 0;
	case TPF_DTYPE_UINT8:
		snprintf(buf, size, "%u", (unsigned)p[0]);
		return 0;
	case TPF_DTYPE_INT8:
		snprintf(buf, size, "%d", (int)(int8_t)p[0]);
		return 0;
	case TPF_DTYPE_UINT16:
		FORMAT_INT(uint16_t, "%u", unsigned);
	case TPF_DTYPE_INT16:
		FORMAT_INT(int16_t, "%d", int);
	case TPF_DTYPE_UINT32:
		FORMAT_INT(uint32_t, "%" PRIu32, uint32_t);
	case TPF_DTYPE_INT32:
		FORMAT_INT(int32_t, "%" PRId32, int32_t);
	case TPF_DTYPE_UINT64:
		FORMAT_INT(uint64_t, "%" PRIu64, uint64_t);
	case TPF_DTYPE_INT64:
		FORMAT_INT(int64_t, "%" PRId64, int64_t);
	default:
		return -1;
	}
}

#define TINY_ELEMENTS 8

/* Prints "[e0, e1, ...]" (or a bare element for a scalar) when the tensor
 * has at most TINY_ELEMENTS elements and its data is at hand.  Returns 1 if
 * something was printed. */
static int print_tiny_data(FILE *f, const struct tpf_tensor *t, const char *prefix)
{
	int64_t n = tpf_tensor_numel(t);
	char buf[64];
	int64_t i;

	if (n < 0 || n > TINY_ELEMENTS)
		return 0;
	if (t->dtype == TPF_DTYPE_STRING) {
		if (!t->strings || t->n_strings != (size_t)n)
			return 0;
		fputs(prefix, f);
		if (t->rank)
			fputc('[', f);
		for (i = 0; i < n; i++) {
			if (i)
				fputs(", ", f);
			print_escaped(f, t->strings[i] ? t->strings[i] : "",
				      t->strings[i] && t->string_lens ? t->string_lens[i] :
				      t->strings[i] ? strlen(t->strings[i]) : 0);
		}
		if (t->rank)
			fputc(']', f);
		return 1;
	}
	if (!t->data && n > 0)
		return 0;
	for (i = 0; i < n; i++)
		if (format_element(buf, sizeof(buf), t->dtype, t->data, t->nbytes, (size_t)i))
			return 0;
	fputs(prefix, f);
	if (t->rank)
		fputc('[', f);
	for (i = 0; i < n; i++) {
		format_element(buf, sizeof(buf), t->dtype, t->data, t->nbytes, (size_t)i);
		if (i)
			fputs(", ", f);
		fputs(buf, f);
	}
	if (t->rank)
		fputc(']', f);
	return 1;
}

/* "(8192 bytes)", "(8192 bytes, external "w.data" offset 0)" or "= 1.0"
 * (element data only for tensors of at most TINY_ELEMENTS elements). */
static void print_tensor_summary(FILE *f, const struct tpf_tensor *t)
{
	if (!t->is_external && print_tiny_data(f, t, "= "))
		return;
	fprintf(f, "(%zu bytes", t->is_external && t->ext_length > 0 ? (size_t)t->ext_length :
							      t->nbytes);
	if (t->is_external) {
		fputs(", external ", f);
		print_str(f, t->ext_location);
		if (t->ext_offset > 0)
			fprintf(f, " offset %" PRId64, t->ext_offset);
	}
	fputc(')', f);
}

/* ----------------------------------------------------------- value numbering */

static void value_ref(struct printer *p, const struct tpf_value *v)
{
	uint64_t n;
	int hops = 0;

	if (!v) {
		fputc('_', p->f);
		return;
	}
	while (v->kind == TPF_VALUE_OUTER && v->outer && hops++ < 64)
		v = v->outer;
	if (num_map_get(&p->nums, v, &n)) {
		fprintf(p->f, "%%%" PRIu64, n);
	} else {
		/* not defined in any printed scope: show its name */
		fputs("%?", p->f);
		print_str(p->f, v->name);
	}
}

static void number_value(struct printer *p, const struct tpf_value *v)
{
	if (!v || v->kind == TPF_VALUE_OUTER)
		return;
	if (num_map_put(&p->nums, v, p->next))
		p->nomem = 1;
	else
		p->next = p->nums.count;
}

static int attr_cmp(const struct tpf_attr *a, const struct tpf_attr *b)
{
	return strcmp(a->name ? a->name : "", b->name ? b->name : "");
}

/* Indexes of n's attributes sorted by name, in a tpf_malloc'ed array (NULL
 * when there are none or on allocation failure: *nomem says which). */
static size_t *sorted_attrs(const struct tpf_node *n, int *nomem)
{
	size_t *idx, i, j;

	if (!n->n_attrs)
		return NULL;
	idx = tpf_calloc(n->n_attrs, sizeof(*idx));
	if (!idx) {
		*nomem = 1;
		return NULL;
	}
	for (i = 0; i < n->n_attrs; i++) {
		size_t k = i;

		for (j = i; j > 0 && attr_cmp(&n->attrs[idx[j - 1]], &n->attrs[k]) > 0; j--)
			idx[j] = idx[j - 1];
		idx[j] = k;
	}
	return idx;
}

static void number_graph(struct printer *p, const struct tpf_graph *g, int depth)
{
	const struct tpf_node *n;
	size_t i, k;

	if (!g || depth > 64)
		return;
	for (i = 0; i < g->n_inputs; i++)
		number_value(p, g->inputs[i]);
	for (i = 0; i < g->n_initializers; i++)
		number_value(p, g->initializers[i]);
	for (n = g->first; n; n = n->next) {
		size_t *idx;

		if (n->erased)
			continue;
		for (i = 0; i < n->n_outputs; i++)
			number_value(p, n->outputs[i]);
		idx = sorted_attrs(n, &p->nomem);
		for (k = 0; idx && k < n->n_attrs; k++) {
			const struct tpf_attr *a = &n->attrs[idx[k]];

			if (a->kind == TPF_ATTR_GRAPH)
				number_graph(p, a->g, depth + 1);
			else if (a->kind == TPF_ATTR_GRAPHS && a->graphs)
				for (i = 0; i < a->n; i++)
					number_graph(p, a->graphs[i], depth + 1);
		}
		tpf_free(idx);
	}
}

/* ----------------------------------------------------------------- printing */

static void indent(FILE *f, int depth)
{
	int i;

	for (i = 0; i < depth; i++)
		fputs("  ", f);
}

/* "KEYWORD %N: " at depth (an absent value: "KEYWORD %?" without the colon). */
static void value_line_head(struct printer *p, int depth, const char *keyword,
			    const struct tpf_value *v)
{
	indent(p->f, depth);
	fputs(keyword, p->f);
	fputc(' ', p->f);
	value_ref(p, v);
	if (v)
		fputs(": ", p->f);
}

static void print_tensor_attr(FILE *f, const struct tpf_tensor *t)
{
	if (!t) {
		fputs("tensor<?>", f);
		return;
	}
	fputs("tensor<", f);
	print_tensor_shape(f, t);
	fputc(' ', f);
	print_tensor_summary(f, t);
	fputc('>', f);
}

static void print_attr_value(FILE *f, const struct tpf_attr *a)
{
	char buf[64];
	size_t i;

	if (a->ref_attr_name) {
		fputc('@', f);
		print_name(f, a->ref_attr_name, " \t,}");
		return;
	}
	switch (a->kind) {
	case TPF_ATTR_FLOAT:
		format_real(buf, sizeof(buf), a->f, 0);
		fputs(buf, f);
		break;
	case TPF_ATTR_INT:
		fprintf(f, "%" PRId64, a->i);
		break;
	case TPF_ATTR_STRING:
		print_escaped(f, a->s ? a->s : "", a->s ? a->s_len : 0);
		break;
	case TPF_ATTR_TENSOR:
		print_tensor_attr(f, a->t);
		break;
	case TPF_ATTR_GRAPH:
		fputs("graph", f);
		break;
	case TPF_ATTR_GRAPHS:
		fprintf(f, "graphs[%zu]", a->n);
		break;
	case TPF_ATTR_SPARSE_TENSOR:
		fprintf(f, "sparse_tensor<%zu bytes>", a->blob.size);
		break;
	case TPF_ATTR_TYPE_PROTO:
		fprintf(f, "type_proto<%zu bytes>", a->blob.size);
		break;
	case TPF_ATTR_FLOATS:
	case TPF_ATTR_INTS:
	case TPF_ATTR_STRINGS:
	case TPF_ATTR_TENSORS:
	case TPF_ATTR_SPARSE_TENSORS:
	case TPF_ATTR_TYPE_PROTOS:
		fputc('[', f);
		for (i = 0; i < a->n; i++) {
			if (i)
				fputs(", ", f);
			if (a->kind == TPF_ATTR_FLOATS && a->floats) {
				format_real(buf, sizeof(buf), a->floats[i], 0);
				fputs(buf, f);
			} else if (a->kind == TPF_ATTR_INTS && a->ints) {
				fprintf(f, "%" PRId64, a->ints[i]);
			} else if (a->kind == TPF_ATTR_STRINGS && a->strings) {
				const char *s = a->strings[i] ? a->strings[i] : "";
				size_t len = a->string_lens ? a->string_lens[i] : strlen(s);

				print_escaped(f, s, a->strings[i] ? len : 0);
			} else if (a->kind == TPF_ATTR_TENSORS && a->tensors) {
				print_tensor_attr(f, a->tensors[i]);
			} else if (a->blobs) {
				fprintf(f, "%s<%zu bytes>",
					a->kind == TPF_ATTR_SPARSE_TENSORS ? "sparse_tensor" :
									     "type_proto",
					a->blobs[i].size);
			} else {
				fputc('?', f);
			}
		}
		fputc(']', f);
		break;
	default:
		fputc('?', f);
		break;
	}
}

static void print_graph_body(struct printer *p, const struct tpf_graph *g, int depth);

/* [domain.]op_type[:overload], or op<"domain", "op_type"[, "overload"]>
 * where a bare part would read back as another (the reader splits the
 * domain at the last '.' before the first ':', the op at '(' or a space). */
static void print_op_name(FILE *f, const struct tpf_node *n)
{
	const char *dom = n->domain ? n->domain : "";
	const char *op = n->op_type && n->op_type[0] ? n->op_type : "?";
	const char *ovl = n->overload && n->overload[0] ? n->overload : NULL;
	int show_dom = dom[0] && strcmp(dom, "ai.onnx") != 0;

	if ((show_dom && !bare_name(dom, ":( \t<")) || !bare_name(op, ".:( \t<") ||
	    (ovl && !bare_name(ovl, "( \t"))) {
		fputs("op<", f);
		print_str(f, dom);
		fputs(", ", f);
		print_str(f, n->op_type ? n->op_type : "");
		if (ovl) {
			fputs(", ", f);
			print_str(f, ovl);
		}
		fputc('>', f);
		return;
	}
	if (show_dom) {
		fputs(dom, f);
		fputc('.', f);
	}
	fputs(op, f);
	if (ovl) {
		fputc(':', f);
		fputs(ovl, f);
	}
}

static void print_node(struct printer *p, const struct tpf_node *n, int depth)
{
	FILE *f = p->f;
	size_t i, k, n_typed = 0;
	size_t *idx;
	int first;

	indent(f, depth);
	if (n->n_outputs) {
		for (i = 0; i < n->n_outputs; i++) {
			if (i)
				fputs(", ", f);
			value_ref(p, n->outputs[i]);
			if (n->outputs[i])
				n_typed++;
		}
		fputs(" = ", f);
	}
	print_op_name(f, n);
	fputc('(', f);
	for (i = 0; i < n->n_inputs; i++) {
		if (i)
			fputs(", ", f);
		value_ref(p, n->inputs[i]);
	}
	fputc(')', f);

	idx = sorted_attrs(n, &p->nomem);
	if (idx) {
		fputs(" {", f);
		for (k = 0; k < n->n_attrs; k++) {
			const struct tpf_attr *a = &n->attrs[idx[k]];

			if (k)
				fputs(", ", f);
			print_name(f, a->name, " \t=,}");
			fputc('=', f);
			print_attr_value(f, a);
		}
		fputc('}', f);
	}

	if (n_typed) {
		fputs(" : ", f);
		if (n_typed > 1)
			fputc('(', f);
		first = 1;
		for (i = 0; i < n->n_outputs; i++) {
			if (!n->outputs[i])
				continue;
			if (!first)
				fputs(", ", f);
			first = 0;
			print_type(f, &n->outputs[i]->type);
		}
		if (n_typed > 1)
			fputc(')', f);
	}

	if (n->name && n->name[0]) {
		fputs("  # ", f);
		print_comment_name(f, n->name, 0);
	} else {
		for (i = 0; i < n->n_outputs && !n->outputs[i]; i++)
			;
		if (i < n->n_outputs) {
			fputs("  # -> ", f);
			print_comment_name(f, n->outputs[i]->name, 1);
		} else if (n->origin_pass) {
			fputs("  #", f);
		}
	}
	if (n->origin_pass) {
		fprintf(f, " [%s", n->origin_pass);
		if (n->origin_pattern)
			fprintf(f, "/%s", n->origin_pattern);
		fputc(']', f);
	}
	fputc('\n', f);

	/* nested graphs, in the same (sorted) attribute order */
	for (k = 0; idx && k < n->n_attrs; k++) {
		const struct tpf_attr *a = &n->attrs[idx[k]];

		if (a->kind == TPF_ATTR_GRAPH && a->g) {
			indent(f, depth + 1);
			print_name(f, a->name, ":[ (");
			fputs(": graph ", f);
			print_str(f, a->g->name);
			fputs(" {\n", f);
			print_graph_body(p, a->g, depth + 2);
			indent(f, depth + 1);
			fputs("}\n", f);
		} else if (a->kind == TPF_ATTR_GRAPHS && a->graphs) {
			for (i = 0; i < a->n; i++) {
				if (!a->graphs[i])
					continue;
				indent(f, depth + 1);
				print_name(f, a->name, ":[ (");
				fprintf(f, "[%zu]: graph ", i);
				print_str(f, a->graphs[i]->name);
				fputs(" {\n", f);
				print_graph_body(p, a->graphs[i], depth + 2);
				indent(f, depth + 1);
				fputs("}\n", f);
			}
		}
	}
	tpf_free(idx);
}

static void print_graph_body(struct printer *p, const struct tpf_graph *g, int depth)
{
	FILE *f = p->f;
	const struct tpf_node *n;
	size_t i;

	if (depth > 130) {
		indent(f, depth);
		fputs("# nested too deep\n", f);
		return;
	}
	for (i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];

		if (!v)
			continue;
		value_line_head(p, depth, "input", v);
		print_typed_name(f, v);
		if (v->init) {
			fputs(" default ", f);
			print_tensor_summary(f, v->init);
		}
		fputc('\n', f);
	}
	for (i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];

		if (!v || v->is_graph_input)
			continue;
		value_line_head(p, depth, "init", v);
		if (v->init)
			print_tensor_shape(f, v->init);
		else
			print_type(f, &v->type);
		fputc(' ', f);
		print_str(f, v->name);
		if (v->init) {
			fputc(' ', f);
			if (v->init->data || !v->init->nbytes || v->init->is_external ||
			    v->init->dtype == TPF_DTYPE_STRING)
				print_tensor_summary(f, v->init);
			else
				fprintf(f, "(%zu bytes, not loaded)", v->init->nbytes);
		}
		fputc('\n', f);
	}
	if (g->n_sparse_initializers) {
		indent(f, depth);
		fprintf(f, "# %zu sparse initializers\n", g->n_sparse_initializers);
	}
	for (n = g->first; n; n = n->next)
		if (!n->erased)
			print_node(p, n, depth);
	for (i = 0; i < g->n_outputs; i++) {
		const struct tpf_value *v = g->outputs[i];

		value_line_head(p, depth, "output", v);
		if (v)
			print_typed_name(f, v);
		fputc('\n', f);
	}
}

static enum tpf_status print_graph_scope(FILE *f, const struct tpf_graph *g, int depth)
{
	struct printer p = {.f = f};

	number_graph(&p, g, 0);
	if (!p.nomem)
		print_graph_body(&p, g, depth);
	num_map_free(&p.nums);
	if (p.nomem)
		return TPF_ERR_NOMEM;
	return ferror(f) ? TPF_ERR_IO : TPF_OK;
}

enum tpf_status tpf_graph_print_text(const struct tpf_graph *g, FILE *f)
{
	enum tpf_status st;

	if (!g || !f)
		return TPF_ERR_INVALID;
	fputs("graph ", f);
	print_str(f, g->name);
	fputs(" {\n", f);
	st = print_graph_scope(f, g, 1);
	if (st)
		return st;
	fputs("}\n", f);
	return ferror(f) ? TPF_ERR_IO : TPF_OK;
}

/* The order in which to print n items: an insertion sort of their indexes
 * in which item a goes after item b when after(ctx, a, b).  tpf_calloc'ed;
 * NULL when out of memory. */
static size_t *print_order(size_t n, int (*after)(const void *ctx, size_t a, size_t b),
			   const void *ctx)
{
	size_t *idx = tpf_calloc(n, sizeof(*idx)), i, j;

	if (!idx)
		return NULL;
	for (i = 0; i < n; i++) {
		for (j = i; j > 0 && after(ctx, idx[j - 1], i); j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
	return idx;
}

struct pairs {
	const char *const *keys, *const *vals;
};

/* By key, then by value when there are values. */
static int pair_after(const void *ctx, size_t a, size_t b)
{
	const struct pairs *p = ctx;
	int c = strcmp(p->keys[a] ? p->keys[a] : "", p->keys[b] ? p->keys[b] : "");

	return !(c < 0 || (c == 0 && p->vals &&
			   strcmp(p->vals[a] ? p->vals[a] : "", p->vals[b] ? p->vals[b] : "") <= 0));
}

/* Prints key/value pairs sorted by key (ties by value), one line each. */
static enum tpf_status print_sorted_pairs(FILE *f, const char *label, size_t n,
					  const char *const *keys, const char *const *vals,
					  int depth)
{
	struct pairs p = {keys, vals};
	size_t *idx, i;

	if (!n || !keys)
		return TPF_OK;
	idx = print_order(n, pair_after, &p);
	if (!idx)
		return TPF_ERR_NOMEM;
	for (i = 0; i < n; i++) {
		indent(f, depth);
		fprintf(f, "%s ", label);
		print_str(f, keys[idx[i]]);
		if (vals) {
			fputc(' ', f);
			print_str(f, vals[idx[i]]);
		}
		fputc('\n', f);
	}
	tpf_free(idx);
	return TPF_OK;
}

/* By domain, then by version. */
static int opset_after(const void *ctx, size_t a, size_t b)
{
	const struct tpf_opset *x = (const struct tpf_opset *)ctx + a;
	const struct tpf_opset *y = (const struct tpf_opset *)ctx + b;
	int c = strcmp(x->domain ? x->domain : "", y->domain ? y->domain : "");

	return !(c < 0 || (c == 0 && x->version <= y->version));
}

static enum tpf_status print_opsets(FILE *f, const struct tpf_opset *ops, size_t n, int depth)
{
	size_t *idx, i;

	if (!n || !ops)
		return TPF_OK;
	idx = print_order(n, opset_after, ops);
	if (!idx)
		return TPF_ERR_NOMEM;
	for (i = 0; i < n; i++) {
		indent(f, depth);
		fputs("opset ", f);
		print_str(f, ops[idx[i]].domain);
		fprintf(f, " %" PRId64 "\n", ops[idx[i]].version);
	}
	tpf_free(idx);
	return TPF_OK;
}

/* A model's or a function's opset imports, then its metadata. */
static enum tpf_status print_opsets_metadata(FILE *f, const struct tpf_opset *ops, size_t n_ops,
					     size_t n_md, const char *const *keys,
					     const char *const *vals, int depth)
{
	enum tpf_status st = print_opsets(f, ops, n_ops, depth);

	if (st)
		return st;
	return print_sorted_pairs(f, "metadata", n_md, keys, vals, depth);
}

static enum tpf_status print_function(FILE *f, const struct tpf_function *fn)
{
	enum tpf_status st;
	size_t i;

	fputs("function ", f);
	print_str(f, fn->domain);
	fputc(' ', f);
	print_str(f, fn->name);
	if (fn->overload && fn->overload[0]) {
		fputs(" overload ", f);
		print_str(f, fn->overload);
	}
	fputs(" {\n", f);
	for (i = 0; i < fn->n_attribute_names; i++) {
		fputs("  attribute ", f);
		print_str(f, fn->attribute_names ? fn->attribute_names[i] : NULL);
		fputc('\n', f);
	}
	for (i = 0; i < fn->n_attribute_protos && fn->attribute_protos; i++) {
		fputs("  attribute ", f);
		print_str(f, fn->attribute_protos[i].name);
		fputs(" = ", f);
		print_attr_value(f, &fn->attribute_protos[i]);
		fputc('\n', f);
	}
	st = print_opsets_metadata(f, fn->opsets, fn->n_opsets, fn->n_metadata, fn->metadata_keys,
				   fn->metadata_values, 1);
	if (st)
		return st;
	if (fn->body) {
		st = print_graph_scope(f, fn->body, 1);
		if (st)
			return st;
	}
	fputs("}\n", f);
	return TPF_OK;
}

enum tpf_status tpf_model_print_text(const struct tpf_model *m, FILE *f)
{
	enum tpf_status st;
	size_t i;

	if (!m || !f)
		return TPF_ERR_INVALID;
	fprintf(f, "ir_version %" PRId64 "\n", m->ir_version);
	if ((m->producer_name && m->producer_name[0]) ||
	    (m->producer_version && m->producer_version[0])) {
		fputs("producer ", f);
		print_str(f, m->producer_name);
		fputc(' ', f);
		print_str(f, m->producer_version);
		fputc('\n', f);
	}
	if (m->domain && m->domain[0]) {
		fputs("domain ", f);
		print_str(f, m->domain);
		fputc('\n', f);
	}
	if (m->model_version)
		fprintf(f, "model_version %" PRId64 "\n", m->model_version);
	st = print_opsets_metadata(f, m->opsets, m->n_opsets, m->n_metadata, m->metadata_keys,
				   m->metadata_values, 0);
	if (st)
		return st;
	if (m->n_training_info)
		fprintf(f, "# %zu training_info entries\n", m->n_training_info);
	if (m->n_configuration)
		fprintf(f, "# %zu device configurations\n", m->n_configuration);
	if (m->graph) {
		st = tpf_graph_print_text(m->graph, f);
		if (st)
			return st;
	}
	for (i = 0; i < m->n_functions && m->functions; i++) {
		st = print_function(f, &m->functions[i]);
		if (st)
			return st;
	}
	return ferror(f) ? TPF_ERR_IO : TPF_OK;
}
