/*
 * A minimal protobuf encoder for tests: builds ONNX messages field by field
 * with the official field numbers, independent of the importer's generated
 * bindings, so tests can write exactly the (valid or broken) bytes they need.
 */
#ifndef TPF_TEST_PB_WRITER_H
#define TPF_TEST_PB_WRITER_H

#include <stddef.h>
#include <stdint.h>

struct pbw {
	uint8_t *data;
	size_t len, cap;
	int oom;
};

void pbw_init(struct pbw *w);
void pbw_free(struct pbw *w);
void pbw_raw(struct pbw *w, const void *p, size_t n);
/* Field encoders: tag then payload. */
void pbw_varint(struct pbw *w, uint32_t field, uint64_t v);
void pbw_int64(struct pbw *w, uint32_t field, int64_t v);
void pbw_bytes(struct pbw *w, uint32_t field, const void *p, size_t n);
void pbw_string(struct pbw *w, uint32_t field, const char *s);
void pbw_message(struct pbw *w, uint32_t field, const struct pbw *sub); /* copies sub */
void pbw_float(struct pbw *w, uint32_t field, float f);

/* ONNX helpers (field numbers from onnx.proto). */
void onnx_kv(struct pbw *w, uint32_t field, const char *key, const char *value);
/* TensorProto with raw_data (raw may be NULL with raw_len 0: no raw_data field). */
void onnx_tensor_raw(struct pbw *t, const char *name, int dtype, const int64_t *dims, int rank,
		     const void *raw, size_t raw_len);
/* TensorProto stored externally: location/offset/length entries, data_location=EXTERNAL.
 * offset or length < 0: the entry is left out. */
void onnx_tensor_external(struct pbw *t, const char *name, int dtype, const int64_t *dims,
			  int rank, const char *location, int64_t offset, int64_t length);
/* ValueInfoProto of a tensor; rank < 0: no shape. */
void onnx_value_info(struct pbw *v, const char *name, int elem_type, const int64_t *dims,
		     int rank);
/* NodeProto; "" entries stand for omitted optional inputs. */
void onnx_node(struct pbw *n, const char *domain, const char *op_type, const char *name,
	       const char *const *inputs, int n_inputs, const char *const *outputs, int n_outputs);
void onnx_attr_int(struct pbw *node, const char *name, int64_t v);
/* ModelProto: ir_version, one opset import ("" at `opset`), producer, graph. */
void onnx_model(struct pbw *m, const struct pbw *graph, int64_t ir_version, int64_t opset);

#endif /* TPF_TEST_PB_WRITER_H */
