/* Native unit tests of rules.c (and the SDK's JSON it uses); run by test.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keel_guest.h"
#include "rules.h"

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

static rules_policy *load(const char *config) {
  keel_error err = {0};
  rules_policy *p = rules_parse(config, strlen(config), &err);
  if (p == NULL) printf("unexpected init error for %s: %.*s\n", config, (int)err.len, err.ptr);
  free(err.ptr);
  return p;
}

/* Init must fail with exactly `want` (or, ending in "...", starting with it). */
static void init_error_n(int line, const char *config, size_t config_len, const char *want,
                         size_t want_len) {
  keel_error e = {0};
  rules_policy *p = rules_parse(config, config_len, &e);
  char *err = e.len > 0 ? e.ptr : NULL;
  size_t err_len = e.len;
  bool prefix = want_len >= 3 && memcmp(want + want_len - 3, "...", 3) == 0;
  size_t cmp = prefix ? want_len - 3 : want_len;
  bool ok = p == NULL && err != NULL && (prefix ? err_len >= cmp : err_len == cmp) &&
            memcmp(err, want, cmp) == 0;
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL line %d: config %.*s\n  want error: %s\n  got:        %.*s\n", line,
           (int)config_len, config, want, err ? (int)err_len : 6, err ? err : "(none)");
  }
  free(e.ptr);
  rules_free(p);
}
#define INIT_ERROR(config, want) init_error_n(__LINE__, config, strlen(config), want, strlen(want))

/* Evaluates and compares with the expected action, rule index and reason
 * (NULL: none). */
static void verdict_n(int line, const rules_policy *p, const char *tool, rules_effect effect,
                      const char *args, rules_action action, long rule, const char *reason) {
  rules_verdict v;
  if (p == NULL) {
    failed++;
    printf("FAIL line %d: no policy\n", line);
    return;
  }
  int rc = rules_evaluate(p, tool, strlen(tool), effect, args, strlen(args), &v);
  bool ok = rc == 0 && v.action == action && v.rule == rule &&
            (reason == NULL ? v.reason == NULL
                            : v.reason != NULL && v.reason_len == strlen(reason) &&
                                  memcmp(v.reason, reason, v.reason_len) == 0);
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL line %d: %s %s: want %s rule %ld reason %s, got %s rule %ld reason %.*s\n", line,
           tool, args, rules_action_name(action), rule, reason ? reason : "(none)",
           rules_action_name(v.action), v.rule, v.reason ? (int)v.reason_len : 6,
           v.reason ? v.reason : "(none)");
  }
}
#define VERDICT(p, tool, effect, args, action, rule, reason) \
  verdict_n(__LINE__, p, tool, effect, args, action, rule, reason)

static bool glob(const char *pat, const char *s) {
  return rules_glob(pat, strlen(pat), s, strlen(s));
}

static void test_actions(void) {
  rules_policy *p = load(
      "{\"rules\":["
      "{\"tool\":\"a\",\"action\":\"allow\"},"
      "{\"tool\":\"d\",\"action\":\"deny\",\"reason\":\"no d\"},"
      "{\"tool\":\"r\",\"action\":\"require-approval\",\"reason\":\"ask\"},"
      "{\"tool\":\"x\",\"action\":\"abort\"},"
      "{\"tool\":\"e\",\"action\":\"deny\",\"reason\":\"\"}]}");
  VERDICT(p, "a", RULES_READ_ONLY, "{}", RULES_ALLOW, 0, NULL);
  VERDICT(p, "d", RULES_READ_ONLY, "{}", RULES_DENY, 1, "no d");
  VERDICT(p, "r", RULES_READ_ONLY, "{}", RULES_REQUIRE_APPROVAL, 2, "ask");
  VERDICT(p, "x", RULES_READ_ONLY, "{}", RULES_ABORT, 3, "matched rule 3");
  VERDICT(p, "e", RULES_READ_ONLY, "{}", RULES_DENY, 4, "");
  VERDICT(p, "zzz", RULES_READ_ONLY, "{}", RULES_DENY, -1, "no rule matched");
  CHECK(p && rules_count(p) == 5 && rules_default(p) == RULES_DENY, "count/default");
  rules_free(p);
}

