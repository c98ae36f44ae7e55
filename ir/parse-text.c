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
 * together by MAX_ZERO_TOTAL (parse-types.c); every error is a TPF_ERR_PARSE with
 * "NAME:LINE:COL: " in front of the message (TPF_ERR_IO for an external
 * data file that cannot be read).  Names follow ONNX's rules: a graph
 * input, initializer or output, a function and an attribute need one.
 * External data locations follow the ONNX importer's: a relative path
 * inside the model's folder; read from a file, the data is read from
 * there (a missing file is an error), read from memory it is left out.
 */
#include "parse-text-private.h"
#include "graph-private.h"
#include "onnx-io-private.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dtype-private.h"
#include "onnx-io-private.h"

#define MAX_TEXT_FILE ((size_t)256 << 20)
#define MAX_DEPTH 64
#define MAX_NODE_ATTRS 4096
#define MAX_NODE_OUTPUTS 4096
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
			    text_describe_here(ps, buf, sizeof(buf)));
	ps->p++;
	if (peek(ps) == '?') {
		ps->p++;
		r->kind = 2;
		return text_parse_string(ps, a, &r->name, NULL);
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
	if (ir_node_capture(g->owner, pv)) {
		text_nomem(ps);
		return NULL;
	}
	ov = tpf_graph_new_value(g, pv->name);
	if (!ov) {
		text_nomem(ps);
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
		return text_nomem(ps);
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
		return text_nomem(ps);
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
			return text_nomem(ps);
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
		return text_nomem(ps);
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
		text_nomem(ps);
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
	if (text_expect(ps, ':', "':' after the input's number") || text_parse_type(ps, g->arena, &t))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (text_parse_string(ps, g->arena, &name, NULL) || free_name(ps, g, name, name_at))
		return -1;
	if (text_accept_word(ps, "default")) {
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
			return text_nomem(ps);
		if (text_parse_summary(ps, g->arena, tn))
			return -1;
		v = tpf_graph_add_initializer_tensor(g, tn);
		if (!v)
			return text_nomem(ps);
		struct tpf_value **slot = text_arena_push(g->arena, (void **)&g->inputs, &g->n_inputs,
						     &g->cap_inputs, sizeof(*g->inputs));
		if (!slot)
			return text_nomem(ps);
		*slot = v;
		v->is_graph_input = 1;
	} else {
		v = tpf_graph_add_input(g, name, TPF_DTYPE_UNDEFINED, -1, NULL);
		if (!v)
			return text_nomem(ps);
	}
	v->type = t;
	if (text_expect_line_end(ps))
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
	if (text_expect(ps, ':', "':' after the initializer's number") ||
	    text_parse_tensor_shape(ps, &dt, &rank, dims))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (text_parse_string(ps, g->arena, &name, NULL) || free_name(ps, g, name, name_at))
		return -1;
	struct tpf_tensor *t = tpf_tensor_create(g->arena, name, dt, rank, dims, NULL, 0);
	if (!t)
		return text_nomem(ps);
	if (text_parse_summary(ps, g->arena, t) || text_expect_line_end(ps))
		return -1;
	struct tpf_value *v = tpf_graph_add_initializer_tensor(g, t);
	if (!v)
		return text_nomem(ps);
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
	if (text_expect(ps, ':', "':' after the output's value") || text_parse_type(ps, g->arena, &t))
		return -1;
	skip_spaces(ps);
	name_at = ps->p;
	if (text_parse_string(ps, g->arena, &name, NULL) || text_expect_line_end(ps))
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
		return text_nomem(ps);
	return 0;
}

/* "NAME: graph "gname" {" or "NAME[i]: graph "gname" {" after a node line:
 * reads the block into the node's graph attribute.  0 when the line is
 * not a subgraph header (nothing consumed), 1 after a block, -1 on errors. */
static int parse_subgraph_block(struct parser *ps, struct scope *sc, struct tpf_node *n)
{
	struct line_state saved = text_save_line(ps);
	char buf[256];
	const char *name = buf;
	int64_t index = -1;
	const char *at;

	if (!text_next_line(ps)) {
		text_restore_line(ps, saved);
		return 0;
	}
	at = ps->p;
	if (*ps->p == '"') {
		/* a quoted attribute name (one the bare form cannot hold); no
		 * other line of a graph starts with '"' */
		if (text_parse_string(ps, sc->g->arena, &name, NULL))
			return -1;
		if (ps->p >= ps->end || (*ps->p != ':' && *ps->p != '['))
			return FAIL(ps, ps->p, "expected ': graph' after the quoted attribute name");
	} else {
		const char *s = ps->p;
		while (ps->p < ps->end && *ps->p != ':' && *ps->p != '[' && *ps->p != ' ' && *ps->p != '(')
			ps->p++;
		size_t len = (size_t)(ps->p - s);
		if (!len || len >= sizeof(buf) || ps->p >= ps->end || (*ps->p != ':' && *ps->p != '[')) {
			text_restore_line(ps, saved);
			return 0;
		}
		memcpy(buf, s, len);
		buf[len] = '\0';
	}
	if (*ps->p == '[') {
		ps->p++;
		if (text_parse_int64(ps, &index, "a graph index") || text_expect(ps, ']', "']'"))
			return -1;
	}
	if (peek(ps) != ':') {
		text_restore_line(ps, saved);
		return 0;
	}
	ps->p++;
	if (!text_accept_word(ps, "graph")) {
		text_restore_line(ps, saved);
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
		return text_nomem(ps);
	sub->owner = n;
	*slot = sub;
	if (text_parse_string(ps, sub->arena, &sub->name, NULL) || text_expect(ps, '{', "'{' after the graph name") ||
	    text_expect_line_end(ps))
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

/* A name in a node comment, [s, e): unquoted when the printer quoted it
 * (print_comment_name), else as it stands. */
static int comment_name(struct parser *ps, struct tpf_arena *a, const char *s, const char *e,
			const char **out)
{
	const char *bad;
	size_t n;

	if (e - s >= 2 && *s == '"' && text_scan_string(s + 1, e, NULL, &n, &bad) == e) {
		struct line_state saved = text_save_line(ps);
		int rc;

		ps->p = s;
		ps->end = e;
		rc = text_parse_string(ps, a, out, NULL);
		text_restore_line(ps, saved);
		return rc;
	}
	*out = tpf_arena_strndup(a, s, (size_t)(e - s));
	return *out ? 0 : text_nomem(ps);
}

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
				return text_nomem(ps);
			if (slash) {
				c->origin_pattern = tpf_arena_strndup(a, slash + 1, (size_t)(e - 1 - (slash + 1)));
				if (!c->origin_pattern)
					return text_nomem(ps);
			}
			name_end = o > s ? o - 1 : s;
		}
	}
	if (name_end - s >= 3 && memcmp(s, "-> ", 3) == 0) {
		if (comment_name(ps, a, s + 3, name_end, &c->out_name))
			return -1;
	} else if (comment_name(ps, a, s, name_end, &c->name)) {
		return -1;
	}
	ps->p = ps->end;
	return 0;
}

