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
 * estimate the rank graph's elements (local_vals) and ask for the literal
 * ones to be rewritten (sh_elem_edit); an element neither right nor
 * literal makes the op need its operand whole.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "pattern.h"
#include "shard-internal.h"


static const struct sh SH_R_ = {SH_R, 0, 0};
static const struct sh SH_P_ = {SH_P, 0, 0};

static struct sh mk_s(int axis, int sect)
{
	struct sh x = {SH_S, (int8_t)axis, (uint16_t)sect, 0};
	return x;
}

/* x on another axis (sections and outer factor kept) */
static struct sh on_axis(struct sh x, int axis)
{
	x.axis = (int8_t)axis;
	return x;
}

static int64_t outer_of(struct sh x)
{
	return x.kind == SH_S && x.outer > 1 ? x.outer : 1;
}

static int sh_eq(struct sh a, struct sh b)
{
	if (a.kind != b.kind)
		return 0;
	return a.kind != SH_S ||
	       (a.axis == b.axis && a.sect == b.sect && outer_of(a) == outer_of(b));
}

const struct sh_fact *sh_full(const struct shard *s, const struct tpf_value *v)
{
	return sh_eval_fact(&s->ev, v);
}

/* Room for one more entry in the array *arrp (any element pointer) of n
 * used and *cap allocated entries of `size` bytes; the first allocation
 * holds `first`.  0, or -1 when out of memory (the array stays). */
static int reserve(void *arrp, size_t n, size_t *cap, size_t size, size_t first)
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
	if (reserve(&s->sects, s->n_sects, &s->cap_sects, sizeof(*s->sects), 8))
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
	case SH_S: {
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

/* ------------------------------------------------------------------ node context */

struct nctx {
	struct sh_prop *p;
	struct shard *s;
	struct tpf_node *n;
	size_t ni, no;
	struct sh *in, *want, *out, *raw;
	uint8_t *gather_ok;
	char why[256];   /* why a gather is needed */
	int hard;        /* the op cannot be made right by gathering */
};

static struct sh in_sh(const struct sh_prop *p, const struct tpf_value *v)
{
	if (!v || v->id >= p->s->n_values0 || p->sh[v->id].kind == SH_UNSET)
		return SH_R_;
	return p->sh[v->id];
}

static void whyf(struct nctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void whyf(struct nctx *c, const char *fmt, ...)
{
	va_list ap;
	if (c->why[0])
		return;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

static const struct sh_fact *full(const struct nctx *c, const struct tpf_value *v)
{
	return sh_full(c->s, v);
}

static int64_t vdim(const struct nctx *c, const struct tpf_value *v, int a)
{
	const struct sh_fact *f = full(c, v);
	return f->rank > a && a >= 0 ? f->dims[a] : -1;
}

static int frank(const struct nctx *c, const struct tpf_value *v)
{
	return full(c, v)->rank;
}

static int64_t sect_total(const struct shard *s, int sect, int64_t dim)
{
	const struct sh_sections *sec = sh_sect(s, sect);
	int64_t t = 0;
	if (!sec)
		return dim;
	for (int i = 0; i < sec->n; i++)
		t += sec->size[i];
	return t;
}

/* Whether operand v (replicated) can be sliced to S(axis, sect): its dim
 * there is known and equals the split's size. */
static int can_split(const struct nctx *c, const struct tpf_value *v, int axis, int sect,
		     int64_t size)
{
	int64_t d = vdim(c, v, axis);
	return v && d > 0 && d == size && d % c->s->W == 0 && sect_total(c->s, sect, d) == d;
}

/* All operands whole, all outputs replicated (the fallback). */
static void all_whole(struct nctx *c)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i])
			c->want[i] = SH_R_;
	for (size_t j = 0; j < c->no; j++)
		c->out[j] = c->raw[j] = SH_R_;
}

static int any_kind(const struct nctx *c, int kind)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == kind)
			return 1;
	return 0;
}

/* Partial operands become whole (AllReduce). */
static void reduce_partials(struct nctx *c)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == SH_P) {
			c->in[i] = SH_R_; /* as if it arrived reduced */
			c->want[i] = SH_R_;
		}
}

/* ------------------------------------------------------------------ local elements */

/* Local dims of v in the rank graph: the full dims with the split axis
 * divided by W.  Returns the rank (-1 unknown). */
static int local_dims(const struct sh_prop *p, const struct tpf_value *v, int64_t *dims)
{
	const struct sh_fact *f = sh_full(p->s, v);
	struct sh x = in_sh(p, v);

	if (f->rank < 0)
		return -1;
	if (f->rank > 0)
		memcpy(dims, f->dims, (size_t)f->rank * sizeof(int64_t));
	if (x.kind == SH_S && x.axis < f->rank && dims[x.axis] > 0)
		dims[x.axis] /= p->s->W;
	return f->rank;
}

/* Elements of a small integer tensor as the rank graph computes them. */
static int local_vals(const struct sh_prop *p, const struct tpf_value *v, int64_t *vals,
		      int depth)
{
	const struct sh_fact *f = sh_full(p->s, v);
	const struct tpf_node *n;
	int64_t dims[TPF_MAX_RANK];

	if (f->nvals < 0)
		return -1;
	n = v->producer;
	if (!n || depth > 40 || tpf_value_constant(v)) {
		memcpy(vals, f->vals, (size_t)f->nvals * sizeof(int64_t));
		return f->nvals;
	}
	if (sh_is(n, "Shape") || sh_is(n, "Size")) {
		struct sh_fact x = *sh_full(p->s, n->inputs[0]);
		const struct sh_fact *px = &x;
		int r = local_dims(p, n->inputs[0], dims);
		if (r < 0)
			return -1;
		x.dims = dims;
		return sh_interp(n, (size_t)v->producer_index, &px, f, vals);
	}
	{
		struct sh_fact lf[8];
		const struct sh_fact *pf[8];
		int64_t buf[8][SH_MAX_VALS];
		if (n->n_inputs > 8)
			return -1;
		for (size_t i = 0; i < n->n_inputs; i++) {
			if (!n->inputs[i]) {
				pf[i] = NULL;
				continue;
			}
			lf[i] = *sh_full(p->s, n->inputs[i]);
			if (lf[i].nvals >= 0) {
				int k = local_vals(p, n->inputs[i], buf[i], depth + 1);
				if (k != lf[i].nvals)
					return -1;
				lf[i].vals = buf[i];
			}
			pf[i] = &lf[i];
		}
		return sh_interp(n, (size_t)v->producer_index, pf, f, vals);
	}
}

/* Whether element `elem` of v is a literal: it comes from a constant
 * through Concat / Unsqueeze / Squeeze / Reshape / Identity / Cast. */
static int is_literal(const struct shard *s, const struct tpf_value *v, int elem, int depth)
{
	const struct tpf_node *n;

	if (!v || depth > 16)
		return 0;
	if (tpf_value_constant(v))
		return 1;
	n = v->producer;
	if (!n)
		return 0;
	if (sh_is(n, "Concat")) {
		for (size_t i = 0; i < n->n_inputs; i++) {
			int64_t k = sh_numel(sh_full(s, n->inputs[i]));
			if (k < 0)
				return 0;
			if (elem < k)
				return is_literal(s, n->inputs[i], elem, depth + 1);
			elem -= (int)k;
		}
		return 0;
	}
	if (sh_is(n, "Unsqueeze") || sh_is(n, "Squeeze") || sh_is(n, "Reshape") ||
	    sh_is(n, "Identity") || sh_is(n, "Cast") || sh_is(n, "Flatten"))
		return is_literal(s, n->inputs[0], elem, depth + 1);
	return 0;
}

static void add_edit(struct nctx *c, int index, const char *attr, int elem, int64_t value)
{
	struct sh_prop *p = c->p;
	if (!p->final)
		return;
	if (reserve(&p->edits, p->n_edits, &p->cap_edits, sizeof(*p->edits), 32)) {
		p->nomem = 1;
		return;
	}
	p->edits[p->n_edits++] = (struct sh_elem_edit){c->n, index, attr, elem, value};
}

/* Element `elem` of operand `index` must read `want` in the rank graph
 * (its original value is `orig`, what the rank graph computes `local`).
 * 1: fine (possibly by an edit), 0: cannot. */
