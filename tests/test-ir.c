/* SPDX-License-Identifier: MIT */
/*
 * IR and builder unit tests: arena, diagnostics, allocation helpers, the
 * dtype table (sub-byte storage sizes included), op lookup, graph building,
 * use lists, replacing uses, erasing, attributes, unique names, toposort and
 * shape arithmetic.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tpf-ir.h"

/* ------------------------------------------------------------------ helpers */

static int diag_mentions(const struct tpf_diag *d, const char *needle)
{
	for (size_t i = 0; i < d->count; i++)
		if (d->entries[i].text && strstr(d->entries[i].text, needle))
			return 1;
	return 0;
}

static int has_use(const struct tpf_value *v, const struct tpf_node *n, int index)
{
	for (size_t i = 0; i < v->n_uses; i++)
		if (v->uses[i].node == n && v->uses[i].index == index)
			return 1;
	return 0;
}

static int node_in_list(const struct tpf_graph *g, const struct tpf_node *n)
{
	for (const struct tpf_node *it = g->first; it; it = it->next)
		if (it == n)
			return 1;
	return 0;
}

/* Node order as a string of single-letter names, e.g. "abc". */
static void node_order(const struct tpf_graph *g, char *buf, size_t size)
{
	size_t k = 0;
	for (const struct tpf_node *it = g->first; it && k + 1 < size; it = it->next)
		buf[k++] = it->name[0];
	buf[k] = 0;
}

/* The linked list agrees with n_nodes, both directions. */
static void check_list(const struct tpf_graph *g)
{
	size_t n = 0;
	const struct tpf_node *prev = NULL;
	for (const struct tpf_node *it = g->first; it; it = it->next) {
		assert_ptr_equal(it->prev, prev);
		assert_false(it->erased);
		prev = it;
		n++;
	}
	assert_ptr_equal(g->last, prev);
	assert_int_equal(n, g->n_nodes);
}

/* ------------------------------------------------------------------ status, diag */

static void test_status_names(void **state)
{
	for (int s = 0; s < TPF_STATUS_COUNT; s++) {
		const char *name = tpf_status_name((enum tpf_status)s);
		assert_non_null(name);
		assert_true(strlen(name) > 0);
		for (int t = 0; t < s; t++)
			assert_string_not_equal(name, tpf_status_name((enum tpf_status)t));
	}
}