static int attr_name_cmp(const void *x, const void *y)
{
	const struct tpf_attr *a = x, *b = y;
	return strcmp(a->name, b->name);
}

/* What a node line says, before the node is made. */
struct node_line {
	struct ref *outs, *ins;
	size_t n_outs, cap_outs, n_ins, cap_ins;
	struct tpf_attr *attrs;
	size_t n_attrs, cap_attrs;
	struct tpf_type *types;
	size_t n_types, cap_types;
	const char *domain, *op_type, *overload;
	struct node_comment cm;
	const char *start; /* the line's first character */
	unsigned line;
};

/* The outputs: "%a, _, %b = " (none when the line starts with the op). */
static int parse_node_outputs(struct parser *ps, struct tpf_arena *a, struct node_line *nl)
{
	if (!(peek(ps) == '%' || (peek(ps) == '_' && ps->p + 1 < ps->end &&
				  (ps->p[1] == ',' || ps->p[1] == ' ' || ps->p[1] == '='))))
		return 0;
	for (;;) {
		struct ref *r = text_push_item(ps, a, (void **)&nl->outs, &nl->n_outs, &nl->cap_outs,
					       sizeof(*nl->outs));
		if (!r || parse_ref(ps, a, r))
			return -1;
		if (r->kind == 2)
			return FAIL(ps, r->at, "a node output needs a number (%%N)");
		if (nl->n_outs > MAX_NODE_OUTPUTS)
			return FAIL(ps, r->at, "more than %d outputs", MAX_NODE_OUTPUTS);
		if (text_accept(ps, '='))
			return 0;
		if (text_expect(ps, ',', "',' or '=' after a node output"))
			return -1;
	}
}

