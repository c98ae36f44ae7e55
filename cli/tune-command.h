/* SPDX-License-Identifier: MIT */
/* `tpfuse tune` (cli/tune-command.c): argv[0] is the command name.
 * Returns the exit code: 0 ok, 1 error (every rank), 2 usage, 4 built
 * without CUDA and NCCL. */
#ifndef TPF_CLI_TUNE_COMMAND_H
#define TPF_CLI_TUNE_COMMAND_H

int tpf_cli_tune(int argc, char **argv);

#endif /* TPF_CLI_TUNE_COMMAND_H */
