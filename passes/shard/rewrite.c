/* SPDX-License-Identifier: MIT */
/*
 * The sharder's rewrite: the propagation's conversions become nodes, and
 * the graph takes the structure every rank shares.
 *
 *   P -> R      com.microsoft AllReduce
 *   S -> R      com.microsoft AllGather(axis, group_size = W) (sections:
 *               a Split into rank-major pieces and a Concat in order)
 *   R -> S      a constant: a sliced initializer (filled per rank); a
 *               weight behind a Transpose, Cast or per-tensor
 *               DequantizeLinear: its constant sliced, the chain kept;
 *               anything else: a Slice whose bounds are filled per rank
 *               (one Slice per section, then a Concat)
 *   an input    split at the interface when all its uses want the same
 *               split (a KV cache: each rank is given its heads)
 *
 * Literal elements of shape operands (a head count in a Reshape target, a
 * section bound of a Slice) are rewritten where the value is theirs alone,
 * or on a private copy of the chain that computes them.  Types follow the
 * shardings: a split axis's static dim is divided by W.
 */
#include <inttypes.h>
#include <string.h>

#include "shard.h"

/* ------------------------------------------------------------------ context */

struct rw {
	struct shard *s;
	struct sh_prop *p;
	struct sh_rank_data *rd;
	struct tpf_graph *g;
	struct tpf_diag *d;
	/* conversions made, for sharing: (source value, target) -> value */
	struct cache_ent {
		struct tpf_value *from;
		struct sh to;
		struct tpf_value *val;
	} *cache;
	size_t n_cache, cap_cache;
	uint8_t *iface;     /* by value id: graph input split at the interface */
	struct sh *iface_sh;
	struct tpf_value **replaced_inits; /* originals that may have become unused */
	struct sh *raw;     /* by value id: the sharding a value's producer gives */
	size_t n_replaced, cap_replaced;
	int used_ms;
	enum tpf_status st;
};

static int sh_same(struct sh a, struct sh b)
{
	return a.kind == b.kind &&
	       (a.kind != SH_S || (a.axis == b.axis && a.sect == b.sect &&
				   (a.outer > 1 ? a.outer : 1) == (b.outer > 1 ? b.outer : 1)));
}

static const struct sh_sections *sections_of(const struct shard *s, struct sh x, int64_t dim,
					     struct sh_sections *one)
{
	const struct sh_sections *sec = sh_sect(s, x.sect);
	if (sec)
		return sec;
	one->n = 1;
	one->size[0] = dim;
	return one;
}

static struct tpf_value *cache_get(struct rw *w, struct tpf_value *from, struct sh to)
{
	for (size_t i = 0; i < w->n_cache; i++)
		if (w->cache[i].from == from && sh_same(w->cache[i].to, to))
			return w->cache[i].val;
	return NULL;
}

static void cache_put(struct rw *w, struct tpf_value *from, struct sh to, struct tpf_value *val)
{
	if (sh_push((void **)&w->cache, &w->n_cache, &w->cap_cache, sizeof(*w->cache))) {
		w->st = TPF_ERR_NOMEM;
		return;
	}
	w->cache[w->n_cache - 1] = (struct cache_ent){from, to, val};
}

/* The type of v with its dims made local for sharding x. */
static void set_local_type(struct rw *w, struct tpf_value *dst, const struct tpf_value *src,
			   struct sh x)
{
	const struct sh_fact *f;
	struct tpf_type t;
	struct tpf_dim dims[TPF_MAX_RANK] = {{0}};
	int r;

	if (!dst)
		return;
	if (src->type.kind == TPF_TYPE_TENSOR && src->type.shape.rank >= 0) {
		t = src->type;
		r = t.shape.rank;
		if (r > TPF_MAX_RANK)
			return;
		if (r > 0)
			memcpy(dims, t.shape.dims, (size_t)r * sizeof(*dims));
	} else {
		f = sh_full(w->s, src);
		memset(&t, 0, sizeof(t));
		t.kind = TPF_TYPE_TENSOR;
		t.dtype = src->type.dtype ? src->type.dtype
					  : (src->init ? src->init->dtype : tpf_value_dtype(src));
		r = f->rank;
		if (r < 0 || r > TPF_MAX_RANK) {
			if (t.dtype)
				tpf_value_set_type(dst, t.dtype, -1, NULL);
			return;
		}
		for (int i = 0; i < r; i++)
			dims[i] = (struct tpf_dim){-1, NULL, NULL};
	}
	if (x.kind == SH_S && x.axis < r) {
		struct tpf_dim *dm = &dims[x.axis];
		if (!dm->param && dm->value > 0)
			dm->value /= w->s->W;
		else
			*dm = (struct tpf_dim){-1, NULL, NULL};
	}
	t.shape.rank = r;
	t.shape.dims = r ? dims : NULL;
	t.denotation = NULL;
	if (tpf_value_copy_type(dst, &t))
		w->st = TPF_ERR_NOMEM;
}

static const char *node_name(struct rw *w, const char *base, const char *suffix)
{
	char buf[512];
	snprintf(buf, sizeof(buf), "%s/%s", base && *base ? base : "shard", suffix);
	return tpf_arena_strdup(w->g->arena, buf);
}

static struct tpf_node *insert(struct rw *w, struct tpf_node *before, const char *domain,
			       const char *op, const char *name, struct tpf_value **in, size_t ni,
			       size_t no)
{
	struct tpf_node *n = tpf_graph_insert_node(w->g, before, domain, op, name, in, ni, no, NULL);
	if (!n) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	n->origin_pass = "shard";
	if (domain && !strcmp(domain, TPF_MS_DOMAIN))
		w->used_ms = 1;
	return n;
}

/* Where a conversion of v goes: right after its producer (inputs and
 * initializers: before the first node). */
static struct tpf_node *after_producer(struct rw *w, struct tpf_value *v)
{
	if (v->producer)
		return v->producer->next;
	return w->g->first;
}

/* An int64 (or int32) initializer: k elements, a 1-D tensor, or with
 * `scalar` the one element as a scalar. */