static int need_elem(struct nctx *c, int index, int elem, int64_t orig, int64_t local,
		     int64_t want)
{
	if (local == want)
		return 1;
	if (local == orig && is_literal(c->s, c->n->inputs[index], elem, 0)) {
		add_edit(c, index, NULL, elem, want);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------ rules */

static void rule_default(struct nctx *c)
{
	if (any_kind(c, SH_S))
		whyf(c, "%s has no sharding rule for a split operand", c->n->op_type);
	all_whole(c);
}

/* Unary ops: the sharding passes through; partial sums only through the
 * linear ones. */
static void rule_unary(struct nctx *c, int linear)
{
	if (!c->n->inputs[0])
		return rule_default(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return rule_default(c);
	if (c->in[0].kind == SH_P && !linear)
		reduce_partials(c);
	for (size_t j = 0; j < c->no; j++)
		c->out[j] = c->raw[j] = c->in[0];
}

/* Numpy broadcasting: operands aligned on the right. */
static void rule_broadcast(struct nctx *c)
{
	const char *op = c->n->op_type;
	int ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int target = -1, tsect = 0;
	int64_t tdim = -1;
	size_t np = 0, nother = 0;
	struct sh tsh = {0};

	if (ro < 0)
		return rule_default(c);
	for (size_t i = 0; i < c->ni; i++) {
		if (!c->n->inputs[i])
			continue;
		if (c->in[i].kind == SH_P)
			np++;
		else
			nother++;
	}
	if (np) {
		int linear = 0;
		if ((!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Sum")) && !nother)
			linear = 1;
		else if (!strcmp(op, "Mul") && np == 1)
			linear = 1;
		else if (!strcmp(op, "Div") && np == 1 && c->in[0].kind == SH_P)
			linear = 1;
		if (linear) {
			/* the other operands must be whole */
			for (size_t i = 0; i < c->ni; i++)
				if (c->n->inputs[i] && c->in[i].kind == SH_S) {
					whyf(c, "a partial sum meets a split operand");
					c->want[i] = SH_R_;
				}
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		reduce_partials(c);
	}
	for (size_t i = 0; i < c->ni; i++) {
		const struct tpf_value *v = c->n->inputs[i];
		if (v && c->in[i].kind == SH_S) {
			int r = frank(c, v);
			target = c->in[i].axis + ro - r;
			tsect = c->in[i].sect;
			tdim = vdim(c, v, c->in[i].axis);
			tsh = on_axis(c->in[i], target);
			break;
		}
	}
	if (target < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	for (size_t i = 0; i < c->ni; i++) {
		const struct tpf_value *v = c->n->inputs[i];
		int r, ia;
		int64_t d;
		if (!v)
			continue;
		r = frank(c, v);
		if (r < 0) {
			whyf(c, "the rank of operand '%s' is unknown", v->name);
			return all_whole(c);
		}
		ia = target - (ro - r);
		d = ia >= 0 ? vdim(c, v, ia) : 1;
		if (c->in[i].kind == SH_S && sh_eq(c->in[i], on_axis(tsh, ia)))
			continue;
		if (d == 1) {
			if (c->in[i].kind == SH_S) {
				whyf(c, "operand '%s' is split on another axis", v->name);
				c->want[i] = SH_R_;
			}
			continue;
		}
		if (d == tdim && outer_of(tsh) == 1 && can_split(c, v, ia, tsect, tdim)) {
			c->want[i] = mk_s(ia, tsect);
			if (c->in[i].kind == SH_S)
				whyf(c, "operand '%s' is split on another axis", v->name);
			continue;
		}
		whyf(c, "operand '%s' has dim %" PRId64 " where the split axis has %" PRId64,
		     v->name, d, tdim);
		return all_whole(c);
	}
	c->out[0] = c->raw[0] = tsh;
}

/* Axis attribute (or default) normalized to rank r; -1 when out of range. */
static int axis_attr(const struct tpf_node *n, const char *name, int64_t dflt, int r)
{
	int64_t a = tpf_node_attr_int(n, name, dflt);
	if (a < 0)
		a += r;
	return a < 0 || a >= r ? -1 : (int)a;
}

/* An op working along one axis (Softmax, TopK, CumSum, ArgMax, ...):
 * splits elsewhere pass through. */
static void rule_along_axis(struct nctx *c, int axis, int keepdims)
{
	if (axis < 0)
		return rule_default(c);
	reduce_partials(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return rule_default(c);
	if (c->in[0].kind != SH_S) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (c->in[0].axis == axis) {
		whyf(c, "%s works along axis %d, the split axis", c->n->op_type, axis);
		return all_whole(c);
	}
	{
		int a = c->in[0].axis;
		if (!keepdims && a > axis)
			a--;
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = on_axis(c->in[0], a);
	}
}

static int read_axes(struct nctx *c, int r, int64_t *axes, int *count)
{
	const struct tpf_attr *a = tpf_node_attr(c->n, "axes");
	const struct sh_fact *f;

	*count = 0;
	if (a && a->kind == TPF_ATTR_INTS) {
		if (a->n > TPF_MAX_RANK)
			return -1;
		for (size_t i = 0; i < a->n; i++)
			axes[i] = a->ints[i];
		*count = (int)a->n;
	} else if (c->ni > 1 && c->n->inputs[1]) {
		f = full(c, c->n->inputs[1]);
		if (f->nvals < 0 || f->nvals > TPF_MAX_RANK)
			return -1;
		memcpy(axes, f->vals, (size_t)f->nvals * sizeof(int64_t));
		*count = f->nvals;
	}
	for (int i = 0; i < *count; i++) {
		if (axes[i] < 0)
			axes[i] += r;
		if (axes[i] < 0 || axes[i] >= r)
			return -1;
	}
	return 0;
}

static void rule_reduce(struct nctx *c)
{
	int r = frank(c, c->n->inputs[0]);
	int64_t axes[TPF_MAX_RANK];
	int k, keep = (int)tpf_node_attr_int(c->n, "keepdims", 1), sum = sh_is(c->n, "ReduceSum");
	int hit = 0, a, shift = 0;

	if (r < 0 || read_axes(c, r, axes, &k))
		return rule_default(c);
	if (!k) {
		if (tpf_node_attr_int(c->n, "noop_with_empty_axes", 0))
			return rule_unary(c, 1);
		for (int i = 0; i < r; i++)
			axes[i] = i;
		k = r;
	}
	if (c->in[0].kind == SH_P) {
		if (sum) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		reduce_partials(c);
	}
	if (c->in[0].kind != SH_S) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	a = c->in[0].axis;
	for (int i = 0; i < k; i++) {
		if (axes[i] == a)
			hit = 1;
		else if (axes[i] < a)
			shift++;
	}
	if (hit) {
		if (sum && c->in[0].sect == 0 && outer_of(c->in[0]) == 1) {
			/* a sum over the split axis: each rank sums its part */
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		whyf(c, "%s reduces over the split axis %d", c->n->op_type, a);
		return all_whole(c);
	}
	c->out[0] = c->raw[0] = on_axis(c->in[0], keep ? a : a - shift);
}

/* Norms over axes [axis, rank): a split before them passes through; a
 * split inside them is gathered, normalized whole and sliced again (the
 * sharded norm form that fuse-sharded-rmsnorm rewrites). */
static void rule_norm(struct nctx *c, int n_data)
{
	int r = frank(c, c->n->inputs[0]);
	int axis = r >= 0 ? axis_attr(c->n, "axis", -1, r) : -1;

	if (axis < 0)
		return rule_default(c);
	reduce_partials(c);
	if (c->in[0].kind != SH_S) {
		for (int i = 1; i < n_data; i++)
			if (c->n->inputs[i] && c->in[i].kind == SH_S)
				c->want[i] = SH_R_;
		for (size_t i = (size_t)n_data; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind == SH_S)
				c->want[i] = SH_R_;
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (c->in[0].axis < axis) {
		struct sh x = c->in[0];
		for (int i = 1; i < n_data; i++) {
			const struct tpf_value *v = c->n->inputs[i];
			if (v && !sh_eq(c->in[i], x)) {
				if (outer_of(x) == 1 &&
				    can_split(c, v, x.axis, x.sect, vdim(c, c->n->inputs[0], x.axis)))
					c->want[i] = x;
				else
					return rule_default(c);
			}
		}
		for (size_t i = (size_t)n_data; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind != SH_R)
				return rule_default(c);
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = x;
		return;
	}
	if (c->in[0].sect || outer_of(c->in[0]) > 1) {
		whyf(c, "the norm spans an axis split by sections or within rows");
		return all_whole(c);
	}
	/* gather, normalize whole, take this rank's part again */
	{
		struct sh x = c->in[0];
		for (int i = 0; i < n_data; i++)
			if (c->n->inputs[i]) {
				c->want[i] = SH_R_;
				c->gather_ok[i] = 1;
			}
		for (size_t i = (size_t)n_data; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind != SH_R)
				c->want[i] = SH_R_;
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		c->out[0] = x; /* resliced after the norm */
	}
}

/* --- MatMul ---------------------------------------------------------------- */

const struct tpf_tensor *sh_matmul_weight(const struct tpf_node *n, struct tpf_value **base)
{
	struct tpf_value *v = n->n_inputs > 1 ? n->inputs[1] : NULL;

	for (int hop = 0; v && hop < 4; hop++) {
		const struct tpf_tensor *t = tpf_value_constant(v);
		const struct tpf_node *p = v->producer;
		if (t) {
			if (base)
				*base = v;
			return t;
		}
		if (!p || !p->n_inputs)
			return NULL;
		if (sh_is(p, "Identity") || sh_is(p, "Cast") || sh_is(p, "Transpose")) {
			v = p->inputs[0];
			continue;
		}
		if (sh_is(p, "DequantizeLinear")) {
			/* per-tensor scale and zero point only */
			for (size_t i = 1; i < p->n_inputs; i++) {
				const struct tpf_tensor *q = p->inputs[i] ? tpf_value_constant(p->inputs[i]) : NULL;
				if (p->inputs[i] && (!q || tpf_tensor_numel(q) != 1))
					return NULL;
			}
			v = p->inputs[0];
			continue;
		}
		return NULL;
	}
	return NULL;
}

/* The output is partial sums over the contraction (SH_P); a product of
 * a tainted A counts as reaching the rows. */
static void out_partial_rows(struct nctx *c, const struct tpf_value *A)
{
	c->out[0] = c->raw[0] = SH_P_;
	if (c->p->taint && c->p->taint[A->id]) {
		c->p->rows_reached++;
		if (!c->p->first_row)
			c->p->first_row = c->n;
	}
}

/* The axis of the first input split along an axis (its section in
 * *sect), or -1 when none is. */
static int first_split(const struct nctx *c, int *sect)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == SH_S) {
			*sect = c->in[i].sect;
			return c->in[i].axis;
		}
	return -1;
}

static void rule_matmul(struct nctx *c)
{
	struct tpf_value *A = c->n->inputs[0], *B = c->n->inputs[1];
	int ra = frank(c, A), rb = frank(c, B), ro;
	struct sh a, b;
	int dec = c->s->decision[c->n->id];

	if (ra < 2 || rb < 2 || c->no != 1)
		return rule_default(c);
	ro = ra > rb ? ra : rb;
	if (c->in[0].kind == SH_P || c->in[1].kind == SH_P)
		reduce_partials(c);
	a = c->in[0];
	b = c->in[1];
	if (outer_of(a) > 1 || outer_of(b) > 1) {
		/* rows of a merged axis: only as batch rows against a broadcast B */
		if (a.kind == SH_S && a.axis < ra - 1 && b.kind == SH_R &&
		    (rb == 2 || a.axis < ra - rb)) {
			c->out[0] = c->raw[0] = on_axis(a, a.axis + ro - ra);
			return;
		}
		whyf(c, "a split within rows meets a MatMul");
		return all_whole(c);
	}
	if (a.kind == SH_R && b.kind == SH_R) {
		if (dec == DEC_COLUMN || dec == DEC_COLUMN_GATHER) {
			int sect = c->s->dec_sect[c->n->id];
			c->want[1] = mk_s(rb - 1, sect);
			c->raw[0] = mk_s(ro - 1, sect);
			c->out[0] = dec == DEC_COLUMN_GATHER ? SH_R_ : c->raw[0];
			return;
		}
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (a.kind == SH_S && a.axis == ra - 1) {
		/* contraction dim split: row-parallel, partial sums */
		int64_t k = vdim(c, A, ra - 1);
		if (!(b.kind == SH_S && b.axis == rb - 2 && b.sect == a.sect)) {
			if (!can_split(c, B, rb - 2, a.sect, k)) {
				whyf(c, "its weight's contraction dim cannot be split like its input");
				return all_whole(c);
			}
			c->want[1] = mk_s(rb - 2, a.sect);
		}
		return out_partial_rows(c, A);
	}
	if (a.kind == SH_S && a.axis == ra - 2) {
		/* rows of A split */
		if (b.kind != SH_R || rb > 2) {
			if (b.kind != SH_R)
				c->want[1] = SH_R_;
			if (rb > 2 && vdim(c, B, rb - 3) > 1 && ra < rb) {
				whyf(c, "a row split meets batched weights");
				return all_whole(c);
			}
		}
		c->out[0] = c->raw[0] = mk_s(ro - 2, a.sect);
		return;
	}
	if (a.kind == SH_S) {
		/* batch axis of A */
		int oa = a.axis + ro - ra, jb = oa - (ro - rb);
		int64_t d = jb >= 0 ? vdim(c, B, jb) : 1;
		if (!(b.kind == SH_S && b.axis == jb && b.sect == a.sect)) {
			if (d == 1) {
				if (b.kind == SH_S)
					c->want[1] = SH_R_;
			} else if (can_split(c, B, jb, a.sect, vdim(c, A, a.axis))) {
				c->want[1] = mk_s(jb, a.sect);
			} else {
				whyf(c, "operand '%s' cannot be split on the batch axis", B->name);
				return all_whole(c);
			}
		}
		c->out[0] = c->raw[0] = mk_s(oa, a.sect);
		return;
	}
	/* A whole, B split */
	if (b.axis == rb - 1) {
		c->out[0] = c->raw[0] = mk_s(ro - 1, b.sect);
		return;
	}
	if (b.axis == rb - 2) {
		if (!can_split(c, A, ra - 1, b.sect, vdim(c, B, rb - 2))) {
			whyf(c, "operand '%s' cannot be split on the contraction dim", A->name);
			return all_whole(c);
		}
		c->want[0] = mk_s(ra - 1, b.sect);
		c->out[0] = c->raw[0] = SH_P_;
		return;
	}
	{
		int ob = b.axis + ro - rb, ia = ob - (ro - ra);
		int64_t d = ia >= 0 ? vdim(c, A, ia) : 1;
		if (d != 1) {
			if (!can_split(c, A, ia, b.sect, vdim(c, B, b.axis))) {
				whyf(c, "operand '%s' cannot be split on the batch axis", A->name);
				return all_whole(c);
			}
			c->want[0] = mk_s(ia, b.sect);
		}
		c->out[0] = c->raw[0] = mk_s(ob, b.sect);
	}
}

/* --- movement -------------------------------------------------------------- */

/* Maps split x (axis a of dims `din`) through a reshape to dims `dout`:
 * the output axis (-1: the split does not survive), its sections and outer
 * factor.  The input is seen as TO rows (the dims before a, times x's
 * outer factor) of SP elements each, every row split in W blocks; the
 * output axis is the one where TO rows end, possibly inside it (an outer
 * factor), and its remaining extent must split W ways. */
static int reshape_axis(struct shard *s, const int64_t *din, int rin, struct sh x,
			const int64_t *dout, int rout, int *osect, int64_t *oouter)
{
	int64_t O = outer_of(x), TO = 1, SP = 1, pre = 1, inner_out = 1, Ob = 1;
	int a = x.axis, b = -1;

	for (int i = 0; i < rin; i++)
		if (din[i] < 0)
			return -1;
	for (int i = 0; i < rout; i++)
		if (dout[i] < 0)
			return -1;
	if (din[a] % O)
		return -1;
	/* dims near 2^63 would overflow these products: the split then does
	 * not survive (it is never guessed from wrapped numbers) */
	for (int i = 0; i < a; i++)
		if (__builtin_mul_overflow(TO, din[i], &TO))
			return -1;
	if (__builtin_mul_overflow(TO, O, &TO))
		return -1;
	SP = din[a] / O;
	for (int i = a + 1; i < rin; i++)
		if (__builtin_mul_overflow(SP, din[i], &SP))
			return -1;
	for (int i = 0; i < rout; i++) {
		int64_t next;
		if (pre == TO && dout[i] == 1)
			continue;
		if (__builtin_mul_overflow(pre, dout[i], &next))
			return -1;
		if (pre <= TO && TO < next) {
			if (TO % pre)
				return -1;
			Ob = TO / pre;
			if (dout[i] % Ob)
				return -1;
			b = i;
			break;
		}
		pre = next;
	}
	if (b < 0)
		return -1;
	if ((dout[b] / Ob) % s->W) {
		*oouter = dout[b] / Ob; /* for the message: the size that does not divide */
		return -2;
	}
	for (int i = b + 1; i < rout; i++)
		if (__builtin_mul_overflow(inner_out, dout[i], &inner_out))
			return -1;
	int64_t out_span;
	if (__builtin_mul_overflow(dout[b] / Ob, inner_out, &out_span) || out_span != SP ||
	    !inner_out)
		return -1;
	*oouter = Ob > 1 ? Ob : 0;
	if (!x.sect) {
		*osect = 0;
		return b;
	}
	if (O > 1 || Ob > 1)
		return -1;
	{
		const struct sh_sections *si = sh_sect(s, x.sect);
		struct sh_sections so = {.n = si->n};
		int64_t inner_in = SP / din[a];
		for (int i = 0; i < si->n; i++) {
			int64_t span;
			if (__builtin_mul_overflow(si->size[i], inner_in, &span))
				return -1;
			if (span % inner_out || (span / inner_out) % s->W)
				return -1;
			so.size[i] = span / inner_out;
		}
		*osect = sh_sect_intern(s, &so);
		return *osect < 0 ? -1 : b;
	}
}

static void rule_reshape(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *sv = c->ni > 1 ? c->n->inputs[1] : NULL;
	const struct sh_fact *fx = full(c, x), *fo = full(c, c->n->outputs[0]), *fs;
	int64_t loc[SH_MAX_VALS], ldin[TPF_MAX_RANK];
	int allowzero = (int)tpf_node_attr_int(c->n, "allowzero", 0);
	int b = -1, osect = 0, nl;
	int64_t oouter = 0;

	if (!sv || fx->rank < 0 || fo->rank < 0)
		return rule_default(c);
	fs = full(c, sv);
	if (fs->nvals != fo->rank)
		return rule_default(c);
	nl = local_vals(c->p, sv, loc, 0);
	if (nl != fs->nvals) {
		if (c->in[0].kind == SH_S) {
			whyf(c, "its target shape cannot be followed");
			return all_whole(c);
		}
		return rule_unary(c, 1);
	}
	if (c->in[0].kind == SH_S) {
		b = reshape_axis(c->s, fx->dims, fx->rank, c->in[0], fo->dims, fo->rank, &osect,
				 &oouter);
		if (b == -2) {
			whyf(c, "the split axis becomes a dim of %" PRId64 " (heads?), not divisible by %d",
			     oouter, c->s->W);
			return all_whole(c);
		}
		if (b < 0) {
			whyf(c, "the split axis %d does not survive the reshape", c->in[0].axis);
			return all_whole(c);
		}
	}
	for (int i = 0; i < fx->rank; i++)
		ldin[i] = fx->dims[i];
	if (c->in[0].kind == SH_S)
		ldin[c->in[0].axis] /= c->s->W;
	for (int j = 0; j < fo->rank; j++) {
		int64_t want = fo->dims[j], o = fs->vals[j], l = loc[j];
		if (j == b)
			want /= c->s->W;
		if (l == -1 && o == -1)
			continue;
		if (l == 0 && !allowzero) {
			if (j < fx->rank && ldin[j] == want)
				continue;
		} else if (l == want) {
			continue;
		}
		if (o == l && is_literal(c->s, sv, j, 0) && (o != 0 || allowzero) && o != -1) {
			add_edit(c, 1, NULL, j, want);
			continue;
		}
		if (c->in[0].kind != SH_S) {
			whyf(c, "its target shape is computed from a split tensor's shape");
			c->hard = 1;
			return all_whole(c);
		}
		whyf(c, "element %d of its target shape cannot be made %" PRId64, j, want);
		return all_whole(c);
	}
	if (c->in[0].kind == SH_S) {
		struct sh o = mk_s(b, osect);
		o.outer = oouter;
		c->out[0] = c->raw[0] = o;
	} else {
		c->out[0] = c->raw[0] = c->in[0];
	}
}

static void rule_flatten(struct nctx *c)
{
	const struct sh_fact *fx = full(c, c->n->inputs[0]), *fo = full(c, c->n->outputs[0]);
	int b, os = 0;
	int64_t oo = 0;
	struct sh o;

	if (c->in[0].kind != SH_S)
		return rule_unary(c, 1);
	if (fx->rank < 0 || fo->rank < 0)
		return rule_default(c);
	b = reshape_axis(c->s, fx->dims, fx->rank, c->in[0], fo->dims, fo->rank, &os, &oo);
	if (b < 0) {
		whyf(c, "the split axis does not survive the flatten");
		return all_whole(c);
	}
	o = mk_s(b, os);
	o.outer = oo;
	c->out[0] = c->raw[0] = o;
}

static void rule_transpose(struct nctx *c)
{
	int r = frank(c, c->n->inputs[0]);
	const struct tpf_attr *pa = tpf_node_attr(c->n, "perm");

	if (c->in[0].kind != SH_S)
		return rule_unary(c, 1);
	if (r < 0)
		return rule_default(c);
	for (int i = 0; i < r; i++) {
		int64_t src = pa && pa->n == (size_t)r ? pa->ints[i] : r - 1 - i;
		if (src == c->in[0].axis) {
			c->out[0] = c->raw[0] = on_axis(c->in[0], i);
			return;
		}
	}
	rule_default(c);
}

static void rule_unsqueeze(struct nctx *c, int squeeze)
{
	int r = frank(c, c->n->inputs[0]), ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int64_t axes[TPF_MAX_RANK];
	int k, a;

	if (c->in[0].kind != SH_S)
		return rule_unary(c, 1);
	if (r < 0 || ro < 0 || read_axes(c, squeeze ? r : ro, axes, &k))
		return rule_default(c);
	a = c->in[0].axis;
	if (squeeze) {
		int shift = 0;
		for (int i = 0; i < k; i++) {
			if (axes[i] == a)
				return rule_default(c);
			if (axes[i] < a)
				shift++;
		}
		c->out[0] = c->raw[0] = on_axis(c->in[0], a - shift);
	} else {
		/* the input axes keep their order among the output's others */
		int in_axis = 0;
		for (int o = 0; o < ro; o++) {
			int inserted = 0;
			for (int i = 0; i < k; i++)
				if (axes[i] == o)
					inserted = 1;
			if (inserted)
				continue;
			if (in_axis == a) {
				c->out[0] = c->raw[0] = on_axis(c->in[0], o);
				return;
			}
			in_axis++;
		}
		rule_default(c);
	}
}

static void rule_expand(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *sv = c->n->inputs[1];
	const struct sh_fact *fx = full(c, x), *fo = full(c, c->n->outputs[0]), *fs = full(c, sv);
	int64_t loc[SH_MAX_VALS];
	int ro = fo->rank, ob = -1, nl;

	if (fx->rank < 0 || ro < 0 || fs->nvals < 0 || fs->nvals > ro)
		return rule_default(c);
	reduce_partials(c);
	nl = local_vals(c->p, sv, loc, 0);
	if (nl != fs->nvals)
		return c->in[0].kind == SH_S ? (whyf(c, "its shape cannot be followed"), all_whole(c))
					     : rule_unary(c, 1);
	if (c->in[0].kind == SH_S)
		ob = c->in[0].axis + ro - fx->rank;
	for (int j = 0; j < fs->nvals; j++) {
		int oj = j + ro - fs->nvals;
		int xi = oj - (ro - fx->rank);
		int64_t xd = xi >= 0 ? fx->dims[xi] : 1, o = fs->vals[j], l = loc[j];
		if (oj == ob) {
			/* the split axis: 1 (keep the local dim) or the local size */
			if (l == 1 || l == fo->dims[oj] / c->s->W)
				continue;
			if (need_elem(c, 1, j, o, l, fo->dims[oj] / c->s->W))
				continue;
			whyf(c, "its shape's element %d cannot be made the local size", j);
			return all_whole(c);
		}
		if (l == o)
			continue;
		if (xd == 1 && ob < 0 && o > 0 && l * c->s->W == o && o % c->s->W == 0 &&
		    c->in[0].kind == SH_R) {
			/* a broadcast to a split tensor's local size: the result is
			 * the same on every rank, i.e. split */
			ob = oj;
			continue;
		}
		whyf(c, "its shape is computed from a split tensor's shape");
		c->hard = c->in[0].kind != SH_S;
		return all_whole(c);
	}
	if (ob < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	c->out[0] = c->raw[0] = mk_s(ob, c->in[0].kind == SH_S ? c->in[0].sect : 0);
}

static void rule_constant_of_shape(struct nctx *c)
{
	const struct tpf_value *sv = c->n->inputs[0];
	const struct sh_fact *fs = full(c, sv);
	int64_t loc[SH_MAX_VALS];
	int nl, split = -1;

	if (fs->nvals < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	nl = local_vals(c->p, sv, loc, 0);
	if (nl != fs->nvals) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	for (int j = 0; j < nl; j++) {
		if (loc[j] == fs->vals[j])
			continue;
		int64_t whole;
		if (split < 0 && !__builtin_mul_overflow(loc[j], (int64_t)c->s->W, &whole) &&
		    whole == fs->vals[j]) {
			split = j;
			continue;
		}
		whyf(c, "its shape is computed from a split tensor's shape");
		c->hard = 1;
		return all_whole(c);
	}
	c->out[0] = c->raw[0] = split < 0 ? SH_R_ : mk_s(split, 0);
}

/* Slice: along the split axis only whole sections (their rank parts). */
static void rule_slice(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0];
	const struct sh_fact *fx = full(c, x);
	int r = fx->rank, a, opset_inputs = c->ni >= 3;
	int64_t st[TPF_MAX_RANK], en[TPF_MAX_RANK], sp[TPF_MAX_RANK];
	int ax[TPF_MAX_RANK], k = 0, sliced = -1;

	if (c->in[0].kind != SH_S)
		return rule_unary(c, 1);
	if (r < 0)
		return rule_default(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return rule_default(c);
	a = c->in[0].axis;
	/* the parameters, original */
	{
		const struct sh_fact *in[5] = {fx, NULL, NULL, NULL, NULL};
		for (size_t i = 1; i < c->ni && i < 5; i++)
			in[i] = c->n->inputs[i] ? full(c, c->n->inputs[i]) : NULL;
		if (sh_slice_params(c->n, in, r, TPF_MAX_RANK, st, en, sp, ax, &k))
			goto unknown;
	}
	for (int i = 0; i < k; i++)
		if (ax[i] == a)
			sliced = i;
	{
		/* every other sliced axis keeps its bounds in the rank graph */
		int64_t lst[TPF_MAX_RANK], len[TPF_MAX_RANK];
		if (opset_inputs) {
			if (local_vals(c->p, c->n->inputs[1], lst, 0) != k ||
			    local_vals(c->p, c->n->inputs[2], len, 0) != k)
				goto unknown;
		} else {
			memcpy(lst, st, (size_t)k * 8);
			memcpy(len, en, (size_t)k * 8);
		}
		for (int i = 0; i < k; i++) {
			int64_t f1, n1, f2, n2, d = fx->dims[ax[i]];
			if (i == sliced)
				continue;
			sh_slice_range(st[i], en[i], sp[i], d, &f1, &n1);
			sh_slice_range(lst[i], len[i], sp[i], d, &f2, &n2);
			if (f1 != f2 || n1 != n2) {
				whyf(c, "its bounds on axis %d are computed from a split tensor's shape",
				     ax[i]);
				return all_whole(c);
			}
		}
		if (sliced < 0) {
			c->out[0] = c->raw[0] = c->in[0];
			return;
		}
		if (outer_of(c->in[0]) > 1)
			goto across;
		{
			int64_t F = fx->dims[a], first, cnt, lf, lc, off = 0, W = c->s->W;
			const struct sh_sections *sec = sh_sect(c->s, c->in[0].sect);
			struct sh_sections one = {.n = 1, .size = {F}}, sub = {0};
			int i0 = -1, i1 = -1;
			if (F < 0 || sp[sliced] != 1)
				goto across;
			if (!sec)
				sec = &one;
			sh_slice_range(st[sliced], en[sliced], 1, F, &first, &cnt);
			/* the sections it covers */
			for (int i = 0; i < sec->n; i++) {
				if (off == first)
					i0 = i;
				off += sec->size[i];
				if (i0 >= 0 && off == first + cnt) {
					i1 = i;
					break;
				}
			}
			if (i0 < 0 || i1 < 0)
				goto across;
			{
				int64_t lo = 0, hi;
				for (int i = 0; i < i0; i++)
					lo += sec->size[i] / W;
				hi = lo;
				for (int i = i0; i <= i1; i++) {
					hi += sec->size[i] / W;
					sub.size[sub.n++] = sec->size[i];
				}
				sh_slice_range(lst[sliced], len[sliced], 1, F / W, &lf, &lc);
				if (lf != lo || lc != hi - lo) {
					/* rewrite literal bounds */
					if (!opset_inputs) {
						if (lf != lo)
							add_edit(c, -1, "starts", sliced, lo);
						if (lf + lc != hi)
							add_edit(c, -1, "ends", sliced, hi);
					} else {
						int ok = 1;
						if (lf != lo)
							ok &= need_elem(c, 1, sliced, st[sliced], lst[sliced], lo);
						if (ok && lf + lc != hi && !(hi == F / W && len[sliced] >= F))
							ok &= need_elem(c, 2, sliced, en[sliced], len[sliced], hi);
						if (!ok) {
							whyf(c, "its bounds cannot be made the local section bounds");
							return all_whole(c);
						}
					}
				}
			}
			c->out[0] = c->raw[0] = mk_s(a, sh_sect_intern(c->s, &sub));
			return;
		}
	}
unknown:
	whyf(c, "its bounds are unknown");
	return all_whole(c);
across:
	whyf(c, "it cuts across the split of axis %d", a);
	return all_whole(c);
}

static void rule_split(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0];
	const struct sh_fact *fx = full(c, x);
	int r = fx->rank, sa, a;
	int64_t sizes[256];
	size_t k = c->no;
	const struct sh_sections *sec;
	struct sh_sections one;

	if (c->in[0].kind == SH_P) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_P_;
		return;
	}
	if (c->in[0].kind != SH_S || r < 0)
		return c->in[0].kind == SH_S ? rule_default(c) : rule_unary(c, 1);
	sa = axis_attr(c->n, "axis", 0, r);
	a = c->in[0].axis;
	if (sa < 0)
		return rule_default(c);
	if (sa != a) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = c->in[0];
		return;
	}
	if (outer_of(c->in[0]) > 1) {
		whyf(c, "its pieces cut a split within rows");
		return all_whole(c);
	}
	if (k > 256 || fx->dims[a] < 0)
		return rule_default(c);
	/* the pieces' sizes, original */
	if (c->ni > 1 && c->n->inputs[1]) {
		const struct sh_fact *fs = full(c, c->n->inputs[1]);
		if (fs->nvals != (int)k)
			return rule_default(c);
		memcpy(sizes, fs->vals, k * 8);
	} else if (tpf_node_attr(c->n, "split")) {
		const struct tpf_attr *sa2 = tpf_node_attr(c->n, "split");
		if (sa2->n != k)
			return rule_default(c);
		memcpy(sizes, sa2->ints, k * 8);
	} else {
		int64_t F = fx->dims[a], each = (F + (int64_t)k - 1) / (int64_t)k;
		for (size_t j = 0; j < k; j++)
			sizes[j] = j + 1 < k ? each : F - each * (int64_t)(k - 1);
	}
	sec = sh_sect(c->s, c->in[0].sect);
	one.n = 1;
	one.size[0] = fx->dims[a];
	if (!sec)
		sec = &one;
	{
		int si = 0;
		int equal_local = 1;
		int64_t lsz[256];
		for (size_t j = 0; j < k; j++) {
			struct sh_sections sub = {0};
			int64_t need = sizes[j];
			while (need > 0 && si < sec->n && sub.n < SH_MAX_SECT) {
				if (sec->size[si] > need)
					break;
				need -= sec->size[si];
				sub.size[sub.n++] = sec->size[si++];
			}
			if (need) {
				whyf(c, "its pieces cut across the split sections");
				return all_whole(c);
			}
			lsz[j] = sizes[j] / c->s->W;
			if (j && lsz[j] != lsz[0])
				equal_local = 0;
			c->out[j] = c->raw[j] = mk_s(a, sh_sect_intern(c->s, &sub));
		}
		if (c->ni > 1 && c->n->inputs[1]) {
			int64_t loc[SH_MAX_VALS];
			if (local_vals(c->p, c->n->inputs[1], loc, 0) != (int)k)
				return rule_default(c);
			for (size_t j = 0; j < k; j++)
				if (!need_elem(c, 1, (int)j, sizes[j], loc[j], lsz[j])) {
					whyf(c, "its split sizes cannot be made local");
					return all_whole(c);
				}
		} else if (tpf_node_attr(c->n, "split")) {
			for (size_t j = 0; j < k; j++)
				add_edit(c, -1, "split", (int)j, lsz[j]);
		} else if (!equal_local) {
			whyf(c, "its equal pieces are not equal locally");
			return all_whole(c);
		}
	}
}

static void rule_concat(struct nctx *c)
{
	int ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int ca = ro >= 0 ? axis_attr(c->n, "axis", 0, ro) : -1;
	int target = -1, tsect = 0;
	size_t np = 0;

	if (ca < 0)
		return rule_default(c);
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == SH_P)
			np++;
	if (np) {
		if (np == c->ni) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		reduce_partials(c);
	}
	target = first_split(c, &tsect);
	if (target < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (target != ca) {
		int64_t d = -1;
		struct sh first = {0};
		for (size_t i = 0; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind == SH_S) {
				first = c->in[i];
				break;
			}
		if (outer_of(first) > 1) {
			for (size_t i = 0; i < c->ni; i++)
				if (c->n->inputs[i] && !sh_eq(c->in[i], first)) {
					whyf(c, "a split within rows meets another operand");
					return all_whole(c);
				}
			c->out[0] = c->raw[0] = first;
			return;
		}
		for (size_t i = 0; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind == SH_S) {
				d = vdim(c, c->n->inputs[i], target);
				break;
			}
		for (size_t i = 0; i < c->ni; i++) {
			const struct tpf_value *v = c->n->inputs[i];
			if (!v || sh_eq(c->in[i], mk_s(target, tsect)))
				continue;
			if (!can_split(c, v, target, tsect, d)) {
				whyf(c, "operand '%s' cannot be split like the others", v->name);
				return all_whole(c);
			}
			c->want[i] = mk_s(target, tsect);
		}
		c->out[0] = c->raw[0] = mk_s(target, tsect);
		return;
	}
	/* concatenation along the split axis: the operands are sections */
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && outer_of(c->in[i]) > 1) {
			whyf(c, "a split within rows meets a concatenation along it");
			return all_whole(c);
		}
	{
		struct sh_sections out = {0};
		for (size_t i = 0; i < c->ni; i++) {
			const struct tpf_value *v = c->n->inputs[i];
			int64_t d;
			const struct sh_sections *sec;
			if (!v)
				continue;
			d = vdim(c, v, ca);
			if (d <= 0)
				continue; /* an empty operand */
			if (c->in[i].kind == SH_S && c->in[i].axis == ca) {
				sec = sh_sect(c->s, c->in[i].sect);
			} else if (d % c->s->W == 0) {
				c->want[i] = mk_s(ca, 0);
				sec = NULL;
			} else {
				whyf(c, "operand '%s' of the concatenation cannot be split", v->name);
				return all_whole(c);
			}
			if (sec) {
				for (int j = 0; j < sec->n && out.n < SH_MAX_SECT; j++)
					out.size[out.n++] = sec->size[j];
			} else if (out.n < SH_MAX_SECT) {
				out.size[out.n++] = d;
			} else {
				return all_whole(c);
			}
		}
		c->out[0] = c->raw[0] = mk_s(ca, sh_sect_intern(c->s, &out));
	}
}

static void rule_gather(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *ix = c->n->inputs[1];
	int r = frank(c, x), ri = frank(c, ix);
	int g = r >= 0 ? axis_attr(c->n, "axis", 0, r) : -1;

	if (g < 0 || ri < 0)
		return rule_default(c);
	if (c->in[1].kind == SH_P)
		reduce_partials(c);
	if (c->in[0].kind == SH_P) {
		if (c->in[1].kind == SH_R) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		reduce_partials(c);
	}
	if (c->in[0].kind == SH_S) {
		int a = c->in[0].axis;
		if (c->in[1].kind == SH_S)
			c->want[1] = SH_R_;
		if (a == g) {
			whyf(c, "Gather picks along the split axis %d", a);
			return all_whole(c);
		}
		c->out[0] = c->raw[0] = on_axis(c->in[0], a < g ? a : a - 1 + ri);
		return;
	}
	if (c->in[1].kind == SH_S) {
		c->out[0] = c->raw[0] = on_axis(c->in[1], g + c->in[1].axis);
		return;
	}
	c->out[0] = c->raw[0] = SH_R_;
}

/* vocab-parallel embedding: a Gather of a constant table along axis 0 */
static void rule_embedding(struct nctx *c)
{
	c->want[0] = mk_s(0, 0);
	c->raw[0] = SH_P_;
	c->out[0] = SH_R_; /* reduced right after the masked lookup, as Megatron does */
}

static int is_embedding(const struct nctx *c)
{
	const struct tpf_tensor *t;
	if (!c->s->vocab_parallel || !sh_is(c->n, "Gather") || c->ni != 2)
		return 0;
	t = tpf_value_constant(c->n->inputs[0]);
	return t && t->rank == 2 && t->dims[0] % c->s->W == 0 &&
	       tpf_node_attr_int(c->n, "axis", 0) == 0 && c->in[0].kind == SH_R &&
	       c->in[1].kind == SH_R && tpf_dtype_is_float(t->dtype);
}


/* Gemm: Y = alpha * A' B' + beta * C, A' and B' 2-D, transposed by
 * transA / transB. */
static void rule_gemm(struct nctx *c)
{
	struct tpf_value *A = c->n->inputs[0], *B = c->n->inputs[1];
	struct tpf_value *C = c->ni > 2 ? c->n->inputs[2] : NULL;
	int ta = (int)tpf_node_attr_int(c->n, "transA", 0), tb = (int)tpf_node_attr_int(c->n, "transB", 0);
	int ak = ta ? 0 : 1, am = ta ? 1 : 0, bk = tb ? 1 : 0, bn = tb ? 0 : 1;
	int dec = c->s->decision[c->n->id];
	struct sh a, b;

	if (frank(c, A) != 2 || frank(c, B) != 2 || c->no != 1)
		return rule_default(c);
	reduce_partials(c);
	if (C && c->in[2].kind != SH_R)
		c->want[2] = SH_R_;
	a = c->in[0];
	b = c->in[1];
	if (a.kind == SH_R && b.kind == SH_R) {
		if (dec == DEC_COLUMN || dec == DEC_COLUMN_GATHER) {
			int sect = c->s->dec_sect[c->n->id];
			int64_t N = vdim(c, B, bn);
			c->want[1] = mk_s(bn, sect);
			if (C && frank(c, C) >= 1 && vdim(c, C, frank(c, C) - 1) == N) {
				if (!can_split(c, C, frank(c, C) - 1, sect, N))
					return rule_default(c);
				c->want[2] = mk_s(frank(c, C) - 1, sect);
			}
			c->raw[0] = mk_s(1, sect);
			c->out[0] = dec == DEC_COLUMN_GATHER ? SH_R_ : c->raw[0];
			return;
		}
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (a.kind == SH_S && a.axis == ak) {
		if (C) {
			whyf(c, "a row-parallel Gemm would add its bias on every rank");
			return all_whole(c);
		}
		if (!(b.kind == SH_S && b.axis == bk && b.sect == a.sect)) {
			if (!can_split(c, B, bk, a.sect, vdim(c, A, ak))) {
				whyf(c, "its weight's contraction dim cannot be split like its input");
				return all_whole(c);
			}
			c->want[1] = mk_s(bk, a.sect);
		}
		return out_partial_rows(c, A);
	}
	if (a.kind == SH_S && a.axis == am && b.kind == SH_R) {
		if (C && frank(c, C) == 2 && vdim(c, C, 0) > 1) {
			if (!can_split(c, C, 0, a.sect, vdim(c, A, am)))
				return rule_default(c);
			c->want[2] = mk_s(0, a.sect);
		}
		c->out[0] = c->raw[0] = mk_s(0, a.sect);
		return;
	}
	if (a.kind == SH_R && b.kind == SH_S && b.axis == bn) {
		if (C && frank(c, C) >= 1 && vdim(c, C, frank(c, C) - 1) > 1) {
			if (!can_split(c, C, frank(c, C) - 1, b.sect, vdim(c, B, bn)))
				return rule_default(c);
			c->want[2] = mk_s(frank(c, C) - 1, b.sect);
		}
		c->out[0] = c->raw[0] = mk_s(1, b.sect);
		return;
	}
	rule_default(c);
}

/* Conv with the channels split: groups of channels stay whole on a rank
 * (depthwise convolutions, whose groups are single channels), the weight
 * and bias follow, `group` becomes the rank's count. */
static void rule_conv(struct nctx *c)
{
	struct tpf_value *X = c->n->inputs[0], *Wt = c->n->inputs[1];
	struct tpf_value *Bi = c->ni > 2 ? c->n->inputs[2] : NULL;
	int64_t group = tpf_node_attr_int(c->n, "group", 1), C, M, cpg, mpc;
	const struct sh_sections *sec;
	struct sh_sections one, wsec = {0};
	int64_t W = c->s->W, off = 0;

	reduce_partials(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return rule_default(c);
	if (c->in[0].kind != SH_S) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (c->in[0].axis != 1) {
		if (c->in[0].axis == 0) { /* batch */
			c->out[0] = c->raw[0] = c->in[0];
			return;
		}
		whyf(c, "Conv slides over the split axis %d", c->in[0].axis);
		return all_whole(c);
	}
	C = vdim(c, X, 1);
	M = vdim(c, Wt, 0);
	if (C <= 0 || M <= 0 || group <= 0 || C % group || M % group || group % W) {
		whyf(c, "its %" PRId64 " groups cannot be split %" PRId64 " ways", group, W);
		return all_whole(c);
	}
	cpg = C / group;
	mpc = M / C ? M / C : 0;
	sec = sh_sect(c->s, c->in[0].sect);
	if (!sec) {
		one.n = 1;
		one.size[0] = C;
		sec = &one;
	}
	wsec.n = sec->n;
	for (int j = 0; j < sec->n; j++) {
		if (off % cpg || (sec->size[j] / W) % cpg || (M * sec->size[j]) % C) {
			whyf(c, "its channel groups straddle the split");
			return all_whole(c);
		}
		wsec.size[j] = M * sec->size[j] / C;
		off += sec->size[j];
	}
	(void)mpc;
	{
		int ws = sh_sect_intern(c->s, &wsec);
		if (ws < 0 || !can_split(c, Wt, 0, ws, M))
			return rule_default(c);
		c->want[1] = mk_s(0, ws);
		if (Bi) {
			if (!can_split(c, Bi, 0, ws, M))
				return rule_default(c);
			c->want[2] = mk_s(0, ws);
		}
		add_edit(c, -1, "group", -1, group / W);
		c->out[0] = c->raw[0] = mk_s(1, ws);
	}
}

/* Pad: no padding along the split axis. */
static void rule_pad(struct nctx *c)
{
	int r = frank(c, c->n->inputs[0]), a;
	int64_t pads[2 * TPF_MAX_RANK], axes[TPF_MAX_RANK];
	int np = -1, na = -1;

	if (c->in[0].kind != SH_S)
		return c->in[0].kind == SH_P ? (reduce_partials(c), rule_pad(c)) : rule_unary(c, 0);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return rule_default(c);
	a = c->in[0].axis;
	if (c->ni > 1 && c->n->inputs[1]) {
		const struct sh_fact *f = full(c, c->n->inputs[1]);
		if (f->nvals < 0 || f->nvals > 2 * TPF_MAX_RANK)
			return rule_default(c);
		memcpy(pads, f->vals, (size_t)f->nvals * sizeof(int64_t));
		np = f->nvals;
	} else {
		const struct tpf_attr *pa = tpf_node_attr(c->n, "pads");
		if (!pa || pa->n > 2 * TPF_MAX_RANK)
			return rule_default(c);
		memcpy(pads, pa->ints, pa->n * sizeof(int64_t));
		np = (int)pa->n;
	}
	if (c->ni > 3 && c->n->inputs[3]) {
		const struct sh_fact *f = full(c, c->n->inputs[3]);
		if (f->nvals < 0 || 2 * f->nvals != np)
			return rule_default(c);
		for (int i = 0; i < f->nvals; i++)
			axes[i] = f->vals[i] < 0 ? f->vals[i] + r : f->vals[i];
		na = f->nvals;
	} else {
		if (np != 2 * r)
			return rule_default(c);
		for (int i = 0; i < r; i++)
			axes[i] = i;
		na = r;
	}
	for (int i = 0; i < na; i++)
		if (axes[i] == a && (pads[i] || pads[i + na])) {
			whyf(c, "Pad pads the split axis %d", a);
			return all_whole(c);
		}
	c->out[0] = c->raw[0] = c->in[0];
}

/* ScatterND: the index tuples address the leading k axes; a split after
 * them passes through, the updates split alike. */
static void rule_scatter_nd(struct nctx *c)
{
	struct tpf_value *D = c->n->inputs[0], *I = c->n->inputs[1], *U = c->n->inputs[2];
	int rd = frank(c, D), ri = frank(c, I), ru = frank(c, U);
	int64_t k = ri > 0 ? vdim(c, I, ri - 1) : -1;
	int a = -1, sect = 0, ua;

	reduce_partials(c);
	if (rd < 0 || ri < 1 || ru < 0 || k < 0 || c->in[1].kind != SH_R)
		return rule_default(c);
	if (c->in[0].kind == SH_S) {
		a = c->in[0].axis;
		sect = c->in[0].sect;
	} else if (c->in[2].kind == SH_S) {
		a = c->in[2].axis - (ri - 1) + (int)k;
		sect = c->in[2].sect;
	} else {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (a < k || a >= rd) {
		whyf(c, "ScatterND indexes the split axis");
		return all_whole(c);
	}
	ua = (ri - 1) + (a - (int)k);
	if (!sh_eq(c->in[0], mk_s(a, sect))) {
		if (!can_split(c, D, a, sect, vdim(c, D, a)))
			return rule_default(c);
		c->want[0] = mk_s(a, sect);
	}
	if (!sh_eq(c->in[2], mk_s(ua, sect))) {
		if (!can_split(c, U, ua, sect, vdim(c, D, a)))
			return rule_default(c);
		c->want[2] = mk_s(ua, sect);
	}
	c->out[0] = c->raw[0] = mk_s(a, sect);
}

/* ScatterElements / GatherElements: along `axis`; a split elsewhere passes
 * when indices (and updates) have the data's size there. */
static void rule_elements(struct nctx *c, int scatter)
{
	struct tpf_value *D = c->n->inputs[0];
	int r = frank(c, D), ax = r >= 0 ? axis_attr(c->n, "axis", 0, r) : -1;
	int a = -1, sect = 0;

	reduce_partials(c);
	if (ax < 0)
		return rule_default(c);
	a = first_split(c, &sect);
	if (a < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (a == ax) {
		whyf(c, "%s works along the split axis %d", c->n->op_type, a);
		return all_whole(c);
	}
	for (size_t i = 0; i < c->ni; i++) {
		struct tpf_value *v = c->n->inputs[i];
		if (!v || sh_eq(c->in[i], mk_s(a, sect)))
			continue;
		if (!scatter && i == 0 && vdim(c, v, a) == vdim(c, c->n->outputs[0], a) &&
		    !can_split(c, v, a, sect, vdim(c, c->n->inputs[1], a)))
			return rule_default(c);
		if (!can_split(c, v, a, sect, vdim(c, scatter ? D : c->n->inputs[1], a))) {
			whyf(c, "operand '%s' is not as large as the data along the split axis", v->name);
			return all_whole(c);
		}
		c->want[i] = mk_s(a, sect);
	}
	c->out[0] = c->raw[0] = mk_s(a, sect);
}

static int per_tensor(const struct tpf_node *n)
{
	for (size_t i = 1; i < n->n_inputs; i++) {
		if (!n->inputs[i])
			continue;
		if (n->inputs[i]->type.kind == TPF_TYPE_TENSOR && n->inputs[i]->type.shape.rank > 0) {
			int64_t k = tpf_shape_numel(&n->inputs[i]->type.shape);
			if (k != 1)
				return 0;
		} else {
			const struct tpf_tensor *t = tpf_value_constant(n->inputs[i]);
			if (t && tpf_tensor_numel(t) != 1)
				return 0;
			if (!t && n->inputs[i]->type.kind != TPF_TYPE_TENSOR)
				return 0;
		}
	}
	return 1;
}

/* Ops whose rule is one function of the node (rule), or of the node and
 * an int (rule_arg with arg). */
struct op_rule {
	const char *op;
	void (*rule)(struct nctx *c);
	void (*rule_arg)(struct nctx *c, int arg);
	int arg;
};

static const struct op_rule onnx_rules[] = {
	{"MatMul", rule_matmul, NULL, 0},
	{"Gemm", rule_gemm, NULL, 0},
	{"Conv", rule_conv, NULL, 0},
	{"Pad", rule_pad, NULL, 0},
	{"ScatterND", rule_scatter_nd, NULL, 0},
	{"ScatterElements", NULL, rule_elements, 1},
	{"GatherElements", NULL, rule_elements, 0},
	{"Identity", NULL, rule_unary, 1},
	{"Neg", NULL, rule_unary, 1},
	{"Dropout", NULL, rule_unary, 0},
	{"RMSNormalization", NULL, rule_norm, 1},
	{"SimplifiedLayerNormalization", NULL, rule_norm, 1},
	{"LayerNormalization", NULL, rule_norm, 1},
	{"Reshape", rule_reshape, NULL, 0},
	{"Flatten", rule_flatten, NULL, 0},
	{"Transpose", rule_transpose, NULL, 0},
	{"Unsqueeze", NULL, rule_unsqueeze, 0},
	{"Squeeze", NULL, rule_unsqueeze, 1},
	{"Expand", rule_expand, NULL, 0},
	{"ConstantOfShape", rule_constant_of_shape, NULL, 0},
	{"Slice", rule_slice, NULL, 0},
	{"Split", rule_split, NULL, 0},
	{"Concat", rule_concat, NULL, 0},
	{"Gather", rule_gather, NULL, 0},
	{NULL, NULL, NULL, 0},
};

static const struct op_rule ms_rules[] = {
	{"SkipSimplifiedLayerNormalization", NULL, rule_norm, 2},
	{"SkipLayerNormalization", NULL, rule_norm, 2},
	{"SimplifiedLayerNormalization", NULL, rule_norm, 1},
	{NULL, NULL, NULL, 0},
};

/* Runs op's rule from table t: 1, or 0 when t has none. */
static int apply_rule(const struct op_rule *t, struct nctx *c, const char *op)
{
	for (; t->op; t++) {
		if (strcmp(t->op, op))
			continue;
		if (t->rule)
			t->rule(c);
		else
			t->rule_arg(c, t->arg);
		return 1;
	}
	return 0;
}

static void dispatch(struct nctx *c)
{
	struct tpf_node *n = c->n;
	const char *op = n->op_type ? n->op_type : "";
	int onnx = !n->domain || !*n->domain || !strcmp(n->domain, "ai.onnx");
	int ms = n->domain && !strcmp(n->domain, TPF_MS_DOMAIN);
	int r0 = c->ni ? frank(c, n->inputs[0]) : -1;

	if (sh_is(n, "Shape") || sh_is(n, "Size")) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (!c->ni && onnx) { /* Constant and friends */
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (!any_kind(c, SH_S) && !any_kind(c, SH_P) && !sh_is(n, "Reshape") &&
	    !sh_is(n, "Expand") && !sh_is(n, "ConstantOfShape") && !is_embedding(c) &&
	    !((sh_is(n, "MatMul") || sh_is(n, "Gemm")) && c->s->decision[n->id] >= DEC_COLUMN)) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (is_embedding(c))
		return rule_embedding(c);
	for (size_t i = 0; i < c->ni; i++)
		if (n->inputs[i] && outer_of(c->in[i]) > 1 &&
		    (sh_is(n, "Expand") || sh_is(n, "Gemm") || sh_is(n, "Conv") || sh_is(n, "ScatterND") ||
		     sh_is(n, "ScatterElements") || sh_is(n, "GatherElements") || sh_is(n, "Pad"))) {
			whyf(c, "%s does not take a split within rows", op);
			return all_whole(c);
		}
	if (onnx) {
		if (apply_rule(onnx_rules, c, op))
			return;
		if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax") || !strcmp(op, "Hardmax"))
			return rule_along_axis(c, r0 >= 0 ? axis_attr(n, "axis", -1, r0) : -1, 1);
		if (!strcmp(op, "TopK"))
			return rule_along_axis(c, r0 >= 0 ? axis_attr(n, "axis", -1, r0) : -1, 1);
		if (!strcmp(op, "ArgMax") || !strcmp(op, "ArgMin"))
			return rule_along_axis(c, r0 >= 0 ? axis_attr(n, "axis", 0, r0) : -1,
					       (int)tpf_node_attr_int(n, "keepdims", 1));
		if (!strcmp(op, "CumSum")) {
			const struct sh_fact *fa = c->ni > 1 ? full(c, n->inputs[1]) : NULL;
			int ax = -1;
			if (fa && fa->nvals == 1 && r0 > 0)
				ax = (int)(fa->vals[0] < 0 ? fa->vals[0] + r0 : fa->vals[0]);
			if (c->in[0].kind == SH_S && c->in[0].axis != ax && ax >= 0) {
				c->out[0] = c->raw[0] = c->in[0];
				return;
			}
			return rule_default(c);
		}
		if (!strcmp(op, "Trilu")) {
			if (c->in[0].kind == SH_S && r0 >= 2 && c->in[0].axis < r0 - 2) {
				c->out[0] = c->raw[0] = c->in[0];
				return;
			}
			return rule_default(c);
		}
		if (!strncmp(op, "Reduce", 6))
			return rule_reduce(c);
		if ((!strcmp(op, "QuantizeLinear") || !strcmp(op, "DequantizeLinear")) && per_tensor(n))
			return rule_unary(c, 0);
		if (sh_is_broadcast_name(op))
			return rule_broadcast(c);
		if (sh_is_unary_name(op) && c->ni >= 1) {
			if (!strcmp(op, "Clip")) {
				for (size_t i = 1; i < c->ni; i++)
					if (n->inputs[i] && c->in[i].kind != SH_R)
						return rule_default(c);
			}
			return rule_unary(c, 0);
		}
		return rule_default(c);
	}
	if (ms) {
		if (!apply_rule(ms_rules, c, op))
			rule_default(c);
		return;
	}
	if (n->domain && !strcmp(n->domain, TPF_DOMAIN) && !strcmp(op, "RMSNorm"))
		return rule_norm(c, 1);
	rule_default(c);
}

/* ------------------------------------------------------------------ the pass */

static void record_conv(struct sh_prop *p, enum sh_conv_kind kind, struct tpf_node *n, int index,
			struct sh from, struct sh to)
{
	if (!p->final)
		return;
	if (reserve(&p->convs, p->n_convs, &p->cap_convs, sizeof(*p->convs), 64)) {
		p->nomem = 1;
		return;
	}
	p->convs[p->n_convs++] = (struct sh_conv){kind, n, index, from, to};
}

static void add_note(struct sh_prop *p, struct tpf_node *n, const char *text)
{
	if (!p->final)
		return;
	if (reserve(&p->notes, p->n_notes, &p->cap_notes, sizeof(*p->notes), 16)) {
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
 * behind a Cast or DequantizeLinear, not a graph input) and more than one
 * op reads it. */
static int costly_slice(const struct sh_prop *p, const struct tpf_value *v)
{
	const struct tpf_value *x = v;
	for (int hop = 0; x && hop < 4; hop++) {
		const struct tpf_node *q = x->producer;
		if (tpf_value_constant(x) || x->kind != TPF_VALUE_NODE_OUTPUT)
			return 0;
		if (!q || !q->n_inputs || !(sh_is(q, "Cast") || sh_is(q, "Identity") ||
					     sh_is(q, "Transpose") || sh_is(q, "DequantizeLinear")))
			break;
		x = q->inputs[0];
	}
	(void)p;
	{
		/* readers of its data (Shape and Size read only its dims) */
		size_t readers = tpf_value_is_graph_output(v) ? 1 : 0;
		for (size_t i = 0; i < v->n_uses; i++)
			if (!sh_is(v->uses[i].node, "Shape") && !sh_is(v->uses[i].node, "Size"))
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
			whyf(&c, "a subgraph reads '%s', which is not whole", n->implicit_inputs[i]->name);
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
	} else if (p->final && c.why[0] && any_kind(&c, SH_S)) {
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
	void *arrays[] = {p->notes, p->sh, p->taint, p->taint_roots, p->convs, p->edits, p->region_done};
	for (size_t i = 0; i < p->n_notes; i++)
		tpf_free(p->notes[i].text);
	for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++)
		tpf_free(arrays[i]);
	memset(p, 0, sizeof(*p));
}
