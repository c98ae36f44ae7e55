/* SPDX-License-Identifier: MIT */
/*
 * tpfuse shard: one single-device model into W tensor-parallel rank models.
 *
 * The driver (see shard.h for the steps):
 *
 *   prepare    collectives of a world-size-1 export are identities and go,
 *              so do slices that take a whole axis (the "rank part" of a
 *              world of one); shapes are inferred and evaluated;
 *   regions    decomposed RMSNorm chains are found with canonicalize-
 *              rmsnorm's own patterns, so a norm whose axis is split is
 *              gathered and resliced as one (the sharded norm form);
 *   decide     every MatMul with a constant weight whose input is whole is
 *              a column candidate.  In graph order, each is tried: its
 *              output split is propagated through the rest of the graph;
 *              it is kept when that adds no gather and the split reaches a
 *              row-parallel MatMul (attention's q/k/v -> o, an MLP's
 *              gate/up -> down, an expert's), or only graph outputs (an LM
 *              head: gathered right after); otherwise the weight stays
 *              replicated and --explain says what the split met;
 *   rewrite    the final propagation's conversions become collectives and
 *              slices (rewrite.c);
 *   validate   the rank graph is verified, its shapes inferred, and its
 *              concrete dims compared with the plan's.
 *
 * The public calls (tpf_shard_*) and the pass `shard` (tpf_pass_shard: the
 * world size and rank from the pass context) share these steps.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"
#include "shard.h"

struct tpf_shard {
	struct shard s;
	struct sh_prop fin;
	struct sh_rank_data *rd;
	struct tpf_shard_stats stats;
	char **reasons; /* by node id: why a candidate got its decision */
	char **weights; /* by node id: the weight's name and full shape */
	int64_t *full_n; /* by node id: the weight's full output dim */
	struct tpf_shard_options opt;
};

/* A MatMul or Gemm: the ops whose constant weights are split. */
static int is_mm(const struct tpf_node *n)
{
	return sh_op(n, TPF_OP_MATMUL) || sh_op(n, TPF_OP_GEMM);
}

/* ------------------------------------------------------------------ preparation */

/* A com.microsoft collective (a fused op that also reduces does more). */
static int is_collective(const struct tpf_node *n)
{
	return tpf_op_has_trait(n->op, TPF_OP_TRAIT_COLLECTIVE) &&
	       !tpf_op_has_trait(n->op, TPF_OP_TRAIT_FUSED);
}

/* Users of `from` read `to`; a graph output keeps its name. */
static enum tpf_status bypass(struct tpf_graph *g, struct tpf_node *n, struct tpf_value *from,
			      struct tpf_value *to)
{
	int out = tpf_value_is_graph_output(from);
	const char *name = from->name;
	enum tpf_status st;

	if (out && (to->kind != TPF_VALUE_NODE_OUTPUT || tpf_value_is_graph_output(to)))
		return TPF_ERR_UNSUPPORTED;
	if ((st = tpf_value_replace_uses(from, to)))
		return st;
	if ((st = tpf_graph_erase_node(g, n)))
		return st;
	if (out) {
		if ((st = tpf_value_rename(to, name)))
			return st;
	}
	return TPF_OK;
}

static enum tpf_status drop_world1_collectives(struct shard *s, size_t *count)
{
	struct tpf_node *n, *nx;
	const char *ws = tpf_model_metadata(s->m, "tp_world_size");
	long world = ws ? strtol(ws, NULL, 10) : 1;

	for (n = s->g->first; n; n = nx) {
		char nb[256];
		nx = n->next;
		if (!is_collective(n))
			continue;
		if (world > 1 || tpf_node_attr_int(n, "group_size", 1) > 1)
			return tpf_diag_fail(s->d, TPF_ERR_UNSUPPORTED,
					     "%s: the model is already tensor-parallel (world size %ld); "
					     "tpfuse shard takes a single-device model",
					     tpf_node_describe(n, nb, sizeof(nb)),
					     world > 1 ? world : (long)tpf_node_attr_int(n, "group_size", 1));
		if (n->n_inputs != 1 || n->n_outputs != 1 || !n->inputs[0] || !n->outputs[0])
			return tpf_diag_fail(s->d, TPF_ERR_UNSUPPORTED, "%s: a collective of %zu tensors",
					     tpf_node_describe(n, nb, sizeof(nb)), n->n_inputs);
		if (bypass(s->g, n, n->outputs[0], n->inputs[0]))
			return tpf_diag_fail(s->d, TPF_ERR_UNSUPPORTED,
					     "%s: cannot remove a world-size-1 collective between a graph input and output",
					     tpf_node_describe(n, nb, sizeof(nb)));
		(*count)++;
	}
	return TPF_OK;
}

/* Slices that take the whole of every axis they cut, and one-piece Splits:
 * identities (a world of one's "rank part"). */
static enum tpf_status drop_noop_slices(struct shard *s, size_t *count)
{
	for (struct tpf_node *n = s->g->first, *nx; n; n = nx) {
		const struct sh_fact *fi, *fo;
		nx = n->next;
		if (!(sh_op(n, TPF_OP_SLICE) || (sh_op(n, TPF_OP_SPLIT) && n->n_outputs == 1)) || !n->inputs[0] ||
		    !n->outputs[0] || !tpf_dtype_is_float(sh_full(s, n->inputs[0])->dtype))
			continue;
		fi = sh_full(s, n->inputs[0]);
		fo = sh_full(s, n->outputs[0]);
		if (fi->rank < 0 || fi->rank != fo->rank)
			continue;
		{
			int same = 1;
			for (int i = 0; i < fi->rank; i++)
				if (fi->dims[i] < 0 || fi->dims[i] != fo->dims[i])
					same = 0;
			if (!same)
				continue;
		}
		if (sh_op(n, TPF_OP_SLICE) && n->n_inputs > 4 && n->inputs[4]) {
			const struct sh_fact *st = sh_full(s, n->inputs[4]);
			int ones = st->nvals >= 0;
			for (int i = 0; i < st->nvals; i++)
				if (st->vals[i] != 1)
					ones = 0;
			if (!ones)
				continue;
		}
		if (bypass(s->g, n, n->outputs[0], n->inputs[0]) == TPF_OK)
			(*count)++;
	}
	return TPF_OK;
}

/* ------------------------------------------------------------------ norm regions */

static int region_add(struct shard *s, struct sh_region *r)
{
	if (s->n_regions == s->cap_regions) {
		size_t cap = s->cap_regions ? 2 * s->cap_regions : 16;
		struct sh_region *nr = tpf_realloc(s->regions, cap * sizeof(*nr));
		if (!nr)
			return -1;
		s->regions = nr;
		s->cap_regions = cap;
	}
	s->regions[s->n_regions++] = *r;
	return 0;
}

static enum tpf_status find_regions(struct shard *s)
{
	const struct tpf_pattern *const *pats = tpf_pass_canonicalize_rmsnorm.patterns;
	struct tpf_match *m = tpf_malloc(sizeof(*m));
	struct tpf_node *n;