static void test_diag(void **state)
{
	struct tpf_diag *d = tpf_diag_create();
	assert_non_null(d);
	assert_int_equal(d->count, 0);
	assert_int_equal(d->error_count, 0);

	tpf_diag_add(d, TPF_SEV_NOTE, "a note %d", 1);
	tpf_diag_add(d, TPF_SEV_WARNING, "a warning %s", "here");
	tpf_diag_add(d, TPF_SEV_ERROR, "node '%s' (%s): bad", "n1", "Add");
	assert_int_equal(d->count, 3);
	assert_int_equal(d->error_count, 1);
	assert_string_equal(d->entries[0].text, "a note 1");
	assert_int_equal(d->entries[1].severity, TPF_SEV_WARNING);
	assert_string_equal(d->entries[1].text, "a warning here");
	assert_string_equal(d->entries[2].text, "node 'n1' (Add): bad");

	assert_int_equal(tpf_diag_fail(d, TPF_ERR_VERIFY, "failed with %d", 42), TPF_ERR_VERIFY);
	assert_int_equal(d->error_count, 2);
	assert_int_equal(d->entries[3].severity, TPF_SEV_ERROR);
	assert_string_equal(d->entries[3].text, "failed with 42");

	/* A long message is kept whole. */
	char big[5000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	tpf_diag_add(d, TPF_SEV_ERROR, "%s", big);
	assert_int_equal(strlen(d->entries[4].text), sizeof(big) - 1);

	/* The printer writes "error: ..." lines. */
	char *out = NULL;
	size_t out_len = 0;
	FILE *f = open_memstream(&out, &out_len);
	assert_non_null(f);
	tpf_diag_print(d, f);
	fclose(f);
	assert_non_null(strstr(out, "note: a note 1\n"));
	assert_non_null(strstr(out, "warning: a warning here\n"));
	assert_non_null(strstr(out, "error: node 'n1' (Add): bad\n"));
	free(out);

	tpf_diag_clear(d);
	assert_int_equal(d->count, 0);
	assert_int_equal(d->error_count, 0);

	/* max_entries: later messages are counted, not kept. */
	d->max_entries = 2;
	for (int i = 0; i < 5; i++)
		tpf_diag_add(d, TPF_SEV_ERROR, "e%d", i);
	assert_int_equal(d->count, 2);
	assert_int_equal(d->dropped, 3);
	assert_int_equal(d->error_count, 5);
	tpf_diag_free(d);

	/* A NULL diagnostic swallows messages. */
	tpf_diag_add(NULL, TPF_SEV_ERROR, "ignored");
	assert_int_equal(tpf_diag_fail(NULL, TPF_ERR_IO, "ignored"), TPF_ERR_IO);
	tpf_diag_free(NULL);
}

/* ------------------------------------------------------------------ allocation */

static void test_checked_arithmetic(void **state)
{
	size_t r = 0;
	assert_int_equal(tpf_mul_size(3, 7, &r), 0);
	assert_int_equal(r, 21);
	assert_int_equal(tpf_mul_size(0, SIZE_MAX, &r), 0);
	assert_int_equal(r, 0);
	assert_int_equal(tpf_mul_size(SIZE_MAX / 2 + 1, 2, &r), -1);
	assert_int_equal(tpf_mul_size((size_t)1 << 32, (size_t)1 << 32, &r), -1);
	assert_int_equal(tpf_add_size(SIZE_MAX - 1, 1, &r), 0);
	assert_int_equal(r, SIZE_MAX);
	assert_int_equal(tpf_add_size(SIZE_MAX, 1, &r), -1);
}

static void test_alloc_fault_injection(void **state)
{
	uint64_t before = tpf_alloc_count();
	void *p = tpf_malloc(16);
	assert_non_null(p);
	assert_true(tpf_alloc_count() > before);
	tpf_free(p);

	tpf_alloc_fail_after(2);
	void *a = tpf_malloc(8);
	void *b = tpf_malloc(8);
	tpf_alloc_fail_after(0);
	assert_non_null(a);
	assert_null(b);
	tpf_free(a);

	tpf_alloc_fail_after(1);
	assert_null(tpf_strdup("x"));
	tpf_alloc_fail_after(0);
	char *s = tpf_strdup("hello");
	assert_string_equal(s, "hello");
	tpf_free(s);

	/* Overflowing calloc is refused without allocating. */
	assert_null(tpf_calloc(SIZE_MAX / 2, 4));
	tpf_free(NULL);
}

/* ------------------------------------------------------------------ arena */

static void test_arena(void **state)
{
	struct tpf_arena *a = tpf_arena_create();
	assert_non_null(a);
	size_t b0 = tpf_arena_bytes(a);

	for (size_t n = 1; n < 300; n += 7) {
		unsigned char *p = tpf_arena_alloc(a, n);
		assert_non_null(p);
		assert_int_equal((uintptr_t)p % 16, 0);
		for (size_t i = 0; i < n; i++)
			assert_int_equal(p[i], 0);
		memset(p, 0xab, n);
	}
	/* Larger than any block. */
	unsigned char *big = tpf_arena_alloc(a, (size_t)4 << 20);
	assert_non_null(big);
	assert_int_equal(big[0], 0);
	assert_int_equal(big[((size_t)4 << 20) - 1], 0);
	assert_true(tpf_arena_bytes(a) >= b0 + ((size_t)4 << 20));

	char *s = tpf_arena_strdup(a, "tensor");
	assert_string_equal(s, "tensor");
	char *sn = tpf_arena_strndup(a, "abcdef", 3);
	assert_string_equal(sn, "abc");
	const int32_t vals[3] = {1, -2, 3};
	int32_t *m = tpf_arena_memdup(a, vals, sizeof(vals));
	assert_non_null(m);
	assert_memory_equal(m, vals, sizeof(vals));
	assert_ptr_not_equal(m, vals);

	/* Huge requests fail cleanly. */
	assert_null(tpf_arena_alloc(a, SIZE_MAX - 8));
	tpf_arena_free(a);
	tpf_arena_free(NULL);
}

/* ------------------------------------------------------------------ dtypes */

static void test_dtype_table(void **state)
{
	static const struct {
		enum tpf_dtype t;
		const char *onnx;
		unsigned bits;
		int is_float;
	} rows[] = {
		{TPF_DTYPE_FLOAT, "FLOAT", 32, 1},
		{TPF_DTYPE_UINT8, "UINT8", 8, 0},
		{TPF_DTYPE_INT8, "INT8", 8, 0},
		{TPF_DTYPE_UINT16, "UINT16", 16, 0},
		{TPF_DTYPE_INT16, "INT16", 16, 0},
		{TPF_DTYPE_INT32, "INT32", 32, 0},
		{TPF_DTYPE_INT64, "INT64", 64, 0},
		{TPF_DTYPE_STRING, "STRING", 0, 0},
		{TPF_DTYPE_BOOL, "BOOL", 8, 0},
		{TPF_DTYPE_FLOAT16, "FLOAT16", 16, 1},
		{TPF_DTYPE_DOUBLE, "DOUBLE", 64, 1},
		{TPF_DTYPE_UINT32, "UINT32", 32, 0},
		{TPF_DTYPE_UINT64, "UINT64", 64, 0},
		{TPF_DTYPE_COMPLEX64, "COMPLEX64", 64, 0},
		{TPF_DTYPE_COMPLEX128, "COMPLEX128", 128, 0},
		{TPF_DTYPE_BFLOAT16, "BFLOAT16", 16, 1},
		{TPF_DTYPE_FLOAT8E4M3FN, "FLOAT8E4M3FN", 8, 1},
		{TPF_DTYPE_FLOAT8E4M3FNUZ, "FLOAT8E4M3FNUZ", 8, 1},
		{TPF_DTYPE_FLOAT8E5M2, "FLOAT8E5M2", 8, 1},
		{TPF_DTYPE_FLOAT8E5M2FNUZ, "FLOAT8E5M2FNUZ", 8, 1},
		{TPF_DTYPE_UINT4, "UINT4", 4, 0},
		{TPF_DTYPE_INT4, "INT4", 4, 0},
		{TPF_DTYPE_FLOAT4E2M1, "FLOAT4E2M1", 4, 1},
		{TPF_DTYPE_FLOAT8E8M0, "FLOAT8E8M0", 8, 1},
		{TPF_DTYPE_UINT2, "UINT2", 2, 0},
		{TPF_DTYPE_INT2, "INT2", 2, 0},
	};
	assert_int_equal(sizeof(rows) / sizeof(rows[0]), TPF_DTYPE_COUNT - 1);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		enum tpf_dtype t = rows[i].t, back = TPF_DTYPE_UNDEFINED;
		assert_true(tpf_dtype_is_valid(t));
		assert_string_equal(tpf_dtype_onnx_name(t), rows[i].onnx);
		assert_int_equal(tpf_dtype_bits(t), rows[i].bits);
		assert_int_equal(!!tpf_dtype_is_float(t), rows[i].is_float);
		/* Both spellings parse back. */
		assert_int_equal(tpf_dtype_from_name(rows[i].onnx, &back), 0);
		assert_int_equal(back, t);
		const char *shortname = tpf_dtype_name(t);
		assert_non_null(shortname);
		assert_string_not_equal(shortname, "?");
		back = TPF_DTYPE_UNDEFINED;
		assert_int_equal(tpf_dtype_from_name(shortname, &back), 0);
		assert_int_equal(back, t);
		/* Short names are distinct. */
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(shortname, tpf_dtype_name(rows[j].t));
	}
	assert_string_equal(tpf_dtype_name(TPF_DTYPE_BFLOAT16), "bf16");
	assert_false(tpf_dtype_is_valid(-1));
	assert_false(tpf_dtype_is_valid(TPF_DTYPE_COUNT));
	assert_false(tpf_dtype_is_valid(1000));
	enum tpf_dtype dummy;
	assert_int_not_equal(tpf_dtype_from_name("float33", &dummy), 0);
	assert_int_not_equal(tpf_dtype_from_name("", &dummy), 0);
}

