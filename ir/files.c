/* SPDX-License-Identifier: MIT */
/*
 * The files a command reads and writes.
 *
 * A file set records the inputs of a command (models, their external data,
 * test data) and then its outputs, each checked as it is added: an output
 * that is the same file as an input or as an earlier output is refused
 * before anything is written.  Identity is the device and inode of the file
 * (symbolic links followed, so hard links and every spelling of a path
 * meet), and, for a file that does not exist yet, its resolved path: the
 * longest existing prefix resolved by realpath(3), the rest taken
 * lexically, which is how the folders will be made.
 *
 * Outputs are written to temporary files beside them and renamed into
 * place only when all of a command's files are complete (tpf_out_file_*),
 * so a failed or interrupted write never leaves a half-written file or
 * replaces a good one.
 */
#include "tpf-ir.h"
#include "onnx-io-private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct file_entry {
	char *path;  /* as given, for messages */
	char *what;  /* "the input model", ... */
	char *canon; /* resolved absolute path */
	int exists, is_output;
	int is_dumps; /* a folder of NN-NAME.txt files (--print-after-all) */
	dev_t dev;
	ino_t ino;
};

struct tpf_file_set {
	struct file_entry *e;
	size_t n, cap;
};

struct tpf_file_set *tpf_file_set_create(void)
{
	return tpf_calloc(1, sizeof(struct tpf_file_set));
}

void tpf_file_set_free(struct tpf_file_set *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		tpf_free(s->e[i].path);
		tpf_free(s->e[i].what);
		tpf_free(s->e[i].canon);
	}
	tpf_free(s->e);
	tpf_free(s);
}

/* Appends `comp` (len bytes) to the absolute path *p: a tpf_malloc'ed
 * string, or NULL on OOM (*p is freed either way). */
static char *append(char *p, const char *comp, size_t len)
{
	size_t pl = strlen(p);
	int slash = pl > 0 && p[pl - 1] != '/';
	char *q = tpf_malloc(pl + slash + len + 1);
	if (q) {
		memcpy(q, p, pl);
		if (slash)
			q[pl] = '/';
		memcpy(q + pl + slash, comp, len);
		q[pl + slash + len] = '\0';
	}
	tpf_free(p);
	return q;
}

/* The absolute path `path` names, symbolic links resolved as far as the
 * path exists and the rest taken lexically ("." dropped, ".." the folder
 * above).  tpf_malloc'ed; NULL on OOM. */
static char *canonical(const char *path)
{
	char *cur;
	if (path[0] == '/') {
		cur = tpf_strdup("/");
	} else {
		char *cwd = getcwd(NULL, 0);
		cur = cwd ? tpf_strdup(cwd) : tpf_strdup(".");
		free(cwd);
	}
	const char *p = path;
	while (cur && *p) {
		while (*p == '/')
			p++;
		size_t len = strcspn(p, "/");
		if (!len)
			break;
		if (len == 1 && p[0] == '.') {
			p += len;
			continue;
		}
		if (len == 2 && p[0] == '.' && p[1] == '.') {
			char *slash = strrchr(cur, '/');
			if (slash && slash != cur)
				*slash = '\0';
			else if (slash)
				cur[1] = '\0';
			p += len;
			continue;
		}
		cur = append(cur, p, len);
		p += len;
		if (!cur)
			break;
		char *real = realpath(cur, NULL);
		if (real) {
			tpf_free(cur);
			cur = tpf_strdup(real);
			free(real);
		}
	}
	return cur;
}

static enum tpf_status nomem(struct tpf_diag *d)
{
	return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
}

/* Whether a file of resolved path `canon` is one a dump folder of resolved
 * path `dir` may hold: "DIR/NN-NAME.txt". */
static int in_dump_folder(const char *canon, const char *dir)
{
	size_t dl = strlen(dir);
	if (strncmp(canon, dir, dl) != 0 || (canon[dl] != '/' && dl > 1))
		return 0;
	const char *name = canon + dl + (canon[dl] == '/');
	size_t nl = strlen(name), digits = strspn(name, "0123456789");
	return !strchr(name, '/') && digits >= 2 && name[digits] == '-' && nl > 4 &&
	       strcmp(name + nl - 4, ".txt") == 0;
}