static struct tpf_value *new_ints(struct rw *w, const char *base, const int64_t *vals, int k,
				  int scalar, enum tpf_dtype dt)
{
	int64_t dim = k;
	const char *nm = tpf_graph_unique_name(w->g, base);
	int rank = scalar ? 0 : 1;
	struct tpf_value *v;

	if (!nm) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	if (dt == TPF_DTYPE_INT32) {
		int32_t tmp[64];
		for (int i = 0; i < k && i < 64; i++)
			tmp[i] = (int32_t)vals[i];
		v = tpf_graph_add_initializer(w->g, nm, dt, rank, scalar ? NULL : &dim, tmp,
					      (size_t)k * 4);
	} else {
		v = tpf_graph_add_initializer(w->g, nm, TPF_DTYPE_INT64, rank, scalar ? NULL : &dim,
					      vals, (size_t)k * 8);
	}
	if (!v)
		w->st = TPF_ERR_NOMEM;
	return v;
}

/* A rank-dependent int tensor: base + rank * step. */
static struct tpf_value *rank_value(struct rw *w, const char *base, int64_t b, int64_t step,
				    int scalar, enum tpf_dtype dt)
{
	struct tpf_value *v = new_ints(w, base, &b, 1, scalar, dt);
	if (!v)
		return NULL;
	if (sh_push((void **)&w->rd->b, &w->rd->n_b, &w->rd->cap_b, sizeof(*w->rd->b))) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	w->rd->b[w->rd->n_b - 1] = (struct rd_bound){v->init, NULL, NULL, b, step, dt};
	return v;
}

/* ------------------------------------------------------------------ conversions */

static struct tpf_value *allreduce(struct rw *w, struct tpf_value *v)
{
	struct tpf_node *n;
	struct tpf_value *c = cache_get(w, v, (struct sh){SH_R, 0, 0});
	if (c)
		return c;
	n = insert(w, after_producer(w, v), TPF_MS_DOMAIN, "AllReduce",
		   node_name(w, v->producer ? v->producer->name : v->name, "AllReduce"), &v, 1, 1);
	if (!n)
		return NULL;
	set_local_type(w, n->outputs[0], v, (struct sh){SH_R, 0, 0});
	w->rd->allreduce++;
	cache_put(w, v, (struct sh){SH_R, 0, 0}, n->outputs[0]);
	return n->outputs[0];
}

static struct tpf_value *allgather(struct rw *w, struct tpf_value *v, struct sh from)
{
	const struct sh_fact *f = sh_full(w->s, v);
	struct tpf_value *c = cache_get(w, v, (struct sh){SH_R, 1, 0}), *res;
	struct tpf_node *n, *before;
	struct sh_sections one;
	const struct sh_sections *sec;
	int r = f->rank;

	if (c)
		return c;
	if (r < 0 || from.axis >= r) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': cannot gather a tensor of unknown rank", v->name);
		return NULL;
	}
	before = after_producer(w, v);
	n = insert(w, before, TPF_MS_DOMAIN, "AllGather",
		   node_name(w, v->producer ? v->producer->name : v->name, "AllGather"), &v, 1, 1);
	if (!n)
		return NULL;
	if (tpf_node_set_attr_int(n, "axis", from.axis == r - 1 ? -1 : from.axis) ||
	    tpf_node_set_attr_int(n, "group_size", w->s->W)) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	w->rd->allgather++;
	res = n->outputs[0];
	sec = sections_of(w->s, from, f->dims[from.axis], &one);
	if (sec->n > 1) {
		/* rank-major pieces back into section order */
		size_t k = (size_t)sec->n * (size_t)w->s->W;
		int64_t sizes[SH_MAX_SECT * 64];
		struct tpf_value *parts[SH_MAX_SECT * 64];
		struct tpf_node *sp, *cat;
		if (k > SH_MAX_SECT * 64) {
			w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': too many pieces to gather", v->name);
			return NULL;
		}
		set_local_type(w, res, v, (struct sh){SH_R, 0, 0});
		for (int rk = 0; rk < w->s->W; rk++)
			for (int j = 0; j < sec->n; j++)
				sizes[rk * sec->n + j] = sec->size[j] / w->s->W;
		struct tpf_value *in2[2] = {res, new_ints(w, "shard_sections", sizes, (int)k, 0, TPF_DTYPE_INT64)};
		if (!in2[1])
			return NULL;
		sp = insert(w, before, "", "Split", node_name(w, n->name, "Split"), in2, 2, k);
		if (!sp || tpf_node_set_attr_int(sp, "axis", from.axis)) {
			w->st = TPF_ERR_NOMEM;
			return NULL;
		}
		for (int j = 0; j < sec->n; j++)
			for (int rk = 0; rk < w->s->W; rk++)
				parts[j * w->s->W + rk] = sp->outputs[rk * sec->n + j];
		cat = insert(w, before, "", "Concat", node_name(w, n->name, "Concat"), parts, k, 1);
		if (!cat || tpf_node_set_attr_int(cat, "axis", from.axis)) {
			w->st = TPF_ERR_NOMEM;
			return NULL;
		}
		res = cat->outputs[0];
	}
	set_local_type(w, res, v, (struct sh){SH_R, 0, 0});
	cache_put(w, v, (struct sh){SH_R, 1, 0}, res);
	return res;
}

static void note_replaced(struct rw *w, struct tpf_value *v)
{
	if (!v || v->kind != TPF_VALUE_INITIALIZER)
		return;
	for (size_t i = 0; i < w->n_replaced; i++)
		if (w->replaced_inits[i] == v)
			return;
	if (sh_push((void **)&w->replaced_inits, &w->n_replaced, &w->cap_replaced, sizeof(*w->replaced_inits)))
		w->st = TPF_ERR_NOMEM;
	else
		w->replaced_inits[w->n_replaced - 1] = v;
}

/* A sliced copy of constant tensor t along `axis` (filled per rank). */
static struct tpf_value *sliced_constant(struct rw *w, struct tpf_value *v,
					 const struct tpf_tensor *t, int axis,
					 const struct sh_sections *sec)
{
	int64_t dims[TPF_MAX_RANK], inner = 1;
	unsigned bits = tpf_dtype_bits(t->dtype);
	struct tpf_tensor *nt;
	struct tpf_value *nv;
	const char *nm;

	if (t->rank <= axis || !bits || t->dtype == TPF_DTYPE_STRING) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "constant '%s' cannot be sliced on axis %d",
				      v->name, axis);
		return NULL;
	}
	memcpy(dims, t->dims, (size_t)t->rank * sizeof(int64_t));
	dims[axis] /= w->s->W;
	for (int k = axis + 1; k < t->rank; k++)
		inner *= t->dims[k];
	for (int j = 0; j < sec->n; j++)
		if (((sec->size[j] / w->s->W) * inner * bits) % 8) {
			w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED,
					      "constant '%s': a slice of %" PRId64 " rows of a %u-bit type is not whole bytes",
					      v->name, sec->size[j] / w->s->W, bits);
			return NULL;
		}
	{
		char base[400];
		snprintf(base, sizeof(base), "%s.rank_part", v->name);
		nm = tpf_graph_unique_name(w->g, base);
	}
	nt = nm ? tpf_tensor_create(w->g->arena, nm, t->dtype, t->rank, dims, NULL, 0) : NULL;
	nv = nt ? tpf_graph_add_initializer_tensor(w->g, nt) : NULL;
	if (!nv || sh_push((void **)&w->rd->w, &w->rd->n_w, &w->rd->cap_w, sizeof(*w->rd->w))) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	w->rd->w[w->rd->n_w - 1] = (struct rd_weight){nt, t, axis, *sec, NULL};
	w->rd->weights_split++;
	note_replaced(w, v);
	return nv;
}

