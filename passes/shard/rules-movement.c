/* SPDX-License-Identifier: MIT */
/*
 * The sharder's rules for data movement: Reshape, Flatten, Transpose,
 * (Un)squeeze, Expand, ConstantOfShape, Slice, Split, Concat, Gather and the
 * vocabulary-parallel embedding (rules.h says what a rule reads and writes).
 */
#include <inttypes.h>
#include <string.h>

#include "rules.h"

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

void sh_rule_reshape(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *sv = c->ni > 1 ? c->n->inputs[1] : NULL;
	const struct sh_fact *fx = full(c, x), *fo = full(c, c->n->outputs[0]), *fs;
	int64_t loc[SH_MAX_VALS], ldin[TPF_MAX_RANK];
	int allowzero = (int)tpf_node_attr_int(c->n, "allowzero", 0);
	int b = -1, osect = 0, nl;
	int64_t oouter = 0;

	if (!sv || fx->rank < 0 || fo->rank < 0)
		return sh_rule_default(c);
	fs = full(c, sv);
	if (fs->nvals != fo->rank)
		return sh_rule_default(c);
	nl = sh_local_vals(c->p, sv, loc, 0);
	if (nl != fs->nvals) {
		if (c->in[0].kind == SH_S) {
			sh_whyf(c, "its target shape cannot be followed");
			return sh_all_whole(c);
		}
		return sh_rule_unary(c, 1);
	}
	if (c->in[0].kind == SH_S) {
		b = reshape_axis(c->s, fx->dims, fx->rank, c->in[0], fo->dims, fo->rank, &osect,
				 &oouter);
		if (b == -2) {
			sh_whyf(c, "the split axis becomes a dim of %" PRId64 " (heads?), not divisible by %d",
			     oouter, c->s->W);
			return sh_all_whole(c);
		}
		if (b < 0) {
			sh_whyf(c, "the split axis %d does not survive the reshape", c->in[0].axis);
			return sh_all_whole(c);
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
		if (o == l && sh_editable(c->s, sv, j, want, 0) && (o != 0 || allowzero) && o != -1) {
			sh_add_edit(c, 1, NULL, j, want);
			continue;
		}
		if (c->in[0].kind != SH_S) {
			sh_whyf(c, "its target shape is computed from a split tensor's shape");
			c->hard = 1;
			return sh_all_whole(c);
		}
		sh_whyf(c, "element %d of its target shape cannot be made %" PRId64, j, want);
		return sh_all_whole(c);
	}
	if (c->in[0].kind == SH_S) {
		struct sh o = mk_s(b, osect);
		o.outer = oouter;
		c->out[0] = c->raw[0] = o;
	} else {
		c->out[0] = c->raw[0] = c->in[0];
	}
}

void sh_rule_flatten(struct nctx *c)
{
	const struct sh_fact *fx = full(c, c->n->inputs[0]), *fo = full(c, c->n->outputs[0]);
	int b, os = 0;
	int64_t oo = 0;
	struct sh o;

	if (c->in[0].kind != SH_S)
		return sh_rule_unary(c, 1);
	if (fx->rank < 0 || fo->rank < 0)
		return sh_rule_default(c);
	b = reshape_axis(c->s, fx->dims, fx->rank, c->in[0], fo->dims, fo->rank, &os, &oo);
	if (b < 0) {
		sh_whyf(c, "the split axis does not survive the flatten");
		return sh_all_whole(c);
	}
	o = mk_s(b, os);
	o.outer = oo;
	c->out[0] = c->raw[0] = o;
}

void sh_rule_transpose(struct nctx *c)
{
	int r = frank(c, c->n->inputs[0]);
	const struct tpf_attr *pa = tpf_node_attr(c->n, "perm");

	if (c->in[0].kind != SH_S)
		return sh_rule_unary(c, 1);
	if (r < 0)
		return sh_rule_default(c);
	for (int i = 0; i < r; i++) {
		int64_t src = pa && pa->n == (size_t)r ? pa->ints[i] : r - 1 - i;
		if (src == c->in[0].axis) {
			c->out[0] = c->raw[0] = on_axis(c->in[0], i);
			return;
		}
	}
	sh_rule_default(c);
}

void sh_rule_unsqueeze(struct nctx *c, int squeeze)
{
	int r = frank(c, c->n->inputs[0]), ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int64_t axes[TPF_MAX_RANK];
	int k, a;

	if (c->in[0].kind != SH_S)
		return sh_rule_unary(c, 1);
	if (r < 0 || ro < 0 || sh_read_axes(c, squeeze ? r : ro, axes, &k))
		return sh_rule_default(c);
	a = c->in[0].axis;
	if (squeeze) {
		int shift = 0;
		for (int i = 0; i < k; i++) {
			if (axes[i] == a)
				return sh_rule_default(c);
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
		sh_rule_default(c);
	}
}

void sh_rule_expand(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *sv = c->n->inputs[1];
	const struct sh_fact *fx = full(c, x), *fo = full(c, c->n->outputs[0]), *fs = full(c, sv);
	int64_t loc[SH_MAX_VALS];
	int ro = fo->rank, ob = -1, nl;

	if (fx->rank < 0 || ro < 0 || fs->nvals < 0 || fs->nvals > ro)
		return sh_rule_default(c);
	sh_reduce_partials(c);
	nl = sh_local_vals(c->p, sv, loc, 0);
	if (nl != fs->nvals)
		return c->in[0].kind == SH_S ? (sh_whyf(c, "its shape cannot be followed"), sh_all_whole(c))
					     : sh_rule_unary(c, 1);
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
			if (sh_need_elem(c, 1, j, o, l, fo->dims[oj] / c->s->W))
				continue;
			sh_whyf(c, "its shape's element %d cannot be made the local size", j);
			return sh_all_whole(c);
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
		sh_whyf(c, "its shape is computed from a split tensor's shape");
		c->hard = c->in[0].kind != SH_S;
		return sh_all_whole(c);
	}
	if (ob < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	c->out[0] = c->raw[0] = mk_s(ob, c->in[0].kind == SH_S ? c->in[0].sect : 0);
}

void sh_rule_constant_of_shape(struct nctx *c)
{
	const struct tpf_value *sv = c->n->inputs[0];
	const struct sh_fact *fs = full(c, sv);
	int64_t loc[SH_MAX_VALS];
	int nl, split = -1;

	if (fs->nvals < 0) {
		c->out[0] = c->raw[0] = SH_R_;
		return;
	}
	nl = sh_local_vals(c->p, sv, loc, 0);
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
		sh_whyf(c, "its shape is computed from a split tensor's shape");
		c->hard = 1;
		return sh_all_whole(c);
	}
	c->out[0] = c->raw[0] = split < 0 ? SH_R_ : mk_s(split, 0);
}

/* Slice: along the split axis only whole sections (their rank parts). */
void sh_rule_slice(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0];
	const struct sh_fact *fx = full(c, x);
	int r = fx->rank, a, opset_inputs = c->ni >= 3;
	int64_t st[TPF_MAX_RANK], en[TPF_MAX_RANK], sp[TPF_MAX_RANK];
	int ax[TPF_MAX_RANK], k = 0, sliced = -1;

	if (c->in[0].kind != SH_S)
		return sh_rule_unary(c, 1);
	if (r < 0)
		return sh_rule_default(c);
	for (size_t i = 1; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind != SH_R)
			return sh_rule_default(c);
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
			if (sh_local_vals(c->p, c->n->inputs[1], lst, 0) != k ||
			    sh_local_vals(c->p, c->n->inputs[2], len, 0) != k)
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
				sh_whyf(c, "its bounds on axis %d are computed from a split tensor's shape",
				     ax[i]);
				return sh_all_whole(c);
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
			if (F > 0 && sp[sliced] > 1 && (!sec || sec->n == 1) && F / W % sp[sliced] == 0) {
				/* every k-th element from an offset below k (interleaved
				 * gate and up columns): the same slice of each block */
				int64_t k = sp[sliced];
				sh_slice_range(st[sliced], en[sliced], k, F, &first, &cnt);
				sh_slice_range(lst[sliced], len[sliced], k, F / W, &lf, &lc);
				if (first < k && cnt == F / k && lf == first && lc == F / W / k) {
					c->out[0] = c->raw[0] = mk_s(a, 0);
					return;
				}
			}
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
							sh_add_edit(c, -1, "starts", sliced, lo);
						if (lf + lc != hi)
							sh_add_edit(c, -1, "ends", sliced, hi);
					} else {
						int ok = 1;
						if (lf != lo)
							ok &= sh_need_elem(c, 1, sliced, st[sliced], lst[sliced], lo);
						if (ok && lf + lc != hi && !(hi == F / W && len[sliced] >= F))
							ok &= sh_need_elem(c, 2, sliced, en[sliced], len[sliced], hi);
						if (!ok) {
							sh_whyf(c, "its bounds cannot be made the local section bounds");
							return sh_all_whole(c);
						}
					}
				}
			}
			c->out[0] = c->raw[0] = mk_s(a, sh_sect_intern(c->s, &sub));
			return;
		}
	}