	if (!m)
		return TPF_ERR_NOMEM;
	for (n = s->g->last; n; n = n->prev) {
		if (n->id >= s->n_nodes0 || s->region_of[n->id] >= 0)
			continue;
		for (size_t k = 0; pats && pats[k]; k++) {
			struct sh_region r = {0};
			struct tpf_value *x;
			if (strncmp(pats[k]->name, "decomposed", 10))
				continue;
			if (!tpf_pattern_match(pats[k], NULL, n, m, NULL, 0, NULL))
				continue;
			x = tpf_match_value(m, "x");
			if (!x || !m->root->outputs[0])
				break;
			{
				int taken = 0;
				for (size_t i = 0; i < m->n_nodes; i++)
					if (s->region_of[m->nodes[i]->id] >= 0)
						taken = 1;
				if (taken)
					break;
			}
			r.n_nodes = m->n_nodes;
			r.nodes = tpf_calloc(m->n_nodes + 1, sizeof(*r.nodes));
			if (!r.nodes) {
				tpf_free(m);
				return TPF_ERR_NOMEM;
			}
			memcpy(r.nodes, m->nodes, m->n_nodes * sizeof(*r.nodes));
			/* a widening Cast that only the region reads belongs to it */
			if (x->producer && sh_op(x->producer, TPF_OP_CAST) && x->producer->inputs[0]) {
				int only = 1;
				for (size_t u = 0; u < x->n_uses; u++) {
					int in = 0;
					for (size_t i = 0; i < r.n_nodes; i++)
						if (r.nodes[i] == x->uses[u].node)
							in = 1;
					if (!in)
						only = 0;
				}
				if (only && !tpf_value_is_graph_output(x)) {
					r.nodes[r.n_nodes++] = x->producer;
					x = x->producer->inputs[0];
				}
			}
			r.x = x;
			r.out = m->root->outputs[0];
			r.first = r.nodes[0];
			for (size_t i = 0; i < r.n_nodes; i++)
				if (s->order[r.nodes[i]->id] < s->order[r.first->id])
					r.first = r.nodes[i];
			for (size_t i = 0; i < r.n_nodes; i++)
				s->region_of[r.nodes[i]->id] = (int32_t)s->n_regions;
			if (region_add(s, &r)) {
				tpf_free(r.nodes);
				tpf_free(m);
				return TPF_ERR_NOMEM;
			}
			break;
		}
	}
	tpf_free(m);
	return TPF_OK;
}

/* ------------------------------------------------------------------ decisions */

