/* SPDX-License-Identifier: MIT */
/*
 * The sharder's rules for element-wise ops, reductions, norms and
 * contractions (MatMul, Gemm, Conv, Einsum), with the helpers all rules share
 * (rules.h says what a rule reads and writes).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "rules.h"

/* ------------------------------------------------------------------ node context */

void sh_whyf(struct nctx *c, const char *fmt, ...)
{
	va_list ap;
	if (c->why[0])
		return;
	va_start(ap, fmt);
	vsnprintf(c->why, sizeof(c->why), fmt, ap);
	va_end(ap);
}

static int64_t sh_sect_total(const struct shard *s, int sect, int64_t dim)
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
int sh_can_split(const struct nctx *c, const struct tpf_value *v, int axis, int sect,
		     int64_t size)
{
	int64_t d = vdim(c, v, axis);
	return v && d > 0 && d == size && d % c->s->W == 0 && sh_sect_total(c->s, sect, d) == d;
}

/* All operands whole, all outputs replicated (the fallback). */
void sh_all_whole(struct nctx *c)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i])
			c->want[i] = SH_R_;
	for (size_t j = 0; j < c->no; j++)
		c->out[j] = c->raw[j] = SH_R_;
}

int sh_any_kind(const struct nctx *c, int kind)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == kind)
			return 1;
	return 0;
}

/* Partial operands become whole (AllReduce). */
void sh_reduce_partials(struct nctx *c)
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
static int sh_local_dims(const struct sh_prop *p, const struct tpf_value *v, int64_t *dims)
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
int sh_local_vals(const struct sh_prop *p, const struct tpf_value *v, int64_t *vals,
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
	if (sh_op(n, TPF_OP_SHAPE) || sh_op(n, TPF_OP_SIZE)) {
		struct sh_fact x = *sh_full(p->s, n->inputs[0]);
		const struct sh_fact *px = &x;
		int r = sh_local_dims(p, n->inputs[0], dims);
		if (r < 0)
			return -1;
		x.dims = dims;
		return sh_eval_ints(n, (size_t)v->producer_index, &px, f, p->s->ev.opset, vals);
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
				int k = sh_local_vals(p, n->inputs[i], buf[i], depth + 1);
				if (k != lf[i].nvals)
					return -1;
				lf[i].vals = buf[i];
			}
			pf[i] = &lf[i];
		}
		return sh_eval_ints(n, (size_t)v->producer_index, pf, f, p->s->ev.opset, vals);
	}
}

/* What operand `side` of a scalar Mul or integer Div must become for its
 * result to be `want`: a factor divided by k = result / want, or the
 * numerator of a floor quotient divided by k (floor(floor(a / b) / k) is
 * floor(a / (k b))), so the result is divided by k for any value of the
 * other operand.  The new value, or -1 when n is not such a node or the
 * numbers do not divide. */
int64_t sh_scale_operand(const struct shard *s, const struct tpf_node *n, int side, int64_t want)
{
	const struct sh_fact *f[2];
	int64_t out, k;

	if (!(sh_op(n, TPF_OP_MUL) || sh_op(n, TPF_OP_DIV)) || n->n_inputs != 2 || want <= 0 ||
	    (sh_op(n, TPF_OP_DIV) && side))
		return -1;
	for (int i = 0; i < 2; i++) {
		if (!n->inputs[i])
			return -1;
		f[i] = sh_full(s, n->inputs[i]);
		if (f[i]->nvals != 1 || f[i]->vals[0] <= 0 ||
		    (f[i]->dtype != TPF_DTYPE_INT64 && f[i]->dtype != TPF_DTYPE_INT32))
			return -1;
	}
	if (sh_op(n, TPF_OP_DIV))
		out = f[0]->vals[0] / f[1]->vals[0];
	else if (__builtin_mul_overflow(f[0]->vals[0], f[1]->vals[0], &out))
		return -1;
	if (out <= 0 || out % want)
		return -1;
	k = out / want;
	return f[side]->vals[0] % k ? -1 : f[side]->vals[0] / k;
}

/* Whether element `elem` of v can be made `want` by editing a literal: it
 * comes from a constant through Concat / Unsqueeze / Squeeze / Reshape /
 * Identity / Cast / Flatten, or through scalar Mul and Div that scale it
 * (sh_scale_operand: a group count that a dynamic export computes as
 * (G * seq) // seq). */
int sh_editable(const struct shard *s, const struct tpf_value *v, int elem, int64_t want, int depth)
{
	const struct tpf_node *n;

	if (!v || depth > 16)
		return 0;
	if (tpf_value_constant(v))
		return 1;
	n = v->producer;
	if (!n)
		return 0;
	if (sh_op(n, TPF_OP_CONCAT)) {
		for (size_t i = 0; i < n->n_inputs; i++) {
			int64_t k = sh_numel(sh_full(s, n->inputs[i]));
			if (k < 0)
				return 0;
			if (elem < k)
				return sh_editable(s, n->inputs[i], elem, want, depth + 1);
			elem -= (int)k;
		}
		return 0;
	}
	if (sh_op(n, TPF_OP_UNSQUEEZE) || sh_op(n, TPF_OP_SQUEEZE) || sh_op(n, TPF_OP_RESHAPE) ||
	    sh_op(n, TPF_OP_IDENTITY) || sh_op(n, TPF_OP_CAST) || sh_op(n, TPF_OP_FLATTEN))
		return sh_editable(s, n->inputs[0], elem, want, depth + 1);
	for (int side = 0; side < 2 && elem == 0; side++) {
		int64_t ow = sh_scale_operand(s, n, side, want);
		if (ow > 0 && sh_editable(s, n->inputs[side], 0, ow, depth + 1))
			return 1;
	}
	return 0;
}

