/*
 * tpfuse runtime: lower a model to a plan and run it on a backend, one
 * process per rank, collectives through a communicator.
 *
 *   struct tpf_comm *comm;
 *   tpf_comm_create_mpi(&(struct tpf_comm_options){.timeout_s = 60}, &comm, d);  (or _self)
 *   struct tpf_session *s;
 *   tpf_session_create(model, &(struct tpf_session_options){.comm = comm}, &s, d);
 *   struct tpf_host_tensor in = {.name = "x", .dtype = TPF_DTYPE_BFLOAT16, .rank = 2,
 *                                .dims = {1, 4096}, .data = buf};
 *   const struct tpf_host_tensor *out; size_t n_out;
 *   tpf_session_run(s, &in, 1, &out, &n_out, d);   outputs stay valid until the next run
 *   tpf_session_free(s); tpf_comm_free(comm);
 *
 * Lowering (tpf_plan_build): a topological schedule of the graph with every
 * shape bound from the actual inputs (symbolic dims resolved per run; the
 * session rebuilds the plan when input shapes change), shape computations
 * and small constant subgraphs folded on the host, fused ops that contain a
 * collective split into communicator steps and kernel phases, one kernel per
 * step from the kernel table (op, dtype, backend), and liveness-based reuse
 * of one arena per device.  tpf_plan_print shows all of it.
 *
 * Ownership: a session borrows its model and communicator (both must outlive
 * it).  Errors are statuses with messages in a struct tpf_diag; on a
 * multi-rank run every rank reports its own error; the caller should then
 * call tpf_comm_abort so that no peer waits forever.
 */
#ifndef TPF_RUNTIME_H
#define TPF_RUNTIME_H

#include "tpf-ir.h"
#include "tpf-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ communicator
 * Collectives over all ranks of a run.  Buffers live in the backend's memory
 * (host for CPU, device for CUDA); `stream` is the backend queue (NULL on
 * the CPU).  Every call either completes on all ranks or returns an error
 * within the communicator's timeout; messages name the operation and rank.
 * Send and receive buffers may be the same for allreduce. */

struct tpf_comm;

struct tpf_comm_ops {
	const char *name; /* "self", "mpi", "nccl", "mpi-cuda" */
	/* recv[i] = sum over ranks of send[i], count elements of dtype (float
	 * types sum in float32 or wider, rounded once; integers exactly). */
	enum tpf_status (*allreduce_sum)(struct tpf_comm *c, const void *send, void *recv,
					 size_t count, enum tpf_dtype dtype, void *stream,
					 struct tpf_diag *d);
	/* recv = send of rank 0, then rank 1, ...: bytes per rank each
	 * (gathering along axis 0; the runtime reorders for other axes). */
	enum tpf_status (*allgather)(struct tpf_comm *c, const void *send, void *recv,
				     size_t bytes_per_rank, void *stream, struct tpf_diag *d);
	/* send is world chunks of bytes_per_rank, chunk j goes to rank j; recv
	 * holds the chunks from ranks 0..world-1 in order. */
	enum tpf_status (*alltoall)(struct tpf_comm *c, const void *send, void *recv,
				    size_t bytes_per_rank, void *stream, struct tpf_diag *d);
	/* Several all-to-alls at once, each as alltoall (send[i] is world
	 * chunks of bytes[i]): one grouped exchange from and into the pieces'
	 * own buffers (no packing).  May be NULL. */
	enum tpf_status (*alltoall_pieces)(struct tpf_comm *c, const void *const *send, void *const *recv,
					   const size_t *bytes_per_rank, size_t n, void *stream,
					   struct tpf_diag *d);
	enum tpf_status (*broadcast)(struct tpf_comm *c, void *buf, size_t bytes, int root,
				     void *stream, struct tpf_diag *d);
	enum tpf_status (*barrier)(struct tpf_comm *c, struct tpf_diag *d);
	/* Ends every rank's process group (MPI_Abort); used after an error so
	 * that no peer blocks forever.  May be NULL. */
	void (*abort)(struct tpf_comm *c, int code);
	void (*destroy)(struct tpf_comm *c);
};

/* The ranks grouped by host.  Hosts are numbered in the order of their
 * lowest rank; n_hosts 0 (a communicator built without a grouping) counts
 * as one host holding every rank. */
