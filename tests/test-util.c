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

void verify_ok(const struct tpf_model *m)
{
	struct tpf_diag *d = tpf_diag_create();
	enum tpf_status st = tpf_model_verify(m, d);

	if (st)
		tpf_diag_print(d, stderr);
	assert_int_equal(st, TPF_OK);
	tpf_diag_free(d);
}
