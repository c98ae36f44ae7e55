/*
 * Declarative pattern matching and rewriting (private to passes/).
 *
 * A pattern is data: a tree of `struct tpf_pnode` rooted at the node that
 * the driver visits, plus two functions:
 *
 *   check    pure: looks at the bindings of a structural match and at the
 *            run's context (rank, world size), may leave facts for the
 *            rewrite in the match, returns NULL to accept or a short reason
 *            to reject (the matcher then backtracks and tries the remaining
 *            operand orders/alternatives);
 *   rewrite  changes the graph, only through `struct tpf_rewriter`.
 *
 * Pattern nodes:
 *   TPF_PAT_ANY("x")       any value; a name used twice means "the same value"
 *   TPF_PAT_CONST("eps")   a constant (initializer or Constant node)
 *   TPF_PAT_OP(MUL, "m", TPF_PNODE_COMMUTE, pred, a, b)
 *                          a value produced by output 0 of a Mul node whose
 *                          inputs match a and b (either order with COMMUTE);
 *                          `pred` (may be NULL) checks attributes
 *   TPF_PAT_ALT(a, b, ...) the first alternative that leads to a full match
 *
 * Matched nodes other than the root are intermediates: their output must
 * have exactly one use (graph outputs count) unless the pattern node carries
 * TPF_PNODE_MULTI_USE, meaning the rewrite keeps serving the other users.
 * TPF_PNODE_OPT_CAST lets a Cast wrap the value (tried through the Cast
 * first, then without).
 *
 * A pass made of patterns lists them in its `struct tpf_pass` (.patterns);
 * its run function hands itself to the greedy driver (tpf_pattern_run),
 * which visits nodes consumers-first, tries the patterns in order at each
 * node, applies the first that matches, puts the touched nodes back on its
 * worklist and stops at a fixed point.  It counts matches per pattern into
 * ctx->stats under the pattern's name (so a pass's counters are its
 * pattern names), writes near-miss reports to ctx->explain and traces
 * every attempt when ctx->debug_only (or the TPF_DEBUG environment
 * variable) names the pass.
 */
#ifndef TPF_PATTERN_H
#define TPF_PATTERN_H

#include <stdio.h>

#include "tpf-passes.h"

/* The pass objects (extern), so that a pattern pass can hand itself to
 * tpf_pattern_run. */
#include "pass-list.h"

/* ------------------------------------------------------------ pattern nodes */

enum tpf_pnode_kind {
	TPF_PNODE_VALUE, /* any value */
	TPF_PNODE_CONST, /* a constant value */
	TPF_PNODE_OP,    /* output `output` of a node of op `op` */
	TPF_PNODE_ALT,   /* one of `operands` */
	TPF_PNODE_KIND_COUNT
};

enum tpf_pnode_flag {
	TPF_PNODE_COMMUTE = 1u << 0,      /* OP with two operands: either order */
	TPF_PNODE_OPT_CAST = 1u << 1,     /* the value may be a Cast of what matches */
	TPF_PNODE_MULTI_USE = 1u << 2,    /* OP: the output may have other users */
	TPF_PNODE_EXTRA_INPUTS = 1u << 3, /* OP: node inputs beyond the operands are allowed */
};

struct tpf_match;

/* Attribute predicate of an OP pattern node: NULL = accept, else a reason.
 * Predicates run after the whole structure has matched (before check), so
 * they may read bindings; a failure backtracks like a failed check. */
typedef const char *(*tpf_pnode_pred)(const struct tpf_node *n, struct tpf_match *m);

struct tpf_pnode {
	enum tpf_pnode_kind kind;
	enum tpf_op op;                          /* OP */
	const char *name;                        /* binding name, or NULL */
	unsigned flags;                          /* enum tpf_pnode_flag */
	int output;                              /* OP: output index of the producer (0) */
	tpf_pnode_pred pred;                     /* OP: may be NULL */
	const struct tpf_pnode *const *operands; /* OP operands / ALT choices; NULL-terminated */
	const char *cast_name; /* OPT_CAST: binds the Cast node when one is matched */
};

