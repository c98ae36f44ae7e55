/* SPDX-License-Identifier: MIT */
/*
 * Sharding propagation: one forward pass over the graph that gives every
 * value a sharding from those of its producer's inputs, with a rule per op.
 *
 *   R            replicated: every rank holds the whole tensor
 *   S(a, sect)   split: rank r holds block r of W equal blocks along axis a
 *                (with sections: block r of each section, concatenated)
 *   P            partial: the tensor is the sum of what the ranks hold
 *
 * A rule reads its operands' shardings and the facts of the original graph
 * (concrete dims, elements of shape tensors) and says what it produces and
 * which shardings it needs on its operands.  Where an operand is not what
 * the rule needs, the difference is a conversion: P -> R is an AllReduce,
 * S -> R an AllGather, R -> S a local Slice (a sliced initializer when the
 * value is a constant).  A gather is what a split must avoid: the driver
 * (shard.c) keeps a column split only if it adds none, except the ones it
 * asks for (a norm over a split axis, which becomes the sharded norm form;
 * an LM head's logits).
 *
 * Shape tensors need care: Shape of a split tensor gives its local dims, so
 * the elements computed from it are what the rank graph needs, while a
 * literal head count written into a Reshape target is not.  The rules
 * estimate the rank graph's elements (sh_local_vals) and ask for the literal
 * ones to be rewritten (sh_elem_edit); an element neither right nor
 * literal makes the op need its operand whole.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "rules.h"


const struct sh_fact *sh_full(const struct shard *s, const struct tpf_value *v)
{
	return sh_eval_fact(&s->ev, v);
}

/* Room for one more entry in the array *arrp (any element pointer) of n
 * used and *cap allocated entries of `size` bytes; the first allocation
 * holds `first`.  0, or -1 when out of memory (the array stays). */
int sh_reserve(void *arrp, size_t n, size_t *cap, size_t size, size_t first)
{
	void *arr, *grown;
	size_t nc;

	if (n < *cap)
		return 0;
	nc = *cap ? 2 * *cap : first;
	memcpy(&arr, arrp, sizeof(arr));
	grown = tpf_realloc(arr, nc * size);
	if (!grown)
		return -1;
	memcpy(arrp, &grown, sizeof(grown));
	*cap = nc;
	return 0;
}

int sh_sect_intern(struct shard *s, const struct sh_sections *sec)
{
	if (sec->n <= 1)
		return 0;
	for (size_t i = 1; i < s->n_sects; i++)
		if (s->sects[i].n == sec->n &&
		    !memcmp(s->sects[i].size, sec->size, (size_t)sec->n * sizeof(int64_t)))
			return (int)i;
	if (sh_reserve(&s->sects, s->n_sects, &s->cap_sects, sizeof(*s->sects), 8))
		return -1;
	if (!s->n_sects)
		s->n_sects = 1; /* entry 0: unsectioned */
	if (s->n_sects >= 65535)
		return -1;
	s->sects[s->n_sects] = *sec;
	return (int)s->n_sects++;
}

const struct sh_sections *sh_sect(const struct shard *s, int idx)
{
	return idx > 0 && (size_t)idx < s->n_sects ? &s->sects[idx] : NULL;
}

const char *sh_node_name(const struct tpf_node *n, char *buf, size_t size)
{
	snprintf(buf, size, "%s '%s'", n->op_type ? n->op_type : "?",
		 n->name && *n->name ? n->name
				     : (n->n_outputs && n->outputs[0] ? n->outputs[0]->name : ""));
	return buf;
}

