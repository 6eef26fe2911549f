/* Native unit tests of the C SDK (JSON, config, view, answers); run by
 * guest-sdk/c/test.sh under AddressSanitizer and UBSan when available. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel_guest.h"

static int passed, failed;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (cond) {                                   \
      passed++;                                   \
    } else {                                      \
      failed++;                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

static bool err_is(const keel_error *e, const char *want) {
  return e->len == strlen(want) && memcmp(e->ptr, want, e->len) == 0;
}

static void test_json(void) {
  char *err = NULL;
  json_doc *d = json_parse("[1,-0.5,2e10,1E-2,0,true,false,null,\"\\\"\\\\\\/\\b\\f\\n\\r\\t\",{}]", 58,
                           &err);
  CHECK(d != NULL && d->root->type == JSON_ARRAY && d->root->u.arr.len == 10, "scalars: %s",
        err ? err : "");
  if (d) {
    json_value *s = d->root->u.arr.items[8];
    CHECK(s->type == JSON_STRING && s->u.str.len == 8 &&
              memcmp(s->u.str.ptr, "\"\\/\b\f\n\r\t", 8) == 0,
          "escapes");
  }
  json_doc_free(d);
  free(err);

  /* 128 levels parse, 129 do not. */
  char deep[300];
  for (int i = 0; i < 128; i++) deep[i] = '[', deep[255 - i] = ']';
  d = json_parse(deep, 256, NULL);
  CHECK(d != NULL, "128 levels");
  json_doc_free(d);
  char deeper[300];
  for (int i = 0; i < 129; i++) deeper[i] = '[', deeper[257 - i] = ']';
  d = json_parse(deeper, 258, &err);
  CHECK(d == NULL && err && strstr(err, "nesting deeper than 128 levels"), "129 levels");
  free(err);

  d = json_parse("\"\\ud83d\\ude00\\u00e9\\u20ac\\u0000\"", 32, &err);
  CHECK(d != NULL && d->root->u.str.len == 10 &&
            memcmp(d->root->u.str.ptr, "\xf0\x9f\x98\x80\xc3\xa9\xe2\x82\xac\0", 10) == 0,
        "\\u escapes and surrogate pairs");
  json_doc_free(d);
}

/* Parses `cfg` and runs `fn` on its root; returns the error text (static). */
static char last[512];
static void got(const keel_error *e) {
  size_t n = e->len < sizeof last - 1 ? e->len : sizeof last - 1;
  memcpy(last, e->ptr ? e->ptr : "", n);
  last[n] = '\0';
}

