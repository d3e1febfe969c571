#include "tools/slipstream/cli.h"
#include <stdio.h>
int cmd_doctor(int argc, char **argv) { fprintf(stderr, "doctor: not built yet\n"); return 1; }
