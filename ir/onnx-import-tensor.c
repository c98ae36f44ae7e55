/* SPDX-License-Identifier: MIT */
/*
 * ONNX import of tensors: typed fields and raw_data converted once, external
 * data mapped from files inside the model's folder, sparse initializers made
 * dense; and the model's backing that owns the mappings and buffers the
 * tensors point into (released by tpf_model_free).
 */
#include "onnx-import-private.h"
#include "onnx-io-private.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX importer converts typed tensor data assuming a little-endian host"
#endif

#define MAX_DENSE_SPARSE_BYTES ((size_t)1 << 31)

/* ------------------------------------------------------------ paths */

const char *tpf_onnx_location_problem(const char *location)
{
	if (!location || !*location)
		return "is empty";
	if (location[0] == '/' || location[0] == '\\')
		return "is an absolute path";
	if (((location[0] >= 'A' && location[0] <= 'Z') ||
	     (location[0] >= 'a' && location[0] <= 'z')) &&
	    location[1] == ':')
		return "is an absolute path";
	const char *p = location;
	while (*p) {
		size_t len = strcspn(p, "/\\");
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return "contains a '..' component";
		p += len;
		if (*p)
			p++;
	}
	return NULL;
}

char *tpf_path_dirname(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return tpf_strdup(".");
	if (slash == path)
		return tpf_strdup("/");
	size_t len = (size_t)(slash - path);
	char *s = tpf_malloc(len + 1);
	if (!s)
		return NULL;
	memcpy(s, path, len);
	s[len] = '\0';
	return s;
}

