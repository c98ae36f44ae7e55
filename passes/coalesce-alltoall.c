/* SPDX-License-Identifier: MIT */
/*
 * coalesce-alltoall: many independent com.microsoft.AllToAll nodes of one
 * dtype become one AllToAll over a packed buffer.
 *
 * Each AllToAll splits axis 0 of its input x_i into W equal chunks and sends
 * chunk j to rank j; its output is the chunks received from ranks 0..W-1 in
 * order.  With c_i = numel(x_i) / W elements per chunk and S = sum_i c_i, the
 * packed buffer P holds, for each destination j, the contiguous block
 *     P[j*S + off_i .. j*S + off_i + c_i) = flat(x_i)[j*c_i .. (j+1)*c_i)
 * (off_i = c_0 + ... + c_{i-1}), so every destination's chunk stays
 * contiguous and one AllToAll of P (split into W chunks of S) moves them all.
 * The received buffer R is unpacked with the mirrored copy table:
 *     flat(y_i)[j*c_i .. (j+1)*c_i) = R[j*S + off_i .. j*S + off_i + c_i).
 * Both tables (input, source offset, destination offset, length; in
 * elements) are computed here, once, and stored as the `segments` attribute
 * of ai.tpfuse.Pack / ai.tpfuse.Unpack (docs/ops.md).
 *
 * Two AllToAll nodes may share a group only when neither depends on the
 * other (transitively), their dtypes agree, their shapes are static, and
 * their first dimension divides by the world size.
 */
#include "tpf-passes.h"
#include "pass-list.h"

#include <stdlib.h>
#include <string.h>

static const char *const counters[] = {"groups-coalesced", "alltoall-removed", NULL};

#define PASS_NAME "coalesce-alltoall"

struct a2a {
	struct tpf_node *node;
	int64_t numel;  /* elements of the input */
	int group;      /* -1: not grouped */
};

static void explain(struct tpf_pass_context *ctx, const struct tpf_node *n, const char *why)
{
	if (!ctx || !ctx->explain)
		return;
	char buf[256];
	fprintf(ctx->explain, "%s: %s: not coalesced: %s\n", PASS_NAME,
		tpf_node_describe(n, buf, sizeof(buf)), why);
}

/* World size from the node, the context or the model metadata; -1 unknown. */
static int64_t world_size_of(const struct tpf_model *m, const struct tpf_node *n,
			     const struct tpf_pass_context *ctx)
{
	int64_t gs = tpf_node_attr_int(n, "group_size", -1);
	if (gs > 0)
		return gs;
	if (ctx && ctx->world_size > 0)
		return ctx->world_size;
	const char *w = tpf_model_metadata(m, "tp_world_size");
	if (w) {
		char *end;
		long long v = strtoll(w, &end, 10);
		if (*w && !*end && v > 0)
			return v;
	}
	return -1;
}

