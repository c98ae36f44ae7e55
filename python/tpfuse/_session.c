/*
 * tpfuse._tpfuse.Session: a model compiled for a backend and a runtime
 * session of it (runtime/tpf-runtime.h), as `tpfuse run` makes them, and
 * its calls: run (one forward call) and generate (the runtime's token
 * generation loop over the model's KV-cache I/O, as `tpfuse generate`).
 *
 * Tensors cross as raw bytes: a dtype is its ONNX code (tpf_dtype's
 * values), a shape a tuple, the data a buffer; python/tpfuse/__init__.py
 * makes and reads the numpy arrays.  Every call runs without the GIL under
 * the library lock (_tpfuse.c's run_job), and what a run or a generation
 * returns is copied out under that lock, so threads sharing a session see
 * whole results.
 *
 * With world_size > 1 the session joins the MPI job this process was
 * started in (mpirun): one communicator per backend for the process, made
 * by its first session and shared by the later ones, freed at exit.
 */
#include "_tpfuse.h"

#include <stdlib.h>
#include <string.h>

#include "tpf-passes.h"
#include "tpf-runtime.h"
#ifdef TPF_HAVE_NCCL
#include "tpf-cuda-runtime.h"
#endif

typedef struct {
	PyObject_HEAD
	struct tpf_model *model;
	struct tpf_session *session;
	struct tpf_comm *comm; /* a self communicator (owned) or the process's world */
	int own_comm;
	struct tpf_kv_io io;   /* found by the first generate */
	int have_io;
	PyObject *inputs, *outputs; /* [(name, dtype, shape)] of the compiled graph */
} SessionObject;

static PyTypeObject SessionType;

/* ------------------------------------------------------- the world */

/* The communicator of the MPI job, per backend (see the top). */
static struct tpf_comm *world_comms[TPF_BACKEND_COUNT];

static void free_world_comms(void)
{
	for (int b = 0; b < TPF_BACKEND_COUNT; b++) {
		tpf_comm_free(world_comms[b]);
		world_comms[b] = NULL;
	}
}

/* Runs without the GIL.  The world of this process for rank `rank` of
 * `world`; *bad_arg is set when the job disagrees with those two. */
static enum tpf_status open_world(enum tpf_backend b, int rank, int world, struct tpf_comm **out,
				  int *bad_arg, struct tpf_diag *d)
{
	const struct tpf_comm_options co = {0};
	enum tpf_status st = TPF_OK;

	if (!world_comms[b]) {
		if (!tpf_comm_launched_by_mpi()) {
			*bad_arg = 1;
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "world_size %d: this process was not started by an MPI "
					     "launcher (mpirun -np %d python ...)", world, world);
		}
		if (b == TPF_BACKEND_CUDA)
#ifdef TPF_HAVE_NCCL
			st = tpf_comm_create_nccl(&co, &world_comms[b], d);
#else
			st = tpf_diag_fail(d, TPF_ERR_UNSUPPORTED,
					   "backend 'cuda' with world_size > 1 needs NCCL (this "
					   "tpfuse was built without it)");
#endif
		else
			st = tpf_comm_create_mpi(&co, &world_comms[b], d);
		if (st)
			return st;
	}
	if (world_comms[b]->world != world || world_comms[b]->rank != rank) {
		*bad_arg = 1;
		return tpf_diag_fail(d, TPF_ERR_INVALID,
				     "rank %d of world_size %d: the MPI job runs this process as "
				     "rank %d of %d", rank, world, world_comms[b]->rank,
				     world_comms[b]->world);
	}
	*out = world_comms[b];
	return TPF_OK;
}

/* ------------------------------------------------------------ opening */

struct open_job {
	/* in */
	const struct source *src;
	const char *passes; /* NULL: no pipeline */
	int lower;          /* the backend's lowering pipeline */
	enum tpf_backend backend;
	int rank, world;
	/* out */
	SessionObject *s;
	enum tpf_status st;
	const char *what;
	int bad_arg;
	struct tpf_diag *d;
};

