/* SPDX-License-Identifier: MIT */
/*
 * The KV-cache I/O of a language model (tpf_kv_io_find): which graph inputs
 * are the token ids, the mask and the positions, which output holds the
 * logits, and which present output continues each past input.  The names
 * give the candidates; the graph confirms them (dtypes, ranks, and the axis
 * along which a present extends its past).
 */
#include <stdio.h>
#include <string.h>

#include "tpf-ir.h"

/* The index of the graph output named `name`, or -1. */
static long output_index(const struct tpf_graph *g, const char *name)
{
	for (size_t i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] && !strcmp(g->outputs[i]->name, name))
			return (long)i;
	return -1;
}

/* The present's name for a past input's name (into buf), or 0 when `name`
 * is not a past of either spelling. */
static int present_name(const char *name, char *buf, size_t size)
{
	static const struct {
		const char *past, *present;
	} forms[] = {{"past_key_values.", "present."}, {"past_key.", "present_key."},
		     {"past_value.", "present_value."}};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		size_t n = strlen(forms[i].past);
		const char *p = name + n, *end;
		if (strncmp(name, forms[i].past, n) || *p < '0' || *p > '9')
			continue;
		for (end = p; *end >= '0' && *end <= '9'; end++)
			;
		if (i == 0 ? strcmp(end, ".key") && strcmp(end, ".value") : *end != '\0')
			continue;
		return snprintf(buf, size, "%s%s", forms[i].present, p) < (int)size;
	}
	return 0;
}

static int dim_is_symbolic(const struct tpf_dim *d)
{
	return d->param && d->param[0];
}

/* The past axis: the axis of a Concat taking the past that makes the
 * present, else the one non-batch axis whose past dim is symbolic and
 * differs from the present's.  -1 when neither says. */
static int past_axis(const struct tpf_value *past, const struct tpf_value *present)
{
	const struct tpf_node *n = present->producer;
	if (n && n->op == TPF_OP_TENSOR_SCATTER && n->inputs[0] == past) {
		int64_t axis = tpf_node_attr_int(n, "axis", -2);
		axis = axis < 0 ? axis + 4 : axis;
		return axis >= 1 && axis < 4 ? (int)axis : -1;
	}
	if (n && n->op == TPF_OP_CONCAT) {
		for (size_t i = 0; i < n->n_inputs; i++) {
			if (n->inputs[i] != past)
				continue;
			int64_t axis = tpf_node_attr_int(n, "axis", 0);
			axis = axis < 0 ? axis + 4 : axis;
			return axis >= 0 && axis < 4 ? (int)axis : -1;
		}
	}
	int found = -1;
	const struct tpf_dim *pd = past->type.shape.dims, *qd = present->type.shape.dims;
	for (int a = 1; a < 4; a++) {
		if (!dim_is_symbolic(&pd[a]))
			continue;
		if (dim_is_symbolic(&qd[a]) ? !strcmp(pd[a].param, qd[a].param) : qd[a].value >= 0)
			continue;
		if (found >= 0)
			return -1;
		found = a;
	}
	return found;
}

static int is_tensor_of_rank(const struct tpf_value *v, int rank)
{
	return v->type.kind == TPF_TYPE_TENSOR && v->type.shape.rank == rank;
}

/* Pairs the past input `in` (graph input i) with its present. */
static enum tpf_status pair_past(const struct tpf_graph *g, size_t i, struct tpf_kv_pair *p,
				 struct tpf_diag *d)
{
	const struct tpf_value *in = g->inputs[i];
	char name[256];
	long o;
	if (!present_name(in->name, name, sizeof(name)) || (o = output_index(g, name)) < 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' has no present output", in->name);
	const struct tpf_value *out = g->outputs[o];
	if (!is_tensor_of_rank(in, 4) || !is_tensor_of_rank(out, 4))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' and output '%s': a past and its present "
				     "must be tensors of rank 4", in->name, out->name);
	if (in->type.dtype != out->type.dtype)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' (%s) and output '%s' (%s) differ in dtype",
				     in->name, tpf_dtype_name(in->type.dtype), out->name,
				     tpf_dtype_name(out->type.dtype));
	int axis = past_axis(in, out);
	if (axis < 1)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s': cannot tell along which axis output '%s' "
				     "extends it (no Concat of it, no symbolic past length)", in->name, out->name);
	*p = (struct tpf_kv_pair){.past = in, .present = out, .input = i, .output = (size_t)o,
				  .axis = axis, .kv_heads = -1, .head_dim = -1};
	int64_t *other[2] = {&p->kv_heads, &p->head_dim};
	for (int a = 1, k = 0; a < 4; a++)
		if (a != axis)
			*other[k++] = in->type.shape.dims[a].value >= 0 && !in->type.shape.dims[a].param
					      ? in->type.shape.dims[a].value : -1;
	return TPF_OK;
}