struct tpf_comm_hosts {
	int n_hosts;
	int host;       /* this rank's host, 0 .. n_hosts - 1 */
	int local_rank; /* this rank's place among its host's ranks, in rank order */
	int local_size; /* ranks on this rank's host */
};

struct tpf_comm {
	const struct tpf_comm_ops *ops;
	int rank, world;
	int local_rank;   /* rank on this host (picks the GPU) */
	double timeout_s; /* collectives fail after this long; <= 0: 60 s */
	void *impl;
	/* filled at creation: the MPI communicators exchange every rank's
	 * host name (tpf_comm_host_name) */
	struct tpf_comm_hosts hosts;
};

struct tpf_comm_options {
	double timeout_s; /* <= 0: 60 */
};

/* One rank, world size 1. */
enum tpf_status tpf_comm_create_self(const struct tpf_comm_options *o, struct tpf_comm **out,
				     struct tpf_diag *d);
/* MPI_COMM_WORLD (MPI_Init_thread when MPI is not initialized yet, and
 * MPI_Finalize in tpf_comm_free then).  TPF_ERR_UNSUPPORTED when tpfuse was
 * built without MPI. */
enum tpf_status tpf_comm_create_mpi(const struct tpf_comm_options *o, struct tpf_comm **out,
				    struct tpf_diag *d);
/* 1 when this process was started by an MPI launcher (mpirun/srun env). */
int tpf_comm_launched_by_mpi(void);
void tpf_comm_free(struct tpf_comm *c);
void tpf_comm_abort(struct tpf_comm *c, int code);
/* Every rank gives `value`; fails on every rank with a message naming the
 * ranks that differ ("what" says what the value is). */
enum tpf_status tpf_comm_check_same(struct tpf_comm *c, uint64_t value, const char *what,
				    struct tpf_diag *d);

/* ------------------------------------------------------------ hosts
 * CUDA IPC maps buffers between the GPUs of one host only, so the
 * peer-memory collectives run only where every rank of a collective is on
 * one host; elsewhere the communicator (NCCL) runs them. */

/* The longest host name exchanged, its NUL included. */
#define TPF_HOST_NAME_MAX 256

/* The grouping of c's ranks by host (one host of c->world ranks when c has
 * none). */
void tpf_comm_hosts(const struct tpf_comm *c, struct tpf_comm_hosts *out);
/* This rank's host name into buf: TPF_HOSTNAME when set, with "{rank}"
 * replaced by the rank, or, when it holds commas, its rank-th entry
 * (exactly world entries); else gethostname.  TPF_ERR_INVALID for a list
 * of another length, an empty or too long name. */
enum tpf_status tpf_comm_host_name(int rank, int world, char *buf, size_t size, struct tpf_diag *d);
/* Groups world ranks by name: names holds one NUL-terminated name per
 * rank, every `stride` bytes; out describes rank `rank`. */
void tpf_comm_hosts_group(const char *names, size_t stride, int world, int rank,
			  struct tpf_comm_hosts *out);
/* Exchanges every rank's host name over c (host buffers, a collective of
 * every rank) and stores the grouping in c->hosts.  Fails on every rank
 * when one has no name. */
enum tpf_status tpf_comm_group_hosts(struct tpf_comm *c, struct tpf_diag *d);
/* Whether collectives over every rank may go through peer memory: 1 when
 * the ranks share one host.  Else 0, and why (may be NULL) says so, naming
 * the communicator `comm_name` (may be NULL) that runs them instead. */
int tpf_comm_hosts_peer_ok(const struct tpf_comm_hosts *h, const char *comm_name, char *why, size_t size);

/* Every rank passes its status; all learn whether any failed.  Returns st
 * when it is an error, else TPF_ERR_RUNTIME naming the first failed rank
 * ("phase" says what was being done), else TPF_OK. */
enum tpf_status tpf_comm_agree(struct tpf_comm *c, enum tpf_status st, const char *phase,
			       struct tpf_diag *d);

/* ------------------------------------------------------------ backends
 * Memory and copies of a backend; the plan is backend-neutral. */

