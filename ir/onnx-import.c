/* SPDX-License-Identifier: MIT */
/*
 * ONNX import: a serialized ModelProto becomes a tpf_model.
 *
 * The bytes are first walked once without decoding (structure, lengths and
 * nesting depth, so malformed input gets a precise message and the decoder
 * never recurses without bound), then unpacked by protobuf-c and converted.
 *
 * Graphs are built in three sweeps over the whole tree of (sub)graphs:
 *   1. define: initializers, inputs and every node with its outputs, so every
 *      name a graph defines exists before any reference is resolved;
 *   2. link: node inputs and graph outputs are resolved, locally first, then
 *      in enclosing graphs through TPF_VALUE_OUTER values that the owning node
 *      records as implicit inputs;
 *   3. value_info: types of intermediate values.
 * References to names defined later in the node list are therefore accepted;
 * ordering is judged by the verifier.
 *
 * Weight bytes are never copied twice: raw_data buffers are taken over from
 * the decoded message, external data is mapped, typed fields are converted
 * once.  All of that lives in model->backing, released by tpf_model_free.
 *
 * Tensors, external data and the backing are in onnx-import-tensor.c.
 */
#include "onnx-import-private.h"
#include "onnx-io-private.h"
#include "graph-private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX importer converts typed tensor data assuming a little-endian host"
#endif

#define WIRE_MAX_DEPTH 100
#define DEFAULT_MAX_MODEL_BYTES ((size_t)4 << 30)

/* ------------------------------------------------------------ allocator */

static void *pb_alloc(void *data, size_t size)
{
	struct tpf_pb_alloc *al = data;
	void *p = tpf_malloc(size ? size : 1);
	if (!p)
		al->failed = 1;
	return p;
}

static void pb_free(void *data, void *p)
{
	(void)data;
	tpf_free(p);
}

void tpf_pb_alloc_init(struct tpf_pb_alloc *al)
{
	al->base.alloc = pb_alloc;
	al->base.free = pb_free;
	al->base.allocator_data = al;
	al->failed = 0;
}

/* ------------------------------------------------------------ context */

enum tpf_status onnx_nomem(struct import_ctx *c)
{
	return tpf_diag_fail(c->d, TPF_ERR_NOMEM, "out of memory while importing the model");
}

void *onnx_arena_array(struct tpf_arena *a, size_t count, size_t elem)
{
	size_t bytes;
	if (count == 0)
		return NULL;
	if (tpf_mul_size(count, elem, &bytes))
		return NULL;
	return tpf_arena_alloc(a, bytes);
}

/* Copies an optional string; NULL stays NULL.  -1 on OOM. */
int onnx_sdup(struct tpf_arena *a, const char *s, const char **out)
{
	*out = NULL;
	if (!s)
		return 0;
	*out = tpf_arena_strdup(a, s);
	return *out ? 0 : -1;
}

int onnx_import_props(struct tpf_arena *a, Onnx__StringStringEntryProto *const *e, size_t n,
                      size_t *n_out, const char ***keys, const char ***values)
{
	*n_out = 0;
	*keys = *values = NULL;
	if (!n)
		return 0;
	const char **k = onnx_arena_array(a, n, sizeof(*k));
	const char **v = onnx_arena_array(a, n, sizeof(*v));
	if (!k || !v)
		return -1;
	for (size_t i = 0; i < n; i++) {
		k[i] = tpf_arena_strdup(a, e[i]->key ? e[i]->key : "");
		v[i] = tpf_arena_strdup(a, e[i]->value ? e[i]->value : "");
		if (!k[i] || !v[i])
			return -1;
	}
	*keys = k;
	*values = v;
	*n_out = n;
	return 0;
}

static int pack_blob(struct tpf_arena *a, const ProtobufCMessage *msg, struct tpf_blob *b)
{
	size_t size = protobuf_c_message_get_packed_size(msg);
	uint8_t *buf = tpf_arena_alloc(a, size ? size : 1);
	if (!buf)
		return -1;
	b->size = protobuf_c_message_pack(msg, buf);
	b->data = buf;
	return 0;
}

static int pack_blobs(struct tpf_arena *a, void *const *msgs, size_t n, struct tpf_blob **out,
                      size_t *n_out)
{
	*out = NULL;
	*n_out = 0;
	if (!n)
		return 0;
	struct tpf_blob *b = onnx_arena_array(a, n, sizeof(*b));
	if (!b)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (pack_blob(a, msgs[i], &b[i]))
			return -1;
	*out = b;
	*n_out = n;
	return 0;
}

static const char *np_describe(const Onnx__NodeProto *np, char *buf, size_t size)
{
	const char *name = np->name ? np->name : "";
	const char *op = np->op_type ? np->op_type : "";
	if (np->domain && *np->domain && strcmp(np->domain, "ai.onnx") != 0)
		snprintf(buf, size, "node '%s' (%s::%s)", name, np->domain, op);
	else
		snprintf(buf, size, "node '%s' (%s)", name, op);
	return buf;
}

/* ------------------------------------------------------------ wire check */