const char *sh_str(const struct shard *s, struct sh x, char *buf, size_t size)
{
	switch (x.kind) {
	case SH_R:
		snprintf(buf, size, "replicated");
		break;
	case SH_P:
		snprintf(buf, size, "partial sums");
		break;
	case SH_S:
		{
		const struct sh_sections *sec = sh_sect(s, x.sect);
		int k = x.outer > 1 ? snprintf(buf, size, "split on axis %d within rows of %" PRId64,
					       x.axis, x.outer)
				    : snprintf(buf, size, "split on axis %d", x.axis);
		if (sec && k > 0 && (size_t)k < size) {
			k += snprintf(buf + k, size - (size_t)k, " by sections [");
			for (int i = 0; i < sec->n && k > 0 && (size_t)k < size; i++)
				k += snprintf(buf + k, size - (size_t)k, "%s%" PRId64, i ? ", " : "",
					      sec->size[i]);
			if (k > 0 && (size_t)k < size)
				snprintf(buf + k, size - (size_t)k, "]");
		}
		break;
	}
	default:
		snprintf(buf, size, "unknown");
	}
	return buf;
}

/* ------------------------------------------------------------------ dispatch */

/* Rules that do not take a split within rows (an S with an outer factor). */
static int whole_rows_only(enum tpf_shard_rule rule)
{
	return rule == TPF_SHARD_RULE_EXPAND || rule == TPF_SHARD_RULE_GEMM ||
	       rule == TPF_SHARD_RULE_CONV || rule == TPF_SHARD_RULE_SCATTER_ND ||
	       rule == TPF_SHARD_RULE_ELEMENTS || rule == TPF_SHARD_RULE_PAD;
}

/* Rules that may split a replicated operand: the shape ops whose literal
 * sizes follow a split, and a MatMul or Gemm the driver splits. */
static int may_split_whole(const struct nctx *c, enum tpf_shard_rule rule)
{
	if (rule == TPF_SHARD_RULE_RESHAPE || rule == TPF_SHARD_RULE_EXPAND ||
	    rule == TPF_SHARD_RULE_CONSTANT_OF_SHAPE || sh_is_embedding(c))
		return 1;
	return (rule == TPF_SHARD_RULE_MATMUL || rule == TPF_SHARD_RULE_GEMM) &&
	       c->s->decision[c->n->id] >= DEC_COLUMN;
}

/* CumSum along another axis than the split one passes it. */
static void rule_cumsum(struct nctx *c, int r0)
{
	const struct sh_fact *fa = c->ni > 1 ? full(c, c->n->inputs[1]) : NULL;
	int ax = -1;

	if (fa && fa->nvals == 1 && r0 > 0)
		ax = (int)(fa->vals[0] < 0 ? fa->vals[0] + r0 : fa->vals[0]);
	if (c->in[0].kind == SH_S && c->in[0].axis != ax && ax >= 0) {
		c->out[0] = c->raw[0] = c->in[0];
		return;
	}
	sh_rule_default(c);
}

/* Trilu works on the last two axes: a split before them passes. */
static void rule_trilu(struct nctx *c, int r0)
{
	if (c->in[0].kind == SH_S && r0 >= 2 && c->in[0].axis < r0 - 2) {
		c->out[0] = c->raw[0] = c->in[0];
		return;
	}
	sh_rule_default(c);
}