struct tpf_device {
	enum tpf_backend kind;
	void *ctx;
	void *stream;
	void *(*alloc)(struct tpf_device *dev, size_t bytes); /* NULL on failure */
	void (*free)(struct tpf_device *dev, void *p);
	enum tpf_status (*upload)(struct tpf_device *dev, void *dst, const void *src, size_t n,
				  struct tpf_diag *d);
	enum tpf_status (*download)(struct tpf_device *dev, void *dst, const void *src, size_t n,
				    struct tpf_diag *d);
	enum tpf_status (*sync)(struct tpf_device *dev, struct tpf_diag *d);
	/* Timing (profiling): mark(i) records point i in the device's queue;
	 * after a sync, elapsed_ms(a, b) is the time between points a and b
	 * (-1 when unknown).  May be NULL. */
	enum tpf_status (*mark)(struct tpf_device *dev, size_t i, struct tpf_diag *d);
	double (*elapsed_ms)(struct tpf_device *dev, size_t a, size_t b);
	void (*destroy)(struct tpf_device *dev);
	const char *model; /* the device's model (CUDA: the GPU's name), or NULL */
};

enum tpf_status tpf_device_create(enum tpf_backend kind, int local_rank, struct tpf_device **out,
				  struct tpf_diag *d);
void tpf_device_free(struct tpf_device *dev);

/* ------------------------------------------------------------ host tensors */

struct tpf_host_tensor {
	const char *name;
	enum tpf_dtype dtype;
	int rank;
	int64_t dims[TPF_KERNEL_MAX_RANK];
	void *data;    /* packed little-endian elements */
	size_t nbytes; /* 0: computed from dtype and dims */
};

/* Bytes of t's elements; -1 on overflow or a bad dtype. */
int tpf_host_tensor_bytes(const struct tpf_host_tensor *t, size_t *out);

/* ONNX test-data format: one TensorProto per .pb file. */
enum tpf_status tpf_tensor_read_pb(const char *path, struct tpf_host_tensor *out,
				   struct tpf_diag *d); /* out->name, out->data tpf_malloc'ed */
/* Writes t to `path` under a temporary name renamed into place once
 * complete (a failed write leaves the old file, or none). */
enum tpf_status tpf_tensor_write_pb(const char *path, const struct tpf_host_tensor *t,
				    struct tpf_diag *d);
/* Writes t to f, an output opened with tpf_out_file_open, and closes it:
 * for a set of outputs renamed together by tpf_out_files_commit. */
enum tpf_status tpf_tensor_write_pb_to(struct tpf_out_file *f, const struct tpf_host_tensor *t,
				       struct tpf_diag *d);
void tpf_host_tensor_release(struct tpf_host_tensor *t); /* frees name and data */
/* Reads DIR/input_0.pb, input_1.pb, ... (or output_N.pb with prefix
 * "output"); *out is a tpf_malloc'ed array. */
enum tpf_status tpf_tensor_read_dir(const char *dir, const char *prefix,
				    struct tpf_host_tensor **out, size_t *count, struct tpf_diag *d);
void tpf_host_tensors_release(struct tpf_host_tensor *t, size_t count);

/* ------------------------------------------------------------ rank parts
 * A rank model from `tpfuse shard` names in its metadata the graph inputs
 * and outputs it holds only a part of (a KV cache: the rank's heads):
 * "tp_split_input:NAME" / "tp_split_output:NAME" = "axis=A world=W
 * [sections=S1,S2,...]".  Along axis A the rank (tp_rank) holds block r of
 * W equal blocks of each section (full sizes; none given: one section, the
 * whole dim), concatenated (runtime/rank-parts.c; docs/cli.md, "tpfuse shard"). */

#define TPF_RANK_SPLIT_MAX_SECTIONS 16

struct tpf_rank_split {
	int axis, world, rank;
	int n_sections; /* 0: one section, the full tensor's dim */
	int64_t sections[TPF_RANK_SPLIT_MAX_SECTIONS];
};

/* The split of m's graph input (output = 0) or output `name`: 1 when the
 * metadata names it (in *sp), 0 when it does not, -1 when the entry or
 * tp_rank is malformed (the message in d). */
int tpf_rank_split_find(const struct tpf_model *m, int output, const char *name,
			struct tpf_rank_split *sp, struct tpf_diag *d);
/* The rank's part of `full` (name and data tpf_malloc'ed into *part);
 * TPF_ERR_INVALID when full's dim along the axis is not the split's. */
enum tpf_status tpf_rank_part(const struct tpf_rank_split *sp, const struct tpf_host_tensor *full,
			      struct tpf_host_tensor *part, struct tpf_diag *d);