void sh_add_edit(struct nctx *c, int index, const char *attr, int elem, int64_t value)
{
	struct sh_prop *p = c->p;
	if (!p->final)
		return;
	if (sh_reserve(&p->edits, p->n_edits, &p->cap_edits, sizeof(*p->edits), 32)) {
		p->nomem = 1;
		return;
	}
	p->edits[p->n_edits++] = (struct sh_elem_edit){c->n, index, attr, elem, value};
}

/* Element `elem` of operand `index` must read `want` in the rank graph
 * (its original value is `orig`, what the rank graph computes `local`).
 * 1: fine (possibly by an edit), 0: cannot. */
int sh_need_elem(struct nctx *c, int index, int elem, int64_t orig, int64_t local,
		     int64_t want)
{
	if (local == want)
		return 1;
	if (local == orig && sh_editable(c->s, c->n->inputs[index], elem, want, 0)) {
		sh_add_edit(c, index, NULL, elem, want);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------------------ rules */

void sh_rule_default(struct nctx *c)
{
	if (sh_any_kind(c, SH_S))
		sh_whyf(c, "%s has no sharding rule for a split operand", c->n->op_type);
	sh_all_whole(c);
}

/* Unary ops: the sharding passes through; partial sums only through the
 * linear ones. */
void sh_rule_unary(struct nctx *c, int linear)
{
	if (!c->n->inputs[0])
		return sh_rule_default(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return sh_rule_default(c);
	if (c->in[0].kind == SH_P && !linear)
		sh_reduce_partials(c);
	for (size_t j = 0; j < c->no; j++)
		c->out[j] = c->raw[j] = c->in[0];
}

/* Numpy broadcasting: operands aligned on the right. */
void sh_rule_broadcast(struct nctx *c, int arith)
{
	int ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int target = -1, tsect = 0;
	int64_t tdim = -1;
	size_t np = 0, nother = 0;
	struct sh tsh = {0};

	if (ro < 0)
		return sh_rule_default(c);
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
		if (arith == TPF_SHARD_SUM && !nother)
			linear = 1;
		else if (arith == TPF_SHARD_PRODUCT && np == 1)
			linear = 1;
		else if (arith == TPF_SHARD_QUOTIENT && np == 1 && c->in[0].kind == SH_P)
			linear = 1;
		if (linear) {
			/* the other operands must be whole */
			for (size_t i = 0; i < c->ni; i++)
				if (c->n->inputs[i] && c->in[i].kind == SH_S) {
					sh_whyf(c, "a partial sum meets a split operand");
					c->want[i] = SH_R_;
				}
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		sh_reduce_partials(c);
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
			sh_whyf(c, "the rank of operand '%s' is unknown", v->name);
			return sh_all_whole(c);
		}
		ia = target - (ro - r);
		d = ia >= 0 ? vdim(c, v, ia) : 1;
		if (c->in[i].kind == SH_S && sh_eq(c->in[i], on_axis(tsh, ia)))
			continue;
		if (d == 1) {
			if (c->in[i].kind == SH_S) {
				sh_whyf(c, "operand '%s' is split on another axis", v->name);
				c->want[i] = SH_R_;
			}
			continue;
		}
		if (d == tdim && outer_of(tsh) == 1 && sh_can_split(c, v, ia, tsect, tdim)) {
			c->want[i] = mk_s(ia, tsect);
			if (c->in[i].kind == SH_S)
				sh_whyf(c, "operand '%s' is split on another axis", v->name);
			continue;
		}
		sh_whyf(c, "operand '%s' has dim %" PRId64 " where the split axis has %" PRId64,
		     v->name, d, tdim);
		return sh_all_whole(c);
	}
	c->out[0] = c->raw[0] = tsh;
}

/* Axis attribute (or default) normalized to rank r; -1 when out of range. */
int sh_axis_attr(const struct tpf_node *n, const char *name, int64_t dflt, int r)
{
	int64_t a = tpf_node_attr_int(n, name, dflt);
	if (a < 0)
		a += r;
	return a < 0 || a >= r ? -1 : (int)a;
}

/* An op working along one axis (Softmax, TopK, CumSum, ArgMax, ...):
 * splits elsewhere pass through. */
void sh_rule_along_axis(struct nctx *c, int axis, int keepdims)
{
	if (axis < 0)
		return sh_rule_default(c);
	sh_reduce_partials(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return sh_rule_default(c);
	if (c->in[0].kind != SH_S) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = SH_R_;
		return;
	}
	if (c->in[0].axis == axis) {
		sh_whyf(c, "%s works along axis %d, the split axis", c->n->op_type, axis);
		return sh_all_whole(c);
	}
	{
		int a = c->in[0].axis;
		if (!keepdims && a > axis)
			a--;
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = on_axis(c->in[0], a);
	}
}

int sh_read_axes(struct nctx *c, int r, int64_t *axes, int *count)
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

void sh_rule_reduce(struct nctx *c, int arith)
{
	int r = frank(c, c->n->inputs[0]);
	int64_t axes[TPF_MAX_RANK];
	int k, keep = (int)tpf_node_attr_int(c->n, "keepdims", 1), sum = arith == TPF_SHARD_SUM;
	int hit = 0, a, shift = 0;

	if (r < 0 || sh_read_axes(c, r, axes, &k))
		return sh_rule_default(c);
	if (!k) {
		if (tpf_node_attr_int(c->n, "noop_with_empty_axes", 0))
			return sh_rule_unary(c, 1);
		for (int i = 0; i < r; i++)
			axes[i] = i;
		k = r;
	}
	if (c->in[0].kind == SH_P) {
		if (sum) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		sh_reduce_partials(c);
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
		sh_whyf(c, "%s reduces over the split axis %d", c->n->op_type, a);
		return sh_all_whole(c);
	}
	c->out[0] = c->raw[0] = on_axis(c->in[0], keep ? a : a - shift);
}

/* Norms over axes [axis, rank): a split before them passes through; a
 * split inside them is gathered, normalized whole and sliced again (the
 * sharded norm form that fuse-sharded-rmsnorm rewrites). */
void sh_rule_norm(struct nctx *c, int n_data)
{
	int r = frank(c, c->n->inputs[0]);
	int axis = r >= 0 ? sh_axis_attr(c->n, "axis", -1, r) : -1;

	if (axis < 0)
		return sh_rule_default(c);
	sh_reduce_partials(c);
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
				    sh_can_split(c, v, x.axis, x.sect, vdim(c, c->n->inputs[0], x.axis)))
					c->want[i] = x;
				else
					return sh_rule_default(c);
			}
		}
		for (size_t i = (size_t)n_data; i < c->ni; i++)
			if (c->n->inputs[i] && c->in[i].kind != SH_R)
				return sh_rule_default(c);
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = x;
		return;
	}
	if (c->in[0].sect || outer_of(c->in[0]) > 1) {
		sh_whyf(c, "the norm spans an axis split by sections or within rows");
		return sh_all_whole(c);
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
		if (sh_op(p, TPF_OP_IDENTITY) || sh_op(p, TPF_OP_CAST) || sh_op(p, TPF_OP_TRANSPOSE)) {
			v = p->inputs[0];
			continue;
		}
		if (sh_op(p, TPF_OP_DEQUANTIZE_LINEAR)) {
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

/* The stacked table a Gather (axis 0) or GatherND (batch_dims 0, one index
 * per row) picks whole rows of: a constant of rank 3 or more (experts'
 * matrices), or of rank 2 picked by a 1-D index (experts' biases), seen
 * through Identity or Cast.  *rows gets the dims the indices put in front. */
const struct tpf_tensor *sh_stacked_table(const struct tpf_node *g, struct tpf_value **base, int *rows)
{
	const struct tpf_tensor *t = NULL;
	struct tpf_value *v;
	int ri;

	if (!g || g->n_inputs != 2 || !g->inputs[0] || !g->inputs[1] || !g->outputs[0])
		return NULL;
	if (sh_op(g, TPF_OP_GATHER)) {
		if (tpf_node_attr_int(g, "axis", 0) != 0)
			return NULL;
	} else if (!sh_op(g, TPF_OP_GATHER_ND) || tpf_node_attr_int(g, "batch_dims", 0) != 0) {
		return NULL;
	}
	for (v = g->inputs[0]; v && !(t = tpf_value_constant(v));) {
		const struct tpf_node *p = v->producer;
		if (!p || !p->n_inputs || !(sh_op(p, TPF_OP_IDENTITY) || sh_op(p, TPF_OP_CAST)))
			return NULL;
		v = p->inputs[0];
	}
	if (!t || t->rank < 2 || g->inputs[1]->type.kind != TPF_TYPE_TENSOR ||
	    g->outputs[0]->type.kind != TPF_TYPE_TENSOR)
		return NULL;
	ri = g->inputs[1]->type.shape.rank;
	if (sh_op(g, TPF_OP_GATHER_ND)) {
		const struct tpf_dim *last = ri > 0 ? &g->inputs[1]->type.shape.dims[ri - 1] : NULL;
		if (!last || last->param || last->value != 1)
			return NULL;
		ri--;
	}
	if (g->outputs[0]->type.shape.rank != ri + t->rank - 1 || (t->rank == 2 && ri != 1))
		return NULL;
	if (base)
		*base = v;
	if (rows)
		*rows = ri;
	return t;
}

/* An expert's weight: operand *side of MatMul n (through Transpose,
 * Identity or Cast) is what a Gather picks out of a stacked [E, ...]
 * table (sh_stacked_table) of matrices: one matrix a token (a 1-D index)
 * or one expert's matrix (a scalar index, a loop over the experts traced);
 * the other operand is not. */
const struct tpf_tensor *sh_expert_weight(const struct tpf_node *n, int *side, struct tpf_value **base)
{
	const struct tpf_tensor *t[2] = {NULL, NULL};
	struct tpf_value *b[2] = {NULL, NULL};

	if (!sh_op(n, TPF_OP_MATMUL) || n->n_inputs != 2 || !n->inputs[0] || !n->inputs[1])
		return NULL;
	for (int i = 0; i < 2; i++) {
		const struct tpf_node *g = n->inputs[i]->producer;
		int rows;
		for (int hop = 0; hop < 3 && g && g->n_inputs && g->inputs[0] &&
				  (sh_op(g, TPF_OP_TRANSPOSE) || sh_op(g, TPF_OP_IDENTITY) || sh_op(g, TPF_OP_CAST));
		     hop++)
			g = g->inputs[0]->producer;
		t[i] = sh_stacked_table(g, &b[i], &rows);
		if (t[i] && (rows > 1 || t[i]->rank < 3))
			t[i] = NULL;
	}
	for (int i = 1; i >= 0; i--)
		if (t[i] && !t[1 - i]) {
			if (side)
				*side = i;
			if (base)
				*base = b[i];
			return t[i];
		}
	return NULL;
}

/* The weight a column split slices: a MatMul's or Gemm's constant B
 * (side 1) or an expert's stacked table (either side). */
const struct tpf_tensor *sh_mm_weight(const struct tpf_node *n, int *side, struct tpf_value **base)
{
	const struct tpf_tensor *t;
	if (!sh_op(n, TPF_OP_MATMUL) && !sh_op(n, TPF_OP_GEMM))
		return NULL;
	if ((t = sh_matmul_weight(n, base))) {
		if (side)
			*side = 1;
		return t;
	}
	return sh_expert_weight(n, side, base);
}

/* The output is partial sums over the contraction (SH_P); a product of
 * a tainted A counts as reaching the rows. */
void sh_out_partial_rows(struct nctx *c, const struct tpf_value *A)
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
int sh_first_split(const struct nctx *c, int *sect)
{
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == SH_S) {
			*sect = c->in[i].sect;
			return c->in[i].axis;
		}
	return -1;
}

void sh_rule_matmul(struct nctx *c)
{
	struct tpf_value *A = c->n->inputs[0], *B = c->n->inputs[1];
	int ra = frank(c, A), rb = frank(c, B), ro;
	struct sh a, b;
	int dec = c->s->decision[c->n->id];

	if (ra < 2 || rb < 2 || c->no != 1)
		return sh_rule_default(c);
	ro = ra > rb ? ra : rb;
	if (c->in[0].kind == SH_P || c->in[1].kind == SH_P)
		sh_reduce_partials(c);
	a = c->in[0];
	b = c->in[1];
	if (outer_of(a) > 1 || outer_of(b) > 1) {
		/* rows of a merged axis: only as batch rows against a broadcast B */
		if (a.kind == SH_S && a.axis < ra - 1 && b.kind == SH_R &&
		    (rb == 2 || a.axis < ra - rb)) {
			c->out[0] = c->raw[0] = on_axis(a, a.axis + ro - ra);
			return;
		}
		sh_whyf(c, "a split within rows meets a MatMul");
		return sh_all_whole(c);
	}
	if (a.kind == SH_R && b.kind == SH_R) {
		if (dec == DEC_COLUMN || dec == DEC_COLUMN_GATHER) {
			int sect = c->s->dec_sect[c->n->id], side = 1;
			/* an expert's [N, K] weight on the left: its rows */
			if (!sh_matmul_weight(c->n, NULL) && sh_expert_weight(c->n, &side, NULL) && !side) {
				c->want[0] = mk_s(ra - 2, sect);
				c->raw[0] = mk_s(ro - 2, sect);
			} else {
				c->want[1] = mk_s(rb - 1, sect);
				c->raw[0] = mk_s(ro - 1, sect);
			}
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
			if (!sh_can_split(c, B, rb - 2, a.sect, k)) {
				sh_whyf(c, "its weight's contraction dim cannot be split like its input");
				return sh_all_whole(c);
			}
			c->want[1] = mk_s(rb - 2, a.sect);
		}
		return sh_out_partial_rows(c, A);
	}
	if (a.kind == SH_S && a.axis == ra - 2) {
		/* rows of A split */
		if (b.kind != SH_R || rb > 2) {
			if (b.kind != SH_R)
				c->want[1] = SH_R_;
			if (rb > 2 && vdim(c, B, rb - 3) > 1 && ra < rb) {
				sh_whyf(c, "a row split meets batched weights");
				return sh_all_whole(c);
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
			} else if (sh_can_split(c, B, jb, a.sect, vdim(c, A, a.axis))) {
				c->want[1] = mk_s(jb, a.sect);
			} else {
				sh_whyf(c, "operand '%s' cannot be split on the batch axis", B->name);
				return sh_all_whole(c);
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
		if (!sh_can_split(c, A, ra - 1, b.sect, vdim(c, B, rb - 2))) {
			sh_whyf(c, "operand '%s' cannot be split on the contraction dim", A->name);
			return sh_all_whole(c);
		}
		c->want[0] = mk_s(ra - 1, b.sect);
		if (sh_expert_weight(c->n, NULL, NULL))
			return sh_out_partial_rows(c, B); /* an expert's down projection */
		c->out[0] = c->raw[0] = SH_P_;
		return;
	}
	{
		int ob = b.axis + ro - rb, ia = ob - (ro - ra);
		int64_t d = ia >= 0 ? vdim(c, A, ia) : 1;
		if (d != 1) {
			if (!sh_can_split(c, A, ia, b.sect, vdim(c, B, b.axis))) {
				sh_whyf(c, "operand '%s' cannot be split on the batch axis", A->name);
				return sh_all_whole(c);
			}
			c->want[0] = mk_s(ia, b.sect);
		}
		c->out[0] = c->raw[0] = mk_s(ob, b.sect);
	}
}

void sh_rule_gemm(struct nctx *c)
{
	struct tpf_value *A = c->n->inputs[0], *B = c->n->inputs[1];
	struct tpf_value *C = c->ni > 2 ? c->n->inputs[2] : NULL;
	int ta = (int)tpf_node_attr_int(c->n, "transA", 0), tb = (int)tpf_node_attr_int(c->n, "transB", 0);
	int ak = ta ? 0 : 1, am = ta ? 1 : 0, bk = tb ? 1 : 0, bn = tb ? 0 : 1;
	int dec = c->s->decision[c->n->id];
	struct sh a, b;

	if (frank(c, A) != 2 || frank(c, B) != 2 || c->no != 1)
		return sh_rule_default(c);
	sh_reduce_partials(c);
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
				if (!sh_can_split(c, C, frank(c, C) - 1, sect, N))
					return sh_rule_default(c);
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
			sh_whyf(c, "a row-parallel Gemm would add its bias on every rank");
			return sh_all_whole(c);
		}
		if (!(b.kind == SH_S && b.axis == bk && b.sect == a.sect)) {
			if (!sh_can_split(c, B, bk, a.sect, vdim(c, A, ak))) {
				sh_whyf(c, "its weight's contraction dim cannot be split like its input");
				return sh_all_whole(c);
			}
			c->want[1] = mk_s(bk, a.sect);
		}
		return sh_out_partial_rows(c, A);
	}
	if (a.kind == SH_S && a.axis == am && b.kind == SH_R) {
		if (C && frank(c, C) == 2 && vdim(c, C, 0) > 1) {
			if (!sh_can_split(c, C, 0, a.sect, vdim(c, A, am)))
				return sh_rule_default(c);
			c->want[2] = mk_s(0, a.sect);
		}
		c->out[0] = c->raw[0] = mk_s(0, a.sect);
		return;
	}
	if (a.kind == SH_R && b.kind == SH_S && b.axis == bn) {
		if (C && frank(c, C) >= 1 && vdim(c, C, frank(c, C) - 1) > 1) {
			if (!sh_can_split(c, C, frank(c, C) - 1, b.sect, vdim(c, B, bn)))
				return sh_rule_default(c);
			c->want[2] = mk_s(frank(c, C) - 1, b.sect);
		}
		c->out[0] = c->raw[0] = mk_s(1, b.sect);
		return;
	}
	sh_rule_default(c);
}

/* Conv with the channels split: groups of channels stay whole on a rank
 * (depthwise convolutions, whose groups are single channels), the weight
 * and bias follow, `group` becomes the rank's count. */
void sh_rule_conv(struct nctx *c)
{
	struct tpf_value *X = c->n->inputs[0], *Wt = c->n->inputs[1];
	struct tpf_value *Bi = c->ni > 2 ? c->n->inputs[2] : NULL;
	int64_t group = tpf_node_attr_int(c->n, "group", 1), C, M, cpg, mpc;
	const struct sh_sections *sec;
	struct sh_sections one, wsec = {0};
	int64_t W = c->s->W, off = 0;

	sh_reduce_partials(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return sh_rule_default(c);
	if (c->in[0].kind != SH_S) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (c->in[0].axis != 1) {
		if (c->in[0].axis == 0) { /* batch */
			c->out[0] = c->raw[0] = c->in[0];
			return;
		}
		sh_whyf(c, "Conv slides over the split axis %d", c->in[0].axis);
		return sh_all_whole(c);
	}
	C = vdim(c, X, 1);
	M = vdim(c, Wt, 0);
	if (C <= 0 || M <= 0 || group <= 0 || C % group || M % group || group % W) {
		sh_whyf(c, "its %" PRId64 " groups cannot be split %" PRId64 " ways", group, W);
		return sh_all_whole(c);
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
			sh_whyf(c, "its channel groups straddle the split");
			return sh_all_whole(c);
		}
		wsec.size[j] = M * sec->size[j] / C;
		off += sec->size[j];
	}
	(void)mpc;
	{
		int ws = sh_sect_intern(c->s, &wsec);
		if (ws < 0 || !sh_can_split(c, Wt, 0, ws, M))
			return sh_rule_default(c);
		c->want[1] = mk_s(0, ws);
		if (Bi) {
			if (!sh_can_split(c, Bi, 0, ws, M))
				return sh_rule_default(c);
			c->want[2] = mk_s(0, ws);
		}
		sh_add_edit(c, -1, "group", -1, group / W);
		c->out[0] = c->raw[0] = mk_s(1, ws);
	}
}

/* Pad: no padding along the split axis. */
void sh_rule_pad(struct nctx *c)
{
	int r = frank(c, c->n->inputs[0]), a;
	int64_t pads[2 * TPF_MAX_RANK], axes[TPF_MAX_RANK];
	int np = -1, na = -1;

	if (c->in[0].kind != SH_S)
		return c->in[0].kind == SH_P ? (sh_reduce_partials(c), sh_rule_pad(c)) : sh_rule_unary(c, 0);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return sh_rule_default(c);
	a = c->in[0].axis;
	if (c->ni > 1 && c->n->inputs[1]) {
		const struct sh_fact *f = full(c, c->n->inputs[1]);
		if (f->nvals < 0 || f->nvals > 2 * TPF_MAX_RANK)
			return sh_rule_default(c);
		memcpy(pads, f->vals, (size_t)f->nvals * sizeof(int64_t));
		np = f->nvals;
	} else {
		const struct tpf_attr *pa = tpf_node_attr(c->n, "pads");
		if (!pa || pa->n > 2 * TPF_MAX_RANK)
			return sh_rule_default(c);
		memcpy(pads, pa->ints, pa->n * sizeof(int64_t));
		np = (int)pa->n;
	}
	if (c->ni > 3 && c->n->inputs[3]) {
		const struct sh_fact *f = full(c, c->n->inputs[3]);
		if (f->nvals < 0 || 2 * f->nvals != np)
			return sh_rule_default(c);
		for (int i = 0; i < f->nvals; i++)
			axes[i] = f->vals[i] < 0 ? f->vals[i] + r : f->vals[i];
		na = f->nvals;
	} else {
		if (np != 2 * r)
			return sh_rule_default(c);
		for (int i = 0; i < r; i++)
			axes[i] = i;
		na = r;
	}
	for (int i = 0; i < na; i++)
		if (axes[i] == a && (pads[i] || pads[i + na])) {
			sh_whyf(c, "Pad pads the split axis %d", a);
			return sh_all_whole(c);
		}
	c->out[0] = c->raw[0] = c->in[0];
}

/* --- ScatterND of a coordinate grid (a slice assignment) ------------------------- */

/* TorchScript writes `buf[..., lo:hi] = u` on a buffer D as ScatterND(D,
 * grid, u), the index grid built from D's own shape: for each axis j a
 * Range(0, Shape(D)[j]) (sliced to [lo, hi) on the last), reshaped onto
 * grid axis j, expanded to the grid's shape (read off a broadcast Add of
 * them) and concatenated along a new last axis.  With D split on axis a,
 * the rank graph's Range over axis a counts D's local rows: the grid holds
 * local coordinates, split along grid axis a like D and u, which is what
 * the local ScatterND needs.  sh_rule_range splits such a Range (its values
 * are local, not a slice of the whole: so only where every path from it
 * ends in a Shape or in the indices of a ScatterND into D), and
 * sh_rule_scatter_nd takes the split grid when its parts are that
 * construction. */

/* v's producer through Cast / Identity, or NULL. */
static const struct tpf_node *producer_thru_casts(const struct tpf_value *v)
{
	const struct tpf_node *n = v ? v->producer : NULL;
	while (n && (sh_op(n, TPF_OP_CAST) || sh_op(n, TPF_OP_IDENTITY)) && n->n_inputs)
		n = n->inputs[0] ? n->inputs[0]->producer : NULL;
	return n;
}

/* Whether v is Shape(D)[j] (through casts), D the given value (or any,
 * when D is NULL: then *Dp is set); *jp gets j. */
static int is_dim_of(const struct shard *s, const struct tpf_value *v,
		     const struct tpf_value **Dp, int64_t *jp)
{
	const struct tpf_node *g = producer_thru_casts(v), *sh;
	if (!g || !sh_op(g, TPF_OP_GATHER) || g->n_inputs != 2 || !g->inputs[0] ||
	    !g->inputs[1] || !tpf_value_constant(g->inputs[1]) ||
	    tpf_node_attr_int(g, "axis", 0) != 0 || sh_full(s, g->inputs[1])->nvals != 1)
		return 0;
	int64_t j = sh_full(s, g->inputs[1])->vals[0];
	sh = g->inputs[0]->producer;
	if (!sh || !sh_op(sh, TPF_OP_SHAPE) || !sh->n_inputs || !sh->inputs[0] ||
	    tpf_node_attr(sh, "start") || tpf_node_attr(sh, "end"))
		return 0;
	int r = sh_full(s, sh->inputs[0])->rank;
	if (j < 0 && r > 0)
		j += r;
	if (*Dp && *Dp != sh->inputs[0])
		return 0;
	*Dp = sh->inputs[0];
	*jp = j;
	return 1;
}

/* Whether every path from v ends in a Shape or in the indices of a
 * ScatterND into D, through the ops that build a coordinate grid. */
static int grid_uses_only(const struct tpf_value *v, const struct tpf_value *D, int depth)
{
	if (!v || depth > 24 || tpf_value_is_graph_output(v))
		return 0;
	for (size_t i = 0; i < v->n_uses; i++) {
		const struct tpf_node *u = v->uses[i].node;
		int idx = v->uses[i].index;
		if (sh_op(u, TPF_OP_SHAPE))
			continue;
		if (sh_op(u, TPF_OP_SCATTER_ND) && idx == 1 && u->inputs[0] == D)
			continue;
		if (!((sh_op(u, TPF_OP_RESHAPE) || sh_op(u, TPF_OP_UNSQUEEZE) ||
		       sh_op(u, TPF_OP_EXPAND)) && idx == 0) &&
		    !sh_op(u, TPF_OP_ADD) && !sh_op(u, TPF_OP_CONCAT))
			return 0;
		if (u->n_outputs != 1 || !grid_uses_only(u->outputs[0], D, depth + 1))
			return 0;
	}
	return 1;
}

/* Range(0, Shape(D)[a], 1) with D split on axis a: the rank graph counts
 * D's local rows (see above).  1 when taken; 0 leaves the Range to the
 * rules of ops without one. */
int sh_rule_range(struct nctx *c)
{
	const struct tpf_value *D = NULL;
	int64_t a, v[3][SH_MAX_VALS];

	if (c->ni != 3)
		return 0;
	for (int i = 0; i < 3; i++)
		if (!c->n->inputs[i] || c->in[i].kind != SH_R ||
		    full(c, c->n->inputs[i])->nvals != 1 ||
		    sh_local_vals(c->p, c->n->inputs[i], v[i], 0) != 1)
			return 0;
	if (v[0][0] != 0 || v[2][0] != 1 || !is_dim_of(c->s, c->n->inputs[1], &D, &a))
		return 0;
	struct sh d = in_sh(c->p, D);
	int64_t whole = full(c, c->n->inputs[1])->vals[0];
	if (d.kind != SH_S || d.axis != a || d.sect || outer_of(d) > 1 ||
	    v[1][0] * c->s->W != whole || !grid_uses_only(c->n->outputs[0], D, 0))
		return 0;
	c->out[0] = c->raw[0] = mk_s(0, 0);
	return 1;
}

/* The coordinate of axis j in a grid part: Unsqueeze(Expand(Reshape(r)))
 * (each step optional), r a Range(0, Shape(D)[j], 1), or a constant Slice of
 * one on the last axis.  The Range over the split axis is split, the
 * others whole. */
static int grid_part_is(const struct nctx *c, const struct tpf_value *part,
			const struct tpf_value *D, int j, int split_axis)
{
	const struct tpf_node *n = part ? part->producer : NULL;
	const struct tpf_value *DD = D;
	int64_t jj;
	for (int hops = 0; n && hops < 4 &&
			   (sh_op(n, TPF_OP_UNSQUEEZE) || sh_op(n, TPF_OP_EXPAND) ||
			    sh_op(n, TPF_OP_RESHAPE));
	     hops++)
		n = n->inputs[0] ? n->inputs[0]->producer : NULL;
	if (n && sh_op(n, TPF_OP_SLICE) && j != split_axis && n->inputs[0])
		n = n->inputs[0]->producer;
	if (!n || !sh_op(n, TPF_OP_RANGE) || n->n_inputs != 3 ||
	    !is_dim_of(c->s, n->inputs[1], &DD, &jj) || jj != j)
		return 0;
	struct sh r = in_sh(c->p, n->outputs[0]);
	return j == split_axis ? r.kind == SH_S : r.kind == SH_R;
}

/* ScatterND(D, grid, u), every element indexed (k = rank D), the grid
 * split on axis a with D: the coordinate grid of D above, so each rank
 * assigns its own rows.  1 when taken. */
static int scatter_nd_grid(struct nctx *c, int rd, int ri, int64_t k)
{
	struct tpf_value *D = c->n->inputs[0], *I = c->n->inputs[1], *U = c->n->inputs[2];
	const struct tpf_node *cat = I->producer;
	int a = c->in[1].axis;

	if (k != rd || ri != rd + 1 || a >= rd || c->in[1].sect || outer_of(c->in[1]) > 1 ||
	    !cat || !sh_op(cat, TPF_OP_CONCAT) || cat->n_inputs != (size_t)k ||
	    sh_axis_attr(cat, "axis", 0, ri) != ri - 1 || c->in[0].kind != SH_S ||
	    c->in[0].axis != a || c->in[0].sect || outer_of(c->in[0]) > 1)
		return 0;
	for (int j = 0; j < rd; j++)
		if (!grid_part_is(c, cat->inputs[j], D, j, a))
			return 0;
	if (!sh_eq(c->in[2], mk_s(a, 0))) {
		if (!sh_can_split(c, U, a, 0, vdim(c, D, a)))
			return 0;
		c->want[2] = mk_s(a, 0);
	}
	c->out[0] = c->raw[0] = mk_s(a, 0);
	return 1;
}

/* ScatterND: the index tuples address the leading k axes; a split after
 * them passes through, the updates split alike. */
void sh_rule_scatter_nd(struct nctx *c)
{
	struct tpf_value *D = c->n->inputs[0], *I = c->n->inputs[1], *U = c->n->inputs[2];
	int rd = frank(c, D), ri = frank(c, I), ru = frank(c, U);
	int64_t k = ri > 0 ? vdim(c, I, ri - 1) : -1;
	int a = -1, sect = 0, ua;

	sh_reduce_partials(c);
	if (rd > 0 && ri > 1 && k > 0 && c->in[1].kind == SH_S) {
		if (scatter_nd_grid(c, rd, ri, k))
			return;
		/* split indices hold local coordinates (sh_rule_range): gathered,
		 * they would not be the whole grid's */
		sh_whyf(c, "its split index grid is not the coordinate grid of its split data");
		c->hard = 1;
		return sh_all_whole(c);
	}
	if (rd < 0 || ri < 1 || ru < 0 || k < 0 || c->in[1].kind != SH_R)
		return sh_rule_default(c);
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
		sh_whyf(c, "ScatterND indexes the split axis");
		return sh_all_whole(c);
	}
	ua = (ri - 1) + (a - (int)k);
	if (!sh_eq(c->in[0], mk_s(a, sect))) {
		if (!sh_can_split(c, D, a, sect, vdim(c, D, a)))
			return sh_rule_default(c);
		c->want[0] = mk_s(a, sect);
	}
	if (!sh_eq(c->in[2], mk_s(ua, sect))) {
		if (!sh_can_split(c, U, ua, sect, vdim(c, D, a)))
			return sh_rule_default(c);
		c->want[2] = mk_s(ua, sect);
	}
	c->out[0] = c->raw[0] = mk_s(a, sect);
}