/* Checks an int64 input of rank 2 named `name`. */
static enum tpf_status check_int_input(const struct tpf_value *v, struct tpf_diag *d)
{
	if (!is_tensor_of_rank(v, 2) || v->type.dtype != TPF_DTYPE_INT64)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' must be int64 of rank 2 [batch, sequence]",
				     v->name);
	return TPF_OK;
}

static enum tpf_status find_io(const struct tpf_graph *g, struct tpf_kv_io *io, struct tpf_diag *d)
{
	enum tpf_status st;
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		long *slot = !strcmp(v->name, "input_ids")	? &io->input_ids
			     : !strcmp(v->name, "attention_mask") ? &io->attention_mask
			     : !strcmp(v->name, "position_ids")   ? &io->position_ids
								  : NULL;
		if (slot) {
			if ((st = check_int_input(v, d)))
				return st;
			*slot = (long)i;
			continue;
		}
		if (!strcmp(v->name, "past_sequence_length")) {
			if (!is_tensor_of_rank(v, 1) || v->type.dtype != TPF_DTYPE_INT64)
				return tpf_diag_fail(d, TPF_ERR_INVALID, "input 'past_sequence_length' must be int64 [batch]");
			io->past_lengths = (long)i;
			continue;
		}
		char buf[256];
		if (!present_name(v->name, buf, sizeof(buf)))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "input '%s' is not a KV-cache model input "
					     "(input_ids, attention_mask, position_ids, past_key_values.N.key/value, "
					     "past_key.N, past_value.N, past_sequence_length)", v->name);
		if ((st = pair_past(g, i, &io->pairs[io->n_pairs], d)))
			return st;
		io->n_pairs++;
	}
	if (io->input_ids < 0 || io->attention_mask < 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "the model has no input '%s'",
				     io->input_ids < 0 ? "input_ids" : "attention_mask");
	if (!io->n_pairs)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "the model has no past key/value inputs");
	if ((io->logits = output_index(g, "logits")) < 0) {
		/* greedy-next-token: the ids of ArgMax(logits) in their place */
		if ((io->next_token = output_index(g, "next_token")) < 0)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "the model has no output 'logits' (or 'next_token')");
		const struct tpf_value *nt = g->outputs[io->next_token];
		const struct tpf_node *am = nt->producer;
		if (!is_tensor_of_rank(nt, 2) || nt->type.dtype != TPF_DTYPE_INT64 || !am ||
		    strcmp(am->op_type, "ArgMax") || !am->n_inputs || !is_tensor_of_rank(am->inputs[0], 3))
			return tpf_diag_fail(d, TPF_ERR_INVALID, "output 'next_token' must be int64 [batch, sequence], "
					     "the ArgMax of logits [batch, sequence, vocab]");
		const struct tpf_dim *vd = &am->inputs[0]->type.shape.dims[2];
		io->vocab = vd->value > 0 && !vd->param ? vd->value : -1;
		return TPF_OK;
	}
	const struct tpf_value *lg = g->outputs[io->logits];
	if (!is_tensor_of_rank(lg, 3))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "output 'logits' must be of rank 3 [batch, sequence, vocab]");
	const struct tpf_dim *vd = &lg->type.shape.dims[2];
	io->vocab = vd->value > 0 && !vd->param ? vd->value : -1;
	return TPF_OK;
}

enum tpf_status tpf_kv_io_find(const struct tpf_graph *g, struct tpf_kv_io *out, struct tpf_diag *d)
{
	*out = (struct tpf_kv_io){.input_ids = -1, .attention_mask = -1, .position_ids = -1, .logits = -1,
				  .past_lengths = -1, .next_token = -1};
	if (!g)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_kv_io_find: no graph");
	if (g->n_inputs && !(out->pairs = tpf_calloc(g->n_inputs, sizeof(*out->pairs))))
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
	enum tpf_status st = find_io(g, out, d);
	if (st)
		tpf_kv_io_release(out);
	return st;
}

void tpf_kv_io_release(struct tpf_kv_io *io)
{
	if (!io)
		return;
	tpf_free(io->pairs);
	io->pairs = NULL;
	io->n_pairs = 0;
}