static void test_first_match_and_default(void) {
  rules_policy *p = load(
      "{\"rules\":[{\"tool\":\"fs_*\",\"action\":\"deny\"},"
      "{\"tool\":\"fs_read\",\"action\":\"allow\"},"
      "{\"action\":\"abort\",\"reason\":\"catch-all\"}]}");
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{}", RULES_DENY, 0, "matched rule 0");
  VERDICT(p, "http", RULES_READ_ONLY, "{}", RULES_ABORT, 2, "catch-all");
  rules_free(p);

  p = load("{\"rules\":[]}");
  VERDICT(p, "anything", RULES_DESTRUCTIVE, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
  p = load("{\"rules\":[],\"default\":null}");
  VERDICT(p, "anything", RULES_READ_ONLY, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
  p = load("{\"default\":\"allow\",\"rules\":[{\"tool\":\"rm\",\"action\":\"deny\"}]}");
  VERDICT(p, "ls", RULES_READ_ONLY, "{}", RULES_ALLOW, -1, NULL);
  VERDICT(p, "rm", RULES_READ_ONLY, "{}", RULES_DENY, 0, "matched rule 0");
  rules_free(p);
  p = load("{\"rules\":[],\"default\":\"require-approval\"}");
  VERDICT(p, "ls", RULES_READ_ONLY, "{}", RULES_REQUIRE_APPROVAL, -1, "no rule matched");
  rules_free(p);
  p = load("{\"rules\":[],\"default\":\"abort\"}");
  VERDICT(p, "ls", RULES_READ_ONLY, "{}", RULES_ABORT, -1, "no rule matched");
  rules_free(p);
  p = load("{\"rules\":[],\"default\":\"deny\"}");
  VERDICT(p, "ls", RULES_READ_ONLY, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
}

static void test_globs(void) {
  CHECK(glob("fs_*", "fs_read"), "fs_* fs_read");
  CHECK(glob("fs_*", "fs_"), "* matches empty");
  CHECK(!glob("fs_*", "xfs_read"), "anchored at start");
  CHECK(!glob("fs_rea", "fs_read"), "anchored at end");
  CHECK(glob("*", ""), "* empty");
  CHECK(glob("", ""), "empty empty");
  CHECK(!glob("", "a"), "empty pattern");
  CHECK(!glob("?", ""), "? needs a character");
  CHECK(glob("a*/*z", "a/b/c/z"), "* crosses /");
  CHECK(glob("a*b*c", "aXbYbZc"), "backtracking");
  CHECK(!glob("a*b*c", "aXbYbZ"), "backtracking fails");
  CHECK(glob("*.txt", "a.txt.txt"), "last segment");
  CHECK(glob("fs_?ead", "fs_read"), "? ascii");
  CHECK(glob("[a]", "[a]"), "no classes");
  CHECK(!glob("[a]", "a"), "no classes 2");
  CHECK(glob("\\*", "\\abc"), "no escaping");
  /* `?` is one Unicode scalar value, whatever its UTF-8 length. */
  CHECK(glob("h?llo", "h\xc3\xa9llo"), "? 2-byte");
  CHECK(glob("h?llo", "h\xe2\x82\xacllo"), "? 3-byte");
  CHECK(glob("h?llo", "h\xf0\x9f\x98\x80llo"), "? 4-byte");
  CHECK(!glob("h??llo", "h\xc3\xa9llo"), "?? is two characters");
  CHECK(!glob("h?llo", "hllo"), "? not empty");
  CHECK(glob("*\xc3\xa9", "\xc3\xa9\xc3\xa9"), "* before multibyte");
  CHECK(glob("?\xc3\xa9*", "\xf0\x9f\x98\x80\xc3\xa9x"), "? then multibyte");
  CHECK(glob("*?", "\xf0\x9f\x98\x80"), "*? one emoji");
  CHECK(!glob("*??", "\xf0\x9f\x98\x80"), "*?? one emoji");
  CHECK(rules_glob("a\0b", 3, "a\0b", 3), "NUL is a character");
  CHECK(!rules_glob("a\0b", 3, "a\0c", 3), "NUL is a character 2");
  /* Stray bytes (not UTF-8) neither crash nor read past the end. */
  CHECK(glob("?", "\xff"), "stray byte");
  CHECK(rules_glob("??", 2, "\xf0\x9f", 2) == false, "truncated sequence");
  CHECK(rules_glob("?", 1, "\xf0\x9f", 2), "truncated sequence is one");
  /* Pathological pattern: quadratic at worst, not exponential. */
  static char text[20001];
  memset(text, 'a', 20000);
  text[20000] = 0;
  CHECK(!glob("*a*a*a*a*a*a*a*a*a*b", text), "pathological");

  rules_policy *p = load(
      "{\"rules\":[{\"tool\":\"fs_*\",\"action\":\"allow\"},"
      "{\"tool\":\"h?llo\",\"action\":\"abort\"},"
      "{\"tool\":\"\\u00e9t\\u00e9\",\"action\":\"require-approval\"},"
      "{\"tool\":\"\\ud83d\\ude00?\",\"action\":\"deny\"}]}");
  VERDICT(p, "fs_write", RULES_DESTRUCTIVE, "{}", RULES_ALLOW, 0, NULL);
  VERDICT(p, "h\xc3\xa9llo", RULES_READ_ONLY, "{}", RULES_ABORT, 1, "matched rule 1");
  VERDICT(p, "\xc3\xa9t\xc3\xa9", RULES_READ_ONLY, "{}", RULES_REQUIRE_APPROVAL, 2, "matched rule 2");
  VERDICT(p, "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", RULES_READ_ONLY, "{}", RULES_DENY, 3,
          "matched rule 3");
  VERDICT(p, "\xf0\x9f\x98\x80", RULES_READ_ONLY, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
}

static void test_effects(void) {
  rules_policy *p = load(
      "{\"rules\":[{\"effect\":\"read-only\",\"action\":\"allow\"},"
      "{\"effect\":[\"local-mutation\",\"remote-mutation\"],\"action\":\"require-approval\","
      "\"reason\":\"writes need a human\"},"
      "{\"effect\":[\"destructive\"],\"action\":\"abort\"}]}");
  VERDICT(p, "t", RULES_READ_ONLY, "{}", RULES_ALLOW, 0, NULL);
  VERDICT(p, "t", RULES_IDEMPOTENT, "{}", RULES_DENY, -1, "no rule matched");
  VERDICT(p, "t", RULES_LOCAL_MUTATION, "{}", RULES_REQUIRE_APPROVAL, 1, "writes need a human");
  VERDICT(p, "t", RULES_REMOTE_MUTATION, "{}", RULES_REQUIRE_APPROVAL, 1, "writes need a human");
  VERDICT(p, "t", RULES_DESTRUCTIVE, "{}", RULES_ABORT, 2, "matched rule 2");
  VERDICT(p, "t", (rules_effect)99, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
  /* Tool and effect must both match. */
  p = load("{\"rules\":[{\"tool\":\"fs_*\",\"effect\":\"idempotent\",\"action\":\"allow\"}]}");
  VERDICT(p, "fs_a", RULES_IDEMPOTENT, "{}", RULES_ALLOW, 0, NULL);
  VERDICT(p, "fs_a", RULES_READ_ONLY, "{}", RULES_DENY, -1, "no rule matched");
  VERDICT(p, "net", RULES_IDEMPOTENT, "{}", RULES_DENY, -1, "no rule matched");
  rules_free(p);
}

static void test_args(void) {
  rules_policy *p = load(
      "{\"rules\":[{\"tool\":\"fs_*\",\"args\":{\"path\":\"secrets/*\"},\"action\":\"deny\","
      "\"reason\":\"secrets are off limits\"},"
      "{\"args\":{\"a\":\"1\",\"b\":\"?\"},\"action\":\"abort\"},"
      "{\"args\":{},\"tool\":\"any\",\"action\":\"require-approval\"},"
      "{\"action\":\"allow\"}]}");
  const char *deny = "secrets are off limits";
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":\"secrets/a/b\"}", RULES_DENY, 0, deny);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"mode\":1,\"path\":\"secrets/\"}", RULES_DENY, 0, deny);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":\"public/x\"}", RULES_ALLOW, 3, NULL);
  /* A missing key, a non-string value, a nested key or non-object args do
   * not match. */
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":5}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":null}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":[\"secrets/x\"]}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":{\"path\":\"secrets/x\"}}", RULES_ALLOW, 3,
          NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"x\":{\"path\":\"secrets/x\"}}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "[\"secrets/x\"]", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "\"secrets/x\"", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "not json", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":\"secrets/x\"", RULES_ALLOW, 3, NULL);
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":\"secrets/x\"} x", RULES_ALLOW, 3, NULL);
  /* Escapes in argument values are decoded before matching. */
  VERDICT(p, "fs_read", RULES_READ_ONLY, "{\"path\":\"secrets\\/\\u0041\"}", RULES_DENY, 0, deny);
  /* Every entry must match. */
  VERDICT(p, "x", RULES_READ_ONLY, "{\"a\":\"1\",\"b\":\"\\u00e9\"}", RULES_ABORT, 1,
          "matched rule 1");
  VERDICT(p, "x", RULES_READ_ONLY, "{\"a\":\"1\",\"b\":\"ee\"}", RULES_ALLOW, 3, NULL);
  VERDICT(p, "x", RULES_READ_ONLY, "{\"a\":\"1\"}", RULES_ALLOW, 3, NULL);
  /* `args: {}` matches any arguments, even ones that are not an object. */
  VERDICT(p, "any", RULES_READ_ONLY, "[1,2]", RULES_REQUIRE_APPROVAL, 2, "matched rule 2");
  /* Deeply nested values elsewhere in the arguments do not stop matching. */
  {
    size_t depth = 5000, n = 0;
    char *args = malloc(2 * depth + 64);
    n += (size_t)sprintf(args, "{\"deep\":");
    for (size_t i = 0; i < depth; i++) args[n++] = '[';
    for (size_t i = 0; i < depth; i++) args[n++] = ']';
    sprintf(args + n, ",\"path\":\"secrets/k\"}");
    VERDICT(p, "fs_write", RULES_READ_ONLY, args, RULES_DENY, 0, deny);
    args[8 + depth] = '}'; /* now malformed: no match */
    VERDICT(p, "fs_write", RULES_READ_ONLY, args, RULES_ALLOW, 3, NULL);
    free(args);
  }
  rules_free(p);
}

static void presentation_is(int line, long rule, const char *tool, size_t tool_len,
                            const char *want) {
  size_t len = 0;
  char *got = rules_presentation(rule, tool, tool_len, &len);
  bool ok = got != NULL && len == strlen(want) && strcmp(got, want) == 0;
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAIL line %d: presentation %s, want %s\n", line, got ? got : "(null)", want);
  }
  free(got);
}