static int read_varint(const uint8_t *p, size_t len, size_t *pos, uint64_t *out)
{
	uint64_t v = 0;
	for (unsigned shift = 0; shift < 70; shift += 7) {
		if (*pos >= len)
			return -1;
		uint8_t b = p[(*pos)++];
		if (shift == 63 && (b & 0x7e))
			return -1;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/* Walks the protobuf structure of `desc` in p[0..len), descending into the
 * message-typed fields that `desc` knows.  `base` is the offset of p in the
 * whole input, for messages. */
static enum tpf_status wire_check(const ProtobufCMessageDescriptor *desc, const uint8_t *p,
                                  size_t len, size_t base, int depth, const char *src,
                                  struct tpf_diag *d)
{
	if (depth > WIRE_MAX_DEPTH)
		return tpf_diag_fail(d, TPF_ERR_LIMIT,
		                     "%s: messages nested deeper than %d levels at byte %zu", src,
		                     WIRE_MAX_DEPTH, base);
	size_t pos = 0;
	while (pos < len) {
		size_t start = pos;
		uint64_t key, v;
		if (read_varint(p, len, &pos, &key))
			return tpf_diag_fail(
			    d, TPF_ERR_PARSE,
			    "%s: not an ONNX model: truncated or malformed field tag at byte %zu",
			    src, base + start);
		uint64_t field = key >> 3;
		unsigned wire = (unsigned)(key & 7);
		const ProtobufCFieldDescriptor *f =
		    field <= 0x1fffffff
		        ? protobuf_c_message_descriptor_get_field(desc, (unsigned)field)
		        : NULL;
		const char *fname = f ? f->name : "?";
		if (field == 0 || field > 0x1fffffff)
			return tpf_diag_fail(
			    d, TPF_ERR_PARSE,
			    "%s: not an ONNX model: invalid field number at byte %zu", src,
			    base + start);
		switch (wire) {
		case 0:
			if (read_varint(p, len, &pos, &v))
				return tpf_diag_fail(d, TPF_ERR_PARSE,
				                     "%s: not an ONNX model: truncated varint "
				                     "(field %llu '%s' of %s) at byte %zu",
				                     src, (unsigned long long)field, fname,
				                     desc->short_name, base + start);
			break;
		case 1:
		case 5: {
			size_t need = wire == 1 ? 8 : 4;
			if (len - pos < need)
				return tpf_diag_fail(d, TPF_ERR_PARSE,
				                     "%s: truncated input: field %llu '%s' of %s "
				                     "at byte %zu needs %zu bytes",
				                     src, (unsigned long long)field, fname,
				                     desc->short_name, base + start, need);
			pos += need;
			break;
		}
		case 2: {
			if (read_varint(p, len, &pos, &v))
				return tpf_diag_fail(d, TPF_ERR_PARSE,
				                     "%s: not an ONNX model: truncated length "
				                     "(field %llu '%s' of %s) at byte %zu",
				                     src, (unsigned long long)field, fname,
				                     desc->short_name, base + start);
			if (v > len - pos)
				return tpf_diag_fail(d, TPF_ERR_PARSE,
				                     "%s: truncated input: field %llu '%s' of %s "
				                     "at byte %zu claims %llu bytes, %zu remain",
				                     src, (unsigned long long)field, fname,
				                     desc->short_name, base + start,
				                     (unsigned long long)v, len - pos);
			if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
				enum tpf_status st = wire_check(f->descriptor, p + pos, (size_t)v,
				                                base + pos, depth + 1, src, d);
				if (st)
					return st;
			}
			pos += (size_t)v;
			break;
		}
		default:
			return tpf_diag_fail(
			    d, TPF_ERR_PARSE,
			    "%s: not an ONNX model: unsupported wire type %u at byte %zu", src,
			    wire, base + start);
		}
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ types */

static enum tpf_status import_type(struct import_ctx *c, struct tpf_arena *a,
                                   const Onnx__TypeProto *tp, struct tpf_type *out,
                                   const char *what)
{
	memset(out, 0, sizeof(*out));
	out->shape.rank = -1;
	if (!tp)
		return TPF_OK;
	if (onnx_sdup(a, tp->denotation, &out->denotation))
		return onnx_nomem(c);
	int opaque = 0;
	if (tp->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
		const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
		int et = tt->has_elem_type ? tt->elem_type : 0;
		if (et != 0 && !tpf_dtype_is_valid(et))
			opaque = 1; /* an element type newer than the IR: keep it verbatim */
		else
			out->dtype = (enum tpf_dtype)et;
		if (!opaque && tt->shape) {
			const Onnx__TensorShapeProto *sh = tt->shape;
			if (sh->n_dim > TPF_MAX_RANK)
				return tpf_diag_fail(c->d, TPF_ERR_LIMIT,
				                     "%s: rank %zu exceeds the limit of %d", what,
				                     sh->n_dim, TPF_MAX_RANK);
			out->shape.rank = (int)sh->n_dim;
			if (sh->n_dim) {
				out->shape.dims =
				    onnx_arena_array(a, sh->n_dim, sizeof(struct tpf_dim));
				if (!out->shape.dims)
					return onnx_nomem(c);
			}
			for (size_t i = 0; i < sh->n_dim; i++) {
				const Onnx__TensorShapeProto__Dimension *dm = sh->dim[i];
				struct tpf_dim *o = &out->shape.dims[i];
				o->value = -1;
				if (dm->value_case ==
				    ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
					if (dm->dim_value < 0)
						return tpf_diag_fail(
						    c->d, TPF_ERR_INVALID,
						    "%s: dimension %zu is negative (%lld)", what, i,
						    (long long)dm->dim_value);
					o->value = dm->dim_value;
				} else if (dm->value_case ==
				           ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM) {
					if (onnx_sdup(a, dm->dim_param ? dm->dim_param : "",
					              &o->param))
						return onnx_nomem(c);
				}
				if (onnx_sdup(a, dm->denotation, &o->denotation))
					return onnx_nomem(c);
			}
		}
		if (!opaque) {
			out->kind = TPF_TYPE_TENSOR;
			return TPF_OK;
		}
	} else if (tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) {
		return TPF_OK;
	}
	out->kind = TPF_TYPE_OPAQUE;
	out->dtype = TPF_DTYPE_UNDEFINED;
	out->shape.rank = -1;
	out->shape.dims = NULL;
	if (pack_blob(a, &tp->base, &out->opaque))
		return onnx_nomem(c);
	return TPF_OK;
}

static enum tpf_status apply_value_info(struct import_ctx *c, struct tpf_value *v,
                                        const Onnx__ValueInfoProto *vi)
{
	struct tpf_arena *a = v->graph->arena;
	char what[320];
	snprintf(what, sizeof(what), "value '%s'", v->name);
	if (vi->type) {
		struct tpf_type t;
		enum tpf_status st = import_type(c, a, vi->type, &t, what);
		if (st)
			return st;
		v->type = t;
	}
	if (vi->doc_string && onnx_sdup(a, vi->doc_string, &v->doc_string))
		return onnx_nomem(c);
	if (vi->n_metadata_props &&
	    onnx_import_props(a, vi->metadata_props, vi->n_metadata_props, &v->n_metadata,
	                      &v->metadata_keys, &v->metadata_values))
		return onnx_nomem(c);
	return TPF_OK;
}

/* ------------------------------------------------------------ attributes */

static enum tpf_status graph_define(struct import_ctx *c, Onnx__GraphProto *gp,
                                    struct tpf_graph *g);

static enum tpf_status new_subgraph(struct import_ctx *c, struct tpf_graph *parent,
                                    struct tpf_node *owner, Onnx__GraphProto *gp,
                                    struct tpf_graph **out)
{
	struct tpf_graph *sub = tpf_graph_create(parent);
	if (!sub)
		return onnx_nomem(c);
	sub->owner = owner;
	*out = sub;
	return graph_define(c, gp, sub);
}

static int infer_attr_kind(const Onnx__AttributeProto *ap)
{
	if (ap->g)
		return TPF_ATTR_GRAPH;
	if (ap->t)
		return TPF_ATTR_TENSOR;
	if (ap->sparse_tensor)
		return TPF_ATTR_SPARSE_TENSOR;
	if (ap->tp)
		return TPF_ATTR_TYPE_PROTO;
	if (ap->has_f)
		return TPF_ATTR_FLOAT;
	if (ap->has_i)
		return TPF_ATTR_INT;
	if (ap->has_s)
		return TPF_ATTR_STRING;
	if (ap->n_floats)
		return TPF_ATTR_FLOATS;
	if (ap->n_ints)
		return TPF_ATTR_INTS;
	if (ap->n_strings)
		return TPF_ATTR_STRINGS;
	if (ap->n_tensors)
		return TPF_ATTR_TENSORS;
	if (ap->n_graphs)
		return TPF_ATTR_GRAPHS;
	if (ap->n_sparse_tensors)
		return TPF_ATTR_SPARSE_TENSORS;
	if (ap->n_type_protos)
		return TPF_ATTR_TYPE_PROTOS;
	return TPF_ATTR_UNDEFINED;
}

/* `where` names the owner for messages ("node 'x' (If)"). */
static enum tpf_status import_attr(struct import_ctx *c, struct tpf_graph *g,
                                   struct tpf_node *owner, Onnx__AttributeProto *ap,
                                   struct tpf_attr *a, const char *where)
{
	struct tpf_arena *ar = g->arena;
	char what[512];
	const char *aname = ap->name ? ap->name : "";
	snprintf(what, sizeof(what), "%s: attribute '%s'", where, aname);
	memset(a, 0, sizeof(*a));
	if (!*aname)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: an attribute has no name", where);
	if (onnx_sdup(ar, aname, &a->name) || onnx_sdup(ar, ap->ref_attr_name, &a->ref_attr_name) ||
	    onnx_sdup(ar, ap->doc_string, &a->doc_string))
		return onnx_nomem(c);
	int kind = ap->has_type ? (int)ap->type : infer_attr_kind(ap);
	if (kind < 0 || kind >= TPF_ATTR_KIND_COUNT)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: unknown attribute type %d", what,
		                     kind);
	if (kind == TPF_ATTR_UNDEFINED && !ap->ref_attr_name)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: has no type and no value", what);
	a->kind = (enum tpf_attr_kind)kind;
	enum tpf_status st = TPF_OK;
	int is_ref = ap->ref_attr_name != NULL;
	switch (a->kind) {
	case TPF_ATTR_UNDEFINED:
		break;
	case TPF_ATTR_FLOAT:
		a->f = ap->f;
		break;
	case TPF_ATTR_INT:
		a->i = ap->i;
		break;
	case TPF_ATTR_STRING: {
		char *s = tpf_arena_alloc(ar, ap->s.len + 1);
		if (!s)
			return onnx_nomem(c);
		if (ap->s.len)
			memcpy(s, ap->s.data, ap->s.len);
		a->s = s;
		a->s_len = ap->s.len;
		break;
	}
	case TPF_ATTR_TENSOR:
		if (!ap->t) {
			if (is_ref)
				break;
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: TENSOR attribute without a tensor", what);
		}
		return onnx_import_tensor(c, ar, ap->t, what, &a->t);
	case TPF_ATTR_GRAPH:
		if (!ap->g) {
			if (is_ref)
				break;
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: GRAPH attribute without a graph", what);
		}
		return new_subgraph(c, g, owner, ap->g, &a->g);
	case TPF_ATTR_SPARSE_TENSOR:
		if (ap->sparse_tensor && pack_blob(ar, &ap->sparse_tensor->base, &a->blob))
			return onnx_nomem(c);
		break;
	case TPF_ATTR_TYPE_PROTO:
		if (ap->tp && pack_blob(ar, &ap->tp->base, &a->blob))
			return onnx_nomem(c);
		break;
	case TPF_ATTR_FLOATS:
		a->n = ap->n_floats;
		if (a->n && !(a->floats = tpf_arena_memdup(ar, ap->floats, a->n * sizeof(float))))
			return onnx_nomem(c);
		break;
	case TPF_ATTR_INTS:
		a->n = ap->n_ints;
		if (a->n && !(a->ints = tpf_arena_memdup(ar, ap->ints, a->n * sizeof(int64_t))))
			return onnx_nomem(c);
		break;
	case TPF_ATTR_STRINGS:
		a->n = ap->n_strings;
		if (a->n) {
			a->strings = onnx_arena_array(ar, a->n, sizeof(*a->strings));
			a->string_lens = onnx_arena_array(ar, a->n, sizeof(*a->string_lens));
			if (!a->strings || !a->string_lens)
				return onnx_nomem(c);
		}
		for (size_t i = 0; i < a->n; i++) {
			char *s = tpf_arena_alloc(ar, ap->strings[i].len + 1);
			if (!s)
				return onnx_nomem(c);
			if (ap->strings[i].len)
				memcpy(s, ap->strings[i].data, ap->strings[i].len);
			a->strings[i] = s;
			a->string_lens[i] = ap->strings[i].len;
		}
		break;
	case TPF_ATTR_TENSORS:
		a->n = ap->n_tensors;
		if (a->n && !(a->tensors = onnx_arena_array(ar, a->n, sizeof(*a->tensors))))
			return onnx_nomem(c);
		for (size_t i = 0; i < a->n; i++) {
			char w[560];
			snprintf(w, sizeof(w), "%s[%zu]", what, i);
			if ((st = onnx_import_tensor(c, ar, ap->tensors[i], w, &a->tensors[i])))
				return st;
		}
		break;
	case TPF_ATTR_GRAPHS:
		a->n = ap->n_graphs;
		if (a->n && !(a->graphs = onnx_arena_array(ar, a->n, sizeof(*a->graphs))))
			return onnx_nomem(c);
		for (size_t i = 0; i < a->n; i++)
			if ((st = new_subgraph(c, g, owner, ap->graphs[i], &a->graphs[i])))
				return st;
		break;
	case TPF_ATTR_SPARSE_TENSORS:
		if (pack_blobs(ar, (void *const *)ap->sparse_tensors, ap->n_sparse_tensors,
		               &a->blobs, &a->n))
			return onnx_nomem(c);
		break;
	case TPF_ATTR_TYPE_PROTOS:
		if (pack_blobs(ar, (void *const *)ap->type_protos, ap->n_type_protos, &a->blobs,
		               &a->n))
			return onnx_nomem(c);
		break;
	default:
		break;
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ graphs */

static int push_pending(struct import_ctx *c, const struct pending_graph *p)
{
	if (onnx_grow_heap((void **)&c->pending, &c->cap_pending, sizeof(*c->pending),
	                   c->n_pending + 1))
		return -1;
	c->pending[c->n_pending++] = *p;
	return 0;
}

/* Describes what already defines `v`, for duplicate-name messages. */
static const char *definer(const struct tpf_value *v, char *buf, size_t size)
{
	if (v->kind == TPF_VALUE_INITIALIZER)
		snprintf(buf, size, "an initializer");
	else if (v->kind == TPF_VALUE_GRAPH_INPUT)
		snprintf(buf, size, "a graph input");
	else if (v->producer) {
		char nb[256];
		snprintf(buf, size, "%s", tpf_node_describe(v->producer, nb, sizeof(nb)));
	} else
		snprintf(buf, size, "another definition");
	return buf;
}

static enum tpf_status define_nodes(struct import_ctx *c, struct tpf_graph *g,
                                    Onnx__NodeProto **nodes, size_t n_nodes)
{
	char desc[320], other[320];
	enum tpf_status st;
	for (size_t i = 0; i < n_nodes; i++) {
		Onnx__NodeProto *np = nodes[i];
		np_describe(np, desc, sizeof(desc));
		if (!np->op_type || !*np->op_type)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: has no op_type (node %zu of graph '%s')", desc, i,
			                     g->name ? g->name : "");
		for (size_t j = 0; j < np->n_output; j++) {
			const char *on = np->output[j];
			if (!*on)
				continue;
			struct tpf_value *prev = tpf_graph_find_value(g, on);
			if (prev)
				return tpf_diag_fail(c->d, TPF_ERR_INVALID,
				                     "%s: output '%s' is already defined by %s",
				                     desc, on, definer(prev, other, sizeof(other)));
			for (size_t k = 0; k < j; k++)
				if (strcmp(np->output[k], on) == 0)
					return tpf_diag_fail(c->d, TPF_ERR_INVALID,
					                     "%s: output '%s' is listed twice",
					                     desc, on);
		}
		if (np->n_input > c->cap_nulls) {
			struct tpf_value **nn = tpf_calloc(np->n_input, sizeof(*nn));
			if (!nn)
				return onnx_nomem(c);
			tpf_free(c->nulls);
			c->nulls = nn;
			c->cap_nulls = np->n_input;
		}
		struct tpf_node *n =
		    tpf_graph_add_node(g, np->domain, np->op_type, np->name, c->nulls, np->n_input,
		                       np->n_output, (const char *const *)np->output);
		if (!n)
			return onnx_nomem(c);
		if (onnx_sdup(g->arena, np->overload, &n->overload) ||
		    onnx_sdup(g->arena, np->doc_string, &n->doc_string) ||
		    onnx_import_props(g->arena, np->metadata_props, np->n_metadata_props,
		                      &n->n_metadata, &n->metadata_keys, &n->metadata_values) ||
		    pack_blobs(g->arena, (void *const *)np->device_configurations,
		               np->n_device_configurations, &n->device_configurations,
		               &n->n_device_configurations))
			return onnx_nomem(c);
		if (np->n_attribute) {
			n->attrs = onnx_arena_array(g->arena, np->n_attribute, sizeof(*n->attrs));
			if (!n->attrs)
				return onnx_nomem(c);
		}
		for (size_t j = 0; j < np->n_attribute; j++) {
			const char *an = np->attribute[j]->name ? np->attribute[j]->name : "";
			for (size_t k = 0; k < j; k++)
				if (strcmp(n->attrs[k].name, an) == 0)
					return tpf_diag_fail(c->d, TPF_ERR_INVALID,
					                     "%s: attribute '%s' appears twice",
					                     desc, an);
			st = import_attr(c, g, n, np->attribute[j], &n->attrs[j], desc);
			if (st)
				return st;
			n->n_attrs = j + 1;
		}
	}
	return TPF_OK;
}

static enum tpf_status graph_define(struct import_ctx *c, Onnx__GraphProto *gp, struct tpf_graph *g)
{
	struct tpf_arena *a = g->arena;
	enum tpf_status st;
	struct pending_graph p = {
	    .g = g,
	    .nodes = gp->node,
	    .n_nodes = gp->n_node,
	    .outputs = gp->output,
	    .n_outputs = gp->n_output,
	    .value_info = gp->value_info,
	    .n_value_info = gp->n_value_info,
	};
	if (push_pending(c, &p))
		return onnx_nomem(c);
	if (onnx_sdup(a, gp->name ? gp->name : "", &g->name) ||
	    onnx_sdup(a, gp->doc_string, &g->doc_string) ||
	    onnx_import_props(a, gp->metadata_props, gp->n_metadata_props, &g->n_metadata,
	                      &g->metadata_keys, &g->metadata_values) ||
	    pack_blobs(a, (void *const *)gp->quantization_annotation, gp->n_quantization_annotation,
	               &g->quantization_annotations, &g->n_quantization_annotations))
		return onnx_nomem(c);

	for (size_t i = 0; i < gp->n_initializer; i++) {
		Onnx__TensorProto *tp = gp->initializer[i];
		char what[320];
		if (!tp->name || !*tp->name)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "graph '%s': initializer %zu has no name", g->name, i);
		snprintf(what, sizeof(what), "initializer '%s'", tp->name);
		if (tpf_graph_find_value(g, tp->name))
			return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: the name is defined twice",
			                     what);
		struct tpf_tensor *t;
		if ((st = onnx_import_tensor(c, a, tp, what, &t)))
			return st;
		if (!tpf_graph_add_initializer_tensor(g, t))
			return onnx_nomem(c);
	}
	for (size_t i = 0; i < gp->n_sparse_initializer; i++)
		if ((st = onnx_import_sparse_initializer(c, g, gp->sparse_initializer[i], i)))
			return st;

	for (size_t i = 0; i < gp->n_input; i++) {
		Onnx__ValueInfoProto *vi = gp->input[i];
		const char *name = vi->name ? vi->name : "";
		if (!*name)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "graph '%s': input %zu has no name", g->name, i);
		struct tpf_value *v = tpf_graph_find_value(g, name);
		if (v && v->kind == TPF_VALUE_INITIALIZER && !v->is_graph_input) {
			/* an input with a default value */
			if (ir_arena_grow(a, (void **)&g->inputs, &g->cap_inputs, sizeof(*g->inputs),
			                  g->n_inputs + 1))
				return onnx_nomem(c);
			g->inputs[g->n_inputs++] = v;
			v->is_graph_input = 1;
		} else if (v) {
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "graph '%s': input '%s' is listed twice", g->name,
			                     name);
		} else {
			v = tpf_graph_add_input(g, name, TPF_DTYPE_UNDEFINED, -1, NULL);
			if (!v)
				return onnx_nomem(c);
			memset(&v->type, 0, sizeof(v->type));
			v->type.shape.rank = -1;
		}
		if ((st = apply_value_info(c, v, vi)))
			return st;
	}
	return define_nodes(c, g, gp->node, gp->n_node);
}