static void test_dtype_storage(void **state)
{
	size_t n = 12345;
	/* Whole-byte types. */
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_FLOAT, 3, &n), 0);
	assert_int_equal(n, 12);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_BFLOAT16, 5, &n), 0);
	assert_int_equal(n, 10);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_FLOAT8E4M3FN, 7, &n), 0);
	assert_int_equal(n, 7);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_FLOAT8E8M0, 2, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_COMPLEX128, 2, &n), 0);
	assert_int_equal(n, 32);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_INT64, 0, &n), 0);
	assert_int_equal(n, 0);
	/* Packed 4-bit types: two per byte, rounded up. */
	static const enum tpf_dtype four[] = {TPF_DTYPE_INT4, TPF_DTYPE_UINT4,
					      TPF_DTYPE_FLOAT4E2M1};
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(tpf_dtype_storage_bytes(four[i], 1, &n), 0);
		assert_int_equal(n, 1);
		assert_int_equal(tpf_dtype_storage_bytes(four[i], 3, &n), 0);
		assert_int_equal(n, 2);
		assert_int_equal(tpf_dtype_storage_bytes(four[i], 16, &n), 0);
		assert_int_equal(n, 8);
	}
	/* Packed 2-bit types: four per byte. */
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_INT2, 5, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_UINT2, 8, &n), 0);
	assert_int_equal(n, 2);
	/* Overflow. */
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_FLOAT, UINT64_C(1) << 62, &n), -1);
	assert_int_equal(tpf_dtype_storage_bytes(TPF_DTYPE_DOUBLE, UINT64_MAX, &n), -1);
}

/* ------------------------------------------------------------------ ops */

static void test_op_table(void **state)
{
	assert_int_equal(tpf_op_lookup("", "MatMul"), TPF_OP_MATMUL);
	assert_int_equal(tpf_op_lookup("ai.onnx", "MatMul"), TPF_OP_MATMUL);
	assert_int_equal(tpf_op_lookup("com.microsoft", "AllReduce"), TPF_OP_MS_ALLREDUCE);
	assert_int_equal(tpf_op_lookup("", "AllReduce"), TPF_OP_UNKNOWN);
	assert_int_equal(tpf_op_lookup("", "NoSuchOp"), TPF_OP_UNKNOWN);
	assert_int_equal(tpf_op_lookup("com.example", "MatMul"), TPF_OP_UNKNOWN);
	assert_int_equal(tpf_op_lookup("", "matmul"), TPF_OP_UNKNOWN); /* case matters */
	assert_int_equal(tpf_op_lookup("", "SimplifiedLayerNormalization"),
			 TPF_OP_SIMPLIFIED_LAYER_NORMALIZATION);
	assert_int_equal(tpf_op_lookup("com.microsoft", "SimplifiedLayerNormalization"),
			 TPF_OP_MS_SIMPLIFIED_LAYER_NORMALIZATION);

	const struct tpf_op_info *add = tpf_op_info(TPF_OP_ADD);
	assert_non_null(add);
	assert_string_equal(add->name, "Add");
	assert_string_equal(add->domain, "");
	assert_int_equal(add->min_inputs, 2);
	assert_int_equal(add->max_inputs, 2);
	assert_int_equal(tpf_op_info(TPF_OP_CONCAT)->max_inputs, -1);

	/* Every entry maps back to itself: names and ids cannot drift apart. */
	for (int op = 1; op < TPF_OP_COUNT; op++) {
		const struct tpf_op_info *info = tpf_op_info((enum tpf_op)op);
		assert_non_null(info);
		assert_non_null(info->name);
		assert_true(info->name[0] != 0);
		assert_int_equal(tpf_op_lookup(info->domain, info->name), op);
		assert_true(info->min_inputs >= 0);
		assert_true(info->max_inputs < 0 || info->max_inputs >= info->min_inputs);
		assert_true(info->max_outputs < 0 || info->max_outputs >= info->min_outputs);
	}
}

/* ------------------------------------------------------------------ shapes, tensors */

static void test_shape_numel(void **state)
{
	struct tpf_dim d3[3] = {{2, NULL, NULL}, {3, NULL, NULL}, {4, NULL, NULL}};
	struct tpf_shape s = {3, d3};
	assert_int_equal(tpf_shape_numel(&s), 24);

	struct tpf_shape scalar = {0, NULL};
	assert_int_equal(tpf_shape_numel(&scalar), 1);

	struct tpf_dim dz[2] = {{0, NULL, NULL}, {7, NULL, NULL}};
	struct tpf_shape zero = {2, dz};
	assert_int_equal(tpf_shape_numel(&zero), 0);

	struct tpf_dim dsym[2] = {{-1, "batch", NULL}, {4, NULL, NULL}};
	struct tpf_shape sym = {2, dsym};
	assert_int_equal(tpf_shape_numel(&sym), -1);

	struct tpf_dim dunk[2] = {{-1, NULL, NULL}, {4, NULL, NULL}};
	struct tpf_shape unk = {2, dunk};
	assert_int_equal(tpf_shape_numel(&unk), -1);

	struct tpf_shape unranked = {-1, NULL};
	assert_int_equal(tpf_shape_numel(&unranked), -1);

	struct tpf_dim dbig[3] = {{INT64_C(1) << 31, NULL, NULL},
				  {INT64_C(1) << 31, NULL, NULL},
				  {INT64_C(1) << 2, NULL, NULL}};
	struct tpf_shape big = {3, dbig}; /* 2^64: overflows int64 */
	assert_int_equal(tpf_shape_numel(&big), -1);

	struct tpf_dim dedge[2] = {{INT64_C(1) << 31, NULL, NULL}, {INT64_C(1) << 31, NULL, NULL}};
	struct tpf_shape edge = {2, dedge}; /* 2^62 fits */
	assert_int_equal(tpf_shape_numel(&edge), INT64_C(1) << 62);
}

