/* test_env: the LILAC_* settings' readers (util/env): switches on and off by
 * default, comma lists, integers within a range. */
#include <stdlib.h>

#include "testutil.h"
#include "util/env.h"

#define VAR "LILAC_TEST_ENV_SETTING"

static int int_of(const char *value, int dflt, int lo, int hi)
{
    if (value)
        setenv(VAR, value, 1);
    else
        unsetenv(VAR);
    return lilac_env_int(VAR, dflt, lo, hi);
}

int main(void)
{
    unsetenv(VAR);
    CHECK(lilac_env_switch(VAR, true) && !lilac_env_switch(VAR, false));
    setenv(VAR, "0", 1);
    CHECK(!lilac_env_switch(VAR, true) && !lilac_env_switch(VAR, false));
    setenv(VAR, "1", 1);
    CHECK(lilac_env_switch(VAR, true) && lilac_env_switch(VAR, false));

    CHECK(lilac_env_list_has("a,bc,d", "bc") && lilac_env_list_has("a,bc,d", "d") && lilac_env_list_has("a", "a"));
    CHECK(!lilac_env_list_has("a,bc,d", "b") && !lilac_env_list_has("abc", "a") && !lilac_env_list_has(NULL, "a") &&
          !lilac_env_list_has("", "a"));

    CHECK(int_of(NULL, 64, 1, 4096) == 64);
    CHECK(int_of("", 64, 1, 4096) == 64);
    CHECK(int_of("16", 64, 1, 4096) == 16);
    CHECK(int_of("4096", 64, 1, 4096) == 4096);
    CHECK(int_of("4097", 64, 1, 4096) == 64); /* out of range: the default */
    CHECK(int_of("0", 64, 1, 4096) == 64);
    CHECK(int_of("-3", 64, -5, 5) == -3);
    CHECK(int_of("16x", 64, 1, 4096) == 64); /* not wholly a number */
    CHECK(int_of("x", 64, 1, 4096) == 64);
    CHECK(int_of("99999999999999999999", 64, 1, 4096) == 64); /* overflows long */
    unsetenv(VAR);
    TEST_END();
}