static void close_session(SessionObject *s)
{
	tpf_session_free(s->session);
	if (s->have_io)
		tpf_kv_io_release(&s->io);
	tpf_model_free(s->model);
	if (s->own_comm)
		tpf_comm_free(s->comm);
	s->session = NULL;
	s->model = NULL;
	s->comm = NULL;
	s->have_io = s->own_comm = 0;
}

/* The command's load for `tpfuse run`: verify, lenient inference (the
 * runtime binds shapes itself), the pipeline, the backend's lowering,
 * errors only; then the session.  Ranks agree on the load before the
 * session's own start-up exchange. */
static void open_work(void *job)
{
	struct open_job *j = job;
	SessionObject *s = j->s;
	enum tpf_compile_stage failed = TPF_COMPILE_INPUT;
	struct tpf_compile_options co = {
		.verify_before = 1,
		.infer = TPF_INFER_LENIENT,
		.optimize = j->passes != NULL,
		.pipeline = {.passes = j->passes},
		.min_severity = TPF_SEV_ERROR,
		.target = j->lower ? tpf_backend_name(j->backend) : NULL,
		.failed = &failed,
	};

	j->what = "cannot open the communicator";
	if (j->world > 1) {
		j->st = open_world(j->backend, j->rank, j->world, &s->comm, &j->bad_arg, j->d);
	} else {
		j->st = tpf_comm_create_self(&(struct tpf_comm_options){0}, &s->comm, j->d);
		s->own_comm = !j->st;
	}
	if (j->st)
		goto out;
	j->what = "cannot load the model";
	j->st = source_load(j->src, &s->model, j->d);
	if (!j->st) {
		co.pipeline.ctx.rank = j->world > 1 ? j->rank : -1;
		co.pipeline.ctx.world_size = j->world > 1 ? j->world : -1;
		j->st = tpf_compile(s->model, &co, j->d);
		j->what = failed == TPF_COMPILE_INPUT ? "the model is not valid"
						      : "cannot compile the model";
	}
	if (j->world > 1)
		j->st = tpf_comm_agree(s->comm, j->st, "loading the model", j->d);
	if (j->st)
		goto out;
	j->what = "cannot create the session";
	j->st = tpf_session_create(s->model,
				   &(struct tpf_session_options){.backend = j->backend,
								 .comm = s->comm,
								 .check_rank_files = j->world > 1},
				   &s->session, j->d);
out:
	if (j->st)
		close_session(s);
}

/* A value's (name, dtype, shape): dims are ints, names of symbolic dims,
 * or None; the shape None when the rank is unknown. */
static PyObject *value_info(const struct tpf_value *v)
{
	const struct tpf_shape *sh = &v->type.shape;
	PyObject *shape;

	if (sh->rank < 0) {
		shape = Py_None;
		Py_INCREF(shape);
	} else if ((shape = PyList_New(sh->rank))) {
		for (int k = 0; k < sh->rank; k++) {
			const struct tpf_dim *dim = &sh->dims[k];
			PyObject *x = dim->param      ? PyUnicode_FromString(dim->param)
				      : dim->value >= 0 ? PyLong_FromLongLong(dim->value)
							: (Py_INCREF(Py_None), Py_None);

			if (!x) {
				Py_CLEAR(shape);
				break;
			}
			PyList_SET_ITEM(shape, k, x);
		}
	}
	if (!shape)
		return NULL;
	return Py_BuildValue("(siN)", v->name, (int)v->type.dtype, shape);
}

/* The graph's runtime inputs (those without an initializer) or outputs. */
static PyObject *values_info(struct tpf_value *const *vals, size_t n, int skip_init)
{
	PyObject *list = PyList_New(0);

	for (size_t i = 0; list && i < n; i++) {
		PyObject *item;

		if (skip_init && vals[i]->init)
			continue;
		item = value_info(vals[i]);
		if (!item || PyList_Append(list, item) < 0)
			Py_CLEAR(list);
		Py_XDECREF(item);
	}
	return list;
}

