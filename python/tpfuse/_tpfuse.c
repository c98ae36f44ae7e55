/*
 * tpfuse._tpfuse: the CPython extension behind the `tpfuse` package.
 *
 * Each call here loads a model (a path, mapped by the library with its
 * external data, or serialized bytes), works on it and frees it again; the
 * runtime's objects (a Session holds its model and runtime session) are
 * _session.c's.  The library work runs with the GIL released, one call at
 * a time (the library keeps a global allocation counter, so calls are
 * serialized by a lock of this module; other Python threads run meanwhile).
 * Library errors become exceptions of this module carrying the diagnostics.
 *
 * python/tpfuse/__init__.py wraps these functions (onnx.ModelProto in and
 * out); docs/python.md documents the package.
 */
#include "_tpfuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tpf-passes.h"

PyThread_type_lock lib_lock;
PyObject *Error, *ModelError, *FileError, *UnsupportedError, *InputError;
static PyTypeObject *DiagnosticType;

/* ------------------------------------------------------------------ inputs */

void source_release(struct source *s)
{
	Py_CLEAR(s->path);
	Py_CLEAR(s->base_dir);
	if (s->have_view)
		PyBuffer_Release(&s->view);
	s->have_view = 0;
	PyMem_Free(s->copy);
	s->copy = NULL;
}

/* str / os.PathLike: a path; bytes-like: a serialized ModelProto. */
int source_init(struct source *s, PyObject *model, PyObject *base_dir)
{
	memset(s, 0, sizeof(*s));
	if (PyUnicode_Check(model) || (!PyObject_CheckBuffer(model) &&
				       PyObject_HasAttrString(model, "__fspath__"))) {
		if (!PyUnicode_FSConverter(model, &s->path))
			return -1;
		if (base_dir != Py_None) {
			PyErr_SetString(PyExc_ValueError,
					"base_dir is for models given as bytes; a model loaded from "
					"a path reads its external data next to the file");
			source_release(s);
			return -1;
		}
		return 0;
	}
	if (!PyObject_CheckBuffer(model)) {
		PyErr_Format(PyExc_TypeError,
			     "model: expected an onnx.ModelProto, serialized bytes or a path "
			     "(str or os.PathLike), not %.100s",
			     Py_TYPE(model)->tp_name);
		return -1;
	}
	if (PyObject_GetBuffer(model, &s->view, PyBUF_SIMPLE) < 0)
		return -1;
	s->have_view = 1;
	if (PyBytes_Check(model)) {
		s->data = s->view.buf;
		s->size = (size_t)s->view.len;
	} else {
		s->copy = PyMem_Malloc(s->view.len ? (size_t)s->view.len : 1);
		if (!s->copy) {
			source_release(s);
			PyErr_NoMemory();
			return -1;
		}
		memcpy(s->copy, s->view.buf, (size_t)s->view.len);
		s->data = s->copy;
		s->size = (size_t)s->view.len;
		PyBuffer_Release(&s->view);
		s->have_view = 0;
	}
	if (base_dir != Py_None && !PyUnicode_FSConverter(base_dir, &s->base_dir)) {
		source_release(s);
		return -1;
	}
	return 0;
}

static const char *source_path(const struct source *s)
{
	return s->path ? PyBytes_AS_STRING(s->path) : NULL;
}

enum tpf_status source_load(const struct source *s, struct tpf_model **m,
				   struct tpf_diag *d)
{
	struct tpf_load_options lo = {0};

	if (s->path)
		return tpf_model_load_file(PyBytes_AS_STRING(s->path), &lo, m, d);
	return tpf_model_load_memory(s->data, s->size,
				     s->base_dir ? PyBytes_AS_STRING(s->base_dir) : "", &lo, m, d);
}

/* ---------------------------------------------------------- text capture */

/* A FILE* that collects what the library writes into a malloc'ed string. */
struct capture {
	FILE *f;
	char *buf;
	size_t len;
};

static int capture_open(struct capture *c)
{
	c->buf = NULL;
	c->len = 0;
	c->f = open_memstream(&c->buf, &c->len);
	return c->f ? 0 : -1;
}

/* Closes the stream; the text stays in c->buf (free() it). */
static int capture_close(struct capture *c)
{
	int rc = 0;

	if (c->f) {
		rc = fclose(c->f);
		c->f = NULL;
	}
	return rc;
}

