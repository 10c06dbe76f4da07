/* pyjson: JSON text as Python's json.dumps(v, ensure_ascii=False) writes
 * it — separators ", " and ": ", keys in their order, floats as repr()
 * writes them (the shortest digits that read back) — which is what chat
 * templates' tojson and tool-call arguments look like to the model. */
#ifndef LILAC_UTIL_PYJSON_H
#define LILAC_UTIL_PYJSON_H

#include <jansson.h>

#include "lilac.h"
#include "util/sbuf.h"

#define PY_JSON_MAX_DEPTH 4096

/* repr(float) of v into out. */
void py_float(double v, char *out, size_t cap);
/* A JSON string of s[0..n). */
void py_json_str(sbuf *b, const char *s, size_t n);
/* v; LILAC_E_ARG when nested deeper than PY_JSON_MAX_DEPTH. */
lilac_status py_json(sbuf *b, const json_t *v, int depth, lilac_error *err);

#endif
