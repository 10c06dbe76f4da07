/* env: the LILAC_* switches that turn a path on or off (for measuring one
 * path against another, or for turning off one that fails). */
#ifndef LILAC_UTIL_ENV_H
#define LILAC_UTIL_ENV_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Switch `name`: on by default, off when set to "0"; or (dflt false) off by
 * default, on when set to "1". Callers read it once and keep the answer. */
bool lilac_env_switch(const char *name, bool dflt);

/* The integer setting `name` where it is one (decimal, nothing after it) within [lo, hi]; dflt otherwise. */
int lilac_env_int(const char *name, int dflt, int lo, int hi);

/* Whether the comma-separated list (a setting such as "a,b,c"; NULL: empty) holds name. */
bool lilac_env_list_has(const char *list, const char *name);

#ifdef __cplusplus
}
#endif

#endif
