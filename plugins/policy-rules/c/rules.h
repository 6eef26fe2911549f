/* The policy-rules logic, free of any binding: config validation and rule
 * evaluation exactly as ../README.md specifies, on the C SDK's JSON and
 * config errors (guest-sdk/c). Builds for wasm32-wasip1 and for the host
 * (see test.sh). */
#ifndef KEEL_RULES_H
#define KEEL_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "keel_guest.h"

typedef enum {
  RULES_ALLOW,
  RULES_DENY,
  RULES_REQUIRE_APPROVAL,
  RULES_ABORT,
} rules_action;

/* Effect classes, numbered like the WIT enum `effect`. */
typedef enum {
  RULES_READ_ONLY = 0,
  RULES_IDEMPOTENT = 1,
  RULES_LOCAL_MUTATION = 2,
  RULES_REMOTE_MUTATION = 3,
  RULES_DESTRUCTIVE = 4,
} rules_effect;

typedef struct rules_policy rules_policy;

/* Parses and validates a config. On success returns the policy (free it with
 * rules_free). On failure returns NULL and sets *err to a message naming the
 * bad key's path, for example `config.rules[1].action: missing` (empty only
 * when out of memory). The message can hold a NUL byte where a key does. */
rules_policy *rules_parse(const char *config, size_t len, keel_error *err);

void rules_free(rules_policy *policy);

size_t rules_count(const rules_policy *policy);
rules_action rules_default(const rules_policy *policy);

typedef struct {
  rules_action action;
  long rule;          /* index of the matching rule; -1 when the default applied */
  const char *reason; /* borrowed from the policy; NULL for allow */
  size_t reason_len;
} rules_verdict;

/* Judges a call. `args` is the call's JSON arguments text. Returns 0 and
 * fills *out, or -1 when out of memory (never a verdict then). */
int rules_evaluate(const rules_policy *policy, const char *tool, size_t tool_len,
                   rules_effect effect, const char *args, size_t args_len,
                   rules_verdict *out);

/* The require-approval presentation `{"rule":N,"tool":"<tool>"}` (N is
 * `null` for the default), malloc'd and NUL-terminated; NULL when out of
 * memory. */
char *rules_presentation(long rule, const char *tool, size_t tool_len, size_t *len);

/* Whole-string glob match: `*` any run, `?` one Unicode scalar value. */
bool rules_glob(const char *pat, size_t pat_len, const char *s, size_t s_len);

const char *rules_action_name(rules_action action);

#endif