unknown:
	sh_whyf(c, "its bounds are unknown");
	return sh_all_whole(c);
across:
	sh_whyf(c, "it cuts across the split of axis %d", a);
	return sh_all_whole(c);
}

void sh_rule_split(struct nctx *c)
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
		return c->in[0].kind == SH_S ? sh_rule_default(c) : sh_rule_unary(c, 1);
	sa = sh_axis_attr(c->n, "axis", 0, r);
	a = c->in[0].axis;
	if (sa < 0)
		return sh_rule_default(c);
	if (sa != a) {
		for (size_t j = 0; j < c->no; j++)
			c->out[j] = c->raw[j] = c->in[0];
		return;
	}
	if (outer_of(c->in[0]) > 1) {
		sh_whyf(c, "its pieces cut a split within rows");
		return sh_all_whole(c);
	}
	if (k > 256 || fx->dims[a] < 0)
		return sh_rule_default(c);
	/* the pieces' sizes, original */
	if (c->ni > 1 && c->n->inputs[1]) {
		const struct sh_fact *fs = full(c, c->n->inputs[1]);
		if (fs->nvals != (int)k)
			return sh_rule_default(c);
		memcpy(sizes, fs->vals, k * 8);
	} else if (tpf_node_attr(c->n, "split")) {
		const struct tpf_attr *sa2 = tpf_node_attr(c->n, "split");
		if (sa2->n != k)
			return sh_rule_default(c);
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
				sh_whyf(c, "its pieces cut across the split sections");
				return sh_all_whole(c);
			}
			lsz[j] = sizes[j] / c->s->W;
			if (j && lsz[j] != lsz[0])
				equal_local = 0;
			c->out[j] = c->raw[j] = mk_s(a, sh_sect_intern(c->s, &sub));
		}
		if (c->ni > 1 && c->n->inputs[1]) {
			int64_t loc[SH_MAX_VALS];
			if (sh_local_vals(c->p, c->n->inputs[1], loc, 0) != (int)k)
				return sh_rule_default(c);
			for (size_t j = 0; j < k; j++)
				if (!sh_need_elem(c, 1, (int)j, sizes[j], loc[j], lsz[j])) {
					sh_whyf(c, "its split sizes cannot be made local");
					return sh_all_whole(c);
				}
		} else if (tpf_node_attr(c->n, "split")) {
			for (size_t j = 0; j < k; j++)
				sh_add_edit(c, -1, "split", (int)j, lsz[j]);
		} else if (!equal_local) {
			sh_whyf(c, "its equal pieces are not equal locally");
			return sh_all_whole(c);
		}
	}
}