/* The rule of the node's op record (tpf_node_shard_rule) with its arg. */
static void apply_rule(struct nctx *c, enum tpf_shard_rule rule, int arg)
{
	struct tpf_node *n = c->n;
	int r0 = c->ni ? frank(c, n->inputs[0]) : -1;

	switch (rule) {
	case TPF_SHARD_RULE_UNARY:
		return sh_rule_unary(c, arg);
	case TPF_SHARD_RULE_BROADCAST:
		return sh_rule_broadcast(c, arg);
	case TPF_SHARD_RULE_QUANT:
		return sh_per_tensor(n) ? sh_rule_unary(c, 0) : sh_rule_default(c);
	case TPF_SHARD_RULE_ALONG_AXIS:
		return sh_rule_along_axis(c, r0 >= 0 ? sh_axis_attr(n, "axis", arg, r0) : -1, 1);
	case TPF_SHARD_RULE_ARG_EXTREME:
		return sh_rule_along_axis(c, r0 >= 0 ? sh_axis_attr(n, "axis", 0, r0) : -1,
					  (int)tpf_node_attr_int(n, "keepdims", 1));
	case TPF_SHARD_RULE_CUMSUM:
		return rule_cumsum(c, r0);
	case TPF_SHARD_RULE_TRILU:
		return rule_trilu(c, r0);
	case TPF_SHARD_RULE_REDUCE:
		return sh_rule_reduce(c, arg);
	case TPF_SHARD_RULE_NORM:
		return sh_rule_norm(c, arg);
	case TPF_SHARD_RULE_MATMUL:
		return sh_rule_matmul(c);
	case TPF_SHARD_RULE_GEMM:
		return sh_rule_gemm(c);
	case TPF_SHARD_RULE_CONV:
		return sh_rule_conv(c);
	case TPF_SHARD_RULE_PAD:
		return sh_rule_pad(c);
	case TPF_SHARD_RULE_SCATTER_ND:
		return sh_rule_scatter_nd(c);
	case TPF_SHARD_RULE_ELEMENTS:
		return sh_rule_elements(c, arg);
	case TPF_SHARD_RULE_RESHAPE:
		return sh_rule_reshape(c);
	case TPF_SHARD_RULE_FLATTEN:
		return sh_rule_flatten(c);
	case TPF_SHARD_RULE_TRANSPOSE:
		return sh_rule_transpose(c);
	case TPF_SHARD_RULE_UNSQUEEZE:
		return sh_rule_unsqueeze(c, arg);
	case TPF_SHARD_RULE_EXPAND:
		return sh_rule_expand(c);
	case TPF_SHARD_RULE_CONSTANT_OF_SHAPE:
		return sh_rule_constant_of_shape(c);
	case TPF_SHARD_RULE_SLICE:
		return sh_rule_slice(c);
	case TPF_SHARD_RULE_SPLIT:
		return sh_rule_split(c);
	case TPF_SHARD_RULE_CONCAT:
		return sh_rule_concat(c);
	case TPF_SHARD_RULE_GATHER:
		return sh_rule_gather(c);
	default:
		return sh_op(n, TPF_OP_EINSUM) ? sh_rule_einsum(c) : sh_rule_default(c);
	}
}