/* Every tensor of t[0..n) named after a graph input (outputs: output) that
 * m splits and given whole is replaced by the rank's part, in place; one
 * already of the rank's size (its declared dim, or a block of the full
 * size) is kept.  So a rank takes the single-device model's inputs. */
enum tpf_status tpf_rank_parts_cut(const struct tpf_model *m, int outputs,
				   struct tpf_host_tensor *t, size_t n, struct tpf_diag *d);

/* ------------------------------------------------------------ plans */

struct tpf_plan;

struct tpf_plan_options {
	enum tpf_backend backend;
	int rank, world;                  /* world <= 0: 1 */
	size_t fold_max_elements;         /* 0: 65536; larger results run as steps */
	size_t alignment;                 /* 0: 256 bytes */
	/* Values of symbolic input dims ("NAME=VALUE", `tpfuse run --dim`): an
	 * input whose dim NAME has another size is an error naming both. */
	const char *const *dims;
	size_t n_dims;
	/* Graph inputs that live outside the arena (a session's kept inputs,
	 * tpf_session_keep_inputs): they get no buffer of the plan. */
	const char *const *kept_inputs;
	size_t n_kept_inputs;
	/* Inputs keep their buffers for the whole run (no step's output
	 * reuses them), so that tpf_session_replay reads them as uploaded. */
	int inputs_live;
};

/* Binds the graph to concrete inputs (by name, every graph input without a
 * default must be given) and lowers it.  Missing or extra inputs and shape
 * errors are reported naming the node or input.  Ops, dtypes and forms the
 * backend cannot run are all listed in one error (TPF_ERR_UNSUPPORTED):
 * each (op, dtype) once with its node count and first node. */
enum tpf_status tpf_plan_build(const struct tpf_model *m, const struct tpf_host_tensor *inputs,
			       size_t n_inputs, const struct tpf_plan_options *o,
			       struct tpf_plan **out, struct tpf_diag *d);
void tpf_plan_free(struct tpf_plan *p);
/* Schedule, buffers (offset, size, live range), kernels, peak memory. */
enum tpf_status tpf_plan_print(const struct tpf_plan *p, FILE *f);

struct tpf_plan_stats {
	size_t n_steps, n_kernel_steps, n_collective_steps, n_folded;
	size_t n_views;        /* Reshape-like nodes that share their input's buffer */
	size_t n_buffers;
	size_t arena_bytes;    /* peak of the arena with reuse */
	size_t unshared_bytes; /* sum of all buffers: the arena without reuse */
	size_t constant_bytes; /* initializers, folded constants and packed or
				* transposed weights that a step reads */
};
void tpf_plan_get_stats(const struct tpf_plan *p, struct tpf_plan_stats *st);

/* The same listing as tpf_plan_build's, from the graph alone (declared and
 * inferred dtypes; nodes whose inputs are all constants are checked against
 * the CPU kernels, which fold them when a plan is built): TPF_OK or one
 * TPF_ERR_UNSUPPORTED error.  Sessions call it when they are created. */
enum tpf_status tpf_plan_check_model(const struct tpf_model *m, enum tpf_backend b, struct tpf_diag *d);

/* Memory a backend can still allocate: host memory (MemAvailable, within
 * the cgroup's limit) for the CPU, the current device's free memory for
 * CUDA, at most TPF_MEMORY_LIMIT bytes when that is set.  0 ok, -1 when it
 * cannot be told. */
int tpf_memory_available(enum tpf_backend b, size_t *out);
/* TPF_ERR_NOMEM with "WHAT: 16.0 GiB needed, only 7.5 GiB of host memory
 * available" when `need` bytes exceed it; TPF_OK otherwise (or when the
 * amount cannot be told). */
enum tpf_status tpf_memory_check(enum tpf_backend b, size_t need, const char *what, struct tpf_diag *d);

/* Structural hash of a graph (ops, attributes, wiring, initializer dtypes
 * and shapes; not weight values, nor the shape arithmetic that folds when a
 * plan is built, which exporters write differently per rank), identical on
 * every rank of a TP model. */
uint64_t tpf_graph_structure_hash(const struct tpf_graph *g);

/* ------------------------------------------------------------ sessions */

struct tpf_session;

