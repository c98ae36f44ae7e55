/* SPDX-License-Identifier: MIT */
/* A stand-alone driver of `tpfuse run` / `tpfuse plan` for the multi-rank
 * and conformance tests: tpf-run run|plan ARGS... */
#include <stdio.h>
#include <string.h>

#include "run-command.h"

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "run"))
		return tpf_cli_run(argc - 1, argv + 1);
	if (argc >= 2 && !strcmp(argv[1], "plan"))
		return tpf_cli_plan(argc - 1, argv + 1);
	fprintf(stderr, "usage: tpf-run run|plan ARGS...\n");
	return 2;
}
