/* SPDX-License-Identifier: MIT */
/*
 * ONNX export: a tpf_model becomes a serialized ModelProto.
 *
 * The protobuf-c message tree is built in a scratch arena and points at the
 * model's own strings and weight bytes (nothing large is copied), then packed
 * into one buffer.  Pieces the IR keeps as packed blobs (sequence/map types,
 * sparse tensors, training info, device configurations, ...) are emitted as
 * pre-encoded fields through protobuf-c's unknown-field list, so they come
 * out byte for byte as they came in.
 *
 * External data: on save to a file, tensors at or above a size threshold (and
 * every tensor that was loaded from external data) are written to one data
 * file next to the model at 64-byte aligned offsets.  Both files are written
 * under temporary names and renamed into place (ir/files.c), the data file
 * first, only when both are complete: a failed save leaves the old files, a
 * mapped file is never opened for writing, and a model can be saved over the
 * files it was loaded (and is still mapped) from.
 */
#define _GNU_SOURCE /* copy_file_range */
#include "tpf-ir.h"
#include "onnx-io-private.h"
#include "onnx.pb-c.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXTERNAL_ALIGN 64
#define PROTOBUF_LIMIT ((size_t)INT32_MAX)
/* Above this many initializer bytes a save without a threshold goes external. */
#define AUTO_EXTERNAL_TOTAL ((uint64_t)1900 * 1000 * 1000)
#define AUTO_EXTERNAL_THRESHOLD 1024
#define DEFAULT_IR_VERSION 10
#define DEFAULT_ONNX_OPSET 21

struct pending_write {
	const struct tpf_tensor *t;
	uint64_t offset;
};

struct export_ctx {
	struct tpf_arena *a; /* every message of the tree */
	struct tpf_diag *d;
	int allow_external;
	size_t threshold; /* 0: only tensors that were external already */
	const char *location;
	struct pending_write *writes;
	size_t n_writes, cap_writes;
	uint64_t ext_size;
	uint64_t inline_bytes; /* weight bytes that stay inside the protobuf */
	int warned_stale;
	const void *backing; /* the model's mappings, for file-to-file copies */
};

static enum tpf_status nomem(struct export_ctx *c)
{
	return tpf_diag_fail(c->d, TPF_ERR_NOMEM, "out of memory while exporting the model");
}

static void *arr(struct export_ctx *c, size_t count, size_t elem)
{
	size_t bytes;
	if (count == 0)
		return NULL;
	if (tpf_mul_size(count, elem, &bytes))
		return NULL;
	return tpf_arena_alloc(c->a, bytes);
}

/* Empty strings are left out of the message. */
static char *opt_str(const char *s)
{
	return s && *s ? (char *)s : NULL;
}

/* Appends a pre-encoded length-delimited field to `msg`. */
static int add_raw_field(struct export_ctx *c, ProtobufCMessage *msg, uint32_t field,
                         const struct tpf_blob *b)
{
	uint8_t pre[10];
	size_t np = 0;
	uint64_t v = b->size;
	do {
		pre[np] = (uint8_t)(v & 0x7f);
		v >>= 7;
		if (v)
			pre[np] |= 0x80;
		np++;
	} while (v);
	uint8_t *data = tpf_arena_alloc(c->a, np + b->size);
	if (!data)
		return -1;
	memcpy(data, pre, np);
	if (b->size)
		memcpy(data + np, b->data, b->size);
	ProtobufCMessageUnknownField *uf = arr(c, msg->n_unknown_fields + 1, sizeof(*uf));
	if (!uf)
		return -1;
	if (msg->n_unknown_fields)
		memcpy(uf, msg->unknown_fields, msg->n_unknown_fields * sizeof(*uf));
	uf[msg->n_unknown_fields].tag = field;
	uf[msg->n_unknown_fields].wire_type = PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED;
	uf[msg->n_unknown_fields].len = np + b->size;
	uf[msg->n_unknown_fields].data = data;
	msg->unknown_fields = uf;
	msg->n_unknown_fields++;
	return 0;
}

static int add_raw_fields(struct export_ctx *c, ProtobufCMessage *msg, uint32_t field,
                          const struct tpf_blob *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (add_raw_field(c, msg, field, &b[i]))
			return -1;
	return 0;
}

static int ex_props(struct export_ctx *c, size_t n, const char *const *keys,
                    const char *const *values, size_t *n_out, Onnx__StringStringEntryProto ***out)
{
	*n_out = 0;
	*out = NULL;
	if (!n)
		return 0;
	Onnx__StringStringEntryProto **e = arr(c, n, sizeof(*e));
	if (!e)
		return -1;
	for (size_t i = 0; i < n; i++) {
		e[i] = tpf_arena_alloc(c->a, sizeof(**e));
		if (!e[i])
			return -1;
		onnx__string_string_entry_proto__init(e[i]);
		e[i]->key = (char *)(keys[i] ? keys[i] : "");
		e[i]->value = (char *)(values[i] ? values[i] : "");
	}
	*out = e;
	*n_out = n;
	return 0;
}

static Onnx__StringStringEntryProto *entry(struct export_ctx *c, const char *k, const char *v)
{
	Onnx__StringStringEntryProto *e = tpf_arena_alloc(c->a, sizeof(*e));
	if (!e)
		return NULL;
	onnx__string_string_entry_proto__init(e);
	e->key = (char *)k;
	e->value = (char *)v;
	return e;
}

