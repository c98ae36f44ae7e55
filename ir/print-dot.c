/*
 * Graphviz DOT dump of a model.
 *
 * Nodes are boxes labelled with the op (domain prefix for non-ONNX ops) and
 * the node name; graph inputs and outputs are ellipses.  Initializers are not
 * drawn as vertices (a large model has thousands): each node lists the
 * initializers it reads in its label (up to MAX_INIT_LINES), and one note per
 * graph gives their count.  Edges carry the value's type.  Nodes created by a
 * pass (origin_pass set) are filled with a colour chosen from the pass name
 * and labelled "[pass/pattern]".  Subgraphs and function bodies are clusters.
 *
 * Vertex ids are built from a graph's position in the traversal and a node's
 * creation id, so the same model always prints the same bytes.
 */
#include <inttypes.h>
#include <string.h>

#include "tpf-ir.h"

#define MAX_INIT_LINES 4

struct dot_printer {
	FILE *f;
	const struct tpf_graph **graphs; /* traversal order gives each graph its index */
	size_t n_graphs, cap_graphs;
	int nomem;
};

static void dot_graph_register(struct dot_printer *p, const struct tpf_graph *g)
{
	if (p->n_graphs == p->cap_graphs) {
		size_t cap = p->cap_graphs ? p->cap_graphs * 2 : 16, bytes;
		const struct tpf_graph **ng;

		if (tpf_mul_size(cap, sizeof(*ng), &bytes)) {
			p->nomem = 1;
			return;
		}
		ng = tpf_realloc(p->graphs, bytes);
		if (!ng) {
			p->nomem = 1;
			return;
		}
		p->graphs = ng;
		p->cap_graphs = cap;
	}
	p->graphs[p->n_graphs++] = g;
}

static long dot_graph_index(const struct dot_printer *p, const struct tpf_graph *g)
{
	size_t i;

	for (i = 0; i < p->n_graphs; i++)
		if (p->graphs[i] == g)
			return (long)i;
	return -1;
}

/* Length of a valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	size_t len, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (len > n)
		return 0;
	for (i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

/* Writes s for use inside a double-quoted DOT string. */
static void dot_escape(FILE *f, const char *s)
{
	const unsigned char *u = (const unsigned char *)(s ? s : "");
	size_t n = strlen((const char *)u), i = 0;

	while (i < n) {
		unsigned char c = u[i];
		size_t len;

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
			i++;
		} else if (c == '\n') {
			fputs("\\n", f);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			fputc(' ', f);
			i++;
		} else if ((len = utf8_len(u + i, n - i)) != 0) {
			fwrite(u + i, 1, len, f);
			i += len;
		} else {
			fputc('?', f);
			i++;
		}
	}
}

static void dot_type(FILE *f, const struct tpf_type *t)
{
	int i;

	if (!t || t->kind == TPF_TYPE_NONE) {
		fputc('?', f);
		return;
	}
	if (t->kind == TPF_TYPE_OPAQUE) {
		fputs("opaque", f);
		return;
	}
	fputs(t->dtype == TPF_DTYPE_UNDEFINED ? "?" : tpf_dtype_name(t->dtype), f);
	if (t->shape.rank < 0 || (t->shape.rank > 0 && !t->shape.dims)) {
		fputs("[*]", f);
		return;
	}
	fputc('[', f);
	for (i = 0; i < t->shape.rank; i++) {
		const struct tpf_dim *d = &t->shape.dims[i];

		if (i)
			fputc(',', f);
		if (d->param)
			dot_escape(f, d->param);
		else if (d->value >= 0)
			fprintf(f, "%" PRId64, d->value);
		else
			fputc('?', f);
	}
	fputc(']', f);
}

static void dot_tensor_type(FILE *f, const struct tpf_tensor *t)
{
	int i;

	fputs(tpf_dtype_name(t->dtype), f);
	fputc('[', f);
	for (i = 0; i < t->rank && t->dims; i++) {
		if (i)
			fputc(',', f);
		fprintf(f, "%" PRId64, t->dims[i]);
	}
	fputc(']', f);
}

/* A soft fill colour picked from the pass name (FNV-1a), stable across runs. */
static const char *pass_colour(const char *pass)
{
	static const char *const palette[] = {
		"#ffd8a8", "#b2f2bb", "#a5d8ff", "#eebefa", "#ffec99",
		"#99e9f2", "#ffc9c9", "#d0bfff", "#c3fae8", "#fcc2d7",
	};
	uint32_t h = 2166136261u;

	for (; *pass; pass++)
		h = (h ^ (unsigned char)*pass) * 16777619u;
	return palette[h % (sizeof(palette) / sizeof(palette[0]))];
}

static int value_is_plain_initializer(const struct tpf_value *v)
{
	return v->kind == TPF_VALUE_INITIALIZER && !v->is_graph_input;
}

/* Prints the DOT id of the vertex that defines v (following captures to
 * the enclosing graph) and returns the defining value, or returns NULL
 * without printing when v has no vertex (initializer, unknown value). */