static int same(const struct file_entry *a, const struct file_entry *b)
{
	if (a->is_dumps || b->is_dumps) {
		if (a->is_dumps && b->is_dumps)
			return strcmp(a->canon, b->canon) == 0;
		return a->is_dumps ? in_dump_folder(b->canon, a->canon)
		                   : in_dump_folder(a->canon, b->canon);
	}
	if (a->exists && b->exists)
		return a->dev == b->dev && a->ino == b->ino;
	return strcmp(a->canon, b->canon) == 0;
}

/* Adds path to s; when is_output, refuses it if it meets an entry
 * (is_output 2: a dump folder). */
static enum tpf_status add(struct tpf_file_set *s, const char *path, const char *what,
                           int is_output, struct tpf_diag *d)
{
	struct stat sb;
	struct file_entry e = {0};

	e.is_dumps = is_output == 2;

	if (!s || !path || !*path)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "tpf_file_set: missing argument");
	e.exists = stat(path, &sb) == 0;
	if (!e.exists && !is_output)
		return TPF_OK;
	if (e.exists) {
		e.dev = sb.st_dev;
		e.ino = sb.st_ino;
		/* devices and pipes (/dev/null, /dev/stdout) are not files to keep */
		if (is_output && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode) && !e.is_dumps)
			return TPF_OK;
	}
	if (!(e.canon = canonical(path)))
		return nomem(d);
	e.is_output = is_output != 0;
	for (size_t i = 0; i < s->n && is_output; i++) {
		const struct file_entry *o = &s->e[i];
		if (!same(&e, o))
			continue;
		const char *why =
		    o->is_output ? " (two outputs cannot be one file)" : " (it would be destroyed)";
		enum tpf_status st;
		if (e.is_dumps || o->is_dumps)
			st = tpf_diag_fail(d, TPF_ERR_CONFLICT,
			                   "%s '%s' and %s '%s': the folder's dumps take names "
			                   "NN-PASS.txt%s: refused, nothing written",
			                   what, path, o->what, o->path, why);
		else
			st =
			    tpf_diag_fail(d, TPF_ERR_CONFLICT,
			                  "%s '%s' is the same file as %s '%s'%s: refused, nothing "
			                  "written",
			                  what, path, o->what, o->path, why);
		tpf_free(e.canon);
		return st;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct file_entry *ne = tpf_realloc(s->e, cap * sizeof(*ne));
		if (!ne) {
			tpf_free(e.canon);
			return nomem(d);
		}
		s->e = ne;
		s->cap = cap;
	}
	e.path = tpf_strdup(path);
	e.what = tpf_strdup(what ? what : "the file");
	if (!e.path || !e.what) {
		tpf_free(e.path);
		tpf_free(e.what);
		tpf_free(e.canon);
		return nomem(d);
	}
	s->e[s->n++] = e;
	return TPF_OK;
}

enum tpf_status tpf_file_set_add_input(struct tpf_file_set *s, const char *path, const char *what,
                                       struct tpf_diag *d)
{
	return add(s, path, what, 0, d);
}

enum tpf_status tpf_file_set_add_output(struct tpf_file_set *s, const char *path, const char *what,
                                        struct tpf_diag *d)
{
	return add(s, path, what, 1, d);
}

enum tpf_status tpf_file_set_add_dump_folder(struct tpf_file_set *s, const char *dir,
                                             const char *what, struct tpf_diag *d)
{
	return add(s, dir, what, 2, d);
}

enum tpf_status tpf_file_set_add_model(struct tpf_file_set *s, const struct tpf_model *m,
                                       const char *path, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	if (path)
		st = add(s, path, "the input model", 0, d);
	size_t n = m ? tpf_onnx_backing_n_files(m->backing) : 0;
	for (size_t i = 0; i < n && !st; i++)
		st = add(s, tpf_onnx_backing_file(m->backing, i), "the input's external data file",
		         0, d);
	return st;
}

char *tpf_model_data_path(const char *path, const struct tpf_save_options *opt)
{
	char *dir = tpf_path_dirname(path);
	if (!dir)
		return NULL;
	const char *base = tpf_path_basename(path);
	const char *loc =
	    opt && opt->external_file && *opt->external_file ? opt->external_file : NULL;
	size_t len = strlen(dir) + strlen(loc ? loc : base) + 8;
	char *out = tpf_malloc(len);
	if (out) {
		if (loc)
			snprintf(out, len, "%s/%s", dir, loc);
		else
			snprintf(out, len, "%s/%s.data", dir, base);
	}
	tpf_free(dir);
	return out;
}