static char *fmt_u64(struct export_ctx *c, uint64_t v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return tpf_arena_strdup(c->a, buf);
}

/* ------------------------------------------------------------ tensors */

static enum tpf_status ex_tensor(struct export_ctx *c, const struct tpf_tensor *t, const char *name,
                                 const char *what, Onnx__TensorProto **out)
{
	Onnx__TensorProto *tp = tpf_arena_alloc(c->a, sizeof(*tp));
	if (!tp)
		return nomem(c);
	onnx__tensor_proto__init(tp);
	tp->name = (char *)(name ? name : t->name);
	tp->doc_string = (char *)t->doc_string;
	tp->has_data_type = 1;
	tp->data_type = (int32_t)t->dtype;
	if (t->rank < 0 || t->rank > TPF_MAX_RANK)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: invalid rank %d", what, t->rank);
	tp->n_dims = (size_t)t->rank;
	tp->dims = t->rank ? (int64_t *)t->dims : NULL;
	if (ex_props(c, t->n_metadata, t->metadata_keys, t->metadata_values, &tp->n_metadata_props,
	             &tp->metadata_props))
		return nomem(c);
	*out = tp;

	int64_t numel = tpf_tensor_numel(t);
	if (numel < 0)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: invalid shape", what);
	if (t->dtype == TPF_DTYPE_STRING) {
		if (t->n_strings != (uint64_t)numel)
			return tpf_diag_fail(
			    c->d, TPF_ERR_INVALID,
			    "%s: holds %zu strings but its shape has %lld elements", what,
			    t->n_strings, (long long)numel);
		tp->n_string_data = t->n_strings;
		tp->string_data = arr(c, t->n_strings, sizeof(*tp->string_data));
		if (t->n_strings && !tp->string_data)
			return nomem(c);
		for (size_t i = 0; i < t->n_strings; i++) {
			tp->string_data[i].data = (uint8_t *)t->strings[i];
			tp->string_data[i].len = t->string_lens
			                             ? t->string_lens[i]
			                             : (t->strings[i] ? strlen(t->strings[i]) : 0);
		}
		return TPF_OK;
	}
	if (!tpf_dtype_is_valid((int)t->dtype))
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: invalid element type %d", what,
		                     (int)t->dtype);
	size_t want;
	if (tpf_dtype_storage_bytes(t->dtype, (uint64_t)numel, &want))
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: size overflows", what);
	if (want != t->nbytes)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "%s: holds %zu bytes but %s of its shape needs %zu", what,
		                     t->nbytes, tpf_dtype_onnx_name(t->dtype), want);

	if (t->nbytes && !t->data) {
		if (!t->is_external || !t->ext_location)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: has no data", what);
		/* Loaded without its external data: the reference is all there is. */
		if (!c->warned_stale) {
			tpf_diag_add(c->d, TPF_SEV_WARNING,
			             "%s: external data was not loaded; the saved model refers to "
			             "'%s' as it was",
			             what, t->ext_location);
			c->warned_stale = 1;
		}
		tp->has_data_location = 1;
		tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
		tp->n_external_data = 3;
		tp->external_data = arr(c, 3, sizeof(*tp->external_data));
		if (!tp->external_data ||
		    !(tp->external_data[0] = entry(c, "location", t->ext_location)) ||
		    !(tp->external_data[1] =
		          entry(c, "offset", fmt_u64(c, (uint64_t)t->ext_offset))) ||
		    !(tp->external_data[2] = entry(c, "length", fmt_u64(c, t->nbytes))) ||
		    !tp->external_data[1]->value || !tp->external_data[2]->value)
			return nomem(c);
		return TPF_OK;
	}
	int external = c->allow_external && t->nbytes &&
	               (t->is_external || (c->threshold && t->nbytes >= c->threshold));
	if (external) {
		uint64_t off = (c->ext_size + EXTERNAL_ALIGN - 1) / EXTERNAL_ALIGN * EXTERNAL_ALIGN;
		if (c->n_writes == c->cap_writes) {
			size_t cap = c->cap_writes ? c->cap_writes * 2 : 64;
			struct pending_write *w = tpf_realloc(c->writes, cap * sizeof(*w));
			if (!w)
				return nomem(c);
			c->writes = w;
			c->cap_writes = cap;
		}
		c->writes[c->n_writes].t = t;
		c->writes[c->n_writes].offset = off;
		c->n_writes++;
		c->ext_size = off + t->nbytes;
		tp->has_data_location = 1;
		tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
		tp->n_external_data = 3;
		tp->external_data = arr(c, 3, sizeof(*tp->external_data));
		if (!tp->external_data ||
		    !(tp->external_data[0] = entry(c, "location", c->location)) ||
		    !(tp->external_data[1] = entry(c, "offset", fmt_u64(c, off))) ||
		    !(tp->external_data[2] = entry(c, "length", fmt_u64(c, t->nbytes))) ||
		    !tp->external_data[1]->value || !tp->external_data[2]->value)
			return nomem(c);
		return TPF_OK;
	}
	c->inline_bytes += t->nbytes;
	if (c->inline_bytes > PROTOBUF_LIMIT)
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT,
		                     "%s: the weights kept inside the protobuf pass its 2 GiB "
		                     "limit; save to a file with external data",
		                     what);
	tp->has_raw_data = 1;
	tp->raw_data.len = t->nbytes;
	tp->raw_data.data = (uint8_t *)t->data;
	return TPF_OK;
}

