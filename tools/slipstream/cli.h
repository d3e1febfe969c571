/* Subcommands of the `slipstream` CLI. Each returns the process exit status. */
#ifndef SLIP_TOOLS_CLI_H
#define SLIP_TOOLS_CLI_H

int cmd_doctor(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_config(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_guard(int argc, char **argv);

#endif