static PyObject *py_open_session(PyObject *self, PyObject *args, PyObject *kwargs)
{
	static char *kwlist[] = {"model", "rank", "world_size", "backend", "passes", "lower",
				 "base_dir", NULL};
	PyObject *model, *rank_obj = NULL, *world_obj = NULL, *passes_obj = NULL;
	PyObject *base_dir = Py_None;
	const char *backend_name = "cpu", *passes = "default";
	int lower = 1;
	long rank = 0, world = 1;
	enum tpf_backend backend;
	struct source src;
	struct open_job j = {0};
	SessionObject *s;

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOsO$pO:open_session", kwlist, &model,
					 &rank_obj, &world_obj, &backend_name, &passes_obj, &lower,
					 &base_dir))
		return NULL;
	if ((rank_obj && int_arg(rank_obj, "rank", 0, MAX_WORLD_SIZE - 1, 0, &rank) < 0) ||
	    (world_obj && int_arg(world_obj, "world_size", 1, MAX_WORLD_SIZE, 1, &world) < 0))
		return NULL;
	if (rank >= world)
		return PyErr_Format(PyExc_ValueError, "rank %ld is not below world_size %ld", rank,
				    world);
	if (tpf_backend_from_name(backend_name, &backend))
		return PyErr_Format(PyExc_ValueError, "backend: expected 'cpu' or 'cuda', not '%s'",
				    backend_name);
#ifndef TPF_HAVE_CUDA
	if (backend == TPF_BACKEND_CUDA)
		return PyErr_Format(UnsupportedError,
				    "backend 'cuda': this tpfuse was built without CUDA");
#endif
	if (passes_obj == Py_None) {
		passes = NULL;
	} else if (passes_obj) {
		if (!PyUnicode_Check(passes_obj))
			return PyErr_Format(PyExc_TypeError, "passes: expected a str or None, not %.100s",
					    Py_TYPE(passes_obj)->tp_name);
		if (!(passes = PyUnicode_AsUTF8(passes_obj)) || check_pass_list(passes) < 0)
			return NULL;
	}
	if (source_init(&src, model, base_dir) < 0)
		return NULL;
	s = PyObject_New(SessionObject, &SessionType);
	if (!s) {
		source_release(&src);
		return NULL;
	}
	memset((char *)s + sizeof(PyObject), 0, sizeof(*s) - sizeof(PyObject));
	j = (struct open_job){.src = &src, .passes = passes, .lower = lower, .backend = backend,
			      .rank = (int)rank, .world = (int)world, .s = s};
	if (run_job(open_work, &j, &j.d) < 0) {
		Py_CLEAR(s);
	} else if (j.st) {
		raise_error(j.bad_arg ? PyExc_ValueError : NULL, j.st, j.what, j.d);
		Py_CLEAR(s);
	} else {
		const struct tpf_graph *g = s->model->graph;

		s->inputs = values_info(g->inputs, g->n_inputs, 1);
		s->outputs = s->inputs ? values_info(g->outputs, g->n_outputs, 0) : NULL;
		if (!s->outputs)
			Py_CLEAR(s);
	}
	tpf_diag_free(j.d);
	source_release(&src);
	return (PyObject *)s;
}

/* ------------------------------------------------------------- methods */

static int session_open(SessionObject *s)
{
	if (s->session)
		return 0;
	PyErr_SetString(PyExc_ValueError, "the session is closed");
	return -1;
}

static void close_work(void *job)
{
	close_session(job);
}

PyDoc_STRVAR(close_doc, "close()\n--\n\nFrees the session and its model (again: nothing).");

static PyObject *session_close(SessionObject *s, PyObject *unused)
{
	struct tpf_diag *d = NULL;

	if (s->model || s->comm) {
		if (run_job(close_work, s, &d) < 0)
			return NULL;
		tpf_diag_free(d);
	}
	Py_RETURN_NONE;
}