static enum tpf_status coalesce_group(struct tpf_graph *g, struct a2a *members, size_t k,
				      int64_t world, struct tpf_pass_context *ctx, int group_no)
{
	enum tpf_status st = TPF_ERR_NOMEM;
	size_t nseg = (size_t)world * k;
	int64_t *pack_seg = tpf_malloc(nseg * 4 * sizeof(int64_t));
	int64_t *unpack_seg = tpf_malloc(nseg * 4 * sizeof(int64_t));
	struct tpf_value **ins = tpf_malloc(k * sizeof(*ins));
	const char **out_names = tpf_malloc(k * sizeof(*out_names));
	int64_t *ranks = tpf_malloc(k * sizeof(int64_t));
	int64_t *dims = NULL;
	if (!pack_seg || !unpack_seg || !ins || !out_names || !ranks)
		goto out_free;

	size_t total_dims = 0;
	int64_t S = 0;
	for (size_t i = 0; i < k; i++) {
		const struct tpf_type *t = &members[i].node->inputs[0]->type;
		total_dims += (size_t)t->shape.rank;
		S += members[i].numel / world;
	}
	dims = tpf_malloc((total_dims ? total_dims : 1) * sizeof(int64_t));
	if (!dims)
		goto out_free;

	size_t di = 0, s = 0;
	int64_t off = 0;
	for (size_t i = 0; i < k; i++) {
		struct tpf_node *n = members[i].node;
		const struct tpf_type *t = &n->inputs[0]->type;
		int64_t c = members[i].numel / world;
		ins[i] = n->inputs[0];
		out_names[i] = NULL;
		ranks[i] = t->shape.rank;
		for (int r = 0; r < t->shape.rank; r++)
			dims[di++] = t->shape.dims[r].value;
		for (int64_t j = 0; j < world; j++) {
			int64_t *p = &pack_seg[4 * s], *u = &unpack_seg[4 * s];
			p[0] = (int64_t)i, p[1] = j * c, p[2] = j * S + off, p[3] = c;
			u[0] = (int64_t)i, u[1] = j * S + off, u[2] = j * c, u[3] = c;
			s++;
		}
		off += c;
	}

	/* Insert at the last member: every member input is defined before it. */
	struct tpf_node *at = members[k - 1].node;
	char name[96];
	snprintf(name, sizeof(name), "coalesced_alltoall_%d/pack", group_no);
	struct tpf_node *pack = tpf_graph_insert_node(g, at, TPF_DOMAIN, "Pack", name, ins, k, 1, NULL);
	if (!pack)
		goto out_free;
	snprintf(name, sizeof(name), "coalesced_alltoall_%d", group_no);
	struct tpf_node *a2a = tpf_graph_insert_node(g, at, TPF_MS_DOMAIN, "AllToAll", name,
						     pack->outputs, 1, 1, NULL);
	if (!a2a)
		goto out_free;
	snprintf(name, sizeof(name), "coalesced_alltoall_%d/unpack", group_no);
	struct tpf_node *unpack = tpf_graph_insert_node(g, at, TPF_DOMAIN, "Unpack", name,
							a2a->outputs, 1, k, out_names);
	if (!unpack)
		goto out_free;
	pack->origin_pass = a2a->origin_pass = unpack->origin_pass = PASS_NAME;
	pack->origin_pattern = a2a->origin_pattern = unpack->origin_pattern = "alltoall-group";

	int64_t packed_dim = world * S;
	enum tpf_dtype dt = members[0].node->inputs[0]->type.dtype;
	tpf_value_set_type(pack->outputs[0], dt, 1, &packed_dim);
	tpf_value_set_type(a2a->outputs[0], dt, 1, &packed_dim);
	if (tpf_node_set_attr_int(pack, "world_size", world) ||
	    tpf_node_set_attr_ints(pack, "segments", pack_seg, nseg * 4) ||
	    tpf_node_set_attr_int(a2a, "group_size", world) ||
	    tpf_node_set_attr_int(unpack, "world_size", world) ||
	    tpf_node_set_attr_ints(unpack, "segments", unpack_seg, nseg * 4) ||
	    tpf_node_set_attr_ints(unpack, "output_ranks", ranks, k) ||
	    tpf_node_set_attr_ints(unpack, "output_dims", dims, total_dims))
		goto out_free;

	for (size_t i = 0; i < k; i++) {
		struct tpf_node *n = members[i].node;
		struct tpf_value *old = n->outputs[0];
		if ((st = tpf_value_copy_type(unpack->outputs[i], &old->type)) != TPF_OK)
			goto out_free;
		if ((st = tpf_value_replace_uses(old, unpack->outputs[i])) != TPF_OK)
			goto out_free;
		/* Keep the public name when the old value was a graph output. */
		const char *oldname = old->name;
		if ((st = tpf_graph_erase_node(g, n)) != TPF_OK)
			goto out_free;
		if (tpf_value_is_graph_output(unpack->outputs[i]) &&
		    (st = tpf_value_rename(unpack->outputs[i], oldname)) != TPF_OK)
			goto out_free;
	}
	if (ctx && ctx->stats) {
		tpf_pass_stats_add(ctx->stats, PASS_NAME, "groups-coalesced", 1);
		tpf_pass_stats_add(ctx->stats, PASS_NAME, "alltoall-removed", (int64_t)k);
	}
	st = TPF_OK;

out_free:
	tpf_free(pack_seg);
	tpf_free(unpack_seg);
	tpf_free(ins);
	tpf_free(out_names);
	tpf_free(ranks);
	tpf_free(dims);
	return st;
}

/* One analysis of g: dependencies, greedy groups; coalesces the first group
 * of two or more (*did = 1), or, when there is none, reports why each
 * AllToAll stays alone.  One group at a time, because coalescing a group
 * adds dependencies (its Pack waits for every member's input) that can make
 * two other groups depend on each other. */