#define TPF_PAT_ANY(nm) (&(const struct tpf_pnode){.kind = TPF_PNODE_VALUE, .name = (nm)})
#define TPF_PAT_ANY_F(nm, fl)                                                                      \
	(&(const struct tpf_pnode){.kind = TPF_PNODE_VALUE, .name = (nm), .flags = (fl)})
#define TPF_PAT_CONST(nm) (&(const struct tpf_pnode){.kind = TPF_PNODE_CONST, .name = (nm)})
#define TPF_PNODE_OP_INIT(OP, nm, fl, pr, ...)                                                     \
	{                                                                                          \
		.kind = TPF_PNODE_OP, .op = TPF_OP_##OP, .name = (nm), .flags = (fl),              \
		.pred = (pr), .operands = (const struct tpf_pnode *const[]){__VA_ARGS__, NULL},    \
	}
#define TPF_PAT_OP(OP, nm, fl, pr, ...)                                                            \
	(&(const struct tpf_pnode)TPF_PNODE_OP_INIT(OP, nm, fl, pr, __VA_ARGS__))
#define TPF_PAT_ALT(...)                                                                           \
	(&(const struct tpf_pnode){.kind = TPF_PNODE_ALT,                                          \
	                           .operands =                                                     \
	                               (const struct tpf_pnode *const[]){__VA_ARGS__, NULL}})

/* ------------------------------------------------------------------- context */

/* What a check may read besides the match: the setting of the run, which
 * the driver resolves once per pass run.  rank and world_size come from
 * the pass context (--rank, --world-size) when it gives a world size, else
 * from the model's metadata_props "tp_rank" / "tp_world_size"; -1 when
 * unknown.  They are not checked against each other (rank < world_size):
 * a check that needs them says why it cannot use them. */
struct tpf_pattern_context {
	const struct tpf_model *model;
	const char *pass_name;
	int rank, world_size;
};

/* Fills a pattern context for a run of `pass_name` over m. */
void tpf_pattern_context_init(struct tpf_pattern_context *pc, const struct tpf_model *m,
			      const char *pass_name, const struct tpf_pass_context *ctx);

/* ------------------------------------------------------------------- matches */

#define TPF_MATCH_MAX_BINDINGS 48
#define TPF_MATCH_MAX_NODES 48
#define TPF_MATCH_FACTS 256

struct tpf_binding {
	const char *name;
	struct tpf_value *value; /* VALUE/CONST/OP: the value */
	struct tpf_node *node;   /* OP and Cast bindings: the node */
};

struct tpf_pattern;

struct tpf_match {
	const struct tpf_pattern *pattern;
	struct tpf_node *root;
	struct tpf_binding bindings[TPF_MATCH_MAX_BINDINGS];
	size_t n_bindings;
	/* Matched nodes (root first, then in matching order, Casts included). */
	struct tpf_node *nodes[TPF_MATCH_MAX_NODES];
	size_t n_nodes;
	/* The match's facts: scratch for the pattern's check to pass what it
	 * found on to its rewrite (zeroed before each check). */
	_Alignas(16) unsigned char facts[TPF_MATCH_FACTS];
	char reason_buf[192]; /* tpf_match_reason formats here */
};