enum tpf_status tpf_file_set_add_model_output(struct tpf_file_set *s, const char *path,
                                              const struct tpf_save_options *opt, const char *what,
                                              struct tpf_diag *d)
{
	enum tpf_status st = add(s, path, what, 1, d);
	if (st)
		return st;
	char *data = tpf_model_data_path(path, opt);
	if (!data)
		return nomem(d);
	size_t len = strlen(what ? what : "the output") + 32;
	char *dw = tpf_malloc(len);
	if (!dw) {
		tpf_free(data);
		return nomem(d);
	}
	snprintf(dw, len, "%s's data file", what ? what : "the output");
	st = add(s, data, dw, 1, d);
	tpf_free(dw);
	tpf_free(data);
	return st;
}

char *tpf_path_resolve(const char *path)
{
	return path ? canonical(path) : NULL;
}

int tpf_same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0)
		return 0;
	return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

enum tpf_status tpf_make_parent_folders(const char *path, char ***made, size_t *n_made,
                                        struct tpf_diag *d)
{
	char *dir = tpf_path_dirname(path);
	if (!dir)
		return nomem(d);
	enum tpf_status st = TPF_OK;
	size_t len = strlen(dir);
	for (size_t i = 1; i <= len && !st; i++) {
		if (dir[i] != '/' && dir[i] != '\0')
			continue;
		char c = dir[i];
		struct stat sb;
		dir[i] = '\0';
		if (mkdir(dir, 0777) == 0) {
			if (made) {
				char **grown = tpf_realloc(*made, (*n_made + 1) * sizeof(*grown));
				char *copy = tpf_strdup(dir);
				if (grown)
					*made = grown;
				if (!grown || !copy) {
					tpf_free(copy);
					st = nomem(d);
				} else {
					(*made)[(*n_made)++] = copy;
				}
			}
		} else if (errno != EEXIST) {
			st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot create the folder '%s': %s",
			                   path, dir, strerror(errno));
		} else if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
			st = tpf_diag_fail(d, TPF_ERR_IO,
			                   "%s: cannot create the folder '%s': a file of that name "
			                   "exists",
			                   path, dir);
		}
		dir[i] = c;
	}
	tpf_free(dir);
	return st;
}

void tpf_remove_folders(char **made, size_t n)
{
	for (size_t i = n; i-- > 0;) {
		rmdir(made[i]);
		tpf_free(made[i]);
	}
	tpf_free(made);
}

/* ------------------------------------------------------------ outputs */

static unsigned tmp_counter;

/* A fresh name "DIR/.tpfuse-PID-N.SUFFIX" beside path (tpf_malloc'ed). */
static char *sibling_name(const char *path, const char *suffix)
{
	char *dir = tpf_path_dirname(path);
	if (!dir)
		return NULL;
	size_t len = strlen(dir) + strlen(suffix) + 64;
	char *s = tpf_malloc(len);
	if (s)
		snprintf(s, len, "%s/.tpfuse-%ld-%u.%s", dir, (long)getpid(),
		         __atomic_add_fetch(&tmp_counter, 1, __ATOMIC_RELAXED), suffix);
	tpf_free(dir);
	return s;
}

static void out_release(struct tpf_out_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	tpf_free(f->path);
	tpf_free(f->tmp);
	f->path = f->tmp = NULL;
}

/* Whether path is a link of /dev or /proc (/dev/stdout, /proc/self/fd/1):
 * written in place, whatever it leads to, so that no link there is
 * replaced. */
static int is_system_link(const char *path)
{
	struct stat sb;
	int special = 0;
	if (lstat(path, &sb) != 0 || !S_ISLNK(sb.st_mode))
		return 0;
	char *cwd = path[0] == '/' ? NULL : getcwd(NULL, 0);
	const char *p = path;
	char *abs = NULL;
	if (cwd) {
		size_t len = strlen(cwd) + strlen(path) + 2;
		abs = tpf_malloc(len);
		if (abs)
			snprintf(abs, len, "%s/%s", cwd, path);
		p = abs ? abs : path;
	}
	while (p[0] == '/' && p[1] == '/')
		p++;
	special = !strncmp(p, "/dev/", 5) || !strncmp(p, "/proc/", 6);
	tpf_free(abs);
	free(cwd);
	return special;
}

enum tpf_status tpf_out_file_open(struct tpf_out_file *f, const char *path, struct tpf_diag *d)
{
	struct stat sb;