static void capture_free(struct capture *c)
{
	capture_close(c);
	free(c->buf);
	c->buf = NULL;
	c->len = 0;
}

/* ----------------------------------------------------------- diagnostics */

static const char *severity_name(enum tpf_severity s)
{
	switch (s) {
	case TPF_SEV_NOTE:
		return "note";
	case TPF_SEV_WARNING:
		return "warning";
	default:
		return "error";
	}
}

/* One Diagnostic(severity, node, op, message).  A text that starts with
 * "node 'NAME' (OP): " gives node and op; message is the rest. */
static PyObject *make_diagnostic(const struct tpf_diag_entry *e)
{
	const char *text = e->text ? e->text : "";
	const char *msg = text;
	PyObject *node = NULL, *op = NULL, *d;

	if (strncmp(text, "node '", 6) == 0) {
		const char *name = text + 6;
		const char *close = strstr(name, "' (");

		if (close) {
			const char *ops = close + 3;
			const char *end = strstr(ops, "): ");

			if (end) {
				node = PyUnicode_DecodeUTF8(name, close - name, "replace");
				op = PyUnicode_DecodeUTF8(ops, end - ops, "replace");
				if (!node || !op) {
					Py_XDECREF(node);
					Py_XDECREF(op);
					return NULL;
				}
				msg = end + 3;
			}
		}
	}
	d = PyStructSequence_New(DiagnosticType);
	if (!d) {
		Py_XDECREF(node);
		Py_XDECREF(op);
		return NULL;
	}
	PyObject *sev = PyUnicode_FromString(severity_name(e->severity));
	PyObject *m = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");

	if (!sev || !m) {
		Py_XDECREF(sev);
		Py_XDECREF(m);
		Py_XDECREF(node);
		Py_XDECREF(op);
		Py_DECREF(d);
		return NULL;
	}
	if (!node) {
		node = Py_None;
		Py_INCREF(node);
	}
	if (!op) {
		op = Py_None;
		Py_INCREF(op);
	}
	PyStructSequence_SET_ITEM(d, 0, sev);
	PyStructSequence_SET_ITEM(d, 1, node);
	PyStructSequence_SET_ITEM(d, 2, op);
	PyStructSequence_SET_ITEM(d, 3, m);
	return d;
}

PyObject *diag_list(const struct tpf_diag *d)
{
	PyObject *list = PyList_New(0);
	size_t i;

	if (!list)
		return NULL;
	for (i = 0; d && i < d->count; i++) {
		PyObject *item = make_diagnostic(&d->entries[i]);

		if (!item || PyList_Append(list, item) < 0) {
			Py_XDECREF(item);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(item);
	}
	if (d && d->dropped) {
		char text[96];
		struct tpf_diag_entry e = {.severity = TPF_SEV_NOTE, .text = text};
		PyObject *item;

		snprintf(text, sizeof(text), "%zu more message%s not kept", d->dropped,
			 d->dropped == 1 ? " was" : "s were");
		item = make_diagnostic(&e);
		if (!item || PyList_Append(list, item) < 0) {
			Py_XDECREF(item);
			Py_DECREF(list);
			return NULL;
		}
		Py_DECREF(item);
	}
	return list;
}

/* Each status: its key (an exception's .status) and its exception type. */
struct status_info {
	enum tpf_status st;
	const char *key;
	PyObject **type;
};

static const struct status_info statuses[] = {
	{TPF_OK, "ok", &Error},
	{TPF_ERR_INVALID, "invalid", &ModelError},
	{TPF_ERR_NOMEM, "nomem", &Error},
	{TPF_ERR_IO, "io", &FileError},
	{TPF_ERR_PARSE, "parse", &ModelError},
	{TPF_ERR_UNSUPPORTED, "unsupported", &UnsupportedError},
	{TPF_ERR_VERIFY, "verify", &ModelError},
	{TPF_ERR_LIMIT, "limit", &ModelError},
	{TPF_ERR_RUNTIME, "runtime", &Error},
	/* an output that is an input or another output: a bad argument */
	{TPF_ERR_CONFLICT, "conflict", &PyExc_ValueError},
};

static const struct status_info *status_info(enum tpf_status st)
{
	static const struct status_info unknown = {TPF_OK, "unknown", &Error};
	size_t i;

	for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].st == st)
			return &statuses[i];
	return &unknown;
}