const char *tpf_path_basename(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

/* ------------------------------------------------------------ backing */

void tpf_model_backing_release(void *backing)
{
	struct backing *bk = backing;
	if (!bk)
		return;
	for (size_t i = 0; i < bk->n_maps; i++) {
		if (bk->maps[i].addr)
			munmap(bk->maps[i].addr, bk->maps[i].len);
		tpf_free(bk->maps[i].path);
	}
	for (size_t i = 0; i < bk->n_bufs; i++)
		tpf_free(bk->bufs[i]);
	tpf_free(bk->maps);
	tpf_free(bk->bufs);
	tpf_free(bk);
}

int tpf_onnx_backing_locate(const void *backing, const void *p, size_t n, const char **path,
                            uint64_t *offset)
{
	const struct backing *bk = backing;
	if (!bk || !p)
		return -1;
	uintptr_t a = (uintptr_t)p;
	for (size_t i = 0; i < bk->n_maps; i++) {
		uintptr_t base = (uintptr_t)bk->maps[i].addr;
		if (base && a >= base && a - base <= bk->maps[i].len &&
		    n <= bk->maps[i].len - (a - base)) {
			*path = bk->maps[i].path;
			*offset = (uint64_t)(a - base);
			return 0;
		}
	}
	return -1;
}

size_t tpf_onnx_backing_n_files(const void *backing)
{
	const struct backing *bk = backing;
	return bk ? bk->n_maps : 0;
}

const char *tpf_onnx_backing_file(const void *backing, size_t i)
{
	const struct backing *bk = backing;
	return bk && i < bk->n_maps ? bk->maps[i].path : NULL;
}

int onnx_grow_heap(void **arr, size_t *cap, size_t elem, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	size_t bytes;
	if (tpf_mul_size(ncap, elem, &bytes))
		return -1;
	void *p = tpf_realloc(*arr, bytes);
	if (!p)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* Makes the backing own `p` (a tpf_malloc'ed buffer). */
static int backing_adopt(struct backing *bk, void *p)
{
	if (onnx_grow_heap((void **)&bk->bufs, &bk->cap_bufs, sizeof(*bk->bufs), bk->n_bufs + 1))
		return -1;
	bk->bufs[bk->n_bufs++] = p;
	return 0;
}

static void *backing_alloc(struct backing *bk, size_t size, int zero)
{
	void *p = zero ? tpf_calloc(1, size ? size : 1) : tpf_malloc(size ? size : 1);
	if (!p)
		return NULL;
	if (backing_adopt(bk, p)) {
		tpf_free(p);
		return NULL;
	}
	return p;
}

/* ------------------------------------------------------------ external data */

enum tpf_status tpf_onnx_resolve_external(const char *base_dir, char **base_real, const char *what,
                                          const char *location, char **real, struct tpf_diag *d)
{
	enum tpf_status st = TPF_OK;
	*real = NULL;
	if (!*base_real) {
		*base_real = realpath(base_dir, NULL);
		if (!*base_real)
			return tpf_diag_fail(d, TPF_ERR_IO,
			                     "%s: model folder '%s' cannot be resolved: %s", what,
			                     base_dir, strerror(errno));
	}
	size_t jl = strlen(base_dir) + strlen(location) + 2;
	char *joined = tpf_malloc(jl);
	if (!joined)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", what);
	snprintf(joined, jl, "%s/%s", base_dir, location);
	*real = realpath(joined, NULL);
	if (!*real) {
		if (errno == ENOENT || errno == ENOTDIR)
			st = tpf_diag_fail(
			    d, TPF_ERR_IO,
			    "%s: external data file '%s' is missing (looked for '%s')", what,
			    location, joined);
		else
			st = tpf_diag_fail(d, TPF_ERR_IO, "%s: external data file '%s': %s", what,
			                   location, strerror(errno));
		tpf_free(joined);
		return st;
	}
	tpf_free(joined);
	size_t bl = strlen(*base_real);
	int inside = strcmp(*base_real, "/") == 0 ||
	             (strncmp(*real, *base_real, bl) == 0 && (*real)[bl] == '/');
	if (!inside) {
		st = tpf_diag_fail(d, TPF_ERR_INVALID,
		                   "%s: external data location '%s' resolves to '%s', outside the "
		                   "model's folder (through a symbolic link)",
		                   what, location, *real);
		free(*real); /* from realpath(), so plain free */
		*real = NULL;
	}
	return st;
}

static const struct mapping *map_file(struct import_ctx *c, const char *real, const char *loc,
                                      const char *what, enum tpf_status *st)
{
	for (size_t i = 0; i < c->bk->n_maps; i++)
		if (strcmp(c->bk->maps[i].path, real) == 0)
			return &c->bk->maps[i];
	if (onnx_grow_heap((void **)&c->bk->maps, &c->bk->cap_maps, sizeof(*c->bk->maps),
	                   c->bk->n_maps + 1)) {
		*st = onnx_nomem(c);
		return NULL;
	}
	/* O_NONBLOCK: a named pipe must not block the open; fstat refuses it below */
	int fd = open(real, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		*st = tpf_diag_fail(c->d, TPF_ERR_IO, "%s: cannot open external data file '%s': %s",
		                    what, loc, strerror(errno));
		return NULL;
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		*st = tpf_diag_fail(c->d, TPF_ERR_IO,
		                    "%s: external data '%s' is not a regular file", what, loc);
		close(fd);
		return NULL;
	}
	struct mapping mp = {0};
	mp.len = (size_t)sb.st_size;
	if (mp.len) {
		mp.addr = mmap(NULL, mp.len, PROT_READ, MAP_PRIVATE, fd, 0);
		if (mp.addr == MAP_FAILED) {
			*st = tpf_diag_fail(c->d, TPF_ERR_IO,
			                    "%s: cannot map external data file '%s': %s", what, loc,
			                    strerror(errno));
			close(fd);
			return NULL;
		}
	}
	close(fd);
	mp.path = tpf_strdup(real);
	if (!mp.path) {
		if (mp.addr)
			munmap(mp.addr, mp.len);
		*st = onnx_nomem(c);
		return NULL;
	}
	c->bk->maps[c->bk->n_maps] = mp;
	return &c->bk->maps[c->bk->n_maps++];
}

static int parse_i64(const char *s, int64_t *out)
{
	if (!s || !*s)
		return -1;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || v < 0)
		return -1;
	*out = v;
	return 0;
}

static enum tpf_status import_external(struct import_ctx *c, struct tpf_arena *a,
                                       const Onnx__TensorProto *tp, struct tpf_tensor *t,
                                       size_t nbytes, const char *what)
{
	const char *loc = NULL;
	int64_t offset = 0, length = -1;
	for (size_t i = 0; i < tp->n_external_data; i++) {
		const char *k = tp->external_data[i]->key ? tp->external_data[i]->key : "";
		const char *v = tp->external_data[i]->value ? tp->external_data[i]->value : "";
		if (strcmp(k, "location") == 0) {
			loc = v;
		} else if (strcmp(k, "offset") == 0) {
			if (parse_i64(v, &offset))
				return tpf_diag_fail(
				    c->d, TPF_ERR_INVALID,
				    "%s: external data offset '%s' is not a non-negative number",
				    what, v);
		} else if (strcmp(k, "length") == 0) {
			if (parse_i64(v, &length))
				return tpf_diag_fail(
				    c->d, TPF_ERR_INVALID,
				    "%s: external data length '%s' is not a non-negative number",
				    what, v);
		}
	}
	if (!loc || !*loc)
		return tpf_diag_fail(
		    c->d, TPF_ERR_INVALID,
		    "%s: data_location is EXTERNAL but external_data has no location", what);
	if (length >= 0 && (uint64_t)length != (uint64_t)nbytes)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "%s: external data length %lld does not match the %zu bytes "
		                     "of a %s tensor of its shape",
		                     what, (long long)length, nbytes,
		                     tpf_dtype_onnx_name(t->dtype));
	const char *why = tpf_onnx_location_problem(loc);
	if (why)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "%s: external data location '%s' %s; only files inside the "
		                     "model's folder are allowed",
		                     what, loc, why);
	t->is_external = 1;
	t->ext_offset = offset;
	t->ext_length = (int64_t)nbytes;
	t->nbytes = nbytes;
	if (!(t->ext_location = tpf_arena_strdup(a, loc)))
		return onnx_nomem(c);
	if (c->no_external_data)
		return TPF_OK;
	if (!c->base_dir || !*c->base_dir)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "%s: uses external data '%s' but the model was given without "
		                     "a folder to load it from",
		                     what, loc);

	char *real = NULL;
	enum tpf_status st =
	    tpf_onnx_resolve_external(c->base_dir, &c->base_real, what, loc, &real, c->d);
	if (st)
		return st;
	const struct mapping *mp = map_file(c, real, loc, what, &st);
	if (!mp)
		goto out_free;
	if ((uint64_t)offset > mp->len || nbytes > mp->len - (size_t)offset) {
		st = tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                   "%s: external data file '%s' holds %zu bytes; offset %lld + "
		                   "length %zu is past its end",
		                   what, loc, mp->len, (long long)offset, nbytes);
		goto out_free;
	}
	t->data = nbytes ? (const uint8_t *)mp->addr + offset : NULL;
	/* Writers pack small tensors back to back; kernels need element
	 * alignment, so a misaligned tensor is copied (large ones are aligned
	 * by every common writer and stay mapped). */
	unsigned bits = tpf_dtype_bits(t->dtype), align = bits >= 8 ? bits / 8 : 1;
	if (align > 8)
		align = 8;
	if (t->data && (uintptr_t)t->data % align) {
		void *copy = backing_alloc(c->bk, nbytes, 0);
		if (!copy) {
			st = onnx_nomem(c);
			goto out_free;
		}
		memcpy(copy, t->data, nbytes);
		t->data = copy;
	}

