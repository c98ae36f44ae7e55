/* SPDX-License-Identifier: MIT */
/*
 * fuzz-tensor: bytes as an ONNX test-data file (one TensorProto, the
 * input_N.pb that `tpfuse run --inputs` reads), through the runtime's reader
 * and, when it is accepted, its writer and the reader again.
 *
 * The reader takes a path, so each input is written to a scratch file first
 * ($TMPDIR, else /tmp; one file per process).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-common.h"
#include "tpf-runtime.h"

static char in_path[512], out_path[512];

static int write_scratch(const uint8_t *data, size_t size)
{
	FILE *f;

	if (!in_path[0]) {
		const char *dir = getenv("TMPDIR");
		if (!dir || !*dir)
			dir = "/tmp";
		snprintf(in_path, sizeof(in_path), "%s/tpf-fuzz-tensor-%ld.pb", dir, (long)getpid());
		snprintf(out_path, sizeof(out_path), "%s/tpf-fuzz-tensor-%ld-out.pb", dir,
			 (long)getpid());
	}
	f = fopen(in_path, "wb");
	if (!f)
		return -1;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return -1;
	}
	return fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tpf_diag *d = tpf_diag_create();
	struct tpf_host_tensor t = {0}, back = {0};
	size_t bytes = 0;

	if (!d)
		return 0;
	if (write_scratch(data, size))
		goto out_free_diag;
	if (tpf_tensor_read_pb(in_path, &t, d) != TPF_OK)
		goto out_remove;
	/* what the reader accepted must be self-consistent and round-trip */
	if (t.rank < 0 || t.rank > TPF_MAX_RANK)
		fuzz_fail("the reader accepted a bad rank", TPF_ERR_INVALID, d);
	if (tpf_host_tensor_bytes(&t, &bytes) == 0 && t.nbytes && bytes != t.nbytes)
		fuzz_fail("the reader's byte count disagrees with the shape", TPF_ERR_INVALID, d);
	if (tpf_tensor_write_pb(out_path, &t, d) == TPF_OK) {
		if (tpf_tensor_read_pb(out_path, &back, d) != TPF_OK)
			fuzz_fail("a tensor the writer wrote does not read back", TPF_ERR_INVALID, d);
		if (back.dtype != t.dtype || back.rank != t.rank || back.nbytes != t.nbytes ||
		    (t.nbytes && memcmp(back.data, t.data, t.nbytes)))
			fuzz_fail("a tensor changed through write and read", TPF_ERR_INVALID, d);
		tpf_host_tensor_release(&back);
	}
	remove(out_path);
	tpf_host_tensor_release(&t);
out_remove:
	remove(in_path);
out_free_diag:
	tpf_diag_free(d);
	return 0;
}
