/* SPDX-License-Identifier: MIT */
/*
 * The verifier's private interface, shared by verify.c (node lists, values,
 * graph inputs, outputs and initializers, subgraphs, the entry points) and
 * verify-node.c (a node against its op record: arity, attributes, type
 * constraints, the shape function's outputs).
 */
#ifndef TPF_VERIFY_PRIVATE_H
#define TPF_VERIFY_PRIVATE_H

#include "ops/op-def.h"

#include <stdint.h>
#include <string.h>

#pragma GCC visibility push(hidden)

/* Nesting of subgraphs deeper than this is reported instead of followed. */
#define VERIFY_MAX_DEPTH 256

/* Open addressing map from a pointer to a 1-based index (0: absent). */
struct ptr_map {
	const void **keys;
	uint32_t *vals;
	size_t cap; /* power of two, or 0 */
	size_t count;
};

/* Open addressing set of strings, each remembering an owner pointer. */
struct name_set {
	const char **keys;
	const void **owners;
	size_t cap;
};

/* A set for at most `expected` names.  0, or -1 when out of memory. */
int verify_name_set_init(struct name_set *s, size_t expected);
void verify_name_set_free(struct name_set *s);
/* Adds name; returns the earlier owner when the name was present, else NULL. */
const void *verify_name_set_add(struct name_set *s, const char *name, const void *owner);

/* One verification: where messages go, what the model says, the counts. */
struct verify_ctx {
	struct tpf_diag *d;
	const struct tpf_model *m; /* may be NULL */
	int64_t opset;             /* ONNX default domain; -1 when unknown */
	int64_t world;             /* tp_world_size from metadata; -1 when unknown */
	int in_function;           /* attribute references allowed, no types */
	int nomem;
	size_t errors;
	const struct tpf_node *onnx_node; /* first node of the ONNX domain seen */
	struct tpf_op_type *types;        /* scratch: one node's operand types */
	size_t cap_types;
};

/* Per-graph state, kept while subgraphs of the graph are verified. */
struct graph_state {
	const struct tpf_graph *g;
	const struct graph_state *parent;
	int depth;
	char where[320];    /* appended to messages: which subgraph */
	struct ptr_map pos; /* node -> 1-based position in the node list */
	const struct tpf_node **order;
	size_t n;
	uint8_t *vflags; /* by value id */
};

enum {
	VF_LISTED_INPUT = 1,
	VF_LISTED_INIT = 2,
};

static inline const char *vname(const struct tpf_value *v)
{
	return v && v->name ? v->name : "?";
}

static inline const char *dt_name(enum tpf_dtype t)
{
	const char *s = tpf_dtype_name(t);

	return s ? s : "?";
}

static inline int is_onnx_domain(const char *domain)
{
	return !domain || !*domain || strcmp(domain, "ai.onnx") == 0;
}

/* Reports an error about node n (the message starts "node 'NAME' (OP): "). */
void verify_node_error(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Reports running out of memory, once. */
void verify_oom(struct verify_ctx *c);

/* Kinds and pointers of every attribute, names unique.  Returns 0 when the
 * attributes can be looked up by name (every name present). */
int verify_node_attrs(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n);
/* Input and output counts, and the required inputs, from the op's record. */
void verify_node_arity(struct verify_ctx *c, const struct graph_state *s, const struct tpf_node *n);
/* Attributes, type constraints and the shape function's outputs, from the
 * op's record. */
void verify_node_record(struct verify_ctx *c, const struct graph_state *s,
                        const struct tpf_node *n);

#pragma GCC visibility pop

#endif /* TPF_VERIFY_PRIVATE_H */
