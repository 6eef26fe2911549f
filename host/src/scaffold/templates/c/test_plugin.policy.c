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
  keel_policy_view pv = KEEL_VIEW_FULL;
  CHECK(!keel_policy_init(KEEL_STR("{\"x\":1}"), &pv, &err) && err.len == 23 &&
            memcmp(err.ptr, "config: unknown key \"x\"", 23) == 0,
        "an unknown key is refused");
  CHECK(keel_policy_init(KEEL_STR(""), &pv, &err) && pv == KEEL_VIEW_CALL_ONLY, "init asks for call-only");

  keel_view *view = keel_view_new();
  keel_tool_call call = {KEEL_STR("fs_write"), KEEL_STR("{}")};
  keel_verdict v;
  CHECK(keel_policy_evaluate(&call, KEEL_READ_ONLY, view, &v, &err) && v.tag == KEEL_VERDICT_ALLOW,
        "read-only calls are allowed");
  keel_verdict_free(&v);
  for (int e = KEEL_IDEMPOTENT; e <= KEEL_DESTRUCTIVE; e++) {
    CHECK(keel_policy_evaluate(&call, (keel_effect)e, view, &v, &err) &&
              v.tag == KEEL_VERDICT_REQUIRE_APPROVAL,
          "other calls need an operator");
    keel_verdict_free(&v);
  }
  keel_view_free(view);
  free(err.ptr);
  printf("%s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