static void test_tensor_create(void **state)
{
	struct tpf_arena *a = tpf_arena_create();
	const int64_t dims[2] = {2, 3};
	const uint16_t bf[6] = {0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0};
	struct tpf_tensor *t =
		tpf_tensor_create(a, "w", TPF_DTYPE_BFLOAT16, 2, dims, bf, sizeof(bf));
	assert_non_null(t);
	assert_string_equal(t->name, "w");
	assert_int_equal(t->dtype, TPF_DTYPE_BFLOAT16);
	assert_int_equal(t->rank, 2);
	assert_int_equal(t->dims[0], 2);
	assert_int_equal(t->dims[1], 3);
	assert_int_equal(t->nbytes, sizeof(bf));
	assert_memory_equal(t->data, bf, sizeof(bf));
	assert_int_equal(tpf_tensor_numel(t), 6);

	/* FP4: 5 elements in 3 bytes. */
	const int64_t d5[1] = {5};
	const uint8_t packed[3] = {0x21, 0x43, 0x05};
	struct tpf_tensor *f4 =
		tpf_tensor_create(a, "f4", TPF_DTYPE_FLOAT4E2M1, 1, d5, packed, sizeof(packed));
	assert_non_null(f4);
	assert_int_equal(tpf_tensor_numel(f4), 5);
	assert_int_equal(f4->nbytes, 3);

	const int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 2};
	struct tpf_tensor h = {.name = "h", .dtype = TPF_DTYPE_FLOAT, .rank = 3,
			       .dims = (int64_t *)huge};
	assert_int_equal(tpf_tensor_numel(&h), -1);
	tpf_arena_free(a);
}

/* ------------------------------------------------------------------ models, graphs */

static void test_model_basics(void **state)
{
	struct tpf_model *m = tpf_model_create();
	assert_non_null(m);
	assert_non_null(m->graph);
	assert_int_equal(m->graph->n_nodes, 0);

	assert_int_equal(tpf_model_opset(m, ""), -1);
	assert_int_equal(tpf_model_set_opset(m, "", 23), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, "com.microsoft", 1), TPF_OK);
	assert_int_equal(tpf_model_opset(m, ""), 23);
	assert_int_equal(tpf_model_opset(m, "com.microsoft"), 1);
	assert_int_equal(tpf_model_set_opset(m, "", 21), TPF_OK); /* replaces */
	assert_int_equal(tpf_model_opset(m, ""), 21);
	size_t onnx_entries = 0;
	for (size_t i = 0; i < m->n_opsets; i++)
		onnx_entries += strcmp(m->opsets[i].domain, "") == 0;
	assert_int_equal(onnx_entries, 1);

	assert_null(tpf_model_metadata(m, "tp_rank"));
	assert_int_equal(tpf_model_set_metadata(m, "tp_rank", "0"), TPF_OK);
	assert_int_equal(tpf_model_set_metadata(m, "tp_world_size", "2"), TPF_OK);
	assert_string_equal(tpf_model_metadata(m, "tp_rank"), "0");
	assert_int_equal(tpf_model_set_metadata(m, "tp_rank", "1"), TPF_OK);
	assert_string_equal(tpf_model_metadata(m, "tp_rank"), "1");
	assert_string_equal(tpf_model_metadata(m, "tp_world_size"), "2");
	tpf_model_free(m);
	tpf_model_free(NULL);
}

static void test_inputs_and_initializers(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[2] = {2, 4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, dims);
	assert_non_null(x);
	assert_string_equal(x->name, "x");
	assert_int_equal(x->kind, TPF_VALUE_GRAPH_INPUT);
	assert_true(x->is_graph_input);
	assert_ptr_equal(x->graph, g);
	assert_int_equal(x->type.kind, TPF_TYPE_TENSOR);
	assert_int_equal(x->type.dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(x->type.shape.rank, 2);
	assert_int_equal(x->type.shape.dims[0].value, 2);
	assert_int_equal(x->type.shape.dims[1].value, 4);
	assert_null(x->type.shape.dims[1].param);
	assert_int_equal(g->n_inputs, 1);
	assert_ptr_equal(g->inputs[0], x);
	assert_ptr_equal(tpf_graph_find_value(g, "x"), x);
	assert_null(tpf_graph_find_value(g, "y"));
	assert_null(tpf_value_constant(x));

	/* Names are unique in a graph. */
	assert_null(tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 2, dims));
	assert_int_equal(g->n_inputs, 1);

	/* Symbolic dims. */
	const char *sdims[3] = {"batch", "", "8"};
	struct tpf_value *s = tpf_graph_add_input_sym(g, "s", TPF_DTYPE_BFLOAT16, 3, sdims);
	assert_non_null(s);
	assert_int_equal(s->type.shape.rank, 3);
	assert_string_equal(s->type.shape.dims[0].param, "batch");
	assert_null(s->type.shape.dims[1].param);
	assert_true(s->type.shape.dims[1].value < 0);
	assert_null(s->type.shape.dims[2].param);
	assert_int_equal(s->type.shape.dims[2].value, 8);

	/* Initializers copy their bytes. */
	float w[4] = {1, 2, 3, 4};
	const int64_t wd[1] = {4};
	struct tpf_value *wv =
		tpf_graph_add_initializer(g, "w", TPF_DTYPE_FLOAT, 1, wd, w, sizeof(w));
	assert_non_null(wv);
	w[0] = 100;
	assert_int_equal(wv->kind, TPF_VALUE_INITIALIZER);
	assert_non_null(wv->init);
	assert_false(wv->is_graph_input);
	assert_int_equal(wv->init->nbytes, 16);
	assert_true(((const float *)wv->init->data)[0] == 1.0f);
	assert_ptr_equal(tpf_value_constant(wv), wv->init);
	assert_int_equal(g->n_initializers, 1);
	assert_ptr_equal(g->initializers[0], wv);

	/* An adopted tensor. */
	struct tpf_tensor *t = tpf_tensor_create(g->arena, "w2", TPF_DTYPE_FLOAT, 1, wd, w, 16);
	struct tpf_value *wv2 = tpf_graph_add_initializer_tensor(g, t);
	assert_non_null(wv2);
	assert_ptr_equal(wv2->init, t);
	assert_ptr_equal(tpf_graph_find_value(g, "w2"), wv2);
	tpf_model_free(m);
}