/* ------------------------------------------------------------ types */

/* The name a use of `v` must carry: an OUTER value is spelled like the value
 * it refers to. */
static const char *use_name(const struct tpf_value *v)
{
	while (v->kind == TPF_VALUE_OUTER && v->outer)
		v = v->outer;
	return v->name;
}

static enum tpf_status ex_value_info(struct export_ctx *c, const struct tpf_value *v,
                                     Onnx__ValueInfoProto **out)
{
	Onnx__ValueInfoProto *vi = tpf_arena_alloc(c->a, sizeof(*vi));
	if (!vi)
		return nomem(c);
	onnx__value_info_proto__init(vi);
	*out = vi;
	vi->name = (char *)use_name(v);
	vi->doc_string = (char *)v->doc_string;
	if (ex_props(c, v->n_metadata, v->metadata_keys, v->metadata_values, &vi->n_metadata_props,
	             &vi->metadata_props))
		return nomem(c);
	const struct tpf_type *ty = &v->type;
	if (ty->kind == TPF_TYPE_OPAQUE) {
		if (add_raw_field(c, &vi->base, 2, &ty->opaque))
			return nomem(c);
		return TPF_OK;
	}
	if (ty->kind == TPF_TYPE_NONE && !ty->denotation)
		return TPF_OK;
	Onnx__TypeProto *tp = tpf_arena_alloc(c->a, sizeof(*tp));
	if (!tp)
		return nomem(c);
	onnx__type_proto__init(tp);
	tp->denotation = (char *)ty->denotation;
	vi->type = tp;
	if (ty->kind != TPF_TYPE_TENSOR)
		return TPF_OK;
	Onnx__TypeProto__Tensor *tt = tpf_arena_alloc(c->a, sizeof(*tt));
	if (!tt)
		return nomem(c);
	onnx__type_proto__tensor__init(tt);
	tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
	tp->tensor_type = tt;
	tt->has_elem_type = 1;
	tt->elem_type = (int32_t)ty->dtype;
	if (ty->shape.rank < 0)
		return TPF_OK;
	if (ty->shape.rank > TPF_MAX_RANK)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "value '%s': invalid rank %d", v->name,
		                     ty->shape.rank);
	Onnx__TensorShapeProto *sh = tpf_arena_alloc(c->a, sizeof(*sh));
	if (!sh)
		return nomem(c);
	onnx__tensor_shape_proto__init(sh);
	tt->shape = sh;
	size_t rank = (size_t)ty->shape.rank;
	sh->n_dim = rank;
	sh->dim = arr(c, rank, sizeof(*sh->dim));
	if (rank && !sh->dim)
		return nomem(c);
	for (size_t i = 0; i < rank; i++) {
		const struct tpf_dim *dm = &ty->shape.dims[i];
		Onnx__TensorShapeProto__Dimension *o = tpf_arena_alloc(c->a, sizeof(*o));
		if (!o)
			return nomem(c);
		onnx__tensor_shape_proto__dimension__init(o);
		if (dm->param) {
			o->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
			o->dim_param = (char *)dm->param;
		} else if (dm->value >= 0) {
			o->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
			o->dim_value = dm->value;
		}
		o->denotation = (char *)dm->denotation;
		sh->dim[i] = o;
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ attributes */

static enum tpf_status ex_graph(struct export_ctx *c, const struct tpf_graph *g,
                                const char *fallback_name, Onnx__GraphProto **out);

static enum tpf_status ex_attr(struct export_ctx *c, const struct tpf_attr *a, const char *where,
                               Onnx__AttributeProto **out)
{
	Onnx__AttributeProto *ap = tpf_arena_alloc(c->a, sizeof(*ap));
	if (!ap)
		return nomem(c);
	onnx__attribute_proto__init(ap);
	*out = ap;
	char what[512];
	snprintf(what, sizeof(what), "%s: attribute '%s'", where, a->name ? a->name : "");
	ap->name = (char *)(a->name ? a->name : "");
	ap->ref_attr_name = (char *)a->ref_attr_name;
	ap->doc_string = (char *)a->doc_string;
	if (a->kind != TPF_ATTR_UNDEFINED) {
		ap->has_type = 1;
		ap->type = (Onnx__AttributeProto__AttributeType)a->kind;
	}
	if (a->ref_attr_name)
		return TPF_OK; /* the value comes from the caller */
	enum tpf_status st;
	switch (a->kind) {
	case TPF_ATTR_UNDEFINED:
		break;
	case TPF_ATTR_FLOAT:
		ap->has_f = 1;
		ap->f = a->f;
		break;
	case TPF_ATTR_INT:
		ap->has_i = 1;
		ap->i = a->i;
		break;
	case TPF_ATTR_STRING:
		ap->has_s = 1;
		ap->s.data = (uint8_t *)a->s;
		ap->s.len = a->s ? (a->s_len ? a->s_len : strlen(a->s)) : 0;
		break;
	case TPF_ATTR_TENSOR:
		if (a->t && (st = ex_tensor(c, a->t, NULL, what, &ap->t)))
			return st;
		break;
	case TPF_ATTR_GRAPH:
		if (a->g && (st = ex_graph(c, a->g, a->name, &ap->g)))
			return st;
		break;
	case TPF_ATTR_SPARSE_TENSOR:
		if (a->blob.data && add_raw_field(c, &ap->base, 22, &a->blob))
			return nomem(c);
		break;
	case TPF_ATTR_TYPE_PROTO:
		if (a->blob.data && add_raw_field(c, &ap->base, 14, &a->blob))
			return nomem(c);
		break;
	case TPF_ATTR_FLOATS:
		ap->n_floats = a->n;
		ap->floats = a->floats;
		break;
	case TPF_ATTR_INTS:
		ap->n_ints = a->n;
		ap->ints = a->ints;
		break;
	case TPF_ATTR_STRINGS:
		ap->n_strings = a->n;
		ap->strings = arr(c, a->n, sizeof(*ap->strings));
		if (a->n && !ap->strings)
			return nomem(c);
		for (size_t i = 0; i < a->n; i++) {
			ap->strings[i].data = (uint8_t *)a->strings[i];
			ap->strings[i].len =
			    a->string_lens ? a->string_lens[i] : strlen(a->strings[i]);
		}
		break;
	case TPF_ATTR_TENSORS:
		ap->n_tensors = a->n;
		ap->tensors = arr(c, a->n, sizeof(*ap->tensors));
		if (a->n && !ap->tensors)
			return nomem(c);
		for (size_t i = 0; i < a->n; i++)
			if ((st = ex_tensor(c, a->tensors[i], NULL, what, &ap->tensors[i])))
				return st;
		break;
	case TPF_ATTR_GRAPHS:
		ap->n_graphs = a->n;
		ap->graphs = arr(c, a->n, sizeof(*ap->graphs));
		if (a->n && !ap->graphs)
			return nomem(c);
		for (size_t i = 0; i < a->n; i++)
			if ((st = ex_graph(c, a->graphs[i], a->name, &ap->graphs[i])))
				return st;
		break;
	case TPF_ATTR_SPARSE_TENSORS:
		if (add_raw_fields(c, &ap->base, 23, a->blobs, a->n))
			return nomem(c);
		break;
	case TPF_ATTR_TYPE_PROTOS:
		if (add_raw_fields(c, &ap->base, 15, a->blobs, a->n))
			return nomem(c);
		break;
	default:
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: unknown kind %d", what,
		                     (int)a->kind);
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ nodes, graphs */

static enum tpf_status ex_node(struct export_ctx *c, const struct tpf_node *n,
                               Onnx__NodeProto **out)
{
	Onnx__NodeProto *np = tpf_arena_alloc(c->a, sizeof(*np));
	if (!np)
		return nomem(c);
	onnx__node_proto__init(np);
	*out = np;
	char desc[320];
	tpf_node_describe(n, desc, sizeof(desc));
	np->name = opt_str(n->name);
	const char *op_type = n->op_type;
	const char *domain = n->domain;
	if (!op_type || !*op_type) {
		const struct tpf_op_info *info = tpf_op_info(n->op);
		op_type = info ? info->name : NULL;
		if (!domain && info)
			domain = info->domain;
	}
	if (!op_type || !*op_type)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: has no op_type", desc);
	np->op_type = (char *)op_type;
	np->domain = opt_str(domain);
	np->overload = opt_str(n->overload);
	np->doc_string = (char *)n->doc_string;
	np->n_input = n->n_inputs;
	np->input = arr(c, n->n_inputs, sizeof(*np->input));
	np->n_output = n->n_outputs;
	np->output = arr(c, n->n_outputs, sizeof(*np->output));
	if ((n->n_inputs && !np->input) || (n->n_outputs && !np->output))
		return nomem(c);
	for (size_t i = 0; i < n->n_inputs; i++)
		np->input[i] = (char *)(n->inputs[i] ? use_name(n->inputs[i]) : "");
	for (size_t i = 0; i < n->n_outputs; i++)
		np->output[i] = (char *)(n->outputs[i] ? n->outputs[i]->name : "");
	np->n_attribute = n->n_attrs;
	np->attribute = arr(c, n->n_attrs, sizeof(*np->attribute));
	if (n->n_attrs && !np->attribute)
		return nomem(c);
	for (size_t i = 0; i < n->n_attrs; i++) {
		enum tpf_status st = ex_attr(c, &n->attrs[i], desc, &np->attribute[i]);
		if (st)
			return st;
	}
	if (ex_props(c, n->n_metadata, n->metadata_keys, n->metadata_values, &np->n_metadata_props,
	             &np->metadata_props) ||
	    add_raw_fields(c, &np->base, 10, n->device_configurations, n->n_device_configurations))
		return nomem(c);
	return TPF_OK;
}

static int value_is_output(const struct tpf_graph *g, const struct tpf_value *v)
{
	for (size_t i = 0; i < g->n_outputs; i++)
		if (g->outputs[i] == v)
			return 1;
	return 0;
}

/* Whether `v` still belongs to its graph (not erased). */
static int value_live(const struct tpf_graph *g, const struct tpf_value *v)
{
	return v && v->id < g->n_values && g->values[v->id] == v;
}

static enum tpf_status ex_nodes(struct export_ctx *c, const struct tpf_graph *g, size_t *n_out,
                                Onnx__NodeProto ***out)
{
	size_t count = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next)
		if (!n->erased)
			count++;
	*n_out = count;
	*out = arr(c, count, sizeof(**out));
	if (count && !*out)
		return nomem(c);
	size_t i = 0;
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (n->erased)
			continue;
		enum tpf_status st = ex_node(c, n, &(*out)[i++]);
		if (st)
			return st;
	}
	return TPF_OK;
}

