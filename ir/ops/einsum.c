/* SPDX-License-Identifier: MIT */
/* Einsum (opset 12 on): the parser of its equation (tpf_einsum_parse, for
 * the shape function here and the kernels' index plans) and its record. */
#include "op-def.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* One term of the equation: its letters in order and where its ellipsis is
 * (-1: none), as written; spaces are skipped. */
struct es_term {
	char letters[TPF_EINSUM_MAX_RANK + 1];
	int n_letters;
	int ellipsis; /* letters before the ellipsis, or -1 */
};

static int es_fail(char *err, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int es_fail(char *err, size_t size, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (size)
		vsnprintf(err, size, fmt, ap);
	va_end(ap);
	return -1;
}

static int es_letter(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

/* Reads one term from *p up to a ',', the arrow or the end.  `what` names
 * it in messages ("input 1", "the output"). */
static int es_read_term(const char **p, struct es_term *t, const char *what, char *err, size_t size)
{
	const char *s = *p;

	t->n_letters = 0;
	t->ellipsis = -1;
	for (; *s && *s != ',' && *s != '-'; s++) {
		if (*s == ' ')
			continue;
		if (*s == '.') {
			if (s[1] != '.' || s[2] != '.')
				return es_fail(err, size, "%s: '.' outside an ellipsis '...'", what);
			if (t->ellipsis >= 0)
				return es_fail(err, size, "%s has two ellipses", what);
			t->ellipsis = t->n_letters;
			s += 2;
			continue;
		}
		if (!es_letter(*s))
			return es_fail(err, size, "%s: '%c' is not a subscript (a-z, A-Z or '...')",
				       what, *s);
		if (t->n_letters == TPF_EINSUM_MAX_RANK)
			return es_fail(err, size, "%s has more than %d subscripts", what,
				       TPF_EINSUM_MAX_RANK);
		t->letters[t->n_letters++] = *s;
	}
	t->letters[t->n_letters] = 0;
	*p = s;
	return 0;
}

/* Splits eq into the input terms and the output term (*explicit_out 0
 * when there is no arrow). */
static int es_split(const char *eq, int n_in, struct es_term *in, struct es_term *out,
		    int *explicit_out, char *err, size_t size)
{
	const char *p = eq;
	char what[32];
	int n = 0;

	for (;;) {
		if (n == n_in)
			return es_fail(err, size, "it has more input terms than the %d input%s", n_in,
				       n_in == 1 ? "" : "s");
		snprintf(what, sizeof(what), "input term %d", n);
		if (es_read_term(&p, &in[n], what, err, size))
			return -1;
		n++;
		if (*p != ',')
			break;
		p++;
	}
	if (n != n_in)
		return es_fail(err, size, "it has %d input term%s for %d inputs", n, n == 1 ? "" : "s",
			       n_in);
	*explicit_out = 0;
	if (!*p)
		return 0;
	if (p[1] != '>')
		return es_fail(err, size, "'-' is not followed by '>'");
	p += 2;
	*explicit_out = 1;
	if (es_read_term(&p, out, "the output term", err, size))
		return -1;
	if (*p)
		return es_fail(err, size, "unexpected '%c' in the output term", *p);
	return 0;
}

/* The dims each input's ellipsis stands for (ranks known), and their
 * largest count. */
static int es_ellipsis_dims(const struct es_term *in, int n_in, const int *ranks, int *ell, int *n_ell,
			    char *err, size_t size)
{
	*n_ell = 0;
	for (int i = 0; i < n_in; i++) {
		int extra = ranks[i] - in[i].n_letters;

		if (in[i].ellipsis < 0 ? extra != 0 : extra < 0)
			return es_fail(err, size,
				       "input term %d '%s%s' has %d subscript%s for input %d of rank %d",
				       i, in[i].letters, in[i].ellipsis >= 0 ? "..." : "",
				       in[i].n_letters, in[i].n_letters == 1 ? "" : "s", i, ranks[i]);
		ell[i] = in[i].ellipsis < 0 ? 0 : extra;
		if (ell[i] + in[i].n_letters > TPF_EINSUM_MAX_RANK)
			return es_fail(err, size, "input %d has rank %d, more than %d", i, ranks[i],
				       TPF_EINSUM_MAX_RANK);
		if (ell[i] > *n_ell)
			*n_ell = ell[i];
	}
	return 0;
}

/* Labels of one input term: ellipsis dims right-aligned to the ids
 * 0..n_ell, letters through ids[] (given the next free id on first use). */
static void es_label_input(struct tpf_einsum *e, int i, const struct es_term *t, int ell, int *ids,
			   int *count)
{
	int d = 0;

	for (int k = 0; k <= t->n_letters; k++) {
		if (k == t->ellipsis)
			for (int j = 0; j < ell; j++)
				e->label[i][d++] = (unsigned char)(e->n_ell - ell + j);
		if (k == t->n_letters)
			break;
		int ch = (unsigned char)t->letters[k];
		if (ids[ch] < 0) {
			ids[ch] = e->n_labels++;
			e->name[ids[ch]] = (char)ch;
		}
		e->label[i][d++] = (unsigned char)ids[ch];
		count[ch]++;
	}
	e->rank[i] = d;
}

/* The output labels: the "->" term, or the implicit order. */
static int es_label_output(struct tpf_einsum *e, const struct es_term *out, int explicit_out,
			   const int *ids, const int *count, char *err, size_t size)
{
	int seen[128] = {0};

	e->out_rank = 0;
	if (!explicit_out) {
		for (int j = 0; j < e->n_ell; j++)
			e->out[e->out_rank++] = (unsigned char)j;
		for (int ch = 0; ch < 128; ch++)
			if (count[ch] == 1) {
				if (e->out_rank == TPF_EINSUM_MAX_RANK)
					return es_fail(err, size, "the output has more than %d dims",
						       TPF_EINSUM_MAX_RANK);
				e->out[e->out_rank++] = (unsigned char)ids[ch];
			}
		return 0;
	}
	for (int k = 0; k <= out->n_letters; k++) {
		if (k == out->ellipsis)
			for (int j = 0; j < e->n_ell; j++) {
				if (e->out_rank == TPF_EINSUM_MAX_RANK)
					return es_fail(err, size, "the output has more than %d dims",
						       TPF_EINSUM_MAX_RANK);
				e->out[e->out_rank++] = (unsigned char)j;
			}
		if (k == out->n_letters)
			break;
		int ch = (unsigned char)out->letters[k];
		if (ids[ch] < 0)
			return es_fail(err, size, "output subscript '%c' is in no input term", ch);
		if (seen[ch]++)
			return es_fail(err, size, "output subscript '%c' is given twice", ch);
		if (e->out_rank == TPF_EINSUM_MAX_RANK)
			return es_fail(err, size, "the output has more than %d dims", TPF_EINSUM_MAX_RANK);
		e->out[e->out_rank++] = (unsigned char)ids[ch];
	}
	return 0;
}

int tpf_einsum_parse(const char *eq, int n_in, const int *ranks, struct tpf_einsum *e, char *err,
		     size_t size)
{
	struct es_term in[TPF_EINSUM_MAX_OPERANDS], out = {{0}, 0, -1};
	int explicit_out = 0, ell[TPF_EINSUM_MAX_OPERANDS], ids[128], count[128] = {0};
	int unknown = 0;

	memset(e, 0, sizeof(*e));
	if (!eq)
		return es_fail(err, size, "no equation");
	if (n_in < 1 || n_in > TPF_EINSUM_MAX_OPERANDS)
		return es_fail(err, size, "%d inputs; Einsum takes 1 to %d", n_in,
			       TPF_EINSUM_MAX_OPERANDS);
	if (es_split(eq, n_in, in, &out, &explicit_out, err, size))
		return -1;
	int known[TPF_EINSUM_MAX_OPERANDS];
	for (int i = 0; i < n_in; i++) {
		if (ranks[i] < 0 && in[i].ellipsis >= 0)
			unknown = 1;
		known[i] = ranks[i] >= 0 ? ranks[i] : in[i].n_letters;
	}
	if (unknown)
		return 1;
	if (es_ellipsis_dims(in, n_in, known, ell, &e->n_ell, err, size))
		return -1;
	e->n_in = n_in;
	e->n_labels = e->n_ell;
	memset(e->name, '.', (size_t)e->n_ell);
	for (int ch = 0; ch < 128; ch++)
		ids[ch] = -1;
	for (int i = 0; i < n_in; i++)
		es_label_input(e, i, &in[i], ell[i], ids, count);
	if (explicit_out && out.ellipsis < 0 && e->n_ell > 0)
		return es_fail(err, size, "the inputs have ellipsis dims but the output term has no '...'");
	return es_label_output(e, &out, explicit_out, ids, count, err, size);
}

/* ------------------------------------------------------------------ the record */

/* The dim of every label from the inputs: size-1 dims broadcast, two other
 * static sizes must agree, symbolic ones are unified.  -1 (reported). */
static int einsum_label_dims(struct tpf_shape_call *c, const struct tpf_einsum *e,
			     struct tpf_dim *dims, int *from)
{
	for (int l = 0; l < e->n_labels; l++) {
		dims[l] = dim_of(1);
		from[l] = -1;
	}
	for (int i = 0; i < e->n_in; i++) {
		const struct tpf_op_type *t = op_in(c, i);
		for (int d = 0; d < e->rank[i]; d++) {
			int l = e->label[i][d];
			const struct tpf_dim *x = t->rank >= 0 ? &t->dims[d] : NULL;
			struct tpf_dim u = x ? *x : dim_unknown();
			if (dim_is_static(&u) && u.value == 1)
				continue;
			if (from[l] < 0) {
				dims[l] = u;
				from[l] = i;
				continue;
			}
			if (dim_is_static(&u) && dim_is_static(&dims[l]) && u.value != dims[l].value) {
				char what[8] = "...";
				if (e->name[l] != '.')
					snprintf(what, sizeof(what), "'%c'", e->name[l]);
				op_error(c,
					 "subscript %s is %" PRId64 " in input %d ('%s') but %" PRId64
					 " in input %d ('%s')",
					 what, dims[l].value, from[l], op_in_name(c, (size_t)from[l]),
					 u.value, i, op_in_name(c, (size_t)i));
				return -1;
			}
			if (!dim_is_static(&dims[l]) && !dims[l].param)
				dims[l] = u; /* unknown so far */
			else if (u.param || dims[l].param)
				op_dims_unify(c, &u, &dims[l]);
		}
	}
	return 0;
}

static void einsum_shape(struct tpf_shape_call *c)
{
	struct tpf_op_type *y = op_out(c, 0);
	const char *eq = NULL;
	int ranks[TPF_EINSUM_MAX_OPERANDS], from[TPF_EINSUM_MAX_LABELS];
	struct tpf_dim dims[TPF_EINSUM_MAX_LABELS];
	struct tpf_einsum e;
	char err[160];

	if (!op_attr_string(c, "equation", &eq))
		return;
	if (c->n_in > TPF_EINSUM_MAX_OPERANDS) {
		op_error(c, "%zu inputs; Einsum takes at most %d", c->n_in, TPF_EINSUM_MAX_OPERANDS);
		return;
	}
	for (size_t i = 0; i < c->n_in; i++)
		ranks[i] = op_in(c, i)->rank;
	int st = tpf_einsum_parse(eq, (int)c->n_in, ranks, &e, err, sizeof(err));
	if (st < 0) {
		op_error(c, "equation '%s': %s", eq, err);
		return;
	}
	if (st > 0 || einsum_label_dims(c, &e, dims, from) || !y)
		return;
	op_type_set_rank(y, e.out_rank);
	for (int k = 0; k < e.out_rank; k++)
		y->dims[k] = dims[e.out[k]];
}

const struct tpf_op_def tpf_op_def_EINSUM = {
	.info = {"", "Einsum", 1, -1, 1, 1},
	.since = 12,
	.inputs = {{"Inputs", 1}},
	.outputs = {{"Output", 1}},
	.types = {[1] = TYPE_NUMERIC("T")},
	.attrs = (const struct op_attr[]){{.name = "equation", .kind = TPF_ATTR_STRING,
					   .flags = ATTR_REQUIRED},
					  {0}},
	.shape = einsum_shape,
};
