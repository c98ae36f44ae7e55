/*
 * tpf_shard internals (private to passes/shard/).
 *
 * The sharder turns one single-device graph into the structure of a
 * tensor-parallel rank graph plus, per rank, the data that differs between
 * ranks (weight slices, the bounds of slices that take a rank's part).  It
 * works in five steps:
 *
 *   1. preparation (driver.c): collectives of a world-size-1 export are
 *      dropped (they are identities there), so are slices that take a whole
 *      axis; the graph is sorted and its shapes inferred;
 *   2. evaluation (eval.c): every value gets concrete dims (symbolic
 *      dims bound to distinct numbers) and, for small integer tensors, its
 *      elements: the facts the rules need to map a split axis through a
 *      Reshape or to check a Slice's bounds;
 *   3. propagation (propagate.c, with the rules of rules.c and
 *      rules-movement.c picked by the op records' tpf_node_shard_rule): each value gets a sharding, R
 *      (replicated), S(axis, sections) (split in W equal blocks along an
 *      axis, or section by section) or P (a partial sum), by one forward
 *      pass over the graph with a rule per op.  Where an operand's sharding
 *      is not what the op can take, the rule asks for a conversion
 *      (AllReduce, AllGather, or a local Slice).  Column splits are chosen
 *      greedily by trial propagation from each MatMul with a constant
 *      weight (driver.c);
 *   4. rewriting (rewrite.c): conversions become collectives and
 *      slices, constants become sliced initializers, literal head counts in
 *      shape tensors are rewritten, types follow the shardings;
 *   5. output (slice.c, driver.c): per rank, the sliced weights are filled
 *      in and the model is written (or, for the pass, kept in the graph).
 */
#ifndef TPF_SHARD_H
#define TPF_SHARD_H

#include <stdint.h>
#include <stdio.h>

#include "tpf-passes.h"

#define SH_MAX_VALS 64 /* elements kept of a small integer tensor */
#define SH_MAX_SECT 16 /* sections of one split axis */

/* ------------------------------------------------------------------ evaluation */

/* Concrete facts about one value. */
struct sh_fact {
	int rank;              /* -1: unknown */
	int64_t *dims;         /* rank entries, -1: unknown */
	int nvals;             /* -1: elements unknown */
	int64_t *vals;         /* nvals elements (integers and booleans only) */
	enum tpf_dtype dtype;
};

struct sh_eval {
	struct tpf_graph *g;
	size_t n;              /* values covered (graph->n_values when run) */
	struct sh_fact *f;     /* by value id */
	struct tpf_arena *arena;
	int64_t opset;
	int64_t world;         /* for the collectives' shape functions */
	/* symbolic dims bound to numbers */
	const char **sym_names;
	int64_t *sym_values;
	size_t n_syms, cap_syms;
	size_t next_prime;
};

/* Evaluates every node of g (in order).  Symbols keep the numbers of
 * `like` when given (so that the rank graph binds them as the original
 * did).  TPF_ERR_NOMEM only. */
enum tpf_status sh_eval_run(struct sh_eval *e, struct tpf_graph *g, int64_t opset,
			    int64_t world, const struct sh_eval *like);
void sh_eval_free(struct sh_eval *e);
/* The facts of v (never NULL; unknown when v is outside the evaluation). */
const struct sh_fact *sh_eval_fact(const struct sh_eval *e, const struct tpf_value *v);
/* Elements of a small integer tensor, output `out` of n, from inputs
 * given as facts (`outf`: the output's dims and dtype): what n's record
 * computes (tpf_op_infer with every dim concrete), else what the
 * interpreter of shape arithmetic on concrete numbers does (sh_interp:
 * broadcasting, comparisons, Where, Gather, Slice and Concat of any rank,
 * ConstantOfShape, Expand, reductions).  The count, or -1 when neither can
 * tell.  The evaluator and the propagation's local-value estimates use it. */
int sh_eval_ints(const struct tpf_node *n, size_t out, const struct sh_fact *const *in,
		 const struct sh_fact *outf, int64_t opset, int64_t *vals);
int sh_interp(const struct tpf_node *n, size_t out, const struct sh_fact *const *in,
	      const struct sh_fact *outf, int64_t *vals);
/* Whether n is op `op` (an id names its domain too). */
static inline int sh_op(const struct tpf_node *n, enum tpf_op op)
{
	return n && n->op == op;
}
/* Numel of a fact, -1 when unknown or overflowing. */
int64_t sh_numel(const struct sh_fact *f);
/* ONNX Slice clamping of [start, end) with `step` over a dim of size d:
 * the first index and the element count. */
void sh_slice_range(int64_t start, int64_t end, int64_t step, int64_t d, int64_t *first,
		    int64_t *count);