/* value_info entries: typed or annotated values that are neither inputs nor
 * outputs, in creation order, then detached entries. */
static enum tpf_status ex_value_infos(struct export_ctx *c, const struct tpf_graph *g,
                                      size_t *n_out, Onnx__ValueInfoProto ***out)
{
	size_t cap = g->n_values + g->n_value_infos, n = 0;
	Onnx__ValueInfoProto **list = arr(c, cap, sizeof(*list));
	if (cap && !list)
		return nomem(c);
	enum tpf_status st;
	for (size_t i = 0; i < g->n_values; i++) {
		const struct tpf_value *v = g->values[i];
		if (!v || v->is_graph_input)
			continue;
		if (!v->has_value_info && v->type.kind == TPF_TYPE_NONE)
			continue;
		int keep;
		switch (v->kind) {
		case TPF_VALUE_NODE_OUTPUT:
			keep = v->producer && !v->producer->erased;
			break;
		case TPF_VALUE_INITIALIZER:
		case TPF_VALUE_OUTER:
			keep = v->has_value_info;
			break;
		default:
			keep = 0;
			break;
		}
		if (!keep || value_is_output(g, v))
			continue;
		if ((st = ex_value_info(c, v, &list[n++])))
			return st;
	}
	for (size_t i = 0; i < g->n_value_infos; i++) {
		const struct tpf_value *v = g->value_infos[i];
		if (!v || tpf_graph_find_value(g, v->name))
			continue;
		if ((st = ex_value_info(c, v, &list[n++])))
			return st;
	}
	*n_out = n;
	*out = list;
	return TPF_OK;
}

