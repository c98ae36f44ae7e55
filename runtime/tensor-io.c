/* SPDX-License-Identifier: MIT */
/* ONNX's test-data format: one serialized TensorProto per .pb file
 * (input_N.pb / output_N.pb).  Reads raw_data and every typed field;
 * writes raw_data. */
#include "tpf-runtime.h"

#include "onnx.pb-c.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TPF_PB_MAX_BYTES ((size_t)1 << 34)

static enum tpf_status read_file(const char *path, uint8_t **out, size_t *size, struct tpf_diag *d)
{
	enum tpf_status st;
	FILE *f = tpf_fopen_regular(path, "tensor file", d, &st);
	struct stat sb;
	if (!f)
		return st;
	if (fstat(fileno(f), &sb) || (uint64_t)sb.st_size > TPF_PB_MAX_BYTES) {
		fclose(f);
		return tpf_diag_fail(d, TPF_ERR_IO, "tensor file %s: larger than %zu bytes", path,
		                     TPF_PB_MAX_BYTES);
	}
	size_t n = (size_t)sb.st_size;
	if (n == 0) {
		fclose(f);
		return tpf_diag_fail(d, TPF_ERR_PARSE,
		                     "tensor file %s: empty file, not a TensorProto", path);
	}
	uint8_t *buf = tpf_malloc(n ? n : 1);
	if (!buf) {
		fclose(f);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", path);
	}
	if (n && fread(buf, 1, n, f) != n) {
		tpf_free(buf);
		fclose(f);
		return tpf_diag_fail(d, TPF_ERR_IO, "%s: short read", path);
	}
	fclose(f);
	*out = buf;
	*size = n;
	return TPF_OK;
}

void tpf_host_tensor_release(struct tpf_host_tensor *t)
{
	if (!t)
		return;
	tpf_free((void *)t->name);
	tpf_free(t->data);
	t->name = NULL;
	t->data = NULL;
}

void tpf_host_tensors_release(struct tpf_host_tensor *t, size_t count)
{
	for (size_t i = 0; t && i < count; i++)
		tpf_host_tensor_release(&t[i]);
	tpf_free(t);
}

static enum tpf_status from_proto(const Onnx__TensorProto *tp, const char *path,
				  struct tpf_host_tensor *t, struct tpf_diag *d)
{
	memset(t, 0, sizeof(*t));
	int dt = tp->has_data_type ? tp->data_type : 0;
	if (!tpf_dtype_is_valid(dt) || dt == TPF_DTYPE_STRING || dt == TPF_DTYPE_COMPLEX64 ||
	    dt == TPF_DTYPE_COMPLEX128)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "%s: tensor dtype %d not supported", path, dt);
	if (tp->n_dims > TPF_KERNEL_MAX_RANK)
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s: rank %zu exceeds %d", path, tp->n_dims,
				     TPF_KERNEL_MAX_RANK);
	if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
		return tpf_diag_fail(d, TPF_ERR_UNSUPPORTED, "%s: external data in test tensors not supported",
				     path);
	t->dtype = (enum tpf_dtype)dt;
	t->rank = (int)tp->n_dims;
	for (size_t i = 0; i < tp->n_dims; i++) {
		if (tp->dims[i] < 0)
			return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: negative dim", path);
		t->dims[i] = tp->dims[i];
	}
	size_t nb;
	if (tpf_host_tensor_bytes(t, &nb))
		return tpf_diag_fail(d, TPF_ERR_LIMIT, "%s: tensor size overflows", path);
	uint64_t numel = 1;
	for (int i = 0; i < t->rank; i++)
		numel *= (uint64_t)t->dims[i];
	/* Refuse before allocating: the shape alone may promise terabytes that a
	 * few-byte file does not hold. */
	if (tp->has_raw_data ? tp->raw_data.len != nb : 0)
		return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: raw_data has %zu bytes, %zu expected", path,
				     tp->raw_data.len, nb);
	if (!tp->has_raw_data) {
		size_t typed = tp->n_float_data;
		const size_t counts[] = {tp->n_double_data, tp->n_int64_data, tp->n_uint64_data,
					 tp->n_int32_data};
		for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
			if (counts[i] > typed)
				typed = counts[i];
		uint64_t need = tpf_dtype_bits(t->dtype) < 8 ? (uint64_t)nb : numel;
		if (typed < need)
			return tpf_diag_fail(d, TPF_ERR_INVALID,
					     "%s: the tensor holds %zu values, its shape needs %llu", path, typed,
					     (unsigned long long)need);
	}
	t->nbytes = nb;
	t->data = tpf_calloc(nb ? nb : 1, 1);
	t->name = tpf_strdup(tp->name ? tp->name : "");
	if (!t->data || !t->name) {
		tpf_host_tensor_release(t);
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", path);
	}
	enum tpf_status st = TPF_OK;
	unsigned bits = tpf_dtype_bits(t->dtype);
	if (tp->has_raw_data) {
		if (tp->raw_data.len != nb)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: raw_data has %zu bytes, %zu expected", path,
					   tp->raw_data.len, nb);
		else if (nb)
			memcpy(t->data, tp->raw_data.data, nb);
	} else if (t->dtype == TPF_DTYPE_FLOAT) {
		if (tp->n_float_data != numel)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: float_data has %zu values", path, tp->n_float_data);
		else if (nb)
			memcpy(t->data, tp->float_data, nb);
	} else if (t->dtype == TPF_DTYPE_DOUBLE) {
		if (tp->n_double_data != numel)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: double_data has %zu values", path, tp->n_double_data);
		else if (nb)
			memcpy(t->data, tp->double_data, nb);
	} else if (t->dtype == TPF_DTYPE_INT64) {
		if (tp->n_int64_data != numel)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: int64_data has %zu values", path, tp->n_int64_data);
		else if (nb)
			memcpy(t->data, tp->int64_data, nb);
	} else if (t->dtype == TPF_DTYPE_UINT32 || t->dtype == TPF_DTYPE_UINT64) {
		if (tp->n_uint64_data != numel)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: uint64_data has %zu values", path, tp->n_uint64_data);
		else
			for (uint64_t i = 0; i < numel; i++)
				tpf_elem_store_int(t->dtype, t->data, (int64_t)i, (int64_t)tp->uint64_data[i]);
	} else if (bits < 8) {
		/* packed bytes, one per int32 */
		if (tp->n_int32_data != nb)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: int32_data has %zu packed bytes, %zu expected",
					   path, tp->n_int32_data, nb);
		else
			for (size_t i = 0; i < nb; i++)
				((uint8_t *)t->data)[i] = (uint8_t)tp->int32_data[i];
	} else {
		/* int32_data holds values (integers) or bit patterns (16/8-bit floats) */
		if (tp->n_int32_data != numel)
			st = tpf_diag_fail(d, TPF_ERR_INVALID, "%s: int32_data has %zu values", path, tp->n_int32_data);
		else
			for (uint64_t i = 0; i < numel; i++) {
				int32_t v = tp->int32_data[i];
				if (bits == 16)
					((uint16_t *)t->data)[i] = (uint16_t)v;
				else if (bits == 8)
					((uint8_t *)t->data)[i] = (uint8_t)v;
				else
					((int32_t *)t->data)[i] = v;
			}
	}
	if (st)
		tpf_host_tensor_release(t);
	return st;
}