/* The op: [domain.]op_type[:overload] or op<"domain", "op_type"[,
 * "overload"]>, up to and with the '('. */
static int parse_node_op(struct parser *ps, struct tpf_arena *a, struct node_line *nl)
{
	char buf[40];

	skip_spaces(ps);
	if (ps->end - ps->p >= 4 && memcmp(ps->p, "op<\"", 4) == 0) {
		/* op<"domain", "op_type"[, "overload"]>: names the bare form
		 * cannot hold */
		const char *op_at;
		ps->p += 3;
		nl->overload = NULL;
		if (text_parse_string(ps, a, &nl->domain, NULL) || text_expect(ps, ',', "',' after the domain"))
			return -1;
		skip_spaces(ps);
		op_at = ps->p;
		if (text_parse_string(ps, a, &nl->op_type, NULL))
			return -1;
		if (text_accept(ps, ',') && text_parse_string(ps, a, &nl->overload, NULL))
			return -1;
		if (text_expect(ps, '>', "'>' after the op's names") || text_expect(ps, '(', "'(' after the op"))
			return -1;
		if (!*nl->op_type)
			return FAIL(ps, op_at, "a node needs an op type");
		return 0;
	}
	const char *op_end = ps->p;
	while (op_end < ps->end && *op_end != '(' && *op_end != ' ')
		op_end++;
	if (op_end >= ps->end || *op_end != '(' || op_end == ps->p)
		return FAIL(ps, ps->p, "expected a node ('%%N = Op(...)'), input, init or output line, found %s",
			    text_describe_here(ps, buf, sizeof(buf)));
	const char *colon = memchr(ps->p, ':', (size_t)(op_end - ps->p));
	const char *name_end = colon ? colon : op_end, *dot = NULL;
	for (const char *q = ps->p; q < name_end; q++)
		if (*q == '.')
			dot = q;
	const char *op_start = dot ? dot + 1 : ps->p;
	nl->domain = dot ? tpf_arena_strndup(a, ps->p, (size_t)(dot - ps->p)) : "";
	nl->op_type = tpf_arena_strndup(a, op_start, (size_t)(name_end - op_start));
	nl->overload = colon ? tpf_arena_strndup(a, colon + 1, (size_t)(op_end - colon - 1)) : NULL;
	if (!nl->domain || !nl->op_type || (colon && !nl->overload))
		return text_nomem(ps);
	if (!*nl->op_type || strcmp(nl->op_type, "?") == 0)
		return FAIL(ps, op_start, "a node needs an op type");
	ps->p = op_end + 1;
	return 0;
}