PyDoc_STRVAR(inputs_doc, "inputs()\n--\n\nThe runtime inputs: [(name, dtype, shape)].");

static PyObject *session_inputs(SessionObject *s, PyObject *unused)
{
	if (!s->inputs)
		return PyList_New(0);
	return PyList_GetSlice(s->inputs, 0, PyList_GET_SIZE(s->inputs));
}

PyDoc_STRVAR(outputs_doc, "outputs()\n--\n\nThe graph outputs: [(name, dtype, shape)].");

static PyObject *session_outputs(SessionObject *s, PyObject *unused)
{
	if (!s->outputs)
		return PyList_New(0);
	return PyList_GetSlice(s->outputs, 0, PyList_GET_SIZE(s->outputs));
}

struct run_job {
	SessionObject *s;
	const struct tpf_host_tensor *in;
	size_t n_in;
	struct tpf_host_tensor *out; /* copies, tpf_malloc'ed */
	size_t n_out;
	enum tpf_status st;
	struct tpf_diag *d;
};

static void run_work(void *job)
{
	struct run_job *j = job;
	const struct tpf_host_tensor *out;
	size_t n;

	if (!j->s->session)
		return; /* closed by another thread meanwhile */
	j->st = tpf_session_run(j->s->session, j->in, j->n_in, &out, &n, j->d);
	if (j->st)
		return;
	j->out = tpf_malloc((n ? n : 1) * sizeof(*j->out));
	if (!j->out) {
		j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "out of memory");
		return;
	}
	memset(j->out, 0, (n ? n : 1) * sizeof(*j->out));
	for (j->n_out = 0; j->n_out < n; j->n_out++) {
		const struct tpf_host_tensor *t = &out[j->n_out];
		struct tpf_host_tensor *c = &j->out[j->n_out];
		size_t bytes = t->nbytes;

		if (!bytes && tpf_host_tensor_bytes(t, &bytes)) {
			j->st = tpf_diag_fail(j->d, TPF_ERR_LIMIT, "output '%s': too large", t->name);
			return;
		}
		*c = *t;
		c->nbytes = bytes;
		c->name = tpf_strdup(t->name ? t->name : "");
		c->data = tpf_malloc(bytes ? bytes : 1);
		if (!c->name || !c->data) {
			j->n_out++;
			j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "out of memory");
			return;
		}
		if (t->data)
			memcpy(c->data, t->data, bytes);
		else /* a kept input updated in place stays on the device */
			memset(c->data, 0, bytes);
	}
}

/* One feed (name, dtype, shape, data) into *t, holding the buffer in *view. */
static int feed_arg(PyObject *item, struct tpf_host_tensor *t, Py_buffer *view)
{
	PyObject *name, *shape, *data;
	int dtype;
	size_t want;

	if (!PyArg_ParseTuple(item, "UiO!O:run", &name, &dtype, &PyTuple_Type, &shape, &data))
		return -1;
	t->name = PyUnicode_AsUTF8(name);
	if (!t->name)
		return -1;
	if (PyTuple_GET_SIZE(shape) > TPF_KERNEL_MAX_RANK) {
		PyErr_Format(InputError, "input '%s': rank %zd is over the runtime's %d", t->name,
			     PyTuple_GET_SIZE(shape), TPF_KERNEL_MAX_RANK);
		return -1;
	}
	if (!tpf_dtype_is_valid(dtype)) {
		PyErr_Format(InputError, "input '%s': no dtype %d", t->name, dtype);
		return -1;
	}
	t->dtype = (enum tpf_dtype)dtype;
	t->rank = (int)PyTuple_GET_SIZE(shape);
	for (int k = 0; k < t->rank; k++) {
		long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, k));

		if (v == -1 && PyErr_Occurred())
			return -1;
		t->dims[k] = v;
	}
	if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0)
		return -1;
	t->data = view->buf;
	t->nbytes = (size_t)view->len;
	if (tpf_host_tensor_bytes(t, &want) || want != (size_t)view->len) {
		PyErr_Format(InputError, "input '%s': %zd bytes of data for its dtype and shape",
			     t->name, view->len);
		return -1;
	}
	return 0;
}

