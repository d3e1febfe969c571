#include "tools/slipstream/cli.h"
#include <stdio.h>
int cmd_bench(int argc, char **argv) { fprintf(stderr, "bench: not built yet\n"); return 1; }