static void test_presentation(void) {
  presentation_is(__LINE__, 2, "fs_write", 8, "{\"rule\":2,\"tool\":\"fs_write\"}");
  presentation_is(__LINE__, -1, "fs_write", 8, "{\"rule\":null,\"tool\":\"fs_write\"}");
  presentation_is(__LINE__, 0, "a\"b\\c\n\t\x01\x1f/\xc3\xa9", 12,
                  "{\"rule\":0,\"tool\":\"a\\\"b\\\\c\\n\\t\\u0001\\u001f/\xc3\xa9\"}");
  presentation_is(__LINE__, 7, "a\0b", 3, "{\"rule\":7,\"tool\":\"a\\u0000b\"}");
  presentation_is(__LINE__, 0, "", 0, "{\"rule\":0,\"tool\":\"\"}");
}

static void test_init_errors(void) {
  /* The README's list, in its order. */
  INIT_ERROR("{", "config: invalid JSON: ...");
  INIT_ERROR("[1]", "config: expected an object");
  INIT_ERROR("\"rules\"", "config: expected an object");
  INIT_ERROR("{\"rule\":[]}", "config: unknown key \"rule\"");
  INIT_ERROR("{}", "config.rules: missing");
  INIT_ERROR("", "config.rules: missing");
  INIT_ERROR(" \n\t", "config.rules: missing");
  INIT_ERROR("{\"rules\":null}", "config.rules: missing");
  INIT_ERROR("{\"default\":\"allow\"}", "config.rules: missing");
  INIT_ERROR("{\"rules\":{}}", "config.rules: expected an array");
  INIT_ERROR("{\"rules\":\"x\"}", "config.rules: expected an array");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\"},{\"action\":\"deny\"},5]}",
             "config.rules[2]: expected an object");
  INIT_ERROR("{\"rules\":[null]}", "config.rules[0]: expected an object");
  INIT_ERROR("{\"rules\":[{\"tools\":\"x\",\"action\":\"allow\"}]}",
             "config.rules[0]: unknown key \"tools\"");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\"},{\"tool\":\"x\"}]}",
             "config.rules[1].action: missing");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\"},{\"action\":null}]}",
             "config.rules[1].action: missing");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\"},{\"action\":\"permit\"}]}",
             "config.rules[1].action: \"permit\" is not one of allow, deny, require-approval, "
             "abort");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\"},{\"action\":true}]}",
             "config.rules[1].action: expected one of allow, deny, require-approval, abort");
  INIT_ERROR("{\"rules\":[{\"effect\":\"write\",\"action\":\"allow\"}]}",
             "config.rules[0].effect: \"write\" is not an effect class");
  INIT_ERROR("{\"rules\":[{\"effect\":[\"read-only\",\"write\"],\"action\":\"allow\"}]}",
             "config.rules[0].effect: \"write\" is not an effect class");
  INIT_ERROR("{\"rules\":[{\"effect\":[],\"action\":\"allow\"}]}",
             "config.rules[0].effect: expected a string or a non-empty array of strings");
  INIT_ERROR("{\"rules\":[{\"effect\":5,\"action\":\"allow\"}]}",
             "config.rules[0].effect: expected a string or a non-empty array of strings");
  INIT_ERROR("{\"rules\":[{\"effect\":[\"read-only\",1],\"action\":\"allow\"}]}",
             "config.rules[0].effect: expected a string or a non-empty array of strings");
  INIT_ERROR("{\"rules\":[{\"effect\":\"Read-Only\",\"action\":\"allow\"}]}",
             "config.rules[0].effect: \"Read-Only\" is not an effect class");
  INIT_ERROR("{\"rules\":[{\"args\":{\"path\":1},\"action\":\"allow\"}]}",
             "config.rules[0].args.path: expected a string");
  INIT_ERROR("{\"rules\":[{\"args\":{\"a\":\"x\",\"path\":null},\"action\":\"allow\"}]}",
             "config.rules[0].args.path: expected a string");
  INIT_ERROR("{\"rules\":[{\"args\":[],\"action\":\"allow\"}]}",
             "config.rules[0].args: expected an object");
  INIT_ERROR("{\"rules\":[],\"default\":\"maybe\"}",
             "config.default: \"maybe\" is not one of allow, deny, require-approval, abort");
  INIT_ERROR("{\"rules\":[],\"default\":1}",
             "config.default: expected one of allow, deny, require-approval, abort");
  /* Other type errors. */
  INIT_ERROR("{\"rules\":[{\"tool\":1,\"action\":\"allow\"}]}",
             "config.rules[0].tool: expected a string");
  INIT_ERROR("{\"rules\":[{\"reason\":[],\"action\":\"deny\"}]}",
             "config.rules[0].reason: expected a string");
  /* The first problem in document order wins. */
  INIT_ERROR("{\"default\":\"maybe\",\"rules\":5}",
             "config.default: \"maybe\" is not one of allow, deny, require-approval, abort");
  INIT_ERROR("{\"rules\":5,\"default\":\"maybe\"}", "config.rules: expected an array");
  INIT_ERROR("{\"rules\":[{\"action\":\"permit\",\"tools\":1}]}",
             "config.rules[0].action: \"permit\" is not one of allow, deny, require-approval, "
             "abort");
  INIT_ERROR("{\"rules\":[{\"tools\":1,\"action\":\"permit\"}]}",
             "config.rules[0]: unknown key \"tools\"");
  INIT_ERROR("{\"rules\":[{\"tool\":\"x\"}],\"extra\":1}", "config.rules[0].action: missing");
  INIT_ERROR("{\"rules\":[{\"effect\":\"write\",\"args\":{\"p\":1}}]}",
             "config.rules[0].effect: \"write\" is not an effect class");
  INIT_ERROR("{\"rules\":[],\"rules\":[]}", "config: duplicate key \"rules\"");
  INIT_ERROR("{\"rules\":[{\"action\":\"allow\",\"action\":\"deny\"}]}",
             "config.rules[0]: duplicate key \"action\"");
  INIT_ERROR("{\"rules\":[{\"args\":{\"p\":\"a\",\"q\":1,\"p\":\"b\"},\"action\":\"allow\"}]}",
             "config.rules[0].args.q: expected a string");
  INIT_ERROR("{\"rules\":[{\"args\":{\"p\":\"a\",\"q\":\"c\",\"p\":\"b\",\"q\":1},"
             "\"action\":\"allow\"}]}",
             "config.rules[0].args: duplicate key \"p\"");
  /* Keys are quoted in messages; a NUL in a path survives. */
  INIT_ERROR("{\"rules\":[],\"a\\\"b\\n\":1}", "config: unknown key \"a\\\"b\\n\"");
  {
    const char *cfg = "{\"rules\":[{\"args\":{\"a\\u0000b\":1},\"action\":\"allow\"}]}";
    static const char want[] = "config.rules[0].args.a\0b: expected a string";
    init_error_n(__LINE__, cfg, strlen(cfg), want, sizeof want - 1);
  }
  /* JSON syntax errors. */
  INIT_ERROR("{\"rules\":[]} x", "config: invalid JSON: trailing characters at line 1 column 14");
  INIT_ERROR("{\"rules\":[],}", "config: invalid JSON: expected a string key at line 1 column 13");
  INIT_ERROR("{\"rules\":[1,]}", "config: invalid JSON: expected a value at line 1 column 13");
  INIT_ERROR("{\n  \"rules\": [\n    01]}",
             "config: invalid JSON: expected `,` or `]` at line 3 column 6");
  INIT_ERROR("{\"rules\":[\"\\x\"]}", "config: invalid JSON: invalid escape...");
  INIT_ERROR("{\"rules\":[\"\\u12\"]}", "config: invalid JSON: invalid \\u escape...");
  INIT_ERROR("{\"rules\":[\"\\ud800\"]}", "config: invalid JSON: lone leading surrogate...");
  INIT_ERROR("{\"rules\":[\"\\ud800\\u0041\"]}", "config: invalid JSON: lone leading surrogate...");
  INIT_ERROR("{\"rules\":[\"\\udc00\"]}", "config: invalid JSON: lone trailing surrogate...");
  INIT_ERROR("{\"rules\":[\"a\nb\"]}", "config: invalid JSON: control character in string...");
  INIT_ERROR("{\"rules\":[\"\xff\"]}", "config: invalid JSON: invalid UTF-8 in string...");
  INIT_ERROR("{\"rules\":[\"\xc0\xaf\"]}", "config: invalid JSON: invalid UTF-8...");  /* overlong */
  INIT_ERROR("{\"rules\":[\"\xed\xa0\x80\"]}", "config: invalid JSON: invalid UTF-8..."); /* surrogate */
  INIT_ERROR("{\"rules\":[\"\xf4\x90\x80\x80\"]}", "config: invalid JSON: invalid UTF-8..."); /* > 10FFFF */
  INIT_ERROR("{\"rules\":[\"\xe2\x82\"]}", "config: invalid JSON: invalid UTF-8..."); /* truncated */
  INIT_ERROR("{\"rules\":[\"abc", "config: invalid JSON: unterminated string...");
  INIT_ERROR("{\"rules\":[\"abc\\", "config: invalid JSON: unterminated string...");
  INIT_ERROR("\xef\xbb\xbf{\"rules\":[]}", "config: invalid JSON: expected a value...");
  INIT_ERROR("{\"rules\":[],\"default\":tru}", "config: invalid JSON: expected a value...");
  INIT_ERROR("{\"rules\":[-]}", "config: invalid JSON: expected a digit...");
  INIT_ERROR("{\"rules\":[1.]}", "config: invalid JSON: expected a digit...");
  INIT_ERROR("{\"rules\":[1e]}", "config: invalid JSON: expected a digit...");
  INIT_ERROR("{\"rules\" []}", "config: invalid JSON: expected `:`...");
  INIT_ERROR("{'rules':[]}", "config: invalid JSON: expected a string key...");
  INIT_ERROR("{\"rules\":[]", "config: invalid JSON: expected `,` or `}`...");
  {
    /* Nesting is capped; a NUL byte is not whitespace. */
    char deep[600];
    size_t n = (size_t)sprintf(deep, "{\"rules\":");
    for (int i = 0; i < 200; i++) deep[n++] = '[';
    deep[n] = 0;
    INIT_ERROR(deep, "config: invalid JSON: nesting deeper than 128 levels...");
    init_error_n(__LINE__, "{\"rules\":[]}\0", 13, "config: invalid JSON: trailing characters...",
                 44);
  }
}