/* The attributes after the '{': "name=value, ...}". */
static int parse_node_attrs(struct parser *ps, struct tpf_arena *a, struct node_line *nl)
{
	int more;

	for (;;) {
		char buf[256];
		const char *an_at, *aname = buf;
		skip_spaces(ps);
		an_at = ps->p;
		if (peek(ps) == '"') {
			if (text_parse_string(ps, a, &aname, NULL))
				return -1;
		} else {
			if (text_read_token(ps, "=,}", buf, sizeof(buf), "an attribute name"))
				return -1;
			if (strcmp(aname, "?") == 0)
				return FAIL(ps, an_at, "an attribute needs a name");
		}
		if (!*aname)
			return FAIL(ps, an_at, "an attribute needs a name");
		if (nl->n_attrs >= MAX_NODE_ATTRS)
			return FAIL(ps, an_at, "more than %d attributes", MAX_NODE_ATTRS);
		for (size_t i = 0; i < nl->n_attrs; i++)
			if (strcmp(nl->attrs[i].name, aname) == 0)
				return FAIL(ps, an_at, "attribute '%s' is given twice", aname);
		struct tpf_attr *at = text_arena_push(a, (void **)&nl->attrs, &nl->n_attrs, &nl->cap_attrs,
						      sizeof(*nl->attrs));
		if (!at || !(at->name = tpf_arena_strdup(a, aname)))
			return text_nomem(ps);
		if (text_expect(ps, '=', "'=' after the attribute name") ||
		    text_parse_attr_value(ps, a, at, 1))
			return -1;
		if ((more = text_list_next(ps, '}', "',' or '}' between attributes")) <= 0)
			return more;
	}
}

/* The whole node line: outputs, op, inputs, attributes, types, comment. */
static int parse_node_line(struct parser *ps, struct tpf_arena *a, struct node_line *nl)
{
	char buf[40];
	int more = 0;

	if (parse_node_outputs(ps, a, nl) || parse_node_op(ps, a, nl))
		return -1;
	if (!text_accept(ps, ')')) {
		for (;;) {
			struct ref *r = text_push_item(ps, a, (void **)&nl->ins, &nl->n_ins, &nl->cap_ins,
						       sizeof(*nl->ins));
			if (!r || parse_ref(ps, a, r))
				return -1;
			if ((more = text_list_next(ps, ')', "',' or ')' after a node input")) <= 0)
				break;
		}
		if (more < 0)
			return -1;
	}
	if (text_accept(ps, '{') && parse_node_attrs(ps, a, nl))
		return -1;
	if (text_accept(ps, ':')) {
		int paren = text_accept(ps, '(');
		for (;;) {
			struct tpf_type *t = text_push_item(ps, a, (void **)&nl->types, &nl->n_types,
							    &nl->cap_types, sizeof(*nl->types));
			if (!t || text_parse_type(ps, a, t))
				return -1;
			if (!paren || text_accept(ps, ')'))
				break;
			if (text_expect(ps, ',', "',' or ')' between the output types"))
				return -1;
		}
	}
	skip_spaces(ps);
	if (peek(ps) == '#')
		return parse_node_comment(ps, a, &nl->cm);
	if (!at_end(ps))
		return FAIL(ps, ps->p, "unexpected %s after the node", text_describe_here(ps, buf, sizeof(buf)));
	return 0;
}

/* The output types match the outputs, and the name the comment gives
 * ("-> NAME") is free. */
static int check_node_outputs(struct parser *ps, struct tpf_graph *g, const struct node_line *nl)
{
	size_t n_real = 0;

	for (size_t i = 0; i < nl->n_outs; i++)
		n_real += nl->outs[i].kind == 1;
	if (nl->n_types && nl->n_types != n_real)
		return FAIL(ps, nl->start, "%zu output types for %zu outputs", nl->n_types, n_real);
	if (nl->cm.out_name && !n_real)
		return FAIL(ps, nl->start, "the comment names an output ('-> %s'), the node has none",
			    nl->cm.out_name);
	if (nl->cm.out_name && free_name(ps, g, nl->cm.out_name, nl->start))
		return -1;
	return 0;
}

/* The names of the node's outputs (out_names[i]; "" for a left-out one):
 * the comment's "-> NAME" for the first, the others named after their
 * labels.  *named is the output the comment names (n_outs: none). */
