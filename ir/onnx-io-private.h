/* SPDX-License-Identifier: MIT */
/* Pieces shared by the ONNX importer and exporter; not installed. */
#ifndef TPF_ONNX_IO_PRIVATE_H
#define TPF_ONNX_IO_PRIVATE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* A protobuf-c allocator on top of tpf_malloc/tpf_free (so fault injection
 * reaches the decoder).  `failed` is set when an allocation fails, which
 * tells an out-of-memory apart from malformed bytes. */
struct tpf_pb_alloc {
	ProtobufCAllocator base;
	int failed;
};

void tpf_pb_alloc_init(struct tpf_pb_alloc *al);

/* Checks an external-data `location` lexically: NULL when it may be used,
 * else the reason ("is empty", "is an absolute path", "contains a '..'
 * component"). */
const char *tpf_onnx_location_problem(const char *location);

/* Resolves an external-data `location` (lexically checked already) in the
 * model's folder `base_dir`, as the importer reads it: *real gets the file's
 * real path (free() it), which must lie inside the folder, symbolic links
 * followed.  *base_real caches the folder's real path between calls (free()
 * it).  Errors start with `what`: a folder or file that cannot be resolved
 * (missing included) is TPF_ERR_IO, a location leading out of the folder
 * TPF_ERR_INVALID. */
enum tpf_status tpf_onnx_resolve_external(const char *base_dir, char **base_real, const char *what,
                                          const char *location, char **real, struct tpf_diag *d);

/* Whether p[0..n) lies in a file mapped by a model's backing: 0 and the
 * file's path and offset if so, -1 otherwise.  Lets the exporter copy
 * external data file to file without paging it through memory. */
int tpf_onnx_backing_locate(const void *backing, const void *p, size_t n, const char **path,
                            uint64_t *offset);

/* The external data files a model's backing maps: their count, and the
 * resolved path of the i-th. */
size_t tpf_onnx_backing_n_files(const void *backing);
const char *tpf_onnx_backing_file(const void *backing, size_t i);

/* Folder part of a path ("." when it has none), tpf_malloc'ed; NULL on OOM. */
char *tpf_path_dirname(const char *path);
/* Last component of a path (points into `path`). */
const char *tpf_path_basename(const char *path);

#endif /* TPF_ONNX_IO_PRIVATE_H */
