/* {{name}}: an agent that completes the run with its goal.
 *
 * Replace keel_agent_decide with your own logic: look at keel_view_steps
 * (what was decided and observed so far) and build the next decision. */
#include <stdlib.h>

#include "keel_guest.h"

static size_t n_tools;

bool keel_agent_init(keel_str config, const keel_tool_spec *tools, size_t count, keel_error *err) {
  (void)tools;
  json_doc *doc = NULL;
  keel_obj root;
  /* No keys yet: the strict reader refuses any, naming it. */
  bool ok = keel_config_parse(config.ptr, config.len, &doc, &root, err) && keel_obj_finish(&root, err);
  json_doc_free(doc);
  n_tools = count;
  return ok;
}

bool keel_agent_decide(const keel_view *view, keel_decision *out, keel_error *err) {
  const keel_run_info *run = keel_view_run(view);
  json_buf result = {0};
  char num[24];
  bool ok = json_buf_append_str(&result, "{\"goal\":") &&
            json_buf_append_quoted(&result, run->goal.ptr, run->goal.len) &&
            json_buf_append_str(&result, ",\"tools\":") &&
            json_buf_append(&result, num, json_fmt_uint(num, n_tools)) &&
            json_buf_append_str(&result, "}") &&
            keel_decision_complete_n(out, (keel_str){result.ptr, result.len});
  free(result.ptr);
  if (!ok) json_buf_append_str(err, "{{name}}: out of memory");
  return ok;
}