/* Finds `name` for a use in `g`: locally, else through the enclosing graphs,
 * creating OUTER values on the way and recording the capture on the node that
 * owns each subgraph.  *out NULL when the name is nowhere. */
static enum tpf_status resolve(struct import_ctx *c, struct tpf_graph *g, const char *name,
                               struct tpf_value **out)
{
	*out = tpf_graph_find_value(g, name);
	if (*out || !g->parent || !g->owner)
		return TPF_OK;
	struct tpf_value *pv;
	enum tpf_status st = resolve(c, g->parent, name, &pv);
	if (st || !pv)
		return st;
	if (ir_node_capture(g->owner, pv))
		return onnx_nomem(c);
	struct tpf_value *ov = tpf_graph_new_value(g, name);
	if (!ov)
		return onnx_nomem(c);
	ov->kind = TPF_VALUE_OUTER;
	ov->outer = pv;
	*out = ov;
	return TPF_OK;
}

/* Reports every name that is not defined (not only the first), so that
 * `tpfuse check` lists them all; fails at the end if there was one. */
static enum tpf_status graph_link(struct import_ctx *c, const struct pending_graph *p)
{
	struct tpf_graph *g = p->g;
	enum tpf_status st;
	char desc[320];
	int undefined = 0;
	struct tpf_node *n = g->first;
	for (size_t i = 0; i < p->n_nodes && n; i++, n = n->next) {
		const Onnx__NodeProto *np = p->nodes[i];
		for (size_t j = 0; j < np->n_input; j++) {
			const char *in = np->input[j];
			if (!*in)
				continue;
			struct tpf_value *v;
			if ((st = resolve(c, g, in, &v)))
				return st;
			if (!v) {
				tpf_diag_add(c->d, TPF_SEV_ERROR, "%s: input '%s' is not defined",
				             tpf_node_describe(n, desc, sizeof(desc)), in);
				undefined = 1;
				continue;
			}
			if (tpf_node_set_input(n, j, v))
				return onnx_nomem(c);
		}
	}
	for (size_t i = 0; i < p->n_outputs; i++) {
		const Onnx__ValueInfoProto *vi = p->outputs[i];
		const char *name = vi->name ? vi->name : "";
		struct tpf_value *v = NULL;
		if (*name && (st = resolve(c, g, name, &v)))
			return st;
		if (!v) {
			tpf_diag_add(c->d, TPF_SEV_ERROR, "graph '%s': output '%s' is not defined",
			             g->name, name);
			undefined = 1;
			continue;
		}
		if (undefined)
			continue;
		if ((st = apply_value_info(c, v, vi)))
			return st;
		if (tpf_graph_add_output(g, v))
			return onnx_nomem(c);
	}
	for (size_t i = 0; i < p->n_output_names; i++) {
		const char *name = p->output_names[i];
		struct tpf_value *v = NULL;
		if (*name && (st = resolve(c, g, name, &v)))
			return st;
		if (!v) {
			tpf_diag_add(c->d, TPF_SEV_ERROR, "function '%s': output '%s' is not defined",
			             g->name, name);
			undefined = 1;
			continue;
		}
		if (undefined)
			continue;
		if (tpf_graph_add_output(g, v))
			return onnx_nomem(c);
	}
	return undefined ? TPF_ERR_INVALID : TPF_OK;
}

