/* SPDX-License-Identifier: MIT */
/*
 * The sharder's rules (private to passes/shard/): the context a rule reads
 * and writes for one node, the helpers the rules share, and the rules.
 *
 * A rule reads the shardings of the node's operands (in[]) and the facts of
 * the original graph, and writes what it produces (out[]: what users see,
 * raw[]: what the node computes, when an output conversion follows), what
 * it needs on its operands (want[]) and, when a split cannot pass, why
 * (why[], the first reason kept).  rules.c has the element-wise, reduction,
 * norm and contraction rules, rules-movement.c the data-movement ones;
 * propagate.c picks a node's rule from its op record (tpf_node_shard_rule).
 */
#ifndef TPF_SHARD_RULES_H
#define TPF_SHARD_RULES_H

#include "shard.h"

#pragma GCC visibility push(hidden)

static const struct sh SH_R_ = {SH_R, 0, 0, 0};
static const struct sh SH_P_ = {SH_P, 0, 0, 0};

static inline struct sh mk_s(int axis, int sect)
{
	struct sh x = {SH_S, (int8_t)axis, (uint16_t)sect, 0};
	return x;
}

/* x on another axis (sections and outer factor kept) */
static inline struct sh on_axis(struct sh x, int axis)
{
	x.axis = (int8_t)axis;
	return x;
}

static inline int64_t outer_of(struct sh x)
{
	return x.kind == SH_S && x.outer > 1 ? x.outer : 1;
}

static inline int sh_eq(struct sh a, struct sh b)
{
	if (a.kind != b.kind)
		return 0;
	return a.kind != SH_S ||
	       (a.axis == b.axis && a.sect == b.sect && outer_of(a) == outer_of(b));
}

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

static inline struct sh in_sh(const struct sh_prop *p, const struct tpf_value *v)
{
	if (!v || v->id >= p->s->n_values0 || p->sh[v->id].kind == SH_UNSET)
		return SH_R_;
	return p->sh[v->id];
}

static inline const struct sh_fact *full(const struct nctx *c, const struct tpf_value *v)
{
	return sh_full(c->s, v);
}

static inline int64_t vdim(const struct nctx *c, const struct tpf_value *v, int a)
{
	const struct sh_fact *f = full(c, v);
	return f->rank > a && a >= 0 ? f->dims[a] : -1;
}

static inline int frank(const struct nctx *c, const struct tpf_value *v)
{
	return full(c, v)->rank;
}

/* Grows *arrp (elements of `size`) to hold n + 1: 0, or -1 out of memory. */
int sh_reserve(void *arrp, size_t n, size_t *cap, size_t size, size_t first);

/* ------------------------------------------------------------------ helpers (rules.c) */

void sh_whyf(struct nctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether operand v (replicated) can be sliced to S(axis, sect). */
int sh_can_split(const struct nctx *c, const struct tpf_value *v, int axis, int sect,
		 int64_t size);
/* All operands whole, all outputs replicated (the fallback). */
void sh_all_whole(struct nctx *c);
int sh_any_kind(const struct nctx *c, int kind);
/* Partial operands become whole (AllReduce). */
void sh_reduce_partials(struct nctx *c);
/* Elements of a small integer tensor as the rank graph computes them. */
int sh_local_vals(const struct sh_prop *p, const struct tpf_value *v, int64_t *vals, int depth);
/* Element `elem` of operand `index` must read `want` in the rank graph:
 * 1 fine (possibly by an edit of a literal), 0 cannot. */
int sh_need_elem(struct nctx *c, int index, int elem, int64_t orig, int64_t local, int64_t want);
void sh_add_edit(struct nctx *c, int index, const char *attr, int elem, int64_t value);
/* Attribute `name` as an axis of rank r (normalized), -1 when out of range. */
int sh_axis_attr(const struct tpf_node *n, const char *name, int64_t dflt, int r);
int sh_read_axes(struct nctx *c, int r, int64_t *axes, int *count);
void sh_out_partial_rows(struct nctx *c, const struct tpf_value *A);
int sh_first_split(const struct nctx *c, int *sect);
int sh_per_tensor(const struct tpf_node *n);
int sh_is_embedding(const struct nctx *c);

/* ------------------------------------------------------------------ rules */

void sh_rule_default(struct nctx *c);
void sh_rule_unary(struct nctx *c, int linear);
void sh_rule_broadcast(struct nctx *c, int arith);
void sh_rule_along_axis(struct nctx *c, int axis, int keepdims);
void sh_rule_reduce(struct nctx *c, int arith);
void sh_rule_norm(struct nctx *c, int n_data);
void sh_rule_matmul(struct nctx *c);
void sh_rule_gemm(struct nctx *c);
void sh_rule_conv(struct nctx *c);
void sh_rule_pad(struct nctx *c);
void sh_rule_scatter_nd(struct nctx *c);
int sh_rule_range(struct nctx *c);
void sh_rule_elements(struct nctx *c, int scatter);
void sh_rule_einsum(struct nctx *c);
/* rules-movement.c */
void sh_rule_reshape(struct nctx *c);
void sh_rule_flatten(struct nctx *c);
void sh_rule_transpose(struct nctx *c);
void sh_rule_unsqueeze(struct nctx *c, int squeeze);
void sh_rule_expand(struct nctx *c);
void sh_rule_constant_of_shape(struct nctx *c);
void sh_rule_slice(struct nctx *c);
void sh_rule_split(struct nctx *c);
void sh_rule_concat(struct nctx *c);
void sh_rule_gather(struct nctx *c);
void sh_rule_embedding(struct nctx *c);

#pragma GCC visibility pop

#endif /* TPF_SHARD_RULES_H */
