/* SPDX-License-Identifier: MIT */
/*
 * Helpers shared by the cmocka tests (tests/test-*.c): models from scratch
 * or from dump text, counting and finding ops, dumps, verification.  They
 * fail the running test with cmocka's assertions instead of returning
 * errors, so they are for use inside a cmocka test only.
 */
#ifndef TPF_TEST_UTIL_H
#define TPF_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "tpf-passes.h"

/* An empty model importing the ONNX domain at `opset` and com.microsoft 1. */
struct tpf_model *new_model(int64_t opset);
/* A model read from dump text (tpf_model_parse_text). */
struct tpf_model *parse_model(const char *text);

/* Live nodes of g (not its subgraphs) of op `op`, or of op type `op_type`. */
size_t count_op(const struct tpf_graph *g, enum tpf_op op);
size_t count_op_type(const struct tpf_graph *g, const char *op_type);
/* The first such node, or NULL. */
struct tpf_node *find_op(const struct tpf_graph *g, enum tpf_op op);
struct tpf_node *find_op_type(const struct tpf_graph *g, const char *op_type);
/* The node named `name`, or NULL. */
struct tpf_node *find_node(const struct tpf_graph *g, const char *name);

/* The text dump in a malloc'ed string. */
char *dump_text(const struct tpf_model *m);
/* tpf_model_verify must pass (its messages are printed when it does not). */
void verify_ok(const struct tpf_model *m);

#endif /* TPF_TEST_UTIL_H */