static int name_node_outputs(struct parser *ps, struct tpf_graph *g, const struct node_line *nl,
			     const char **out_names, size_t *named)
{
	const struct ref *outs = nl->outs;
	size_t n_outs = nl->n_outs;

	*named = n_outs;
	for (size_t i = 0; i < n_outs; i++) {
		if (outs[i].kind == 0) {
			out_names[i] = "";
			continue;
		}
		for (size_t j = 0; j < i; j++)
			if (outs[j].kind == 1 && outs[j].label == outs[i].label)
				return FAIL(ps, outs[i].at, "%%%" PRIu64 " is defined twice", outs[i].label);
		if (nl->cm.out_name && *named == n_outs) {
			out_names[i] = nl->cm.out_name;
			*named = i;
		} else if (!(out_names[i] = label_name(ps, g, outs[i].label))) {
			return -1;
		}
	}
	for (size_t i = 0; i < n_outs; i++)
		for (size_t j = 0; j < i && *out_names[i]; j++)
			if (strcmp(out_names[i], out_names[j]) == 0)
				return FAIL(ps, outs[i].at, "two outputs of the node are named \"%s\"",
					    out_names[i]);
	return 0;
}

/* Inputs that name a label not defined yet wait in the scope's fixups. */
static int defer_inputs(struct parser *ps, struct scope *sc, const struct node_line *nl,
			struct tpf_node *n, struct tpf_value **in_vals)
{
	for (size_t i = 0; i < nl->n_ins; i++) {
		if (nl->ins[i].kind != 1 || in_vals[i])
			continue;
		struct fixup *f = text_arena_push(sc->g->arena, (void **)&sc->fixups, &sc->n_fixups,
						  &sc->cap_fixups, sizeof(*sc->fixups));
		if (!f)
			return text_nomem(ps);
		f->node = n;
		f->index = i;
		f->label = nl->ins[i].label;
		f->line = nl->line;
		f->col = col_of(ps, nl->ins[i].at);
	}
	return 0;
}

/* The subgraph blocks after the node, one for each graph attribute. */
static int parse_node_blocks(struct parser *ps, struct scope *sc, const struct node_line *nl,
			     struct tpf_node *n)
{
	for (;;) {
		int r = parse_subgraph_block(ps, sc, n);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
	}
	for (size_t i = 0; i < n->n_attrs; i++) {
		const struct tpf_attr *at = &n->attrs[i];
		int missing = at->kind == TPF_ATTR_GRAPH && !at->g;
		for (size_t k = 0; at->kind == TPF_ATTR_GRAPHS && k < at->n; k++)
			missing |= !at->graphs[k];
		if (missing)
			return text_fail_at_line(ps, nl->line, 1,
						 "graph attribute '%s' has no block after the node", at->name);
	}
	return 0;
}

/* A node line and the subgraph blocks after it. */
static int parse_node(struct parser *ps, struct scope *sc)
{
	struct tpf_graph *g = sc->g;
	struct node_line nl = {.start = ps->p, .line = ps->line_no};
	const char **out_names = NULL;
	struct tpf_value **in_vals = NULL;
	size_t named = 0;
	int rc = -1;

	if (parse_node_line(ps, g->arena, &nl) || check_node_outputs(ps, g, &nl))
		return -1;
	out_names = tpf_calloc(nl.n_outs ? nl.n_outs : 1, sizeof(*out_names));
	in_vals = tpf_calloc(nl.n_ins ? nl.n_ins : 1, sizeof(*in_vals));
	if (!out_names || !in_vals) {
		text_nomem(ps);
		goto out;
	}
	if (name_node_outputs(ps, g, &nl, out_names, &named))
		goto out;
	for (size_t i = 0; i < nl.n_ins; i++)
		if (resolve_ref(ps, sc, &nl.ins[i], &in_vals[i]))
			goto out;
	struct tpf_node *n = tpf_graph_add_node(g, nl.domain, nl.op_type, nl.cm.name ? nl.cm.name : "",
						in_vals, nl.n_ins, nl.n_outs, out_names);
	if (!n) {
		text_nomem(ps);
		goto out;
	}
	if (defer_inputs(ps, sc, &nl, n, in_vals))
		goto out;
	n->overload = nl.overload;
	n->origin_pass = nl.cm.origin_pass;
	n->origin_pattern = nl.cm.origin_pattern;
	if (nl.n_attrs) {
		qsort(nl.attrs, nl.n_attrs, sizeof(*nl.attrs), attr_name_cmp);
		n->attrs = nl.attrs;
		n->n_attrs = nl.n_attrs;
	}
	for (size_t i = 0, k = 0; i < nl.n_outs; i++) {
		struct tpf_value *v = n->outputs[i];
		if (!v)
			continue;
		if (nl.n_types)
			v->type = nl.types[k++];
		if (i != named)
			v->mark = LABEL_ONLY_MARK;
		if (define_label(ps, sc, &nl.outs[i], v))
			goto out;
	}
	rc = parse_node_blocks(ps, sc, &nl, n);
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
			return text_fail_at_line(ps, f->line, f->col, "value %%%" PRIu64 " is not defined",
					    f->label);
		if (tpf_node_set_input(f->node, f->index, e->value))
			return text_nomem(ps);
	}
	if (sc->n_fixups && tpf_graph_toposort(sc->g, NULL) == TPF_ERR_NOMEM)
		return text_nomem(ps);
	return 0;
}

