/* server_none: `lilac serve` where lilac was built without libmicrohttpd. */
#include "lilac.h"
#include "util/err.h"

lilac_status lilac_serve(const lilac_serve_params *p, lilac_error *err)
{
    (void)p;
    return lilac_fail(err, LILAC_E_UNSUPPORTED,
                      "lilac was built without libmicrohttpd (apt-get install libmicrohttpd-dev, then rebuild)");
}