struct tpf_value *tpf_match_value(const struct tpf_match *m, const char *name);
struct tpf_node *tpf_match_node(const struct tpf_match *m, const char *name);
/* Formats a reason into m->reason_buf and returns it (for check and pred). */
const char *tpf_match_reason(struct tpf_match *m, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ rewriter */

struct tpf_worklist;

struct tpf_rename {
	struct tpf_value *from, *to;
};

/* The only way a rewrite changes the graph.  Nodes it creates carry
 * origin_pass/origin_pattern; values it replaces hand their names to their
 * replacements once they are gone, so graph outputs keep their names. */
struct tpf_rewriter {
	struct tpf_graph *graph;
	const char *pass_name;
	const char *pattern_name;
	struct tpf_node *anchor; /* new nodes are inserted before it (the root) */
	uint32_t first_new_id;   /* nodes with ids from here on were created by this rewrite */
	struct tpf_worklist *worklist;
	FILE *trace; /* non-NULL: logs what the rewrite does */
	struct tpf_diag *diag;
	struct tpf_rename *renames;
	size_t n_renames, cap_renames;
	size_t n_created, n_erased;
};

/* Creates a node of `op` (domain and op_type from ops.def) before the
 * anchor.  output_names: NULL for fresh names, "" for an omitted optional
 * output.  NULL on failure (a diagnostic is added). */
struct tpf_node *tpf_rewriter_create(struct tpf_rewriter *rw, enum tpf_op op,
				     struct tpf_value *const *inputs, size_t n_inputs,
				     size_t n_outputs, const char *const *output_names);
/* Every use of `from` now uses `to`; `to` takes from's type when it has none. */
enum tpf_status tpf_rewriter_replace(struct tpf_rewriter *rw, struct tpf_value *from,
				     struct tpf_value *to);
/* Puts the users of v's users back on the worklist: a rewrite deeper in a
 * pattern that a consumer two steps down roots (a norm after an Add) lets
 * that consumer's pattern match again. */
enum tpf_status tpf_rewriter_revisit_users(struct tpf_rewriter *rw, const struct tpf_value *v);
/* Erases a node whose outputs have no uses left. */
enum tpf_status tpf_rewriter_erase(struct tpf_rewriter *rw, struct tpf_node *n);
/* Erases `n` when none of its outputs is used (no-op otherwise). */
enum tpf_status tpf_rewriter_erase_if_dead(struct tpf_rewriter *rw, struct tpf_node *n);
/* Erases every matched node left without uses, consumers first. */
enum tpf_status tpf_rewriter_erase_dead(struct tpf_rewriter *rw, const struct tpf_match *m);
/* Copies to dst those of the attributes `names` (NULL-terminated) that src
 * has: a fused node keeping what the node it replaces was given. */
enum tpf_status tpf_rewriter_copy_attrs(struct tpf_node *dst, const struct tpf_node *src,
					const char *const *names);

/* ------------------------------------------------------------------ patterns */

struct tpf_pattern {
	const char *name;             /* also the statistics counter */
	const struct tpf_pnode *root; /* OP (optionally OPT_CAST) */
	/* May be NULL.  Reads the bindings and the context, may write m->facts. */
	const char *(*check)(const struct tpf_pattern_context *pc, struct tpf_match *m);
	enum tpf_status (*rewrite)(struct tpf_rewriter *rw, struct tpf_match *m);
	/* Near-miss reports: a failed attempt is reported when it matched at
	 * least this many nodes (0 = 2) or failed in check. */
	int explain_min_nodes;
};

/* Matches `p` with `n` as root in the context `pc` (NULL: nothing known).
 * Returns 1 on a match (m filled), 0 if not.  When `why` is non-NULL a
 * description of the deepest failure is written there (why_size bytes). */
int tpf_pattern_match(const struct tpf_pattern *p, const struct tpf_pattern_context *pc,
		      struct tpf_node *n, struct tpf_match *m, char *why, size_t why_size,
		      int *progress);

/* Runs the patterns of `pass` (pass->patterns) greedily to a fixed point
 * in each graph of the model in turn: the main graph, the subgraphs of its
 * If/Loop/Scan nodes (depth first), then each model-local function's body
 * and its subgraphs, the graphs tpf_pattern_each_graph visits.  A match of
 * pattern P adds 1 to the pass's counter P in ctx->stats (which --stats
 * prints as "PASS  P  N"); *changed is set when anything was rewritten. */
enum tpf_status tpf_pattern_run(struct tpf_model *m, const struct tpf_pass *pass,
				struct tpf_pass_context *ctx, int *changed, struct tpf_diag *d);

/* tpf_pattern_run for a pass whose rewrite is a standard op of opset 23
 * (`op`, named in --explain lines): a model of a default-domain opset from
 * 13 to 22 is raised to 23 when it still verifies there and set back when
 * nothing fused; below 13 the pass reports the opset and does nothing
 * (Softmax, LogSoftmax and Hardmax coerce to 2-D there: raising the opset
 * would change what they compute without the verifier seeing it). */
enum tpf_status tpf_pattern_run_opset23(struct tpf_model *m, const struct tpf_pass *pass, const char *op,
					struct tpf_pass_context *ctx, int *changed, struct tpf_diag *d);

/* ------------------------------------------------------------------ helpers */

/* A one-element numeric constant as double; 0 on success. */
int tpf_pattern_const_scalar(const struct tpf_value *v, double *out);
/* An integer constant (INT32/INT64) of at most `max` elements, or values
 * shape arithmetic gives (tpf_value_ints); 0 on success. */
int tpf_pattern_const_ints(const struct tpf_value *v, int64_t *out, size_t max, size_t *count);
/* Element type of a value: its type, else what its producer's op record
 * gives (tpf_value_dtype); UNDEFINED if unknown. */
enum tpf_dtype tpf_pattern_dtype(const struct tpf_value *v);
/* Rank of a value's shape, -1 when unknown. */
int tpf_pattern_rank(const struct tpf_value *v);
/* Last dimension: 1 and *dim set when static, 0 when unknown. */
int tpf_pattern_last_dim(const struct tpf_value *v, int64_t *dim);
/* 1 when the two shapes may differ (different ranks, a tensor type of
 * unknown rank, or two dims, static or symbolic, that the IR cannot prove
 * equal: tpf_value_shapes_equal); dims that are wholly unknown, and values
 * with no type yet, do not count. */
int tpf_pattern_shapes_differ(const struct tpf_value *a, const struct tpf_value *b);
/* Calls fn on the main graph, every nested subgraph (If/Loop/Scan bodies)
 * and every model-local function body with its subgraphs: the graphs the
 * driver rewrites (for --explain reports that walk them all). */
void tpf_pattern_each_graph(const struct tpf_model *m, void (*fn)(const struct tpf_graph *, void *),
			    void *arg);
/* The --explain lines of a pass that fuses a collective with the norm
 * after it: every collective `op` still in the graphs gets one.  When
 * `norm_line` writes a line for it (its result reaches a norm: returns 1),
 * that is its line; else the line says what reads its result:
 *   unfused: PASS at NODE: the VALUE value is a graph output, no READER reads it
 *   unfused: PASS at NODE: nothing reads the VALUE value
 *   unfused: PASS at NODE: the VALUE value feeds USER (and N other uses), not WANTED */
struct tpf_unfused_explain {
	const char *pass;
	enum tpf_op op;
	const char *value, *reader, *wanted;
	int (*norm_line)(FILE *f, const char *pass, const struct tpf_node *n);
};
void tpf_pattern_explain_unfused(const struct tpf_model *m, FILE *f,
				 const struct tpf_unfused_explain *e);
/* Grows a tpf_malloc'ed array of `elem`-byte entries from n to `want`
 * entries; the new ones are zero.  0, or -1 when out of memory (the array
 * is then unchanged). */
int tpf_pattern_grow_zeroed(void **arr, size_t n, size_t want, size_t elem);
/* Whether pass `name` is named in a TPF_DEBUG-style list ("all", "a,b"). */
int tpf_pattern_debug_enabled(const struct tpf_pass_context *ctx, const char *name);

#endif /* TPF_PATTERN_H */
