/* SPDX-License-Identifier: MIT */
/* `tpfuse generate` (cli/generate-command.c): argv[0] is the command name.
 * Returns the process exit code: 0 ok, 1 error (on every rank when one
 * rank fails), 2 usage, 3 I/O, 4 unsupported.  It prints its results,
 * messages and help itself. */
#ifndef TPF_CLI_GENERATE_COMMAND_H
#define TPF_CLI_GENERATE_COMMAND_H

int tpf_cli_generate(int argc, char **argv);

#endif /* TPF_CLI_GENERATE_COMMAND_H */
