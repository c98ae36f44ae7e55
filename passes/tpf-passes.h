/*
 * tpfuse passes: a registry of named graph passes and a pipeline runner.
 *
 *   struct tpf_pass_stats *st = tpf_pass_stats_create();
 *   struct tpf_pipeline_options o = { .passes = "default", .stats = st };
 *   tpf_pipeline_run(model, &o, diag);
 *   tpf_pass_stats_print(st, stdout);
 *
 * A pass is a const struct with a name, a one-line summary, a run function
 * and named counters.  Passes change graphs only through the IR API (and the
 * rewriter of the pattern engine); a pass that fails leaves the model valid
 * or reports TPF_ERR_* through the diagnostic.
 */
#ifndef TPF_PASSES_H
#define TPF_PASSES_H

#include "tpf-ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters of one pass run: name -> count, in order of first increment. */
struct tpf_pass_stats;

struct tpf_pass_stats *tpf_pass_stats_create(void);
void tpf_pass_stats_free(struct tpf_pass_stats *s);
/* Adds `delta` to counter "PASS.NAME" (created at 0 if absent). */
void tpf_pass_stats_add(struct tpf_pass_stats *s, const char *pass, const char *counter, int64_t delta);
int64_t tpf_pass_stats_get(const struct tpf_pass_stats *s, const char *pass, const char *counter);
/* Prints one "pass  counter  value" line per counter, in a stable order. */
void tpf_pass_stats_print(const struct tpf_pass_stats *s, FILE *f);

/* Facts a pass may need about the tensor-parallel setting. rank/world -1: unknown
 * (passes that need them read the model's metadata_props "tp_rank"/"tp_world_size"). */
struct tpf_pass_context {
	struct tpf_pass_stats *stats; /* may be NULL */
	FILE *explain;                /* non-NULL: near-miss reports are written here */
	int rank, world_size;
	const char *debug_only;       /* TPF_DEBUG: pass names whose matching is traced */
};

struct tpf_pattern; /* passes/pattern.h */

struct tpf_pass {
	const char *name;    /* "dce", "fuse-allreduce-rmsnorm", ... */
	const char *summary; /* one line */
	/* Runs over the model (all graphs it wants to touch).  *changed is set
	 * when the model was modified. */
	enum tpf_status (*run)(struct tpf_model *m, struct tpf_pass_context *ctx, int *changed,
			       struct tpf_diag *d);
	/* A pass made of patterns lists them here, NULL-terminated: each
	 * pattern's name is one of the pass's counters (patterns may share a
	 * name, and so a counter).  NULL for other passes. */
	const struct tpf_pattern *const *patterns;
	/* Counter names this pass may increment besides its pattern names,
	 * NULL-terminated (may be NULL).  Together they print "matched nothing"
	 * for a requested pass whose counters all stayed 0. */
	const char *const *counters;
};

/* Counter k (from 0) of a pass: its pattern names, each once, then its
 * other counters; NULL past the last.  What --stats prints for the pass. */
const char *tpf_pass_counter(const struct tpf_pass *p, size_t k);

/* All registered passes, in registry order. */
const struct tpf_pass *const *tpf_pass_list(size_t *count);
const struct tpf_pass *tpf_pass_find(const char *name);
/* The named pipelines a --passes list may hold beside pass names: name i
 * (from 0: "none", "cleanup", "default", "lower-cpu", "lower-cuda"), NULL
 * past the last; and whether name is one of them. */
const char *tpf_pipeline_name(size_t i);
int tpf_pipeline_known(const char *name);

struct tpf_pipeline_options {
	/* Comma-separated pass names, or a named pipeline: "cleanup" (dce +
	 * identity removal), "default" (the -O2 pipeline). NULL: "default". */
	const char *passes;
	struct tpf_pass_context ctx;
	int verify_each;             /* run tpf_model_verify after each pass */
	const char *print_after_dir; /* write NN-PASS.txt dumps here after each pass */
};

/* Runs the pipeline.  Unknown pass names are an error listing the known ones.
 * For each requested pass whose counters all stayed zero, a note "pass NAME
 * matched nothing" is added to the diagnostic. */
enum tpf_status tpf_pipeline_run(struct tpf_model *m, const struct tpf_pipeline_options *o,
				 struct tpf_diag *d);

/* ------------------------------------------------------------------ compile
 * The one sequence every front end runs on a loaded model (passes/compile.c):
 *
 *   verify_before -> infer -> verify_inferred -> pipeline -> target -> verify_after
 *
 * Each step is a field; a zeroed struct runs nothing.  The command's check
 * and optimize, the Python package's check and optimize and `tpfuse run` /
 * `tpfuse plan` differ only in these fields:
 *
 *   check:     {TPF_COMPILE_CHECK}: verify, strict inference, verify again
 *   optimize:  the same, then .optimize = 1 with the pipeline, .verify_after = 1
 *   run, plan: {.verify_before = 1, .infer = TPF_INFER_LENIENT, .optimize = --optimize,
 *               .min_severity = TPF_SEV_ERROR}
 *   dump:      {.infer = TPF_INFER_LENIENT}: what can be inferred, no complaints
 *
 * The first step that fails ends the compile with its status; its messages
 * are in the diagnostic (except what min_severity and a lenient inference
 * leave out).  A caller that needs the model between the input steps and
 * the pipeline (the command's --dump-before) makes two calls. */

enum tpf_infer_policy {
	TPF_INFER_NONE,    /* no shape inference */
	TPF_INFER_STRICT,  /* inference problems are errors: the compile stops with the status */
	TPF_INFER_LENIENT, /* inference problems are dropped: no message of the inference is
			    * kept and the compile goes on with what it could infer (the
			    * runtime binds concrete shapes itself) */
};