static void test_big_config(void) {
  /* A big document: many rules and a long string. */
  size_t rules = 20000, cap = rules * 64 + 1100000;
  char *big = malloc(cap);
  size_t n = (size_t)sprintf(big, "{\"rules\":[");
  for (size_t i = 0; i < rules; i++)
    n += (size_t)sprintf(big + n, "%s{\"tool\":\"t%zu\",\"action\":\"deny\"}", i ? "," : "", i);
  n += (size_t)sprintf(big + n, ",{\"action\":\"deny\",\"reason\":\"");
  memset(big + n, 'r', 1000000);
  n += 1000000;
  n += (size_t)sprintf(big + n, "\"}]}");
  keel_error big_err = {0};
  rules_policy *p = rules_parse(big, n, &big_err);
  free(big_err.ptr);
  CHECK(p != NULL && rules_count(p) == rules + 1, "big config");
  if (p) {
    rules_verdict v;
    CHECK(rules_evaluate(p, "t19999", 6, RULES_READ_ONLY, "{}", 2, &v) == 0 && v.rule == 19999,
          "big config last");
    CHECK(rules_evaluate(p, "zz", 2, RULES_READ_ONLY, "{}", 2, &v) == 0 &&
              v.rule == (long)rules && v.reason_len == 1000000,
          "big reason");
  }
  rules_free(p);
  free(big);
}