/* ------------------------------------------------------------ collective strategies
 * Which path runs each all-reduce on the CUDA backend with NCCL: NCCL (with
 * the fused op's post kernel), one-shot or two-shot through peer memory.
 * Chosen per (world size, fused op, hidden size, tokens) from a table
 * measured by `tpfuse tune` (runtime/strategy.c has the file format). */
enum tpf_coll_kind {
	TPF_COLL_ALLREDUCE,     /* a bare all-reduce */
	TPF_COLL_ARNORM,        /* all-reduce + residual + RMSNorm */
	TPF_COLL_ARNORM_FP8,    /* the same emitting FP8 */
	TPF_COLL_SHARDED,       /* a sharded RMSNorm's exchange */
	TPF_COLL_KINDS
};
enum tpf_coll_path { TPF_PATH_NCCL, TPF_PATH_ONESHOT, TPF_PATH_TWOSHOT };
struct tpf_strategy_row {
	int world;
	enum tpf_coll_kind kind;
	int64_t hidden;
	int64_t max_tokens; /* -1: any */
	enum tpf_coll_path path;
};
struct tpf_strategy_table {
	struct tpf_strategy_row *rows;
	size_t n;
	char source[256]; /* file name, or "built-in" */
};
const char *tpf_coll_kind_name(enum tpf_coll_kind k);
const char *tpf_coll_path_name(enum tpf_coll_path p);
/* The table compiled in (measured on H100; never freed). */
const struct tpf_strategy_table *tpf_strategy_builtin(void);
/* The table compiled in for a GPU model (tpf_device.model): the H200 rows
 * where the name names an H200 (not a GH200), else tpf_strategy_builtin(). */
const struct tpf_strategy_table *tpf_strategy_builtin_for(const char *gpu);
enum tpf_status tpf_strategy_parse(const char *text, const char *source, struct tpf_strategy_table **out,
				   struct tpf_diag *d);
enum tpf_status tpf_strategy_load(const char *path, struct tpf_strategy_table **out, struct tpf_diag *d);
void tpf_strategy_free(struct tpf_strategy_table *t);
void tpf_strategy_print(const struct tpf_strategy_table *t, FILE *f);
/* The path for one call (t NULL: the built-in table). */
enum tpf_coll_path tpf_strategy_choose(const struct tpf_strategy_table *t, int world, enum tpf_coll_kind kind,
				       int64_t hidden, int64_t tokens, size_t elem_bytes);

/* Measures every path of every kind but the sharded norm's (bfloat16,
 * CUDA graphs) on an NCCL communicator's GPUs over hidden sizes x token
 * counts and returns the table of the fastest (`tpfuse tune`).  Rank 0
 * writes one comment line per measurement to log (NULL: none).  Every
 * rank must call it with the same options.  Needs CUDA, NCCL and MPI. */
struct tpf_tune_options {
	const int64_t *hiddens;
	size_t n_hiddens;
	const int64_t *tokens; /* ascending */
	size_t n_tokens;
	int replays;           /* graph launches per time (default 10) */
	FILE *log;
};
enum tpf_status tpf_tune_collectives(struct tpf_comm *comm, const struct tpf_tune_options *o,
				     struct tpf_strategy_table **out, struct tpf_diag *d);

struct tpf_session_options {
	enum tpf_backend backend;
	struct tpf_comm *comm; /* NULL: a self communicator owned by the session */
	/* Skip the start-up exchange: every rank's status and graph structure
	 * (and, with check_rank_files, its weights).  Without it a rank that
	 * fails while creating its session leaves the others to find out in
	 * their first collective. */
	int no_structure_check;
	/* The rank models came from per-rank files (tpfuse run sets this):
	 * in a model with collectives, ranks that loaded byte-identical
	 * weights and carry no tp_rank metadata are refused (one rank's file
	 * given to several), and rank 0 warns that the rank order is
	 * unchecked when any rank's model has no tp_rank metadata. */
	int check_rank_files;
	/* CUDA backend: capture the whole plan into a CUDA graph on the second
	 * run with the same input shapes and replay it afterwards. */
	int cuda_graph;
	/* CUDA backend with NCCL and several ranks: all-reduces (bare and fused
	 * into a norm) and the sharded norms' exchange run through peer memory
	 * in one kernel each (one-shot or two-shot) where the strategy table
	 * says it pays and they fit (64 MiB per call, or TPF_ONESHOT_MAX_BYTES);
	 * set this (or TPF_ONESHOT=0) to keep NCCL for all of them. */
	int no_oneshot;
	/* The strategy table (borrowed; NULL: the one TPF_STRATEGY_TABLE names,
	 * else the built-in one).  Every rank must use the same. */
	const struct tpf_strategy_table *strategy;
	/* Time every step of eager runs (device time, from marks in the
	 * device's queue; not with cuda_graph); see tpf_session_profile_print. */
	int profile;
	struct tpf_plan_options plan; /* backend/rank/world are filled in */
};

