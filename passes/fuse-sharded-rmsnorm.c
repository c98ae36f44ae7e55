/* SPDX-License-Identifier: MIT */
/*
 * fuse-sharded-rmsnorm: an RMSNorm over a tensor-parallel sharded hidden
 * dim (MiniMax-style Q/K norms over the full Q and K width).  Each rank holds
 * x_local = x[..., r*d : (r+1)*d) with d = D / W; the exported graph gathers
 * the full activation, normalizes it with the full gamma and keeps its part:
 *
 *   AllGather(x_local, axis=last) -> RMSNorm(., gamma[D], axis=last)
 *       -> Slice(last axis, [r*d, (r+1)*d))  or  Split(last axis) output r
 *   => ai.tpfuse.ShardedRMSNorm(x_local, gamma_shard)
 *
 * The fused op sums x_local^2 per token, all-reduces that one float per
 * token, and normalizes locally with gamma_shard = gamma[r*d : (r+1)*d),
 * an initializer cut here at compile time (docs/ops.md).  It moves 4 bytes
 * per token instead of gathering the activation.
 *
 * When the rank is known (the pass context's --rank/--world-size, else the
 * model's metadata_props "tp_rank" / "tp_world_size") and the slice keeps
 * this rank's part, that is the form above.  Otherwise (the rank unknown,
 * or another part) the fused op takes the full gamma and records the part,
 * part_starts/part_ends = [start, end): when it runs, a rank whose part is
 * its own shard takes the one-float exchange, any other computes gather +
 * norm + slice (docs/ops.md).  The world size comes from the run, else the
 * AllGather's group_size, else the gathered and local last dims; an
 * AllGather group_size other than the world size is refused.
 * A float32 gamma of a float16 or bfloat16 input (a norm that computes in
 * float32 and gives the input's type: canonicalize-rmsnorm's Cast -> RMSNorm
 * -> Cast form, Olmo2's Q/K norms) is rounded to the input's type here, as
 * the fused op takes one type; the norm itself still computes in stash_type.
 * Also refused: a gather or norm over another axis, a gamma that is not a
 * constant, other input and gamma dtypes that differ, and a gathered or
 * normalized tensor with other users (the full tensor is needed there).
 *
 * Second phase (not a tree pattern, so done here directly): ShardedRMSNorm
 * nodes with the same token shape, dtype and world size that do not depend
 * on each other (the Q and K norms of one attention layer) are merged into
 * one variadic ShardedRMSNorm, so one exchange of n floats per token serves
 * them all.  Candidates are scanned in graph order from each node; the scan
 * stops at the first compatible node that depends on the group (in a
 * layered model: the next layer).  Merging repeats to a fixed point, which
 * keeps the pass idempotent.
 *
 * Runs on canonical ai.tpfuse.RMSNorm nodes: run canonicalize-rmsnorm first.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

#define PASS_NAME "fuse-sharded-rmsnorm"
#define PATTERN_NAME "sharded-rmsnorm"
#define MERGE_COUNTER "qk-pairs-merged"

/* Compatible nodes a group leader looks at before giving up. */
#define MERGE_MAX_CANDIDATES 64
/* Nodes one independence check may visit before it assumes a dependence. */
#define MERGE_MAX_VISITS 200000

/* What the check found, for the rewrite (lives in match->facts). */
struct shard_facts {
	int64_t world, rank, full_dim, local_dim;
	/* the part form: [start, end) of the gathered dim, when the rank is
	 * unknown or the part is not this rank's */
	int part;
	int64_t start, end;
	struct tpf_value *out; /* the value that becomes the fused output */
	enum tpf_dtype wtype;  /* the fused op's gamma dtype (the input's) */
};

_Static_assert(sizeof(struct shard_facts) <= TPF_MATCH_FACTS, "facts too large");

/* ------------------------------------------------------------------ helpers */

static int dims_equal(const struct tpf_dim *a, const struct tpf_dim *b)
{
	if (!a->param && !b->param)
		return a->value >= 0 && a->value == b->value;
	return a->param && b->param && strcmp(a->param, b->param) == 0;
}

/* Static last dim of a value, -1 when unknown. */
static int64_t last_dim(const struct tpf_value *v)
{
	int64_t d;
	return tpf_pattern_last_dim(v, &d) ? d : -1;
}

/* Whether `axis` (attribute value, may be negative) names the last axis of
 * a tensor of rank `rank` (-1: unknown, then only -1 is accepted). */
static int is_last_axis(int64_t axis, int rank)
{
	return axis == -1 || (rank > 0 && axis == rank - 1);
}

static int value_rank(const struct tpf_value *a, const struct tpf_value *b)
{
	int r = tpf_pattern_rank(a);
	return r >= 0 ? r : tpf_pattern_rank(b);
}

/* ------------------------------------------------------------ predicates */

static const char *pred_allgather(const struct tpf_node *n, struct tpf_match *m)
{
	int64_t axis = tpf_node_attr_int(n, "axis", 0);
	int rank = value_rank(n->inputs[0], n->outputs[0]);

	if (is_last_axis(axis, rank))
		return NULL;
	if (rank < 0)
		return tpf_match_reason(m, "gathers over axis %lld and the rank is unknown",
		                        (long long)axis);
	return tpf_match_reason(m, "gathers over axis %lld, not the last axis (rank %d)",
	                        (long long)axis, rank);
}

static const char *pred_norm(const struct tpf_node *n, struct tpf_match *m)
{
	int64_t axis = tpf_node_attr_int(n, "axis", -1);
	int rank = value_rank(n->inputs[0], n->outputs[0]);

	if (is_last_axis(axis, rank))
		return NULL;
	return tpf_match_reason(m, "normalizes from axis %lld, not over the last axis only",
	                        (long long)axis);
}

/* ------------------------------------------------------------------ check */

/* Input and gamma share one float type, or gamma is float32 and the input
 * float16 or bfloat16 with the norm giving the input's type (the fused op
 * then takes gamma rounded to the input's type). */
static const char *check_gamma_dtype(struct tpf_match *m, const struct tpf_node *norm,
                                     enum tpf_dtype t_x, enum tpf_dtype t_g)
{
	unsigned bits = tpf_dtype_bits(t_g);
	if (!tpf_dtype_is_float(t_g) || bits < 8 || bits % 8)
		return tpf_match_reason(m, "dtype %s is not a float type of whole bytes",
		                        tpf_dtype_name(t_g));
	if (t_x == t_g)
		return NULL;
	enum tpf_dtype t_y = tpf_pattern_dtype(norm->outputs[0]);
	if (t_g != TPF_DTYPE_FLOAT || (t_x != TPF_DTYPE_FLOAT16 && t_x != TPF_DTYPE_BFLOAT16))
		return tpf_match_reason(m, "input dtype %s differs from gamma dtype %s",
		                        tpf_dtype_name(t_x), tpf_dtype_name(t_g));
	if (t_y != t_x)
		return tpf_match_reason(m, "input dtype %s, gamma dtype %s and the norm gives %s: "
		                           "not the input's type",
		                        tpf_dtype_name(t_x), tpf_dtype_name(t_g), tpf_dtype_name(t_y));
	return NULL;
}

