/* SPDX-License-Identifier: MIT */
/* `tpfuse shard` (cli/shard-command.c): argv[0] is the command name.
 * Returns the exit code: 0 ok, 1 invalid model, 2 usage, 3 I/O, 4 the
 * model cannot be sharded (an error names the node). */
#ifndef TPF_CLI_SHARD_COMMAND_H
#define TPF_CLI_SHARD_COMMAND_H

int tpf_cli_shard(int argc, char **argv);

#endif /* TPF_CLI_SHARD_COMMAND_H */