static size_t uses_of(const struct tpf_value *v)
{
	return tpf_value_use_count(v);
}

/* R -> S of a constant or of a weight chain over one. */
static struct tpf_value *slice_weight(struct rw *w, struct tpf_value *v, int axis,
				      const struct sh_sections *sec, int depth)
{
	const struct tpf_tensor *t = tpf_value_constant(v);
	struct tpf_node *p = v->producer, *use;
	struct tpf_value *base;
	int baxis = axis;

	if (t) {
		/* one slice of a table however many Gathers read it */
		int si = sh_sect_intern(w->s, sec);
		struct sh key = {SH_S, (int8_t)axis, (uint16_t)(si > 0 ? si : 0)};
		struct tpf_value *c = si >= 0 ? cache_get(w, v, key) : NULL;
		if (c)
			return c;
		c = sliced_constant(w, v, t, axis, sec);
		if (c && si >= 0)
			cache_put(w, v, key, c);
		return c;
	}
	if (!p || depth > 4 || !p->n_inputs || !p->inputs[0])
		return NULL;
	if (sh_op(p, TPF_OP_TRANSPOSE)) {
		const struct tpf_attr *pa = tpf_node_attr(p, "perm");
		int r = sh_full(w->s, v)->rank;
		if (r < 0)
			return NULL;
		baxis = pa && pa->n == (size_t)r ? (int)pa->ints[axis] : r - 1 - axis;
	} else if (sh_op(p, TPF_OP_GATHER) || sh_op(p, TPF_OP_GATHER_ND)) {
		/* whole rows of a stacked table (experts): the table is sliced */
		int rows;
		if (!sh_stacked_table(p, NULL, &rows) || axis < rows)
			return NULL;
		baxis = axis - rows + 1;
	} else if (!sh_op(p, TPF_OP_IDENTITY) && !sh_op(p, TPF_OP_CAST) && !sh_op(p, TPF_OP_DEQUANTIZE_LINEAR)) {
		return NULL;
	}
	base = slice_weight(w, p->inputs[0], baxis, sec, depth + 1);
	if (!base)
		return NULL;
	if (uses_of(v) == 1 && !tpf_value_is_graph_output(v)) {
		if (tpf_node_set_input(p, 0, base)) {
			w->st = TPF_ERR_NOMEM;
			return NULL;
		}
		use = p;
		/* v itself is now this rank's part */
		if (v->id < w->s->n_values0)
			w->p->sh[v->id] = (struct sh){SH_S, (int8_t)axis, 0};
	} else {
		struct tpf_value *in[8];
		size_t k = p->n_inputs < 8 ? p->n_inputs : 8;
		memcpy(in, p->inputs, k * sizeof(*in));
		in[0] = base;
		use = insert(w, p->next, p->domain, p->op_type, node_name(w, p->name, "rank_part"), in, k, 1);
		if (!use)
			return NULL;
		for (size_t a = 0; a < p->n_attrs; a++)
			if (tpf_node_add_attr(use, &p->attrs[a])) {
				w->st = TPF_ERR_NOMEM;
				return NULL;
			}
	}
	{
		struct sh x = {SH_S, (int8_t)axis, 0};
		set_local_type(w, use->outputs[0], v, x);
	}
	return use->outputs[0];
}

/* R -> S(axis, sections) of a computed value: a Slice per section. */
static struct tpf_value *local_slice(struct rw *w, struct tpf_value *v, struct sh to,
				     const struct tpf_value *like)
{
	const struct sh_fact *f = sh_full(w->s, like);
	struct sh_sections one;
	const struct sh_sections *sec;
	struct tpf_value *parts[SH_MAX_SECT];
	struct tpf_node *before = after_producer(w, v);
	int64_t off = 0, W = w->s->W;
	int r = f->rank;

	if (r < 0 || to.axis >= r || f->dims[to.axis] < 0) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': cannot slice an axis of unknown size",
				      v->name);
		return NULL;
	}
	sec = sections_of(w->s, to, f->dims[to.axis], &one);
	for (int j = 0; j < sec->n; j++) {
		int64_t part = sec->size[j] / W, ax = to.axis;
		struct tpf_value *in[4];
		struct tpf_node *n;
		in[0] = v;
		in[1] = rank_value(w, "shard_start", off, part, 0, TPF_DTYPE_INT64);
		in[2] = rank_value(w, "shard_end", off + part, part, 0, TPF_DTYPE_INT64);
		in[3] = new_ints(w, "shard_axis", &ax, 1, 0, TPF_DTYPE_INT64);
		if (!in[1] || !in[2] || !in[3])
			return NULL;
		n = insert(w, before, "", "Slice",
			   node_name(w, v->producer ? v->producer->name : v->name, "rank_part"), in, 4, 1);
		if (!n)
			return NULL;
		w->rd->slices++;
		parts[j] = n->outputs[0];
		{
			struct sh_sections s1 = {.n = 1, .size = {sec->size[j]}};
			(void)s1;
			struct sh x = {SH_S, (int8_t)to.axis, 0};
			set_local_type(w, parts[j], like, x);
			if (sec->n > 1 && parts[j]->type.kind == TPF_TYPE_TENSOR &&
			    parts[j]->type.shape.rank > to.axis)
				parts[j]->type.shape.dims[to.axis] = (struct tpf_dim){part, NULL, NULL};
		}
		off += sec->size[j];
	}
	if (sec->n == 1)
		return parts[0];
	{
		struct tpf_node *cat = insert(w, before, "", "Concat",
					      node_name(w, v->producer ? v->producer->name : v->name, "rank_parts"),
					      parts, (size_t)sec->n, 1);
		if (!cat || tpf_node_set_attr_int(cat, "axis", to.axis)) {
			w->st = TPF_ERR_NOMEM;
			return NULL;
		}
		set_local_type(w, cat->outputs[0], like, to);
		return cat->outputs[0];
	}
}

