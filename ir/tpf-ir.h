/*
 * tpfuse IR: the graph that every part of tpfuse reads and rewrites.
 *
 * A tour in ten lines:
 *   struct tpf_diag *d = tpf_diag_create();
 *   struct tpf_model *m;
 *   tpf_model_load_file("model.onnx", &(struct tpf_load_options){0}, &m, d);  load
 *   tpf_model_verify(m, d);                                 check SSA, arity, dtypes
 *   tpf_model_infer_shapes(m, d);                           fill value types
 *   tpf_pipeline_run(m, "default", ...);                    optimize (passes/)
 *   tpf_model_print_text(m, stdout);                        a deterministic dump
 *   tpf_model_save_file(m, "out.onnx", NULL, d);            export
 *   tpf_model_free(m); tpf_diag_free(d);
 *
 * Ownership: a model owns its graphs; a graph owns an arena from which its
 * nodes, values, names, attributes and small tensors are allocated; all die
 * with the model.  Weight bytes are either borrowed (mmap of an external data
 * file, or the buffer a model was loaded from, kept alive by the model) or
 * copied into the arena; `struct tpf_tensor` says which.
 *
 * Errors: every fallible call returns enum tpf_status (0 = TPF_OK) and adds
 * human-readable messages naming the node to a struct tpf_diag.  Library code
 * never prints and never aborts on bad input.
 */
#ifndef TPF_IR_H
#define TPF_IR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPF_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------ status */

enum tpf_status {
	TPF_OK = 0,
	TPF_ERR_INVALID,     /* bad argument or malformed model */
	TPF_ERR_NOMEM,       /* an allocation failed */
	TPF_ERR_IO,          /* a file could not be read or written */
	TPF_ERR_PARSE,       /* bytes are not a valid ONNX protobuf */
	TPF_ERR_UNSUPPORTED, /* valid input that tpfuse does not handle */
	TPF_ERR_VERIFY,      /* the graph breaks an IR invariant */
	TPF_ERR_LIMIT,       /* a size or count overflows a limit */
	TPF_ERR_RUNTIME,     /* a backend or communicator failed */
	TPF_ERR_CONFLICT,    /* an output would replace an input or another output */
	TPF_STATUS_COUNT
};

const char *tpf_status_name(enum tpf_status s);

/* --------------------------------------------------------------- diagnostics
 * A growable list of messages.  Each message has a severity and text; the
 * text of an error about a node starts with "node 'NAME' (OP): ". */

enum tpf_severity { TPF_SEV_NOTE, TPF_SEV_WARNING, TPF_SEV_ERROR, TPF_SEVERITY_COUNT };

struct tpf_diag_entry {
	enum tpf_severity severity;
	char *text;
};

struct tpf_diag {
	struct tpf_diag_entry *entries;
	size_t count, capacity;
	size_t error_count;
	size_t max_entries; /* 0: unlimited; otherwise later entries are counted, not kept */
	size_t dropped;
};

struct tpf_diag *tpf_diag_create(void);
void tpf_diag_free(struct tpf_diag *d);
void tpf_diag_clear(struct tpf_diag *d);
/* Adding a message never fails visibly: on allocation failure the message is
 * counted in `dropped`.  `d` may be NULL (the message is discarded). */
