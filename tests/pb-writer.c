/* SPDX-License-Identifier: MIT */
#include "pb-writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

void pbw_init(struct pbw *w)
{
	memset(w, 0, sizeof(*w));
}

void pbw_free(struct pbw *w)
{
	free(w->data);
	memset(w, 0, sizeof(*w));
}

void pbw_raw(struct pbw *w, const void *p, size_t n)
{
	if (w->oom || n == 0)
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 64;
		while (cap < w->len + n)
			cap *= 2;
		uint8_t *d = realloc(w->data, cap);
		if (!d) {
			w->oom = 1;
			return;
		}
		w->data = d;
		w->cap = cap;
	}
	memcpy(w->data + w->len, p, n);
	w->len += n;
}

static void put_varint(struct pbw *w, uint64_t v)
{
	uint8_t buf[10];
	size_t n = 0;
	do {
		uint8_t b = v & 0x7f;
		v >>= 7;
		if (v)
			b |= 0x80;
		buf[n++] = b;
	} while (v);
	pbw_raw(w, buf, n);
}

static void put_tag(struct pbw *w, uint32_t field, unsigned wire)
{
	put_varint(w, ((uint64_t)field << 3) | wire);
}

void pbw_varint(struct pbw *w, uint32_t field, uint64_t v)
{
	put_tag(w, field, WIRE_VARINT);
	put_varint(w, v);
}

void pbw_int64(struct pbw *w, uint32_t field, int64_t v)
{
	pbw_varint(w, field, (uint64_t)v);
}

void pbw_bytes(struct pbw *w, uint32_t field, const void *p, size_t n)
{
	put_tag(w, field, WIRE_LEN);
	put_varint(w, n);
	pbw_raw(w, p, n);
}

void pbw_string(struct pbw *w, uint32_t field, const char *s)
{
	pbw_bytes(w, field, s, strlen(s));
}

void pbw_message(struct pbw *w, uint32_t field, const struct pbw *sub)
{
	if (sub->oom)
		w->oom = 1;
	pbw_bytes(w, field, sub->data, sub->len);
}

void pbw_float(struct pbw *w, uint32_t field, float f)
{
	uint32_t bits;
	uint8_t le[4];
	memcpy(&bits, &f, 4);
	for (int i = 0; i < 4; i++)
		le[i] = (uint8_t)(bits >> (8 * i));
	put_tag(w, field, WIRE_I32);
	pbw_raw(w, le, 4);
}

void onnx_kv(struct pbw *w, uint32_t field, const char *key, const char *value)
{
	struct pbw e;
	pbw_init(&e);
	pbw_string(&e, 1, key);
	pbw_string(&e, 2, value);
	pbw_message(w, field, &e);
	pbw_free(&e);
}

static void tensor_head(struct pbw *t, const char *name, int dtype, const int64_t *dims, int rank)
{
	for (int i = 0; i < rank; i++)
		pbw_int64(t, 1, dims[i]); /* dims */
	pbw_int64(t, 2, dtype);           /* data_type */
	pbw_string(t, 8, name);           /* name */
}

void onnx_tensor_raw(struct pbw *t, const char *name, int dtype, const int64_t *dims, int rank,
		     const void *raw, size_t raw_len)
{
	tensor_head(t, name, dtype, dims, rank);
	if (raw)
		pbw_bytes(t, 9, raw, raw_len); /* raw_data */
}

void onnx_tensor_external(struct pbw *t, const char *name, int dtype, const int64_t *dims,
			  int rank, const char *location, int64_t offset, int64_t length)
{
	char num[32];
	tensor_head(t, name, dtype, dims, rank);
	onnx_kv(t, 13, "location", location);
	if (offset >= 0) {
		snprintf(num, sizeof(num), "%lld", (long long)offset);
		onnx_kv(t, 13, "offset", num);
	}
	if (length >= 0) {
		snprintf(num, sizeof(num), "%lld", (long long)length);
		onnx_kv(t, 13, "length", num);
	}
	pbw_int64(t, 14, 1); /* data_location = EXTERNAL */
}

void onnx_value_info(struct pbw *v, const char *name, int elem_type, const int64_t *dims,
		     int rank)
{
	struct pbw type, tensor, shape;
	pbw_init(&type);
	pbw_init(&tensor);
	pbw_init(&shape);
	pbw_int64(&tensor, 1, elem_type);
	if (rank >= 0) {
		for (int i = 0; i < rank; i++) {
			struct pbw dim;
			pbw_init(&dim);
			pbw_int64(&dim, 1, dims[i]);
			pbw_message(&shape, 1, &dim);
			pbw_free(&dim);
		}
		pbw_message(&tensor, 2, &shape);
	}
	pbw_message(&type, 1, &tensor);
	pbw_string(v, 1, name);
	pbw_message(v, 2, &type);
	pbw_free(&type);
	pbw_free(&tensor);
	pbw_free(&shape);
}

void onnx_node(struct pbw *n, const char *domain, const char *op_type, const char *name,
	       const char *const *inputs, int n_inputs, const char *const *outputs, int n_outputs)
{
	for (int i = 0; i < n_inputs; i++)
		pbw_string(n, 1, inputs[i]);
	for (int i = 0; i < n_outputs; i++)
		pbw_string(n, 2, outputs[i]);
	pbw_string(n, 3, name);
	pbw_string(n, 4, op_type);
	if (domain && domain[0])
		pbw_string(n, 7, domain);
}

void onnx_attr_int(struct pbw *node, const char *name, int64_t v)
{
	struct pbw a;
	pbw_init(&a);
	pbw_string(&a, 1, name);
	pbw_int64(&a, 3, v);  /* i */
	pbw_int64(&a, 20, 2); /* type = INT */
	pbw_message(node, 5, &a);
	pbw_free(&a);
}

void onnx_model(struct pbw *m, const struct pbw *graph, int64_t ir_version, int64_t opset)
{
	struct pbw op;
	pbw_init(&op);
	pbw_string(&op, 1, "");
	pbw_int64(&op, 2, opset);
	pbw_int64(m, 1, ir_version);
	pbw_string(m, 2, "tpfuse-tests");
	pbw_message(m, 8, &op);
	pbw_message(m, 7, graph);
	pbw_free(&op);
}
