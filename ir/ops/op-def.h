/* SPDX-License-Identifier: MIT */
/*
 * Private to ir/: what tpfuse knows about one op, in one record, and the
 * helpers its shape function uses.
 *
 * A record (`const struct tpf_op_def tpf_op_def_ID`, one per entry of
 * ir/ops.def, in ir/ops/FAMILY.c) holds the op's domain, op type and
 * arity, the opset it appeared in, its operands with their type
 * constraints (as the ONNX spec lists them), its traits, its attributes
 * (kind, default, allowed values, opsets), ONE shape-and-type function and
 * the sharder's rule.
 * The verifier checks arity, attributes and type constraints from the
 * record and then calls the shape function (XLA's verifier calls the same
 * shape inference that inference uses); shape inference, the runtime's
 * concrete shapes and tpf_value_dtype call it too.
 *
 * A shape function reads c->in (types, maybe partly known, and the values
 * of small integer inputs) and the node's attributes, and writes c->out.
 * Before it runs, every present output has the dtype its type constraint
 * gets from the inputs (the first input of the same constraint whose dtype
 * is known) and an unknown shape.  It reports problems with op_error() and
 * never fails otherwise: what it cannot tell stays unknown.  Ops with the
 * UNARY or BROADCAST trait and no shape function get the trait's rule.
 */
#ifndef TPF_OP_DEF_H
#define TPF_OP_DEF_H

#include "tpf-ir.h"

/* Nothing here leaves the library: the shared object exports tpf_* only. */
#pragma GCC visibility push(hidden)

#define OP_MAX_OPERANDS 8 /* declared inputs or outputs of one record */
#define OP_MAX_TYPES 5    /* type constraints of one record, numbered 1.. */

/* ------------------------------------------------------------------ dtype sets */

#define DT(t) (UINT64_C(1) << TPF_DTYPE_##t)
#define DT_FLOATS (DT(FLOAT16) | DT(BFLOAT16) | DT(FLOAT) | DT(DOUBLE))
#define DT_FLOAT8                                                                                  \
	(DT(FLOAT8E4M3FN) | DT(FLOAT8E4M3FNUZ) | DT(FLOAT8E5M2) | DT(FLOAT8E5M2FNUZ))
#define DT_SIGNED_INTS (DT(INT8) | DT(INT16) | DT(INT32) | DT(INT64))
#define DT_UNSIGNED_INTS (DT(UINT8) | DT(UINT16) | DT(UINT32) | DT(UINT64))
#define DT_INTS (DT_SIGNED_INTS | DT_UNSIGNED_INTS)
#define DT_NUMERIC (DT_FLOATS | DT_INTS)
#define DT_INDEX (DT(INT32) | DT(INT64))
#define DT_SUB_BYTE (DT(INT4) | DT(UINT4) | DT(FLOAT4E2M1) | DT(INT2) | DT(UINT2))
#define DT_ALL                                                                                     \
	(DT_NUMERIC | DT(BOOL) | DT(STRING) | DT(COMPLEX64) | DT(COMPLEX128) | DT_FLOAT8 |          \
	 DT(FLOAT8E8M0) | DT_SUB_BYTE)

/* ------------------------------------------------------------------ the record */

enum op_operand_flag {
	OPND_OPTIONAL = 1, /* may be omitted (empty name) even below the minimum count */
};

/* type: index into the record's types[] (1..), 0: unconstrained. */
struct op_operand {
	const char *name;
	unsigned char type;
	unsigned char flags;
};

struct op_type_rule {
	const char *name;     /* "T", as the spec names it */
	uint64_t dtypes;      /* DT() bits allowed */
	const char *expected; /* for messages: "a float type (float16, bfloat16, float, double)" */
};

enum op_attr_flag {
	ATTR_REQUIRED = 1,     /* must be given */
	ATTR_DEFAULT = 2,      /* i, f or s hold the default */
	ATTR_DTYPE = 4,        /* an INT naming a tensor dtype */
	ATTR_DTYPE_ZERO = 8,   /* ... where 0 means "none" */
};

struct op_attr {
	const char *name;          /* NULL ends a list */
	enum tpf_attr_kind kind;
	unsigned flags;
	int64_t i;                 /* defaults */
	float f;
	const char *s;
	int64_t since, until;      /* allowed for since <= opset < until (0: no bound) */
	int64_t required_before;   /* required while opset < this (0: never) */
	const char *const *allowed; /* STRING: the values allowed, NULL-terminated */
};