out_free:
	free(real); /* from realpath(), so plain free */
	return st;
}

/* ------------------------------------------------------------ tensors */

static enum tpf_status typed_mismatch(struct import_ctx *c, const char *what, enum tpf_dtype dt,
                                      const char *field, size_t have, uint64_t want)
{
	return tpf_diag_fail(c->d, TPF_ERR_INVALID,
	                     "%s: %s tensor needs %llu entries in %s, found %zu", what,
	                     tpf_dtype_onnx_name(dt), (unsigned long long)want, field, have);
}

/* Which typed field a dtype uses, for messages. */
static const char *typed_field_name(enum tpf_dtype dt)
{
	switch (dt) {
	case TPF_DTYPE_FLOAT:
	case TPF_DTYPE_COMPLEX64:
		return "float_data";
	case TPF_DTYPE_DOUBLE:
	case TPF_DTYPE_COMPLEX128:
		return "double_data";
	case TPF_DTYPE_INT64:
		return "int64_data";
	case TPF_DTYPE_UINT32:
	case TPF_DTYPE_UINT64:
		return "uint64_data";
	case TPF_DTYPE_STRING:
		return "string_data";
	default:
		return "int32_data";
	}
}

/* Converts the typed data fields into packed little-endian bytes. */
static enum tpf_status import_typed(struct import_ctx *c, const Onnx__TensorProto *tp,
                                    struct tpf_tensor *t, uint64_t numel, size_t nbytes,
                                    const char *what)
{
	enum tpf_dtype dt = t->dtype;
	size_t n_float = tp->n_float_data, n_i32 = tp->n_int32_data, n_i64 = tp->n_int64_data;
	size_t n_dbl = tp->n_double_data, n_u64 = tp->n_uint64_data;
	size_t total = n_float + n_i32 + n_i64 + n_dbl + n_u64 + tp->n_string_data;
	if (total == 0) {
		if (numel == 0)
			return TPF_OK;
		return tpf_diag_fail(
		    c->d, TPF_ERR_INVALID,
		    "%s: holds no data (neither raw_data, %s nor external data) for %llu elements",
		    what, typed_field_name(dt), (unsigned long long)numel);
	}
	const char *field = typed_field_name(dt);
	size_t have;
	if (strcmp(field, "float_data") == 0)
		have = n_float;
	else if (strcmp(field, "double_data") == 0)
		have = n_dbl;
	else if (strcmp(field, "int64_data") == 0)
		have = n_i64;
	else if (strcmp(field, "uint64_data") == 0)
		have = n_u64;
	else
		have = n_i32;
	if (have != total)
		return tpf_diag_fail(
		    c->d, TPF_ERR_INVALID,
		    "%s: %s data must be stored in %s (or raw_data), found it in another field",
		    what, tpf_dtype_onnx_name(dt), field);

	uint8_t *out = backing_alloc(c->bk, nbytes, 1);
	if (!out)
		return onnx_nomem(c);
	unsigned bits = tpf_dtype_bits(dt);
	uint64_t want = numel;
	switch (dt) {
	case TPF_DTYPE_COMPLEX64:
		want = numel * 2;
		/* fall through */
	case TPF_DTYPE_FLOAT:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		memcpy(out, tp->float_data, nbytes);
		break;
	case TPF_DTYPE_COMPLEX128:
		want = numel * 2;
		/* fall through */
	case TPF_DTYPE_DOUBLE:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		memcpy(out, tp->double_data, nbytes);
		break;
	case TPF_DTYPE_INT64:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		memcpy(out, tp->int64_data, nbytes);
		break;
	case TPF_DTYPE_UINT64:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		memcpy(out, tp->uint64_data, nbytes);
		break;
	case TPF_DTYPE_UINT32:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		for (size_t i = 0; i < have; i++) {
			uint32_t v = (uint32_t)tp->uint64_data[i];
			memcpy(out + i * 4, &v, 4);
		}
		break;
	case TPF_DTYPE_INT32:
		if (have != want)
			return typed_mismatch(c, what, dt, field, have, want);
		memcpy(out, tp->int32_data, nbytes);
		break;
	default:
		if (bits == 16 || bits == 8) {
			if (have != want)
				return typed_mismatch(c, what, dt, field, have, want);
			for (size_t i = 0; i < have; i++) {
				uint32_t v = (uint32_t)tp->int32_data[i];
				if (bits == 16) {
					out[2 * i] = (uint8_t)v;
					out[2 * i + 1] = (uint8_t)(v >> 8);
				} else {
					out[i] = (uint8_t)v;
				}
			}
		} else if (bits == 4 || bits == 2) {
			/* Normally one packed byte an entry; older writers stored one
			 * element an entry, which is packed here. */
			if (have == nbytes) {
				for (size_t i = 0; i < have; i++)
					out[i] = (uint8_t)tp->int32_data[i];
			} else if (have == numel) {
				unsigned per = 8 / bits, mask = (1u << bits) - 1;
				for (size_t i = 0; i < have; i++)
					out[i / per] |=
					    (uint8_t)(((uint32_t)tp->int32_data[i] & mask)
					              << (bits * (i % per)));
			} else {
				return typed_mismatch(c, what, dt, field, have, nbytes);
			}
		} else {
			return tpf_diag_fail(c->d, TPF_ERR_UNSUPPORTED,
			                     "%s: typed data of element type %s is not supported",
			                     what, tpf_dtype_onnx_name(dt));
		}
		break;
	}
	t->data = out;
	return TPF_OK;
}