/* Checks the model against the communicator (world size and rank
 * metadata), then every rank of the communicator, failed or not, joins one
 * exchange: a rank's own error stops every rank (the others name that
 * rank and its error), as do graphs of different structure and, with
 * check_rank_files, rank files holding the same weights.  Then it lists
 * every op the backend cannot run (tpf_plan_check_model): before any input
 * exists.  The session
 * reads the model until it is freed, and keeps what it derives from the
 * model's weights (packed copies, device copies) for its whole life: the
 * model must stay as it is while a session of it exists. */
enum tpf_status tpf_session_create(const struct tpf_model *m, const struct tpf_session_options *o,
				   struct tpf_session **out, struct tpf_diag *d);
void tpf_session_free(struct tpf_session *s);
/* A session keeps a plan per input signature (names, dtypes, dims; at most
 * 8, the least recently used goes): prefill and decode shapes alternate
 * without rebuilding.  Inputs whose values decide a shape (a Reshape
 * target given as an input, Range bounds) key their plan by those values
 * too; inputs that only carry data (token ids, masks) never do.
 * tpf_session_prepare finds or builds the plan for these inputs without
 * running it (every rank learns whether any rank failed); tpf_session_run
 * prepares, runs once and returns the outputs (graph output order, host
 * memory owned by the session), valid until the next run or free. */
enum tpf_status tpf_session_prepare(struct tpf_session *s, const struct tpf_host_tensor *inputs,
				    size_t n_inputs, struct tpf_diag *d);
enum tpf_status tpf_session_run(struct tpf_session *s, const struct tpf_host_tensor *inputs,
				size_t n_inputs, const struct tpf_host_tensor **outputs,
				size_t *n_outputs, struct tpf_diag *d);
/* Runs the current plan's steps again, on the device buffers as the last
 * run left them: no input upload, no output download, no wait (the next
 * run or tpf_session_sync waits).  Arena buffers are reused within a step
 * sequence, so what a replay computes is meant for timing the device work
 * (benchmarks), not as a result; with cuda_graph it launches the graph. */
enum tpf_status tpf_session_replay(struct tpf_session *s, struct tpf_diag *d);
/* Turns options.cuda_graph on or off for the runs that follow; returns
 * what it was.  The generator runs a prompt's prefill eagerly (a prompt
 * length seldom repeats; its capture would cost more than its launches)
 * and the decode steps through the graph. */
int tpf_session_set_cuda_graph(struct tpf_session *s, int on);
/* Inputs kept on the session's device between runs: a KV cache that a step
 * updates in place (TensorScatter on a graph input that nothing else reads,
 * as the kv-cache-in-place pass writes it; docs/generate.md).  From the
 * next run on, the named inputs are not copied from the caller: their
 * tensors give the name, dtype and dims only (data may be NULL).  Each
 * lives in device memory of its own, zeroed when it is made or changes
 * size (and by tpf_session_clear_kept); an output that is that memory
 * (the cache updated in place) is not copied back: its host tensor has
 * data NULL.  Setting the list again drops the plans built so far. */
enum tpf_status tpf_session_keep_inputs(struct tpf_session *s, const char *const *names, size_t n,
					struct tpf_diag *d);
/* Zeroes the kept inputs' memory (a new generation). */
enum tpf_status tpf_session_clear_kept(struct tpf_session *s, struct tpf_diag *d);
/* Device bytes the kept inputs hold. */
size_t tpf_session_kept_bytes(const struct tpf_session *s);
/* Waits for the device work of the session. */
enum tpf_status tpf_session_sync(struct tpf_session *s, struct tpf_diag *d);
/* With options.profile: device time per step summed over the timed runs
 * of the current plan, by kernel (and by step, the slowest first). */
