/* SPDX-License-Identifier: MIT */
/*
 * TPF_PDL, the kinds of GPU kernel launched as programmatic dependents
 * (kernels/host.c: tpf_pdl_kinds_parse; docs/gpu.md): the default set when
 * unset, empty, "1" or a list that names no kind; none for "0"; every kind
 * for "all" and "2"; a list's names with blanks around them, repeated or
 * empty entries, unknown names ignored.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel-host.h"

#define K(k) (1u << TPF_PDL_##k)

static void test_levels(void **state)
{
	(void)state;
	const unsigned every = K(GEMV) | K(COPY) | K(GATED) | K(ATTENTION) | K(COMBINE);
	assert_int_equal(TPF_PDL_DEFAULT, K(GEMV) | K(COPY) | K(GATED));
	assert_int_equal(tpf_pdl_kinds_parse(NULL), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse(""), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("1"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("0"), 0);
	assert_int_equal(tpf_pdl_kinds_parse("all"), every);
	assert_int_equal(tpf_pdl_kinds_parse("2"), every);
}

static void test_lists(void **state)
{
	(void)state;
	assert_int_equal(tpf_pdl_kinds_parse("gemv"), K(GEMV));
	assert_int_equal(tpf_pdl_kinds_parse("attention"), K(ATTENTION));
	assert_int_equal(tpf_pdl_kinds_parse("combine,"), K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse("gemv,copy,gated,combine"), K(GEMV) | K(COPY) | K(GATED) | K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse(" gemv , copy ,\tcombine "), K(GEMV) | K(COPY) | K(COMBINE));
	assert_int_equal(tpf_pdl_kinds_parse("gemv,,gated,gemv"), K(GEMV) | K(GATED));
	/* a name counts only whole: no prefix, no suffix, no case folding */
	assert_int_equal(tpf_pdl_kinds_parse("gem,copyx,GATED,attention"), K(ATTENTION));
	/* nothing named: the default */
	assert_int_equal(tpf_pdl_kinds_parse("bogus"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse(" , ,"), TPF_PDL_DEFAULT);
	assert_int_equal(tpf_pdl_kinds_parse("none"), TPF_PDL_DEFAULT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_lists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