static enum tpf_status graph_value_info(struct import_ctx *c, const struct pending_graph *p)
{
	struct tpf_graph *g = p->g;
	enum tpf_status st;
	for (size_t i = 0; i < p->n_value_info; i++) {
		const Onnx__ValueInfoProto *vi = p->value_info[i];
		const char *name = vi->name ? vi->name : "";
		if (!*name)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "graph '%s': value_info %zu has no name", g->name, i);
		struct tpf_value *v = tpf_graph_find_value(g, name);
		if (!v) {
			/* Not defined here: kept detached, outside the name index. */
			for (size_t k = 0; k < g->n_value_infos && !v; k++)
				if (strcmp(g->value_infos[k]->name, name) == 0)
					v = g->value_infos[k];
			if (!v) {
				v = tpf_arena_alloc(g->arena, sizeof(*v));
				if (!v || !(v->name = tpf_arena_strdup(g->arena, name)) ||
				    ir_arena_grow(g->arena, (void **)&g->value_infos,
				                  &g->cap_value_infos, sizeof(*g->value_infos),
				                  g->n_value_infos + 1))
					return onnx_nomem(c);
				v->kind = TPF_VALUE_NODE_OUTPUT;
				v->graph = g;
				v->producer_index = -1;
				v->type.shape.rank = -1;
				v->id = UINT32_MAX;
				g->value_infos[g->n_value_infos++] = v;
			}
		}
		if ((st = apply_value_info(c, v, vi)))
			return st;
		v->has_value_info = 1;
	}
	return TPF_OK;
}

