/* SPDX-License-Identifier: MIT */
/* `tpfuse run` and `tpfuse plan` (cli/run-command.c): argv[0] is the
 * command name.  Each returns the process exit code: 0 ok, 1 error (on every
 * rank when one rank fails), 2 usage, 3 I/O, 4 unsupported, 5 --verify found
 * a mismatch.  They print their results, messages and help themselves. */
#ifndef TPF_CLI_RUN_COMMAND_H
#define TPF_CLI_RUN_COMMAND_H

int tpf_cli_run(int argc, char **argv);
int tpf_cli_plan(int argc, char **argv);

#endif /* TPF_CLI_RUN_COMMAND_H */