static const struct tpf_value *dot_source(struct dot_printer *p, const struct tpf_value *v,
					  int *outer)
{
	int hops = 0;
	long gi;

	*outer = 0;
	while (v->kind == TPF_VALUE_OUTER && v->outer && hops++ < 64) {
		v = v->outer;
		*outer = 1;
	}
	if (value_is_plain_initializer(v))
		return NULL;
	gi = dot_graph_index(p, v->graph);
	if (gi < 0)
		return NULL;
	if (v->producer && !v->producer->erased)
		fprintf(p->f, "g%ld_n%" PRIu32, gi, v->producer->id);
	else if (v->is_graph_input)
		fprintf(p->f, "g%ld_v%" PRIu32, gi, v->id);
	else
		return NULL;
	return v;
}

/* Whether v is captured from an enclosing graph (and drawn from there). */
static int is_capture(const struct tpf_value *v)
{
	int hops = 0;

	while (v->kind == TPF_VALUE_OUTER && v->outer && hops++ < 64)
		v = v->outer;
	return hops > 0 && !value_is_plain_initializer(v);
}

static void dot_node_label(FILE *f, const struct tpf_node *n)
{
	size_t i, shown = 0, inits = 0;
	int hops;

	if (n->domain && n->domain[0] && strcmp(n->domain, "ai.onnx") != 0) {
		dot_escape(f, n->domain);
		fputc('.', f);
	}
	dot_escape(f, n->op_type && n->op_type[0] ? n->op_type : "?");
	if (n->name && n->name[0]) {
		fputs("\\n", f);
		dot_escape(f, n->name);
	}
	for (i = 0; i < n->n_inputs; i++) {
		const struct tpf_value *v = n->inputs[i];

		for (hops = 0; v && v->kind == TPF_VALUE_OUTER && v->outer && hops < 64; hops++)
			v = v->outer;
		if (!v || !value_is_plain_initializer(v))
			continue;
		inits++;
		if (shown >= MAX_INIT_LINES)
			continue;
		shown++;
		fputs("\\n", f);
		dot_escape(f, v->name);
		fputs(": ", f);
		if (v->init)
			dot_tensor_type(f, v->init);
		else
			dot_type(f, &v->type);
	}
	if (inits > shown)
		fprintf(f, "\\n+%zu more initializers", inits - shown);
	if (n->origin_pass) {
		fputs("\\n[", f);
		dot_escape(f, n->origin_pass);
		if (n->origin_pattern) {
			fputc('/', f);
			dot_escape(f, n->origin_pattern);
		}
		fputc(']', f);
	}
}

static void dot_graph(struct dot_printer *p, const struct tpf_graph *g, int depth);

static void dot_subgraphs(struct dot_printer *p, const struct tpf_node *n, int depth)
{
	size_t i, k;

	for (k = 0; k < n->n_attrs; k++) {
		const struct tpf_attr *a = &n->attrs[k];

		if (a->kind == TPF_ATTR_GRAPH && a->g) {
			dot_graph_register(p, a->g);
			fprintf(p->f, "subgraph cluster_g%zu {\nlabel=\"", p->n_graphs - 1);
			dot_escape(p->f, n->name && n->name[0] ? n->name : n->op_type);
			fputc('.', p->f);
			dot_escape(p->f, a->name);
			fputs("\";\nstyle=dashed;\n", p->f);
			dot_graph(p, a->g, depth + 1);
			fputs("}\n", p->f);
		} else if (a->kind == TPF_ATTR_GRAPHS && a->graphs) {
			for (i = 0; i < a->n; i++) {
				if (!a->graphs[i])
					continue;
				dot_graph_register(p, a->graphs[i]);
				fprintf(p->f, "subgraph cluster_g%zu {\nlabel=\"", p->n_graphs - 1);
				dot_escape(p->f, n->name && n->name[0] ? n->name : n->op_type);
				fputc('.', p->f);
				dot_escape(p->f, a->name);
				fprintf(p->f, "[%zu]\";\nstyle=dashed;\n", i);
				dot_graph(p, a->graphs[i], depth + 1);
				fputs("}\n", p->f);
			}
		}
	}
}