#define ATTR_INT(nm, dflt) {.name = (nm), .kind = TPF_ATTR_INT, .flags = ATTR_DEFAULT, .i = (dflt)}
#define ATTR_FLOAT(nm, dflt) {.name = (nm), .kind = TPF_ATTR_FLOAT, .flags = ATTR_DEFAULT, .f = (dflt)}
#define ATTR_STRING(nm, dflt) {.name = (nm), .kind = TPF_ATTR_STRING, .flags = ATTR_DEFAULT, .s = (dflt)}
#define ATTR_OF(nm, k) {.name = (nm), .kind = (k)}

/* Type constraints that many records share: `nm` as the spec names it. */
#define TYPE_ANY(nm) {(nm), DT_ALL, "a tensor type"}
#define TYPE_FLOATS(nm) {(nm), DT_FLOATS, "a float type (float16, bfloat16, float, double)"}
#define TYPE_NUMERIC(nm) {(nm), DT_NUMERIC, "a numeric type"}
#define TYPE_BOOL(nm) {(nm), DT(BOOL), "bool"}
#define TYPE_INDEX(nm) {(nm), DT_INDEX, "int32 or int64"}
#define TYPE_INT64 {"tensor(int64)", DT(INT64), "int64"}

/* The input count before opset `before` (forms that moved an attribute to
 * an input), and inputs that may be omitted then (bit i: input i). */
struct op_form {
	int64_t before;
	int min_inputs, max_inputs;
	unsigned optional;
};

/* The sharder's rule of an op and the int that refines it (tpf-ir.h). */
struct op_shard {
	enum tpf_shard_rule rule;
	int arg;
};

#define SHARD(kind, a) {TPF_SHARD_RULE_##kind, (a)}

struct tpf_op_def {
	struct tpf_op_info info;  /* domain, op type, arity */
	int64_t since;            /* first opset of its domain that has it (0: any) */
	unsigned traits;          /* enum tpf_op_trait bits */
	unsigned host_inputs;     /* bit i: a kernel reads input i's values on
				   * the host, not only the shape function
				   * (tpf_op_host_input) */
	/* Operands in order; with max -1 the last one repeats. */
	struct op_operand inputs[OP_MAX_OPERANDS], outputs[OP_MAX_OPERANDS];
	struct op_type_rule types[OP_MAX_TYPES + 1]; /* [0] unused */
	const struct op_attr *attrs;                 /* NULL-name terminated, or NULL */
	struct op_form forms[2];                     /* by increasing `before`; 0 ends */
	void (*shape)(struct tpf_shape_call *c);
	struct op_shard shard;                       /* the sharder's rule (0: none) */
};

/* Families of ONNX-domain records (fields to start a record with), where
 * every member has the same operands and constraints:
 * - OP_UNARY: input `in` and output `out` of constraint 1 (`rule`), the
 *   UNARY trait (the output has the input's type and shape);
 * - OP_BINARY: inputs A and B and output C of constraint 1, broadcast;
 * - OP_COMPARE: inputs A and B of constraint 1, broadcast, and a bool
 *   output C (constraint 2, named `out_name`).
 * - OP_DATA: min_in..max_in inputs named `in` and one output `out`, all of
 *   any type (constraint 1, "T");
 * - OP_WITH_INT64 / OP_WITH_INDEX: `data` (constraint 1, any type) and an
 *   operand `operand` (constraint 2: int64, or "Tind" int32/int64) in, one
 *   output `out` of the data's type.
 * - OP_TO_INT64: one input `data` (constraint 1) and an int64 output
 *   `out` (constraint 2).
 * The rule of constraint 1 comes last. */
#define OP_UNARY(op_type, since_opset, in, out, ... /* rule */)                                     \
	.info = {"", op_type, 1, 1, 1, 1}, .since = (since_opset), .traits = TPF_OP_TRAIT_UNARY,   \
	.inputs = {{in, 1}}, .outputs = {{out, 1}}, .types = {[1] = __VA_ARGS__}
#define OP_BINARY(op_type, since_opset, ... /* rule */)                                            \
	.info = {"", op_type, 2, 2, 1, 1}, .since = (since_opset),                                 \
	.traits = TPF_OP_TRAIT_BROADCAST, .inputs = {{"A", 1}, {"B", 1}}, .outputs = {{"C", 1}},   \
	.types = {[1] = __VA_ARGS__}
