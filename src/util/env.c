#include "util/env.h"

#include <stdlib.h>

bool lilac_env_switch(const char *name, bool dflt)
{
    const char *e = getenv(name);
    return dflt ? !(e && *e == '0') : (e && *e == '1');
}