static void reason(struct tpf_shard *sh, const struct tpf_node *n, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void reason(struct tpf_shard *sh, const struct tpf_node *n, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	tpf_free(sh->reasons[n->id]);
	sh->reasons[n->id] = tpf_strdup(buf);
}

/* Axis of `to` that holds axis `ax` of `from` when `to` is `from`
 * reshaped (the dims before it and the dim itself kept), or -1. */
static int reshaped_axis(const struct sh_fact *from, int ax, const struct sh_fact *to)
{
	int64_t pre = 1, p2 = 1;
	for (int i = 0; i < ax; i++)
		pre *= from->dims[i];
	for (int j = 0; j < to->rank; j++) {
		if (p2 == pre && to->dims[j] == from->dims[ax])
			return j;
		p2 *= to->dims[j];
	}
	return -1;
}

/* The axis of n's output that holds axis `ax` of its input when n moves the
 * channels of that axis without mixing them: a Transpose, a depthwise Conv
 * (channels on axis 1), a Slice along other axes, or an element-wise op
 * whose output has its input's dims (SiLU's Sigmoid and Mul); else -1. */
static int channel_axis(const struct shard *s, const struct tpf_node *n, int ax)
{
	const struct sh_fact *fi, *fo;
	int arg;
	enum tpf_shard_rule rule = tpf_node_shard_rule(n, &arg);

	if (!n->n_inputs || !n->inputs[0] || n->n_outputs != 1 || !n->outputs[0])
		return -1;
	fi = sh_full(s, n->inputs[0]);
	if (fi->rank <= ax)
		return -1;
	fo = sh_full(s, n->outputs[0]);
	if (sh_op(n, TPF_OP_TRANSPOSE)) {
		const struct tpf_attr *pa = tpf_node_attr(n, "perm");
		for (int i = 0; pa && i < (int)pa->n && pa->n == (size_t)fi->rank; i++)
			if (pa->ints[i] == ax)
				return i;
		return -1;
	}
	if (fo->rank != fi->rank || fo->dims[ax] != fi->dims[ax])
		return -1;
	if (sh_op(n, TPF_OP_CONV))
		return ax == 1 && tpf_node_attr_int(n, "group", 1) == fi->dims[1] ? ax : -1;
	if (sh_op(n, TPF_OP_SLICE)) {
		const struct sh_fact *a = n->n_inputs > 3 && n->inputs[3] ? sh_full(s, n->inputs[3]) : NULL;
		if (n->n_inputs < 4 || !a || a->nvals < 0)
			return -1;
		for (int i = 0; i < a->nvals; i++)
			if ((a->vals[i] < 0 ? a->vals[i] + fi->rank : a->vals[i]) == ax)
				return -1;
		return ax;
	}
	if (rule != TPF_SHARD_RULE_UNARY && rule != TPF_SHARD_RULE_BROADCAST)
		return -1;
	for (int i = 0; i < fi->rank; i++)
		if (fo->dims[i] != fi->dims[i])
			return -1;
	return ax;
}

/* A Mamba-2 mixer that cannot split: the first piece of a Split after a
 * depthwise conv that a Reshape turns into heads (x) or groups (B, C) not
 * divisible by the world size. */
struct sh_mixer {
	int64_t count; /* heads or groups; 0 when all divide */
	int piece;
	int visits;    /* nodes looked at (the walk stops at 256) */
};

/* The heads or groups [count, size] of piece j of Split sp (axis ax) when
 * a Reshape unfolds that axis, else 0. */
static int64_t unfolded_count(const struct shard *s, const struct tpf_node *sp, size_t j, int ax)
{
	const struct tpf_value *v = sp->outputs[j];
	const struct sh_fact *fv = sh_full(s, v);
	for (size_t u = 0; v && fv->rank > ax && u < v->n_uses; u++) {
		const struct tpf_node *r = v->uses[u].node;
		const struct sh_fact *fo;
		int64_t span;
		if (!sh_op(r, TPF_OP_RESHAPE) || v->uses[u].index != 0 || !r->outputs[0])
			continue;
		fo = sh_full(s, r->outputs[0]);
		if (fo->rank == fv->rank + 1 && fo->dims[ax] > 0 && fo->dims[ax + 1] > 0 &&
		    !__builtin_mul_overflow(fo->dims[ax], fo->dims[ax + 1], &span) &&
		    span == fv->dims[ax])
			return fo->dims[ax];
	}
	return 0;
}

/* Bounds (offset by `off`) of the Splits that cut value v along axis `ax`
 * after ops that keep its channels apart (channel_axis): the x, B and C
 * pieces of a Mamba-2 in_proj cut again after their depthwise conv
 * (`conv`: one was passed; *mx notes heads or groups that do not divide). */
static void nested_bounds(const struct shard *s, const struct tpf_value *v, int ax, int64_t off,
			  int64_t *bounds, int *nb, int depth, int conv, struct sh_mixer *mx)
{
	for (size_t u = 0; u < v->n_uses && depth < 8 && mx->visits < 256; u++) {
		const struct tpf_node *c = v->uses[u].node;
		int a2;
		if (!c || v->uses[u].index != 0)
			continue;
		mx->visits++;
		if (sh_op(c, TPF_OP_SPLIT)) {
			int r = sh_full(s, v)->rank;
			int64_t a = tpf_node_attr_int(c, "axis", 0), o = off, k;
			if ((a < 0 ? a + r : a) != ax)
				continue;
			for (size_t j = 0; j < c->n_outputs && *nb < 60; j++) {
				const struct sh_fact *fo = sh_full(s, c->outputs[j]);
				if (fo->rank != r || fo->dims[ax] < 0)
					break;
				bounds[(*nb)++] = o;
				o += fo->dims[ax];
				bounds[(*nb)++] = o;
				k = conv ? unfolded_count(s, c, j, ax) : 0;
				if (k > 0 && k % s->W && !mx->count) {
					mx->count = k;
					mx->piece = (int)j;
				}
			}
			continue;
		}
		if ((a2 = channel_axis(s, c, ax)) >= 0)
			nested_bounds(s, c->outputs[0], a2, off, bounds, nb, depth + 1,
				      conv || sh_op(c, TPF_OP_CONV), mx);
	}
}

/* Sections of a column split: the bounds of the Slices and Splits that
 * cut the MatMul's output along the split axis (its last, or the rows of
 * an expert's weight on the left), through a bias Add or a scale Mul
 * (Falcon-H1's multipliers), the pieces of a Split followed through a
 * depthwise conv to the Splits that cut them again (and, for an
 * expert's product, a Squeeze, Unsqueeze or Reshape that keeps the axis). */
static int column_sections(struct shard *s, const struct tpf_node *mm, struct sh_sections *sec,
			   char *why, size_t whysz)
{
	const struct tpf_value *y = mm->outputs[0];
	const struct sh_fact *fy = sh_full(s, y);
	int64_t N, bounds[64];
	int nb = 0, r = fy->rank, ax = r - 1, side = 1;
	int expert = !sh_matmul_weight(mm, NULL) && sh_expert_weight(mm, &side, NULL);
	struct sh_mixer mx = {0};

	if (expert && !side)
		ax = r - 2;
	if (r < 1 || ax < 0 || fy->dims[ax] <= 0) {
		snprintf(why, whysz, "its output size is unknown");
		return -1;
	}
	N = fy->dims[ax];
	for (int hop = 0; hop < (expert ? 3 : 2); hop++) {
		const struct tpf_value *next = NULL;
		int next_ax = ax;
		for (size_t u = 0; u < y->n_uses; u++) {
			const struct tpf_node *c = y->uses[u].node;
			int a2;
			if (!c || y->uses[u].index != 0)
				continue;
			if ((sh_op(c, TPF_OP_ADD) || sh_op(c, TPF_OP_MUL)) && !next && c->outputs[0] &&
			    sh_full(s, c->outputs[0])->rank == r) {
				next = c->outputs[0];
				continue;
			}
			if (expert && (sh_op(c, TPF_OP_SQUEEZE) || sh_op(c, TPF_OP_UNSQUEEZE) || sh_op(c, TPF_OP_RESHAPE)) &&
			    !next && c->outputs[0] && sh_full(s, y)->rank > ax &&
			    (a2 = reshaped_axis(sh_full(s, y), ax, sh_full(s, c->outputs[0]))) >= 0) {
				next = c->outputs[0];
				next_ax = a2;
				continue;
			}
			if (sh_op(c, TPF_OP_SLICE) && c->n_inputs >= 3) {
				const struct sh_fact *a = c->n_inputs > 3 && c->inputs[3] ? sh_full(s, c->inputs[3]) : NULL;
				const struct sh_fact *st = sh_full(s, c->inputs[1]), *en = sh_full(s, c->inputs[2]);
				const struct sh_fact *sp = c->n_inputs > 4 && c->inputs[4] ? sh_full(s, c->inputs[4]) : NULL;
				for (int i = 0; i < st->nvals && en->nvals == st->nvals && nb < 62; i++) {
					int64_t f, cnt;
					if (sp && sp->nvals == st->nvals && sp->vals[i] != 1)
						continue; /* a strided slice reads every block alike */
					a2 = a && a->nvals == st->nvals ? (int)a->vals[i] : i;
					if (a2 < 0)
						a2 += r;
					if (a2 != ax)
						continue;
					sh_slice_range(st->vals[i], en->vals[i], 1, N, &f, &cnt);
					bounds[nb++] = f;
					bounds[nb++] = f + cnt;
				}
			} else if (sh_op(c, TPF_OP_SPLIT)) {
				int64_t a = tpf_node_attr_int(c, "axis", 0), off = 0;
				if (a < 0)
					a += r;
				if (a != ax)
					continue;
				for (size_t j = 0; j < c->n_outputs && nb < 63; j++) {
					const struct sh_fact *fo = sh_full(s, c->outputs[j]);
					if (fo->rank != r || fo->dims[ax] < 0)
						break;
					bounds[nb++] = off;
					nested_bounds(s, c->outputs[j], ax, off, bounds, &nb, 0, 0, &mx);
					off += fo->dims[ax];
					bounds[nb++] = off;
				}
			}
		}
		if (!next)
			break;
		y = next;
		ax = next_ax;
		r = sh_full(s, y)->rank;
	}
	if (mx.count) {
		static const char *const what[] = {"x", "B", "C"};
		snprintf(why, whysz, "a Mamba-2 mixer whose %s (piece %d after the conv) has %s = %" PRId64
			 ", not divisible by %d: it splits by heads and groups",
			 mx.piece < 3 ? what[mx.piece] : "piece", mx.piece,
			 mx.piece ? "n_groups" : "n_heads", mx.count, s->W);
		return -1;
	}
	/* sort, dedupe, build sections */
	for (int i = 1; i < nb; i++)
		for (int j = i; j > 0 && bounds[j - 1] > bounds[j]; j--) {
			int64_t t = bounds[j];
			bounds[j] = bounds[j - 1];
			bounds[j - 1] = t;
		}
	memset(sec, 0, sizeof(*sec));
	{
		int64_t prev = 0;
		for (int i = 0; i <= nb; i++) {
			int64_t b = i < nb ? bounds[i] : N;
			if (b <= prev || b > N)
				continue;
			if (sec->n == SH_MAX_SECT) {
				snprintf(why, whysz, "its output is cut into too many sections");
				return -1;
			}
			sec->size[sec->n++] = b - prev;
			prev = b;
		}
	}
	for (int i = 0; i < sec->n; i++)
		if (sec->size[i] % s->W) {
			if (sec->n == 1)
				snprintf(why, whysz, "its output dim %" PRId64 " is not divisible by %d", N, s->W);
			else
				snprintf(why, whysz, "section %d of its output (%" PRId64 " wide) is not divisible by %d",
					 i, sec->size[i], s->W);
			return -1;
		}
	return 0;
}

static enum tpf_status prop_init(struct tpf_shard *sh, struct sh_prop *p, int final)
{
	struct shard *s = &sh->s;
	memset(p, 0, sizeof(*p));
	p->s = s;
	p->final = final;
	p->sh = tpf_calloc(s->n_values0 + 1, sizeof(*p->sh));
	p->region_done = tpf_calloc(s->n_regions + 1, 1);
	p->reduced_at = tpf_calloc(s->n_values0 + 1, sizeof(*p->reduced_at));
	if (!p->sh || !p->region_done || !p->reduced_at)
		return TPF_ERR_NOMEM;
	for (size_t i = 0; i < s->n_values0; i++)
		p->sh[i] = (struct sh){SH_R, 0, 0};
	return TPF_OK;
}

/* A trial from position `pos`: the committed state before it, the
 * decisions of `group` from it. */
static void trial_run(struct shard *s, struct sh_prop *com, struct sh_prop *tri,
		      const uint32_t *gat_c, uint32_t *gat_t, size_t npos, uint32_t pos,
		      struct tpf_node *const *group, size_t ng, int taint)
{
	memcpy(tri->sh, com->sh, s->n_values0 * sizeof(*tri->sh));
	memcpy(tri->region_done, com->region_done, s->n_regions);
	memcpy(tri->reduced_at, com->reduced_at, s->n_values0 * sizeof(*tri->reduced_at));
	memset(tri->taint, 0, s->n_values0);
	memset(tri->taint_roots, 0, s->n_nodes0);
	for (size_t i = 0; taint && i < ng; i++)
		tri->taint_roots[group[i]->id] = 1;
	memset(gat_t, 0, (npos + 1) * sizeof(*gat_t));
	memcpy(gat_t, gat_c, pos * sizeof(*gat_t));
	sh_prop_run(tri, pos, gat_t);
}

static size_t total(const uint32_t *g, size_t n)
{
	size_t t = 0;
	for (size_t i = 0; i < n; i++)
		t += g[i];
	return t;
}

/* Whether n is a column candidate: a MatMul or Gemm with a constant weight
 * whose input is whole. */
static int candidate(const struct shard *s, const struct sh_prop *com, const struct tpf_node *n)
{
	if (n->id >= s->n_nodes0 || !is_mm(n))
		return 0;
	if (sh_matmul_weight(n, NULL))
		return com->sh[n->inputs[0]->id].kind == SH_R;
	/* an expert's product: both operands whole */
	return sh_expert_weight(n, NULL, NULL) && com->sh[n->inputs[0]->id].kind == SH_R &&
	       com->sh[n->inputs[1]->id].kind == SH_R;
}

/* The undecided candidates that v is computed from (nearest first, at
 * most `max`), for a joint trial. */
static size_t upstream_candidates(const struct shard *s, const struct sh_prop *com,
				  const struct tpf_value *v, struct tpf_node **out, size_t max)
{
	const struct tpf_value *stack[256];
	size_t sp = 0, n = 0, seen = 0;

	stack[sp++] = v;
	while (sp && n < max && seen < 4096) {
		const struct tpf_value *x = stack[--sp];
		struct tpf_node *p = x ? x->producer : NULL;
		seen++;
		if (!p || tpf_value_constant(x))
			continue;
		if (candidate(s, com, p) && s->decision[p->id] != DEC_COLUMN &&
		    s->decision[p->id] != DEC_COLUMN_GATHER) {
			size_t k;
			for (k = 0; k < n && out[k] != p; k++)
				;
			if (k == n)
				out[n++] = p;
			continue;
		}
		for (size_t i = 0; i < p->n_inputs && sp < 256; i++)
			if (p->inputs[i] && !tpf_value_constant(p->inputs[i]))
				stack[sp++] = p->inputs[i];
	}
	return n;
}

/* Whether the trial's first row-parallel product reads a norm over the
 * split axis (through Reshape, Cast or Identity): a low-rank latent
 * (MLA's q_a_proj) whose up-projection would split by heads instead. */
static const struct tpf_node *latent_norm(const struct shard *s, const struct sh_prop *tri)
{
	const struct tpf_value *a = tri->first_row ? tri->first_row->inputs[0] : NULL;

	while (a && a->producer && a->producer->n_inputs &&
	       (sh_op(a->producer, TPF_OP_RESHAPE) || sh_op(a->producer, TPF_OP_CAST) ||
		sh_op(a->producer, TPF_OP_IDENTITY)))
		a = a->producer->inputs[0];
	for (size_t i = 0; a && i < s->n_regions; i++)
		if (tri->region_done[i] == 2 && s->regions[i].out == a)
			return a->producer;
	return NULL;
}

static enum tpf_status decide(struct tpf_shard *sh)
{
	struct shard *s = &sh->s;
	struct sh_prop com = {0}, tri = {0};
	uint32_t *gat_c = NULL, *gat_t = NULL;
	size_t npos = s->g->n_nodes;
	enum tpf_status st;
	struct tpf_node *n;
	uint32_t pos;

	if ((st = prop_init(sh, &com, 0)) || (st = prop_init(sh, &tri, 0)))
		goto out;
	gat_c = tpf_calloc(npos + 1, sizeof(*gat_c));
	gat_t = tpf_calloc(npos + 1, sizeof(*gat_t));
	tri.taint = tpf_calloc(s->n_values0 + 1, 1);
	tri.taint_roots = tpf_calloc(s->n_nodes0 + 1, 1);
	if (!gat_c || !gat_t || !tri.taint || !tri.taint_roots) {
		st = TPF_ERR_NOMEM;
		goto out;
	}
	sh_prop_run(&com, 0, gat_c);
	for (n = s->g->first, pos = 0; n; n = n->next, pos++) {
		struct tpf_node *group[8];
		uint8_t before[8];
		size_t ng = 1, base_total;
		uint32_t gpos = pos;
		char why[256], nb[256];
		int ok = 0;

		if (!candidate(s, &com, n) || s->decision[n->id] != DEC_NONE)
			continue; /* not a candidate, or decided (with a group) */
		group[0] = n;
		before[0] = s->decision[n->id];
		base_total = total(gat_c, npos);
		for (int round = 0; round < 4; round++) {
			int bad = 0;
			for (size_t k = 0; k < ng; k++) {
				struct tpf_node *m = group[k];
				struct sh_sections sec;
				int si;
				if (column_sections(s, m, &sec, why, sizeof(why))) {
					if (m == n) {
						s->decision[n->id] = DEC_REPLICATE;
						reason(sh, n, "%s", why);
					}
					bad = 1;
					break;
				}
				if ((si = sh_sect_intern(s, &sec)) < 0) {
					st = TPF_ERR_NOMEM;
					goto out;
				}
				s->dec_sect[m->id] = (uint16_t)si;
				s->decision[m->id] = DEC_COLUMN;
				if (s->order[m->id] < gpos)
					gpos = s->order[m->id];
			}
			if (bad)
				break;
			trial_run(s, &com, &tri, gat_c, gat_t, npos, gpos, group, ng, 1);
			if (tri.nomem) {
				st = TPF_ERR_NOMEM;
				goto out;
			}
			if (total(gat_t, npos) <= base_total) {
				ok = 1;
				break;
			}
			/* a slice of what another replicated candidate computes: try them together */
			{
				struct tpf_node *more[8];
				size_t k = tri.blame ? upstream_candidates(s, &com, tri.blame, more, 8 - ng) : 0;
				if (!k)
					break;
				for (size_t j = 0; j < k && ng < 8; j++) {
					before[ng] = s->decision[more[j]->id];
					group[ng++] = more[j];
				}
			}
		}
		if (s->decision[n->id] == DEC_REPLICATE)
			goto undo;
		if (!ok) {
			reason(sh, n, "splitting its output meets %s", tri.first_gather_why);
			goto undo;
		}
		if (tri.rows_reached && ng == 1 && latent_norm(s, &tri)) {
			reason(sh, n, "a latent: its split would reach row-parallel %s through a norm over "
				   "the split axis; whole, its up-projection splits instead",
			       sh_node_name(tri.first_row, nb, sizeof(nb)));
			goto undo;
		}
		if (tri.rows_reached) {
			snprintf(why, sizeof(why), "its split reaches row-parallel %s",
				 sh_node_name(tri.first_row, nb, sizeof(nb)));
			for (size_t k = 0; k < ng; k++) {
				if (k)
					reason(sh, group[k], "split together with %s; %s",
					       sh_node_name(n, nb, sizeof(nb)), why);
				else
					reason(sh, n, "%s", why);
			}
		} else if (tri.outputs_reached && ng == 1) {
			s->decision[n->id] = DEC_COLUMN_GATHER;
			reason(sh, n, "its split reaches only graph outputs: its output is gathered");
			trial_run(s, &com, &tri, gat_c, gat_t, npos, gpos, group, ng, 0);
		} else {
			reason(sh, n, "its split reaches no row-parallel MatMul and no graph output");
			goto undo;
		}
		memcpy(com.sh, tri.sh, s->n_values0 * sizeof(*com.sh));
		memcpy(com.region_done, tri.region_done, s->n_regions);
		memcpy(com.reduced_at, tri.reduced_at, s->n_values0 * sizeof(*com.reduced_at));
		memcpy(gat_c, gat_t, npos * sizeof(*gat_c));
		continue;
undo:
		s->decision[n->id] = DEC_REPLICATE;
		for (size_t k = 1; k < ng; k++)
			s->decision[group[k]->id] = before[k];
	}
	/* the ones a group took or left, and those never reached as candidates */
out:
	tpf_free(gat_c);
	tpf_free(gat_t);
	sh_prop_free(&com);
	sh_prop_free(&tri);
	return st;
}

/* ------------------------------------------------------------------ validation */

/* The rank graph's concrete dims against the plan's. */
static enum tpf_status validate(struct tpf_shard *sh)
{
	struct shard *s = &sh->s;
	struct sh_eval ev;
	enum tpf_status st;
	size_t bad = 0;

	st = sh_eval_run(&ev, s->g, s->ev.opset, s->W, &s->ev);
	if (st) {
		sh_eval_free(&ev);
		return st;
	}
	for (size_t i = 0; i < s->n_values0 && bad < 8; i++) {
		struct tpf_value *v = i < s->g->n_values ? s->g->values[i] : NULL;
		const struct sh_fact *ff, *fl;
		struct sh x;
		if (!v || v->kind == TPF_VALUE_INITIALIZER || !v->producer || v->producer->id >= s->n_nodes0)
			continue;
		x = sh->fin.sh[i];
		for (size_t k = 0; k < sh->fin.n_convs; k++) {
			const struct sh_conv *c = &sh->fin.convs[k];
			if (c->kind == CONV_OUTPUT && c->node->outputs[c->index] == v)
				x = c->from;
		}
		ff = sh_full(s, v);
		fl = sh_eval_fact(&ev, v);
		if (ff->rank < 0 || fl->rank < 0)
			continue;
		if (ff->rank != fl->rank) {
			char nb[256];
			tpf_diag_add(s->d, TPF_SEV_ERROR, "%s: the rank graph gives '%s' rank %d, the model %d",
				     tpf_node_describe(v->producer, nb, sizeof(nb)), v->name, fl->rank, ff->rank);
			bad++;
			continue;
		}
		for (int a = 0; a < ff->rank; a++) {
			int64_t want = ff->dims[a];
			if (want < 0 || fl->dims[a] < 0)
				continue;
			if (x.kind == SH_S && x.axis == a)
				want /= s->W;
			if (fl->dims[a] != want) {
				char nb[256];
				tpf_diag_add(s->d, TPF_SEV_ERROR,
					     "%s: in the rank graph '%s' has dim %d = %" PRId64 ", the split needs %" PRId64,
					     tpf_node_describe(v->producer, nb, sizeof(nb)), v->name, a, fl->dims[a], want);
				bad++;
				break;
			}
		}
	}
	sh_eval_free(&ev);
	return bad ? TPF_ERR_UNSUPPORTED : TPF_OK;
}

/* ------------------------------------------------------------------ explain */

static void shape_str(const struct tpf_tensor *t, char *buf, size_t size)
{
	int k = snprintf(buf, size, "[");
	for (int i = 0; i < t->rank && k > 0 && (size_t)k < size; i++)
		k += snprintf(buf + k, size - (size_t)k, "%s%" PRId64, i ? "," : "", t->dims[i]);
	if (k > 0 && (size_t)k < size)
		snprintf(buf + k, size - (size_t)k, "]");
}

/* Whether initializer v is the weight of a MatMul or Gemm that has a
 * line of its own. */
static int has_line(const struct tpf_shard *sh, const struct tpf_value *v)
{
	size_t len = strlen(v->name);
	for (size_t i = 0; i < sh->s.n_nodes0; i++)
		if (sh->weights[i] && sh->weights[i][0] == '\'' &&
		    !strncmp(sh->weights[i] + 1, v->name, len) && sh->weights[i][len + 1] == '\'')
			return 1;
	return 0;
}

/* One line for every float weight (two elements or more) that every rank
 * keeps whole, with its first reader and why. */
static void explain_whole(struct tpf_shard *sh, FILE *f)
{
	struct shard *s = &sh->s;

	for (size_t i = 0; i < s->g->n_initializers; i++) {
		struct tpf_value *v = s->g->initializers[i];
		const struct tpf_tensor *t = v ? v->init : NULL;
		struct tpf_node *r;
		char nb[256], ds[128];
		const char *why;
		int arg;
		const struct tpf_value *u = v;
		if (!t || v->id >= s->n_values0 || !tpf_dtype_is_float(t->dtype) ||
		    tpf_tensor_numel(t) < 2 || !v->n_uses || !(r = v->uses[0].node) || has_line(sh, v))
			continue;
		/* the reader behind an Identity or Cast */
		for (int hop = 0; hop < 4 && (sh_op(r, TPF_OP_IDENTITY) || sh_op(r, TPF_OP_CAST)) &&
				  r->outputs[0] && r->outputs[0]->n_uses; hop++) {
			u = r->outputs[0];
			r = u->uses[0].node;
		}
		if ((r->id < s->n_nodes0 && s->region_of[r->id] >= 0) ||
		    tpf_node_shard_rule(r, &arg) == TPF_SHARD_RULE_NORM)
			why = "a norm's weight (norms work on whole rows)";
		else if ((sh_op(r, TPF_OP_GATHER) || sh_op(r, TPF_OP_GATHER_ND)) && u->uses[0].index == 0)
			why = t->rank == 2 && !sh_stacked_table(r, NULL, NULL)
				      ? "a lookup table (--vocab-parallel-embedding splits an embedding)"
				      : "rows picked by a Gather whose products stay whole";
		else
			why = "its reader takes it whole";
		shape_str(t, ds, sizeof(ds));
		fprintf(f, "whole: '%s' %s, read by %s: %s\n", v->name, ds,
			sh_node_name(r, nb, sizeof(nb)), why);
	}
}

static void explain(struct tpf_shard *sh, FILE *f)
{
	struct shard *s = &sh->s;
	const struct sh_prop *p = &sh->fin;

	fprintf(f, "shard: world size %d\n", s->W);
	for (struct tpf_node *n = s->g->first; n; n = n->next) {
		struct tpf_value *base = NULL;
		const struct tpf_tensor *w;
		char nb[256], ds[128], sb[128];
		struct sh a;
		if (n->id >= s->n_nodes0 || !is_mm(n) || !(w = sh_mm_weight(n, NULL, &base)))
			continue;
		(void)ds;
		fprintf(f, "%s (weight %s): ", sh_node_name(n, nb, sizeof(nb)),
			sh->weights[n->id] ? sh->weights[n->id] : base->name);
		switch (s->decision[n->id]) {
		case DEC_COLUMN:
		case DEC_COLUMN_GATHER: {
			const struct sh_sections *sec = sh_sect(s, s->dec_sect[n->id]);
			fprintf(f, "column-parallel%s, output dim %" PRId64 " split %d ways",
				s->decision[n->id] == DEC_COLUMN_GATHER ? " + AllGather" : "",
				sh->full_n[n->id], s->W);
			if (sec) {
				fprintf(f, " section by section [");
				for (int i = 0; i < sec->n; i++)
					fprintf(f, "%s%" PRId64, i ? ", " : "", sec->size[i]);
				fprintf(f, "]");
			}
			fprintf(f, ": %s\n", sh->reasons[n->id] ? sh->reasons[n->id] : "");
			break;
		}
		case DEC_REPLICATE:
			fprintf(f, "replicated: %s\n", sh->reasons[n->id] ? sh->reasons[n->id] : "");
			break;
		default:
			a = p->sh[n->inputs[0]->id];
			for (size_t k = 0; k < p->n_convs; k++)
				if (p->convs[k].kind == CONV_INPUT && p->convs[k].node == n && p->convs[k].index == 0)
					a = p->convs[k].to;
			if (p->sh[n->outputs[0]->id].kind == SH_P ||
			    (a.kind == SH_S && a.axis == sh_full(s, n->inputs[0])->rank - 1))
				fprintf(f, "row-parallel: its input is split on the contraction dim; "
					   "the partial sums are reduced by an AllReduce\n");
			else if (a.kind == SH_S)
				fprintf(f, "follows its input, %s\n", sh_str(s, a, sb, sizeof(sb)));
			else
				fprintf(f, "replicated: its input is whole\n");
		}
	}
	for (size_t i = 0; i < s->n_regions; i++)
		if (p->region_done[i] == 2) {
			char nb[256];
			fprintf(f, "norm ending at %s spans the split axis: AllGather -> norm -> this rank's part "
				   "(the sharded norm form)\n",
				sh_node_name(s->regions[i].out->producer, nb, sizeof(nb)));
		}
	explain_whole(sh, f);
	for (size_t i = 0; i < p->n_notes; i++)
		if (strncmp(p->notes[i].text, "HARD ", 5))
			fprintf(f, "fallback: %s: its split operand is gathered (replicated)\n", p->notes[i].text);
	/* the inputs and outputs split at the interface: their metadata */
	for (int out = 0; out < 2; out++)
		for (size_t i = 0; i < (out ? s->g->n_outputs : s->g->n_inputs); i++) {
			const struct tpf_value *v = out ? s->g->outputs[i] : s->g->inputs[i];
			char key[600];
			const char *rule;
			if (!v || !v->name)
				continue;
			snprintf(key, sizeof(key), "%s%s", out ? TPF_SPLIT_OUTPUT_KEY : TPF_SPLIT_INPUT_KEY,
				 v->name);
			if ((rule = tpf_model_metadata(s->m, key)))
				fprintf(f, "%s '%s': each rank %s its part (%s)\n", out ? "output" : "input",
					v->name, out ? "holds" : "is given", rule);
		}
	fprintf(f, "summary: %zu column-parallel (%zu gathered), %zu row-parallel, %zu replicated; "
		   "%zu AllReduce, %zu AllGather, %zu Slice inserted; %zu weights split; %zu fallbacks\n",
		sh->stats.column, sh->stats.column_gather, sh->stats.row, sh->stats.replicated,
		sh->stats.allreduce, sh->stats.allgather, sh->stats.slices, sh->stats.weights_split,
		sh->stats.fallbacks);
}

/* ------------------------------------------------------------------ API */

static void count_stats(struct tpf_shard *sh)
{
	struct shard *s = &sh->s;
	for (struct tpf_node *n = s->g->first; n; n = n->next) {
		if (n->id >= s->n_nodes0 || !is_mm(n) || !sh_mm_weight(n, NULL, NULL))
			continue;
		switch (s->decision[n->id]) {
		case DEC_COLUMN:
			sh->stats.column++;
			break;
		case DEC_COLUMN_GATHER:
			sh->stats.column++;
			sh->stats.column_gather++;
			break;
		case DEC_REPLICATE:
			sh->stats.replicated++;
			break;
		default:
			if (sh->fin.sh[n->outputs[0]->id].kind == SH_P)
				sh->stats.row++;
			else
				sh->stats.replicated++;
		}
	}
	for (size_t i = 0; i < sh->fin.n_notes; i++)
		if (strncmp(sh->fin.notes[i].text, "HARD ", 5))
			sh->stats.fallbacks++;
	if (sh->rd) {
		sh->stats.allreduce = sh_rank_count(sh->rd, "allreduce");
		sh->stats.allgather = sh_rank_count(sh->rd, "allgather");
		sh->stats.slices = sh_rank_count(sh->rd, "slices");
		sh->stats.weights_split = sh_rank_count(sh->rd, "weights");
		sh->stats.inputs_split = sh_rank_count(sh->rd, "inputs");
		sh->stats.outputs_split = sh_rank_count(sh->rd, "outputs");
	}
}

void tpf_shard_free(struct tpf_shard *sh)
{
	struct shard *s;
	if (!sh)
		return;
	s = &sh->s;
	sh_prop_free(&sh->fin);
	sh_rank_data_free(sh->rd);
	sh_eval_free(&s->ev);
	for (size_t i = 0; i < s->n_regions; i++)
		tpf_free(s->regions[i].nodes);
	tpf_free(s->regions);
	tpf_free(s->sects);
	tpf_free(s->decision);
	tpf_free(s->dec_sect);
	tpf_free(s->region_of);
	tpf_free(s->order);
	if (sh->reasons)
		for (size_t i = 0; i < s->n_nodes0; i++)
			tpf_free(sh->reasons[i]);
	tpf_free(sh->reasons);
	if (sh->weights)
		for (size_t i = 0; i < s->n_nodes0; i++)
			tpf_free(sh->weights[i]);
	tpf_free(sh->weights);
	tpf_free(sh->full_n);
	tpf_free(sh);
}

enum tpf_status tpf_shard_create(struct tpf_model *m, const struct tpf_shard_options *o,
				 struct tpf_shard **out, struct tpf_diag *d)
{
	struct tpf_shard *sh;
	struct shard *s;
	struct tpf_diag *scratch;
	enum tpf_status st;
	size_t dropped = 0, noops = 0;

	*out = NULL;
	if (!m || !m->graph || !o || o->world_size < 1 || o->world_size > 4096)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "shard: the world size must be between 1 and 4096");
	if ((st = tpf_model_verify(m, d)))
		return st;
	sh = tpf_calloc(1, sizeof(*sh));
	if (!sh)
		return TPF_ERR_NOMEM;
	sh->opt = *o;
	s = &sh->s;
	s->m = m;
	s->g = m->graph;
	s->W = o->world_size;
	s->opt = &sh->opt;
	s->d = d;
	s->vocab_parallel = o->vocab_parallel_embedding;
	if ((st = drop_world1_collectives(s, &dropped)))
		goto fail;
	sh->stats.collectives_dropped = dropped;
	if ((st = tpf_graph_toposort(s->g, d)))
		goto fail;
	scratch = tpf_diag_create();
	if (!scratch) {
		st = TPF_ERR_NOMEM;
		goto fail;
	}
	st = tpf_model_infer_shapes(m, scratch);
	tpf_diag_free(scratch);
	if (st == TPF_ERR_NOMEM)
		goto fail;
	if ((st = sh_eval_run(&s->ev, s->g, tpf_model_opset(m, ""), 1, NULL)))
		goto fail;
	drop_noop_slices(s, &noops);
	s->n_values0 = s->g->n_values;
	s->n_nodes0 = s->g->next_node_id;
	s->decision = tpf_calloc(s->n_nodes0 + 1, 1);
	s->dec_sect = tpf_calloc(s->n_nodes0 + 1, sizeof(*s->dec_sect));
	s->region_of = tpf_malloc((s->n_nodes0 + 1) * sizeof(*s->region_of));
	s->order = tpf_calloc(s->n_nodes0 + 1, sizeof(*s->order));
	sh->reasons = tpf_calloc(s->n_nodes0 + 1, sizeof(*sh->reasons));
	sh->weights = tpf_calloc(s->n_nodes0 + 1, sizeof(*sh->weights));
	sh->full_n = tpf_calloc(s->n_nodes0 + 1, sizeof(*sh->full_n));
	if (!sh->full_n || !s->decision || !s->dec_sect || !s->region_of || !s->order || !sh->reasons ||
	    !sh->weights) {
		st = TPF_ERR_NOMEM;
		goto fail;
	}
	{
		uint32_t pos = 0;
		for (size_t i = 0; i <= s->n_nodes0; i++)
			s->region_of[i] = -1;
		for (struct tpf_node *n = s->g->first; n; n = n->next)
			if (n->id < s->n_nodes0)
				s->order[n->id] = pos++;
	}
	if ((st = find_regions(s)))
		goto fail;
	for (struct tpf_node *n = s->g->first; n; n = n->next) {
		struct tpf_value *base = NULL;
		const struct tpf_tensor *w;
		char ds[128], buf[600];
		int side = 1;
		if (n->id >= s->n_nodes0 || !is_mm(n) || !(w = sh_mm_weight(n, &side, &base)))
			continue;
		shape_str(w, ds, sizeof(ds));
		snprintf(buf, sizeof(buf), "'%s' %s%s", base->name, ds,
			 sh_matmul_weight(n, NULL) ? "" : ", an expert's, picked by a Gather");
		sh->full_n[n->id] = w->rank ? w->dims[w->rank - (side ? 1 : 2)] : 0;
		if (!(sh->weights[n->id] = tpf_strdup(buf))) {
			st = TPF_ERR_NOMEM;
			goto fail;
		}
	}
	if (s->W > 1 && (st = decide(sh)))
		goto fail;
	if ((st = prop_init(sh, &sh->fin, 1)))
		goto fail;
	if (s->W > 1) {
		sh_prop_run(&sh->fin, 0, NULL);
		if (sh->fin.nomem) {
			st = TPF_ERR_NOMEM;
			goto fail;
		}
		for (size_t i = 0; i < sh->fin.n_notes; i++)
			if (!strncmp(sh->fin.notes[i].text, "HARD ", 5)) {
				st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "shard: %s", sh->fin.notes[i].text + 5);
				goto fail;
			}
	}
	if ((st = sh_rewrite(s, &sh->fin, &sh->rd)))
		goto fail;
	{
		char buf[32];
		snprintf(buf, sizeof(buf), "%d", s->W);
		if ((st = tpf_model_set_metadata(m, "tp_world_size", buf)) ||
		    (st = tpf_model_set_metadata(m, "tp_rank", "0")))
			goto fail;
		if (tpf_model_metadata(m, "tp_variant") &&
		    (st = tpf_model_set_metadata(m, "tp_variant", "rank")))
			goto fail;
	}
	if ((st = tpf_model_verify(m, d)))
		goto fail;
	if ((st = tpf_model_infer_shapes(m, d))) {
		tpf_diag_add(d, TPF_SEV_ERROR, "shard: the rank graph fails shape inference");
		goto fail;
	}
	if (s->W > 1 && (st = validate(sh)))
		goto fail;
	count_stats(sh);
	if (s->W > 1 && !sh->stats.column && !sh->stats.row)
		tpf_diag_add(d, TPF_SEV_WARNING,
			     "shard: no weight was split: every rank computes the whole model "
			     "(--explain says why)");
	if (o->explain)
		explain(sh, o->explain);
	*out = sh;
	return TPF_OK;