static void test_nodes_and_uses(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[1] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	struct tpf_value *y = tpf_graph_add_input(g, "y", TPF_DTYPE_FLOAT, 1, dims);

	struct tpf_node *add = tpf_graph_add_node(g, "", "Add", "add0",
						  (struct tpf_value *[]){x, y}, 2, 1,
						  (const char *[]){"s"});
	assert_non_null(add);
	assert_int_equal(add->op, TPF_OP_ADD);
	assert_string_equal(add->op_type, "Add");
	assert_string_equal(add->domain, "");
	assert_string_equal(add->name, "add0");
	assert_ptr_equal(add->graph, g);
	assert_int_equal(add->n_inputs, 2);
	assert_int_equal(add->n_outputs, 1);
	struct tpf_value *sum = add->outputs[0];
	assert_string_equal(sum->name, "s");
	assert_int_equal(sum->kind, TPF_VALUE_NODE_OUTPUT);
	assert_ptr_equal(sum->producer, add);
	assert_int_equal(sum->producer_index, 0);
	assert_ptr_equal(tpf_graph_find_value(g, "s"), sum);

	/* Use lists, in order, with operand indices. */
	struct tpf_node *sq = tpf_graph_add_node(g, "", "Mul", "sq",
						 (struct tpf_value *[]){sum, sum}, 2, 1, NULL);
	assert_non_null(sq);
	assert_int_equal(sum->n_uses, 2);
	assert_true(has_use(sum, sq, 0));
	assert_true(has_use(sum, sq, 1));
	assert_int_equal(x->n_uses, 1);
	assert_true(has_use(x, add, 0));
	assert_true(has_use(y, add, 1));
	assert_int_equal(tpf_value_use_count(sum), 2);

	/* Unnamed outputs get unique names. */
	struct tpf_value *sqv = sq->outputs[0];
	assert_non_null(sqv->name);
	assert_true(sqv->name[0] != 0);
	assert_ptr_equal(tpf_graph_find_value(g, sqv->name), sqv);

	/* Unknown ops keep domain and op_type. */
	struct tpf_node *custom = tpf_graph_add_node(g, "com.example", "Frobnicate", "fro",
						     (struct tpf_value *[]){sqv, NULL, x}, 3, 2,
						     (const char *[]){"f0", "f1"});
	assert_non_null(custom);
	assert_int_equal(custom->op, TPF_OP_UNKNOWN);
	assert_string_equal(custom->domain, "com.example");
	assert_string_equal(custom->op_type, "Frobnicate");
	assert_null(custom->inputs[1]); /* omitted optional input */
	assert_int_equal(custom->n_outputs, 2);
	assert_int_equal(custom->outputs[1]->producer_index, 1);

	/* Graph outputs count as uses. */
	assert_int_equal(tpf_graph_add_output(g, custom->outputs[0]), TPF_OK);
	assert_true(tpf_value_is_graph_output(custom->outputs[0]));
	assert_false(tpf_value_is_graph_output(custom->outputs[1]));
	assert_int_equal(tpf_value_use_count(custom->outputs[0]), 1);
	assert_int_equal(g->n_nodes, 3);
	check_list(g);

	/* set_input moves a use. */
	assert_int_equal(tpf_node_set_input(add, 1, x), TPF_OK);
	assert_ptr_equal(add->inputs[1], x);
	assert_int_equal(y->n_uses, 0);
	assert_int_equal(x->n_uses, 3); /* add#0, add#1, fro#2 */
	assert_true(has_use(x, add, 1));
	assert_int_equal(tpf_node_set_input(add, 5, x), TPF_ERR_INVALID);

	/* append_input adds a use at the next index. */
	assert_int_equal(tpf_node_append_input(custom, y), TPF_OK);
	assert_int_equal(custom->n_inputs, 4);
	assert_true(has_use(y, custom, 3));

	char buf[128];
	const char *desc = tpf_node_describe(add, buf, sizeof(buf));
	assert_non_null(strstr(desc, "add0"));
	assert_non_null(strstr(desc, "Add"));
	desc = tpf_node_describe(custom, buf, sizeof(buf));
	assert_non_null(strstr(desc, "Frobnicate"));
	tpf_model_free(m);
}

static void test_replace_and_erase(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[1] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	/* x -> Identity -> a -> Relu -> b (output), a -> Neg -> c (output) */
	struct tpf_node *id = tpf_graph_add_node(g, "", "Identity", "id",
						 (struct tpf_value *[]){x}, 1, 1,
						 (const char *[]){"a"});
	struct tpf_value *a = id->outputs[0];
	struct tpf_node *relu = tpf_graph_add_node(g, "", "Relu", "relu",
						   (struct tpf_value *[]){a}, 1, 1,
						   (const char *[]){"b"});
	struct tpf_node *neg = tpf_graph_add_node(g, "", "Neg", "neg",
						  (struct tpf_value *[]){a}, 1, 1,
						  (const char *[]){"c"});
	assert_int_equal(tpf_graph_add_output(g, relu->outputs[0]), TPF_OK);
	assert_int_equal(tpf_graph_add_output(g, a), TPF_OK);
	assert_int_equal(tpf_value_use_count(a), 3);

	/* A node whose outputs are still used cannot be erased. */
	struct tpf_diag *d = tpf_diag_create();
	assert_int_equal(tpf_graph_erase_node(g, id), TPF_ERR_INVALID);
	assert_int_equal(g->n_nodes, 3);

	/* Bypass the Identity. */
	assert_int_equal(tpf_value_replace_uses(a, x), TPF_OK);
	assert_int_equal(a->n_uses, 0);
	assert_int_equal(tpf_value_use_count(a), 0);
	assert_false(tpf_value_is_graph_output(a));
	assert_ptr_equal(relu->inputs[0], x);
	assert_ptr_equal(neg->inputs[0], x);
	assert_ptr_equal(g->outputs[1], x);
	assert_true(has_use(x, relu, 0));
	assert_true(has_use(x, neg, 0));
	assert_int_equal(tpf_value_use_count(x), 4); /* id, relu, neg, output slot */

	assert_int_equal(tpf_graph_erase_node(g, id), TPF_OK);
	assert_int_equal(g->n_nodes, 2);
	assert_false(node_in_list(g, id));
	assert_false(has_use(x, id, 0));
	assert_null(tpf_graph_find_value(g, "a"));
	check_list(g);

	/* Erase the unused Neg: its output is gone, x loses the use. */
	assert_int_equal(tpf_graph_erase_node(g, neg), TPF_OK);
	assert_int_equal(g->n_nodes, 1);
	assert_ptr_equal(g->first, relu);
	assert_ptr_equal(g->last, relu);
	assert_int_equal(x->n_uses, 1);
	check_list(g);
	assert_int_equal(tpf_graph_verify(g, d), TPF_OK);
	tpf_diag_free(d);
	tpf_model_free(m);
}

