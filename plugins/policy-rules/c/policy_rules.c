/* The policy world's exports, glued to the logic in rules.c.
 *
 * Ownership (see gen/policy.c): an export owns its arguments and must free
 * them; the strings it returns are freed with free() by the generated
 * post-return functions, so they are malloc'd here (a zero-length string is
 * never freed, so it is never allocated either).
 */
#include <stdlib.h>
#include <string.h>

#include "gen/policy.h"
#include "rules.h"

_Static_assert(KEEL_PLUGIN_TYPES_EFFECT_READ_ONLY == RULES_READ_ONLY &&
                   KEEL_PLUGIN_TYPES_EFFECT_IDEMPOTENT == RULES_IDEMPOTENT &&
                   KEEL_PLUGIN_TYPES_EFFECT_LOCAL_MUTATION == RULES_LOCAL_MUTATION &&
                   KEEL_PLUGIN_TYPES_EFFECT_REMOTE_MUTATION == RULES_REMOTE_MUTATION &&
                   KEEL_PLUGIN_TYPES_EFFECT_DESTRUCTIVE == RULES_DESTRUCTIVE,
               "rules_effect must number effects like the WIT enum");

/* The component type is embedded by `xtask componentize` from wit/ (the
 * bindings are generated without the *_component_type.o object), so the
 * symbol the generated code links against is a no-op here. */
void __component_type_object_force_link_policy(void) {}

static rules_policy *policy;

/* Copies bytes into a string the caller (the post-return) frees. */
static void set_string(policy_string_t *out, const char *s, size_t len) {
  out->len = len;
  out->ptr = NULL;
  if (len == 0) return;
  out->ptr = malloc(len);
  if (out->ptr == NULL) abort(); /* as the generated cabi_realloc does */
  memcpy(out->ptr, s, len);
}

static void set_cstring(policy_string_t *out, const char *s) { set_string(out, s, strlen(s)); }

static void log_msg(keel_plugin_log_level_t level, const char *msg) {
  policy_string_t s = {(uint8_t *)msg, strlen(msg)};
  keel_plugin_log_log(level, &s); /* borrowed by the host for the call */
}

/* Rules match the call alone, so the host sends no steps (call-only). */
bool exports_policy_init(policy_json_t *config, policy_policy_view_t *ret, policy_string_t *err) {
  char *msg = NULL;
  size_t msg_len = 0;
  rules_free(policy);
  policy = rules_parse((const char *)config->ptr, config->len, &msg, &msg_len);
  policy_json_free(config);
  if (policy == NULL) {
    if (msg == NULL) {
      set_cstring(err, "config: out of memory");
    } else {
      /* Hand the malloc'd message over as is; the post-return frees it. */
      err->ptr = (uint8_t *)msg;
      err->len = msg_len; /* never 0 */
    }
    return false;
  }
  log_msg(KEEL_PLUGIN_TYPES_LEVEL_DEBUG, "policy-rules (C): config loaded");
  *ret = KEEL_PLUGIN_TYPES_POLICY_VIEW_CALL_ONLY;
  return true;
}

bool exports_policy_evaluate(policy_tool_call_t *call, policy_effect_t effect,
                             policy_view_delta_t *view, policy_verdict_t *ret,
                             policy_string_t *err) {
  bool ok = false;
  policy_view_delta_free(view); /* this policy judges the call alone */
  rules_verdict v;
  char *presentation = NULL;
  size_t presentation_len = 0;
  if (policy == NULL) {
    set_cstring(err, "policy-rules: evaluate called without a successful init");
  } else if (rules_evaluate(policy, (const char *)call->tool.ptr, call->tool.len,
                            (rules_effect)effect, (const char *)call->arguments.ptr,
                            call->arguments.len, &v) != 0) {
    set_cstring(err, "policy-rules: out of memory");
  } else if (v.action == RULES_REQUIRE_APPROVAL &&
             (presentation = rules_presentation(v.rule, (const char *)call->tool.ptr,
                                                call->tool.len, &presentation_len)) == NULL) {
    set_cstring(err, "policy-rules: out of memory");
  } else {
    ok = true;
    switch (v.action) {
      case RULES_ALLOW:
        ret->tag = KEEL_PLUGIN_TYPES_VERDICT_ALLOW;
        break;
      case RULES_DENY:
        ret->tag = KEEL_PLUGIN_TYPES_VERDICT_DENY;
        set_string(&ret->val.deny, v.reason, v.reason_len);
        break;
      case RULES_ABORT:
        ret->tag = KEEL_PLUGIN_TYPES_VERDICT_ABORT;
        set_string(&ret->val.abort, v.reason, v.reason_len);
        break;
      case RULES_REQUIRE_APPROVAL:
        ret->tag = KEEL_PLUGIN_TYPES_VERDICT_REQUIRE_APPROVAL;
        set_string(&ret->val.require_approval.reason, v.reason, v.reason_len);
        ret->val.require_approval.presentation.ptr = (uint8_t *)presentation;
        ret->val.require_approval.presentation.len = presentation_len; /* never 0 */
        break;
    }
  }
  policy_tool_call_free(call);
  return ok;
}