int run_job(void (*work)(void *), void *job, struct tpf_diag **d)
{
	*d = tpf_diag_create();
	if (!*d) {
		PyErr_NoMemory();
		return -1;
	}
	Py_BEGIN_ALLOW_THREADS
	PyThread_acquire_lock(lib_lock, WAIT_LOCK);
	work(job);
	PyThread_release_lock(lib_lock);
	Py_END_ALLOW_THREADS
	return 0;
}

/* The message names the first error and counts the others. */
PyObject *raise_status(enum tpf_status st, const char *what, const struct tpf_diag *d)
{
	return raise_error(NULL, st, what, d);
}

PyObject *raise_error(PyObject *type, enum tpf_status st, const char *what,
		      const struct tpf_diag *d)
{
	const char *first = NULL;
	size_t i, errors = 0;
	PyObject *msg, *exc, *diags, *key;

	if (!type)
		type = *status_info(st)->type;

	if (st == TPF_OK)
		st = TPF_ERR_VERIFY; /* errors reported without a failing status */
	for (i = 0; d && i < d->count; i++) {
		if (d->entries[i].severity != TPF_SEV_ERROR)
			continue;
		if (!first)
			first = d->entries[i].text ? d->entries[i].text : "";
		errors++;
	}
	if (first && errors > 1)
		msg = PyUnicode_FromFormat("%s: %s (and %zu more error%s; see .diagnostics)", what,
					   first, errors - 1, errors == 2 ? "" : "s");
	else if (first)
		msg = PyUnicode_FromFormat("%s: %s", what, first);
	else
		msg = PyUnicode_FromFormat("%s: %s", what, tpf_status_name(st));
	if (!msg)
		return NULL;
	exc = PyObject_CallFunctionObjArgs(type, msg, NULL);
	Py_DECREF(msg);
	if (!exc)
		return NULL;
	diags = diag_list(d);
	key = PyUnicode_FromString(status_info(st)->key);
	if (!diags || !key || PyObject_SetAttrString(exc, "diagnostics", diags) < 0 ||
	    PyObject_SetAttrString(exc, "status", key) < 0) {
		Py_XDECREF(diags);
		Py_XDECREF(key);
		Py_DECREF(exc);
		return NULL;
	}
	Py_DECREF(diags);
	Py_DECREF(key);
	PyErr_SetObject(type, exc);
	Py_DECREF(exc);
	return NULL;
}

/* ------------------------------------------------------------------ helpers */

static PyObject *known_pass_names(void)
{
	const struct tpf_pass *const *list;
	size_t n, i;
	PyObject *names = PyList_New(0), *sep, *joined;

	if (!names)
		return NULL;
	list = tpf_pass_list(&n);
	size_t n_pipelines = 0;
	while (tpf_pipeline_name(n_pipelines))
		n_pipelines++;
	for (i = 0; i < n + n_pipelines; i++) {
		const char *name = i < n_pipelines ? tpf_pipeline_name(i) : list[i - n_pipelines]->name;
		PyObject *s = PyUnicode_FromString(name);

		if (!s || PyList_Append(names, s) < 0) {
			Py_XDECREF(s);
			Py_DECREF(names);
			return NULL;
		}
		Py_DECREF(s);
	}
	sep = PyUnicode_FromString(", ");
	joined = sep ? PyUnicode_Join(sep, names) : NULL;
	Py_XDECREF(sep);
	Py_DECREF(names);
	return joined;
}

int check_pass_list(const char *list)
{
	const char *p = list;

	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *q = p;

		while (len && (*q == ' ' || *q == '\t')) {
			q++;
			len--;
		}
		while (len && (q[len - 1] == ' ' || q[len - 1] == '\t'))
			len--;
		if (len) {
			char name[128];

			if (len >= sizeof(name)) {
				PyErr_Format(PyExc_ValueError, "passes: name too long in '%s'", list);
				return -1;
			}
			memcpy(name, q, len);
			name[len] = '\0';
			/* "-NAME": a pass taken out of what the names before it run */
			const char *look = name[0] == '-' ? name + 1 : name;
			if (!(name[0] != '-' && tpf_pipeline_known(name)) && !tpf_pass_find(look)) {
				PyObject *known = known_pass_names();

				if (known) {
					PyErr_Format(PyExc_ValueError,
						     "passes: unknown pass '%s' (known passes and "
						     "pipelines: %U)",
						     look, known);
					Py_DECREF(known);
				}
				return -1;
			}
		}
		p = end ? end + 1 : p + strlen(p);
	}
	return 0;
}