void tpf_session_profile_print(const struct tpf_session *s, FILE *f);
/* The same for every plan the session holds that was profiled, in the
 * order they last ran, each headed by the input shapes it was built for
 * (a generation's prefill and decode step: tpfuse generate --profile). */
void tpf_session_profile_print_plans(const struct tpf_session *s, FILE *f);
/* CUDA graphs the session's device captured and replayed so far (0 on the
 * CPU backend); either pointer may be NULL. */
void tpf_session_graph_stats(const struct tpf_session *s, unsigned long *captures, unsigned long *replays);
/* Device bytes the session holds now: its arena, the kernels' workspace,
 * its kept inputs and the device copies of constants (0 for constants on
 * the CPU backend, whose kernels read the model's bytes). */
size_t tpf_session_device_bytes(const struct tpf_session *s);
/* The session's world size (its communicator's). */
int tpf_session_world(const struct tpf_session *s);
/* The current plan (NULL before the first run). */
const struct tpf_plan *tpf_session_plan(const struct tpf_session *s);
/* Collective steps of the current plan and how many of them run through
 * peer memory (one-shot kernels) instead of the communicator. */
void tpf_session_collective_stats(const struct tpf_session *s, size_t *collectives, size_t *oneshot);
/* Coalesced all-to-alls (Pack -> AllToAll -> Unpack) of the current plan
 * that run as one exchange between the pieces' own buffers
 * (TPF_A2A_DIRECT=0 turns that off); *peer (may be NULL): how many of them
 * go through the CUDA peer-memory kernel (TPF_A2A_PEER=0 turns that off)
 * rather than the communicator's grouped calls. */
size_t tpf_session_direct_alltoalls(const struct tpf_session *s, size_t *peer);
/* Plans the session keeps now and, in *builds (may be NULL), how many it
 * has built so far. */
size_t tpf_session_plan_count(const struct tpf_session *s, size_t *builds);
/* Constants the session's plans share, each made once per session (either
 * pointer may be NULL): *device, the bytes of the device copies of the
 * model's constants and of their packed or transposed forms (0 on the CPU
 * backend, whose kernels read the host bytes, unless TPF_CPU_COPY_CONSTANTS
 * is 1); *derived, the bytes of those packed or transposed host copies.  A
 * plan's folded values and a Constant node's scalar (value_float and the
 * like) are its own and not counted. */
void tpf_session_constant_bytes(const struct tpf_session *s, size_t *device, size_t *derived);

/* ------------------------------------------------------------ generation
 * A token generation loop over a session of a model with KV-cache I/O
 * (tpf_kv_io_find; docs/generate.md).  The prompts are left-padded into one
 * batch with the attention mask; the first step runs the whole prompts
 * with pasts of length 0 (the prefill), each later step one token per
 * sequence with the last step's presents as the pasts.  Position ids are
 * cumsum(mask) - 1, 0 at padding.  A sequence stops at max_new_tokens or
 * after one of the EOS ids; finished sequences go on with pad tokens
 * (their outputs ignored) until every one has stopped.  Sampling draws
 * from a counter-based generator keyed by (seed, step, sequence), so every
 * rank that sees the same logits picks the same token.
 *
 * A model whose cache is in place (kv-cache-in-place: io->past_lengths >=
 * 0) runs differently: the caches stay on the session's device
 * (tpf_session_keep_inputs) in buffers of max_length positions, each step
 * writes its keys and values there, and the mask, position ids and
 * past_sequence_length say which positions hold what.  Every decode step
 * then has the same shapes: one plan for the prefill, one for all decode
 * steps.
 *
 *   struct tpf_generator *gen;
 *   tpf_generator_create(session, &io, &(struct tpf_generate_options){.max_new_tokens = 32}, &gen, d);
 *   tpf_generator_add_prompt(gen, ids, n, d);   (once per sequence, before the first step)
 *   tpf_generator_run(gen, d);                  (or tpf_generator_step until it says done)
 *   n = tpf_generator_tokens(gen, 0, &tokens);
 *   tpf_generator_free(gen); */