static struct tpf_value *convert(struct rw *w, struct tpf_value *v, struct sh from, struct sh to)
{
	struct tpf_value *c;

	if (sh_same(from, to))
		return v;
	if ((from.kind == SH_S && from.outer > 1) || (to.kind == SH_S && to.outer > 1)) {
		char nb[256];
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED,
				      "%s: value '%s' is split within rows and cannot be gathered or sliced",
				      v->producer ? tpf_node_describe(v->producer, nb, sizeof(nb)) : "input",
				      v->name);
		return NULL;
	}
	if ((c = cache_get(w, v, to)))
		return c;
	if (to.kind == SH_R) {
		if (from.kind == SH_P)
			return allreduce(w, v);
		if (from.kind == SH_S)
			return allgather(w, v, from);
		return v;
	}
	if (to.kind == SH_S) {
		struct tpf_value *src = v;
		const struct sh_fact *f = sh_full(w->s, v);
		struct sh_sections one;
		if (from.kind == SH_P)
			src = allreduce(w, v);
		else if (from.kind == SH_S)
			src = allgather(w, v, from);
		if (!src)
			return NULL;
		if (src == v && v->kind == TPF_VALUE_GRAPH_INPUT && v->id < w->s->n_values0 &&
		    w->iface[v->id])
			return v;
		if (src == v) {
			struct tpf_value *wv = slice_weight(w, v, to.axis,
							    sections_of(w->s, to, f->rank > to.axis ? f->dims[to.axis] : -1, &one), 0);
			if (w->st)
				return NULL;
			if (wv) {
				cache_put(w, v, to, wv);
				return wv;
			}
		}
		c = local_slice(w, src, to, v);
		if (c)
			cache_put(w, v, to, c);
		return c;
	}
	w->st = tpf_diag_fail(w->d, TPF_ERR_INVALID, "value '%s': no conversion to partial sums", v->name);
	return NULL;
}

/* ------------------------------------------------------------------ literal edits */

struct change {
	int elem;
	int64_t value;
};

struct edit_group {
	struct tpf_node *node;
	int index;
	struct change ch[SH_MAX_VALS];
	int n;
};

static int changes_equal(const struct edit_group *a, const struct edit_group *b)
{
	if (a->n != b->n)
		return 0;
	for (int i = 0; i < a->n; i++)
		if (a->ch[i].elem != b->ch[i].elem || a->ch[i].value != b->ch[i].value)
			return 0;
	return 1;
}

static void apply_use(struct rw *w, struct tpf_node *user, int index, const struct change *ch,
		      int n, int depth);

static struct tpf_tensor *edited_tensor(struct rw *w, const struct tpf_tensor *t, const char *name,
					const struct change *ch, int n)
{
	struct tpf_tensor *nt = tpf_tensor_create(w->g->arena, name, t->dtype, t->rank, t->dims,
						  t->data, t->nbytes);
	if (!nt) {
		w->st = TPF_ERR_NOMEM;
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		if (t->dtype == TPF_DTYPE_INT64 && (size_t)(ch[i].elem + 1) * 8 <= t->nbytes)
			memcpy((char *)nt->data + ch[i].elem * 8, &ch[i].value, 8);
		else if (t->dtype == TPF_DTYPE_INT32 && (size_t)(ch[i].elem + 1) * 4 <= t->nbytes) {
			int32_t x = (int32_t)ch[i].value;
			memcpy((char *)nt->data + ch[i].elem * 4, &x, 4);
		} else {
			w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "constant '%s' cannot be edited", name);
			return NULL;
		}
	}
	return nt;
}

/* Rewrites value v itself (every user wants the change). */
static void apply_value(struct rw *w, struct tpf_value *v, const struct change *ch, int n, int depth)
{
	struct tpf_node *p = v->producer;

	if (depth > 16) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': chain too deep to edit", v->name);
		return;
	}
	if (v->kind == TPF_VALUE_INITIALIZER && v->init) {
		struct tpf_tensor *nt = edited_tensor(w, v->init, v->init->name, ch, n);
		if (nt)
			v->init = nt;
		return;
	}
	if (p && sh_op(p, TPF_OP_CONSTANT)) {
		const struct tpf_tensor *t = tpf_value_constant(v);
		struct tpf_tensor *nt = t ? edited_tensor(w, t, t->name, ch, n) : NULL;
		if (!nt)
			return;
		for (size_t a = p->n_attrs; a-- > 0;)
			if (tpf_node_remove_attr(p, p->attrs[a].name)) {
				w->st = TPF_ERR_NOMEM;
				return;
			}
		if (tpf_node_set_attr_tensor(p, "value", nt))
			w->st = TPF_ERR_NOMEM;
		return;
	}
	if (p && sh_op(p, TPF_OP_CONCAT)) {
		int off = 0;
		for (size_t i = 0; i < p->n_inputs; i++) {
			int64_t k = sh_numel(sh_full(w->s, p->inputs[i]));
			struct change sub[SH_MAX_VALS];
			int m = 0;
			if (k < 0)
				k = sh_numel(sh_eval_fact(&w->s->ev, p->inputs[i]));
			for (int j = 0; j < n; j++)
				if (ch[j].elem >= off && ch[j].elem < off + k)
					sub[m++] = (struct change){ch[j].elem - off, ch[j].value};
			if (m)
				apply_use(w, p, (int)i, sub, m, depth + 1);
			off += (int)k;
		}
		return;
	}
	if (p && (sh_op(p, TPF_OP_UNSQUEEZE) || sh_op(p, TPF_OP_SQUEEZE) || sh_op(p, TPF_OP_RESHAPE) ||
		  sh_op(p, TPF_OP_IDENTITY) || sh_op(p, TPF_OP_CAST) || sh_op(p, TPF_OP_FLATTEN))) {
		apply_use(w, p, 0, ch, n, depth + 1);
		return;
	}
	for (int side = 0; p && n == 1 && ch[0].elem == 0 && side < 2; side++) {
		/* a scalar Mul or Div that scales the literal (sh_editable) */
		int64_t ow = sh_scale_operand(w->s, p, side, ch[0].value);
		if (ow > 0 && sh_editable(w->s, p->inputs[side], 0, ow, depth + 1)) {
			struct change one = {0, ow};
			apply_use(w, p, side, &one, 1, depth + 1);
			return;
		}
	}
	w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': not a literal to edit", v->name);
}