static enum tpf_status ex_graph(struct export_ctx *c, const struct tpf_graph *g,
                                const char *fallback_name, Onnx__GraphProto **out)
{
	Onnx__GraphProto *gp = tpf_arena_alloc(c->a, sizeof(*gp));
	if (!gp)
		return nomem(c);
	onnx__graph_proto__init(gp);
	*out = gp;
	enum tpf_status st;
	gp->name = (char *)(g->name && *g->name ? g->name : fallback_name);
	gp->doc_string = (char *)g->doc_string;
	if (ex_props(c, g->n_metadata, g->metadata_keys, g->metadata_values, &gp->n_metadata_props,
	             &gp->metadata_props))
		return nomem(c);
	if ((st = ex_nodes(c, g, &gp->n_node, &gp->node)))
		return st;

	gp->initializer = arr(c, g->n_initializers, sizeof(*gp->initializer));
	if (g->n_initializers && !gp->initializer)
		return nomem(c);
	for (size_t i = 0; i < g->n_initializers; i++) {
		const struct tpf_value *v = g->initializers[i];
		if (!value_live(g, v) || !v->init)
			continue;
		char what[320];
		snprintf(what, sizeof(what), "initializer '%s'", v->name);
		if ((st =
		         ex_tensor(c, v->init, v->name, what, &gp->initializer[gp->n_initializer])))
			return st;
		gp->n_initializer++;
	}

	gp->input = arr(c, g->n_inputs, sizeof(*gp->input));
	if (g->n_inputs && !gp->input)
		return nomem(c);
	for (size_t i = 0; i < g->n_inputs; i++) {
		const struct tpf_value *v = g->inputs[i];
		if (!value_live(g, v))
			continue;
		if ((st = ex_value_info(c, v, &gp->input[gp->n_input++])))
			return st;
	}
	gp->output = arr(c, g->n_outputs, sizeof(*gp->output));
	if (g->n_outputs && !gp->output)
		return nomem(c);
	for (size_t i = 0; i < g->n_outputs; i++) {
		const struct tpf_value *v = g->outputs[i];
		if (!v)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "graph '%s': output %zu is missing", gp->name, i);
		if ((st = ex_value_info(c, v, &gp->output[gp->n_output++])))
			return st;
	}
	if ((st = ex_value_infos(c, g, &gp->n_value_info, &gp->value_info)))
		return st;
	if (add_raw_fields(c, &gp->base, 14, g->quantization_annotations,
	                   g->n_quantization_annotations) ||
	    add_raw_fields(c, &gp->base, 15, g->sparse_initializers, g->n_sparse_initializers))
		return nomem(c);
	return TPF_OK;
}

/* ------------------------------------------------------------ model */

static enum tpf_status ex_opsets(struct export_ctx *c, const struct tpf_opset *ops, size_t n,
                                 size_t *n_out, Onnx__OperatorSetIdProto ***out)
{
	*n_out = n;
	*out = arr(c, n, sizeof(**out));
	if (n && !*out)
		return nomem(c);
	for (size_t i = 0; i < n; i++) {
		Onnx__OperatorSetIdProto *o = tpf_arena_alloc(c->a, sizeof(*o));
		if (!o)
			return nomem(c);
		onnx__operator_set_id_proto__init(o);
		o->domain = (char *)(ops[i].domain ? ops[i].domain : "");
		o->has_version = 1;
		o->version = ops[i].version;
		(*out)[i] = o;
	}
	return TPF_OK;
}