/* Appends a key/value pair to two parallel arena arrays. */
static int push_pair(struct parser *ps, struct tpf_arena *a, const char ***keys, const char ***vals,
		     size_t *n, size_t *cap_keys, size_t *cap_vals, const char *k, const char *v)
{
	size_t nk = *n, nv = *n;
	const char **ks = text_arena_push(a, (void **)keys, &nk, cap_keys, sizeof(**keys));
	if (!ks)
		return text_nomem(ps);
	const char **vs = text_arena_push(a, (void **)vals, &nv, cap_vals, sizeof(**vals));
	if (!vs)
		return text_nomem(ps);
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
	if (text_accept_word(ps, "attribute")) {
		const char *name;
		skip_spaces(ps);
		const char *name_at = ps->p;
		if (text_parse_string(ps, a, &name, NULL))
			return -1;
		if (!*name)
			return FAIL(ps, name_at, "a function attribute needs a name");
		if (text_accept(ps, '=')) {
			struct tpf_attr *at = text_arena_push(a, (void **)&fn->attribute_protos,
							 &fn->n_attribute_protos, &fl->cap_protos, sizeof(*at));
			if (!at)
				return text_nomem(ps);
			at->name = name;
			if (text_parse_attr_value(ps, a, at, 0))
				return -1;
		} else {
			const char **slot = text_arena_push(a, (void **)&fn->attribute_names, &fn->n_attribute_names,
						       &fl->cap_names, sizeof(*slot));
			if (!slot)
				return text_nomem(ps);
			*slot = name;
		}
		return text_expect_line_end(ps);
	}
	if (text_accept_word(ps, "opset")) {
		struct tpf_opset *o = text_arena_push(a, (void **)&fn->opsets, &fn->n_opsets, &fl->cap_opsets,
						 sizeof(*o));
		if (!o)
			return text_nomem(ps);
		if (text_parse_string(ps, a, &o->domain, NULL) || text_parse_int64(ps, &o->version, "an opset version"))
			return -1;
		return text_expect_line_end(ps);
	}
	if (text_accept_word(ps, "metadata")) {
		const char *k, *v;
		if (text_parse_string(ps, a, &k, NULL) || text_parse_string(ps, a, &v, NULL) ||
		    push_pair(ps, a, &fn->metadata_keys, &fn->metadata_values, &fn->n_metadata, &fl->cap_keys,
			      &fl->cap_values, k, v))
			return -1;
		return text_expect_line_end(ps);
	}
	*handled = 0;
	return 0;
}