/* The outputs as [(name, dtype, shape, bytearray)]. */
static PyObject *run_result(const struct tpf_host_tensor *out, size_t n)
{
	PyObject *list = PyList_New((Py_ssize_t)n);

	for (size_t i = 0; list && i < n; i++) {
		const struct tpf_host_tensor *t = &out[i];
		PyObject *shape = PyTuple_New(t->rank), *item = NULL;

		for (int k = 0; shape && k < t->rank; k++) {
			PyObject *x = PyLong_FromLongLong(t->dims[k]);

			if (!x)
				Py_CLEAR(shape);
			else
				PyTuple_SET_ITEM(shape, k, x);
		}
		if (shape)
			item = Py_BuildValue("(siNN)", t->name, (int)t->dtype, shape,
					     PyByteArray_FromStringAndSize(t->data, (Py_ssize_t)t->nbytes));
		if (!item)
			Py_CLEAR(list);
		else
			PyList_SET_ITEM(list, (Py_ssize_t)i, item);
	}
	return list;
}

PyDoc_STRVAR(run_doc,
"run(feeds)\n"
"--\n"
"\n"
"One forward call.  feeds: a sequence of (name, dtype, shape, data) with\n"
"the dtype's ONNX code, a tuple shape and a buffer of the packed elements.\n"
"Returns every graph output as (name, dtype, shape, bytearray).");

static PyObject *session_run(SessionObject *s, PyObject *feeds_obj)
{
	PyObject *feeds, *result = NULL;
	struct tpf_host_tensor *in;
	Py_buffer *views;
	Py_ssize_t n, held = 0;
	struct run_job j = {0};

	if (session_open(s) < 0)
		return NULL;
	feeds = PySequence_Fast(feeds_obj, "run: feeds must be a sequence");
	if (!feeds)
		return NULL;
	n = PySequence_Fast_GET_SIZE(feeds);
	in = PyMem_Calloc((size_t)n + 1, sizeof(*in));
	views = PyMem_Calloc((size_t)n + 1, sizeof(*views));
	if (!in || !views) {
		PyErr_NoMemory();
		goto out;
	}
	for (; held < n; held++)
		if (feed_arg(PySequence_Fast_GET_ITEM(feeds, held), &in[held], &views[held]) < 0)
			goto out;
	j = (struct run_job){.s = s, .in = in, .n_in = (size_t)n};
	if (run_job(run_work, &j, &j.d) < 0)
		goto out;
	if (!j.st && !j.out)
		PyErr_SetString(PyExc_ValueError, "the session is closed"); /* meanwhile */
	else if (j.st)
		raise_error(j.st == TPF_ERR_INVALID ? InputError : NULL, j.st, "run", j.d);
	else
		result = run_result(j.out, j.n_out);
	tpf_host_tensors_release(j.out, j.n_out);
	tpf_diag_free(j.d);
out:
	for (Py_ssize_t i = 0; views && i < held; i++)
		PyBuffer_Release(&views[i]);
	/* a feed that failed after taking its buffer */
	if (views && held < n && views[held].obj)
		PyBuffer_Release(&views[held]);
	PyMem_Free(views);
	PyMem_Free(in);
	Py_DECREF(feeds);
	return result;
}

/* ------------------------------------------------------------ generate */

struct generate_job {
	SessionObject *s;
	struct tpf_generate_options o;
	int64_t **prompts;
	size_t *lens, n;
	/* out */
	int64_t **tokens; /* per prompt, tpf_malloc'ed */
	size_t *n_tokens;
	struct tpf_generate_stats stats;
	enum tpf_status st;
	const char *what;
	int bad_input, closed;
	struct tpf_diag *d;
};