static enum tpf_status ex_function(struct export_ctx *c, const struct tpf_function *f,
                                   Onnx__FunctionProto **out)
{
	Onnx__FunctionProto *fp = tpf_arena_alloc(c->a, sizeof(*fp));
	if (!fp)
		return nomem(c);
	onnx__function_proto__init(fp);
	*out = fp;
	enum tpf_status st;
	const struct tpf_graph *g = f->body;
	char where[320];
	snprintf(where, sizeof(where), "function '%s'", f->name ? f->name : "");
	if (!g)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: has no body", where);
	fp->name = (char *)(f->name ? f->name : "");
	fp->domain = (char *)(f->domain ? f->domain : "");
	fp->overload = opt_str(f->overload);
	fp->doc_string = (char *)f->doc_string;
	fp->n_input = g->n_inputs;
	fp->input = arr(c, g->n_inputs, sizeof(*fp->input));
	fp->n_output = g->n_outputs;
	fp->output = arr(c, g->n_outputs, sizeof(*fp->output));
	if ((g->n_inputs && !fp->input) || (g->n_outputs && !fp->output))
		return nomem(c);
	for (size_t i = 0; i < g->n_inputs; i++)
		fp->input[i] = (char *)g->inputs[i]->name;
	for (size_t i = 0; i < g->n_outputs; i++)
		fp->output[i] = (char *)(g->outputs[i] ? use_name(g->outputs[i]) : "");
	fp->n_attribute = f->n_attribute_names;
	fp->attribute = (char **)f->attribute_names;
	fp->n_attribute_proto = f->n_attribute_protos;
	fp->attribute_proto = arr(c, f->n_attribute_protos, sizeof(*fp->attribute_proto));
	if (f->n_attribute_protos && !fp->attribute_proto)
		return nomem(c);
	for (size_t i = 0; i < f->n_attribute_protos; i++)
		if ((st = ex_attr(c, &f->attribute_protos[i], where, &fp->attribute_proto[i])))
			return st;
	if ((st = ex_nodes(c, g, &fp->n_node, &fp->node)))
		return st;
	if ((st = ex_opsets(c, f->opsets, f->n_opsets, &fp->n_opset_import, &fp->opset_import)))
		return st;
	if ((st = ex_value_infos(c, g, &fp->n_value_info, &fp->value_info)))
		return st;
	if (ex_props(c, f->n_metadata, f->metadata_keys, f->metadata_values, &fp->n_metadata_props,
	             &fp->metadata_props))
		return nomem(c);
	return TPF_OK;
}

/* Domains used by nodes (recursively), for opset imports a builder forgot. */
struct domain_set {
	const char **names;
	size_t n, cap;
};

static int domain_add(struct domain_set *s, const char *dom)
{
	if (!dom || strcmp(dom, "ai.onnx") == 0)
		dom = "";
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->names[i], dom) == 0)
			return 0;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		const char **p = tpf_realloc(s->names, cap * sizeof(*p));
		if (!p)
			return -1;
		s->names = p;
		s->cap = cap;
	}
	s->names[s->n++] = dom;
	return 0;
}

static int collect_domains(const struct tpf_graph *g, struct domain_set *s, int depth)
{
	if (depth > 200)
		return 0;
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		if (n->erased)
			continue;
		if (domain_add(s, n->domain))
			return -1;
		for (size_t i = 0; i < n->n_attrs; i++) {
			const struct tpf_attr *a = &n->attrs[i];
			if (a->kind == TPF_ATTR_GRAPH && a->g &&
			    collect_domains(a->g, s, depth + 1))
				return -1;
			if (a->kind == TPF_ATTR_GRAPHS)
				for (size_t k = 0; k < a->n; k++)
					if (a->graphs[k] &&
					    collect_domains(a->graphs[k], s, depth + 1))
						return -1;
		}
	}
	return 0;
}

static enum tpf_status ex_model(struct export_ctx *c, const struct tpf_model *m,
                                Onnx__ModelProto **out)
{
	Onnx__ModelProto *mp = tpf_arena_alloc(c->a, sizeof(*mp));
	if (!mp)
		return nomem(c);
	onnx__model_proto__init(mp);
	*out = mp;
	enum tpf_status st;
	mp->has_ir_version = 1;
	mp->ir_version = m->ir_version > 0 ? m->ir_version : DEFAULT_IR_VERSION;
	mp->producer_name = (char *)m->producer_name;
	mp->producer_version = (char *)m->producer_version;
	mp->domain = (char *)m->domain;
	if (m->model_version) {
		mp->has_model_version = 1;
		mp->model_version = m->model_version;
	}
	mp->doc_string = (char *)m->doc_string;
	if (ex_props(c, m->n_metadata, m->metadata_keys, m->metadata_values, &mp->n_metadata_props,
	             &mp->metadata_props))
		return nomem(c);

	/* opset imports, plus any domain a node uses without an import */
	struct domain_set used = {0};
	int fail = collect_domains(m->graph, &used, 0);
	for (size_t i = 0; i < m->n_functions && !fail; i++)
		if (m->functions[i].body)
			fail = collect_domains(m->functions[i].body, &used, 0);
	if (fail) {
		tpf_free(used.names);
		return nomem(c);
	}
	size_t n_extra = 0;
	for (size_t i = 0; i < used.n; i++)
		if (tpf_model_opset(m, used.names[i]) < 0)
			used.names[n_extra++] = used.names[i];
	st = ex_opsets(c, m->opsets, m->n_opsets, &mp->n_opset_import, &mp->opset_import);
	if (!st && n_extra) {
		Onnx__OperatorSetIdProto **all = arr(c, mp->n_opset_import + n_extra, sizeof(*all));
		if (!all)
			st = nomem(c);
		for (size_t i = 0; !st && i < n_extra; i++) {
			Onnx__OperatorSetIdProto *o = tpf_arena_alloc(c->a, sizeof(*o));
			if (!o) {
				st = nomem(c);
				break;
			}
			onnx__operator_set_id_proto__init(o);
			o->domain = tpf_arena_strdup(c->a, used.names[i]);
			o->has_version = 1;
			o->version = *used.names[i] ? 1 : DEFAULT_ONNX_OPSET;
			if (!o->domain) {
				st = nomem(c);
				break;
			}
			all[mp->n_opset_import + i] = o;
		}
		if (!st) {
			if (mp->n_opset_import)
				memcpy(all, mp->opset_import, mp->n_opset_import * sizeof(*all));
			mp->opset_import = all;
			mp->n_opset_import += n_extra;
		}
	}
	tpf_free(used.names);
	if (st)
		return st;

	if (!m->graph)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "the model has no graph");
	if ((st = ex_graph(c, m->graph, "main_graph", &mp->graph)))
		return st;
	mp->n_functions = m->n_functions;
	mp->functions = arr(c, m->n_functions, sizeof(*mp->functions));
	if (m->n_functions && !mp->functions)
		return nomem(c);
	for (size_t i = 0; i < m->n_functions; i++)
		if ((st = ex_function(c, &m->functions[i], &mp->functions[i])))
			return st;
	if (add_raw_fields(c, &mp->base, 20, m->training_info, m->n_training_info) ||
	    add_raw_fields(c, &mp->base, 26, m->configuration, m->n_configuration))
		return nomem(c);
	return TPF_OK;
}

