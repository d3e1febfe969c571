/* libFuzzer target for the SLIP_* value parser (base/env.h). Input: one byte choosing the
 * variable, then the value text. A value the parser takes must be inside the variable's range
 * (and its choices); one it refuses must give one line that names the variable. */
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512], err[256];
    uint64_t v = 0;
    if (size < 1 || size > sizeof(text))
        return 0;
    enum slip_env_id id = (enum slip_env_id)(data[0] % SLIP_ENV_COUNT);
    const struct slip_env_var *var = &slip_env_vars[id];
    memcpy(text, data + 1, size - 1);
    text[size - 1] = 0;
    err[0] = 0;
    if (slip_env__parse(id, text, &v, err, sizeof(err)) < 0) {
        if (strncmp(err, var->name, strlen(var->name)) || strchr(err, '\n') || !strstr(err, " is not valid: want "))
            abort();
        return 0;
    }
    switch (var->kind) {
    case SLIP_ENV_BOOL:
        if (v > 1)
            abort();
        break;
    case SLIP_ENV_INT:
    case SLIP_ENV_DURATION:
    case SLIP_ENV_LIST:
        if (v < var->min || v > var->max)
            abort();
        break;
    case SLIP_ENV_ENUM: {
        unsigned n = 1;
        for (const char *p = var->choices; *p; p++)
            n += *p == ',';
        if (v >= n)
            abort();
        break;
    }
    case SLIP_ENV_TEXT:
        break;
    }
    return 0;
}