/* The sequence of `tpfuse generate`: the KV-cache I/O (found once per
 * session), a generator, the prompts, the loop; the tokens copied out. */
static void generate_work(void *job)
{
	struct generate_job *j = job;
	struct tpf_generator *gen = NULL;

	j->what = "the model has no KV-cache I/O";
	j->closed = !j->s->session; /* by another thread meanwhile */
	if (j->closed)
		return;
	if (!j->s->have_io) {
		j->st = tpf_kv_io_find(j->s->model->graph, &j->s->io, j->d);
		if (j->st)
			return;
		j->s->have_io = 1;
	}
	j->what = "generate";
	j->st = tpf_generator_create(j->s->session, &j->s->io, &j->o, &gen, j->d);
	for (size_t i = 0; !j->st && i < j->n; i++) {
		j->st = tpf_generator_add_prompt(gen, j->prompts[i], j->lens[i], j->d);
		j->bad_input = j->st == TPF_ERR_INVALID;
	}
	if (!j->st)
		j->st = tpf_generator_run(gen, NULL, NULL, j->d);
	for (size_t i = 0; !j->st && i < j->n; i++) {
		const int64_t *ids;
		size_t k = tpf_generator_tokens(gen, i, &ids);

		j->tokens[i] = tpf_malloc((k ? k : 1) * sizeof(*ids));
		if (!j->tokens[i]) {
			j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "out of memory");
			break;
		}
		memcpy(j->tokens[i], ids, k * sizeof(*ids));
		j->n_tokens[i] = k;
	}
	if (!j->st)
		tpf_generator_stats(gen, &j->stats);
	tpf_generator_free(gen);
}

/* A sequence of token ids as a PyMem array (*n of them); `what` names it. */
static int ids_arg(PyObject *obj, const char *what, int64_t **ids, size_t *n)
{
	PyObject *seq = PySequence_Fast(obj, what);
	Py_ssize_t len;

	*ids = NULL;
	if (!seq)
		return -1;
	len = PySequence_Fast_GET_SIZE(seq);
	*ids = PyMem_Malloc((size_t)(len ? len : 1) * sizeof(**ids));
	*n = (size_t)len;
	for (Py_ssize_t i = 0; *ids && i < len; i++) {
		PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
		long long v = PyLong_Check(x) && !PyBool_Check(x) ? PyLong_AsLongLong(x) : -1;

		if (v < 0) {
			if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_OverflowError)) {
				PyErr_Clear();
				PyErr_Format(PyExc_ValueError, "%s: item %zd is not a token id (an int "
					     "of 0 or more): %R", what, i, x);
			}
			Py_DECREF(seq);
			PyMem_Free(*ids);
			*ids = NULL;
			return -1;
		}
		(*ids)[i] = v;
	}
	Py_DECREF(seq);
	return *ids ? 0 : (PyErr_NoMemory(), -1);
}

static PyObject *generate_result(const struct generate_job *j)
{
	const struct tpf_generate_stats *st = &j->stats;
	double tps = st->decode_ms > 0 ? (double)(st->new_tokens - j->n) * 1e3 / st->decode_ms : 0;
	PyObject *tokens = PyList_New((Py_ssize_t)j->n);

	for (size_t i = 0; tokens && i < j->n; i++) {
		PyObject *row = PyList_New((Py_ssize_t)j->n_tokens[i]);

		for (size_t k = 0; row && k < j->n_tokens[i]; k++) {
			PyObject *x = PyLong_FromLongLong(j->tokens[i][k]);

			if (!x)
				Py_CLEAR(row);
			else
				PyList_SET_ITEM(row, (Py_ssize_t)k, x);
		}
		if (!row)
			Py_CLEAR(tokens);
		else
			PyList_SET_ITEM(tokens, (Py_ssize_t)i, row);
	}
	if (!tokens)
		return NULL;
	return Py_BuildValue("(N{s:n,s:n,s:d,s:d,s:d,s:d,s:d,s:n,s:O,s:n,s:n,s:n,s:k,s:k,s:n,s:n})", tokens, "steps",
			     (Py_ssize_t)st->steps, "new_tokens", (Py_ssize_t)st->new_tokens,
			     "ttft_ms", st->ttft_ms, "decode_ms", st->decode_ms,
			     "decode_tokens_per_s", tps, "step_p50_ms", st->step_p50_ms,
			     "step_p99_ms", st->step_p99_ms, "plans_built",
			     (Py_ssize_t)st->plans_built, "cache_in_place", st->in_place ? Py_True : Py_False,
			     "cache_length", (Py_ssize_t)st->cache_length, "cache_bytes",
			     (Py_ssize_t)st->cache_bytes, "prefill_calls", (Py_ssize_t)st->prefill_calls,
			     "graphs_captured", st->graphs_captured, "graph_replays", st->graph_replays,
			     "device_bytes", (Py_ssize_t)st->device_bytes, "peak_rss_bytes",
			     (Py_ssize_t)st->peak_rss_bytes);
}