/* Imports a dense tensor into `a` (names, dims) and the backing (bytes).
 * `tp` is not const: raw_data buffers are taken over. */
enum tpf_status onnx_import_tensor(struct import_ctx *c, struct tpf_arena *a, Onnx__TensorProto *tp,
                                   const char *what, struct tpf_tensor **out)
{
	*out = NULL;
	struct tpf_tensor *t = tpf_arena_alloc(a, sizeof(*t));
	if (!t || onnx_sdup(a, tp->name, &t->name) ||
	    onnx_sdup(a, tp->doc_string, &t->doc_string) ||
	    onnx_import_props(a, tp->metadata_props, tp->n_metadata_props, &t->n_metadata,
	                      &t->metadata_keys, &t->metadata_values))
		return onnx_nomem(c);
	int dt = tp->has_data_type ? tp->data_type : 0;
	if (dt == TPF_DTYPE_UNDEFINED)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: data_type is missing or UNDEFINED",
		                     what);
	if (!tpf_dtype_is_valid(dt))
		return tpf_diag_fail(c->d, TPF_ERR_UNSUPPORTED,
		                     "%s: element type %d is not supported", what, dt);
	t->dtype = (enum tpf_dtype)dt;
	if (tp->n_dims > TPF_MAX_RANK)
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: rank %zu exceeds the limit of %d",
		                     what, tp->n_dims, TPF_MAX_RANK);
	t->rank = (int)tp->n_dims;
	uint64_t numel = 1;
	for (size_t i = 0; i < tp->n_dims; i++) {
		int64_t dim = tp->dims[i];
		if (dim < 0)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: dimension %zu is negative (%lld)", what, i,
			                     (long long)dim);
		if (dim != 0 && numel > UINT64_MAX / (uint64_t)dim)
			return tpf_diag_fail(c->d, TPF_ERR_LIMIT,
			                     "%s: the element count of its shape overflows", what);
		numel *= (uint64_t)dim;
	}
	if (t->rank) {
		t->dims = tpf_arena_memdup(a, tp->dims, tp->n_dims * sizeof(int64_t));
		if (!t->dims)
			return onnx_nomem(c);
	}
	if (tp->segment)
		return tpf_diag_fail(c->d, TPF_ERR_UNSUPPORTED,
		                     "%s: segmented tensors are not supported", what);
	*out = t;

	if (t->dtype == TPF_DTYPE_STRING) {
		if (tp->has_raw_data || tp->n_external_data)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: STRING tensors must use string_data", what);
		if ((uint64_t)tp->n_string_data != numel)
			return typed_mismatch(c, what, t->dtype, "string_data", tp->n_string_data,
			                      numel);
		size_t n = tp->n_string_data;
		t->n_strings = n;
		if (n) {
			t->strings = onnx_arena_array(a, n, sizeof(*t->strings));
			t->string_lens = onnx_arena_array(a, n, sizeof(*t->string_lens));
			if (!t->strings || !t->string_lens)
				return onnx_nomem(c);
		}
		for (size_t i = 0; i < n; i++) {
			const ProtobufCBinaryData *s = &tp->string_data[i];
			char *p = tpf_arena_alloc(a, s->len + 1);
			if (!p)
				return onnx_nomem(c);
			if (s->len)
				memcpy(p, s->data, s->len);
			t->strings[i] = p;
			t->string_lens[i] = s->len;
		}
		return TPF_OK;
	}

	size_t nbytes;
	if (tpf_dtype_storage_bytes(t->dtype, numel, &nbytes))
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: its size in bytes overflows", what);
	t->nbytes = nbytes;

	if ((tp->has_data_location &&
	     tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) ||
	    tp->n_external_data)
		return import_external(c, a, tp, t, nbytes, what);

	if (tp->has_raw_data) {
		if (tp->raw_data.len != nbytes) {
			char shape[256];
			size_t off = 0;
			shape[0] = '\0';
			for (int i = 0; i < t->rank && off < sizeof(shape) - 24; i++)
				off += (size_t)snprintf(shape + off, sizeof(shape) - off, "%s%lld",
				                        i ? "," : "", (long long)t->dims[i]);
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: raw_data holds %zu bytes but %s[%s] needs %zu",
			                     what, tp->raw_data.len, tpf_dtype_onnx_name(t->dtype),
			                     shape, nbytes);
		}
		if (nbytes && tp->raw_data.data) {
			if (backing_adopt(c->bk, tp->raw_data.data))
				return onnx_nomem(c);
			t->data = tp->raw_data.data;
			tp->raw_data.data = NULL;
			tp->raw_data.len = 0;
			tp->has_raw_data = 0;
		}
		return TPF_OK;
	}
	return import_typed(c, tp, t, numel, nbytes, what);
}