/* A private copy of what user's operand `index` reads, with the change. */
static void privatize(struct rw *w, struct tpf_node *user, int index, const struct change *ch, int n,
		      int depth)
{
	struct tpf_value *v = user->inputs[index];
	const struct tpf_tensor *t = tpf_value_constant(v);
	struct tpf_node *p = v->producer;

	if (t) {
		char base[400];
		const char *nm;
		struct tpf_tensor *nt;
		struct tpf_value *nv;
		snprintf(base, sizeof(base), "%s.rank_local", v->name);
		nm = tpf_graph_unique_name(w->g, base);
		nt = nm ? edited_tensor(w, t, nm, ch, n) : NULL;
		nv = nt ? tpf_graph_add_initializer_tensor(w->g, nt) : NULL;
		if (!nv || tpf_node_set_input(user, (size_t)index, nv)) {
			if (!w->st)
				w->st = TPF_ERR_NOMEM;
			return;
		}
		if (p && sh_op(p, TPF_OP_CONSTANT) && !uses_of(v))
			tpf_graph_erase_node(w->g, p);
		return;
	}
	if (!p) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "value '%s': not a literal to edit", v->name);
		return;
	}
	{
		struct tpf_node *cl = insert(w, user, p->domain, p->op_type, node_name(w, p->name, "rank_local"),
					     p->inputs, p->n_inputs, p->n_outputs);
		if (!cl)
			return;
		for (size_t a = 0; a < p->n_attrs; a++)
			if (tpf_node_add_attr(cl, &p->attrs[a])) {
				w->st = TPF_ERR_NOMEM;
				return;
			}
		for (size_t j = 0; j < p->n_outputs; j++)
			if (p->outputs[j] && cl->outputs[j] && p->outputs[j]->type.kind != TPF_TYPE_NONE &&
			    tpf_value_copy_type(cl->outputs[j], &p->outputs[j]->type)) {
				w->st = TPF_ERR_NOMEM;
				return;
			}
		if (tpf_node_set_input(user, (size_t)index, cl->outputs[v->producer_index])) {
			w->st = TPF_ERR_NOMEM;
			return;
		}
		apply_value(w, cl->outputs[v->producer_index], ch, n, depth + 1);
	}
}

static void apply_use(struct rw *w, struct tpf_node *user, int index, const struct change *ch,
		      int n, int depth)
{
	struct tpf_value *v = user->inputs[index];
	if (uses_of(v) == 1 && !(v->kind == TPF_VALUE_INITIALIZER && v->is_graph_input))
		apply_value(w, v, ch, n, depth);
	else
		privatize(w, user, index, ch, n, depth);
}

static void apply_attr_edit(struct rw *w, const struct sh_elem_edit *e)
{
	const struct tpf_attr *a = tpf_node_attr(e->node, e->attr);
	int64_t vals[256];
	if (e->elem < 0) { /* an int attribute */
		if (tpf_node_set_attr_int(e->node, e->attr, e->value))
			w->st = TPF_ERR_NOMEM;
		return;
	}
	if (!a || a->kind != TPF_ATTR_INTS || a->n > 256 || e->elem >= (int)a->n) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_INVALID, "attribute '%s' cannot be edited", e->attr);
		return;
	}
	memcpy(vals, a->ints, a->n * sizeof(int64_t));
	vals[e->elem] = e->value;
	if (tpf_node_set_attr_ints(e->node, e->attr, vals, a->n))
		w->st = TPF_ERR_NOMEM;
}

static void apply_edits(struct rw *w)
{
	struct sh_prop *p = w->p;
	struct edit_group *gr = NULL;
	size_t ng = 0, cap = 0;

	for (size_t i = 0; i < p->n_edits && !w->st; i++) {
		const struct sh_elem_edit *e = &p->edits[i];
		size_t k;
		if (e->index < 0) {
			apply_attr_edit(w, e);
			continue;
		}
		for (k = 0; k < ng; k++)
			if (gr[k].node == e->node && gr[k].index == e->index)
				break;
		if (k == ng) {
			if (sh_push((void **)&gr, &ng, &cap, sizeof(*gr))) {
				w->st = TPF_ERR_NOMEM;
				break;
			}
			gr[k].node = e->node;
			gr[k].index = e->index;
		}
		{
			int j;
			for (j = 0; j < gr[k].n; j++)
				if (gr[k].ch[j].elem == e->elem)
					break;
			if (j == gr[k].n && gr[k].n < SH_MAX_VALS)
				gr[k].n++;
			gr[k].ch[j] = (struct change){e->elem, e->value};
		}
	}
	/* groups on one value with the same change and no other users: in place */
	for (size_t i = 0; i < ng && !w->st; i++) {
		struct tpf_value *v;
		size_t same = 0, users;
		int all_same = 1;
		if (gr[i].node == NULL)
			continue;
		v = gr[i].node->inputs[gr[i].index];
		users = uses_of(v);
		for (size_t k = 0; k < ng; k++) {
			if (!gr[k].node || gr[k].node->inputs[gr[k].index] != v)
				continue;
			same++;
			if (!changes_equal(&gr[k], &gr[i]))
				all_same = 0;
		}
		if (all_same && same == users && !(v->kind == TPF_VALUE_INITIALIZER && v->is_graph_input)) {
			apply_value(w, v, gr[i].ch, gr[i].n, 0);
			for (size_t k = 0; k < ng; k++)
				if (k != i && gr[k].node && gr[k].node->inputs[gr[k].index] == v)
					gr[k].node = NULL;
		} else {
			privatize(w, gr[i].node, gr[i].index, gr[i].ch, gr[i].n, 0);
		}
		gr[i].node = NULL;
	}
	tpf_free(gr);
}

static void redirect(struct rw *w, struct tpf_value *u, struct tpf_value *c);

/* ------------------------------------------------------------------ vocab-parallel embedding */