/* Slice's parameters (inputs from opset 10, else attributes; `in`: the
 * facts of the node's inputs) for data of rank `rank`: per sliced axis i,
 * ax_of[i] (normalized), st, en and stp; at most max axes.  0, or -1 when
 * not known or invalid (a zero step). */
int sh_slice_params(const struct tpf_node *n, const struct sh_fact *const *in, int rank, int max,
		    int64_t *st, int64_t *en, int64_t *stp, int *ax_of, int *count);

/* ------------------------------------------------------------------ shardings */

enum sh_kind { SH_UNSET = 0, SH_R, SH_S, SH_P };

struct sh {
	uint8_t kind;
	int8_t axis;   /* SH_S */
	uint16_t sect; /* SH_S: index in the section table; 0 = one section */
	/* SH_S: 0 or 1, or the axis is a merge [outer, rest] of an outer axis
	 * and the split one: rank r holds block r of `rest` in every row (a
	 * [batch*seq*heads, head_dim] view of a head split) */
	int64_t outer;
};

struct sh_sections {
	int n;
	int64_t size[SH_MAX_SECT]; /* full sizes, each divisible by W */
};

/* A conversion of a value on its way into an operand (or, for output
 * conversions, of a node's output before its users see it). */
enum sh_conv_kind {
	CONV_INPUT,  /* node->inputs[index]: from -> to */
	CONV_OUTPUT, /* node->outputs[index]: raw `from`, users see `to` */
};

struct sh_conv {
	enum sh_conv_kind kind;
	struct tpf_node *node;
	int index;
	struct sh from, to;
};

/* A literal element of a shape operand to rewrite: element `elem` of
 * node->inputs[index] becomes `value` (or attribute `attr`, element elem). */
struct sh_elem_edit {
	struct tpf_node *node;
	int index;          /* operand, or -1 for an attribute */
	const char *attr;   /* attribute name when index < 0 */
	int elem;
	int64_t value;
};

/* A node the propagation gave up on: for --explain. */
struct sh_note {
	struct tpf_node *node;
	char *text;
};

/* Decisions for MatMuls with a constant weight (by node id). */
enum sh_decision {
	DEC_NONE = 0,  /* not a candidate (yet) */
	DEC_REPLICATE, /* candidate left replicated */
	DEC_COLUMN,    /* output dim split */
	DEC_COLUMN_GATHER, /* output dim split, gathered right after (an LM head) */
};

/* Region of a decomposed RMSNorm (matched with canonicalize-rmsnorm's
 * patterns): nodes, the input x, the output. */
struct sh_region {
	struct tpf_node **nodes;
	size_t n_nodes;
	struct tpf_value *x;   /* the value entering the region */
	struct tpf_value *out; /* the region's result */
	struct tpf_node *first; /* first node in graph order */
};

struct shard;

struct sh_prop {
	struct shard *s;
	struct sh *sh;        /* by value id: what users see */
	int final;            /* record conversions and edits */
	/* counts */
	size_t gathers;       /* S -> R (or S -> S') conversions not asked for by a norm */
	struct tpf_node *first_gather; /* blame: where the first one happened */
	char first_gather_why[640];
	/* trial bookkeeping: values derived from the candidate */
	uint8_t *taint;
	uint8_t *taint_roots; /* by node id: candidates whose outputs are tainted */
	const struct tpf_value *blame; /* the value whose conversion made the first gather */
	size_t rows_reached, outputs_reached;
	struct tpf_node *first_row;
	/* final mode */
	struct sh_conv *convs;
	size_t n_convs, cap_convs;
	struct sh_elem_edit *edits;
	size_t n_edits, cap_edits;
	struct sh_note *notes;
	size_t n_notes, cap_notes;
	uint8_t *region_done; /* by region index */
	/* by value id: 1 + the position of the node that reads a partial sum
	 * whole (its AllReduce), 0 when none; later readers read it reduced */
	uint32_t *reduced_at;
	int nomem;
};

struct shard {
	struct tpf_model *m;
	struct tpf_graph *g;
	int W;
	const struct tpf_shard_options *opt;
	struct tpf_diag *d;
	struct sh_eval ev;            /* facts of the original graph */
	struct sh_sections *sects;    /* section table; [0] unused (one section) */
	size_t n_sects, cap_sects;
	uint8_t *decision;            /* by node id: enum sh_decision */
	uint16_t *dec_sect;           /* by node id: sections of a column split */
	struct sh_region *regions;
	size_t n_regions, cap_regions;
	int32_t *region_of;           /* by node id: region index or -1 */
	uint32_t *order;              /* by node id: position in graph order */
	int vocab_parallel;
	size_t n_values0, n_nodes0;   /* sizes of the graph before rewriting */
};