/* Checks shared by the Slice and the Split forms; fills world/rank/dims. */
static const char *check_common(const struct tpf_pattern_context *pc, struct tpf_match *m,
                                struct shard_facts *f)
{
	struct tpf_node *ag = tpf_match_node(m, "ag"), *norm = tpf_match_node(m, "norm");
	struct tpf_value *x = tpf_match_value(m, "x"), *gamma = tpf_match_value(m, "gamma");

	if (!ag || !norm || !x || !gamma)
		return "incomplete match";
	/* the norm axis and single use: checked here so that --explain reports them */
	const char *r = pred_norm(norm, m);
	if (r)
		return r;
	size_t uses = tpf_value_use_count(norm->outputs[0]);
	if (uses != 1)
		return tpf_match_reason(m,
		                        "the normalized tensor '%s' has %zu uses: the full "
		                        "tensor is needed elsewhere",
		                        norm->outputs[0]->name, uses);
	uses = tpf_value_use_count(ag->outputs[0]);
	if (uses != 1)
		return tpf_match_reason(m,
		                        "the gathered tensor '%s' has %zu uses: the full tensor "
		                        "is needed elsewhere",
		                        ag->outputs[0]->name, uses);
	/* the world size: the run's, else the AllGather's group_size, else the
	 * ratio of the gathered and the local dims; the rank may stay unknown
	 * (the fused op then records the part and decides when it runs) */
	const struct tpf_attr *gs = tpf_node_attr(ag, "group_size");
	f->world = pc->world_size;
	if (f->world <= 0 && gs && gs->kind == TPF_ATTR_INT && gs->i > 0)
		f->world = gs->i;
	if (f->world <= 0) {
		int64_t Dg = last_dim(ag->outputs[0]), dl = last_dim(x);
		if (Dg > 0 && dl > 0 && Dg % dl == 0)
			f->world = Dg / dl;
	}
	if (f->world <= 0)
		return "the world size is unknown (give --world-size, metadata_props "
		       "tp_world_size, an AllGather group_size or static last dims)";
	f->rank = pc->world_size > 0 && pc->rank >= 0 && pc->rank < f->world ? pc->rank : -1;
	if (gs && gs->kind == TPF_ATTR_INT && gs->i != f->world)
		return tpf_match_reason(
		    m, "the AllGather's group_size %lld is not the world size %lld",
		    (long long)gs->i, (long long)f->world);

	/* dtypes: one float type for x and gamma */
	const struct tpf_tensor *t = tpf_value_constant(gamma);
	if (!t)
		return tpf_match_reason(m, "gamma '%s' is not a constant", gamma->name);
	enum tpf_dtype t_x = tpf_pattern_dtype(x);
	if (t_x == TPF_DTYPE_UNDEFINED)
		t_x = tpf_pattern_dtype(ag->outputs[0]);
	if (t_x == TPF_DTYPE_UNDEFINED)
		return "the dtype of the gathered input is unknown";
	if ((r = check_gamma_dtype(m, norm, t_x, t->dtype)))
		return r;
	f->wtype = t_x;
	unsigned bits = tpf_dtype_bits(t->dtype);

	/* D: the gathered last dim; d = D / W */
	int64_t D = last_dim(ag->outputs[0]), dx = last_dim(x);
	if (D < 0)
		D = last_dim(norm->outputs[0]);
	if (dx > INT64_MAX / f->world)
		return "the local last dimension is too large";
	if (D < 0 && dx >= 0)
		D = dx * f->world;
	if (D <= 0)
		return "the size of the gathered last dimension is unknown";
	if (D % f->world)
		return tpf_match_reason(m,
		                        "the gathered dim %lld does not divide by the world size "
		                        "%lld",
		                        (long long)D, (long long)f->world);
	if (dx >= 0 && dx * f->world != D)
		return tpf_match_reason(m,
		                        "the local dim %lld times the world size %lld is not the "
		                        "gathered dim %lld (world size mismatch)",
		                        (long long)dx, (long long)f->world, (long long)D);
	f->full_dim = D;
	f->local_dim = D / f->world;

	/* gamma: [1, ..., 1, D] with its bytes at hand */
	int64_t numel = tpf_tensor_numel(t);
	if (t->rank < 1 || numel != D || t->dims[t->rank - 1] != D)
		return tpf_match_reason(m, "gamma '%s' is not a vector of the gathered dim %lld",
		                        gamma->name, (long long)D);
	size_t want;
	if (tpf_mul_size((size_t)numel, bits / 8, &want))
		return tpf_match_reason(m, "gamma '%s' is too large", gamma->name);
	if (!t->data || t->nbytes != want)
		return tpf_match_reason(m, "gamma '%s' has no data loaded", gamma->name);
	return NULL;
}

/* The part [start, end) the slice keeps: this rank's shard (the plain
 * form, gamma sliced now), or anything else (the part form: the fused op
 * records the part and, when it runs, takes the one-float exchange if the
 * part is that rank's shard and computes gather + norm + slice if not). */
static const char *take_part(struct tpf_match *m, struct shard_facts *f, const char *what,
                             int64_t start, int64_t end)
{
	if (end <= start)
		return tpf_match_reason(m, "%s takes [%lld, %lld): nothing", what, (long long)start,
		                        (long long)end);
	f->start = start;
	f->end = end;
	f->part = !(f->rank >= 0 && start == f->rank * f->local_dim && end - start == f->local_dim);
	return NULL;
}

/* Clamps a Slice bound as ONNX does, for a dim of size `dim`. */
static int64_t clamp_bound(int64_t v, int64_t dim)
{
	if (v < 0)
		v += dim;
	if (v < 0)
		return 0;
	return v > dim ? dim : v;
}