fail:
	tpf_shard_free(sh);
	return st;
}

enum tpf_status tpf_shard_rank(struct tpf_shard *sh, int rank, struct tpf_diag *d)
{
	if (!sh || rank < 0 || rank >= sh->s.W)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "shard: rank %d is not in [0, %d)", rank,
				     sh ? sh->s.W : 0);
	sh_rank_release(sh->rd);
	return sh_rank_fill(sh->rd, rank, d);
}

void tpf_shard_get_stats(const struct tpf_shard *sh, struct tpf_shard_stats *st)
{
	if (sh && st)
		*st = sh->stats;
}

/* pattern with every "{rank}" replaced by rank (tpf_malloc'ed). */
static char *rank_path(const char *pattern, int rank)
{
	char num[16];
	size_t n = 0, nl = (size_t)snprintf(num, sizeof(num), "%d", rank);
	for (const char *p = strstr(pattern, "{rank}"); p; p = strstr(p + 6, "{rank}"))
		n++;
	char *out = tpf_malloc(strlen(pattern) + n * nl + 1), *w = out;
	if (!out)
		return NULL;
	for (const char *p = pattern; *p;) {
		if (!strncmp(p, "{rank}", 6)) {
			memcpy(w, num, nl);
			w += nl;
			p += 6;
		} else {
			*w++ = *p++;
		}
	}
	*w = '\0';
	return out;
}