static void embed_rewrite(struct rw *w, struct tpf_node *n, struct tpf_value *table_local)
{
	struct tpf_value *ids = n->inputs[1], *in[3], *shifted, *neg, *big, *ok, *safe, *g, *m;
	const struct tpf_tensor *t = tpf_value_constant(n->inputs[0]);
	enum tpf_dtype idt = tpf_value_dtype(ids);
	int64_t rows = t->dims[0] / w->s->W, zero = 0, axis_last = -1;
	struct tpf_node *k;
	struct tpf_value *lo, *len, *z, *ax;

	if (idt != TPF_DTYPE_INT32)
		idt = TPF_DTYPE_INT64;
	lo = rank_value(w, "vocab_start", 0, rows, 1, idt);
	len = new_ints(w, "vocab_rows", &rows, 1, 1, idt);
	z = new_ints(w, "vocab_zero", &zero, 1, 1, idt);
	ax = new_ints(w, "vocab_axis", &axis_last, 1, 0, TPF_DTYPE_INT64);
	if (!lo || !len || !z || !ax)
		return;
	in[0] = ids;
	in[1] = lo;
	if (!(k = insert(w, n, "", "Sub", node_name(w, n->name, "vocab_shift"), in, 2, 1)))
		return;
	shifted = k->outputs[0];
	in[0] = shifted;
	in[1] = z;
	if (!(k = insert(w, n, "", "Less", node_name(w, n->name, "vocab_below"), in, 2, 1)))
		return;
	neg = k->outputs[0];
	in[1] = len;
	if (!(k = insert(w, n, "", "Less", node_name(w, n->name, "vocab_before_end"), in, 2, 1)))
		return;
	big = k->outputs[0];
	in[0] = neg;
	in[1] = big;
	if (!(k = insert(w, n, "", "Equal", node_name(w, n->name, "vocab_outside"), in, 2, 1)))
		return;
	in[0] = k->outputs[0];
	if (!(k = insert(w, n, "", "Not", node_name(w, n->name, "vocab_inside"), in, 1, 1)))
		return;
	ok = k->outputs[0];
	in[0] = ok;
	in[1] = shifted;
	in[2] = z;
	if (!(k = insert(w, n, "", "Where", node_name(w, n->name, "vocab_index"), in, 3, 1)))
		return;
	safe = k->outputs[0];
	if (tpf_node_set_input(n, 0, table_local) || tpf_node_set_input(n, 1, safe)) {
		w->st = TPF_ERR_NOMEM;
		return;
	}
	g = n->outputs[0];
	in[0] = ok;
	if (!(k = insert(w, n->next, "", "Cast", node_name(w, n->name, "vocab_mask"), in, 1, 1)) ||
	    tpf_node_set_attr_int(k, "to", t->dtype)) {
		w->st = TPF_ERR_NOMEM;
		return;
	}
	in[0] = k->outputs[0];
	in[1] = ax;
	{
		struct tpf_node *after = k->next;
		if (!(k = insert(w, after, "", "Unsqueeze", node_name(w, n->name, "vocab_mask_unsqueeze"), in, 2, 1)))
			return;
		m = k->outputs[0];
		in[0] = g;
		in[1] = m;
		after = k->next;
		if (!(k = insert(w, after, "", "Mul", node_name(w, n->name, "vocab_masked"), in, 2, 1)))
			return;
	}
	/* users of the lookup read the masked one, summed over the ranks */
	{
		struct tpf_value *masked = k->outputs[0];
		struct tpf_node *mul = k;
		const char *name = g->name;
		for (size_t u = g->n_uses; u-- > 0;) {
			struct tpf_use us = g->uses[u];
			if (us.node != k && us.index >= 0 && tpf_node_set_input(us.node, (size_t)us.index, masked)) {
				w->st = TPF_ERR_NOMEM;
				return;
			}
		}
		if (tpf_value_is_graph_output(g)) {
			for (size_t i = 0; i < w->g->n_outputs; i++)
				if (w->g->outputs[i] == g && tpf_graph_set_output(w->g, i, masked)) {
					w->st = TPF_ERR_NOMEM;
					return;
				}
		}
		(void)name;
		if (g->type.kind == TPF_TYPE_TENSOR && tpf_value_copy_type(masked, &g->type))
			w->st = TPF_ERR_NOMEM;
		{
			struct tpf_node *ar = insert(w, mul->next, TPF_MS_DOMAIN, "AllReduce",
						     node_name(w, n->name, "AllReduce"), &masked, 1, 1);
			if (!ar)
				return;
			w->rd->allreduce++;
			if (g->type.kind == TPF_TYPE_TENSOR && tpf_value_copy_type(ar->outputs[0], &g->type))
				w->st = TPF_ERR_NOMEM;
			redirect(w, masked, ar->outputs[0]);
		}
	}
}

/* ------------------------------------------------------------------ the rewrite */

static void redirect(struct rw *w, struct tpf_value *u, struct tpf_value *c);

/* Shape(x) or Size(x) of an input split at the interface reads the
 * rank's dims; the graph was propagated with the full ones, so the split
 * dim is multiplied back by W (Shape: only when its [start, end) holds the
 * axis). */
static void full_dims_of_local(struct rw *w, struct tpf_node *n, struct sh x)
{
	struct tpf_value *u = n->outputs[0], *k, *in[2];
	const struct sh_fact *f = sh_full(w->s, n->inputs[0]);
	int64_t mul[TPF_MAX_RANK];
	int count = 1, rank = f->rank;
	struct tpf_node *m;

	if (!u || (!uses_of(u) && !tpf_value_is_graph_output(u)))
		return;
	mul[0] = w->s->W;
	if (sh_op(n, TPF_OP_SHAPE) && rank <= x.axis) {
		w->st = tpf_diag_fail(w->d, TPF_ERR_UNSUPPORTED, "%s: the rank of input '%s' is unknown",
				      n->name ? n->name : "Shape", n->inputs[0]->name);
		return;
	}
	if (sh_op(n, TPF_OP_SHAPE)) {
		int64_t st = tpf_node_attr_int(n, "start", 0), en = tpf_node_attr_int(n, "end", rank);
		st = st < 0 ? st + rank : st;
		en = en < 0 ? en + rank : en;
		st = st < 0 ? 0 : st > rank ? rank : st;
		en = en < 0 ? 0 : en > rank ? rank : en;
		if (x.axis < st || x.axis >= en)
			return;
		count = (int)(en - st);
		for (int i = 0; i < count; i++)
			mul[i] = st + i == x.axis ? w->s->W : 1;
	}
	k = new_ints(w, "shard_full_dims", mul, count, sh_op(n, TPF_OP_SIZE), TPF_DTYPE_INT64);
	in[0] = u;
	in[1] = k;
	m = k ? insert(w, n->next, "", "Mul", node_name(w, n->name, "full_dims"), in, 2, 1) : NULL;
	if (!m)
		return;
	if (tpf_value_copy_type(m->outputs[0], &u->type)) {
		w->st = TPF_ERR_NOMEM;
		return;
	}
	redirect(w, u, m->outputs[0]);
}