/* ScatterElements / GatherElements: along `axis`; a split elsewhere passes
 * when indices (and updates) have the data's size there. */
void sh_rule_elements(struct nctx *c, int scatter)
{
	struct tpf_value *D = c->n->inputs[0];
	int r = frank(c, D), ax = r >= 0 ? sh_axis_attr(c->n, "axis", 0, r) : -1;
	int a = -1, sect = 0;

	sh_reduce_partials(c);
	if (ax < 0)
		return sh_rule_default(c);
	a = sh_first_split(c, &sect);
	if (a < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	if (a == ax) {
		sh_whyf(c, "%s works along the split axis %d", c->n->op_type, a);
		return sh_all_whole(c);
	}
	for (size_t i = 0; i < c->ni; i++) {
		struct tpf_value *v = c->n->inputs[i];
		if (!v || sh_eq(c->in[i], mk_s(a, sect)))
			continue;
		if (!scatter && i == 0 && vdim(c, v, a) == vdim(c, c->n->outputs[0], a) &&
		    !sh_can_split(c, v, a, sect, vdim(c, c->n->inputs[1], a)))
			return sh_rule_default(c);
		if (!sh_can_split(c, v, a, sect, vdim(c, scatter ? D : c->n->inputs[1], a))) {
			sh_whyf(c, "operand '%s' is not as large as the data along the split axis", v->name);
			return sh_all_whole(c);
		}
		c->want[i] = mk_s(a, sect);
	}
	c->out[0] = c->raw[0] = mk_s(a, sect);
}

int sh_per_tensor(const struct tpf_node *n)
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

/* ------------------------------------------------------------------ Einsum */

/* The letter of operand i's axis a under e, or 0 when it is an ellipsis
 * dim or repeats within the operand (a diagonal). */
static int einsum_letter(const struct tpf_einsum *e, int i, int a)
{
	int l = e->label[i][a];
	if (e->name[l] == '.')
		return 0;
	for (int k = 0; k < e->rank[i]; k++)
		if (k != a && e->label[i][k] == l)
			return 0;
	return l + 1;
}

/* Einsum with one split letter (the letter of a split operand's axis: the
 * heads of Mamba-2's chunked scan): every operand that has the letter is
 * split on it alike (a whole one sliced), the others stay whole, and the
 * output keeps it split; a letter summed over gathers first. */
void sh_rule_einsum(struct nctx *c)
{
	const char *eq = tpf_node_attr_string(c->n, "equation", NULL);
	struct tpf_einsum e;
	int ranks[TPF_EINSUM_MAX_OPERANDS], split = -1, letter = 0, oa = -1;
	char err[128];

	sh_reduce_partials(c);
	if (!eq || c->ni > TPF_EINSUM_MAX_OPERANDS || c->no != 1 || frank(c, c->n->outputs[0]) < 0)
		return sh_rule_default(c);
	for (size_t i = 0; i < c->ni; i++)
		if (!c->n->inputs[i] || (ranks[i] = frank(c, c->n->inputs[i])) < 0)
			return sh_rule_default(c);
	if (tpf_einsum_parse(eq, (int)c->ni, ranks, &e, err, sizeof(err)))
		return sh_rule_default(c);
	for (size_t i = 0; i < c->ni && split < 0; i++)
		if (c->in[i].kind == SH_S) {
			split = (int)i;
			letter = einsum_letter(&e, (int)i, c->in[i].axis);
		}
	if (split < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	for (int k = 0; k < e.out_rank && letter; k++)
		if (e.out[k] + 1 == letter)
			oa = k;
	if (!letter || oa < 0 || outer_of(c->in[split]) > 1) {
		if (!letter)
			sh_whyf(c, "its split axis is a repeated letter or an ellipsis dim");
		else if (oa < 0)
			sh_whyf(c, "it sums over its split letter '%c'", e.name[letter - 1]);
		else
			sh_whyf(c, "Einsum does not take a split within rows");
		return sh_all_whole(c);
	}
	{
		struct sh x = c->in[split];
		int64_t d = vdim(c, c->n->inputs[split], x.axis);
		for (size_t i = 0; i < c->ni; i++) {
			int a = -1;
			for (int k = 0; k < e.rank[i]; k++)
				if (e.label[i][k] + 1 == letter)
					a = einsum_letter(&e, (int)i, k) ? k : -2;
			if (a == -2) {
				sh_whyf(c, "operand %zu repeats its split letter", i);
				return sh_all_whole(c);
			}
			if (a < 0) {
				if (c->in[i].kind == SH_S) {
					sh_whyf(c, "operand '%s' is split on another letter", c->n->inputs[i]->name);
					c->want[i] = SH_R_;
				}
				continue;
			}
			if (c->in[i].kind == SH_S && sh_eq(c->in[i], on_axis(x, a)))
				continue;
			if (c->in[i].kind != SH_S && d > 1 && vdim(c, c->n->inputs[i], a) == 1)
				continue; /* broadcast along the letter: whole */
			if (!sh_can_split(c, c->n->inputs[i], a, x.sect, d)) {
				sh_whyf(c, "operand '%s' cannot be split like its split letter",
					c->n->inputs[i]->name);
				return sh_all_whole(c);
			}
			if (c->in[i].kind == SH_S)
				sh_whyf(c, "operand '%s' is split on another letter", c->n->inputs[i]->name);
			c->want[i] = mk_s(a, x.sect);
		}
		c->out[0] = c->raw[0] = on_axis(x, oa);
	}
}

/* Ops whose rule is one function of the node (rule), or of the node and
 * an int (sh_rule_arg with arg). */
