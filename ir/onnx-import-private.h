/* SPDX-License-Identifier: MIT */
/*
 * Private to the ONNX importer: the import context and what its two files
 * share.  onnx-import.c checks the wire format and converts the model,
 * graphs, nodes, attributes, types and functions; onnx-import-tensor.c
 * converts tensors (typed fields, raw data, external data, sparse
 * initializers) and owns the model's backing (mapped files, buffers).
 */
#ifndef TPF_ONNX_IMPORT_PRIVATE_H
#define TPF_ONNX_IMPORT_PRIVATE_H

#include "tpf-ir.h"
#include "onnx.pb-c.h"

#include <stddef.h>

#pragma GCC visibility push(hidden)

struct mapping {
	char *path; /* resolved path of the mapped file */
	void *addr; /* NULL for an empty file */
	size_t len;
};

struct backing {
	struct mapping *maps;
	size_t n_maps, cap_maps;
	void **bufs; /* tpf_malloc'ed buffers that tensors point into */
	size_t n_bufs, cap_bufs;
};

struct pending_graph {
	struct tpf_graph *g;
	Onnx__NodeProto **nodes;
	size_t n_nodes;
	Onnx__ValueInfoProto **outputs; /* graphs */
	size_t n_outputs;
	char **output_names; /* function bodies */
	size_t n_output_names;
	Onnx__ValueInfoProto **value_info;
	size_t n_value_info;
};

struct import_ctx {
	struct tpf_model *m;
	struct tpf_diag *d;
	struct backing *bk;
	int no_external_data;
	const char *base_dir; /* NULL: external data refused */
	char *base_real;      /* realpath of base_dir, computed on first use */
	struct pending_graph *pending;
	size_t n_pending, cap_pending;
	struct tpf_value **nulls; /* scratch: placeholder inputs */
	size_t cap_nulls;
};

/* ------------------------------------------------------------ onnx-import.c */

/* Reports running out of memory; returns TPF_ERR_NOMEM. */
enum tpf_status onnx_nomem(struct import_ctx *c);
/* An arena array of count elements; NULL for none, or out of memory. */
void *onnx_arena_array(struct tpf_arena *a, size_t count, size_t elem);
/* Copies an optional string; NULL stays NULL.  -1 on OOM. */
int onnx_sdup(struct tpf_arena *a, const char *s, const char **out);
/* Key and value pairs (metadata_props) into arena arrays.  -1 on OOM. */
int onnx_import_props(struct tpf_arena *a, Onnx__StringStringEntryProto *const *e, size_t n,
                      size_t *n_out, const char ***keys, const char ***values);

/* ------------------------------------------------------------ onnx-import-tensor.c */

/* Grows a tpf_malloc'ed array to hold at least `need` elements. */
int onnx_grow_heap(void **arr, size_t *cap, size_t elem, size_t need);
/* Imports a dense tensor into `a` (names, dims) and the backing (bytes).
 * `tp` is not const: raw_data buffers are taken over. */
enum tpf_status onnx_import_tensor(struct import_ctx *c, struct tpf_arena *a, Onnx__TensorProto *tp,
                                   const char *what, struct tpf_tensor **out);
/* A sparse initializer becomes a dense one (the IR has no sparse tensors). */
enum tpf_status onnx_import_sparse_initializer(struct import_ctx *c, struct tpf_graph *g,
                                               Onnx__SparseTensorProto *sp, size_t index);

#pragma GCC visibility pop

#endif /* TPF_ONNX_IMPORT_PRIVATE_H */
