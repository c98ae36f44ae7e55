/* SPDX-License-Identifier: MIT */
/*
 * fuzz-model: ONNX bytes as a user's model file would bring them.
 *
 *   load from memory (no base folder: external data must be refused, never
 *   opened) -> fuzz_exercise() (tests/fuzz/fuzz-common.h)
 *
 * Built as a libFuzzer target and, with tests/fuzz/replay.c, as a plain
 * program that replays saved inputs in the normal test suite.
 */
#include <stdint.h>
#include <stdio.h>

#include "fuzz-common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_model *m = NULL;

	if (!d)
		return 0;
	d->max_entries = 64;
	if (tpf_model_load_memory(data, size, NULL, NULL, &m, d) == TPF_OK)
		fuzz_exercise(m);
	tpf_diag_free(d);
	return 0;
}