int int_arg(PyObject *o, const char *what, long lo, long hi, long dflt, long *out)
{
	long v;

	if (o == Py_None) {
		*out = dflt;
		return 0;
	}
	if (PyBool_Check(o) || !PyLong_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s: expected an int or None, not %.100s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	v = PyLong_AsLong(o);
	if (v == -1 && PyErr_Occurred()) {
		if (!PyErr_ExceptionMatches(PyExc_OverflowError))
			return -1;
		PyErr_Clear(); /* v is -1: below every lo used here, reported as out of range */
	}
	if (v < lo || v > hi) {
		PyErr_Format(PyExc_ValueError, "%s must be between %ld and %ld, not %R", what, lo,
			     hi, o);
		return -1;
	}
	*out = v;
	return 0;
}

/* Lines of `text` as a list of str (empty lines dropped). */
static PyObject *lines_list(const char *text, size_t len)
{
	PyObject *list = PyList_New(0);
	size_t i = 0;

	if (!list)
		return NULL;
	while (text && i < len) {
		size_t j = i;

		while (j < len && text[j] != '\n')
			j++;
		if (j > i) {
			PyObject *s = PyUnicode_DecodeUTF8(text + i, (Py_ssize_t)(j - i), "replace");

			if (!s || PyList_Append(list, s) < 0) {
				Py_XDECREF(s);
				Py_DECREF(list);
				return NULL;
			}
			Py_DECREF(s);
		}
		i = j + 1;
	}
	return list;
}

/* tpf_pass_stats_print lines "PASS COUNTER VALUE" -> {pass: {counter: value}},
 * in the printed (stable) order. */
static PyObject *stats_dict(const char *text, size_t len)
{
	PyObject *lines = lines_list(text, len), *out = PyDict_New();
	Py_ssize_t i;

	if (!lines || !out)
		goto fail;
	for (i = 0; i < PyList_GET_SIZE(lines); i++) {
		PyObject *parts = PyUnicode_Split(PyList_GET_ITEM(lines, i), NULL, -1);
		PyObject *inner, *value;

		if (!parts)
			goto fail;
		if (PyList_GET_SIZE(parts) != 3) {
			Py_DECREF(parts);
			continue;
		}
		value = PyLong_FromUnicodeObject(PyList_GET_ITEM(parts, 2), 10);
		if (!value) {
			Py_DECREF(parts);
			goto fail;
		}
		inner = PyDict_GetItemWithError(out, PyList_GET_ITEM(parts, 0));
		if (!inner) {
			if (PyErr_Occurred() || !(inner = PyDict_New()) ||
			    PyDict_SetItem(out, PyList_GET_ITEM(parts, 0), inner) < 0) {
				Py_XDECREF(inner);
				Py_DECREF(value);
				Py_DECREF(parts);
				goto fail;
			}
			Py_DECREF(inner); /* out holds it */
		}
		if (PyDict_SetItem(inner, PyList_GET_ITEM(parts, 1), value) < 0) {
			Py_DECREF(value);
			Py_DECREF(parts);
			goto fail;
		}
		Py_DECREF(value);
		Py_DECREF(parts);
	}
	Py_DECREF(lines);
	return out;
fail:
	Py_XDECREF(lines);
	Py_XDECREF(out);
	return NULL;
}

/* ---------------------------------------------------------------- optimize */

struct optimize_job {
	/* in */
	const struct source *src;
	const char *passes, *output;
	int rank, world_size, explain, verify_each;
	size_t external_threshold;
	/* out */
	enum tpf_status st;
	const char *what; /* for the exception message */
	struct tpf_diag *d;
	void *model_bytes;
	size_t model_size;
	struct capture stats_text, explain_text;
};

/* Everything the command's `optimize` does, without the GIL. */
static void optimize_work(void *job)
{
	struct optimize_job *j = job;
	/* as the command's optimize: check the input, run the pipeline, check
	 * the result */
	struct tpf_compile_options co = {TPF_COMPILE_CHECK, .optimize = 1, .verify_after = 1};
	enum tpf_compile_stage failed;
	struct tpf_pass_stats *stats = tpf_pass_stats_create();
	struct tpf_model *m = NULL;

	if (!stats) {
		j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "out of memory");
		j->what = "optimize";
		return;
	}
	j->what = "cannot load the model";
	j->st = source_load(j->src, &m, j->d);
	if (j->st)
		goto out;
	if (j->output) {
		/* the output and its data file may not be the model's files (the
		 * model, its external data) nor each other: refused before any
		 * work, as the command does */
		struct tpf_save_options so = {.external_threshold = j->external_threshold};
		struct tpf_file_set *fs = tpf_file_set_create();

		j->what = "optimize";
		j->st = fs ? tpf_file_set_add_model(fs, m, source_path(j->src), j->d)
			   : tpf_diag_fail(j->d, TPF_ERR_NOMEM, "out of memory");
		if (!j->st)
			j->st = tpf_file_set_add_model_output(fs, j->output, &so, "the output", j->d);
		tpf_file_set_free(fs);
		if (j->st)
			goto out;
	}
	if (j->explain && capture_open(&j->explain_text)) {
		j->what = "optimize";
		j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "cannot capture the near misses");
		goto out;
	}
	co.pipeline.passes = j->passes;
	co.pipeline.ctx.stats = stats;
	co.pipeline.ctx.explain = j->explain ? j->explain_text.f : NULL;
	co.pipeline.ctx.rank = j->rank;
	co.pipeline.ctx.world_size = j->world_size;
	co.pipeline.verify_each = j->verify_each;
	co.failed = &failed;
	j->st = tpf_compile(m, &co, j->d);
	if (failed == TPF_COMPILE_INPUT)
		j->what = "the input model is not valid";
	else if (failed == TPF_COMPILE_OUTPUT)
		j->what = "the optimized model fails verification";
	else
		j->what = "optimization failed";
	if (j->st)
		goto out;
	if (j->output) {
		struct tpf_save_options so = {.external_threshold = j->external_threshold};

		j->what = "cannot save the optimized model";
		j->st = tpf_model_save_file(m, j->output, &so, j->d);
	} else {
		j->what = "cannot serialize the optimized model";
		j->st = tpf_model_save_memory(m, &j->model_bytes, &j->model_size, j->d);
	}