static const char *check_slice(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	struct shard_facts *f = (struct shard_facts *)m->facts;
	struct tpf_node *s = m->root;
	int64_t starts[TPF_MAX_RANK], ends[TPF_MAX_RANK], axes[TPF_MAX_RANK], steps[TPF_MAX_RANK];
	size_t ns = 0, ne = 0, na = 0, nst = 0;
	const char *r = check_common(pc, m, f);

	if (r)
		return r;
	int rank = value_rank(s->inputs[0], tpf_match_value(m, "x"));
	if (rank < 1)
		return "the rank of the normalized tensor is unknown";

	if (s->n_inputs >= 3) {
		if (tpf_pattern_const_ints(s->inputs[1], starts, TPF_MAX_RANK, &ns) ||
		    tpf_pattern_const_ints(s->inputs[2], ends, TPF_MAX_RANK, &ne))
			return "the slice's starts or ends are not integer constants";
		if (s->n_inputs > 3 && s->inputs[3] &&
		    tpf_pattern_const_ints(s->inputs[3], axes, TPF_MAX_RANK, &na))
			return "the slice's axes are not integer constants";
		if (s->n_inputs > 4 && s->inputs[4] &&
		    tpf_pattern_const_ints(s->inputs[4], steps, TPF_MAX_RANK, &nst))
			return "the slice's steps are not integer constants";
	} else {
		/* before opset 10: attributes */
		const struct tpf_attr *as = tpf_node_attr(s, "starts"),
		                      *ae = tpf_node_attr(s, "ends");
		const struct tpf_attr *aa = tpf_node_attr(s, "axes");
		if (!as || !ae || as->kind != TPF_ATTR_INTS || ae->kind != TPF_ATTR_INTS ||
		    as->n > TPF_MAX_RANK || ae->n > TPF_MAX_RANK)
			return "the slice has no usable starts/ends";
		ns = as->n;
		ne = ae->n;
		memcpy(starts, as->ints, ns * sizeof(int64_t));
		memcpy(ends, ae->ints, ne * sizeof(int64_t));
		if (aa) {
			if (aa->kind != TPF_ATTR_INTS || aa->n > TPF_MAX_RANK)
				return "the slice's axes are not usable";
			na = aa->n;
			memcpy(axes, aa->ints, na * sizeof(int64_t));
		}
	}
	if (ns != ne || ns == 0 || (na && na != ns) || (nst && nst != ns))
		return "the slice's starts, ends, axes and steps disagree in length";

	int found = 0;
	int64_t start = 0, end = 0;
	const struct tpf_value *data = s->inputs[0];
	for (size_t k = 0; k < ns; k++) {
		int64_t axis = na ? axes[k] : (int64_t)k;
		if (axis < 0)
			axis += rank;
		if (axis < 0 || axis >= rank)
			return tpf_match_reason(m, "the slice names axis %lld of a rank-%d tensor",
			                        (long long)(na ? axes[k] : (int64_t)k), rank);
		if (nst && steps[k] != 1)
			return tpf_match_reason(m, "the slice has step %lld on axis %lld",
			                        (long long)steps[k], (long long)axis);
		if (axis == rank - 1) {
			if (found)
				return "the slice names the last axis twice";
			found = 1;
			start = clamp_bound(starts[k], f->full_dim);
			end = clamp_bound(ends[k], f->full_dim);
			continue;
		}
		/* any other axis must be kept whole */
		const struct tpf_dim *dim =
		    data && data->type.kind == TPF_TYPE_TENSOR && data->type.shape.rank == rank
		        ? &data->type.shape.dims[axis]
		        : NULL;
		int whole = starts[k] == 0 && ends[k] >= (int64_t)INT32_MAX;
		if (dim && !dim->param && dim->value >= 0)
			whole = clamp_bound(starts[k], dim->value) == 0 &&
			        clamp_bound(ends[k], dim->value) == dim->value;
		if (!whole)
			return tpf_match_reason(m, "the slice also cuts axis %lld",
			                        (long long)axis);
	}
	if (!found)
		return "the slice does not cut the last axis";
	if ((r = take_part(m, f, "the slice", start, end)))
		return r;
	f->out = s->outputs[0];
	return NULL;
}

static const char *check_split(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	struct shard_facts *f = (struct shard_facts *)m->facts;
	struct tpf_node *s = m->root;
	int64_t sizes[256];
	size_t n = s->n_outputs, count = 0;
	const char *r = check_common(pc, m, f);

	if (r)
		return r;
	int rank = value_rank(s->inputs[0], tpf_match_value(m, "x"));
	if (!is_last_axis(tpf_node_attr_int(s, "axis", 0), rank))
		return tpf_match_reason(m, "the Split is over axis %lld, not the last axis",
		                        (long long)tpf_node_attr_int(s, "axis", 0));
	if (n == 0 || n > sizeof(sizes) / sizeof(sizes[0]))
		return "the Split has too many outputs";

	const struct tpf_attr *as = tpf_node_attr(s, "split");
	if (s->n_inputs > 1 && s->inputs[1]) {
		if (tpf_pattern_const_ints(s->inputs[1], sizes, n, &count) || count != n)
			return "the Split's sizes are not an integer constant with one entry per "
			       "output";
	} else if (as && as->kind == TPF_ATTR_INTS) {
		if (as->n != n)
			return "the Split's 'split' attribute does not match its outputs";
		memcpy(sizes, as->ints, n * sizeof(int64_t));
	} else {
		/* equal parts; ONNX rounds up and makes the last part smaller */
		int64_t chunk = (f->full_dim + (int64_t)n - 1) / (int64_t)n;
		for (size_t i = 0; i < n; i++) {
			int64_t left = f->full_dim - chunk * (int64_t)i;
			sizes[i] = left < chunk ? (left > 0 ? left : 0) : chunk;
		}
	}
	int64_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (sizes[i] < 0 || sizes[i] > f->full_dim)
			return "the Split has a size outside [0, dim]";
		total += sizes[i];
	}
	if (total != f->full_dim)
		return tpf_match_reason(m, "the Split's sizes add up to %lld, the dim is %lld",
		                        (long long)total, (long long)f->full_dim);

	/* exactly one output used: this rank's part */
	size_t used = n;
	int64_t off = 0, start = 0;
	for (size_t i = 0; i < n; i++) {
		if (s->outputs[i] && tpf_value_use_count(s->outputs[i])) {
			if (used != n)
				return tpf_match_reason(
				    m,
				    "outputs %zu and %zu of the Split are used: the "
				    "full normalized tensor is needed",
				    used, i);
			used = i;
			start = off;
		}
		off += sizes[i];
	}
	if (used == n)
		return "no output of the Split is used";
	if ((r = take_part(m, f, "the used Split output", start, start + sizes[used])))
		return r;
	f->out = s->outputs[used];
	return NULL;
}

/* ---------------------------------------------------------------- rewrite */

/* float32 -> float16, rounded to nearest even (infinity past the largest
 * finite value, NaN kept a quiet NaN). */
static uint16_t round_to_f16(float v)
{
	uint32_t b;
	memcpy(&b, &v, 4);
	uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
	uint32_t mag = b & 0x7fffffffu;
	if (mag > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00);
	if (mag >= 0x477ff000u) /* 65520 and above (infinity included) */
		return (uint16_t)(sign | 0x7c00);
	if (mag < 0x38800000u) { /* below 2^-14: a subnormal, in units of 2^-24 */
		float a;
		memcpy(&a, &mag, 4);
		return (uint16_t)(sign | (uint16_t)nearbyintf(a * 16777216.0f));
	}
	uint32_t rebased = mag - (112u << 23); /* exponent bias 127 -> 15 */
	uint32_t h = rebased >> 13, dropped = rebased & 0x1fffu;
	if (dropped > 0x1000u || (dropped == 0x1000u && (h & 1)))
		h++;
	return (uint16_t)(sign | h);
}