void sh_rule_concat(struct nctx *c)
{
	int ro = c->no ? frank(c, c->n->outputs[0]) : -1;
	int ca = ro >= 0 ? sh_axis_attr(c->n, "axis", 0, ro) : -1;
	int target = -1, tsect = 0;
	size_t np = 0;

	if (ca < 0)
		return sh_rule_default(c);
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && c->in[i].kind == SH_P)
			np++;
	if (np) {
		if (np == c->ni) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		sh_reduce_partials(c);
	}
	target = sh_first_split(c, &tsect);
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
					sh_whyf(c, "a split within rows meets another operand");
					return sh_all_whole(c);
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
			if (!sh_can_split(c, v, target, tsect, d)) {
				sh_whyf(c, "operand '%s' cannot be split like the others", v->name);
				return sh_all_whole(c);
			}
			c->want[i] = mk_s(target, tsect);
		}
		c->out[0] = c->raw[0] = mk_s(target, tsect);
		return;
	}
	/* concatenation along the split axis: the operands are sections */
	for (size_t i = 0; i < c->ni; i++)
		if (c->n->inputs[i] && outer_of(c->in[i]) > 1) {
			sh_whyf(c, "a split within rows meets a concatenation along it");
			return sh_all_whole(c);
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
				sh_whyf(c, "operand '%s' of the concatenation cannot be split", v->name);
				return sh_all_whole(c);
			}
			if (sec) {
				for (int j = 0; j < sec->n && out.n < SH_MAX_SECT; j++)
					out.size[out.n++] = sec->size[j];
			} else if (out.n < SH_MAX_SECT) {
				out.size[out.n++] = d;
			} else {
				return sh_all_whole(c);
			}
		}
		c->out[0] = c->raw[0] = mk_s(ca, sh_sect_intern(c->s, &out));
	}
}

