/* SPDX-License-Identifier: MIT */
/*
 * The parts of full tensors a rank model holds.  `tpfuse shard` names, in
 * each rank model's metadata, the graph inputs and outputs it splits at the
 * interface (a KV cache: each rank holds its heads):
 *
 *   tp_split_input:NAME  = "axis=A world=W [sections=S1,S2,...]"
 *   tp_split_output:NAME = the same
 *
 * Along axis A, the rank of tp_rank holds block r of W equal blocks of
 * each section (the sections' full sizes, in order; without them one
 * section, the whole dim), the blocks concatenated in section order.
 */
#include <stdlib.h>
#include <string.h>

#include "tpf-runtime.h"

#define SPLIT_INPUT_KEY "tp_split_input:"
#define SPLIT_OUTPUT_KEY "tp_split_output:"

static int parse_long(const char **p, long long *out)
{
	char *end;
	long long v = strtoll(*p, &end, 10);
	if (end == *p)
		return -1;
	*p = end;
	*out = v;
	return 0;
}

/* "axis=A world=W [sections=S1,...]" into sp (rank left as it is). */
static int parse_split(const char *text, struct tpf_rank_split *sp)
{
	const char *p = text;
	long long v;
	int have_axis = 0, have_world = 0;

	sp->n_sections = 0;
	while (*p) {
		while (*p == ' ')
			p++;
		if (!*p)
			break;
		if (!strncmp(p, "axis=", 5)) {
			p += 5;
			if (parse_long(&p, &v) || v < 0 || v >= TPF_KERNEL_MAX_RANK)
				return -1;
			sp->axis = (int)v;
			have_axis = 1;
		} else if (!strncmp(p, "world=", 6)) {
			p += 6;
			if (parse_long(&p, &v) || v < 1 || v > 1 << 20)
				return -1;
			sp->world = (int)v;
			have_world = 1;
		} else if (!strncmp(p, "sections=", 9)) {
			p += 9;
			do {
				if (sp->n_sections && *p++ != ',')
					return -1;
				if (sp->n_sections == TPF_RANK_SPLIT_MAX_SECTIONS ||
				    parse_long(&p, &v) || v < 0)
					return -1;
				sp->sections[sp->n_sections++] = v;
			} while (*p == ',');
		} else {
			return -1;
		}
		if (*p && *p != ' ')
			return -1;
	}
	if (!have_axis || !have_world)
		return -1;
	for (int j = 0; j < sp->n_sections; j++)
		if (sp->sections[j] % sp->world)
			return -1;
	return 0;
}

int tpf_rank_split_find(const struct tpf_model *m, int output, const char *name,
			struct tpf_rank_split *sp, struct tpf_diag *d)
{
	const char *pre = output ? SPLIT_OUTPUT_KEY : SPLIT_INPUT_KEY, *text, *rank;
	size_t len = strlen(pre) + strlen(name) + 1;
	char *key = tpf_malloc(len);
	long long r;

	if (!key) {
		tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
		return -1;
	}
	snprintf(key, len, "%s%s", pre, name);
	text = tpf_model_metadata(m, key);
	memset(sp, 0, sizeof(*sp));
	if (!text) {
		tpf_free(key);
		return 0;
	}
	rank = tpf_model_metadata(m, "tp_rank");
	if (parse_split(text, sp) || !rank || parse_long(&rank, &r) || *rank || r < 0 ||
	    r >= sp->world) {
		tpf_diag_fail(d, TPF_ERR_INVALID,
			      "the model's metadata %s = '%s' (tp_rank '%s') is not a split "
			      "'axis=A world=W [sections=S1,...]' of a rank in [0, W)",
			      key, text, rank ? tpf_model_metadata(m, "tp_rank") : "none");
		tpf_free(key);
		return -1;
	}
	sp->rank = (int)r;
	tpf_free(key);
	return 1;
}

enum tpf_status tpf_rank_part(const struct tpf_rank_split *sp, const struct tpf_host_tensor *full,
			      struct tpf_host_tensor *part, struct tpf_diag *d)
{
	int64_t sec[TPF_RANK_SPLIT_MAX_SECTIONS], sum = 0, outer = 1, inner = 1;
	int n = sp->n_sections ? sp->n_sections : 1, ax = sp->axis;
	unsigned bits = tpf_dtype_bits(full->dtype);
	size_t row, got;
	const char *nm = full->name ? full->name : "(unnamed)";

