#include "util/env.h"

#include <stdlib.h>

bool lilac_env_switch(const char *name, bool dflt)
{
    const char *e = getenv(name);
    return dflt ? !(e && *e == '0') : (e && *e == '1');
}

long lilac_env_int(const char *name, long dflt, long lo, long hi)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end;
    const long v = strtol(e, &end, 10);
    return *end || v < lo || v > hi ? dflt : v;
}