/* A Constant given as value_float / value_ints: tpf_value_constant makes
 * its tensor once (the same pointer, the arena not growing, however often
 * plans and inference ask) and anew when the attribute changes. */
static void test_attribute_constants(void **state)
{
	(void)state;
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_node *kf = tpf_graph_add_node(g, "", "Constant", "kf", NULL, 0, 1, NULL);
	struct tpf_node *ki = tpf_graph_add_node(g, "", "Constant", "ki", NULL, 0, 1, NULL);
	assert_non_null(kf);
	assert_non_null(ki);
	assert_int_equal(tpf_node_set_attr_float(kf, "value_float", 2.5f), TPF_OK);
	const int64_t ints[3] = {4, -1, 7};
	assert_int_equal(tpf_node_set_attr_ints(ki, "value_ints", ints, 3), TPF_OK);

	const struct tpf_tensor *f1 = tpf_value_constant(kf->outputs[0]);
	const struct tpf_tensor *i1 = tpf_value_constant(ki->outputs[0]);
	assert_non_null(f1);
	assert_non_null(i1);
	assert_int_equal(f1->dtype, TPF_DTYPE_FLOAT);
	assert_int_equal(f1->rank, 0);
	assert_true(*(const float *)f1->data == 2.5f);
	assert_int_equal(i1->dtype, TPF_DTYPE_INT64);
	assert_int_equal(i1->rank, 1);
	assert_int_equal(i1->dims[0], 3);
	assert_memory_equal(i1->data, ints, sizeof(ints));
	const size_t bytes = tpf_arena_bytes(g->arena);
	for (int k = 0; k < 100; k++) {
		assert_ptr_equal(tpf_value_constant(kf->outputs[0]), f1);
		assert_ptr_equal(tpf_value_constant(ki->outputs[0]), i1);
	}
	assert_int_equal(tpf_arena_bytes(g->arena), bytes);

	/* a changed attribute: a new tensor with the new value */
	assert_int_equal(tpf_node_set_attr_float(kf, "value_float", -1.0f), TPF_OK);
	const struct tpf_tensor *f2 = tpf_value_constant(kf->outputs[0]);
	assert_non_null(f2);
	assert_true(*(const float *)f2->data == -1.0f);
	assert_ptr_equal(tpf_value_constant(kf->outputs[0]), f2);
	const int64_t ints2[2] = {1, 2};
	assert_int_equal(tpf_node_set_attr_ints(ki, "value_ints", ints2, 2), TPF_OK);
	const struct tpf_tensor *i2 = tpf_value_constant(ki->outputs[0]);
	assert_non_null(i2);
	assert_int_equal(i2->dims[0], 2);
	assert_memory_equal(i2->data, ints2, sizeof(ints2));
	tpf_model_free(m);
}

static void test_attributes(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[1] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	struct tpf_node *n = tpf_graph_add_node(g, "com.example", "Op", "n",
						(struct tpf_value *[]){x}, 1, 1, NULL);

	assert_null(tpf_node_attr(n, "axis"));
	assert_int_equal(tpf_node_attr_int(n, "axis", -1), -1);
	assert_true(tpf_node_attr_float(n, "eps", 0.5f) == 0.5f);
	assert_string_equal(tpf_node_attr_string(n, "mode", "dflt"), "dflt");

	assert_int_equal(tpf_node_set_attr_int(n, "axis", 2), TPF_OK);
	assert_int_equal(tpf_node_set_attr_float(n, "eps", 1e-6f), TPF_OK);
	char mode[] = "linear";
	assert_int_equal(tpf_node_set_attr_string(n, "mode", mode), TPF_OK);
	mode[0] = 'X'; /* copied */
	int64_t perm[3] = {2, 0, 1};
	assert_int_equal(tpf_node_set_attr_ints(n, "perm", perm, 3), TPF_OK);
	perm[0] = 9;
	const float scales[2] = {0.5f, 2.0f};
	assert_int_equal(tpf_node_set_attr_floats(n, "scales", scales, 2), TPF_OK);
	const int64_t td[1] = {2};
	const int32_t tv[2] = {7, 8};
	struct tpf_tensor *t = tpf_tensor_create(g->arena, "", TPF_DTYPE_INT32, 1, td, tv, 8);
	assert_int_equal(tpf_node_set_attr_tensor(n, "value", t), TPF_OK);
	assert_int_equal(n->n_attrs, 6);

	assert_int_equal(tpf_node_attr_int(n, "axis", -1), 2);
	assert_int_equal(tpf_node_attr(n, "axis")->kind, TPF_ATTR_INT);
	assert_true(tpf_node_attr_float(n, "eps", 0) == 1e-6f);
	assert_int_equal(tpf_node_attr(n, "eps")->kind, TPF_ATTR_FLOAT);
	assert_string_equal(tpf_node_attr_string(n, "mode", NULL), "linear");
	assert_int_equal(tpf_node_attr(n, "mode")->kind, TPF_ATTR_STRING);
	const struct tpf_attr *p = tpf_node_attr(n, "perm");
	assert_int_equal(p->kind, TPF_ATTR_INTS);
	assert_int_equal(p->n, 3);
	assert_int_equal(p->ints[0], 2);
	assert_int_equal(p->ints[2], 1);
	const struct tpf_attr *sc = tpf_node_attr(n, "scales");
	assert_int_equal(sc->kind, TPF_ATTR_FLOATS);
	assert_int_equal(sc->n, 2);
	assert_true(sc->floats[1] == 2.0f);
	const struct tpf_attr *tv_attr = tpf_node_attr(n, "value");
	assert_int_equal(tv_attr->kind, TPF_ATTR_TENSOR);
	assert_int_equal(tv_attr->t->dtype, TPF_DTYPE_INT32);
	assert_memory_equal(tv_attr->t->data, tv, 8);
	/* Reading with the wrong kind gives the default. */
	assert_int_equal(tpf_node_attr_int(n, "mode", 77), 77);

	/* Replacing keeps one attribute of the name. */
	assert_int_equal(tpf_node_set_attr_int(n, "axis", -1), TPF_OK);
	assert_int_equal(n->n_attrs, 6);
	assert_int_equal(tpf_node_attr_int(n, "axis", 0), -1);
	assert_int_equal(tpf_node_set_attr_float(n, "axis", 3.0f), TPF_OK);
	assert_int_equal(n->n_attrs, 6);
	assert_int_equal(tpf_node_attr(n, "axis")->kind, TPF_ATTR_FLOAT);

	/* A fully built attribute: a list of strings. */
	const char **strs = tpf_arena_alloc(g->arena, 2 * sizeof(*strs));
	size_t *lens = tpf_arena_alloc(g->arena, 2 * sizeof(*lens));
	strs[0] = tpf_arena_strdup(g->arena, "a");
	strs[1] = tpf_arena_strdup(g->arena, "bc");
	lens[0] = 1;
	lens[1] = 2;
	struct tpf_attr sa = {.name = "names", .kind = TPF_ATTR_STRINGS, .n = 2,
			      .strings = strs, .string_lens = lens};
	assert_int_equal(tpf_node_add_attr(n, &sa), TPF_OK);
	assert_int_equal(n->n_attrs, 7);
	assert_string_equal(tpf_node_attr(n, "names")->strings[1], "bc");

	assert_int_equal(tpf_node_remove_attr(n, "perm"), TPF_OK);
	assert_null(tpf_node_attr(n, "perm"));
	assert_int_equal(n->n_attrs, 6);
	assert_int_not_equal(tpf_node_remove_attr(n, "perm"), TPF_OK);
	assert_int_equal(tpf_node_attr_int(n, "axis", 5), 5); /* now FLOAT */
	tpf_model_free(m);
}