#define OP_COMPARE(op_type, since_opset, out_name, ... /* rule */)                                 \
	.info = {"", op_type, 2, 2, 1, 1}, .since = (since_opset),                                 \
	.traits = TPF_OP_TRAIT_BROADCAST | TPF_OP_TRAIT_COMPARISON,                                \
	.inputs = {{"A", 1}, {"B", 1}}, .outputs = {{"C", 2}},                                     \
	.types = {[1] = __VA_ARGS__, [2] = TYPE_BOOL(out_name)}

#define OP_DATA(op_type, since_opset, min_in, max_in, in, out)                                     \
	.info = {"", op_type, min_in, max_in, 1, 1}, .since = (since_opset),                       \
	.inputs = {{in, 1}}, .outputs = {{out, 1}}, .types = {[1] = TYPE_ANY("T")}
#define OP_WITH_INT64(op_type, since_opset, min_in, data, operand, out)                            \
	.info = {"", op_type, min_in, 2, 1, 1}, .since = (since_opset),                            \
	.inputs = {{data, 1}, {operand, 2}}, .outputs = {{out, 1}},                                \
	.types = {[1] = TYPE_ANY("T"), [2] = TYPE_INT64}
#define OP_WITH_INDEX(op_type, since_opset, data, operand, out)                                    \
	.info = {"", op_type, 2, 2, 1, 1}, .since = (since_opset),                                 \
	.inputs = {{data, 1}, {operand, 2}}, .outputs = {{out, 1}},                                \
	.types = {[1] = TYPE_ANY("T"), [2] = TYPE_INDEX("Tind")}
#define OP_TO_INT64(op_type, since_opset, out, ... /* rule */)                                     \
	.info = {"", op_type, 1, 1, 1, 1}, .since = (since_opset), .inputs = {{"data", 1}},       \
	.outputs = {{out, 2}}, .types = {[1] = __VA_ARGS__, [2] = TYPE_INT64}

/* The record of op (UNKNOWN's for out-of-range values). */
const struct tpf_op_def *op_def(enum tpf_op op);
/* The declared operand that input / output i is (the last one repeats for
 * variadic ops); NULL past the declared ones. */
const struct op_operand *op_def_input(const struct tpf_op_def *d, size_t i);
const struct op_operand *op_def_output(const struct tpf_op_def *d, size_t i);
const struct op_attr *op_def_attr(const struct tpf_op_def *d, const char *name);
/* The input counts allowed at `opset` (<= 0: unknown). */
void op_def_arity(const struct tpf_op_def *d, int64_t opset, int *min_in, int *max_in);
/* Whether input i may be omitted at `opset` (past the minimum count, or
 * marked optional by the record or the opset's form). */
int op_def_input_optional(const struct tpf_op_def *d, int64_t opset, size_t i);

/* ------------------------------------------------------------------ shape helpers */