/* ------------------------------------------------------------ model */

static enum tpf_status import_opsets(struct import_ctx *c, struct tpf_arena *a,
                                     Onnx__OperatorSetIdProto **ops, size_t n,
                                     struct tpf_opset **out, size_t *n_out)
{
	*out = NULL;
	*n_out = 0;
	if (!n)
		return TPF_OK;
	struct tpf_opset *o = onnx_arena_array(a, n, sizeof(*o));
	if (!o)
		return onnx_nomem(c);
	for (size_t i = 0; i < n; i++) {
		if (onnx_sdup(a, ops[i]->domain ? ops[i]->domain : "", &o[i].domain))
			return onnx_nomem(c);
		o[i].version = ops[i]->has_version ? ops[i]->version : 0;
	}
	*out = o;
	*n_out = n;
	return TPF_OK;
}

static enum tpf_status import_function(struct import_ctx *c, Onnx__FunctionProto *fp,
                                       struct tpf_function *f)
{
	struct tpf_arena *ma = c->m->arena;
	enum tpf_status st;
	const char *fname = fp->name ? fp->name : "";
	if (!*fname)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "a model-local function has no name");
	f->body = tpf_graph_create(NULL);
	if (!f->body)
		return onnx_nomem(c);
	struct tpf_graph *g = f->body;
	if (onnx_sdup(ma, fname, &f->name) ||
	    onnx_sdup(ma, fp->domain ? fp->domain : "", &f->domain) ||
	    onnx_sdup(ma, fp->overload, &f->overload) ||
	    onnx_sdup(ma, fp->doc_string, &f->doc_string) ||
	    onnx_import_props(ma, fp->metadata_props, fp->n_metadata_props, &f->n_metadata,
	                      &f->metadata_keys, &f->metadata_values) ||
	    onnx_sdup(g->arena, fname, &g->name))
		return onnx_nomem(c);
	if ((st = import_opsets(c, ma, fp->opset_import, fp->n_opset_import, &f->opsets,
	                        &f->n_opsets)))
		return st;
	if (fp->n_attribute) {
		f->attribute_names =
		    onnx_arena_array(ma, fp->n_attribute, sizeof(*f->attribute_names));
		if (!f->attribute_names)
			return onnx_nomem(c);
		for (size_t i = 0; i < fp->n_attribute; i++)
			if (onnx_sdup(ma, fp->attribute[i], &f->attribute_names[i]))
				return onnx_nomem(c);
		f->n_attribute_names = fp->n_attribute;
	}
	struct pending_graph p = {
	    .g = g,
	    .nodes = fp->node,
	    .n_nodes = fp->n_node,
	    .output_names = fp->output,
	    .n_output_names = fp->n_output,
	    .value_info = fp->value_info,
	    .n_value_info = fp->n_value_info,
	};
	if (push_pending(c, &p))
		return onnx_nomem(c);
	for (size_t i = 0; i < fp->n_input; i++) {
		const char *name = fp->input[i];
		if (!*name || tpf_graph_find_value(g, name))
			return tpf_diag_fail(
			    c->d, TPF_ERR_INVALID,
			    "function '%s': input %zu ('%s') is empty or listed twice", fname, i,
			    name);
		struct tpf_value *v = tpf_graph_add_input(g, name, TPF_DTYPE_UNDEFINED, -1, NULL);
		if (!v)
			return onnx_nomem(c);
		memset(&v->type, 0, sizeof(v->type));
		v->type.shape.rank = -1;
	}
	char where[320];
	snprintf(where, sizeof(where), "function '%s'", fname);
	if (fp->n_attribute_proto) {
		f->attribute_protos =
		    onnx_arena_array(ma, fp->n_attribute_proto, sizeof(*f->attribute_protos));
		if (!f->attribute_protos)
			return onnx_nomem(c);
		for (size_t i = 0; i < fp->n_attribute_proto; i++) {
			st = import_attr(c, g, NULL, fp->attribute_proto[i],
			                 &f->attribute_protos[i], where);
			if (st)
				return st;
			f->n_attribute_protos = i + 1;
		}
	}
	return define_nodes(c, g, fp->node, fp->n_node);
}

