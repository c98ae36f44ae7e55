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
#include "tpf-runtime.h"

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

/* Building graphs: a node (failing the test when it cannot be added), a
 * graph input with text dims ("B" symbolic, "8" static), an int64 vector
 * initializer.  IN(a, b) is an operand list. */
#define IN(...) ((struct tpf_value *[]){__VA_ARGS__})
struct tpf_node *add_node(struct tpf_graph *g, const char *domain, const char *op,
                          const char *name, size_t n_in, struct tpf_value *const *in,
                          size_t n_out);
struct tpf_value *add_input(struct tpf_graph *g, const char *name, enum tpf_dtype dt, int rank,
                            const char *const *dims);
struct tpf_value *add_ints(struct tpf_graph *g, const char *name, size_t count,
                           const int64_t *vals);

/* A value's type as text: "bf16[B,S,64]", "f32[?]" (unknown rank), "none". */
const char *type_str(const struct tpf_value *v, char *buf, size_t size);
/* v's type must read `want`. */
void expect_type(const struct tpf_value *v, const char *want);

/* Whether some message of d contains `needle`. */
int diag_mentions(const struct tpf_diag *d, const char *needle);
/* Each of the NULL-terminated needles must be in some message of d (d is
 * printed when one is not). */
void expect_mentions(const struct tpf_diag *d, const char *const *needles);

/* A host tensor over `data` (not copied) for a session's inputs. */
struct tpf_host_tensor host_tensor(const char *name, enum tpf_dtype dt, int rank,
                                   const int64_t *dims, void *data);
/* Each message of d, through cmocka's print_message. */
void dump_diag(const struct tpf_diag *d);

/* The text dump in a malloc'ed string. */
char *dump_text(const struct tpf_model *m);
/* tpf_model_verify must pass (its messages are printed when it does not). */
void verify_ok(const struct tpf_model *m);
/* tpf_model_infer_shapes must pass (likewise). */
void infer_ok(struct tpf_model *m);

/* Kernel tests: a graph to add the nodes under test to and a diagnostic
 * for the kernel calls, made by kernel_setup and freed by kernel_teardown
 * (cmocka setup and teardown functions, for a group or for each test). */
extern struct tpf_graph *kernel_graph;
extern struct tpf_diag *kernel_diag;
int kernel_setup(void **state);
int kernel_teardown(void **state);
/* A host tensor of dtype dt and dims[0..rank), zeroed (data malloc'ed,
 * for free()). */
struct tpf_ktensor zero_ktensor(enum tpf_dtype dt, int rank, const int64_t *dims);

#endif /* TPF_TEST_UTIL_H */