enum tpf_status tpf_tensor_read_pb(const char *path, struct tpf_host_tensor *out, struct tpf_diag *d)
{
	uint8_t *buf = NULL;
	size_t n = 0;
	memset(out, 0, sizeof(*out));
	enum tpf_status st = read_file(path, &buf, &n, d);
	if (st)
		return st;
	Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, n, buf);
	tpf_free(buf);
	if (!tp)
		return tpf_diag_fail(d, TPF_ERR_PARSE, "%s: not a valid TensorProto", path);
	st = from_proto(tp, path, out, d);
	onnx__tensor_proto__free_unpacked(tp, NULL);
	return st;
}

enum tpf_status tpf_tensor_write_pb_to(struct tpf_out_file *f, const struct tpf_host_tensor *t,
				       struct tpf_diag *d)
{
	Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
	size_t nb;
	if (tpf_host_tensor_bytes(t, &nb))
		return tpf_diag_fail(d, TPF_ERR_INVALID, "%s: bad tensor", f->path);
	tp.n_dims = (size_t)t->rank;
	tp.dims = (int64_t *)t->dims;
	tp.has_data_type = 1;
	tp.data_type = (int32_t)t->dtype;
	tp.name = (char *)(t->name ? t->name : "");
	tp.has_raw_data = 1;
	tp.raw_data.len = nb;
	tp.raw_data.data = t->data;
	size_t size = onnx__tensor_proto__get_packed_size(&tp);
	uint8_t *buf = tpf_malloc(size ? size : 1);
	if (!buf)
		return tpf_diag_fail(d, TPF_ERR_NOMEM, "%s: out of memory", f->path);
	onnx__tensor_proto__pack(&tp, buf);
	enum tpf_status st = TPF_OK;
	for (size_t done = 0; done < size && !st;) {
		ssize_t w = write(f->fd, buf + done, size - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			st = tpf_diag_fail(d, TPF_ERR_IO, "%s: write failed: %s", f->path,
					   w < 0 ? strerror(errno) : "no progress");
		else
			done += (size_t)w;
	}
	tpf_free(buf);
	if (!st)
		st = tpf_out_file_close(f, d);
	return st;
}

enum tpf_status tpf_tensor_write_pb(const char *path, const struct tpf_host_tensor *t,
				    struct tpf_diag *d)
{
	struct tpf_out_file f;
	enum tpf_status st = tpf_out_file_open(&f, path, d);
	if (st)
		return st;
	if ((st = tpf_tensor_write_pb_to(&f, t, d))) {
		tpf_out_file_discard(&f);
		return st;
	}
	return tpf_out_files_commit(&f, 1, d);
}

enum tpf_status tpf_tensor_read_dir(const char *dir, const char *prefix,
				    struct tpf_host_tensor **out, size_t *count, struct tpf_diag *d)
{
	struct tpf_host_tensor *arr = NULL;
	size_t n = 0, cap = 0;
	char path[4096];
	*out = NULL;
	*count = 0;
	for (;;) {
		struct stat sb;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s_%zu.pb", dir, prefix, n) >= sizeof(path))
			break;
		if (stat(path, &sb) != 0)
			break;
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			void *na = tpf_realloc(arr, cap * sizeof(*arr));
			if (!na) {
				tpf_host_tensors_release(arr, n);
				return tpf_diag_fail(d, TPF_ERR_NOMEM, "out of memory");
			}
			arr = na;
		}
		enum tpf_status st = tpf_tensor_read_pb(path, &arr[n], d);
		if (st) {
			tpf_host_tensors_release(arr, n);
			return st;
		}
		n++;
	}
	if (n == 0) {
		struct stat sb;
		if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
			return tpf_diag_fail(d, TPF_ERR_IO, "%s: not a folder", dir);
	}
	*out = arr;
	*count = n;
	return TPF_OK;
}