/* Writes every rank of sh (its model m) to out_pattern: all ranks' files
 * stay under temporary names until the last rank is written, so a failure
 * leaves none of them. */
static enum tpf_status write_ranks(struct tpf_shard *sh, struct tpf_model *m,
				   const char *out_pattern, struct tpf_save_options *so,
				   struct tpf_diag *d)
{
	int world = sh->s.W;
	struct tpf_out_file *pending = tpf_calloc((size_t)world * 2 + 1, sizeof(*pending));
	size_t n_pending = 0;
	enum tpf_status st = pending ? TPF_OK : TPF_ERR_NOMEM;
	for (int r = 0; r < world && !st; r++) {
		char *path = rank_path(out_pattern, r);
		size_t n_rank = 0;
		if (!path) {
			st = TPF_ERR_NOMEM;
			break;
		}
		so->defer = pending + n_pending;
		so->n_defer = &n_rank;
		st = tpf_shard_rank(sh, r, d);
		if (!st)
			st = tpf_model_save_file(m, path, so, d);
		n_pending += n_rank;
		sh_rank_release(sh->rd);
		tpf_free(path);
	}
	if (!st)
		st = tpf_out_files_commit(pending, n_pending, d);
	else
		for (size_t i = 0; i < n_pending; i++)
			tpf_out_file_discard(&pending[i]);
	tpf_free(pending);
	return st;
}

