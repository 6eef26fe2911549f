/* {{name}}: a tool component with one tool, `echo`, that answers with its
 * arguments. */
#include <string.h>

#include "keel_guest.h"

bool keel_tool_init(keel_str config, keel_error *err) {
  json_doc *doc = NULL;
  keel_obj root;
  /* No keys yet: the strict reader refuses any, naming it. */
  bool ok = keel_config_parse(config.ptr, config.len, &doc, &root, err) && keel_obj_finish(&root, err);
  json_doc_free(doc);
  return ok;
}

void keel_tool_specs(keel_tool_specs_out *out) {
  keel_tool_specs_add(out, "echo", "Answers with its arguments.", "{\"type\":\"object\"}", KEEL_READ_ONLY);
}

bool keel_tool_run(keel_str name, keel_str arguments, json_buf *result, keel_error *err) {
  if (name.len != 4 || memcmp(name.ptr, "echo", 4) != 0)
    return keel_failq(err, KEEL_STR("{{name}}"), "unknown tool ", name.ptr, name.len, "");
  if (!json_buf_append(result, arguments.ptr, arguments.len)) {
    json_buf_append_str(err, "{{name}}: out of memory");
    return false;
  }
  return true;
}