void sh_rule_gather(struct nctx *c)
{
	const struct tpf_value *x = c->n->inputs[0], *ix = c->n->inputs[1];
	int r = frank(c, x), ri = frank(c, ix);
	int g = r >= 0 ? sh_axis_attr(c->n, "axis", 0, r) : -1;

	if (g < 0 || ri < 0)
		return sh_rule_default(c);
	if (c->in[1].kind == SH_P)
		sh_reduce_partials(c);
	if (c->in[0].kind == SH_P) {
		if (c->in[1].kind == SH_R) {
			c->out[0] = c->raw[0] = SH_P_;
			return;
		}
		sh_reduce_partials(c);
	}
	if (c->in[0].kind == SH_S) {
		int a = c->in[0].axis;
		if (c->in[1].kind == SH_S)
			c->want[1] = SH_R_;
		if (a == g) {
			sh_whyf(c, "Gather picks along the split axis %d", a);
			return sh_all_whole(c);
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
void sh_rule_embedding(struct nctx *c)
{
	c->want[0] = mk_s(0, 0);
	c->raw[0] = SH_P_;
	c->out[0] = SH_R_; /* reduced right after the masked lookup, as Megatron does */
}

int sh_is_embedding(const struct nctx *c)
{
	const struct tpf_tensor *t;
	if (!c->s->vocab_parallel || !sh_op(c->n, TPF_OP_GATHER) || c->ni != 2)
		return 0;
	t = tpf_value_constant(c->n->inputs[0]);
	return t && t->rank == 2 && t->dims[0] % c->s->W == 0 &&
	       tpf_node_attr_int(c->n, "axis", 0) == 0 && c->in[0].kind == SH_R &&
	       c->in[1].kind == SH_R && tpf_dtype_is_float(t->dtype);
}


/* Gemm: Y = alpha * A' B' + beta * C, A' and B' 2-D, transposed by
 * transA / transB. */