/* Values whose users see it as a local slice of a graph input: the
 * interface is split instead (all uses want the same split; Shape and
 * Size read any, their split dim multiplied back).  A KV cache: each rank
 * is given its heads. */
static void decide_interfaces(struct rw *w)
{
	struct shard *s = w->s;
	struct sh_prop *p = w->p;

	for (size_t i = 0; i < s->g->n_inputs; i++) {
		struct tpf_value *v = s->g->inputs[i];
		size_t convs = 0, dims = 0;
		struct sh target = {0};
		int ok = 1;
		if (!v || v->kind != TPF_VALUE_GRAPH_INPUT || v->id >= s->n_values0)
			continue;
		for (size_t k = 0; k < p->n_convs; k++) {
			const struct sh_conv *c = &p->convs[k];
			if (c->kind != CONV_INPUT || c->node->inputs[c->index] != v)
				continue;
			if (c->from.kind != SH_R || c->to.kind != SH_S ||
			    (convs && !sh_same(target, c->to)))
				ok = 0;
			target = c->to;
			convs++;
		}
		for (size_t k = 0; k < v->n_uses; k++)
			dims += sh_op(v->uses[k].node, TPF_OP_SHAPE) || sh_op(v->uses[k].node, TPF_OP_SIZE);
		if (ok && convs && convs + dims == v->n_uses && !tpf_value_is_graph_output(v)) {
			w->iface[v->id] = 1;
			w->iface_sh[v->id] = target;
			for (size_t k = v->n_uses; k-- > 0 && !w->st;)
				if (sh_op(v->uses[k].node, TPF_OP_SHAPE) ||
				    sh_op(v->uses[k].node, TPF_OP_SIZE))
					full_dims_of_local(w, v->uses[k].node, target);
		}
	}
}

/* Whether an output split should stay split: it is a state the caller
 * feeds back (it comes from a split graph input through data movement). */
static int is_state(struct rw *w, const struct tpf_value *v, int depth)
{
	const struct tpf_node *n = v ? v->producer : NULL;
	if (!v || depth > 8)
		return 0;
	if (v->kind == TPF_VALUE_GRAPH_INPUT)
		return v->id < w->s->n_values0 && w->iface[v->id];
	if (!n)
		return 0;
	if (sh_op(n, TPF_OP_CONCAT)) {
		for (size_t i = 0; i < n->n_inputs; i++)
			if (is_state(w, n->inputs[i], depth + 1))
				return 1;
		return 0;
	}
	if (sh_op(n, TPF_OP_IDENTITY) || sh_op(n, TPF_OP_RESHAPE) || sh_op(n, TPF_OP_TRANSPOSE) || sh_op(n, TPF_OP_CAST))
		return is_state(w, n->inputs[0], depth + 1);
	return 0;
}

static void rename_swap(struct rw *w, struct tpf_value *old, struct tpf_value *nw)
{
	char base[512];
	const char *keep = old->name, *tmp;
	snprintf(base, sizeof(base), "%s_rank_local", keep);
	tmp = tpf_graph_unique_name(w->g, base);
	if (!tmp || tpf_value_rename(old, tmp) || tpf_value_rename(nw, keep))
		w->st = TPF_ERR_NOMEM;
}

/* An output conversion: users of u (all but the conversion) read c. */
static void redirect(struct rw *w, struct tpf_value *u, struct tpf_value *c)
{
	struct tpf_node *cn = c->producer;
	int out = tpf_value_is_graph_output(u);

	for (size_t k = u->n_uses; k-- > 0;) {
		struct tpf_use us = u->uses[k];
		struct tpf_node *x = us.node;
		int mine = 0;
		/* the conversion's own nodes read u */
		for (struct tpf_node *q = cn; q && !mine; q = q->prev) {
			if (q == x)
				mine = 1;
			if (q == u->producer)
				break;
		}
		if (mine || us.index < 0)
			continue;
		if (tpf_node_set_input(x, (size_t)us.index, c)) {
			w->st = TPF_ERR_NOMEM;
			return;
		}
	}
	if (out) {
		for (size_t i = 0; i < w->g->n_outputs; i++)
			if (w->g->outputs[i] == u && tpf_graph_set_output(w->g, i, c)) {
				w->st = TPF_ERR_NOMEM;
				return;
			}
		rename_swap(w, u, c);
	}
}

/* Values whose shape comes from computed dims: their declared shapes may
 * no longer hold; shape inference gives them again. */
static int shape_from_values(const struct tpf_node *n)
{
	if (!n)
		return 0;
	switch (n->op) {
	case TPF_OP_EXPAND:
	case TPF_OP_CONSTANT_OF_SHAPE:
	case TPF_OP_RESHAPE:
	case TPF_OP_TILE:
	case TPF_OP_RANGE:
	case TPF_OP_SLICE:
	case TPF_OP_PAD:
	case TPF_OP_SPLIT:
		return 1;
	default:
		return tpf_node_shard_rule(n, NULL) == TPF_SHARD_RULE_RESIZE;
	}
}

/* Types of the original values, after the conversions (which take theirs
 * from the original types): a split value's local dims; a value whose shape
 * comes from computed dims gets the static ones the evaluation confirms. */
static void local_types(struct rw *w)
{
	struct shard *s = w->s;

	for (size_t i = 0; i < s->n_values0; i++) {
		struct tpf_value *v = s->g->values[i];
		struct sh x;
		if (!v || v->kind == TPF_VALUE_INITIALIZER)
			continue;
		x = v->kind == TPF_VALUE_GRAPH_INPUT ? (w->iface[i] ? w->iface_sh[i] : (struct sh){SH_R, 0, 0})
						      : w->raw[i];
		if (x.kind == SH_S) {
			set_local_type(w, v, v, x);
		} else if (v->producer && shape_from_values(v->producer) &&
			   v->type.kind == TPF_TYPE_TENSOR) {
			/* leave static dims that the evaluation confirms */
			const struct sh_fact *f = sh_full(s, v);
			if (f->rank == v->type.shape.rank)
				set_local_type(w, v, v, (struct sh){SH_R, 0, 0});
		}
		if (x.kind == SH_S && v->kind == TPF_VALUE_GRAPH_INPUT) {
			w->rd->inputs_split++;
			if (sh_split_metadata(s, 0, v, x))
				w->st = TPF_ERR_NOMEM;
		}
	}
}