static enum tpf_status coalesce_next(const struct tpf_model *m, struct tpf_graph *g,
				     struct tpf_pass_context *ctx, int *group_no, int *did,
				     struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	struct a2a *list = NULL, *members = NULL;
	uint64_t *deps = NULL, *group_bits = NULL;
	int *group_first = NULL;
	const char **why = NULL;
	size_t count = 0;

	*did = 0;
	if ((st = tpf_graph_toposort(g, d)) != TPF_OK)
		return st;
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == TPF_OP_MS_ALLTOALL)
			count++;
	if (count < 2)
		return TPF_OK;

	size_t words = (count + 63) / 64;
	size_t nbits;
	list = tpf_calloc(count, sizeof(*list));
	members = tpf_malloc(count * sizeof(*members));
	group_first = tpf_malloc(count * sizeof(int));
	group_bits = tpf_calloc(count * words, sizeof(uint64_t));
	why = tpf_calloc(count, sizeof(*why));
	if (!list || !members || !group_first || !group_bits || !why ||
	    tpf_mul_size(g->next_node_id ? g->next_node_id : 1, words * sizeof(uint64_t), &nbits) ||
	    !(deps = tpf_calloc(1, nbits))) {
		st = TPF_ERR_NOMEM;
		goto out_free;
	}
	/* deps[node id] = the AllToAll nodes this node depends on, itself included */
	size_t idx = 0;
	for (struct tpf_node *n = g->first; n; n = n->next) {
		uint64_t *mine = &deps[(size_t)n->id * words];
		for (size_t k = 0; k < n->n_inputs + n->n_implicit; k++) {
			struct tpf_value *in = k < n->n_inputs ? n->inputs[k] : n->implicit_inputs[k - n->n_inputs];
			if (!in || !in->producer || in->producer->graph != g)
				continue;
			const uint64_t *theirs = &deps[(size_t)in->producer->id * words];
			for (size_t w = 0; w < words; w++)
				mine[w] |= theirs[w];
		}
		if (n->op == TPF_OP_MS_ALLTOALL) {
			list[idx].node = n;
			list[idx].group = -1;
			mine[idx / 64] |= 1ull << (idx % 64);
			idx++;
		}
	}

	/* Greedy grouping in topological order: a node joins the first group of
	 * its dtype and world size that it does not depend on (members earlier
	 * in the order cannot depend on it). */
	int ngroups = 0;
	for (size_t i = 0; i < count; i++) {
		struct tpf_node *n = list[i].node;
		const struct tpf_value *x = n->inputs[0];
		int64_t world = world_size_of(m, n, ctx);
		list[i].numel = x ? tpf_shape_numel(&x->type.shape) : -1;
		if (!x || x->type.kind != TPF_TYPE_TENSOR || x->type.shape.rank < 1 || list[i].numel < 0) {
			why[i] = "input shape is not static";
			continue;
		}
		if (world < 1) {
			why[i] = "world size unknown (no group_size, --world-size or tp_world_size)";
			continue;
		}
		if (x->type.shape.dims[0].value % world != 0) {
			why[i] = "first dimension does not divide by the world size";
			continue;
		}
		if (!n->outputs[0]) {
			why[i] = "output omitted";
			continue;
		}
		const uint64_t *mine = &deps[(size_t)n->id * words];
		for (int gi = 0; gi < ngroups; gi++) {
			const struct a2a *first = &list[group_first[gi]];
			if (first->node->inputs[0]->type.dtype != x->type.dtype ||
			    world_size_of(m, first->node, ctx) != world)
				continue;
			const uint64_t *gb = &group_bits[(size_t)gi * words];
			int dependent = 0;
			for (size_t w = 0; w < words; w++)
				if (mine[w] & gb[w])
					dependent = 1;
			if (dependent)
				continue;
			list[i].group = gi;
			break;
		}
		if (list[i].group < 0) {
			list[i].group = ngroups;
			group_first[ngroups++] = (int)i;
		}
		group_bits[(size_t)list[i].group * words + i / 64] |= 1ull << (i % 64);
	}

	for (int gi = 0; gi < ngroups; gi++) {
		size_t k = 0;
		for (size_t i = 0; i < count; i++)
			if (list[i].group == gi)
				members[k++] = list[i];
		if (k < 2) {
			why[group_first[gi]] = "no independent AllToAll of the same dtype and world size to join";
			continue;
		}
		st = coalesce_group(g, members, k, world_size_of(m, members[0].node, ctx), ctx, (*group_no)++);
		if (st == TPF_OK) {
			*did = 1;
			st = tpf_graph_toposort(g, d);
		}
		goto out_free;
	}
	for (size_t i = 0; i < count; i++)
		if (why[i])
			explain(ctx, list[i].node, why[i]);

out_free:
	tpf_free(list);
	tpf_free(members);
	tpf_free(deps);
	tpf_free(group_first);
	tpf_free(group_bits);
	tpf_free(why);
	return st;
}

static enum tpf_status run_graph(const struct tpf_model *m, struct tpf_graph *g,
				 struct tpf_pass_context *ctx, int *changed, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	for (size_t c = 0; c < g->n_children; c++)
		if ((st = run_graph(m, g->children[c], ctx, changed, d)) != TPF_OK)
			return st;
	int group_no = 0, did;
	do {
		st = coalesce_next(m, g, ctx, &group_no, &did, d);
		if (did)
			*changed = 1;
	} while (st == TPF_OK && did);
	return st;
}

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			   struct tpf_diag *d)
{
	*changed = 0;
	enum tpf_status st = run_graph(m, m->graph, ctx, changed, d);
	if (st == TPF_ERR_NOMEM)
		tpf_diag_add(d, TPF_SEV_ERROR, "%s: out of memory", PASS_NAME);
	return st;
}

const struct tpf_pass tpf_pass_coalesce_alltoall = {
	.name = PASS_NAME,
	.summary = "merge independent AllToAll nodes of one dtype into one over a packed buffer",
	.run = run,
	.counters = counters,
};
