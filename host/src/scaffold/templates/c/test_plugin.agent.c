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

static keel_str copy(const char *s) {
  char *p = malloc(strlen(s));
  memcpy(p, s, strlen(s));
  return (keel_str){p, strlen(s)};
}

int main(void) {
  keel_error err = {0};
  CHECK(keel_agent_init(KEEL_STR(""), NULL, 0, &err), "an empty config is {}");
  CHECK(!keel_agent_init(KEEL_STR("{\"x\":1}"), NULL, 0, &err) && err.len == 23 &&
            memcmp(err.ptr, "config: unknown key \"x\"", 23) == 0,
        "an unknown key is refused");
  CHECK(keel_agent_init(KEEL_STR("{}"), NULL, 0, &err), "init");

  keel_view *view = keel_view_new();
  keel_view_delta delta;
  memset(&delta, 0, sizeof delta);
  delta.reset = true;
  delta.run.goal = copy("say hi");
  CHECK(keel_view_apply(view, &delta, &err), "a reset applies");
  keel_decision d;
  CHECK(keel_agent_decide(view, &d, &err), "decides");
  const char *want = "{\"goal\":\"say hi\",\"tools\":0}";
  CHECK(d.tag == KEEL_DECISION_COMPLETE && d.val.complete.len == strlen(want) &&
            memcmp(d.val.complete.ptr, want, strlen(want)) == 0,
        "completes with the goal");
  keel_decision_free(&d);
  keel_view_free(view);
  free(err.ptr);
  printf("%s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