	if (ax >= full->rank || !bits || bits % 8)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "'%s': a tensor of rank %d and dtype %s cannot be split on axis %d",
				     nm, full->rank, tpf_dtype_name(full->dtype), ax);
	if (!sp->n_sections)
		sec[0] = full->dims[ax];
	else
		memcpy(sec, sp->sections, (size_t)n * sizeof(*sec));
	for (int j = 0; j < n; j++)
		sum += sec[j];
	if (sum != full->dims[ax] || sec[0] % sp->world)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "'%s': dim %d is %lld, not the %lld the rank model splits %d ways",
				     nm, ax, (long long)full->dims[ax], (long long)sum, sp->world);
	for (int k = 0; k < ax; k++)
		outer *= full->dims[k];
	for (int k = ax + 1; k < full->rank; k++)
		inner *= full->dims[k];
	if (tpf_host_tensor_bytes(full, &got) || got < (size_t)(outer * sum * inner) * (bits / 8))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "'%s': its data is not its dims", nm);
	*part = *full;
	part->dims[ax] = sum / sp->world;
	part->nbytes = (size_t)(outer * part->dims[ax] * inner) * (bits / 8);
	part->name = tpf_strdup(nm);
	part->data = tpf_malloc(part->nbytes ? part->nbytes : 1);
	if (!part->name || !part->data) {
		tpf_host_tensor_release(part);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory cutting '%s'", nm);
	}
	row = (size_t)inner * (bits / 8);
	{
		char *dst = part->data;
		const char *src = full->data;
		for (int64_t o = 0; o < outer; o++) {
			int64_t off = 0;
			for (int j = 0; j < n; j++) {
				int64_t blk = sec[j] / sp->world;
				size_t len = (size_t)blk * row;
				memcpy(dst, src + ((size_t)(o * sum + off + sp->rank * blk)) * row, len);
				dst += len;
				off += sec[j];
			}
		}
	}
	return TPF_OK;
}

/* The graph input or output named `name`, or NULL. */
static const struct tpf_value *io_value(const struct tpf_graph *g, int output, const char *name)
{
	size_t n = output ? g->n_outputs : g->n_inputs;
	for (size_t i = 0; i < n; i++) {
		const struct tpf_value *v = output ? g->outputs[i] : g->inputs[i];
		if (v && v->name && !strcmp(v->name, name))
			return v;
	}
	return NULL;
}

enum tpf_status tpf_rank_parts_cut(const struct tpf_model *m, int outputs,
				   struct tpf_host_tensor *t, size_t n, struct tpf_diag *d)
{
	for (size_t i = 0; i < n; i++) {
		struct tpf_rank_split sp;
		struct tpf_host_tensor part;
		const struct tpf_value *v;
		int64_t sum = 0;
		int found;
		enum tpf_status st;

		if (!t[i].name)
			continue;
		found = tpf_rank_split_find(m, outputs, t[i].name, &sp, d);
		if (found < 0)
			return TPF_ERR_INVALID;
		if (!found || sp.axis >= t[i].rank)
			continue;
		for (int j = 0; j < sp.n_sections; j++)
			sum += sp.sections[j];
		/* the rank's part already: as its model declares it, or a block of
		 * the full size */
		v = io_value(m->graph, outputs, t[i].name);
		if (v && v->type.kind == TPF_TYPE_TENSOR && v->type.shape.rank == t[i].rank &&
		    !v->type.shape.dims[sp.axis].param && v->type.shape.dims[sp.axis].value >= 0) {
			if (t[i].dims[sp.axis] == v->type.shape.dims[sp.axis].value)
				continue;
		} else if (sum && t[i].dims[sp.axis] == sum / sp.world) {
			continue;
		}
		if ((st = tpf_rank_part(&sp, &t[i], &part, d)))
			return st;
		tpf_host_tensor_release(&t[i]);
		t[i] = part;
	}
	return TPF_OK;
}