static void dispatch(struct nctx *c)
{
	struct tpf_node *n = c->n;
	int onnx = !n->domain || !*n->domain || !strcmp(n->domain, "ai.onnx");
	int arg;
	enum tpf_shard_rule rule = tpf_node_shard_rule(n, &arg);

	if (rule == TPF_SHARD_RULE_REPLICATED) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (n->op == TPF_OP_RANGE && sh_rule_range(c)) /* a coordinate grid's local rows */
		return;
	if ((!c->ni && onnx) || (!sh_any_kind(c, SH_S) && !sh_any_kind(c, SH_P) &&
				 !may_split_whole(c, rule))) { /* Constant and friends */
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (sh_is_embedding(c))
		return sh_rule_embedding(c);
	for (size_t i = 0; i < c->ni; i++)
		if (n->inputs[i] && outer_of(c->in[i]) > 1 && whole_rows_only(rule)) {
			sh_whyf(c, "%s does not take a split within rows", n->op_type ? n->op_type : "");
			return sh_all_whole(c);
		}
	apply_rule(c, rule, arg);
}

/* ------------------------------------------------------------------ the pass */

static void record_conv(struct sh_prop *p, enum sh_conv_kind kind, struct tpf_node *n, int index,
			struct sh from, struct sh to)
{
	if (!p->final)
		return;
	if (sh_reserve(&p->convs, p->n_convs, &p->cap_convs, sizeof(*p->convs), 64)) {
		p->nomem = 1;
		return;
	}
	p->convs[p->n_convs++] = (struct sh_conv){kind, n, index, from, to};
}

static void add_note(struct sh_prop *p, struct tpf_node *n, const char *text)
{
	if (!p->final)
		return;
	if (sh_reserve(&p->notes, p->n_notes, &p->cap_notes, sizeof(*p->notes), 16)) {
		p->nomem = 1;
		return;
	}
	p->notes[p->n_notes].node = n;
	p->notes[p->n_notes].text = tpf_strdup(text);
	p->n_notes++;
}

struct scratch {
	struct sh *buf;
	uint8_t *ok;
	size_t cap;
};

static int scratch_fit(struct scratch *sc, size_t ni, size_t no)
{
	size_t need = 2 * ni + 2 * no + 4;
	if (need <= sc->cap)
		return 0;
	tpf_free(sc->buf);
	tpf_free(sc->ok);
	sc->buf = tpf_calloc(need, sizeof(*sc->buf));
	sc->ok = tpf_calloc(need, 1); /* >= ni + 1 for every node that fits `need` */
	sc->cap = sc->buf && sc->ok ? need : 0;
	return sc->cap ? 0 : -1;
}

/* The region of a decomposed norm: gathered, normalized whole, resliced. */
static int region_step(struct sh_prop *p, struct tpf_node *n, size_t *gathers)
{
	struct shard *s = p->s;
	int ri = s->region_of[n->id];
	struct sh_region *rg;
	struct sh x;
	int r;

	if (ri < 0)
		return 0;
	rg = &s->regions[ri];
	if (p->region_done[ri] == 1)
		return 0; /* processed node by node */
	if (p->region_done[ri] == 2)
		return 1; /* already assigned */
	/* first node of the region */
	x = in_sh(p, rg->x);
	r = sh_full(s, rg->x)->rank;
	if (x.kind != SH_S || r < 1 || x.axis != r - 1 || x.sect) {
		p->region_done[ri] = 1;
		return 0;
	}
	p->region_done[ri] = 2;
	for (size_t k = 0; k < rg->n_nodes; k++) {
		struct tpf_node *m = rg->nodes[k];
		for (size_t i = 0; i < m->n_inputs; i++)
			if (m->inputs[i] == rg->x)
				record_conv(p, CONV_INPUT, m, (int)i, x, SH_R_);
		for (size_t j = 0; j < m->n_outputs; j++)
			if (m->outputs[j])
				p->sh[m->outputs[j]->id] = SH_R_;
	}
	/* reslice the result */
	p->sh[rg->out->id] = x;
	if (rg->out->producer)
		record_conv(p, CONV_OUTPUT, rg->out->producer, rg->out->producer_index, SH_R_, x);
	if (p->taint && p->taint[rg->x->id])
		p->taint[rg->out->id] = 1;
	(void)gathers;
	return 1;
}

/* Slicing v is a cost when v is computed (not a constant, not a weight
 * behind a Cast or DequantizeLinear, not an expert's rows of a stacked
 * table, not a ConstantOfShape fill, not a graph input) and more than one
 * op reads it. */
static int costly_slice(const struct sh_prop *p, const struct tpf_value *v)
{
	const struct tpf_value *x = v;
	for (int hop = 0; x && hop < 4; hop++) {
		const struct tpf_node *q = x->producer;
		if (tpf_value_constant(x) || x->kind != TPF_VALUE_NODE_OUTPUT)
			return 0;
		if (q && sh_stacked_table(q, NULL, NULL))
			return 0; /* an expert's rows of a stacked table: the table is sliced */
		if (sh_op(q, TPF_OP_CONSTANT_OF_SHAPE))
			return 0; /* a fill (a buffer that ScatterND writes heads into) */
		if (!q || !q->n_inputs || !(sh_op(q, TPF_OP_CAST) || sh_op(q, TPF_OP_IDENTITY) ||
					     sh_op(q, TPF_OP_TRANSPOSE) || sh_op(q, TPF_OP_DEQUANTIZE_LINEAR)))
			break;
		x = q->inputs[0];
	}
	(void)p;
	{
		/* readers of its data (Shape and Size read only its dims) */
		size_t readers = tpf_value_is_graph_output(v) ? 1 : 0;
		for (size_t i = 0; i < v->n_uses; i++)
			if (!sh_op(v->uses[i].node, TPF_OP_SHAPE) && !sh_op(v->uses[i].node, TPF_OP_SIZE))
				readers++;
		return readers > 1;
	}
}

static void prop_node(struct sh_prop *p, struct scratch *sc, struct tpf_node *n, size_t *gathers)
{
	struct nctx c;
	size_t ni = n->n_inputs, no = n->n_outputs;
	int tainted = 0;

	if (region_step(p, n, gathers))
		return;
	if (scratch_fit(sc, ni, no)) {
		p->nomem = 1;
		return;
	}
	memset(&c, 0, sizeof(c));
	c.p = p;
	c.s = p->s;
	c.n = n;
	c.ni = ni;
	c.no = no;
	c.in = sc->buf;
	c.want = sc->buf + ni;
	c.out = sc->buf + 2 * ni;
	c.raw = sc->buf + 2 * ni + no;
	c.gather_ok = sc->ok;
	for (size_t i = 0; i < ni; i++) {
		c.in[i] = in_sh(p, n->inputs[i]);
		if (c.in[i].kind == SH_P && p->reduced_at[n->inputs[i]->id])
			c.in[i] = SH_R_; /* an earlier reader reduces it: read that */
		c.want[i] = c.in[i];
		c.gather_ok[i] = 0;
		if (p->taint && n->inputs[i] && n->inputs[i]->id < p->s->n_values0 &&
		    p->taint[n->inputs[i]->id])
			tainted = 1;
	}
	if (p->taint && p->taint_roots && n->id < p->s->n_nodes0 && p->taint_roots[n->id])
		tainted = 1;
	for (size_t j = 0; j < no; j++)
		c.out[j] = c.raw[j] = SH_R_;
	/* control flow reading split values in its bodies cannot be fixed */
	for (size_t i = 0; i < n->n_implicit; i++) {
		struct sh x = in_sh(p, n->implicit_inputs[i]);
		if (x.kind != SH_R) {
			c.hard = 1;
			sh_whyf(&c, "a subgraph reads '%s', which is not whole", n->implicit_inputs[i]->name);
		}
	}
	dispatch(&c);
	/* conversions on operands: compare with the sharding before partials
	 * were taken as reduced */
	for (size_t i = 0; i < ni; i++) {
		struct sh from = in_sh(p, n->inputs[i]), to = c.want[i];
		if (!n->inputs[i] || sh_eq(from, to))
			continue;
		if (from.kind == SH_R && to.kind == SH_S && costly_slice(p, n->inputs[i])) {
			/* a replicated activation other ops read whole: the split
			 * spreads into what stays replicated (a residual stream) */
			(*gathers)++;
			if (!p->first_gather) {
				char nb[200];
				p->first_gather = n;
				snprintf(p->first_gather_why, sizeof(p->first_gather_why),
					 "%s: it would slice '%s', which other ops read whole",
					 sh_node_name(n, nb, sizeof(nb)), n->inputs[i]->name);
				p->blame = n->inputs[i];
			}
		}
		if (from.kind == SH_S && !c.gather_ok[i]) {
			(*gathers)++;
			if (!p->first_gather) {
				char nb[200];
				p->first_gather = n;
				snprintf(p->first_gather_why, sizeof(p->first_gather_why), "%s: %s",
					 sh_node_name(n, nb, sizeof(nb)),
					 c.why[0] ? c.why : "it needs its operand whole");
			}
		}
		if (from.kind == SH_P && to.kind == SH_R && n->inputs[i]->id < p->s->n_values0 &&
		    !p->reduced_at[n->inputs[i]->id])
			p->reduced_at[n->inputs[i]->id] = p->s->order[n->id] + 1;
		record_conv(p, CONV_INPUT, n, (int)i, from, to);
	}
	if (c.hard) {
		(*gathers) += 1000;
		if (!p->first_gather) {
			char nb[200];
			p->first_gather = n;
			snprintf(p->first_gather_why, sizeof(p->first_gather_why), "%s: %s",
				 sh_node_name(n, nb, sizeof(nb)), c.why);
		}
		if (p->final) {
			char nb[200], msg[512];
			snprintf(msg, sizeof(msg), "HARD %s: %s", sh_node_name(n, nb, sizeof(nb)), c.why);
			add_note(p, n, msg);
		}
	} else if (p->final && c.why[0] && sh_any_kind(&c, SH_S)) {
		int gathered = 0;
		for (size_t i = 0; i < ni; i++)
			if (n->inputs[i] && c.in[i].kind == SH_S && !sh_eq(c.in[i], c.want[i]) &&
			    !c.gather_ok[i])
				gathered = 1;
		if (gathered) {
			char nb[200], msg[512];
			snprintf(msg, sizeof(msg), "%s: %s", sh_node_name(n, nb, sizeof(nb)), c.why);
			add_note(p, n, msg);
		}
	}
	for (size_t j = 0; j < no; j++) {
		struct tpf_value *v = n->outputs[j];
		if (!v || v->id >= p->s->n_values0)
			continue;
		p->sh[v->id] = c.out[j];
		if (!sh_eq(c.raw[j], c.out[j]))
			record_conv(p, CONV_OUTPUT, n, (int)j, c.raw[j], c.out[j]);
		if (p->taint && tainted && (c.out[j].kind != SH_R || c.raw[j].kind != SH_R))
			p->taint[v->id] = 1;
	}
}

void sh_prop_run(struct sh_prop *p, uint32_t from, uint32_t *gather_at)
{
	struct shard *s = p->s;
	struct scratch sc = {0};
	struct tpf_node *n;
	uint32_t pos = 0;

	p->gathers = 0;
	p->blame = NULL;
	p->first_gather = NULL;
	p->first_gather_why[0] = 0;
	p->rows_reached = p->outputs_reached = 0;
	p->first_row = NULL;
	for (size_t i = 0; i < s->n_regions; i++)
		if (s->order[s->regions[i].first->id] >= from)
			p->region_done[i] = 0;
	for (size_t i = 0; i < s->n_values0; i++)
		if (p->reduced_at[i] > from)
			p->reduced_at[i] = 0;
	for (n = s->g->first; n; n = n->next, pos++) {
		size_t g = 0;
		if (pos < from || n->id >= s->n_nodes0)
			continue;
		prop_node(p, &sc, n, &g);
		p->gathers += g;
		if (gather_at)
			gather_at[pos] = (uint32_t)g;
		if (p->nomem)
			break;
	}
	/* graph outputs: partial sums are reduced; splits reaching an output
	 * from the candidate count for it */
	for (size_t i = 0; i < s->g->n_outputs; i++) {
		struct tpf_value *v = s->g->outputs[i];
		if (!v || v->id >= s->n_values0)
			continue;
		if (p->taint && p->taint[v->id] && p->sh[v->id].kind != SH_R)
			p->outputs_reached++;
	}
	tpf_free(sc.buf);
	tpf_free(sc.ok);
}

void sh_prop_free(struct sh_prop *p)
{
	if (!p)
		return;
	void *arrays[] = {p->notes, p->sh, p->taint, p->taint_roots, p->convs, p->edits, p->region_done,
			  p->reduced_at};
	for (size_t i = 0; i < p->n_notes; i++)
		tpf_free(p->notes[i].text);
	for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++)
		tpf_free(arrays[i]);
	memset(p, 0, sizeof(*p));
}