out:
	if (!capture_open(&j->stats_text)) {
		tpf_pass_stats_print(stats, j->stats_text.f);
		capture_close(&j->stats_text);
	}
	capture_close(&j->explain_text);
	tpf_pass_stats_free(stats);
	tpf_model_free(m);
}

PyDoc_STRVAR(optimize_doc,
"optimize(model, passes='default', rank=None, world_size=None, explain=False, *,\n"
"         output=None, external_data_threshold=None, verify_each=False, base_dir=None)\n"
"--\n"
"\n"
"Runs a pass pipeline over a model given as a path or serialized bytes.\n"
"Returns (model_bytes or None when output is given, stats, near_misses,\n"
"diagnostics).");

static PyObject *py_optimize(PyObject *self, PyObject *args, PyObject *kwargs)
{
	static char *kwlist[] = {"model", "passes", "rank", "world_size", "explain", "output",
				 "external_data_threshold", "verify_each", "base_dir", NULL};
	PyObject *model, *passes_obj = NULL, *rank_obj = Py_None, *world_obj = Py_None;
	PyObject *output_obj = Py_None, *threshold_obj = Py_None, *base_dir = Py_None;
	PyObject *output_path = NULL, *result = NULL;
	int explain = 0, verify_each = 0;
	long rank, world, threshold;
	const char *passes = "default";
	struct source src;
	struct optimize_job j;

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOOp$OOpO:optimize", kwlist, &model,
					 &passes_obj, &rank_obj, &world_obj, &explain, &output_obj,
					 &threshold_obj, &verify_each, &base_dir))
		return NULL;
	if (passes_obj == Py_None) {
		passes = "none";
	} else if (passes_obj) {
		if (!PyUnicode_Check(passes_obj)) {
			PyErr_Format(PyExc_TypeError,
				     "passes: expected a str (comma-separated pass or pipeline "
				     "names), not %.100s",
				     Py_TYPE(passes_obj)->tp_name);
			return NULL;
		}
		Py_ssize_t plen;

		passes = PyUnicode_AsUTF8AndSize(passes_obj, &plen);
		if (!passes)
			return NULL;
		if (strlen(passes) != (size_t)plen) {
			PyErr_SetString(PyExc_ValueError, "passes: embedded NUL character");
			return NULL;
		}
		if (check_pass_list(passes) < 0)
			return NULL;
	}
	if (int_arg(rank_obj, "rank", 0, MAX_WORLD_SIZE - 1, -1, &rank) < 0 ||
	    int_arg(world_obj, "world_size", 1, MAX_WORLD_SIZE, 0, &world) < 0)
		return NULL;
	if ((rank_obj == Py_None) != (world_obj == Py_None)) {
		PyErr_SetString(PyExc_ValueError,
				"rank and world_size go together: give both or neither (without "
				"them, passes read the model's tp_rank/tp_world_size metadata)");
		return NULL;
	}
	if (rank_obj != Py_None && rank >= world) {
		PyErr_Format(PyExc_ValueError, "rank %ld is not below world_size %ld", rank, world);
		return NULL;
	}
	if (int_arg(threshold_obj, "external_data_threshold", 1, LONG_MAX, 0, &threshold) < 0)
		return NULL;
	if (threshold_obj != Py_None && output_obj == Py_None) {
		PyErr_SetString(PyExc_ValueError,
				"external_data_threshold needs output=PATH (a model returned in "
				"memory has no external data)");
		return NULL;
	}
	if (output_obj != Py_None && !PyUnicode_FSConverter(output_obj, &output_path))
		return NULL;
	if (source_init(&src, model, base_dir) < 0) {
		Py_XDECREF(output_path);
		return NULL;
	}

	memset(&j, 0, sizeof(j));
	j.src = &src;
	j.passes = passes;
	j.output = output_path ? PyBytes_AS_STRING(output_path) : NULL;
	j.rank = (int)rank;
	j.world_size = (int)world;
	j.explain = explain;
	j.verify_each = verify_each;
	j.external_threshold = (size_t)threshold;
	if (run_job(optimize_work, &j, &j.d) < 0)
		goto out;

	if (j.st) {
		raise_status(j.st, j.what, j.d);
	} else {
		PyObject *bytes = NULL, *stats, *misses, *diags;

		if (j.model_bytes) {
			bytes = PyBytes_FromStringAndSize(j.model_bytes, (Py_ssize_t)j.model_size);
		} else {
			bytes = Py_None;
			Py_INCREF(bytes);
		}
		stats = stats_dict(j.stats_text.buf, j.stats_text.len);
		misses = lines_list(j.explain_text.buf, j.explain_text.len);
		diags = diag_list(j.d);
		if (bytes && stats && misses && diags)
			result = PyTuple_Pack(4, bytes, stats, misses, diags);
		Py_XDECREF(bytes);
		Py_XDECREF(stats);
		Py_XDECREF(misses);
		Py_XDECREF(diags);
	}
	tpf_free(j.model_bytes);
	capture_free(&j.stats_text);
	capture_free(&j.explain_text);
	tpf_diag_free(j.d);