void tpf_diag_add(struct tpf_diag *d, enum tpf_severity sev, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void tpf_diag_vadd(struct tpf_diag *d, enum tpf_severity sev, const char *fmt, va_list ap);
/* Convenience: adds an error and returns `st`. */
enum tpf_status tpf_diag_fail(struct tpf_diag *d, enum tpf_status st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prints "error: TEXT" / "warning: TEXT" / "note: TEXT" lines. */
void tpf_diag_print(const struct tpf_diag *d, FILE *f);

/* -------------------------------------------------------------- allocation
 * All library allocations go through these, so tests can fail the N-th one. */

void *tpf_malloc(size_t n);
void *tpf_calloc(size_t count, size_t size);
void *tpf_realloc(void *p, size_t n);
void tpf_free(void *p);
char *tpf_strdup(const char *s);
/* Fault injection: fail the N-th allocation from now (1-based; 0 disables). */
void tpf_alloc_fail_after(uint64_t n);
uint64_t tpf_alloc_count(void);
/* Checked arithmetic: returns 0 and sets *out, or returns -1 on overflow. */
int tpf_mul_size(size_t a, size_t b, size_t *out);
int tpf_add_size(size_t a, size_t b, size_t *out);

/* Opens PATH for reading ("rb") only when it is a regular file: the open does
 * not block on a named pipe, and a pipe, a device or a folder is refused with
 * "WHAT PATH: not a regular file" (TPF_ERR_IO), as is a file that cannot be
 * opened.  Returns NULL with the status in *st (when st is not NULL). */
FILE *tpf_fopen_regular(const char *path, const char *what, struct tpf_diag *d,
                        enum tpf_status *st);

/* ------------------------------------------------------------------ arena */

struct tpf_arena;
struct tpf_arena *tpf_arena_create(void);
void tpf_arena_free(struct tpf_arena *a);
void *tpf_arena_alloc(struct tpf_arena *a, size_t n); /* zeroed, 16-aligned; NULL on failure */
char *tpf_arena_strdup(struct tpf_arena *a, const char *s);
char *tpf_arena_strndup(struct tpf_arena *a, const char *s, size_t n);
void *tpf_arena_memdup(struct tpf_arena *a, const void *p, size_t n);
size_t tpf_arena_bytes(const struct tpf_arena *a);

/* ------------------------------------------------------------------ dtypes
 * Values equal ONNX's TensorProto.DataType numbers. */

enum tpf_dtype {
	TPF_DTYPE_UNDEFINED = 0,
	TPF_DTYPE_FLOAT = 1,
	TPF_DTYPE_UINT8 = 2,
	TPF_DTYPE_INT8 = 3,
	TPF_DTYPE_UINT16 = 4,
	TPF_DTYPE_INT16 = 5,
	TPF_DTYPE_INT32 = 6,
	TPF_DTYPE_INT64 = 7,
	TPF_DTYPE_STRING = 8,
	TPF_DTYPE_BOOL = 9,
	TPF_DTYPE_FLOAT16 = 10,
	TPF_DTYPE_DOUBLE = 11,
	TPF_DTYPE_UINT32 = 12,
	TPF_DTYPE_UINT64 = 13,
	TPF_DTYPE_COMPLEX64 = 14,
	TPF_DTYPE_COMPLEX128 = 15,
	TPF_DTYPE_BFLOAT16 = 16,
	TPF_DTYPE_FLOAT8E4M3FN = 17,
	TPF_DTYPE_FLOAT8E4M3FNUZ = 18,
	TPF_DTYPE_FLOAT8E5M2 = 19,
	TPF_DTYPE_FLOAT8E5M2FNUZ = 20,
	TPF_DTYPE_UINT4 = 21,
	TPF_DTYPE_INT4 = 22,
	TPF_DTYPE_FLOAT4E2M1 = 23,
	TPF_DTYPE_FLOAT8E8M0 = 24,
	TPF_DTYPE_UINT2 = 25,
	TPF_DTYPE_INT2 = 26,
	TPF_DTYPE_COUNT
};

/* "f32", "bf16", "f8e4m3fn", ... short names used in dumps; "?" for unknown. */
const char *tpf_dtype_name(enum tpf_dtype t);
/* ONNX enum spelling: "FLOAT", "BFLOAT16", ... */
const char *tpf_dtype_onnx_name(enum tpf_dtype t);
int tpf_dtype_from_name(const char *name, enum tpf_dtype *out); /* accepts both spellings; 0 ok */
/* Bits per element (4 for INT4/UINT4/FLOAT4E2M1, 2 for INT2/UINT2); 0 for
 * STRING and UNDEFINED. */
unsigned tpf_dtype_bits(enum tpf_dtype t);
int tpf_dtype_is_float(enum tpf_dtype t); /* any floating type incl. fp8/fp4 */
int tpf_dtype_is_valid(int t);
/* Bytes for `count` elements, packed sub-byte types rounded up; -1 on overflow. */
int tpf_dtype_storage_bytes(enum tpf_dtype t, uint64_t count, size_t *out);

/* ------------------------------------------------------------------ shapes */

#define TPF_MAX_RANK 64

/* A dimension: static (value >= 0, param NULL), symbolic (param != NULL), or
 * unknown (value < 0, param NULL). */
struct tpf_dim {
	int64_t value;
	const char *param;
	const char *denotation; /* ONNX dimension denotation, or NULL */
};

/* rank < 0: unknown rank. */
struct tpf_shape {
	int rank;
	struct tpf_dim *dims;
};

/* Product of static dims; -1 if any dim is not static or on overflow. */
int64_t tpf_shape_numel(const struct tpf_shape *s);

/* ------------------------------------------------------------------ tensors */

struct tpf_tensor {
	const char *name;
	enum tpf_dtype dtype;
	int rank;
	int64_t *dims;
	/* Little-endian packed element bytes (ONNX raw_data layout), nbytes long.
	 * For STRING tensors: data is NULL and strings/string_lens hold elements. */
	const void *data;
	size_t nbytes;
	char **strings;
	size_t *string_lens;
	size_t n_strings;
	/* Where the bytes came from, for export and for `tpf dump`. */
	int is_external;            /* loaded from (or to be saved as) external data */
	const char *ext_location;   /* as written in the model, relative to its folder */
	int64_t ext_offset, ext_length;
	const char *doc_string;
	/* metadata_props of the TensorProto */
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
};

/* Number of elements; -1 on overflow. */
int64_t tpf_tensor_numel(const struct tpf_tensor *t);

/* --------------------------------------------------------------- opaque blobs
 * ONNX pieces that tpfuse keeps but does not model (TypeProto of sequences,
 * maps and optionals, sparse tensors, training info, ...): the packed
 * protobuf bytes of that message, copied into the owning arena. */
struct tpf_blob {
	const uint8_t *data;
	size_t size;
};

/* ------------------------------------------------------------------ types */

enum tpf_type_kind {
	TPF_TYPE_NONE = 0,  /* no type information */
	TPF_TYPE_TENSOR,    /* dtype + shape */
	TPF_TYPE_OPAQUE,    /* sequence/map/optional/sparse: blob holds the packed TypeProto */
	TPF_TYPE_KIND_COUNT
};

struct tpf_type {
	enum tpf_type_kind kind;
	enum tpf_dtype dtype;
	struct tpf_shape shape;    /* rank -1 when unknown */
	const char *denotation;    /* TypeProto.denotation, or NULL */
	struct tpf_blob opaque;    /* TPF_TYPE_OPAQUE only */
};

/* ------------------------------------------------------------------ ops
 * One list (ops.def) generates the op enum; each op has one record under
 * ir/ops/ (domain, op type, opset range, operands, type constraints,
 * traits, attributes, one shape-and-type function) that the verifier,
 * shape inference, the runtime's concrete shapes and the passes' dtype
 * questions all read.  Nodes of ops not in the list get TPF_OP_UNKNOWN and
 * keep their domain/op_type strings. */

enum tpf_op {
#define TPF_OP(id, family) TPF_OP_##id,
#include "ops.def"
#undef TPF_OP
	TPF_OP_COUNT
};

struct tpf_op_info {
	const char *domain; /* "" for the ONNX domain */
	const char *name;
	int min_inputs, max_inputs;   /* max -1: variadic */
	int min_outputs, max_outputs;
};

const struct tpf_op_info *tpf_op_info(enum tpf_op op);
/* Looks up (domain, op_type); "ai.onnx" is treated as "". */
enum tpf_op tpf_op_lookup(const char *domain, const char *op_type);

/* Traits of an op, from its record. */
enum tpf_op_trait {
	TPF_OP_TRAIT_UNARY = 1u << 0,        /* one input; output 0 has its shape */
	TPF_OP_TRAIT_BROADCAST = 1u << 1,    /* inputs broadcast (numpy rules) */
	TPF_OP_TRAIT_COMPARISON = 1u << 2,   /* produces bool */
	TPF_OP_TRAIT_COLLECTIVE = 1u << 3,   /* exchanges data between ranks */
	TPF_OP_TRAIT_CONTROL_FLOW = 1u << 4, /* holds subgraphs it runs */
	TPF_OP_TRAIT_FUSED = 1u << 5,        /* an ai.tpfuse op (docs/ops.md) */
};
int tpf_op_has_trait(enum tpf_op op, enum tpf_op_trait trait);
/* Whether a kernel of op reads input i's values on the host (Slice's
 * starts, a Reduce's axes, TopK's K, Pad's pads and axes), not only the
 * shape function: the runtime keeps such inputs' host copies. */
int tpf_op_host_input(enum tpf_op op, size_t i);

/* The sharder's rule for an op (tpfuse shard, the `shard` pass): how the
 * shardings of its operands map to its outputs', from its record.  `arg`
 * refines the rule as the comment says; NONE: a split operand is gathered. */
enum tpf_shard_rule {
	TPF_SHARD_RULE_NONE = 0,
	TPF_SHARD_RULE_REPLICATED,   /* outputs replicated whatever the operands (Shape, Size) */
	TPF_SHARD_RULE_UNARY,        /* the sharding passes; arg 1: partial sums pass too */
	TPF_SHARD_RULE_BROADCAST,    /* numpy broadcasting; arg: enum tpf_shard_arith */
	TPF_SHARD_RULE_QUANT,        /* unary when its scale and zero point are per tensor */
	TPF_SHARD_RULE_ALONG_AXIS,   /* works along attribute `axis`; arg: its default */
	TPF_SHARD_RULE_ARG_EXTREME,  /* ArgMax / ArgMin: along `axis`, `keepdims` */
	TPF_SHARD_RULE_CUMSUM,       /* along the axis its second input names */
	TPF_SHARD_RULE_TRILU,        /* on the last two axes */
	TPF_SHARD_RULE_REDUCE,       /* over `axes`; arg: enum tpf_shard_arith */
	TPF_SHARD_RULE_NORM,         /* over the last axes; arg: its data operands (a skip: 2) */
	TPF_SHARD_RULE_MATMUL,
	TPF_SHARD_RULE_GEMM,
	TPF_SHARD_RULE_CONV,
	TPF_SHARD_RULE_PAD,
	TPF_SHARD_RULE_SCATTER_ND,
	TPF_SHARD_RULE_ELEMENTS,     /* Gather/ScatterElements; arg 1: a scatter */
	TPF_SHARD_RULE_RESHAPE,
	TPF_SHARD_RULE_FLATTEN,
	TPF_SHARD_RULE_TRANSPOSE,
	TPF_SHARD_RULE_UNSQUEEZE,    /* arg 1: Squeeze */
	TPF_SHARD_RULE_EXPAND,
	TPF_SHARD_RULE_CONSTANT_OF_SHAPE,
	TPF_SHARD_RULE_SLICE,
	TPF_SHARD_RULE_SPLIT,
	TPF_SHARD_RULE_CONCAT,
	TPF_SHARD_RULE_GATHER,
	TPF_SHARD_RULE_RESIZE,       /* no rule (as NONE); its output shape comes from values */
};

/* The arithmetic a BROADCAST or REDUCE rule does, where the sharder
 * tells it apart: partial sums pass a SUM (Add, Sub, Sum), a PRODUCT with
 * one partial operand, a QUOTIENT with a partial numerator. */
enum tpf_shard_arith {
	TPF_SHARD_OTHER = 0,
	TPF_SHARD_SUM,
	TPF_SHARD_PRODUCT,
	TPF_SHARD_QUOTIENT,
	TPF_SHARD_MAX,
	TPF_SHARD_MIN,
};

/* The rule of op's record (*arg set when non-NULL). */
enum tpf_shard_rule tpf_op_shard_rule(enum tpf_op op, int *arg);
/* The rule of node n: its op's, or for an ONNX-domain (or com.microsoft)
 * op that tpfuse has no record of, the rule the ONNX spec's semantics give
 * it (Gelu is unary, Sum broadcasts, ReduceProd reduces, ...). */
struct tpf_node;
enum tpf_shard_rule tpf_node_shard_rule(const struct tpf_node *n, int *arg);
/* 1 when node n's op draws random numbers (RandomNormal, RandomUniform and
 * their -Like forms, Multinomial, Bernoulli, Dropout): two runs differ. */
int tpf_node_is_random(const struct tpf_node *n);

/* The project's own ONNX domain for fused ops. */
#define TPF_DOMAIN "ai.tpfuse"
#define TPF_MS_DOMAIN "com.microsoft"

/* ------------------------------------------------------------------ attributes */

enum tpf_attr_kind {
	/* Values equal ONNX AttributeProto.AttributeType numbers. */
	TPF_ATTR_UNDEFINED = 0,
	TPF_ATTR_FLOAT = 1,
	TPF_ATTR_INT = 2,
	TPF_ATTR_STRING = 3,
	TPF_ATTR_TENSOR = 4,
	TPF_ATTR_GRAPH = 5,
	TPF_ATTR_FLOATS = 6,
	TPF_ATTR_INTS = 7,
	TPF_ATTR_STRINGS = 8,
	TPF_ATTR_TENSORS = 9,
	TPF_ATTR_GRAPHS = 10,
	TPF_ATTR_SPARSE_TENSOR = 11,
	TPF_ATTR_SPARSE_TENSORS = 12,
	TPF_ATTR_TYPE_PROTO = 13,
	TPF_ATTR_TYPE_PROTOS = 14,
	TPF_ATTR_KIND_COUNT
};

struct tpf_graph;

struct tpf_attr {
	const char *name;
	enum tpf_attr_kind kind;
	const char *ref_attr_name; /* inside functions: refers to a caller attribute, or NULL */
	const char *doc_string;
	/* scalars */
	int64_t i;
	float f;
	const char *s; /* bytes; may contain NUL, see s_len */
	size_t s_len;
	struct tpf_tensor *t;
	struct tpf_graph *g;
	struct tpf_blob blob; /* SPARSE_TENSOR or TYPE_PROTO: packed message */
	/* lists: n elements in the array matching kind */
	size_t n;
	int64_t *ints;
	float *floats;
	const char **strings;
	size_t *string_lens;
	struct tpf_tensor **tensors;
	struct tpf_graph **graphs;
	struct tpf_blob *blobs; /* SPARSE_TENSORS or TYPE_PROTOS */
};

/* ------------------------------------------------------------------ values */

struct tpf_node;

struct tpf_use {
	struct tpf_node *node;
	/* >= 0: operand index in node->inputs;
	 * < 0: the value is captured by a subgraph of node: implicit input -1-index */
	int index;
};

enum tpf_value_kind {
	TPF_VALUE_NODE_OUTPUT = 0, /* producer != NULL */
	TPF_VALUE_GRAPH_INPUT,     /* listed in graph->inputs */
	TPF_VALUE_INITIALIZER,     /* init != NULL; may also be a graph input (default) */
	TPF_VALUE_OUTER,           /* in a subgraph: refers to `outer` in an enclosing graph */
	TPF_VALUE_KIND_COUNT
};

struct tpf_value {
	const char *name;          /* never NULL; unique within its graph */
	enum tpf_value_kind kind;
	struct tpf_type type;
	const char *doc_string;    /* from ValueInfoProto */
	struct tpf_graph *graph;   /* owning graph */
	struct tpf_node *producer; /* NODE_OUTPUT only */
	int producer_index;        /* output index in producer */
	struct tpf_tensor *init;   /* INITIALIZER only (also set for an input with a default) */
	struct tpf_value *outer;   /* OUTER only */
	int is_graph_input;        /* listed in graph->inputs (kind may be INITIALIZER) */
	int has_value_info;        /* appeared in graph.value_info (export keeps it) */
	struct tpf_use *uses;      /* ordered: graph order of the using nodes at creation, then append */
	size_t n_uses, cap_uses;
	uint32_t n_output_refs;    /* slots of graph->outputs holding this value */
	uint32_t id;               /* creation index in graph->values */
	uint32_t mark;             /* scratch for passes; no meaning across calls */
	/* metadata_props of ValueInfoProto */
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
	/* tpf_value_constant's tensor for the output of a Constant given as
	 * value_float, value_int, value_floats or value_ints: made once (in the
	 * graph's arena) and kept while that attribute stays the same */
	struct tpf_tensor *attr_const;
	const struct tpf_attr *attr_const_of;
};

/* ------------------------------------------------------------------ nodes */

struct tpf_node {
	const char *name;     /* ONNX node name; may be "" */
	enum tpf_op op;
	const char *domain;   /* "" for ONNX */
	const char *op_type;
	const char *overload; /* NodeProto.overload, or NULL */
	const char *doc_string;
	struct tpf_value **inputs; /* NULL entry = omitted optional input ("") */
	size_t n_inputs;
	struct tpf_value **outputs; /* NULL entry = omitted optional output ("") */
	size_t n_outputs;
	struct tpf_value **implicit_inputs; /* outer values used by this node's subgraphs */
	size_t n_implicit;
	struct tpf_attr *attrs;
	size_t n_attrs;
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
	struct tpf_blob *device_configurations; /* NodeDeviceConfigurationProto, packed */
	size_t n_device_configurations;
	/* Set by passes for dumps: the pass and pattern that created the node. */
	const char *origin_pass, *origin_pattern;
	struct tpf_graph *graph;
	struct tpf_node *prev, *next; /* graph order */
	uint32_t id;                  /* creation index, stable within one graph */
	uint32_t mark;                /* scratch for passes */
	int erased;
};

/* ------------------------------------------------------------------ graphs */

struct tpf_graph {
	struct tpf_arena *arena;
	const char *name;
	const char *doc_string;
	struct tpf_graph *parent;      /* enclosing graph for subgraphs, NULL at top */
	struct tpf_node *owner;        /* node whose attribute holds this subgraph */
	struct tpf_node *first, *last; /* node list in graph order */
	size_t n_nodes;
	struct tpf_value **values;     /* every value ever created, by id (erased ones NULL) */
	size_t n_values, cap_values;
	struct tpf_value **inputs;     /* graph inputs in order */
	size_t n_inputs, cap_inputs;
	struct tpf_value **outputs;    /* graph outputs in order (may repeat a value) */
	size_t n_outputs, cap_outputs;
	struct tpf_value **initializers; /* in import order */
	size_t n_initializers, cap_initializers;
	struct tpf_value **value_infos;  /* value_info entries with no other home (e.g. names not produced) */
	size_t n_value_infos, cap_value_infos;
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
	struct tpf_blob *sparse_initializers; /* packed SparseTensorProto */
	size_t n_sparse_initializers;
	struct tpf_blob *quantization_annotations; /* packed TensorAnnotation */
	size_t n_quantization_annotations;
	void *name_index; /* private: name -> value hash table */
	uint32_t next_node_id;
	uint32_t next_temp;           /* private: counter for fresh names */
	struct tpf_graph **children;  /* subgraphs created with this graph as parent (owned) */
	size_t n_children, cap_children;
	void *dim_classes;            /* private: symbolic dims proven equal (union-find, in the arena) */
};

/* ------------------------------------------------------------------ models */

struct tpf_opset {
	const char *domain;
	int64_t version;
};

struct tpf_function {
	const char *name;
	const char *domain;
	const char *overload;
	const char *doc_string;
	/* body: inputs/outputs are the formal parameters (types unknown) */
	struct tpf_graph *body;
	const char **attribute_names; /* FunctionProto.attribute */
	size_t n_attribute_names;
	struct tpf_attr *attribute_protos; /* FunctionProto.attribute_proto (defaults) */
	size_t n_attribute_protos;
	struct tpf_opset *opsets;
	size_t n_opsets;
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
};

struct tpf_model {
	struct tpf_arena *arena; /* model-level strings, functions */
	int64_t ir_version;
	const char *producer_name, *producer_version, *domain, *doc_string;
	int64_t model_version;
	struct tpf_opset *opsets;
	size_t n_opsets;
	size_t n_metadata;
	const char **metadata_keys, **metadata_values;
	struct tpf_graph *graph;
	struct tpf_function *functions;
	size_t n_functions;
	struct tpf_blob *training_info; /* packed TrainingInfoProto */
	size_t n_training_info;
	struct tpf_blob *configuration; /* packed DeviceConfigurationProto */
	size_t n_configuration;
	/* Folder of the model file ("" when loaded from memory): external data root. */
	const char *base_dir;
	/* private: mappings and buffers the tensors borrow from */
	void *backing;
};

/* ------------------------------------------------------------ model / graph API */

struct tpf_model *tpf_model_create(void);          /* empty model with an empty graph; NULL on OOM */
void tpf_model_free(struct tpf_model *m);
/* Releases model->backing (mappings and buffers); defined by the ONNX importer. */
void tpf_model_backing_release(void *backing);
int64_t tpf_model_opset(const struct tpf_model *m, const char *domain); /* -1 if not imported */
enum tpf_status tpf_model_set_opset(struct tpf_model *m, const char *domain, int64_t version);
/* Raises the default-domain opset to `to`, rewriting what the newer opset
 * spells differently (the Reduce ops' `axes` attribute becomes an input;
 * ir/opset-upgrade.c).  TPF_ERR_UNSUPPORTED when a node would change meaning.
 * *undo (freed with tpf_opset_raise_free) lets tpf_opset_raise_undo put the
 * model back as it was. */
struct tpf_opset_raise;
enum tpf_status tpf_model_raise_opset(struct tpf_model *m, int64_t to,
				      struct tpf_opset_raise **undo, struct tpf_diag *d);
enum tpf_status tpf_opset_raise_undo(struct tpf_model *m, struct tpf_opset_raise *r);
void tpf_opset_raise_free(struct tpf_opset_raise *r);
/* metadata_props lookup; NULL if absent */
const char *tpf_model_metadata(const struct tpf_model *m, const char *key);
enum tpf_status tpf_model_set_metadata(struct tpf_model *m, const char *key, const char *value);

struct tpf_graph *tpf_graph_create(struct tpf_graph *parent); /* own arena */
void tpf_graph_free(struct tpf_graph *g); /* frees subgraphs held by attributes too */

/* Values.  Names must be unique in the graph; NULL name: a fresh "_tN" name. */
struct tpf_value *tpf_graph_find_value(const struct tpf_graph *g, const char *name);
/* Looks in g, then enclosing graphs. */
struct tpf_value *tpf_graph_resolve(const struct tpf_graph *g, const char *name);
struct tpf_value *tpf_graph_add_input(struct tpf_graph *g, const char *name,
				      enum tpf_dtype dtype, int rank, const int64_t *dims);
/* dims given as strings: "" or NULL for unknown, a number, or a symbol */
struct tpf_value *tpf_graph_add_input_sym(struct tpf_graph *g, const char *name,
					  enum tpf_dtype dtype, int rank, const char *const *dims);
/* Takes a copy of `data` (nbytes) into the arena. */
struct tpf_value *tpf_graph_add_initializer(struct tpf_graph *g, const char *name,
					    enum tpf_dtype dtype, int rank, const int64_t *dims,
					    const void *data, size_t nbytes);
/* Adopts a tensor already allocated in g's arena (no copy). */
struct tpf_value *tpf_graph_add_initializer_tensor(struct tpf_graph *g, struct tpf_tensor *t);
enum tpf_status tpf_graph_add_output(struct tpf_graph *g, struct tpf_value *v);
/* Makes graph output `index` be `v` (graph->outputs must change only
 * through these calls and tpf_value_replace_uses). */
enum tpf_status tpf_graph_set_output(struct tpf_graph *g, size_t index, struct tpf_value *v);
/* Removes an initializer that nothing uses (TPF_ERR_INVALID otherwise); its
 * name becomes free.  The value must not be used afterwards. */
enum tpf_status tpf_graph_remove_initializer(struct tpf_graph *g, struct tpf_value *v);
struct tpf_value *tpf_graph_new_value(struct tpf_graph *g, const char *name); /* detached, kind NODE_OUTPUT without producer */
/* A unique name with the given prefix ("prefix", "prefix_1", ...), in the arena. */
const char *tpf_graph_unique_name(struct tpf_graph *g, const char *prefix);
enum tpf_status tpf_value_rename(struct tpf_value *v, const char *name);
void tpf_value_set_type(struct tpf_value *v, enum tpf_dtype dtype, int rank, const int64_t *dims);
/* Deep copy of a type into v's graph arena. */
enum tpf_status tpf_value_copy_type(struct tpf_value *dst, const struct tpf_type *src);

/* Nodes.  `inputs` may contain NULL (omitted optional input).  Creates
 * n_outputs fresh output values (named from output_names when given, else
 * unique names) and appends the node at the end of the graph. */
struct tpf_node *tpf_graph_add_node(struct tpf_graph *g, const char *domain, const char *op_type,
				    const char *name, struct tpf_value *const *inputs, size_t n_inputs,
				    size_t n_outputs, const char *const *output_names);
/* Same, inserting before `before` (NULL: at the end). */
struct tpf_node *tpf_graph_insert_node(struct tpf_graph *g, struct tpf_node *before,
				       const char *domain, const char *op_type, const char *name,
				       struct tpf_value *const *inputs, size_t n_inputs,
				       size_t n_outputs, const char *const *output_names);
/* Removes the node; its outputs must have no uses left (else TPF_ERR_INVALID).
 * Drops the uses of its inputs. */
enum tpf_status tpf_graph_erase_node(struct tpf_graph *g, struct tpf_node *n);
void tpf_graph_move_node_before(struct tpf_graph *g, struct tpf_node *n, struct tpf_node *before);
enum tpf_status tpf_node_set_input(struct tpf_node *n, size_t index, struct tpf_value *v);
enum tpf_status tpf_node_append_input(struct tpf_node *n, struct tpf_value *v);
/* Every use of `from` (node operands, implicit captures, graph outputs) now uses `to`. */
enum tpf_status tpf_value_replace_uses(struct tpf_value *from, struct tpf_value *to);
size_t tpf_value_use_count(const struct tpf_value *v); /* node uses + graph output slots */
int tpf_value_is_graph_output(const struct tpf_value *v);
/* NULL if v is not a constant (initializer that is not a graph input, or a
 * Constant node's value). */
const struct tpf_tensor *tpf_value_constant(const struct tpf_value *v);

/* Attributes (copied into the graph arena; replacing one of the same name). */
const struct tpf_attr *tpf_node_attr(const struct tpf_node *n, const char *name);
int64_t tpf_node_attr_int(const struct tpf_node *n, const char *name, int64_t dflt);
float tpf_node_attr_float(const struct tpf_node *n, const char *name, float dflt);
const char *tpf_node_attr_string(const struct tpf_node *n, const char *name, const char *dflt);
enum tpf_status tpf_node_set_attr_int(struct tpf_node *n, const char *name, int64_t v);
enum tpf_status tpf_node_set_attr_float(struct tpf_node *n, const char *name, float v);
enum tpf_status tpf_node_set_attr_string(struct tpf_node *n, const char *name, const char *v);
enum tpf_status tpf_node_set_attr_ints(struct tpf_node *n, const char *name, const int64_t *v, size_t count);
enum tpf_status tpf_node_set_attr_floats(struct tpf_node *n, const char *name, const float *v, size_t count);
enum tpf_status tpf_node_set_attr_tensor(struct tpf_node *n, const char *name, struct tpf_tensor *t);
/* Adds a fully built attribute (its pointers must live in the graph arena). */
enum tpf_status tpf_node_add_attr(struct tpf_node *n, const struct tpf_attr *a);
enum tpf_status tpf_node_remove_attr(struct tpf_node *n, const char *name);

/* Tensors allocated in a graph's arena. */
struct tpf_tensor *tpf_tensor_create(struct tpf_arena *a, const char *name, enum tpf_dtype dtype,
				     int rank, const int64_t *dims, const void *data, size_t nbytes);

/* Iterate over live nodes in order: for (n = g->first; n; n = n->next) */

/* Topological order check / sort of the node list (stable: keeps the
 * existing order when it is already topological).  TPF_ERR_VERIFY on a
 * cycle, naming a node on it. */
enum tpf_status tpf_graph_toposort(struct tpf_graph *g, struct tpf_diag *d);

/* Counts nodes, recursively into subgraphs when `recursive`. */
size_t tpf_graph_count_nodes(const struct tpf_graph *g, int recursive);

/* "node 'NAME' (DOMAIN::OP)" into buf, for messages. */
const char *tpf_node_describe(const struct tpf_node *n, char *buf, size_t size);

/* ------------------------------------------------------------------ ONNX I/O */

struct tpf_load_options {
	int no_external_data;     /* skip loading external data (keep references only) */
	size_t max_model_bytes;   /* 0: default limit (4 GiB for the protobuf itself) */
};

struct tpf_out_file;

struct tpf_save_options {
	/* Initializers of at least this many bytes go to external data; 0: never
	 * (unless the protobuf would exceed 2 GiB, then a 1 KiB threshold is used). */
	size_t external_threshold;
	const char *external_file; /* relative to the model's folder; default "<model>.data" */
	/* When set, the files are written and closed but not renamed into
	 * place: they are stored in defer[0..*n_defer) (at most 2: the data
	 * file, then the model) for the caller's tpf_out_files_commit. */
	struct tpf_out_file *defer;
	size_t *n_defer;
};

enum tpf_status tpf_model_load_file(const char *path, const struct tpf_load_options *opt,
				    struct tpf_model **out, struct tpf_diag *d);
/* base_dir: folder for external data ("" or NULL: external data refused). */
enum tpf_status tpf_model_load_memory(const void *data, size_t size, const char *base_dir,
				      const struct tpf_load_options *opt, struct tpf_model **out,
				      struct tpf_diag *d);
enum tpf_status tpf_model_save_file(const struct tpf_model *m, const char *path,
				    const struct tpf_save_options *opt, struct tpf_diag *d);
/* Serialized ModelProto (no external data) in a tpf_malloc'ed buffer. */
enum tpf_status tpf_model_save_memory(const struct tpf_model *m, void **data, size_t *size,
				      struct tpf_diag *d);

/* ------------------------------------------------------------------ files
 * What a command reads and what it writes (ir/files.c).  No output may be
 * the same file as an input or as another output: a file set records the
 * inputs, then each output is checked as it is added, before anything is
 * written.  Two paths are the same file when they have the same device and
 * inode (symbolic links followed), or, for a file that does not exist yet,
 * when they resolve to the same folder and name ("./m.onnx", "d/../m.onnx"
 * and a hard link of m.onnx all name m.onnx). */

struct tpf_file_set;

struct tpf_file_set *tpf_file_set_create(void);
void tpf_file_set_free(struct tpf_file_set *s);
/* Records a file the command reads; `what` says what it is ("the input
 * model").  A path that does not exist is skipped (its reader says so). */
enum tpf_status tpf_file_set_add_input(struct tpf_file_set *s, const char *path, const char *what,
				       struct tpf_diag *d);
/* Records what a loaded model reads: `path` (its file; NULL for a model
 * from memory) and every external data file it maps. */
enum tpf_status tpf_file_set_add_model(struct tpf_file_set *s, const struct tpf_model *m,
				       const char *path, struct tpf_diag *d);
/* Records a file the command will write: TPF_ERR_CONFLICT, with an error
 * naming both paths, when it is a recorded input or output. */
enum tpf_status tpf_file_set_add_output(struct tpf_file_set *s, const char *path, const char *what,
					struct tpf_diag *d);
/* Records a folder where the command writes text dumps named NN-NAME.txt
 * (optimize --print-after-all): a recorded input or output of that form
 * there, or a later one, is refused as tpf_file_set_add_output does. */
enum tpf_status tpf_file_set_add_dump_folder(struct tpf_file_set *s, const char *dir,
					     const char *what, struct tpf_diag *d);
/* Records a model that tpf_model_save_file(path, opt) will write: the model
 * and its external data file. */
enum tpf_status tpf_file_set_add_model_output(struct tpf_file_set *s, const char *path,
					      const struct tpf_save_options *opt, const char *what,
					      struct tpf_diag *d);
/* The external data file tpf_model_save_file(path, opt) writes, whether or
 * not any tensor goes there: "DIR/NAME.data" (tpf_malloc'ed; NULL on OOM). */
char *tpf_model_data_path(const char *path, const struct tpf_save_options *opt);
/* The absolute path `path` resolves to, symbolic links followed as far as
 * it exists, the rest taken lexically (tpf_malloc'ed; NULL on OOM). */
char *tpf_path_resolve(const char *path);
/* 1 when both paths exist and are the same file, else 0. */
int tpf_same_file(const char *a, const char *b);
/* Creates the missing folders above `path` (as mkdir -p does).  With
 * `made`, each folder it creates is appended to the tpf_malloc'ed array
 * *made (*n_made entries, parents first), for tpf_remove_folders. */
enum tpf_status tpf_make_parent_folders(const char *path, char ***made, size_t *n_made,
					struct tpf_diag *d);
/* Removes the folders made[n-1] ... made[0] where empty and frees them. */
void tpf_remove_folders(char **made, size_t n);

/* An output written under a temporary name beside its path, and renamed
 * into place by tpf_out_files_commit: an interrupted or failed write
 * leaves the old file, or nothing.  A path that names a device or a pipe
 * (/dev/null, /dev/stdout) is written in place. */
struct tpf_out_file {
	char *path; /* the final name */
	char *tmp;  /* the temporary name; NULL when written in place */
	int fd;     /* -1 once closed */
};

/* Opens f for `path`: TPF_ERR_IO, naming it, for a folder or a missing
 * folder above it. */
enum tpf_status tpf_out_file_open(struct tpf_out_file *f, const char *path, struct tpf_diag *d);
/* Closes f's descriptor, reporting a failed close (a full disk shows there). */
enum tpf_status tpf_out_file_close(struct tpf_out_file *f, struct tpf_diag *d);
/* Renames f[0..n) into place in order (the last appears last: a model after
 * its data file).  When one fails, the ones already renamed get their old
 * content back (or are removed when there was none) and no temporary file
 * is left.  Every f is released either way. */
enum tpf_status tpf_out_files_commit(struct tpf_out_file *f, size_t n, struct tpf_diag *d);
/* Removes f's temporary file and releases f (after a failure). */
void tpf_out_file_discard(struct tpf_out_file *f);

/* ------------------------------------------------------------------ verification */

/* Checks SSA (single definition, unique names), acyclicity, every input
 * defined, arity and attribute/dtype agreement for known ops, in the graph,
 * subgraphs and functions.  Reports every problem found; TPF_ERR_VERIFY if any. */
enum tpf_status tpf_model_verify(const struct tpf_model *m, struct tpf_diag *d);
enum tpf_status tpf_graph_verify(const struct tpf_graph *g, struct tpf_diag *d);

/* Fills in value types from graph inputs and initializers; keeps types that
 * are already more precise; reports contradictions as errors. */
enum tpf_status tpf_model_infer_shapes(struct tpf_model *m, struct tpf_diag *d);
enum tpf_status tpf_graph_infer_shapes(struct tpf_graph *g, const struct tpf_model *m, struct tpf_diag *d);

/* ------------------------------------------------------------------ shapes and dtypes
 * Questions passes ask.  Symbolic dims that shape inference proved equal
 * (the operands of an Add, MatMul's inner dims, a collective's output and
 * its input) belong to one class of their graph, so an exporter's invented
 * `AllReduce_output_0_dim_0` answers as equal to `batch`. */

enum tpf_answer { TPF_ANSWER_NO = 0, TPF_ANSWER_YES = 1, TPF_ANSWER_UNKNOWN = 2 };

/* Two dims of graph g: static ones compare by value, symbolic ones by class
 * (a class may also be known to have a static value); an unknown dim, or
 * symbols nothing related, answer UNKNOWN. */
enum tpf_answer tpf_graph_dims_equal(const struct tpf_graph *g, const struct tpf_dim *a,
				     const struct tpf_dim *b);
/* The shapes of two values of one graph: NO when a rank or a dim is known
 * to differ, YES when every dim is known equal, else UNKNOWN. */
enum tpf_answer tpf_value_shapes_equal(const struct tpf_value *a, const struct tpf_value *b);
/* Records that a and b are equal in g (for inference and tests).  Facts
 * that contradict earlier ones (a class bound to 4 and to 8) are dropped.
 * TPF_ERR_NOMEM on allocation failure. */
enum tpf_status tpf_graph_dims_unify(struct tpf_graph *g, const struct tpf_dim *a,
				     const struct tpf_dim *b);
/* Element type of a value: its type, its initializer's, else what its
 * producer's shape function gives for the dtypes of the producer's inputs
 * (followed back a few producers); UNDEFINED when unknown. */
enum tpf_dtype tpf_value_dtype(const struct tpf_value *v);
/* Elements of a small int32/int64 tensor: its constant, else what shape
 * arithmetic gives through its producers' shape functions (Shape of static
 * dims, Gather, Unsqueeze, Concat, Add, Mul, ...).  0 with *count set, or
 * -1 when a value is not known (or more than max). */
int tpf_value_ints(const struct tpf_value *v, int64_t *out, size_t max, size_t *count);

/* ------------------------------------------------------------------ Einsum equations
 * The one parser of Einsum's `equation` (ir/ops/einsum.c), for its shape
 * function and the kernels' index plans.  Every subscript gets a label id
 * (0..n_labels); the dims an ellipsis stands for get the ids 0..n_ell,
 * right-aligned across the operands as numpy broadcasts them, the letters
 * the ids after those in the order they first appear.  The output lists
 * its labels in order: those of the "->" part, or, without one, the
 * ellipsis dims and then every letter that appears once, alphabetically. */

#define TPF_EINSUM_MAX_OPERANDS 8
#define TPF_EINSUM_MAX_RANK 16
#define TPF_EINSUM_MAX_LABELS (52 + TPF_EINSUM_MAX_RANK)

struct tpf_einsum {
	int n_in, n_labels, n_ell;
	int rank[TPF_EINSUM_MAX_OPERANDS];
	unsigned char label[TPF_EINSUM_MAX_OPERANDS][TPF_EINSUM_MAX_RANK];
	int out_rank;
	unsigned char out[TPF_EINSUM_MAX_RANK];
	char name[TPF_EINSUM_MAX_LABELS]; /* the letter of a label, '.' for an ellipsis dim */
};

/* Parses eq for n_in operands of ranks[0..n_in) (-1: unknown).  0 with *e
 * filled; 1 when the equation is well formed but an operand with an
 * ellipsis has an unknown rank; -1 with a message in err[0..size) when
 * the equation is not valid for these operands. */
int tpf_einsum_parse(const char *eq, int n_in, const int *ranks, struct tpf_einsum *e, char *err,
		     size_t size);

/* ------------------------------------------------------------------ shape functions
 * Every known op has one shape-and-type function (its record's).  It reads
 * the input types, which may be partly known (static, symbolic and unknown
 * dims, unknown rank or dtype), the values of small integer inputs when
 * they are known (shape arithmetic: a Shape -> Gather -> Concat -> Reshape
 * chain folds), and the node's attributes, and writes the output types and,
 * for shape arithmetic, output values.  Problems are errors naming the
 * node.  The verifier, shape inference and the runtime (with every dim
 * concrete) call it through tpf_op_infer. */

#define TPF_MAX_VALUES 64

struct tpf_op_type {
	int present;          /* 0: an omitted optional operand */
	enum tpf_dtype dtype; /* UNDEFINED: unknown */
	int rank;             /* -1: unknown */
	struct tpf_dim dims[TPF_MAX_RANK];
	/* The elements of a small integer tensor, each a static, symbolic or
	 * unknown dim (Shape's output holds its input's dims); -1: unknown. */
	int n_values;
	struct tpf_dim values[TPF_MAX_VALUES];
	/* Outputs: a second dtype a declared output may have (an op whose output
	 * type follows either of two inputs); why the dtype is what it is, for
	 * messages: a phrase, else the input whose dtype it is (-1: none); and
	 * `weak`: only fill in a value that has no type at all. */
	enum tpf_dtype alt_dtype;
	const char *dtype_why;
	int dtype_from;
	int weak;
};

enum tpf_shape_mode {
	TPF_SHAPE_VERIFY,   /* checks: reports, records nothing */
	TPF_SHAPE_INFER,    /* static inference: symbolic dims proven equal are unified */
	TPF_SHAPE_CONCRETE, /* the runtime: every input dim is static; shapes that depend
			     * on values not given stay unknown (rank -1 or dim -1) */
	TPF_SHAPE_MODE_COUNT
};

struct tpf_shape_call {
	const struct tpf_node *node;
	enum tpf_shape_mode mode;
	int64_t opset;                 /* ONNX default domain; <= 0 unknown */
	int64_t world;                 /* ranks of the tensor-parallel group; <= 0 unknown */
	const struct tpf_op_type *in;  /* node->n_inputs entries */
	size_t n_in;
	struct tpf_op_type *out;       /* node->n_outputs entries, written */
	size_t n_out;
	const struct tpf_graph *graph; /* the node's graph: its dim classes are read, and
					* in INFER mode extended; may be NULL */
	struct tpf_diag *diag;         /* may be NULL: problems are only counted */
	const char *where;             /* appended to messages (which subgraph), or NULL */
	size_t errors;                 /* problems reported by the call */
};

/* A call for node n: `types` holds its n_inputs input types, then room
 * for its n_outputs output types; opset and world unknown, no graph, no
 * diagnostics (set what is known before tpf_op_infer). */
void tpf_shape_call_init(struct tpf_shape_call *c, const struct tpf_node *n,
			 enum tpf_shape_mode mode, struct tpf_op_type *types);
/* Empty (unknown) type: present, dtype UNDEFINED, rank -1, no values. */
void tpf_op_type_unknown(struct tpf_op_type *t);
/* Fills c->out from c->in with the node's record.  TPF_OK, TPF_ERR_VERIFY
 * when the inputs or attributes break a rule (c->errors counts them), or
 * TPF_ERR_NOMEM. */
enum tpf_status tpf_op_infer(struct tpf_shape_call *c);

/* ONNX's index rules, shared by the shape functions, the kernels and the
 * passes.  Slice of an extent d: the count of data[start:end:step] (step
 * != 0; negative bounds count from the end, then clamp as the spec says)
 * and, in *first, the index it starts at. */
int64_t tpf_slice_span(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *first);
/* Range's element count ceil((limit - start) / delta): 0 for an empty
 * range, -1 when delta is 0 or the count passes INT64_MAX. */
int64_t tpf_range_count(int64_t start, int64_t limit, int64_t delta);

/* ------------------------------------------------------------------ dumps */

/* Deterministic text dump: values numbered %0, %1, ... in order of first
 * definition (inputs, initializers, then node outputs); one node a line. */
enum tpf_status tpf_model_print_text(const struct tpf_model *m, FILE *f);
enum tpf_status tpf_graph_print_text(const struct tpf_graph *g, FILE *f);
/* Graphviz DOT; nodes with origin_pass set are highlighted and labelled. */
enum tpf_status tpf_model_print_dot(const struct tpf_model *m, FILE *f);

/* ------------------------------------------------------------ KV-cache I/O
 * The inputs and outputs of a language model that carries its key/value
 * cache through the graph (docs/generate.md): inputs `input_ids` [batch,
 * seq] and `attention_mask` [batch, past+seq] (int64), `position_ids`
 * [batch, seq] (int64, optional), and per layer a past key and value
 * (`past_key_values.{i}.key` / `.value`, or `past_key.{i}` /
 * `past_value.{i}`) of rank 4; outputs `logits` [batch, seq, vocab] and
 * per past its present (`present.{i}.key` / `.value`, or `present_key.{i}`
 * / `present_value.{i}`): the past extended along the past axis. */

struct tpf_kv_pair {
	const struct tpf_value *past, *present;
	size_t input, output; /* their indexes in graph->inputs and graph->outputs */
	int axis;             /* the past axis of both: where new entries are appended */
	int64_t kv_heads, head_dim; /* the two other non-batch dims; -1 when not static */
};

struct tpf_kv_io {
	/* indexes in graph->inputs (position_ids: -1 when the model has none)
	 * and graph->outputs */
	long input_ids, attention_mask, position_ids, logits;
	/* greedy-next-token: output next_token [batch, sequence] (int64, the
	 * ArgMax of the logits, which are then no output: logits is -1); -1
	 * without */
	long next_token;
	/* the cache in place (kv-cache-in-place): input past_sequence_length
	 * [batch], the positions each sequence's cache holds; -1 without: each
	 * present is its past extended by the step */
	long past_lengths;
	int64_t vocab; /* the logits' last dim; -1 when not static */
	struct tpf_kv_pair *pairs; /* in graph input order, tpf_malloc'ed */
	size_t n_pairs;
};

/* Finds g's KV-cache I/O: every graph input must be one of the inputs
 * above, and every past must have its present output, of the same dtype
 * and rank 4, with the past axis found from the graph (the axis of the
 * Concat of the past that makes the present, or of the TensorScatter that
 * writes it in place, else the one axis past the batch where the past's
 * dim is symbolic and the present's is another).
 * TPF_ERR_INVALID with a message naming the input or output otherwise
 * ("input 'past_key_values.1.value' has no present output"). */
enum tpf_status tpf_kv_io_find(const struct tpf_graph *g, struct tpf_kv_io *out, struct tpf_diag *d);
void tpf_kv_io_release(struct tpf_kv_io *io);

/* ------------------------------------------------------------ text reader */

/* Reads the text dump of tpf_model_print_text back into a model, so graphs
 * can be written as text (pass tests, bug reports); printing the result
 * reproduces the dump byte for byte.  What a dump leaves out comes back as:
 * unnamed node outputs named after their number ("%7"), tensors printed as
 * "(N bytes)" filled with zeros, external and "not loaded" tensors without
 * data.  Lines starting with '#' are comments.  Hand-written text may leave
 * out node types and comments and refer to a value before its line.
 * Messages start with "NAME:LINE:COL: " (`name`: the file name, or NULL).
 * TPF_ERR_PARSE on malformed text; *out is NULL on failure, else the
 * caller frees it with tpf_model_free.  Sparse-tensor and type-proto
 * attributes cannot be read back (the dump does not hold them). */
enum tpf_status tpf_model_parse_text(const char *text, size_t size, const char *name,
				     struct tpf_model **out, struct tpf_diag *d);
/* The same for a file (at most 256 MiB). */
enum tpf_status tpf_model_load_text_file(const char *path, struct tpf_model **out,
					 struct tpf_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* TPF_IR_H */