/* Emits the vertices and edges of g; g must be registered already. */
static void dot_graph(struct dot_printer *p, const struct tpf_graph *g, int depth)
{
	FILE *f = p->f;
	long gi = dot_graph_index(p, g);
	const struct tpf_node *n;
	size_t i, n_plain_inits = 0;
	int outer;

	if (depth > 64 || gi < 0)
		return;
	for (i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];

		if (!v)
			continue;
		fprintf(f, "g%ld_v%" PRIu32 " [shape=ellipse, label=\"", gi, v->id);
		dot_escape(f, v->name);
		fputs("\\n", f);
		dot_type(f, &v->type);
		fputs("\"];\n", f);
	}
	for (i = 0; i < g->n_initializers; i++)
		if (g->initializers[i] && !g->initializers[i]->is_graph_input)
			n_plain_inits++;
	if (n_plain_inits)
		fprintf(f, "g%ld_inits [shape=note, fontsize=8, label=\"%zu initializer%s\"];\n", gi,
			n_plain_inits, n_plain_inits == 1 ? "" : "s");

	for (n = g->first; n; n = n->next) {
		if (n->erased)
			continue;
		fprintf(f, "g%ld_n%" PRIu32 " [label=\"", gi, n->id);
		dot_node_label(f, n);
		fputc('"', f);
		if (n->origin_pass)
			fprintf(f, ", style=\"rounded,filled\", fillcolor=\"%s\"",
				pass_colour(n->origin_pass));
		fputs("];\n", f);
	}
	/* Edges from captured values are drawn at the top level (by
	 * dot_capture_edges): an edge statement inside a cluster would pull
	 * the outer vertex into it. */
	for (n = g->first; n; n = n->next) {
		if (n->erased)
			continue;
		for (i = 0; i < n->n_inputs; i++) {
			const struct tpf_value *v = n->inputs[i];

			/* dot_source prints nothing when it fails */
			if (!v || is_capture(v) || !(v = dot_source(p, v, &outer)))
				continue;
			fprintf(f, " -> g%ld_n%" PRIu32 " [label=\"", gi, n->id);
			dot_type(f, &v->type);
			fputs("\"];\n", f);
		}
	}
	for (i = 0; i < g->n_outputs; i++) {
		const struct tpf_value *v = g->outputs[i];

		if (!v)
			continue;
		fprintf(f, "g%ld_out%zu [shape=ellipse, style=bold, label=\"", gi, i);
		dot_escape(f, v->name);
		fputs("\"];\n", f);
		if (is_capture(v) || !(v = dot_source(p, v, &outer)))
			continue;
		fprintf(f, " -> g%ld_out%zu [label=\"", gi, i);
		dot_type(f, &v->type);
		fputs("\"];\n", f);
	}
	for (n = g->first; n; n = n->next)
		if (!n->erased && n->n_attrs)
			dot_subgraphs(p, n, depth);
}

/* Dashed edges from captured outer values into subgraph nodes and outputs,
 * for every registered graph. */
static void dot_capture_edges(struct dot_printer *p)
{
	const struct tpf_value *v, *src;
	const struct tpf_node *n;
	size_t gi, i;
	int outer;

	for (gi = 0; gi < p->n_graphs; gi++) {
		const struct tpf_graph *g = p->graphs[gi];

		for (n = g->first; n; n = n->next) {
			if (n->erased)
				continue;
			for (i = 0; i < n->n_inputs; i++) {
				v = n->inputs[i];
				if (!v || !is_capture(v) || !(src = dot_source(p, v, &outer)))
					continue;
				fprintf(p->f, " -> g%zu_n%" PRIu32 " [style=dashed, label=\"", gi,
					n->id);
				dot_type(p->f, &src->type);
				fputs("\"];\n", p->f);
			}
		}
		for (i = 0; i < g->n_outputs; i++) {
			v = g->outputs[i];
			if (!v || !is_capture(v) || !(src = dot_source(p, v, &outer)))
				continue;
			fprintf(p->f, " -> g%zu_out%zu [style=dashed, label=\"", gi, i);
			dot_type(p->f, &src->type);
			fputs("\"];\n", p->f);
		}
	}
}

enum tpf_status tpf_model_print_dot(const struct tpf_model *m, FILE *f)
{
	struct dot_printer p = {.f = f};
	enum tpf_status st = TPF_OK;
	size_t i;

	if (!m || !f)
		return TPF_ERR_INVALID;
	fputs("digraph \"", f);
	dot_escape(f, m->graph && m->graph->name && m->graph->name[0] ? m->graph->name : "model");
	fputs("\" {\n", f);
	fputs("graph [fontname=\"Helvetica\", fontsize=10];\n", f);
	fputs("node [shape=box, style=rounded, fontname=\"Helvetica\", fontsize=10];\n", f);
	fputs("edge [fontname=\"Helvetica\", fontsize=8];\n", f);
	if (m->graph) {
		dot_graph_register(&p, m->graph);
		if (!p.nomem)
			dot_graph(&p, m->graph, 0);
	}
	for (i = 0; i < m->n_functions && m->functions && !p.nomem; i++) {
		const struct tpf_function *fn = &m->functions[i];

		if (!fn->body)
			continue;
		dot_graph_register(&p, fn->body);
		if (p.nomem)
			break;
		fprintf(f, "subgraph cluster_g%zu {\nlabel=\"function ", p.n_graphs - 1);
		if (fn->domain && fn->domain[0]) {
			dot_escape(f, fn->domain);
			fputc('.', f);
		}
		dot_escape(f, fn->name);
		fputs("\";\n", f);
		dot_graph(&p, fn->body, 1);
		fputs("}\n", f);
	}
	if (!p.nomem)
		dot_capture_edges(&p);
	fputs("}\n", f);
	tpf_free(p.graphs);
	if (p.nomem)
		st = TPF_ERR_NOMEM;
	else if (ferror(f))
		st = TPF_ERR_IO;
	return st;
}