static enum tpf_status import_model(struct import_ctx *c, Onnx__ModelProto *mp)
{
	struct tpf_model *m = c->m;
	struct tpf_arena *a = m->arena;
	enum tpf_status st;
	m->ir_version = mp->has_ir_version ? mp->ir_version : 0;
	m->model_version = mp->has_model_version ? mp->model_version : 0;
	if (onnx_sdup(a, mp->producer_name, &m->producer_name) ||
	    onnx_sdup(a, mp->producer_version, &m->producer_version) ||
	    onnx_sdup(a, mp->domain, &m->domain) || onnx_sdup(a, mp->doc_string, &m->doc_string) ||
	    onnx_import_props(a, mp->metadata_props, mp->n_metadata_props, &m->n_metadata,
	                      &m->metadata_keys, &m->metadata_values) ||
	    pack_blobs(a, (void *const *)mp->training_info, mp->n_training_info, &m->training_info,
	               &m->n_training_info) ||
	    pack_blobs(a, (void *const *)mp->configuration, mp->n_configuration, &m->configuration,
	               &m->n_configuration))
		return onnx_nomem(c);
	if ((st = import_opsets(c, a, mp->opset_import, mp->n_opset_import, &m->opsets,
	                        &m->n_opsets)))
		return st;

	if (mp->n_functions) {
		m->functions = onnx_arena_array(a, mp->n_functions, sizeof(*m->functions));
		if (!m->functions)
			return onnx_nomem(c);
		for (size_t i = 0; i < mp->n_functions; i++) {
			m->n_functions = i + 1; /* so that the body is freed with the model */
			if ((st = import_function(c, mp->functions[i], &m->functions[i])))
				return st;
		}
	}
	if ((st = graph_define(c, mp->graph, m->graph)))
		return st;
	for (size_t i = 0; i < c->n_pending; i++)
		if ((st = graph_link(c, &c->pending[i])))
			return st;
	for (size_t i = 0; i < c->n_pending; i++)
		if ((st = graph_value_info(c, &c->pending[i])))
			return st;
	return TPF_OK;
}

