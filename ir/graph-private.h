/* SPDX-License-Identifier: MIT */
/* Private to ir/: the arena array helper of graph.c that the ONNX importer
 * and the text reader use too. */
#ifndef TPF_GRAPH_PRIVATE_H
#define TPF_GRAPH_PRIVATE_H

#include "tpf-ir.h"

#pragma GCC visibility push(hidden)

/* Grows an arena array to hold at least `need` elements (capacity doubled
 * from 4; the old contents are copied, the old block stays in the arena).
 * 0, or -1 when out of memory. */
int ir_arena_grow(struct tpf_arena *a, void **arr, size_t *cap, size_t elem, size_t need);

#pragma GCC visibility pop

#endif /* TPF_GRAPH_PRIVATE_H */