/* The input is held to what `tpfuse check` asks: it verifies, its shapes
 * infer without an error, and it verifies again with the inferred types. */
static enum tpf_status sh_verify_input(struct tpf_model *m, const char *in, struct tpf_diag *d)
{
	size_t errors = d ? d->error_count : 0;
	enum tpf_status st = tpf_model_verify(m, d);

	if (!st)
		st = tpf_model_infer_shapes(m, d);
	if (!st)
		st = tpf_model_verify(m, d);
	if (!st && d && d->error_count > errors)
		st = TPF_ERR_INVALID;
	if (st == TPF_ERR_INVALID || st == TPF_ERR_VERIFY || st == TPF_ERR_PARSE)
		tpf_diag_add(d, TPF_SEV_ERROR,
		             "shard: '%s' is not a valid model (as `tpfuse check` finds)", in);
	return st;
}

enum tpf_status tpf_shard_file(const char *in, const char *out_pattern,
			       const struct tpf_shard_options *o, size_t external_threshold,
			       struct tpf_shard_stats *stats, struct tpf_diag *d)
{
	struct tpf_model *m = NULL;
	struct tpf_shard *sh = NULL;
	enum tpf_status st;

	if (!in || !out_pattern || !o)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "shard: missing argument");
	if (o->world_size > 1 && !strstr(out_pattern, "{rank}"))
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "shard: the output path '%s' needs {rank} for %d ranks", out_pattern,
				     o->world_size);
	if ((st = tpf_model_load_file(in, &(struct tpf_load_options){0}, &m, d)))
		return st;
	if ((st = sh_verify_input(m, in, d))) {
		tpf_model_free(m);
		return st;
	}
	struct tpf_save_options so = {.external_threshold = external_threshold ? external_threshold : 1024};
	/* every rank's model and data file against the input's files and each
	 * other, before anything is written; then their folders */
	struct tpf_file_set *fs = tpf_file_set_create();
	st = fs ? tpf_file_set_add_model(fs, m, in, d) : TPF_ERR_NOMEM;
	for (int r = 0; r < o->world_size && !st; r++) {
		char *path = rank_path(out_pattern, r), what[64];
		snprintf(what, sizeof(what), "rank %d's output", r);
		st = path ? tpf_file_set_add_model_output(fs, path, &so, what, d) : TPF_ERR_NOMEM;
		tpf_free(path);
	}
	tpf_file_set_free(fs);
	char **made = NULL; /* the folders made here, removed on failure */
	size_t n_made = 0;
	for (int r = 0; r < o->world_size && !st; r++) {
		char *path = rank_path(out_pattern, r);
		st = path ? tpf_make_parent_folders(path, &made, &n_made, d) : TPF_ERR_NOMEM;
		tpf_free(path);
	}
	if (!st)
		st = tpf_shard_create(m, o, &sh, d);
	if (!st)
		st = write_ranks(sh, m, out_pattern, &so, d);
	if (st) {
		tpf_remove_folders(made, n_made);
	} else {
		for (size_t i = 0; i < n_made; i++)
			tpf_free(made[i]);
		tpf_free(made);
	}
	if (stats)
		tpf_shard_get_stats(sh, stats);
	tpf_shard_free(sh);
	tpf_model_free(m);
	return st;
}

