/* policy-rules, C twin: the policy world on the C SDK (guest-sdk/c), which
 * owns the bindings, the view and the JSON; the rules live in rules.c. */
#include <stdlib.h>

#include "keel_guest.h"
#include "rules.h"

_Static_assert(KEEL_READ_ONLY == (int)RULES_READ_ONLY && KEEL_DESTRUCTIVE == (int)RULES_DESTRUCTIVE,
               "rules_effect must number effects like the SDK");

static rules_policy *policy;

/* Rules match the call alone, so the host sends no steps (call-only). */
bool keel_policy_init(keel_str config, keel_policy_view *view, keel_error *err) {
  rules_free(policy);
  policy = rules_parse(config.ptr, config.len, err);
  if (policy == NULL) return false;
  keel_log(KEEL_DEBUG, "policy-rules (C): config loaded");
  *view = KEEL_VIEW_CALL_ONLY;
  return true;
}

bool keel_policy_evaluate(const keel_tool_call *call, keel_effect effect, const keel_view *view,
                          keel_verdict *out, keel_error *err) {
  (void)view;
  rules_verdict v;
  if (rules_evaluate(policy, call->tool.ptr, call->tool.len, (rules_effect)effect,
                     call->arguments.ptr, call->arguments.len, &v) != 0)
    return json_buf_append_str(err, "policy-rules: out of memory") && false;
  bool ok = true;
  switch (v.action) {
    case RULES_ALLOW: keel_verdict_allow(out); break;
    case RULES_DENY: ok = keel_verdict_deny(out, v.reason, v.reason_len); break;
    case RULES_ABORT: ok = keel_verdict_abort(out, v.reason, v.reason_len); break;
    case RULES_REQUIRE_APPROVAL: {
      size_t len = 0;
      char *presentation = rules_presentation(v.rule, call->tool.ptr, call->tool.len, &len);
      ok = presentation != NULL &&
           keel_verdict_require_approval(out, v.reason, v.reason_len, presentation, len);
      free(presentation);
      break;
    }
  }
  if (!ok) json_buf_append_str(err, "policy-rules: out of memory");
  return ok;
}
