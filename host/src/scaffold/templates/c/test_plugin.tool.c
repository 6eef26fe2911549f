/* Unit tests, run natively without building the component: ./test.sh */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel_guest.h"

static int failed;
#define CHECK(cond, what)                     \
  do {                                        \
    if (!(cond)) {                            \
      failed++;                               \
      printf("FAIL line %d: %s\n", __LINE__, what); \
    }                                         \
  } while (0)

int main(void) {
  keel_error err = {0};
  CHECK(keel_tool_init(KEEL_STR(""), &err), "an empty config is {}");
  keel_tool_specs_out specs = {0};
  keel_tool_specs(&specs);
  CHECK(specs.len == 1 && specs.ptr[0].name.len == 4 && memcmp(specs.ptr[0].name.ptr, "echo", 4) == 0,
        "one tool, echo");
  keel_tool_specs_free(&specs);
  json_buf out = {0};
  CHECK(keel_tool_run(KEEL_STR("echo"), KEEL_STR("{\"a\":1}"), &out, &err) && out.len == 7 &&
            memcmp(out.ptr, "{\"a\":1}", 7) == 0,
        "echoes its arguments");
  CHECK(!keel_tool_run(KEEL_STR("other"), KEEL_STR("{}"), &out, &err), "an unknown tool fails");
  free(out.ptr);
  free(err.ptr);
  printf("%s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