/* Section table (interned). */
int sh_sect_intern(struct shard *s, const struct sh_sections *sec);
const struct sh_sections *sh_sect(const struct shard *s, int idx);

/* Runs the propagation over the whole graph (from node position `from`:
 * values before it keep p->sh as given).  Per-node disallowed-gather
 * counts go to `gather_at` (by position) when non-NULL. */
void sh_prop_run(struct sh_prop *p, uint32_t from, uint32_t *gather_at);
void sh_prop_free(struct sh_prop *p);

/* The weight of a MatMul: its constant B operand (through a Transpose,
 * Cast, Identity or per-tensor DequantizeLinear of a constant), or NULL. */
const struct tpf_tensor *sh_matmul_weight(const struct tpf_node *n, struct tpf_value **base);

/* The stacked [E, ...] table (a constant through Identity or Cast: of
 * rank 3 or more, or of rank 2 under a 1-D index) whose whole rows Gather
 * g (axis 0) or GatherND g (batch_dims 0, one index per row) picks;
 * *rows: the dims its indices put in front. */
const struct tpf_tensor *sh_stacked_table(const struct tpf_node *g, struct tpf_value **base, int *rows);
/* An expert's weight: MatMul n's operand *side is one row per token that a
 * Gather picks out of a stacked table (the table), the other operand not. */
const struct tpf_tensor *sh_expert_weight(const struct tpf_node *n, int *side, struct tpf_value **base);
/* sh_matmul_weight (side 1), else sh_expert_weight. */
const struct tpf_tensor *sh_mm_weight(const struct tpf_node *n, int *side, struct tpf_value **base);

/* Full dims of v (original graph); -1 entries unknown; rank -1 unknown. */
const struct sh_fact *sh_full(const struct shard *s, const struct tpf_value *v);
/* Whether element `elem` of v can be made `want` by editing a literal
 * (through Concat, Reshape and kin, or scalar Mul and Div that scale it),
 * and what operand `side` of such a Mul or Div must become (-1: not one). */
int sh_editable(const struct shard *s, const struct tpf_value *v, int elem, int64_t want, int depth);
int64_t sh_scale_operand(const struct shard *s, const struct tpf_node *n, int side, int64_t want);

/* Rewriting (rewrite.c) and the per-rank data (slice.c): a weight sliced
 * per rank, a bound filled per rank. */
struct rd_weight {
	struct tpf_tensor *dst;
	const struct tpf_tensor *src;
	int axis;
	struct sh_sections sec;
	void *buf;
};

struct rd_bound {
	struct tpf_tensor *t; /* int64 [1] or [k]; or NULL with an attribute */
	struct tpf_node *node;
	const char *attr;
	int64_t base, step;   /* value for rank r: base + r * step */
	enum tpf_dtype dtype;
};

struct sh_rank_data {
	struct shard *s;
	struct rd_weight *w;
	size_t n_w, cap_w;
	struct rd_bound *b;
	size_t n_b, cap_b;
	size_t allreduce, allgather, slices, inputs_split, outputs_split, weights_split;
};

/* Appends a zeroed element to *arr (n elements of esz): 0, or -1. */
int sh_push(void **arr, size_t *n, size_t *cap, size_t esz);
enum tpf_status sh_rewrite(struct shard *s, struct sh_prop *p, struct sh_rank_data **rd);
enum tpf_status sh_rank_fill(struct sh_rank_data *rd, int rank, struct tpf_diag *d);
void sh_rank_release(struct sh_rank_data *rd);
/* Hands the weights sh_rank_fill filled over to g (copies in its arena):
 * the model stays that rank's once the per-rank data is freed. */
enum tpf_status sh_rank_keep(struct sh_rank_data *rd, struct tpf_graph *g, struct tpf_diag *d);
void sh_rank_data_free(struct sh_rank_data *rd);
size_t sh_rank_count(const struct sh_rank_data *rd, const char *what);

#define TPF_SPLIT_INPUT_KEY "tp_split_input:"
#define TPF_SPLIT_OUTPUT_KEY "tp_split_output:"
/* The metadata entry of a graph input or output split at the interface
 * (TPF_SPLIT_INPUT_KEY / TPF_SPLIT_OUTPUT_KEY + its name, docs/passes.md
 * "shard"): "axis=A world=W sections=S1[,S2...]". */
enum tpf_status sh_split_metadata(struct shard *s, int output, const struct tpf_value *v, struct sh x);

/* Messages. */
const char *sh_str(const struct shard *s, struct sh x, char *buf, size_t size);
const char *sh_node_name(const struct tpf_node *n, char *buf, size_t size);

#endif /* TPF_SHARD_H */