out:
	source_release(&src);
	Py_XDECREF(output_path);
	return result;
}

/* ------------------------------------------------------------------- check */

struct check_job {
	const struct source *src;
	enum tpf_status load_st, st;
	struct tpf_diag *d;
};

static void check_work(void *job)
{
	struct check_job *j = job;
	struct tpf_model *m = NULL;

	j->load_st = source_load(j->src, &m, j->d);
	j->st = j->load_st;
	if (j->st)
		return;
	j->st = tpf_compile(m, &(struct tpf_compile_options){TPF_COMPILE_CHECK}, j->d);
	tpf_model_free(m);
}

PyDoc_STRVAR(check_doc,
"check(model, *, raise_on_error=False, base_dir=None)\n"
"--\n"
"\n"
"Loads and verifies a model (a path or serialized bytes), infers shapes and\n"
"returns every problem as a list of Diagnostic.  A file that cannot be read\n"
"raises FileError; with raise_on_error, any error raises ModelError.");

static PyObject *py_check(PyObject *self, PyObject *args, PyObject *kwargs)
{
	static char *kwlist[] = {"model", "raise_on_error", "base_dir", NULL};
	PyObject *model, *base_dir = Py_None, *result = NULL;
	int raise_on_error = 0;
	struct source src;
	struct check_job j = {0};

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$pO:check", kwlist, &model,
					 &raise_on_error, &base_dir))
		return NULL;
	if (source_init(&src, model, base_dir) < 0)
		return NULL;
	j.src = &src;
	if (run_job(check_work, &j, &j.d) < 0)
		goto out;

	if (j.load_st == TPF_ERR_IO || j.load_st == TPF_ERR_NOMEM)
		raise_status(j.load_st, "cannot load the model", j.d);
	else if (raise_on_error && (j.st || j.d->error_count))
		raise_status(j.st ? j.st : TPF_ERR_VERIFY,
			     j.load_st ? "cannot load the model" : "the model is not valid", j.d);
	else
		result = diag_list(j.d);
	tpf_diag_free(j.d);