/* Packs the tree into a tpf_malloc'ed buffer. */
static enum tpf_status pack_model(struct export_ctx *c, Onnx__ModelProto *mp, void **data,
                                  size_t *size)
{
	size_t n = onnx__model_proto__get_packed_size(mp);
	if (n > PROTOBUF_LIMIT)
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT,
		                     "the serialized model would be %zu bytes, over the 2 GiB "
		                     "protobuf limit; save to a file with external data",
		                     n);
	uint8_t *buf = tpf_malloc(n ? n : 1);
	if (!buf)
		return nomem(c);
	size_t w = onnx__model_proto__pack(mp, buf);
	if (w != n) {
		tpf_free(buf);
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "internal error: packed %zu of %zu bytes", w, n);
	}
	*data = buf;
	*size = n;
	return TPF_OK;
}

/* Total bytes of all tensors in initializers and attributes, recursively. */
static uint64_t graph_tensor_bytes(const struct tpf_graph *g, int depth)
{
	uint64_t total = 0;
	if (depth > 200)
		return 0;
	for (size_t i = 0; i < g->n_initializers; i++)
		if (g->initializers[i] && g->initializers[i]->init)
			total += g->initializers[i]->init->nbytes;
	for (const struct tpf_node *n = g->first; n; n = n->next) {
		for (size_t i = 0; i < n->n_attrs; i++) {
			const struct tpf_attr *a = &n->attrs[i];
			if (a->kind == TPF_ATTR_TENSOR && a->t)
				total += a->t->nbytes;
			else if (a->kind == TPF_ATTR_TENSORS)
				for (size_t k = 0; k < a->n; k++)
					total += a->tensors[k] ? a->tensors[k]->nbytes : 0;
			else if (a->kind == TPF_ATTR_GRAPH && a->g)
				total += graph_tensor_bytes(a->g, depth + 1);
			else if (a->kind == TPF_ATTR_GRAPHS)
				for (size_t k = 0; k < a->n; k++)
					if (a->graphs[k])
						total +=
						    graph_tensor_bytes(a->graphs[k], depth + 1);
		}
	}
	return total;
}

enum tpf_status tpf_model_save_memory(const struct tpf_model *m, void **data, size_t *size,
                                      struct tpf_diag *d)
{
	if (!m || !data || !size)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_model_save_memory: missing argument");
	*data = NULL;
	*size = 0;
	struct export_ctx c = {.d = d};
	c.a = tpf_arena_create();
	if (!c.a)
		return nomem(&c);
	Onnx__ModelProto *mp;
	enum tpf_status st = ex_model(&c, m, &mp);
	if (!st)
		st = pack_model(&c, mp, data, size);
	tpf_free(c.writes);
	tpf_arena_free(c.a);
	return st;
}

static enum tpf_status write_all(int fd, const void *p, size_t n, const char *path,
                                 struct tpf_diag *d)
{
	const uint8_t *b = p;
	while (n) {
		size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
		ssize_t w = write(fd, b, chunk);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return tpf_diag_fail(d, TPF_ERR_IO, "%s: write failed: %s", path,
			                     strerror(errno));
		}
		b += w;
		n -= (size_t)w;
	}
	return TPF_OK;
}

/* Copies n bytes of the file `src` at `offset` to the current position of
 * `fd` inside the kernel.  0 when done; -1 when the caller should write
 * from memory instead (nothing was written then). */
static int copy_from_file(int fd, const char *src, uint64_t offset, size_t n, int *src_fd,
                          const char **src_path)
{
	if (!*src_path || strcmp(*src_path, src) != 0) {
		if (*src_fd >= 0)
			close(*src_fd);
		*src_path = NULL;
		*src_fd = open(src, O_RDONLY | O_CLOEXEC);
		if (*src_fd < 0)
			return -1;
		*src_path = src;
	}
	loff_t in = (loff_t)offset;
	size_t done = 0;
	while (done < n) {
		ssize_t r = copy_file_range(*src_fd, &in, fd, NULL, n - done, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (done && lseek(fd, -(off_t)done, SEEK_CUR) < 0)
				return -2;
			return -1;
		}
		done += (size_t)r;
	}
	return 0;
}