/* Lines of a graph (or function) body up to its closing '}'. */
static int parse_graph_body(struct parser *ps, struct scope *sc, struct function_lists *fl)
{
	unsigned open_line = ps->line_no;

	for (;;) {
		if (!text_next_line(ps))
			return text_fail_at_line(ps, ps->line_no, 1, "missing '}' for the graph opened on line %u",
					    open_line);
		if (*ps->p == '}') {
			ps->p++;
			if (text_expect_line_end(ps))
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
		if (text_accept_word(ps, "input") && peek(ps) == ' ')
			rc = parse_input(ps, sc);
		else if (text_accept_word(ps, "init") && peek(ps) == ' ')
			rc = fl ? FAIL(ps, ps->line, "a function has no initializers (an ONNX function holds its "
				       "constants as Constant nodes)")
				: parse_init(ps, sc);
		else if (text_accept_word(ps, "output") && peek(ps) == ' ')
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
	struct tpf_function *fn = text_arena_push(m->arena, (void **)&m->functions, &m->n_functions,
					     cap_functions, sizeof(*fn));
	if (!fn)
		return text_nomem(ps);
	fn->body = tpf_graph_create(NULL);
	if (!fn->body)
		return text_nomem(ps);
	skip_spaces(ps);
	const char *fn_at = ps->p;
	if (text_parse_string(ps, m->arena, &fn->domain, NULL) || text_parse_string(ps, m->arena, &fn->name, NULL))
		return -1;
	if (!*fn->name)
		return FAIL(ps, fn_at, "a function needs a name");
	if (text_accept_word(ps, "overload") && text_parse_string(ps, m->arena, &fn->overload, NULL))
		return -1;
	if (text_expect(ps, '{', "'{' after the function name") || text_expect_line_end(ps))
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

	while (text_next_line(ps)) {
		if (text_accept_word(ps, "ir_version")) {
			if (text_parse_int64(ps, &m->ir_version, "an IR version"))
				return -1;
		} else if (text_accept_word(ps, "producer")) {
			if (text_parse_string(ps, a, &m->producer_name, NULL) ||
			    text_parse_string(ps, a, &m->producer_version, NULL))
				return -1;
		} else if (text_accept_word(ps, "domain")) {
			if (text_parse_string(ps, a, &m->domain, NULL))
				return -1;
		} else if (text_accept_word(ps, "model_version")) {
			if (text_parse_int64(ps, &m->model_version, "a model version"))
				return -1;
		} else if (text_accept_word(ps, "opset")) {
			struct tpf_opset *o = text_arena_push(a, (void **)&m->opsets, &m->n_opsets, &cap_opsets,
							 sizeof(*o));
			if (!o)
				return text_nomem(ps);
			if (text_parse_string(ps, a, &o->domain, NULL) ||
			    text_parse_int64(ps, &o->version, "an opset version"))
				return -1;
		} else if (text_accept_word(ps, "metadata")) {
			const char *k, *v;
			if (text_parse_string(ps, a, &k, NULL) || text_parse_string(ps, a, &v, NULL) ||
			    push_pair(ps, a, &m->metadata_keys, &m->metadata_values, &m->n_metadata, &cap_keys,
				      &cap_values, k, v))
				return -1;
		} else if (text_accept_word(ps, "graph")) {
			const char *at = ps->line;
			if (have_graph)
				return FAIL(ps, at, "a second graph (a model has one; subgraphs follow their node)");
			have_graph = 1;
			if (text_parse_string(ps, m->graph->arena, &m->graph->name, NULL) ||
			    text_expect(ps, '{', "'{' after the graph name") || text_expect_line_end(ps))
				return -1;
			struct scope sc = {.g = m->graph};
			int rc = parse_graph_body(ps, &sc, NULL);
			scope_free(&sc);
			if (rc)
				return -1;
			continue;
		} else if (text_accept_word(ps, "function")) {
			if (parse_function(ps, &cap_functions))
				return -1;
			continue;
		} else {
			return FAIL(ps, ps->p,
				    "expected ir_version, producer, domain, model_version, opset, metadata, "
				    "graph or function, found %s",
				    text_describe_here(ps, buf, sizeof(buf)));
		}
		if (text_expect_line_end(ps))
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