static void test_names(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[1] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	assert_non_null(tpf_graph_add_input(g, "x_1", TPF_DTYPE_FLOAT, 1, dims));

	const char *u = tpf_graph_unique_name(g, "x");
	assert_non_null(u);
	assert_string_not_equal(u, "x");
	assert_string_not_equal(u, "x_1");
	assert_int_equal(strncmp(u, "x", 1), 0);
	assert_null(tpf_graph_find_value(g, u));
	const char *fresh = tpf_graph_unique_name(g, "fresh");
	assert_string_equal(fresh, "fresh");

	/* NULL names: fresh, distinct, findable. */
	struct tpf_value *v[20];
	for (int i = 0; i < 20; i++) {
		v[i] = tpf_graph_new_value(g, NULL);
		assert_non_null(v[i]);
		assert_ptr_equal(tpf_graph_find_value(g, v[i]->name), v[i]);
		for (int j = 0; j < i; j++)
			assert_string_not_equal(v[i]->name, v[j]->name);
	}
	/* A fresh name never collides with a user name that looks generated. */
	struct tpf_value *t0 = tpf_graph_add_input(g, "_t1000", TPF_DTYPE_FLOAT, 1, dims);
	assert_non_null(t0);
	for (int i = 0; i < 2000; i++) {
		struct tpf_value *w = tpf_graph_new_value(g, NULL);
		assert_non_null(w);
		assert_ptr_equal(tpf_graph_find_value(g, w->name), w);
	}
	assert_ptr_equal(tpf_graph_find_value(g, "_t1000"), t0);

	/* Rename. */
	assert_int_equal(tpf_value_rename(x, "input"), TPF_OK);
	assert_string_equal(x->name, "input");
	assert_ptr_equal(tpf_graph_find_value(g, "input"), x);
	assert_null(tpf_graph_find_value(g, "x"));
	assert_int_not_equal(tpf_value_rename(x, "x_1"), TPF_OK); /* taken */
	assert_ptr_equal(tpf_graph_find_value(g, "input"), x);
	tpf_model_free(m);
}

static void test_insert_move_toposort(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_diag *d = tpf_diag_create();
	const int64_t dims[1] = {4};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	struct tpf_node *a = tpf_graph_add_node(g, "", "Relu", "a", (struct tpf_value *[]){x}, 1,
						1, NULL);
	struct tpf_node *c = tpf_graph_add_node(g, "", "Neg", "c", (struct tpf_value *[]){x}, 1, 1,
						NULL);
	/* b inserted before c, uses a. */
	struct tpf_node *b = tpf_graph_insert_node(g, c, "", "Sigmoid", "b",
						   (struct tpf_value *[]){a->outputs[0]}, 1, 1,
						   NULL);
	assert_non_null(b);
	char order[16];
	node_order(g, order, sizeof(order));
	assert_string_equal(order, "abc");
	check_list(g);

	/* d uses b and c, at the end. */
	struct tpf_node *dd = tpf_graph_add_node(g, "", "Add", "d",
						 (struct tpf_value *[]){b->outputs[0], c->outputs[0]},
						 2, 1, NULL);
	assert_int_equal(tpf_graph_add_output(g, dd->outputs[0]), TPF_OK);

	/* Already sorted: unchanged. */
	assert_int_equal(tpf_graph_toposort(g, d), TPF_OK);
	node_order(g, order, sizeof(order));
	assert_string_equal(order, "abcd");

	/* Move d to the front: out of order; toposort restores a valid order. */
	tpf_graph_move_node_before(g, dd, a);
	node_order(g, order, sizeof(order));
	assert_string_equal(order, "dabc");
	check_list(g);
	assert_int_equal(tpf_graph_toposort(g, d), TPF_OK);
	node_order(g, order, sizeof(order));
	assert_string_equal(order, "abcd"); /* stable: a, b, c keep their order */
	check_list(g);
	assert_int_equal(tpf_graph_verify(g, d), TPF_OK);

	/* A cycle: a now reads d's output. */
	assert_int_equal(tpf_node_set_input(a, 0, dd->outputs[0]), TPF_OK);
	tpf_diag_clear(d);
	assert_int_equal(tpf_graph_toposort(g, d), TPF_ERR_VERIFY);
	assert_true(d->error_count >= 1);
	assert_true(diag_mentions(d, "'a'") || diag_mentions(d, "'b'") ||
		    diag_mentions(d, "'d'"));
	assert_int_equal(g->n_nodes, 4);
	check_list(g);
	tpf_diag_free(d);
	tpf_model_free(m);
}

