/* SPDX-License-Identifier: MIT */
/* `tpfuse run` and `tpfuse plan` (cli/run-command.c): argv[0] is the
 * command name.  Each returns the process exit code: 0 ok, 1 error (on every
 * rank when one rank fails), 2 usage, 3 I/O, 4 unsupported, 5 --verify found
 * a mismatch.  They print their results, messages and help themselves. */
#ifndef TPF_CLI_RUN_COMMAND_H
#define TPF_CLI_RUN_COMMAND_H

int tpf_cli_run(int argc, char **argv);
int tpf_cli_plan(int argc, char **argv);

#include "tpf-runtime.h"

/* The communicator of a run: MPI_COMM_WORLD under an MPI launcher (NCCL,
 * or CUDA-aware MPI when `name` is "mpi", for the CUDA backend), else a
 * self communicator; an alarm of `timeout` seconds (<= 0: 60) bounds the
 * wait for the ranks to join, and its message names `command` (a string
 * that lives as long as the process, "run" or "generate"). */
enum tpf_status tpf_cli_open_comm(const char *command, enum tpf_backend backend, const char *name,
				  double timeout, struct tpf_comm **comm, struct tpf_diag *d);
/* `pattern` with every {rank} replaced by rank: a tpf_malloc'ed string. */
char *tpf_cli_rank_path(const char *pattern, int rank);

#endif /* TPF_CLI_RUN_COMMAND_H */