static enum tpf_status load_impl(const void *data, size_t size, const char *base_dir,
                                 const struct tpf_load_options *opt, const char *src,
                                 struct tpf_model **out, struct tpf_diag *d)
{
	size_t limit = opt && opt->max_model_bytes ? opt->max_model_bytes : DEFAULT_MAX_MODEL_BYTES;
	if (size == 0)
		return tpf_diag_fail(d, TPF_ERR_PARSE, "%s: empty input, not an ONNX model", src);
	if (size > limit)
		return tpf_diag_fail(d, TPF_ERR_LIMIT,
		                     "%s: %zu bytes exceed the limit of %zu bytes", src, size,
		                     limit);
	enum tpf_status st = wire_check(&onnx__model_proto__descriptor, data, size, 0, 0, src, d);
	if (st)
		return st;

	struct tpf_pb_alloc al;
	tpf_pb_alloc_init(&al);
	Onnx__ModelProto *mp = onnx__model_proto__unpack(&al.base, size, data);
	if (!mp) {
		if (al.failed)
			return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory while decoding",
			                     src);
		return tpf_diag_fail(d, TPF_ERR_PARSE,
		                     "%s: not an ONNX model: protobuf decoding of ModelProto "
		                     "failed (wrong field types)",
		                     src);
	}
	struct import_ctx c = {.d = d, .no_external_data = opt ? opt->no_external_data : 0};
	if (!mp->graph) {
		st = tpf_diag_fail(d, TPF_ERR_PARSE,
		                   "%s: not an ONNX model: ModelProto has no graph", src);
		goto out_free_proto;
	}
	c.m = tpf_model_create();
	c.bk = tpf_calloc(1, sizeof(*c.bk));
	if (!c.m || !c.bk) {
		tpf_free(c.bk);
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", src);
		goto out_free_model;
	}
	c.m->backing = c.bk;
	c.base_dir = base_dir && *base_dir ? base_dir : NULL;
	if (onnx_sdup(c.m->arena, base_dir ? base_dir : "", &c.m->base_dir)) {
		st = onnx_nomem(&c);
		goto out_free_model;
	}
	st = import_model(&c, mp);

