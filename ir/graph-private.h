/* SPDX-License-Identifier: MIT */
/* Private to ir/: what graph.c lends the ONNX importer and the text reader
 * (arena arrays, subgraph captures). */
#ifndef TPF_GRAPH_PRIVATE_H
#define TPF_GRAPH_PRIVATE_H

#include "tpf-ir.h"

#pragma GCC visibility push(hidden)

/* Grows an arena array to hold at least `need` elements (capacity doubled
 * from 4; the old contents are copied, the old block stays in the arena).
 * 0, or -1 when out of memory. */
int ir_arena_grow(struct tpf_arena *a, void **arr, size_t *cap, size_t elem, size_t need);

/* Records `pv`, a value of owner's graph that a subgraph of `owner`
 * captures, as an implicit input of `owner` (with its use, index -1 - k),
 * unless it is one already.  0, or -1 when out of memory. */
int ir_node_capture(struct tpf_node *owner, struct tpf_value *pv);

#pragma GCC visibility pop

#endif /* TPF_GRAPH_PRIVATE_H */