/* The step of a compile that failed. */
enum tpf_compile_stage {
	TPF_COMPILE_DONE,     /* none: the compile succeeded */
	TPF_COMPILE_INPUT,    /* verify_before, infer or verify_inferred: the input is not valid */
	TPF_COMPILE_PIPELINE, /* the optimization pipeline */
	TPF_COMPILE_LOWER,    /* the target's lowering pipeline */
	TPF_COMPILE_OUTPUT,   /* verify_after: the compiled model is not valid */
};

struct tpf_compile_options {
	/* tpf_model_verify first (shape inference assumes a structurally
	 * valid graph). */
	int verify_before;
	/* Then shape inference, with this policy. */
	enum tpf_infer_policy infer;
	/* Then tpf_model_verify again, with the inferred types (dtype and
	 * shape rules the file's own types did not show). */
	int verify_inferred;
	/* Run `pipeline` (tpf_pipeline_run: its passes, NULL meaning "default";
	 * its stats, explain stream and rank context ctx.rank / ctx.world_size;
	 * verify_each; print_after_dir). */
	int optimize;
	struct tpf_pipeline_options pipeline;
	/* NULL: no lowering.  Otherwise a backend ("cpu", "cuda"): the
	 * registered pipeline "lower-TARGET" runs after the optimization
	 * pipeline, with the same context; a target without one is an error
	 * naming the pipeline. */
	const char *target;
	/* After the pipelines: tpf_model_verify, then strict shape inference. */
	int verify_after;
	/* Messages of the compile below this severity are not kept.  The zero
	 * value, TPF_SEV_NOTE, keeps all; TPF_SEV_ERROR keeps errors only (no
	 * "pass NAME matched nothing" notes). */
	enum tpf_severity min_severity;
	/* Non-NULL: set to the step that failed, TPF_COMPILE_DONE on success. */
	enum tpf_compile_stage *failed;
};

/* The steps of a check, the first fields of an initializer:
 * (struct tpf_compile_options){TPF_COMPILE_CHECK, .optimize = 1, ...}. */
#define TPF_COMPILE_CHECK .verify_before = 1, .infer = TPF_INFER_STRICT, .verify_inferred = 1

/* Runs the steps `o` asks for on m (o NULL: none). */
enum tpf_status tpf_compile(struct tpf_model *m, const struct tpf_compile_options *o,
			    struct tpf_diag *d);

/* Rewrites m into the backend ops (docs/ops.md, "Backend ops") whose
 * kernels backend ("cpu" or "cuda") has: the pipeline lower-cpu or
 * lower-cuda, for a model about to be planned (tpf_plan_build runs an
 * unlowered model too, without those kernels).  ctx may be NULL; the
 * pipeline's "matched nothing" notes are left out of d. */
enum tpf_status tpf_lower_for_backend(struct tpf_model *m, const char *backend, struct tpf_pass_context *ctx,
				      struct tpf_diag *d);

/* ------------------------------------------------------------------ sharding
 * A single-device model into the rank models of W-way tensor parallelism
 * (passes/shard/, docs/passes.md "shard"): Megatron's column/row split of
 * the projections, found by propagating splits from the weights through
 * the ops, com.microsoft AllReduce/AllGather where a split meets an op that
 * needs the whole tensor.
 *
 *   struct tpf_shard *sh;
 *   tpf_shard_create(model, &(struct tpf_shard_options){.world_size = 2}, &sh, d);
 *   for (r = 0; r < 2; r++) { tpf_shard_rank(sh, r, d); tpf_model_save_file(model, ...); }
 *   tpf_shard_free(sh);   (then tpf_model_free(model))
 *
 * tpf_shard_create rewrites `model` in place into the structure every rank
 * shares; tpf_shard_rank fills in rank r's weight slices, slice bounds and
 * tp_rank / tp_world_size metadata (one rank's slices in memory at a
 * time).  A model it cannot shard is an error naming the node; an op
 * without a sharding rule that a split reaches gets its inputs gathered
 * (a replicated fallback that `explain` reports). */
struct tpf_shard_options {
	int world_size;               /* W >= 1 */
	int vocab_parallel_embedding; /* split Gather embeddings over the vocabulary */
	FILE *explain;                /* non-NULL: the split of every MatMul with a constant weight */
};

struct tpf_shard_stats {
	size_t column, column_gather, row, replicated; /* MatMuls with a constant weight */
	size_t allreduce, allgather, slices;           /* nodes inserted */
	size_t weights_split, inputs_split, outputs_split;
	size_t fallbacks;           /* gathers where a split met an op without a rule */
	size_t collectives_dropped; /* collectives of a world-size-1 export removed */
};

struct tpf_shard;

enum tpf_status tpf_shard_create(struct tpf_model *m, const struct tpf_shard_options *o,
				 struct tpf_shard **out, struct tpf_diag *d);
/* Makes the model rank `rank`'s (0 <= rank < world size). */
enum tpf_status tpf_shard_rank(struct tpf_shard *sh, int rank, struct tpf_diag *d);
void tpf_shard_get_stats(const struct tpf_shard *sh, struct tpf_shard_stats *st);
void tpf_shard_free(struct tpf_shard *sh);

/* Loads IN and writes one model per rank to OUT_PATTERN with "{rank}"
 * replaced (required when W > 1); initializers of at least
 * `external_threshold` bytes (0: 1024) go to each rank's own data file
 * "<out>.data". */
enum tpf_status tpf_shard_file(const char *in, const char *out_pattern,
			       const struct tpf_shard_options *o, size_t external_threshold,
			       struct tpf_shard_stats *st, struct tpf_diag *d);

#ifdef __cplusplus
}
#endif

#endif /* TPF_PASSES_H */