void op_error(struct tpf_shape_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error "node 'NAME' (OP): MESSAGE" + where (may be NULL) into d. */
void op_node_verror(struct tpf_diag *d, const struct tpf_node *n, const char *where,
		    const char *fmt, va_list ap);

/* Input i, or an omitted-operand type when i is past the inputs. */
const struct tpf_op_type *op_in(const struct tpf_shape_call *c, size_t i);
int op_in_present(const struct tpf_shape_call *c, size_t i);
/* Output j, or NULL when the node has no such output. */
struct tpf_op_type *op_out(struct tpf_shape_call *c, size_t j);
/* Name of input i's value, for messages. */
const char *op_in_name(const struct tpf_shape_call *c, size_t i);

/* Attributes: the node's value, else the record's default.  1 when the
 * value is known, 0 when not (absent without a default, a reference to a
 * caller attribute in a function body, or another kind). */
int op_attr_int(const struct tpf_shape_call *c, const char *name, int64_t *out);
int op_attr_float(const struct tpf_shape_call *c, const char *name, float *out);
int op_attr_string(const struct tpf_shape_call *c, const char *name, const char **out);
/* An INTS attribute of at most max entries: the count, or -1. */
int op_attr_ints(const struct tpf_shape_call *c, const char *name, int64_t *out, size_t max);
int op_attr_given(const struct tpf_shape_call *c, const char *name);

static inline int dim_is_static(const struct tpf_dim *d)
{
	return !d->param && d->value >= 0;
}

static inline struct tpf_dim dim_of(int64_t v)
{
	struct tpf_dim d = {v < 0 ? -1 : v, NULL, NULL};

	return d;
}

static inline struct tpf_dim dim_unknown(void)
{
	struct tpf_dim d = {-1, NULL, NULL};

	return d;
}

/* A value (struct tpf_op_type.values) that is not known, unlike a
 * negative integer such as Reshape's -1. */
#define OP_VALUE_UNKNOWN INT64_MIN

static inline struct tpf_dim value_unknown(void)
{
	struct tpf_dim d = {OP_VALUE_UNKNOWN, NULL, NULL};

	return d;
}

/* Equality of two dims as far as the call's graph knows (tpf_graph_dims_equal). */
enum tpf_answer op_dims_equal(const struct tpf_shape_call *c, const struct tpf_dim *a,
			      const struct tpf_dim *b);
/* In INFER mode, records that the op's semantics make a and b equal (the
 * first joins the second's class). */
void op_dims_unify(struct tpf_shape_call *c, const struct tpf_dim *a, const struct tpf_dim *b);

/* t gets rank `rank` with unknown dims. */
void op_type_set_rank(struct tpf_op_type *t, int rank);
/* t gets x's shape (dims, no values) and `dtype`. */
void op_type_shape_of(struct tpf_op_type *t, const struct tpf_op_type *x);
/* t gets x's values (the elements of a small integer tensor). */
void op_type_copy_values(struct tpf_op_type *t, const struct tpf_op_type *x);
/* Numpy broadcasting of inputs idx[0..k) into out's shape; -1 (reported)
 * when two dims cannot broadcast.  Symbolic dims that meet unify. */
int op_broadcast(struct tpf_shape_call *c, const size_t *idx, size_t k, struct tpf_op_type *out);
/* Broadcasting of every input (any count). */
int op_broadcast_all(struct tpf_shape_call *c, struct tpf_op_type *out);
/* The same over explicit types (batch dims of MatMul, Expand's target). */
int op_broadcast_types(struct tpf_shape_call *c, const struct tpf_op_type *const *ts,
		       const size_t *labels, size_t k, struct tpf_op_type *out);

/* An axis for rank r: 0 and *out normalized, -1 out of range. */
int op_norm_axis(int64_t axis, int rank, int64_t *out);
/* Reads attribute `attr` (default from the record) as an axis of rank
 * `rank`: 1 and *out set, 0 when the axis or rank is unknown, -1 when out of
 * range (reported as "attribute 'axis' = 3 is out of range for rank 1"). */
int op_attr_axis(struct tpf_shape_call *c, const char *attr, int rank, int64_t *out);
/* Normalizes axes[0..n) of a rank-`rank` tensor in place: 0, or -1 when
 * one is out of range ("axis 3 is out of range for rank 2") or, with
 * `twice` (may be NULL), given twice ("axis 1 <twice>"), reported. */
int op_norm_axes(struct tpf_shape_call *c, int64_t *axes, int n, int rank, const char *twice);
/* Static values of an integer operand: the count (<= max), or -1 when not
 * every value is known and static (symbolic or OP_VALUE_UNKNOWN). */
int op_static_values(const struct tpf_op_type *t, int64_t *out, int max);
/* Axes of Squeeze/Unsqueeze/Reduce*: the attribute, else input 1.  The
 * count, -1 when absent, -2 when given as an input whose values are unknown. */
int op_read_axes(const struct tpf_shape_call *c, int64_t *axes);
/* Whether a dtype attribute value names a tensor dtype. */
int op_valid_dtype(int64_t v);

/* What a model says for shape functions: the ONNX default domain's opset
 * and the tp_world_size metadata; -1 when absent (or m NULL). */
int64_t op_model_opset(const struct tpf_model *m);
int64_t op_model_world(const struct tpf_model *m);
/* The hash of a name (dim classes, the verifier's name sets). */
size_t op_name_hash(const char *s);

/* "bf16[B,4096]" into buf. */
const char *op_type_str(const struct tpf_op_type *t, char *buf, size_t size);

/* Fills t from what the IR knows of v: its tensor type (or its
 * initializer's), and the values of a small int32/int64 constant. */
void op_type_from_value(const struct tpf_value *v, struct tpf_op_type *t);

/* The records, one per line of ops.def. */
#define TPF_OP(id, family) extern const struct tpf_op_def tpf_op_def_##id;
#include "ops.def"
#undef TPF_OP

#pragma GCC visibility pop

#endif /* TPF_OP_DEF_H */