	f->path = f->tmp = NULL;
	f->fd = -1;
	if (!path || !*path)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "no output path");
	if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
		return tpf_diag_fail(d, TPF_ERR_IO, "%s: is a folder, not a file", path);
	if (!(f->path = tpf_strdup(path)))
		return nomem(d);
	if ((stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) || is_system_link(path)) {
		/* a device or a pipe: there is no file to replace (a standard
		 * output redirected to a file is appended to, as the shell set
		 * it up) */
		f->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
		if (f->fd < 0) {
			enum tpf_status st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot open: %s",
			                                   path, strerror(errno));
			out_release(f);
			return st;
		}
		return TPF_OK;
	}
	char *dir = tpf_path_dirname(path);
	if (!dir) {
		out_release(f);
		return nomem(d);
	}
	if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
		enum tpf_status st = tpf_diag_fail(
		    d, TPF_ERR_IO, "%s: cannot write: the folder '%s' %s", path, dir,
		    errno == ENOENT || errno == ENOTDIR ? "does not exist" : "is not a folder");
		tpf_free(dir);
		out_release(f);
		return st;
	}
	tpf_free(dir);
	for (int tries = 0; tries < 100; tries++) {
		tpf_free(f->tmp);
		if (!(f->tmp = sibling_name(path, "tmp"))) {
			out_release(f);
			return nomem(d);
		}
		f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (f->fd >= 0 || errno != EEXIST)
			break;
	}
	if (f->fd < 0) {
		enum tpf_status st =
		    tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
		out_release(f);
		return st;
	}
	/* a file replaced keeps its permissions */
	if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
		fchmod(f->fd, sb.st_mode & 07777);
	return TPF_OK;
}

enum tpf_status tpf_out_file_close(struct tpf_out_file *f, struct tpf_diag *d)
{
	if (f->fd < 0)
		return TPF_OK;
	int r = close(f->fd);
	f->fd = -1;
	if (r != 0)
		return tpf_diag_fail(d, TPF_ERR_IO, "%s: write failed: %s", f->path,
		                     strerror(errno));
	return TPF_OK;
}

void tpf_out_file_discard(struct tpf_out_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	f->fd = -1;
	if (f->tmp)
		unlink(f->tmp);
	out_release(f);
}

enum tpf_status tpf_out_files_commit(struct tpf_out_file *f, size_t n, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	char **backup = tpf_calloc(n + 1, sizeof(*backup));
	unsigned char *renamed = tpf_calloc(n + 1, 1);

	for (size_t i = 0; i < n && !st; i++)
		st = tpf_out_file_close(&f[i], d);
	if (!st && (!backup || !renamed))
		st = nomem(d);
	/* a folder where a file goes is found before anything is renamed */
	for (size_t i = 0; i < n && !st; i++) {
		struct stat sb;
		if (f[i].tmp && lstat(f[i].path, &sb) == 0 && S_ISDIR(sb.st_mode))
			st = tpf_diag_fail(d, TPF_ERR_IO, "%s: is a folder, not a file", f[i].path);
	}
	for (size_t i = 0; i < n && !st; i++) {
		struct stat sb;
		if (!f[i].tmp)
			continue;
		/* the old file stays reachable under a second name until the
		 * whole set is in place, so that a failure can put it back */
		if (lstat(f[i].path, &sb) == 0) {
			renamed[i] = 2; /* an old file */
			for (int tries = 0; tries < 100; tries++) {
				char *b = sibling_name(f[i].path, "old");
				if (!b)
					break;
				if (link(f[i].path, b) == 0) {
					backup[i] = b;
					break;
				}
				int e = errno;
				tpf_free(b);
				if (e != EEXIST)
					break;
			}
		}
		if (rename(f[i].tmp, f[i].path) != 0) {
			st = tpf_diag_fail(d, TPF_ERR_IO, "%s: cannot rename into place: %s",
			                   f[i].path, strerror(errno));
			break;
		}
		renamed[i] |= 1;
	}
	for (size_t i = 0; i < n; i++) {
		if (st && renamed && (renamed[i] & 1)) {
			/* put back what was replaced, remove what was new */
			if (backup[i])
				rename(backup[i], f[i].path);
			else if (!(renamed[i] & 2))
				unlink(f[i].path);
		}
		if (backup && backup[i]) {
			unlink(backup[i]);
			tpf_free(backup[i]);
		}
		if (f[i].tmp && !(renamed && (renamed[i] & 1)))
			unlink(f[i].tmp);
		out_release(&f[i]);
	}
	tpf_free(backup);
	tpf_free(renamed);
	return st;
}