static void generate_job_free(struct generate_job *j)
{
	for (size_t i = 0; i < j->n; i++) {
		if (j->prompts)
			PyMem_Free(j->prompts[i]);
		if (j->tokens)
			tpf_free(j->tokens[i]);
	}
	PyMem_Free(j->prompts);
	PyMem_Free(j->lens);
	PyMem_Free(j->tokens);
	PyMem_Free(j->n_tokens);
	PyMem_Free((void *)j->o.eos_ids);
	PyMem_Free((void *)j->o.suppress_ids);
	tpf_diag_free(j->d);
}

/* The prompts (a sequence of sequences of ids) and the id lists into j. */
static int generate_args(struct generate_job *j, PyObject *prompts, PyObject *eos,
			 PyObject *suppress)
{
	PyObject *seq = PySequence_Fast(prompts, "prompts must be a sequence of token id lists");
	int64_t *ids;

	if (!seq)
		return -1;
	j->n = (size_t)PySequence_Fast_GET_SIZE(seq);
	j->prompts = PyMem_Calloc(j->n + 1, sizeof(*j->prompts));
	j->lens = PyMem_Calloc(j->n + 1, sizeof(*j->lens));
	j->tokens = PyMem_Calloc(j->n + 1, sizeof(*j->tokens));
	j->n_tokens = PyMem_Calloc(j->n + 1, sizeof(*j->n_tokens));
	if (!j->prompts || !j->lens || !j->tokens || !j->n_tokens) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (size_t i = 0; i < j->n; i++) {
		if (ids_arg(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), "prompt", &j->prompts[i],
			    &j->lens[i]) < 0) {
			Py_DECREF(seq);
			return -1;
		}
	}
	Py_DECREF(seq);
	if (ids_arg(eos, "eos", &ids, &j->o.n_eos) < 0)
		return -1;
	j->o.eos_ids = ids;
	if (ids_arg(suppress, "suppress", &ids, &j->o.n_suppress) < 0)
		return -1;
	j->o.suppress_ids = ids;
	return 0;
}

PyDoc_STRVAR(generate_doc,
"generate(prompts, max_new_tokens, eos, suppress, temperature, top_k, top_p, seed, pad_id,\n"
"         max_length=0, prefill_chunk=0)\n"
"--\n"
"\n"
"The runtime's generation loop over the session's model (KV-cache I/O):\n"
"prompts a sequence of token id sequences, left-padded into one batch.\n"
"Returns (tokens per prompt, stats dict).");