/* A sparse initializer becomes a dense one (the IR has no sparse tensors). */
enum tpf_status onnx_import_sparse_initializer(struct import_ctx *c, struct tpf_graph *g,
                                               Onnx__SparseTensorProto *sp, size_t index)
{
	char what[320];
	const char *name = sp->values && sp->values->name ? sp->values->name : "";
	snprintf(what, sizeof(what), "sparse initializer '%s'", name);
	if (!sp->values || !sp->indices || !*name)
		return tpf_diag_fail(c->d, TPF_ERR_INVALID,
		                     "sparse initializer %zu lacks values, indices or a name",
		                     index);
	struct tpf_tensor *vals, *idx;
	enum tpf_status st = onnx_import_tensor(c, g->arena, sp->values, what, &vals);
	if (st)
		return st;
	st = onnx_import_tensor(c, g->arena, sp->indices, what, &idx);
	if (st)
		return st;
	unsigned bits = tpf_dtype_bits(vals->dtype);
	if (bits < 8 || vals->rank != 1)
		return tpf_diag_fail(
		    c->d, TPF_ERR_UNSUPPORTED,
		    "%s: only rank-1 values of whole-byte element types are supported", what);
	if (idx->dtype != TPF_DTYPE_INT64 || (vals->nbytes && (!vals->data || !idx->data)))
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: indices must be INT64 with data",
		                     what);
	if (sp->n_dims > TPF_MAX_RANK)
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: rank %zu exceeds the limit of %d",
		                     what, sp->n_dims, TPF_MAX_RANK);
	int rank = (int)sp->n_dims;
	uint64_t numel = 1;
	for (int i = 0; i < rank; i++) {
		int64_t dim = sp->dims[i];
		if (dim < 0)
			return tpf_diag_fail(c->d, TPF_ERR_INVALID,
			                     "%s: dimension %d is negative (%lld)", what, i,
			                     (long long)dim);
		if (dim && numel > UINT64_MAX / (uint64_t)dim)
			return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: element count overflows",
			                     what);
		numel *= (uint64_t)dim;
	}
	size_t esize = bits / 8, nbytes;
	if (tpf_dtype_storage_bytes(vals->dtype, numel, &nbytes) || nbytes > MAX_DENSE_SPARSE_BYTES)
		return tpf_diag_fail(c->d, TPF_ERR_LIMIT, "%s: too large to make dense", what);
	uint64_t nnz = (uint64_t)vals->dims[0];
	const int64_t *ix = idx->data;
	int coords;
	if (idx->rank == 1 && (uint64_t)idx->dims[0] == nnz)
		coords = 0;
	else if (idx->rank == 2 && (uint64_t)idx->dims[0] == nnz && idx->dims[1] == rank)
		coords = 1;
	else
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: indices have the wrong shape",
		                     what);
	uint8_t *dense = backing_alloc(c->bk, nbytes, 1);
	if (!dense)
		return onnx_nomem(c);
	for (uint64_t k = 0; k < nnz; k++) {
		uint64_t lin = 0;
		if (!coords) {
			if (ix[k] < 0 || (uint64_t)ix[k] >= numel)
				return tpf_diag_fail(c->d, TPF_ERR_INVALID,
				                     "%s: index out of range", what);
			lin = (uint64_t)ix[k];
		} else {
			for (int j = 0; j < rank; j++) {
				int64_t v = ix[k * (uint64_t)rank + (uint64_t)j];
				if (v < 0 || v >= sp->dims[j])
					return tpf_diag_fail(c->d, TPF_ERR_INVALID,
					                     "%s: index out of range", what);
				lin = lin * (uint64_t)sp->dims[j] + (uint64_t)v;
			}
		}
		memcpy(dense + lin * esize, (const uint8_t *)vals->data + k * esize, esize);
	}
	struct tpf_tensor *t = tpf_arena_alloc(g->arena, sizeof(*t));
	if (!t || !(t->name = tpf_arena_strdup(g->arena, name)))
		return onnx_nomem(c);
	t->dtype = vals->dtype;
	t->rank = rank;
	if (rank &&
	    !(t->dims = tpf_arena_memdup(g->arena, sp->dims, (size_t)rank * sizeof(int64_t))))
		return onnx_nomem(c);
	t->data = dense;
	t->nbytes = nbytes;
	if (tpf_graph_find_value(g, name))
		return tpf_diag_fail(c->d, TPF_ERR_INVALID, "%s: the name is defined twice", what);
	if (!tpf_graph_add_initializer_tensor(g, t))
		return onnx_nomem(c);
	return TPF_OK;
}