struct tpf_generate_options {
	size_t max_new_tokens;
	const int64_t *eos_ids; /* a sequence stops after generating one of these */
	size_t n_eos;
	const int64_t *suppress_ids; /* never generated (their logits count as -inf); each in the vocabulary, not all of it */
	size_t n_suppress;
	int64_t pad_id;    /* the padding token (left padding, finished sequences) */
	double temperature; /* <= 0: greedy (the first largest logit) */
	long top_k;         /* sampling: only the k most likely tokens; <= 0: all */
	double top_p;       /* sampling: the fewest most likely tokens holding p; <= 0 or >= 1: all */
	uint64_t seed;
	/* a cache in place: its positions (0: the longest prompt plus
	 * max_new_tokens); fixing it lets later generations reuse the plans */
	size_t max_length;
	/* a cache in place: the prompt runs in calls of at most this many
	 * positions (0: whole; at one rank, halved while the plan's memory does
	 * not fit) */
	size_t prefill_chunk;
};

struct tpf_generate_stats {
	size_t steps;           /* forward calls made */
	size_t new_tokens;      /* tokens generated, every sequence together */
	double ttft_ms;         /* the prefill (time to the first token) */
	double decode_ms;       /* the later steps together */
	double step_p50_ms, step_p99_ms; /* over the later steps (0 when none) */
	size_t plans_built;     /* tpf_session_plan_count's builds so far */
	int in_place;           /* the cache is in place */
	size_t prefill_calls;   /* forward calls the prompt took (chunks) */
	unsigned long graphs_captured, graph_replays; /* CUDA graphs (tpf_session_graph_stats) */
	size_t device_bytes;    /* tpf_session_device_bytes at the end */
	size_t peak_rss_bytes;  /* the process's peak resident memory (getrusage) */
	size_t cache_length;    /* in place: the caches' positions */
	size_t cache_bytes;     /* in place: the device bytes the caches hold */
};

struct tpf_generator;

/* The session and io are borrowed (they must outlive the generator), the
 * options copied.  io must be of the session's model. */
enum tpf_status tpf_generator_create(struct tpf_session *s, const struct tpf_kv_io *io,
				     const struct tpf_generate_options *o, struct tpf_generator **out,
				     struct tpf_diag *d);
void tpf_generator_free(struct tpf_generator *g);
/* Back to before the first step with the same prompts and options: the
 * next step starts the generation again (its tokens and figures anew; the
 * session's plans and CUDA graphs stay, so a first generation can warm up
 * a timed one). */
void tpf_generator_reset(struct tpf_generator *g);
/* Adds a sequence (n >= 1 token ids, each below the vocabulary size when
 * the logits' last dim is static) before the first step. */
enum tpf_status tpf_generator_add_prompt(struct tpf_generator *g, const int64_t *ids, size_t n,
					 struct tpf_diag *d);
/* One forward call and one token per unfinished sequence; *done (may be
 * NULL) becomes 1 once every sequence has stopped.  A step after that does
 * nothing. */
enum tpf_status tpf_generator_step(struct tpf_generator *g, int *done, struct tpf_diag *d);
/* Steps until every sequence has stopped; after each step calls progress
 * (when not NULL) with the step count. */
enum tpf_status tpf_generator_run(struct tpf_generator *g, void (*progress)(void *arg, size_t step),
				  void *arg, struct tpf_diag *d);
/* The sequences added, and the tokens generated for sequence i so far
 * (*ids valid until the next step or free). */
size_t tpf_generator_count(const struct tpf_generator *g);
size_t tpf_generator_tokens(const struct tpf_generator *g, size_t i, const int64_t **ids);
void tpf_generator_stats(const struct tpf_generator *g, struct tpf_generate_stats *out);

/* ------------------------------------------------------------ --verify
 * The comparison of `tpfuse run --verify`: the optimized graph's outputs
 * (got) against the unfused graph's (ref), with per-dtype bounds and, for
 * outputs a quantizer's result reaches, a bounded share of elements one FP8
 * step off (runtime/verify.c explains the bounds).  Writes one line per
 * output on f (with " [rank N]" when rank >= 0).  Returns 0 when every
 * output agrees, 1 on a mismatch, -1 when out of memory.  opt_graph may be
 * NULL. */
int tpf_verify_outputs(const struct tpf_graph *ref_graph, const struct tpf_graph *opt_graph,
		       const struct tpf_host_tensor *ref, size_t n_ref,
		       const struct tpf_host_tensor *got, size_t n_got, int rank, FILE *f);

#ifdef __cplusplus
}
#endif

#endif /* TPF_RUNTIME_H */