out_free_model:
	if (st) {
		tpf_model_free(c.m);
		c.m = NULL;
	}
	*out = c.m;
	free(c.base_real);
	tpf_free(c.pending);
	tpf_free(c.nulls);
out_free_proto:
	onnx__model_proto__free_unpacked(mp, &al.base);
	return st;
}

enum tpf_status tpf_model_load_memory(const void *data, size_t size, const char *base_dir,
                                      const struct tpf_load_options *opt, struct tpf_model **out,
                                      struct tpf_diag *d)
{
	if (!out)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
		                     "tpf_model_load_memory: no output pointer");
	*out = NULL;
	if (!data && size)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_model_load_memory: no data");
	return load_impl(data, size, base_dir, opt, "<memory>", out, d);
}

enum tpf_status tpf_model_load_file(const char *path, const struct tpf_load_options *opt,
                                    struct tpf_model **out, struct tpf_diag *d)
{
	if (!out || !path)
		return tpf_diag_fail(d, TPF_ERR_INVALID,
		                     "tpf_model_load_file: no path or output pointer");
	*out = NULL;
	/* O_NONBLOCK: a named pipe must not block the open; it is refused below */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
	enum tpf_status st;
	struct stat sb;
	char *dir = NULL;
	void *map = NULL;
	size_t size = 0;
	if (fstat(fd, &sb) != 0) {
		st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
		goto out_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		st = tpf_diag_fail(d, TPF_ERR_IO, "%s: not a regular file", path);
		goto out_close;
	}
	size = (size_t)sb.st_size;
	if (size == 0) {
		st = tpf_diag_fail(d, TPF_ERR_PARSE, "%s: empty file, not an ONNX model", path);
		goto out_close;
	}
	size_t limit = opt && opt->max_model_bytes ? opt->max_model_bytes : DEFAULT_MAX_MODEL_BYTES;
	if ((uint64_t)sb.st_size > limit) {
		st = tpf_diag_fail(d, TPF_ERR_LIMIT, "%s: %lld bytes exceed the limit of %zu bytes",
		                   path, (long long)sb.st_size, limit);
		goto out_close;
	}
	map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED) {
		map = NULL;
		st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
		goto out_close;
	}
	dir = tpf_path_dirname(path);
	if (!dir) {
		st = tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", path);
		goto out_unmap;
	}
	st = load_impl(map, size, dir, opt, path, out, d);
	tpf_free(dir);

out_unmap:
	munmap(map, size);
out_close:
	close(fd);
	return st;
}