static enum tpf_status write_external(struct export_ctx *c, const char *path, int fd)
{
	static const uint8_t zeros[EXTERNAL_ALIGN];
	enum tpf_status st = TPF_OK;
	uint64_t pos = 0;
	int src_fd = -1;
	const char *src_path = NULL;
	for (size_t i = 0; i < c->n_writes && !st; i++) {
		const struct pending_write *w = &c->writes[i];
		if (w->offset > pos)
			st = write_all(fd, zeros, (size_t)(w->offset - pos), path, c->d);
		if (st)
			break;
		const char *src;
		uint64_t off;
		int r = -1;
		if (!tpf_onnx_backing_locate(c->backing, w->t->data, w->t->nbytes, &src, &off))
			r = copy_from_file(fd, src, off, w->t->nbytes, &src_fd, &src_path);
		if (r == -2)
			st = tpf_diag_fail(c->d, TPF_ERR_IO, "%s: seek failed: %s", path,
			                   strerror(errno));
		else if (r != 0)
			st = write_all(fd, w->t->data, w->t->nbytes, path, c->d);
		pos = w->offset + w->t->nbytes;
	}
	if (src_fd >= 0)
		close(src_fd);
	return st;
}

enum tpf_status tpf_model_save_file(const struct tpf_model *m, const char *path,
                                    const struct tpf_save_options *opt, struct tpf_diag *d)
{
	if (!m || !path || !*path)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_model_save_file: missing argument");
	struct export_ctx c = {.d = d, .allow_external = 1, .backing = m ? m->backing : NULL};
	enum tpf_status st = TPF_OK;
	char *dir = NULL, *location = NULL, *ext_path = NULL;
	void *buf = NULL;
	size_t size = 0;

	c.a = tpf_arena_create();
	dir = tpf_path_dirname(path);
	if (!c.a || !dir) {
		st = nomem(&c);
		goto out_free;
	}
	const char *base = tpf_path_basename(path);
	if (opt && opt->external_file && *opt->external_file) {
		location = tpf_strdup(opt->external_file);
	} else {
		size_t len = strlen(base) + 6;
		location = tpf_malloc(len);
		if (location)
			snprintf(location, len, "%s.data", base);
	}
	if (!location) {
		st = nomem(&c);
		goto out_free;
	}
	const char *why = tpf_onnx_location_problem(location);
	if (why) {
		st = tpf_diag_fail(d, TPF_ERR_INVALID, "external data file name '%s' %s", location,
		                   why);
		goto out_free;
	}
	c.location = location;
	c.threshold = opt ? opt->external_threshold : 0;
	if (!c.threshold) {
		uint64_t total = graph_tensor_bytes(m->graph, 0);
		for (size_t i = 0; i < m->n_functions; i++)
			if (m->functions[i].body)
				total += graph_tensor_bytes(m->functions[i].body, 0);
		if (total > AUTO_EXTERNAL_TOTAL)
			c.threshold = AUTO_EXTERNAL_THRESHOLD;
	}

	Onnx__ModelProto *mp;
	if ((st = ex_model(&c, m, &mp)))
		goto out_free;
	if ((st = pack_model(&c, mp, &buf, &size)))
		goto out_free;

	size_t elen = strlen(dir) + strlen(location) + 2;
	ext_path = tpf_malloc(elen);
	if (!ext_path) {
		st = nomem(&c);
		goto out_free;
	}
	snprintf(ext_path, elen, "%s/%s", dir, location);
	/* files[0] the data file (when there is one), then the model: renamed
	 * into place in that order, only once both are complete */
	struct tpf_out_file files[2];
	size_t nf = 0;
	if (c.n_writes) {
		if (strcmp(tpf_path_basename(ext_path), base) == 0 &&
		    strchr(location, '/') == NULL) {
			st = tpf_diag_fail(
			    d, TPF_ERR_INVALID,
			    "external data file '%s' would overwrite the model itself", location);
			goto out_free;
		}
		if ((st = tpf_out_file_open(&files[0], ext_path, d)))
			goto out_free;
		nf = 1;
	}
	if ((st = tpf_out_file_open(&files[nf], path, d)))
		goto out_discard;
	nf++;
	if (c.n_writes && (st = write_external(&c, ext_path, files[0].fd)))
		goto out_discard;
	if ((st = write_all(files[nf - 1].fd, buf, size, path, d)))
		goto out_discard;
	if (opt && opt->defer && opt->n_defer) {
		for (size_t i = 0; i < nf && !st; i++)
			st = tpf_out_file_close(&files[i], d);
		if (st)
			goto out_discard;
		for (size_t i = 0; i < nf; i++)
			opt->defer[i] = files[i];
		*opt->n_defer = nf;
	} else {
		st = tpf_out_files_commit(files, nf, d);
	}
	goto out_free;

out_discard:
	for (size_t i = 0; i < nf; i++)
		tpf_out_file_discard(&files[i]);
out_free:
	tpf_free(buf);
	tpf_free(ext_path);
	tpf_free(location);
	tpf_free(dir);
	tpf_free(c.writes);
	tpf_arena_free(c.a);
	return st;
}