out:
	source_release(&src);
	return result;
}

/* -------------------------------------------------------------------- dump */

struct dump_job {
	const struct source *src;
	int dot, infer;
	enum tpf_status st;
	const char *what;
	struct tpf_diag *d;
	struct capture out;
};

static void dump_work(void *job)
{
	struct dump_job *j = job;
	struct tpf_model *m = NULL;

	j->what = "cannot load the model";
	j->st = source_load(j->src, &m, j->d);
	if (j->st)
		return;
	/* a dump shows what can be inferred; problems are for check() */
	if (j->infer)
		tpf_compile(m, &(struct tpf_compile_options){.infer = TPF_INFER_LENIENT}, j->d);
	j->what = "cannot print the model";
	if (capture_open(&j->out)) {
		j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "cannot capture the dump");
	} else {
		j->st = j->dot ? tpf_model_print_dot(m, j->out.f) : tpf_model_print_text(m, j->out.f);
		if (capture_close(&j->out) && !j->st)
			j->st = tpf_diag_fail(j->d, TPF_ERR_NOMEM, "cannot capture the dump");
	}
	tpf_model_free(m);
}

PyDoc_STRVAR(dump_doc,
"dump(model, format='text', *, infer_shapes=True, base_dir=None)\n"
"--\n"
"\n"
"The model (a path or serialized bytes) as tpfuse's deterministic text dump\n"
"or as Graphviz DOT.");

static PyObject *py_dump(PyObject *self, PyObject *args, PyObject *kwargs)
{
	static char *kwlist[] = {"model", "format", "infer_shapes", "base_dir", NULL};
	PyObject *model, *base_dir = Py_None, *result = NULL;
	const char *format = "text";
	int infer = 1;
	struct source src;
	struct dump_job j = {0};

	if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|s$pO:dump", kwlist, &model, &format,
					 &infer, &base_dir))
		return NULL;
	if (strcmp(format, "text") == 0) {
		j.dot = 0;
	} else if (strcmp(format, "dot") == 0) {
		j.dot = 1;
	} else {
		PyErr_Format(PyExc_ValueError, "format: expected 'text' or 'dot', not '%s'", format);
		return NULL;
	}
	j.infer = infer;
	if (source_init(&src, model, base_dir) < 0)
		return NULL;
	j.src = &src;
	if (run_job(dump_work, &j, &j.d) < 0)
		goto out;

	if (j.st)
		raise_status(j.st, j.what, j.d);
	else
		result = PyUnicode_DecodeUTF8(j.out.buf ? j.out.buf : "", (Py_ssize_t)j.out.len,
					      "replace");
	capture_free(&j.out);
	tpf_diag_free(j.d);
out:
	source_release(&src);
	return result;
}

/* ------------------------------------------------------------------ passes */

PyDoc_STRVAR(passes_doc,
"passes()\n"
"--\n"
"\n"
"The registered passes as a list of (name, summary, counters) tuples, in\n"
"registry order.");

static PyObject *py_passes(PyObject *self, PyObject *unused)
{
	const struct tpf_pass *const *list;
	size_t n, i, k;
	PyObject *out = PyList_New(0);

	if (!out)
		return NULL;
	list = tpf_pass_list(&n);
	for (i = 0; i < n; i++) {
		const struct tpf_pass *p = list[i];
		size_t nc = 0;
		PyObject *counters, *item;

		while (tpf_pass_counter(p, nc))
			nc++;
		counters = PyTuple_New((Py_ssize_t)nc);
		if (!counters)
			goto fail;
		for (k = 0; k < nc; k++) {
			PyObject *s = PyUnicode_FromString(tpf_pass_counter(p, k));

			if (!s) {
				Py_DECREF(counters);
				goto fail;
			}
			PyTuple_SET_ITEM(counters, (Py_ssize_t)k, s);
		}
		item = Py_BuildValue("(ssN)", p->name, p->summary ? p->summary : "", counters);
		if (!item || PyList_Append(out, item) < 0) {
			Py_XDECREF(item);
			goto fail;
		}
		Py_DECREF(item);
	}
	return out;
fail:
	Py_DECREF(out);
	return NULL;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
	{"optimize", (PyCFunction)(void (*)(void))py_optimize, METH_VARARGS | METH_KEYWORDS,
	 optimize_doc},
	{"check", (PyCFunction)(void (*)(void))py_check, METH_VARARGS | METH_KEYWORDS, check_doc},
	{"dump", (PyCFunction)(void (*)(void))py_dump, METH_VARARGS | METH_KEYWORDS, dump_doc},
	{"passes", py_passes, METH_NOARGS, passes_doc},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "tpfuse._tpfuse",
	.m_doc = "The C side of the tpfuse package (see the tpfuse package).",
	.m_size = -1,
	.m_methods = methods,
};