static PyObject *session_generate(SessionObject *s, PyObject *args)
{
	PyObject *prompts, *eos, *suppress, *result = NULL;
	Py_ssize_t max_new, max_length = 0, prefill_chunk = 0;
	long top_k;
	long long pad_id;
	unsigned long long seed;
	double temperature, top_p;
	struct generate_job j = {0};

	if (!PyArg_ParseTuple(args, "OnOOdldKL|nn:generate", &prompts, &max_new, &eos, &suppress,
			      &temperature, &top_k, &top_p, &seed, &pad_id, &max_length, &prefill_chunk))
		return NULL;
	if (max_length < 0 || prefill_chunk < 0)
		return PyErr_Format(PyExc_ValueError, "%s must be 0 or more",
				    max_length < 0 ? "max_length" : "prefill_chunk");
	if (session_open(s) < 0)
		return NULL;
	if (max_new < 1)
		return PyErr_Format(PyExc_ValueError, "max_new_tokens must be 1 or more, not %zd",
				    max_new);
	j.s = s;
	j.o = (struct tpf_generate_options){.max_new_tokens = (size_t)max_new, .pad_id = pad_id,
					    .temperature = temperature, .top_k = top_k,
					    .top_p = top_p, .seed = seed, .max_length = (size_t)max_length,
					    .prefill_chunk = (size_t)prefill_chunk};
	if (generate_args(&j, prompts, eos, suppress) == 0 &&
	    run_job(generate_work, &j, &j.d) == 0) {
		if (j.closed)
			PyErr_SetString(PyExc_ValueError, "the session is closed");
		else if (j.st)
			raise_error(j.bad_input ? InputError : NULL, j.st, j.what, j.d);
		else
			result = generate_result(&j);
	}
	generate_job_free(&j);
	return result;
}

/* ------------------------------------------------------------- the type */

static void session_dealloc(SessionObject *s)
{
	if (s->model || s->comm) {
		Py_BEGIN_ALLOW_THREADS
		PyThread_acquire_lock(lib_lock, WAIT_LOCK);
		close_session(s);
		PyThread_release_lock(lib_lock);
		Py_END_ALLOW_THREADS
	}
	Py_XDECREF(s->inputs);
	Py_XDECREF(s->outputs);
	PyObject_Free(s);
}

static PyMethodDef session_methods[] = {
	{"run", (PyCFunction)session_run, METH_O, run_doc},
	{"generate", (PyCFunction)session_generate, METH_VARARGS, generate_doc},
	{"inputs", (PyCFunction)session_inputs, METH_NOARGS, inputs_doc},
	{"outputs", (PyCFunction)session_outputs, METH_NOARGS, outputs_doc},
	{"close", (PyCFunction)session_close, METH_NOARGS, close_doc},
	{NULL, NULL, 0, NULL},
};

static PyTypeObject SessionType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "tpfuse._tpfuse.Session",
	.tp_doc = "A compiled model and its runtime session (made by open_session).",
	.tp_basicsize = sizeof(SessionObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_dealloc = (destructor)session_dealloc,
	.tp_methods = session_methods,
};

PyDoc_STRVAR(open_session_doc,
"open_session(model, rank=0, world_size=1, backend='cpu', passes='default', *,\n"
"             lower=True, base_dir=None)\n"
"--\n"
"\n"
"Compiles a model (a path or serialized bytes) for a backend and opens a\n"
"runtime session of it.  passes None: no pipeline; lower False: not the\n"
"backend's lowering either (the model as tpfuse generate runs it).");

static PyMethodDef module_methods[] = {
	{"open_session", (PyCFunction)(void (*)(void))py_open_session,
	 METH_VARARGS | METH_KEYWORDS, open_session_doc},
	{NULL, NULL, 0, NULL},
};

int session_module_init(PyObject *m)
{
	static int at_exit;

	if (PyType_Ready(&SessionType) < 0 || PyModule_AddFunctions(m, module_methods) < 0)
		return -1;
	if (!at_exit && Py_AtExit(free_world_comms) < 0)
		return PyErr_SetString(PyExc_RuntimeError, "cannot register the MPI clean-up"), -1;
	at_exit = 1;
	Py_INCREF(&SessionType);
	if (PyModule_AddObject(m, "Session", (PyObject *)&SessionType) < 0) {
		Py_DECREF(&SessionType);
		return -1;
	}
	return 0;
}
