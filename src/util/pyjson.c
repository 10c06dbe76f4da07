/* pyjson: Python's json.dumps, in C (pyjson.h). */
#include "util/pyjson.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

/* Python's repr(float): the shortest digits that read back as v (the
 * nearest such when there are several), positional notation when the
 * decimal exponent is in [-4, 16), else d.ddde+XX. json.dumps writes NaN
 * and infinities as NaN / Infinity (jansson cannot hold them anyway). */
void py_float(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, "%s", v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    bool neg = signbit(v);
    double a = fabs(v);
    char digits[32] = "0";
    int decpt = 1; /* a = 0.DIGITS x 10^decpt */
    if (a != 0) {
        for (int p = 1; p <= 17; p++) {
            char tmp[48];
            snprintf(tmp, sizeof tmp, "%.*e", p - 1, a);
            /* tmp is D[.DDD]e[+-]XX: p digits of mantissa m and exponent e */
            unsigned long long m = 0;
            const char *c = tmp;
            for (; *c && *c != 'e'; c++)
                if (*c >= '0' && *c <= '9')
                    m = m * 10 + (unsigned long long)(*c - '0');
            int e = *c == 'e' ? atoi(c + 1) : 0;
            /* The correctly rounded p digits first; failing that, the one
             * neighbour on the other side of a can still read back as a
             * (near a power of two, where the gaps are uneven). */
            unsigned long long cand[3] = {m, m + 1, m - 1};
            for (int k = 0; k < 3; k++) {
                if (cand[k] == 0)
                    continue;
                char s[48];
                snprintf(s, sizeof s, "%llue%d", cand[k], e - (p - 1));
                if (strtod(s, NULL) != a)
                    continue;
                int nd = snprintf(digits, sizeof digits, "%llu", cand[k]);
                decpt = nd + e - (p - 1);
                while (nd > 1 && digits[nd - 1] == '0')
                    digits[--nd] = 0;
                goto found;
            }
        }
        /* unreachable: 17 correctly rounded digits always read back */
        snprintf(out, cap, "%.17g", v);
        return;
    }
found:;
    int nd = (int)strlen(digits);
    char buf[64];
    size_t n = 0;
    if (neg)
        buf[n++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            buf[n++] = '0';
            buf[n++] = '.';
            for (int i = 0; i < -decpt; i++)
                buf[n++] = '0';
            for (int i = 0; i < nd; i++)
                buf[n++] = digits[i];
        } else if (decpt < nd) {
            for (int i = 0; i < nd; i++) {
                if (i == decpt)
                    buf[n++] = '.';
                buf[n++] = digits[i];
            }
        } else {
            for (int i = 0; i < nd; i++)
                buf[n++] = digits[i];
            for (int i = nd; i < decpt; i++)
                buf[n++] = '0';
            buf[n++] = '.';
            buf[n++] = '0';
        }
        buf[n] = 0;
    } else {
        buf[n++] = digits[0];
        if (nd > 1) {
            buf[n++] = '.';
            for (int i = 1; i < nd; i++)
                buf[n++] = digits[i];
        }
        int x = decpt - 1;
        snprintf(buf + n, sizeof buf - n, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    }
    snprintf(out, cap, "%s", buf);
}

/* A JSON string as json.dumps(ensure_ascii=False) writes it. */
void py_json_str(sbuf *b, const char *s, size_t n)
{
    sb_putn(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_putn(b, s + run, i - run);
            sb_puts(b, esc);
            run = i + 1;
        }
    }
    sb_putn(b, s + run, n - run);
    sb_putn(b, "\"", 1);
}

/* json.dumps(v, ensure_ascii=False): separators ", " and ": ", keys in
 * their order. */
lilac_status py_json(sbuf *b, const json_t *v, int depth, lilac_error *err)
{
    if (depth > PY_JSON_MAX_DEPTH)
        return lilac_fail(err, LILAC_E_ARG, "JSON nested deeper than %d levels", PY_JSON_MAX_DEPTH);
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        bool first = true;
        sb_puts(b, "{");
        json_object_foreach((json_t *)v, key, val) {
            if (!first)
                sb_puts(b, ", ");
            first = false;
            py_json_str(b, key, strlen(key));
            sb_puts(b, ": ");
            lilac_status st = py_json(b, val, depth + 1, err);
            if (st != LILAC_OK)
                return st;
        }
        sb_puts(b, "}");
        return LILAC_OK;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *val;
        sb_puts(b, "[");
        json_array_foreach(v, i, val) {
            if (i)
                sb_puts(b, ", ");
            lilac_status st = py_json(b, val, depth + 1, err);
            if (st != LILAC_OK)
                return st;
        }
        sb_puts(b, "]");
        return LILAC_OK;
    }
    case JSON_STRING:
        py_json_str(b, json_string_value(v), json_string_length(v));
        return LILAC_OK;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        sb_puts(b, num);
        return LILAC_OK;
    case JSON_REAL:
        py_float(json_real_value(v), num, sizeof num);
        sb_puts(b, num);
        return LILAC_OK;
    case JSON_TRUE: sb_puts(b, "true"); return LILAC_OK;
    case JSON_FALSE: sb_puts(b, "false"); return LILAC_OK;
    case JSON_NULL: sb_puts(b, "null"); return LILAC_OK;
    }
    return lilac_fail(err, LILAC_E_INTERNAL, "unknown JSON value type");
}