/* Repeated init/evaluate/free; under LeakSanitizer any leak fails the run. */
static void test_no_leaks_across_calls(void) {
  const char *cfg =
      "{\"rules\":[{\"tool\":\"fs_*\",\"args\":{\"path\":\"secrets/*\"},\"action\":\"deny\"},"
      "{\"effect\":[\"local-mutation\"],\"action\":\"require-approval\"}],\"default\":\"allow\"}";
  int ok = 0;
  for (int i = 0; i < 200; i++) {
    rules_policy *p = load(cfg);
    rules_verdict v;
    if (p && rules_evaluate(p, "fs_read", 7, RULES_READ_ONLY, "{\"path\":\"secrets/x\"}", 20, &v) == 0 &&
        v.action == RULES_DENY)
      ok++;
    rules_free(p);
    keel_error err = {0};
    rules_policy *bad = rules_parse("{\"rules\":[{\"action\":\"permit\"}]}", 32, &err);
    if (bad == NULL && err.len > 0) ok++;
    free(err.ptr);
  }
  CHECK(ok == 400, "repeated calls");
}

int main(void) {
  test_actions();
  test_first_match_and_default();
  test_globs();
  test_effects();
  test_args();
  test_presentation();
  test_init_errors();
  test_big_config();
  test_no_leaks_across_calls();
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