static PyStructSequence_Field diagnostic_fields[] = {
	{"severity", "'error', 'warning' or 'note'"},
	{"node", "the name of the node the message is about, or None"},
	{"op", "that node's op ('Add', 'com.microsoft::AllReduce'), or None"},
	{"message", "the text (after the node prefix when there is a node)"},
	{NULL, NULL},
};

static PyStructSequence_Desc diagnostic_desc = {
	"tpfuse.Diagnostic",
	"One message of the library: severity, node, op, message.",
	diagnostic_fields,
	4,
};

/* An exception class whose instances have .status and .diagnostics. */
static PyObject *new_error(const char *name, const char *doc, PyObject *bases)
{
	PyObject *dict = Py_BuildValue("{s:O,s:()}", "status", Py_None, "diagnostics");
	PyObject *type;

	if (!dict)
		return NULL;
	type = PyErr_NewExceptionWithDoc(name, doc, bases, dict);
	Py_DECREF(dict);
	return type;
}

/* tpfuse's exceptions: Error, and its subclasses, which also derive from
 * a builtin exception where std_base names one. */
struct error_def {
	const char *attr, *name, *doc;
	PyObject **slot;
	PyObject **std_base;
};

static const struct error_def errors[] = {
	{"Error", "tpfuse.Error",
	 "A tpfuse library call failed.  .status names the failure ('parse', "
	 "'verify', 'io', ...); .diagnostics lists every message.",
	 &Error, NULL},
	{"ModelError", "tpfuse.ModelError", "The model is malformed, invalid or over a limit.",
	 &ModelError, &PyExc_ValueError},
	{"FileError", "tpfuse.FileError", "A file could not be read or written.", &FileError,
	 &PyExc_OSError},
	{"UnsupportedError", "tpfuse.UnsupportedError", "A valid model that tpfuse does not handle.",
	 &UnsupportedError, NULL},
	{"InputError", "tpfuse.InputError",
	 "The inputs of a run do not fit the model (an unknown or missing name, another dtype "
	 "or shape).", &InputError, &PyExc_ValueError},
};

static int add_error(PyObject *m, const struct error_def *e, PyObject *bases)
{
	*e->slot = new_error(e->name, e->doc, bases);
	if (!*e->slot)
		return -1;
	Py_INCREF(*e->slot);
	if (PyModule_AddObject(m, e->attr, *e->slot) < 0) {
		Py_DECREF(*e->slot);
		return -1;
	}
	return 0;
}

PyMODINIT_FUNC PyInit__tpfuse(void)
{
	PyObject *m;
	size_t i;

	if (!lib_lock) {
		lib_lock = PyThread_allocate_lock();
		if (!lib_lock)
			return PyErr_NoMemory();
	}
	m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	if (PyModule_AddStringConstant(m, "__version__", TPF_VERSION_STRING) < 0)
		goto fail;
	if (!DiagnosticType) {
		DiagnosticType = PyStructSequence_NewType(&diagnostic_desc);
		if (!DiagnosticType)
			goto fail;
	}
	Py_INCREF(DiagnosticType);
	if (PyModule_AddObject(m, "Diagnostic", (PyObject *)DiagnosticType) < 0) {
		Py_DECREF(DiagnosticType);
		goto fail;
	}
	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		const struct error_def *e = &errors[i];
		PyObject *bases = !i ? NULL : e->std_base ? PyTuple_Pack(2, Error, *e->std_base) : Error;
		int rc = i && !bases ? -1 : add_error(m, e, bases);

		if (e->std_base)
			Py_XDECREF(bases);
		if (rc < 0)
			goto fail;
	}
	if (session_module_init(m) < 0)
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
