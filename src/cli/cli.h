/* cli: helpers the command files share. Every command is
 * `int cmd_NAME(int argc, char **argv)` over the arguments after its name,
 * returning the exit status: 0 done, 1 failed (one "lilac: error:" line
 * said why), 2 bad usage. */
#ifndef LILAC_CLI_H
#define LILAC_CLI_H

#include <stdint.h>

#include "lilac.h"

int cli_fail(const char *fmt, const char *arg); /* prints the line, returns 1 */
int cli_fail_err(const lilac_error *e);
void cli_log(void *user, lilac_log_level level, const char *msg);
int cli_parse_int(const char *s); /* a positive int, or -1 */
int cli_parse_tokens(const char *s, int32_t **out, int *n);

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_batch(int argc, char **argv);

#endif
