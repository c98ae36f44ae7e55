/* SPDX-License-Identifier: MIT */
/* Helpers shared by the cmocka tests (test-util.h). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "test-util.h"

struct tpf_model *new_model(int64_t opset)
{
	struct tpf_model *m = tpf_model_create();

	assert_non_null(m);
	assert_int_equal(tpf_model_set_opset(m, "", opset), TPF_OK);
	assert_int_equal(tpf_model_set_opset(m, TPF_MS_DOMAIN, 1), TPF_OK);
	return m;
}

struct tpf_model *parse_model(const char *text)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;
	enum tpf_status st;

	assert_non_null(d);
	st = tpf_model_parse_text(text, strlen(text), "test", &m, d);
	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	tpf_diag_free(d);
	return m;
}

size_t count_op(const struct tpf_graph *g, enum tpf_op op)
{
	size_t k = 0;

	for (const struct tpf_node *n = g->first; n; n = n->next)
		k += n->op == op;
	return k;
}

size_t count_op_type(const struct tpf_graph *g, const char *op_type)
{
	size_t k = 0;

	for (const struct tpf_node *n = g->first; n; n = n->next)
		k += strcmp(n->op_type, op_type) == 0;
	return k;
}

struct tpf_node *find_op(const struct tpf_graph *g, enum tpf_op op)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (n->op == op)
			return n;
	return NULL;
}

struct tpf_node *find_op_type(const struct tpf_graph *g, const char *op_type)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (strcmp(n->op_type, op_type) == 0)
			return n;
	return NULL;
}

struct tpf_node *find_node(const struct tpf_graph *g, const char *name)
{
	for (struct tpf_node *n = g->first; n; n = n->next)
		if (strcmp(n->name, name) == 0)
			return n;
	return NULL;
}

char *dump_text(const struct tpf_model *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	assert_int_equal(tpf_model_print_text(m, f), TPF_OK);
	fclose(f);
	return buf;
}

/* st must be TPF_OK; d, printed when it is not, is freed. */
static void status_ok(enum tpf_status st, struct tpf_diag *d)
{
	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	tpf_diag_free(d);
}

void verify_ok(const struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();

	status_ok(tpf_model_verify(m, d), d);
}

void infer_ok(struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();

	status_ok(tpf_model_infer_shapes(m, d), d);
}

struct tpf_node *add_node(struct tpf_graph *g, const char *domain, const char *op,
                          const char *name, size_t n_in, struct tpf_value *const *in,
                          size_t n_out)
{
	struct tpf_node *n = tpf_graph_add_node(g, domain, op, name, in, n_in, n_out, NULL);

	assert_non_null(n);
	return n;
}

struct tpf_value *add_input(struct tpf_graph *g, const char *name, enum tpf_dtype dt, int rank,
                            const char *const *dims)
{
	struct tpf_value *v = tpf_graph_add_input_sym(g, name, dt, rank, dims);

	assert_non_null(v);
	return v;
}

struct tpf_value *add_ints(struct tpf_graph *g, const char *name, size_t count,
                           const int64_t *vals)
{
	int64_t dim = (int64_t)count;
	struct tpf_value *v =
	    tpf_graph_add_initializer(g, name, TPF_DTYPE_INT64, 1, &dim, vals, count * 8);

	assert_non_null(v);
	return v;
}

const char *type_str(const struct tpf_value *v, char *buf, size_t size)
{
	const struct tpf_type *t = &v->type;
	size_t len;

	if (t->kind != TPF_TYPE_TENSOR) {
		snprintf(buf, size, "none");
		return buf;
	}
	snprintf(buf, size, "%s[", tpf_dtype_name(t->dtype));
	if (t->shape.rank < 0) {
		snprintf(buf + strlen(buf), size - strlen(buf), "?]");
		return buf;
	}
	for (int i = 0; i < t->shape.rank; i++) {
		const struct tpf_dim *d = &t->shape.dims[i];

		len = strlen(buf);
		if (d->param)
			snprintf(buf + len, size - len, "%s%s", i ? "," : "", d->param);
		else if (d->value >= 0)
			snprintf(buf + len, size - len, "%s%lld", i ? "," : "", (long long)d->value);
		else
			snprintf(buf + len, size - len, "%s?", i ? "," : "");
	}
	len = strlen(buf);
	snprintf(buf + len, size - len, "]");
	return buf;
}

void expect_type(const struct tpf_value *v, const char *want)
{
	char buf[256];

	type_str(v, buf, sizeof(buf));
	if (strcmp(buf, want) != 0)
		fail_msg("value '%s' has type %s, expected %s", v->name, buf, want);
}

int diag_mentions(const struct tpf_diag *d, const char *needle)
{
	for (size_t i = 0; i < d->count; i++)
		if (d->entries[i].text && strstr(d->entries[i].text, needle))
			return 1;
	return 0;
}

void expect_mentions(const struct tpf_diag *d, const char *const *needles)
{
	for (size_t i = 0; needles[i]; i++)
		if (!diag_mentions(d, needles[i])) {
			tpf_diag_print(d, stderr);
			fail_msg("no message mentions '%s'", needles[i]);
		}
}

struct tpf_host_tensor host_tensor(const char *name, enum tpf_dtype dt, int rank,
                                   const int64_t *dims, void *data)
{
	struct tpf_host_tensor t = {0};

	t.name = name;
	t.dtype = dt;
	t.rank = rank;
	for (int i = 0; i < rank; i++)
		t.dims[i] = dims[i];
	t.data = data;
	return t;
}

void dump_diag(const struct tpf_diag *d)
{
	for (size_t i = 0; i < d->count; i++)
		print_message("diag: %s\n", d->entries[i].text);
}

struct tpf_graph *kernel_graph;
struct tpf_diag *kernel_diag;

int kernel_setup(void **state)
{
	(void)state;
	kernel_graph = tpf_graph_create(NULL);
	kernel_diag = tpf_diag_create();
	return kernel_graph && kernel_diag ? 0 : -1;
}

int kernel_teardown(void **state)
{
	(void)state;
	tpf_graph_free(kernel_graph);
	tpf_diag_free(kernel_diag);
	kernel_graph = NULL;
	kernel_diag = NULL;
	return 0;
}

struct tpf_ktensor zero_ktensor(enum tpf_dtype dt, int rank, const int64_t *dims)
{
	struct tpf_ktensor t;

	memset(&t, 0, sizeof(t));
	t.dtype = dt;
	t.rank = rank;
	for (int i = 0; i < rank; i++)
		t.dims[i] = dims[i];
	assert_int_equal(tpf_ktensor_finish(&t), 0);
	t.data = calloc(t.nbytes ? t.nbytes : 1, 1);
	assert_non_null(t.data);
	t.host = t.data;
	return t;
}
