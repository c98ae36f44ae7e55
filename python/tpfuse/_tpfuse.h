/*
 * What the two halves of tpfuse._tpfuse share: _tpfuse.c (models in and
 * out: optimize, check, dump, the module and its exceptions) and
 * _session.c (the runtime: Session and generate).
 */
#ifndef TPFUSE_PY_TPFUSE_H
#define TPFUSE_PY_TPFUSE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>

#include "tpf-ir.h"

/* Same bounds as the command's --rank / --world-size. */
#define MAX_WORLD_SIZE (1L << 20)

/* The lock every library call runs under, and the module's exceptions. */
extern PyThread_type_lock lib_lock;
extern PyObject *Error, *ModelError, *FileError, *UnsupportedError, *InputError;

/* Where a model comes from: a file (mapped by the library, external data
 * next to it) or bytes in memory (external data only below base_dir). */
struct source {
	PyObject *path;    /* bytes from PyUnicode_FSConverter, or NULL */
	Py_buffer view;    /* bytes objects: borrowed without a copy */
	int have_view;
	char *copy;        /* other buffers: copied, so no one resizes them under us */
	const void *data;
	size_t size;
	PyObject *base_dir; /* bytes from PyUnicode_FSConverter, or NULL */
};

int source_init(struct source *s, PyObject *model, PyObject *base_dir);
void source_release(struct source *s);
/* Runs without the GIL. */
enum tpf_status source_load(const struct source *s, struct tpf_model **m, struct tpf_diag *d);

/* Runs work(job) without the GIL and under the library lock, with a fresh
 * diagnostic in *d (the caller frees it).  -1 (MemoryError raised) when
 * there is no memory for the diagnostic. */
int run_job(void (*work)(void *), void *job, struct tpf_diag **d);
/* Raises the exception of `st` (raise_error: of `type`, NULL for the
 * status's) with the message "WHAT: FIRST ERROR"; .status and
 * .diagnostics carry the rest.  Returns NULL. */
PyObject *raise_status(enum tpf_status st, const char *what, const struct tpf_diag *d);
PyObject *raise_error(PyObject *type, enum tpf_status st, const char *what,
		      const struct tpf_diag *d);
/* The messages of d as a list of Diagnostic. */
PyObject *diag_list(const struct tpf_diag *d);

/* An int argument or None (-> *out = dflt).  bool is refused. */
int int_arg(PyObject *o, const char *what, long lo, long hi, long dflt, long *out);
/* Checks every name of a comma-separated pass list before any work. */
int check_pass_list(const char *list);

/* _session.c: adds Session and generate's C half to the module. */
int session_module_init(PyObject *m);

#endif /* TPFUSE_PY_TPFUSE_H */