/* float32 -> bfloat16, rounded to nearest even (NaN kept a quiet NaN). */
static uint16_t round_to_bf16(float v)
{
	uint32_t b;
	memcpy(&b, &v, 4);
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((b >> 16) | 0x40);
	return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

/* gamma[start : start + count) in the fused op's dtype (f->wtype) as an
 * initializer named `base`, reusing an identical one. */
static struct tpf_value *gamma_part(struct tpf_graph *g, const struct tpf_tensor *t,
                                    const struct shard_facts *f, int64_t start, int64_t count,
                                    const char *base)
{
	size_t esz = tpf_dtype_bits(t->dtype) / 8, osz = tpf_dtype_bits(f->wtype) / 8;
	int64_t dims[TPF_MAX_RANK];

	if (t->rank > TPF_MAX_RANK)
		return NULL;
	memcpy(dims, t->dims, (size_t)t->rank * sizeof(int64_t));
	dims[t->rank - 1] = count;
	size_t nbytes = (size_t)count * osz;
	const unsigned char *src = (const unsigned char *)t->data + (size_t)start * esz;
	unsigned char *conv = NULL;
	if (f->wtype != t->dtype) { /* float32 rounded to float16 or bfloat16 */
		if (!(conv = malloc(nbytes ? nbytes : 1)))
			return NULL;
		for (int64_t i = 0; i < count; i++) {
			float v;
			memcpy(&v, src + (size_t)i * 4, 4);
			uint16_t h = f->wtype == TPF_DTYPE_FLOAT16 ? round_to_f16(v) : round_to_bf16(v);
			memcpy(conv + (size_t)i * 2, &h, 2);
		}
		src = conv;
	}
	struct tpf_value *old = tpf_graph_find_value(g, base), *res = NULL;
	if (old && old->kind == TPF_VALUE_INITIALIZER && !old->is_graph_input && old->init &&
	    old->init->dtype == f->wtype && old->init->nbytes == nbytes && old->init->data &&
	    memcmp(old->init->data, src, nbytes) == 0) {
		res = old;
	} else {
		const char *name = tpf_graph_unique_name(g, base);
		if (name)
			res = tpf_graph_add_initializer(g, name, f->wtype, t->rank, dims, src, nbytes);
	}
	free(conv);
	return res;
}

/* The fused op's gamma: this rank's shard gamma[r*d : (r+1)*d) (the plain
 * form) or the full gamma (the part form), in the input's dtype. */
static struct tpf_value *fused_gamma(struct tpf_graph *g, struct tpf_value *gamma,
                                     const struct shard_facts *f)
{
	const struct tpf_tensor *t = tpf_value_constant(gamma);
	char base[256];

	if (f->part && f->wtype == t->dtype)
		return gamma;
	if (f->part)
		snprintf(base, sizeof(base), "%s.%s", gamma->name, tpf_dtype_name(f->wtype));
	else
		snprintf(base, sizeof(base), "%s.shard%lldof%lld", gamma->name,
		         (long long)f->rank, (long long)f->world);
	return f->part ? gamma_part(g, t, f, 0, f->full_dim, base)
	               : gamma_part(g, t, f, f->rank * f->local_dim, f->local_dim, base);
}

static enum tpf_status rewrite_sharded(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct shard_facts *f = (const struct shard_facts *)m->facts;
	struct tpf_node *norm = tpf_match_node(m, "norm");
	struct tpf_value *x = tpf_match_value(m, "x");
	enum tpf_status st;
	char buf[160];

	struct tpf_value *shard = fused_gamma(rw->graph, tpf_match_value(m, "gamma"), f);
	if (!shard)
		return tpf_diag_fail(rw->diag, TPF_ERR_NOMEM, "%s: %s: out of memory (gamma shard)",
		                     tpf_node_describe(m->root, buf, sizeof(buf)), PASS_NAME);
	struct tpf_value *in[2] = {x, shard};
	struct tpf_node *n = tpf_rewriter_create(rw, TPF_OP_TPF_SHARDED_RMS_NORM, in, 2, 1, NULL);
	if (!n)
		return TPF_ERR_NOMEM;
	if ((st = tpf_node_set_attr_float(n, "epsilon",
	                                  tpf_node_attr_float(norm, "epsilon", 1e-5f))) ||
	    (st = tpf_node_set_attr_int(n, "world_size", f->world)) ||
	    (st = tpf_node_set_attr_int(n, "full_dim", f->full_dim)) ||
	    (st = tpf_node_set_attr_int(n, "stash_type",
	                                tpf_node_attr_int(norm, "stash_type", TPF_DTYPE_FLOAT))) ||
	    (st = tpf_node_set_attr_float(n, "weight_offset",
	                                  tpf_node_attr_float(norm, "weight_offset", 0.0f))))
		return st;
	if (f->part && ((st = tpf_node_set_attr_ints(n, "part_starts", &f->start, 1)) ||
	                (st = tpf_node_set_attr_ints(n, "part_ends", &f->end, 1))))
		return st;
	/* the result has the local input's type */
	const struct tpf_type *t = f->out->type.kind != TPF_TYPE_NONE ? &f->out->type
	                           : f->part                           ? NULL
	                                                               : &x->type;
	if (t && t->kind != TPF_TYPE_NONE && (st = tpf_value_copy_type(n->outputs[0], t)))
		return st;
	if ((st = tpf_rewriter_replace(rw, f->out, n->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

/* --------------------------------------------------------------- patterns */

#define P_NORM                                                                                     \
	TPF_PAT_OP(                                                                                \
	    TPF_RMS_NORM, "norm", TPF_PNODE_MULTI_USE, NULL,                                       \
	    TPF_PAT_OP(MS_ALLGATHER, "ag", TPF_PNODE_MULTI_USE, pred_allgather, TPF_PAT_ANY("x")), \
	    TPF_PAT_CONST("gamma"))

/* Both forms count under one name: the counter is the pattern name.  A
 * Slice or Split of a norm that is not gathered is common and not reported
 * (explain_min_nodes = 3). */
static const struct tpf_pattern pat_slice = {
    .name = PATTERN_NAME,
    .root = TPF_PAT_OP(SLICE, "slice", TPF_PNODE_EXTRA_INPUTS, NULL, P_NORM),
    .check = check_slice,
    .rewrite = rewrite_sharded,
    .explain_min_nodes = 3,
};

static const struct tpf_pattern pat_split = {
    .name = PATTERN_NAME,
    .root = TPF_PAT_OP(SPLIT, "split", TPF_PNODE_EXTRA_INPUTS, NULL, P_NORM),
    .check = check_split,
    .rewrite = rewrite_sharded,
    .explain_min_nodes = 3,
};

/* Both forms count as "sharded-rmsnorm"; the merge phase adds its own counter. */
/* -------------------------------------------------- shapes of the gathered norm */

/* Exporters split the normalized tensor with bounds computed from its
 * shape (TorchScript's torch.split: Shape -> Gather -> Add/Div -> Slice), so
 * a Shape node reads the full tensor too.  Shape(RMSNorm(g)) is Shape(g),
 * and Shape(AllGather(x) over the last axis) is Shape(x) * [1, ..., W]:
 * then only the Slice or Split reads the gathered norm and it fuses. */
static const char *pred_whole_shape(const struct tpf_node *n, struct tpf_match *m)
{
	(void)m;
	if (tpf_node_attr(n, "start") || tpf_node_attr(n, "end"))
		return "a Shape with start or end";
	return NULL;
}

/* Whether v is read by an RMSNorm (as its input). */
static int feeds_norm(const struct tpf_value *v)
{
	for (size_t i = 0; i < v->n_uses; i++)
		if (v->uses[i].node->op == TPF_OP_TPF_RMS_NORM && v->uses[i].index == 0)
			return 1;
	return 0;
}

struct shape_facts {
	int64_t world;
	int rank;
};

static const char *check_shape_norm(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	(void)pc;
	struct tpf_node *norm = tpf_match_node(m, "norm");
	struct tpf_value *g = tpf_match_value(m, "g");
	if (!norm || !g)
		return "incomplete match";
	if (!g->producer || g->producer->op != TPF_OP_MS_ALLGATHER)
		return "the norm's input is not gathered";
	return NULL;
}

static enum tpf_status shape_of(struct tpf_rewriter *rw, struct tpf_value *x,
				const struct tpf_value *like, struct tpf_node **out)
{
	*out = tpf_rewriter_create(rw, TPF_OP_SHAPE, &x, 1, 1, NULL);
	if (!*out)
		return TPF_ERR_NOMEM;
	if (like->type.kind != TPF_TYPE_NONE)
		return tpf_value_copy_type((*out)->outputs[0], &like->type);
	return TPF_OK;
}

static enum tpf_status rewrite_shape_norm(struct tpf_rewriter *rw, struct tpf_match *m)
{
	struct tpf_node *sh;
	enum tpf_status st = shape_of(rw, tpf_match_value(m, "g"), m->root->outputs[0], &sh);
	if (st)
		return st;
	if ((st = tpf_rewriter_replace(rw, m->root->outputs[0], sh->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static const char *check_shape_gather(const struct tpf_pattern_context *pc, struct tpf_match *m)
{
	struct shape_facts *f = (struct shape_facts *)m->facts;
	struct tpf_node *ag = tpf_match_node(m, "ag");
	struct tpf_value *x = tpf_match_value(m, "x");
	if (!ag || !x)
		return "incomplete match";
	if (!feeds_norm(ag->outputs[0]))
		return "the gathered tensor feeds no RMSNorm";
	f->rank = value_rank(x, ag->outputs[0]);
	if (f->rank < 1 || f->rank > TPF_MAX_RANK)
		return "the rank of the gathered tensor is unknown";
	if (!is_last_axis(tpf_node_attr_int(ag, "axis", 0), f->rank))
		return "the AllGather is not over the last axis";
	const struct tpf_attr *gs = tpf_node_attr(ag, "group_size");
	f->world = gs && gs->kind == TPF_ATTR_INT ? gs->i : pc->world_size;
	if (f->world <= 0)
		return "the world size is unknown (no group_size, --world-size or tp_world_size)";
	return NULL;
}

static enum tpf_status rewrite_shape_gather(struct tpf_rewriter *rw, struct tpf_match *m)
{
	const struct shape_facts *f = (const struct shape_facts *)m->facts;
	struct tpf_value *out = m->root->outputs[0];
	int64_t k[TPF_MAX_RANK], dim = f->rank;
	struct tpf_node *sh;
	enum tpf_status st;

	for (int i = 0; i < f->rank; i++)
		k[i] = i == f->rank - 1 ? f->world : 1;
	const char *name = tpf_graph_unique_name(rw->graph, "allgather_shape_factor");
	struct tpf_value *c = name ? tpf_graph_add_initializer(rw->graph, name, TPF_DTYPE_INT64, 1,
								&dim, k, (size_t)f->rank * 8)
				   : NULL;
	if (!c)
		return TPF_ERR_NOMEM;
	if ((st = shape_of(rw, tpf_match_value(m, "x"), out, &sh)))
		return st;
	struct tpf_value *in[2] = {sh->outputs[0], c};
	struct tpf_node *mul = tpf_rewriter_create(rw, TPF_OP_MUL, in, 2, 1, NULL);
	if (!mul)
		return TPF_ERR_NOMEM;
	if ((st = tpf_rewriter_replace(rw, out, mul->outputs[0])))
		return st;
	return tpf_rewriter_erase_dead(rw, m);
}

static const struct tpf_pattern pat_shape_norm = {
    .name = "shape-through-norm",
    .root = TPF_PAT_OP(SHAPE, "shape", 0, pred_whole_shape,
                       TPF_PAT_OP(TPF_RMS_NORM, "norm", TPF_PNODE_MULTI_USE, NULL,
                                  TPF_PAT_ANY("g"), TPF_PAT_ANY("gamma"))),
    .check = check_shape_norm,
    .rewrite = rewrite_shape_norm,
    .explain_min_nodes = 99,
};

static const struct tpf_pattern pat_shape_gather = {
    .name = "shape-through-allgather",
    .root = TPF_PAT_OP(SHAPE, "shape", 0, pred_whole_shape,
                       TPF_PAT_OP(MS_ALLGATHER, "ag", TPF_PNODE_MULTI_USE, NULL, TPF_PAT_ANY("x"))),
    .check = check_shape_gather,
    .rewrite = rewrite_shape_gather,
    .explain_min_nodes = 99,
};

static const struct tpf_pattern *const patterns[] = {&pat_shape_norm, &pat_shape_gather,
                                                     &pat_slice, &pat_split, NULL};

/* ------------------------------------------------------------ Q/K merging */

/* Per-tensor attributes of a (possibly merged) ShardedRMSNorm. */
static float node_eps(const struct tpf_node *n, size_t i)
{
	const struct tpf_attr *a = tpf_node_attr(n, "epsilons");
	if (a && a->kind == TPF_ATTR_FLOATS && i < a->n)
		return a->floats[i];
	return tpf_node_attr_float(n, "epsilon", 1e-5f);
}

static int64_t node_full_dim(const struct tpf_node *n, size_t i)
{
	const struct tpf_attr *a = tpf_node_attr(n, "full_dims");
	if (a && a->kind == TPF_ATTR_INTS && i < a->n)
		return a->ints[i];
	return tpf_node_attr_int(n, "full_dim", -1);
}

/* A well-formed ShardedRMSNorm: n data inputs, n gammas, n outputs. */
static int mergeable(const struct tpf_node *n)
{
	if (n->erased || n->op != TPF_OP_TPF_SHARDED_RMS_NORM || n->n_outputs == 0 ||
	    n->n_inputs != 2 * n->n_outputs || n->n_implicit)
		return 0;
	for (size_t i = 0; i < n->n_inputs; i++)
		if (!n->inputs[i])
			return 0;
	for (size_t i = 0; i < n->n_outputs; i++)
		if (!n->outputs[i] || node_full_dim(n, i) <= 0)
			return 0;
	return tpf_pattern_rank(n->inputs[0]) >= 1;
}

/* Same token shape (all dims but the last), dtype and exchange settings. */
static int compatible(const struct tpf_node *a, const struct tpf_node *b)
{
	const struct tpf_value *xa = a->inputs[0], *xb = b->inputs[0];
	int r = tpf_pattern_rank(xa);

	if (r < 1 || r != tpf_pattern_rank(xb))
		return 0;
	for (int i = 0; i < r - 1; i++)
		if (!dims_equal(&xa->type.shape.dims[i], &xb->type.shape.dims[i]))
			return 0;
	enum tpf_dtype ta = tpf_pattern_dtype(xa);
	/* part forms merge with part forms only (their weights are whole) */
	if (!tpf_node_attr(a, "part_starts") != !tpf_node_attr(b, "part_starts"))
		return 0;
	return ta != TPF_DTYPE_UNDEFINED && ta == tpf_pattern_dtype(xb) &&
	       tpf_node_attr_int(a, "world_size", -1) == tpf_node_attr_int(b, "world_size", -1) &&
	       tpf_node_attr_int(a, "stash_type", 1) == tpf_node_attr_int(b, "stash_type", 1) &&
	       tpf_node_attr_float(a, "weight_offset", 0.0f) ==
	           tpf_node_attr_float(b, "weight_offset", 0.0f);
}

struct merge_state {
	struct tpf_graph *g;
	size_t n_ids;
	uint32_t *pos;   /* by node id: position in graph order */
	uint32_t *stamp; /* by node id: visited in check number `gen` */
	uint8_t *tried;  /* by node id: leader that found no partner, or a merged node */
	uint32_t gen;
	struct tpf_node **stack;
	size_t cap_stack;
	struct tpf_node **norms;
	size_t n_norms, cap_norms;
};

static enum tpf_status grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return TPF_OK;
	size_t c = *cap ? *cap : 16, bytes;
	while (c < need)
		c *= 2;
	if (tpf_mul_size(c, elem, &bytes))
		return TPF_ERR_LIMIT;
	void *p = tpf_realloc(*arr, bytes);
	if (!p)
		return TPF_ERR_NOMEM;
	*arr = p;
	*cap = c;
	return TPF_OK;
}

#define MOVE_MARK 0x5eed0001u

/* Positions and the list of ShardedRMSNorm nodes, in graph order. */
/* Grows the per-node-id arrays (positions, stamps, `tried`) to the graph's
 * current node ids; new entries start at zero. */
static enum tpf_status ensure_ids(struct merge_state *s)
{
	size_t ids = s->g->next_node_id ? s->g->next_node_id : 1;
	if (ids <= s->n_ids)
		return TPF_OK;
	uint32_t *pos = tpf_realloc(s->pos, ids * sizeof(*pos));
	if (!pos)
		return TPF_ERR_NOMEM;
	s->pos = pos;
	if (tpf_pattern_grow_zeroed((void **)&s->stamp, s->n_ids, ids, sizeof(*s->stamp)) ||
	    tpf_pattern_grow_zeroed((void **)&s->tried, s->n_ids, ids, 1))
		return TPF_ERR_NOMEM;
	s->n_ids = ids;
	return TPF_OK;
}

static enum tpf_status merge_scan(struct merge_state *s)
{
	enum tpf_status st = ensure_ids(s);
	if (st)
		return st;
	s->n_norms = 0;
	uint32_t p = 0;
	for (struct tpf_node *n = s->g->first; n; n = n->next) {
		s->pos[n->id] = p++;
		if (!mergeable(n))
			continue;
		enum tpf_status st =
		    grow((void **)&s->norms, &s->cap_norms, s->n_norms + 1, sizeof(*s->norms));
		if (st)
			return st;
		s->norms[s->n_norms++] = n;
	}
	return TPF_OK;
}

/* Whether `c` (after every member in graph order) reads, transitively, an
 * output of a member.  1: depends (or the search was too large), 0: no,
 * -1: out of memory. */
static int depends_on_group(struct merge_state *s, struct tpf_node *const *group, size_t k,
                            struct tpf_node *c)
{
	uint32_t lo = s->pos[group[0]->id];
	size_t sp = 0, visits = 0;

	for (size_t i = 1; i < k; i++)
		if (s->pos[group[i]->id] < lo)
			lo = s->pos[group[i]->id];
	if (++s->gen == 0) {
		memset(s->stamp, 0, s->n_ids * sizeof(*s->stamp));
		s->gen = 1;
	}
	if (grow((void **)&s->stack, &s->cap_stack, 1, sizeof(*s->stack)))
		return -1;
	s->stack[sp++] = c;
	while (sp) {
		struct tpf_node *n = s->stack[--sp];
		size_t total = n->n_inputs + n->n_implicit;
		for (size_t i = 0; i < total; i++) {
			struct tpf_value *v =
			    i < n->n_inputs ? n->inputs[i] : n->implicit_inputs[i - n->n_inputs];
			struct tpf_node *p = v ? v->producer : NULL;
			if (!p || p->erased || p->graph != s->g || p->id >= s->n_ids ||
			    s->stamp[p->id] == s->gen || s->pos[p->id] < lo)
				continue;
			for (size_t j = 0; j < k; j++)
				if (group[j] == p)
					return 1;
			if (++visits > MERGE_MAX_VISITS)
				return 1;
			s->stamp[p->id] = s->gen;
			if (grow((void **)&s->stack, &s->cap_stack, sp + 1, sizeof(*s->stack)))
				return -1;
			s->stack[sp++] = p;
		}
	}
	return 0;
}

/* The merged node `m` sits where the last member was.  Nodes between the
 * first member and `m` that read (transitively) what the earlier members
 * computed now read `m`: they move after it, in their order.  Nothing else
 * needs to move: the members are independent, so `m`'s inputs are all
 * defined before it.  This keeps the order topological without sorting
 * the whole graph after every merge. */
static enum tpf_status move_consumers_after(struct tpf_graph *g, struct tpf_node *const *group,
                                            size_t k, struct tpf_node *m)
{
	struct tpf_node **moved = NULL;
	size_t n_moved = 0, cap = 0;
	enum tpf_status st = TPF_OK;

	for (struct tpf_node *n = group[0]->next; n && n != m; n = n->next) {
		int member = 0, tainted = 0;
		for (size_t j = 0; j < k; j++)
			member |= n == group[j];
		if (member)
			continue;
		for (size_t i = 0; i < n->n_inputs + n->n_implicit && !tainted; i++) {
			const struct tpf_value *v =
			    i < n->n_inputs ? n->inputs[i] : n->implicit_inputs[i - n->n_inputs];
			const struct tpf_node *p = v ? v->producer : NULL;
			tainted = p && (p == m || (p->graph == g && p->mark == MOVE_MARK));
		}
		if (!tainted)
			continue;
		if ((st = grow((void **)&moved, &cap, n_moved + 1, sizeof(*moved))))
			goto out_free;
		n->mark = MOVE_MARK;
		moved[n_moved++] = n;
	}
	for (size_t i = 0; i < n_moved; i++) {
		moved[i]->mark = 0;
		tpf_graph_move_node_before(g, moved[i], group[k - 1]);
	}
out_free:
	tpf_free(moved);
	return st;
}

/* Replaces the members by one ShardedRMSNorm over all their tensors. */
static enum tpf_status merge_group(struct merge_state *s, struct tpf_node *const *group, size_t k,
                                   struct tpf_node **merged_out, struct tpf_diag *d)
{
	struct tpf_graph *g = s->g;
	size_t total = 0, o = 0;
	struct tpf_value **ins = NULL, **olds = NULL;
	float *eps = NULL;
	int64_t *dims = NULL, *pst = NULL, *pen = NULL;
	int parts = tpf_node_attr(group[0], "part_starts") != NULL;
	const char **names = NULL;
	enum tpf_status st = TPF_ERR_NOMEM;
	char name[256], buf[160];

	for (size_t i = 0; i < k; i++)
		total += group[i]->n_outputs;
	ins = tpf_calloc(2 * total, sizeof(*ins));
	olds = tpf_calloc(total, sizeof(*olds));
	eps = tpf_calloc(total, sizeof(*eps));
	dims = tpf_calloc(total, sizeof(*dims));
	names = tpf_calloc(total, sizeof(*names));
	pst = tpf_calloc(total, sizeof(*pst));
	pen = tpf_calloc(total, sizeof(*pen));
	if (!ins || !olds || !eps || !dims || !names || !pst || !pen)
		goto out_free;
	for (size_t i = 0; i < k; i++) {
		const struct tpf_node *n = group[i];
		for (size_t j = 0; j < n->n_outputs; j++, o++) {
			ins[o] = n->inputs[j];
			ins[total + o] = n->inputs[n->n_outputs + j];
			olds[o] = n->outputs[j];
			eps[o] = node_eps(n, j);
			dims[o] = node_full_dim(n, j);
			if (parts) {
				const struct tpf_attr *as = tpf_node_attr(n, "part_starts"),
				                      *ae = tpf_node_attr(n, "part_ends");
				if (!as || !ae || as->kind != TPF_ATTR_INTS || ae->kind != TPF_ATTR_INTS ||
				    as->n != n->n_outputs || ae->n != n->n_outputs) {
					st = tpf_diag_fail(d, TPF_ERR_INVALID,
					                   "%s: %s: part_starts/part_ends do not have one "
					                   "entry per output",
					                   tpf_node_describe(n, buf, sizeof(buf)), PASS_NAME);
					goto out_free;
				}
				pst[o] = as->ints[j];
				pen[o] = ae->ints[j];
			}
		}
	}

	/* inserted at the last member: every member input is defined before it */
	snprintf(name, sizeof(name), "%s/merged",
	         group[0]->name && *group[0]->name ? group[0]->name : "ShardedRMSNorm");
	struct tpf_node *m = tpf_graph_insert_node(g, group[k - 1], TPF_DOMAIN, "ShardedRMSNorm",
	                                           name, ins, 2 * total, total, NULL);
	if (!m)
		goto out_free;
	m->origin_pass = PASS_NAME;
	m->origin_pattern = MERGE_COUNTER;
	*merged_out = m;
	if ((st = tpf_node_set_attr_floats(m, "epsilons", eps, total)) ||
	    (st = tpf_node_set_attr_ints(m, "full_dims", dims, total)) ||
	    (st = tpf_node_set_attr_int(m, "world_size",
	                                tpf_node_attr_int(group[0], "world_size", -1))) ||
	    (st = tpf_node_set_attr_int(m, "stash_type",
	                                tpf_node_attr_int(group[0], "stash_type", 1))) ||
	    (st = tpf_node_set_attr_float(m, "weight_offset",
	                                  tpf_node_attr_float(group[0], "weight_offset", 0.0f))))
		goto out_free;
	if (parts && ((st = tpf_node_set_attr_ints(m, "part_starts", pst, total)) ||
	              (st = tpf_node_set_attr_ints(m, "part_ends", pen, total))))
		goto out_free;
	for (o = 0; o < total; o++) {
		if (olds[o]->type.kind != TPF_TYPE_NONE &&
		    (st = tpf_value_copy_type(m->outputs[o], &olds[o]->type)))
			goto out_free;
		if ((st = tpf_value_replace_uses(olds[o], m->outputs[o])))
			goto out_free;
		names[o] = olds[o]->name;
	}
	if ((st = move_consumers_after(g, group, k, m)))
		goto out_free;
	for (size_t i = 0; i < k; i++) {
		if ((st = tpf_graph_erase_node(g, group[i]))) {
			st =
			    tpf_diag_fail(d, st, "%s: %s: cannot erase it after merging",
			                  tpf_node_describe(group[i], buf, sizeof(buf)), PASS_NAME);
			goto out_free;
		}
	}
	/* the merged outputs take the old names (graph outputs keep theirs) */
	for (o = 0; o < total; o++) {
		st = tpf_value_rename(m->outputs[o], names[o]);
		if (st == TPF_ERR_NOMEM)
			goto out_free;
	}
	st = TPF_OK;

out_free:
	if (st == TPF_ERR_NOMEM)
		tpf_diag_add(d, TPF_SEV_ERROR, "%s: out of memory while merging norms", PASS_NAME);
	tpf_free(ins);
	tpf_free(olds);
	tpf_free(eps);
	tpf_free(dims);
	tpf_free(names);
	tpf_free(pst);
	tpf_free(pen);
	return st;
}

/* After a merge: the nodes strictly between `before` and `after` (the
 * stretch that held the group, now holding the merged node and whatever
 * moved) get positions pos_lo, pos_lo + 1, ... (they are fewer than before,
 * so they stay below the next node's position), and the norms of that
 * stretch replace the old entries of s->norms from index `first` on. */
static enum tpf_status rescan_window(struct merge_state *s, struct tpf_node *before,
                                     struct tpf_node *after, uint32_t pos_lo, uint32_t pos_hi,
                                     size_t first)
{
	/* the old entries of the stretch (erased members included: their
	 * positions are still the old ones) */
	size_t end = first;
	while (end < s->n_norms && s->pos[s->norms[end]->id] <= pos_hi)
		end++;
	size_t fresh = 0;
	uint32_t p = pos_lo;
	for (struct tpf_node *n = before ? before->next : s->g->first; n && n != after; n = n->next) {
		s->pos[n->id] = p++;
		fresh += mergeable(n);
	}
	size_t old = end - first, tail = s->n_norms - end;
	if (fresh > old) {
		enum tpf_status st = grow((void **)&s->norms, &s->cap_norms,
		                          s->n_norms + fresh - old, sizeof(*s->norms));
		if (st)
			return st;
	}
	memmove(&s->norms[first + fresh], &s->norms[end], tail * sizeof(*s->norms));
	s->n_norms = first + fresh + tail;
	size_t w = first;
	for (struct tpf_node *n = before ? before->next : s->g->first; n && n != after; n = n->next)
		if (mergeable(n))
			s->norms[w++] = n;
	return TPF_OK;
}

/* Merges independent compatible norms until nothing changes. */
static enum tpf_status merge_norms(struct tpf_model *model, struct tpf_pass_context *ctx,
                                   int *changed, struct tpf_diag *d)
{
	struct merge_state s = {.g = model->graph};
	struct tpf_node **group = NULL;
	size_t cap_group = 0;
	enum tpf_status st = TPF_OK;

	/* One sweep over the norms in graph order.  A merge only adds
	 * dependencies, so a norm that found no partner never finds one later,
	 * and a merged group is already as large as it gets: both are marked
	 * `tried`.  After a merge only the stretch of the graph between the
	 * first and the last member changed; it is renumbered in place
	 * (rescan_window) instead of rescanning the graph, which keeps the pass
	 * linear in the size of the graph. */
	if ((st = merge_scan(&s)))
		goto out_free;
	size_t i = 0;
	while (i < s.n_norms) {
		if ((st = ensure_ids(&s)))
			goto out_free;
		if (s.tried[s.norms[i]->id]) {
			i++;
			continue;
		}
		size_t k = 0, scanned = 0;
		if ((st = grow((void **)&group, &cap_group, s.n_norms, sizeof(*group))))
			goto out_free;
		group[k++] = s.norms[i];
		for (size_t j = i + 1; j < s.n_norms && scanned < MERGE_MAX_CANDIDATES; j++) {
			struct tpf_node *c = s.norms[j];
			if (!compatible(group[0], c))
				continue;
			scanned++;
			int dep = depends_on_group(&s, group, k, c);
			if (dep < 0) {
				st = TPF_ERR_NOMEM;
				goto out_free;
			}
			if (dep)
				break;
			group[k++] = c;
		}
		if (k < 2) {
			s.tried[s.norms[i]->id] = 1;
			i++;
			continue;
		}
		uint32_t pos_lo = s.pos[group[0]->id], pos_hi = s.pos[group[k - 1]->id];
		struct tpf_node *before = group[0]->prev, *after = group[k - 1]->next, *merged = NULL;
		if ((st = merge_group(&s, group, k, &merged, d)))
			goto out_free;
		if ((st = ensure_ids(&s)))
			goto out_free;
		s.tried[merged->id] = 1;
		if ((st = rescan_window(&s, before, after, pos_lo, pos_hi, i)))
			goto out_free;
		if (tpf_model_opset(model, TPF_DOMAIN) < 0 &&
		    (st = tpf_model_set_opset(model, TPF_DOMAIN, 1)))
			goto out_free;
		if (ctx && ctx->stats)
			tpf_pass_stats_add(ctx->stats, PASS_NAME, MERGE_COUNTER, (int64_t)k - 1);
		*changed = 1;
	}
	/* the merges kept the order topological; check it once */
	if (*changed && (st = tpf_graph_toposort(s.g, d)))
		goto out_free;

	if (ctx && ctx->explain && s.n_norms > 1) {
		char buf[160];
		for (size_t i = 0; i < s.n_norms; i++)
			if (s.norms[i]->n_outputs == 1)
				fprintf(
				    ctx->explain,
				    "near-miss: %s/%s at %s: no independent ShardedRMSNorm with "
				    "the same token shape, dtype and settings to share its "
				    "exchange with\n",
				    PASS_NAME, MERGE_COUNTER,
				    tpf_node_describe(s.norms[i], buf, sizeof(buf)));
	}

out_free:
	if (st == TPF_ERR_NOMEM || st == TPF_ERR_LIMIT)
		tpf_diag_add(d, TPF_SEV_ERROR, "%s: out of memory while merging norms", PASS_NAME);
	tpf_free(group);
	tpf_free(s.tried);
	tpf_free(s.pos);
	tpf_free(s.stamp);
	tpf_free(s.stack);
	tpf_free(s.norms);
	return st;
}

/* ------------------------------------------------------------------ pass */

static const char *const counters[] = {MERGE_COUNTER, NULL};

/* --explain never leaves an AllGather silent: one that feeds a norm has
 * that pattern's near-miss line (at its Slice or Split), one that feeds
 * none (a vocab-parallel head's logits) gets a line saying what reads it. */
static int explain_norm(FILE *f, const char *pass, const struct tpf_node *n)
{
	const struct tpf_value *v = n->outputs[0];
	char buf[160], ubuf[160];

	for (size_t i = 0; i < v->n_uses; i++) {
		const struct tpf_node *norm = v->uses[i].node;
		if (norm->op != TPF_OP_TPF_RMS_NORM || v->uses[i].index != 0)
			continue;
		fprintf(f, "unfused: %s at %s: the norm %s it feeds did not fuse: the "
		           "near-miss line at the Slice or Split after the norm says why "
		           "(without one, nothing takes a part of the norm)\n",
		        pass, tpf_node_describe(n, buf, sizeof(buf)),
		        tpf_node_describe(norm, ubuf, sizeof(ubuf)));
		return 1;
	}
	return 0;
}

static const struct tpf_unfused_explain unfused = {
    .pass = PASS_NAME,
    .op = TPF_OP_MS_ALLGATHER,
    .value = "gathered",
    .reader = "RMSNorm",
    .wanted = "an RMSNorm",
    .norm_line = explain_norm,
};

static enum tpf_status run(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
                           struct tpf_diag *d)
{
	int fused = 0;
	enum tpf_status st;

	if (changed)
		*changed = 0;
	if (!m || !m->graph)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: no graph", PASS_NAME);
	/* A first round takes the Shape readers off the gathered norms; the
	 * Slices they held back fuse in the second, which alone reports its
	 * near misses. */
	FILE *explain = ctx ? ctx->explain : NULL;
	if (ctx)
		ctx->explain = NULL;
	st = tpf_pattern_run(m, &tpf_pass_fuse_sharded_rmsnorm, ctx, &fused, d);
	if (ctx)
		ctx->explain = explain;
	if (st)
		return st;
	int again = 0;
	st = tpf_pattern_run(m, &tpf_pass_fuse_sharded_rmsnorm, ctx, &again, d);
	if (st)
		return st;
	fused |= again;
	int merged = 0;
	st = merge_norms(m, ctx, &merged, d);
	if (!st && ctx && ctx->explain)
		tpf_pattern_explain_unfused(m, ctx->explain, &unfused);
	if (changed)
		*changed = fused || merged;
	return st;
}

const struct tpf_pass tpf_pass_fuse_sharded_rmsnorm = {
    .name = PASS_NAME,
    .summary = "AllGather + RMSNorm + Slice/Split of this rank's part into "
               "ai.tpfuse.ShardedRMSNorm (one float per token exchanged); Q/K norms share "
               "one exchange",
    .run = run,
    .patterns = patterns,
    .counters = counters,
};