/* Originals nothing reads any more go; the slice takes the original's name
 * and place. */
static void drop_replaced(struct rw *w)
{
	struct shard *s = w->s;

	for (size_t i = 0; i < w->n_replaced && !w->st; i++) {
		struct tpf_value *v = w->replaced_inits[i];
		if (uses_of(v) || v->is_graph_input)
			continue;
		{
			/* the slice takes the original's name and place */
			const char *name = v->name;
			struct tpf_value *nv;
			char base[512];
			size_t at = 0;
			snprintf(base, sizeof(base), "%s.rank_part", name);
			nv = tpf_graph_find_value(s->g, base);
			while (at < s->g->n_initializers && s->g->initializers[at] != v)
				at++;
			if (tpf_graph_remove_initializer(s->g, v) != TPF_OK || !nv ||
			    nv->kind != TPF_VALUE_INITIALIZER)
				continue;
			if (tpf_value_rename(nv, name) == TPF_OK)
				nv->init->name = nv->name;
			for (size_t j = 0; j < s->g->n_initializers; j++)
				if (s->g->initializers[j] == nv && j > at) {
					memmove(&s->g->initializers[at + 1], &s->g->initializers[at],
						(j - at) * sizeof(*s->g->initializers));
					s->g->initializers[at] = nv;
					break;
				}
		}
	}
}

enum tpf_status sh_rewrite(struct shard *s, struct sh_prop *p, struct sh_rank_data **rdp)
{
	struct rw w;
	struct sh *raw;
	size_t nconv = p->n_convs;

	memset(&w, 0, sizeof(w));
	w.s = s;
	w.p = p;
	w.g = s->g;
	w.d = s->d;
	w.rd = tpf_calloc(1, sizeof(*w.rd));
	w.iface = tpf_calloc(s->n_values0 + 1, 1);
	w.iface_sh = tpf_calloc(s->n_values0 + 1, sizeof(*w.iface_sh));
	raw = w.raw = tpf_calloc(s->n_values0 + 1, sizeof(*raw));
	if (!w.rd || !w.iface || !w.iface_sh || !raw) {
		tpf_free(w.iface);
		tpf_free(w.iface_sh);
		tpf_free(raw);
		tpf_free(w.rd);
		return TPF_ERR_NOMEM;
	}
	w.rd->s = s;
	memcpy(raw, p->sh, s->n_values0 * sizeof(*raw));
	for (size_t k = 0; k < nconv; k++) {
		const struct sh_conv *c = &p->convs[k];
		if (c->kind == CONV_OUTPUT && c->node->outputs[c->index])
			raw[c->node->outputs[c->index]->id] = c->from;
	}
	decide_interfaces(&w);

	/* 2. literal elements of shape operands */
	apply_edits(&w);

	/* 3. conversions into operands */
	for (size_t k = 0; k < nconv && !w.st; k++) {
		const struct sh_conv *c = &p->convs[k];
		struct tpf_value *v, *nv;
		if (c->kind != CONV_INPUT)
			continue;
		v = c->node->inputs[c->index];
		if (!v)
			continue;
		if (c->to.kind == SH_S && c->from.kind == SH_R && sh_op(c->node, TPF_OP_GATHER) &&
		    c->index == 0 && w.raw[c->node->outputs[0]->id].kind == SH_P) {
			nv = convert(&w, v, c->from, c->to);
			if (nv)
				embed_rewrite(&w, c->node, nv);
			continue;
		}
		nv = convert(&w, v, c->from, c->to);
		if (!nv)
			break;
		if (nv != v && tpf_node_set_input(c->node, (size_t)c->index, nv))
			w.st = TPF_ERR_NOMEM;
	}
	/* 4. conversions of outputs (a norm resliced, an LM head gathered) */
	for (size_t k = 0; k < nconv && !w.st; k++) {
		const struct sh_conv *c = &p->convs[k];
		struct tpf_value *u, *nv;
		if (c->kind != CONV_OUTPUT)
			continue;
		if (sh_op(c->node, TPF_OP_GATHER) && c->from.kind == SH_P)
			continue; /* a vocab-parallel lookup, reduced by embed_rewrite */
		u = c->node->outputs[c->index];
		if (!u)
			continue;
		nv = convert(&w, u, c->from, c->to);
		if (!nv)
			break;
		if (nv != u)
			redirect(&w, u, nv);
	}
	/* 5. graph outputs */
	for (size_t i = 0; i < s->g->n_outputs && !w.st; i++) {
		struct tpf_value *v = s->g->outputs[i], *nv;
		struct sh x;
		if (!v || v->id >= s->n_values0)
			continue;
		x = p->sh[v->id];
		if (x.kind == SH_R || x.kind == SH_UNSET)
			continue;
		if (x.kind == SH_S && is_state(&w, v, 0)) {
			w.rd->outputs_split++;
			if (sh_split_metadata(s, 1, v, x))
				w.st = TPF_ERR_NOMEM;
			continue;
		}
		nv = convert(&w, v, x, (struct sh){SH_R, 0, 0});
		if (!nv)
			break;
		if (tpf_graph_set_output(s->g, i, nv)) {
			w.st = TPF_ERR_NOMEM;
			break;
		}
		rename_swap(&w, v, nv);
	}
	local_types(&w);
	drop_replaced(&w);
	for (struct tpf_node *n = s->g->first, *nx; n && !w.st; n = nx) {
		nx = n->next;
		if (sh_op(n, TPF_OP_CONSTANT) && n->n_outputs == 1 && n->outputs[0] &&
		    !uses_of(n->outputs[0]) && n->id < s->n_nodes0)
			tpf_graph_erase_node(s->g, n);
	}
	if (!w.st && w.used_ms && tpf_model_opset(s->m, TPF_MS_DOMAIN) < 0)
		w.st = tpf_model_set_opset(s->m, TPF_MS_DOMAIN, 1);
	if (!w.st)
		w.st = tpf_graph_toposort(s->g, s->d);
	tpf_free(w.cache);
	tpf_free(w.iface);
	tpf_free(w.iface_sh);
	tpf_free(w.replaced_inits);
	tpf_free(raw);
	if (w.st) {
		sh_rank_data_free(w.rd);
		return w.st;
	}
	*rdp = w.rd;
	return TPF_OK;
}