static void test_subgraph(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	const int64_t dims[1] = {4};
	const int64_t scalar_dims[1] = {1};
	struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
	struct tpf_value *cond = tpf_graph_add_input(g, "cond", TPF_DTYPE_BOOL, 1, scalar_dims);

	struct tpf_graph *then_g = tpf_graph_create(g);
	assert_non_null(then_g);
	assert_ptr_equal(then_g->parent, g);
	/* Outer names resolve through enclosing graphs, not by plain lookup. */
	assert_ptr_equal(tpf_graph_resolve(then_g, "x"), x);
	assert_null(tpf_graph_find_value(then_g, "x"));
	const int64_t cd[1] = {4};
	const float k[4] = {1, 1, 1, 1};
	struct tpf_value *kv =
		tpf_graph_add_initializer(then_g, "k", TPF_DTYPE_FLOAT, 1, cd, k, sizeof(k));
	struct tpf_node *inner = tpf_graph_add_node(then_g, "", "Identity", "inner",
						    (struct tpf_value *[]){kv}, 1, 1,
						    (const char *[]){"then_out"});
	assert_int_equal(tpf_graph_add_output(then_g, inner->outputs[0]), TPF_OK);
	struct tpf_node *inner2 = tpf_graph_add_node(then_g, "", "Neg", "inner2",
						     (struct tpf_value *[]){kv}, 1, 1, NULL);
	assert_non_null(inner2);

	struct tpf_node *ifn = tpf_graph_add_node(g, "", "If", "if0",
						  (struct tpf_value *[]){cond}, 1, 1,
						  (const char *[]){"y"});
	struct tpf_attr ga = {.name = "then_branch", .kind = TPF_ATTR_GRAPH, .g = then_g};
	assert_int_equal(tpf_node_add_attr(ifn, &ga), TPF_OK);
	then_g->owner = ifn;
	assert_ptr_equal(tpf_node_attr(ifn, "then_branch")->g, then_g);
	assert_int_equal(tpf_graph_count_nodes(g, 0), 1);
	assert_int_equal(tpf_graph_count_nodes(g, 1), 3);
	tpf_model_free(m); /* frees the subgraph held by the attribute */
}

static void test_value_types(void **state)
{
	struct tpf_model *m = tpf_model_create();
	struct tpf_graph *g = m->graph;
	struct tpf_value *v = tpf_graph_new_value(g, "v");
	assert_non_null(v);
	assert_null(v->producer);
	const int64_t dims[3] = {1, 2, 3};
	tpf_value_set_type(v, TPF_DTYPE_FLOAT16, 3, dims);
	assert_int_equal(v->type.kind, TPF_TYPE_TENSOR);
	assert_int_equal(v->type.dtype, TPF_DTYPE_FLOAT16);
	assert_int_equal(v->type.shape.rank, 3);
	assert_int_equal(tpf_shape_numel(&v->type.shape), 6);

	struct tpf_value *w = tpf_graph_new_value(g, "w");
	struct tpf_dim sd[2] = {{-1, "seq", NULL}, {64, NULL, NULL}};
	struct tpf_type src = {.kind = TPF_TYPE_TENSOR, .dtype = TPF_DTYPE_BFLOAT16,
			       .shape = {2, sd}};
	assert_int_equal(tpf_value_copy_type(w, &src), TPF_OK);
	sd[0].param = "changed";
	assert_string_equal(w->type.shape.dims[0].param, "seq");
	assert_int_equal(w->type.shape.dims[1].value, 64);
	assert_ptr_not_equal(w->type.shape.dims, sd);
	tpf_model_free(m);
}

/* Every allocation of a small build may fail: the builder reports it and
 * the model can still be freed. */
static void test_builder_under_allocation_failure(void **state)
{
	int completed = 0;
	for (uint64_t n = 1; n < 400 && !completed; n++) {
		tpf_alloc_fail_after(n);
		struct tpf_model *m = tpf_model_create();
		if (!m)
			goto next;
		struct tpf_graph *g = m->graph;
		const int64_t dims[1] = {4};
		const float w[4] = {1, 2, 3, 4};
		struct tpf_value *x = tpf_graph_add_input(g, "x", TPF_DTYPE_FLOAT, 1, dims);
		if (!x)
			goto free_model;
		struct tpf_value *wv =
			tpf_graph_add_initializer(g, "w", TPF_DTYPE_FLOAT, 1, dims, w, sizeof(w));
		if (!wv)
			goto free_model;
		struct tpf_node *a = tpf_graph_add_node(g, "", "Add", "a",
							(struct tpf_value *[]){x, wv}, 2, 1, NULL);
		if (!a)
			goto free_model;
		if (tpf_node_set_attr_int(a, "k", 1) != TPF_OK)
			goto free_model;
		if (tpf_graph_add_output(g, a->outputs[0]) != TPF_OK)
			goto free_model;
		if (tpf_model_set_metadata(m, "tp_rank", "0") != TPF_OK)
			goto free_model;
		completed = 1;
free_model:
		tpf_model_free(m);
next:
		tpf_alloc_fail_after(0);
	}
	assert_true(completed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_names),
		cmocka_unit_test(test_diag),
		cmocka_unit_test(test_checked_arithmetic),
		cmocka_unit_test(test_alloc_fault_injection),
		cmocka_unit_test(test_arena),
		cmocka_unit_test(test_dtype_table),
		cmocka_unit_test(test_dtype_storage),
		cmocka_unit_test(test_op_table),
		cmocka_unit_test(test_shape_numel),
		cmocka_unit_test(test_tensor_create),
		cmocka_unit_test(test_model_basics),
		cmocka_unit_test(test_inputs_and_initializers),
		cmocka_unit_test(test_nodes_and_uses),
		cmocka_unit_test(test_replace_and_erase),
		cmocka_unit_test(test_attributes),
		cmocka_unit_test(test_attribute_constants),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_insert_move_toposort),
		cmocka_unit_test(test_subgraph),
		cmocka_unit_test(test_value_types),
		cmocka_unit_test(test_builder_under_allocation_failure),
	};
	return cmocka_run_group_tests_name("ir", tests, NULL, NULL);
}