/* ------------------------------------------------------------------ the pass */

static const char *const shard_counters[] = {
	"split-columns", "gathered-columns", "split-rows", "replicated", "allreduce", "allgather",
	"slices", "weights-split", "inputs-split", "outputs-split", "fallbacks",
	"collectives-dropped", NULL,
};

static void add_stats(struct tpf_pass_stats *ps, const struct tpf_shard_stats *s)
{
	const size_t v[] = {s->column, s->column_gather, s->row, s->replicated, s->allreduce,
			    s->allgather, s->slices, s->weights_split, s->inputs_split,
			    s->outputs_split, s->fallbacks, s->collectives_dropped};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		tpf_pass_stats_add(ps, "shard", shard_counters[i], (int64_t)v[i]);
}

/* The sharder as a pass: the world size from the context; with a rank,
 * the model becomes that rank's (its weight slices kept in the graph),
 * else the structure every rank shares (tpf_shard_create's). */
static enum tpf_status shard_pass_run(struct tpf_model *m, struct tpf_pass_context *ctx,
				      int *changed, struct tpf_diag *d)
{
	struct tpf_shard_options o = {.world_size = ctx->world_size, .explain = ctx->explain};
	struct tpf_shard *sh = NULL;
	enum tpf_status st;

	if (ctx->world_size < 1)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "shard: the pass needs the world size (--rank and --world-size)");
	st = tpf_shard_create(m, &o, &sh, d);
	*changed = 1;
	if (!st && ctx->rank >= 0)
		st = tpf_shard_rank(sh, ctx->rank, d);
	if (!st && ctx->rank >= 0)
		st = sh_rank_keep(sh->rd, m->graph, d);
	if (!st && ctx->stats)
		add_stats(ctx->stats, &sh->stats);
	tpf_shard_free(sh);
	return st;
}

const struct tpf_pass tpf_pass_shard = {
	.name = "shard",
	.summary = "split a single-device model into a tensor-parallel rank's model",
	.run = shard_pass_run,
	.counters = shard_counters,
};