static void test_config(void) {
  json_doc *doc = NULL;
  keel_obj root, sub;
  keel_error err = {0};
  const char *cfg = "{\"name\":\"a\",\"n\":3,\"on\":true,\"list\":[1,2],\"sub\":{\"k\":\"v\"},\"gone\":null}";
  CHECK(keel_config_parse(cfg, strlen(cfg), &doc, &root, &err), "parse");
  keel_str name;
  long long n = 0;
  bool on = false, present = false;
  const json_value *list = NULL;
  keel_str list_path;
  CHECK(keel_obj_str(&root, "name", true, &name, &err) && name.len == 1 && name.ptr[0] == 'a', "str");
  CHECK(keel_obj_int(&root, "n", false, &n, &present, &err) && present && n == 3, "int");
  CHECK(keel_obj_bool(&root, "on", false, &on, NULL, &err) && on, "bool");
  CHECK(keel_obj_array(&root, "list", true, &list, &list_path, &err) && list->u.arr.len == 2 &&
            list_path.len == 11 && memcmp(list_path.ptr, "config.list", 11) == 0,
        "array");
  keel_str p1 = keel_path_index(doc, list_path, 1);
  CHECK(p1.len == 14 && memcmp(p1.ptr, "config.list[1]", 14) == 0, "index path");
  CHECK(keel_obj_obj(&root, "sub", false, &sub, &err) && sub.value != NULL, "obj");
  keel_str k;
  CHECK(keel_obj_str(&sub, "k", false, &k, &err) && keel_obj_finish(&sub, &err), "sub finish");
  keel_str absent;
  CHECK(keel_obj_str(&root, "gone", false, &absent, &err) && absent.ptr == NULL, "null is absent");
  CHECK(keel_obj_finish(&root, &err), "finish");
  json_doc_free(doc);

  struct {
    const char *cfg, *key, *kind, *want;
  } bad[] = {
      {"{", "x", "str", "config: invalid JSON: expected a string key at line 1 column 2"},
      {"[]", "x", "str", "config: expected an object"},
      {"{}", "name", "str!", "config.name: missing"},
      {"{\"name\":null}", "name", "str!", "config.name: missing"},
      {"{\"name\":1}", "name", "str", "config.name: expected a string"},
      {"{\"n\":1.0}", "n", "int", "config.n: expected an integer"},
      {"{\"n\":1e3}", "n", "int", "config.n: expected an integer"},
      {"{\"n\":12345678901234567890}", "n", "int", "config.n: is too large"},
      {"{\"b\":\"yes\"}", "b", "bool", "config.b: expected true or false"},
      {"{\"s\":[]}", "s", "obj", "config.s: expected an object"},
      {"{\"l\":{}}", "l", "array", "config.l: expected an array"},
      {"{\"a\":1,\"b\\u0000c\":2}", "a", "finish", "config: unknown key \"b\\u0000c\""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    keel_error e = {0};
    json_doc *d = NULL;
    keel_obj r, o;
    keel_str s;
    long long v;
    bool b, pr;
    const json_value *jv;
    bool ok = keel_config_parse(bad[i].cfg, strlen(bad[i].cfg), &d, &r, &e);
    const char *kind = bad[i].kind;
    if (ok) {
      if (!strcmp(kind, "str")) ok = keel_obj_str(&r, bad[i].key, false, &s, &e);
      else if (!strcmp(kind, "str!")) ok = keel_obj_str(&r, bad[i].key, true, &s, &e);
      else if (!strcmp(kind, "int")) ok = keel_obj_int(&r, bad[i].key, false, &v, &pr, &e);
      else if (!strcmp(kind, "bool")) ok = keel_obj_bool(&r, bad[i].key, false, &b, &pr, &e);
      else if (!strcmp(kind, "obj")) ok = keel_obj_obj(&r, bad[i].key, false, &o, &e);
      else if (!strcmp(kind, "array")) ok = keel_obj_array(&r, bad[i].key, false, &jv, NULL, &e);
      else ok = keel_obj_value(&r, bad[i].key, false, &jv, &e) && keel_obj_finish(&r, &e);
    }
    got(&e);
    CHECK(!ok && err_is(&e, bad[i].want), "config %s: want %s, got %s", bad[i].cfg, bad[i].want, last);
    free(e.ptr);
    json_doc_free(d);
  }

  /* An empty text is {}; arguments have their own root. */
  CHECK(keel_config_parse(" \n", 2, &doc, &root, &err) && keel_obj_finish(&root, &err), "empty is {}");
  json_doc_free(doc);
  keel_error e = {0};
  CHECK(keel_args_parse("{\"p\":1}", 7, &doc, &root, &e) && !keel_obj_str(&root, "p", true, &k, &e) &&
            err_is(&e, "arguments.p: expected a string"),
        "arguments path");
  json_doc_free(doc);
  free(e.ptr);
  free(err.ptr);
}

/* A step owning malloc'd strings, as the bindings hand them over. */
static keel_step step(uint32_t index, uint32_t version, bool decided) {
  keel_step s;
  memset(&s, 0, sizeof s);
  s.index = index;
  s.version = version;
  s.state = decided ? KEEL_STEP_DONE : KEEL_STEP_STARTED;
  if (decided) {
    s.decision.is_some = true;
    keel_decision_call(&s.decision.val, "echo", "{\"a\":1}");
  }
  return s;
}

static keel_approval approval(const char *id, keel_approval_status status) {
  keel_approval a;
  memset(&a, 0, sizeof a);
  keel_str tmp;
  keel_decision d;
  keel_decision_call(&d, "t", "{}");
  a.call = d.val.call;
  keel_decision_fail(&d, id); /* a malloc'd copy of id */
  tmp = d.val.fail;
  a.id = tmp;
  a.status = (uint8_t)status;
  return a;
}

/* A delta whose arrays are malloc'd; keel_view_apply takes them. */
static keel_view_delta delta(bool reset, keel_step *steps, size_t n, keel_approval *apps, size_t na) {
  keel_view_delta d;
  memset(&d, 0, sizeof d);
  d.reset = reset;
  keel_decision g;
  keel_decision_fail(&g, "the goal");
  d.run.goal = g.val.fail;
  if (n > 0) {
    d.steps.ptr = malloc(n * sizeof *steps);
    memcpy(d.steps.ptr, steps, n * sizeof *steps);
    d.steps.len = n;
  }
  if (na > 0) {
    d.approvals.ptr = malloc(na * sizeof *apps);
    memcpy(d.approvals.ptr, apps, na * sizeof *apps);
    d.approvals.len = na;
  }
  return d;
}

static void test_view(void) {
  keel_view *v = keel_view_new();
  keel_error err = {0};
  size_t n;

  keel_view_delta d = delta(false, NULL, 0, NULL, 0);
  CHECK(!keel_view_apply(v, &d, &err) && err_is(&err, "view delta: the first delta did not reset the view"),
        "first delta must reset");
  err.len = 0;

  keel_step s1[] = {step(0, 1, true), step(1, 1, false)};
  keel_approval a1[] = {approval("a1", KEEL_APPROVAL_PENDING), approval("a2", KEEL_APPROVAL_PENDING)};
  d = delta(true, s1, 2, a1, 2);
  CHECK(keel_view_apply(v, &d, &err), "reset");
  CHECK(keel_view_decided_steps(v) == 1 && keel_view_steps(v, &n) && n == 2, "two steps, one decided");
  CHECK(keel_view_run(v)->goal.len == 8, "run info");

  keel_step s2[] = {step(1, 2, true), step(2, 1, false)};
  keel_approval a2[] = {approval("a1", KEEL_APPROVAL_APPROVED)};
  d = delta(false, s2, 2, a2, 1);
  CHECK(keel_view_apply(v, &d, &err), "upsert");
  const keel_step *st = keel_view_steps(v, &n);
  CHECK(n == 3 && keel_view_decided_steps(v) == 2 && st[1].version == 2, "upsert by index");
  const keel_approval *ap = keel_view_approvals(v, &n);
  CHECK(n == 2 && ap[0].status == KEEL_APPROVAL_APPROVED && ap[1].status == KEEL_APPROVAL_PENDING &&
            ap[0].id.len == 2 && memcmp(ap[0].id.ptr, "a1", 2) == 0,
        "approvals by id, in creation order");

  keel_step redo[] = {step(0, 2, true)};
  d = delta(false, redo, 1, NULL, 0);
  CHECK(keel_view_apply(v, &d, &err) && keel_view_decided_steps(v) == 2,
        "a re-delivered decided step counts once");

  keel_step gap[] = {step(3, 1, true), step(5, 1, true)};
  d = delta(false, gap, 2, NULL, 0);
  CHECK(!keel_view_apply(v, &d, &err), "gap refused");
  got(&err);
  CHECK(err_is(&err, "view delta: step 5 arrived while only 4 steps are held"), "gap message: %s", last);
  err.len = 0;
  keel_view_steps(v, &n);
  CHECK(n == 3 && keel_view_decided_steps(v) == 2, "nothing changed after a gap");

  keel_step back[] = {step(1, 2, false)};
  d = delta(false, back, 1, NULL, 0);
  CHECK(!keel_view_apply(v, &d, &err), "old version refused");
  got(&err);
  CHECK(err_is(&err, "view delta: step 1 arrived with version 2, not newer than the held version 2"),
        "version message: %s", last);
  err.len = 0;
  CHECK(keel_view_decided_steps(v) == 2, "nothing changed after an old version");

  keel_step again[] = {step(0, 1, false)};
  d = delta(true, again, 1, NULL, 0);
  CHECK(keel_view_apply(v, &d, &err), "reset again");
  keel_view_steps(v, &n);
  CHECK(n == 1 && keel_view_decided_steps(v) == 0 && keel_view_approvals(v, &n) && n == 0, "reset clears");
  keel_view_free(v);
  free(err.ptr);
}

static void test_answers(void) {
  keel_decision d;
  CHECK(keel_decision_call(&d, "t", NULL) && d.val.call.arguments.len == 2, "call defaults to {}");
  keel_decision_free(&d);
  CHECK(!keel_decision_call(&d, "t", "{"), "call arguments must be JSON");
  CHECK(!keel_decision_complete(&d, "nope"), "complete must be JSON");
  CHECK(keel_decision_complete(&d, NULL) && d.val.complete.len == 4, "complete defaults to null");
  keel_decision_free(&d);
  keel_verdict v;
  CHECK(keel_verdict_require_approval(&v, "why", 3, "{\"a\":1}", 7) && v.tag == KEEL_VERDICT_REQUIRE_APPROVAL,
        "require approval");
  keel_verdict_free(&v);
  CHECK(!keel_verdict_require_approval(&v, "why", 3, "{", 1), "presentation must be JSON");
  CHECK(keel_verdict_deny(&v, "", 0) && v.val.deny.ptr == NULL, "an empty reason is not allocated");
  keel_verdict_free(&v);
  keel_tool_specs_out specs = {0};
  CHECK(keel_tool_specs_add(&specs, "echo", "says it back", NULL, KEEL_READ_ONLY) && specs.len == 1,
        "spec");
  CHECK(!keel_tool_specs_add(&specs, "bad", "", "{", KEEL_READ_ONLY), "spec schema must be JSON");
  CHECK(!keel_tool_specs_add(&specs, "bad", "", NULL, (keel_effect)9), "spec effect must exist");
  keel_tool_specs_free(&specs);
  keel_error err = {0};
  keel_fail(&err, KEEL_STR("config.x"), "first");
  keel_fail(&err, KEEL_STR("config.y"), "second");
  CHECK(err_is(&err, "config.y: second"), "keel_fail replaces");
  free(err.ptr);
}

int main(void) {
  test_json();
  test_config();
  test_view();
  test_answers();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
