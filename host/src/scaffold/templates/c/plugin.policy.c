/* {{name}}: a policy that allows read-only calls and asks an operator about
 * every other one. */
#include <stdlib.h>

#include "keel_guest.h"

bool keel_policy_init(keel_str config, keel_policy_view *view, keel_error *err) {
  json_doc *doc = NULL;
  keel_obj root;
  /* No keys yet: the strict reader refuses any, naming it. */
  bool ok = keel_config_parse(config.ptr, config.len, &doc, &root, err) && keel_obj_finish(&root, err);
  json_doc_free(doc);
  *view = KEEL_VIEW_CALL_ONLY; /* judges each call alone: the host sends no steps */
  return ok;
}

bool keel_policy_evaluate(const keel_tool_call *call, keel_effect effect, const keel_view *view,
                          keel_verdict *out, keel_error *err) {
  (void)view;
  if (effect == KEEL_READ_ONLY) {
    keel_verdict_allow(out);
    return true;
  }
  json_buf reason = {0}, shown = {0};
  bool ok = json_buf_append(&reason, call->tool.ptr, call->tool.len) &&
            json_buf_append_str(&reason, " changes things (") &&
            json_buf_append_str(&reason, keel_effect_name(effect)) && json_buf_append_str(&reason, ")") &&
            json_buf_append_str(&shown, "{\"tool\":") &&
            json_buf_append_quoted(&shown, call->tool.ptr, call->tool.len) &&
            json_buf_append_str(&shown, "}") &&
            keel_verdict_require_approval(out, reason.ptr, reason.len, shown.ptr, shown.len);
  free(reason.ptr);
  free(shown.ptr);
  if (!ok) json_buf_append_str(err, "{{name}}: out of memory");
  return ok;
}
