/* The policy-rules logic; see rules.h and ../README.md.
 *
 * Validation walks the config in document order and reports the first
 * problem. A key whose value is `null` counts as absent (like the Rust guest
 * SDK's config reader); a key given twice is an error.
 */
#include "rules.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "keel_guest.h"

#define ACTIONS "allow, deny, require-approval, abort"

static const char *const ACTION_NAMES[] = {"allow", "deny", "require-approval", "abort"};
#define N_EFFECTS 5

typedef struct {
  json_str key, glob;
} arg_cond;

typedef struct {
  const json_str *tool; /* NULL: any tool */
  unsigned effects;     /* bit per rules_effect; 0: any effect */
  const arg_cond *args;
  size_t n_args;
  rules_action action;
  json_str reason;
} rule;

struct rules_policy {
  json_doc *doc; /* owns every string the rules point at */
  rule *rules;
  size_t n;
  rules_action deflt;
};

const char *rules_action_name(rules_action action) {
  return (unsigned)action < 4 ? ACTION_NAMES[action] : "?";
}

size_t rules_count(const rules_policy *policy) { return policy->n; }
rules_action rules_default(const rules_policy *policy) { return policy->deflt; }

static bool str_is(json_str s, const char *lit) {
  return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static bool str_eq(json_str a, json_str b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* ---- validation ----------------------------------------------------------- */
/* Errors and key paths come from the SDK (keel_fail, keel_path_*); paths are
 * allocated in the config's document. */

static bool oom(keel_error *err) {
  err->len = 0; /* the SDK reports out of memory */
  return false;
}

static bool check_action(const json_value *v, keel_str path, rules_action *out,
                         keel_error *err) {
  if (v->type != JSON_STRING) return keel_fail(err, path, "expected one of " ACTIONS);
  for (int a = 0; a < 4; a++) {
    if (str_is(v->u.str, ACTION_NAMES[a])) {
      *out = (rules_action)a;
      return true;
    }
  }
  return keel_failq(err, path, "", v->u.str.ptr, v->u.str.len, " is not one of " ACTIONS);
}

static bool check_effect(const json_value *v, keel_str path, unsigned *out, keel_error *err) {
  static const char *const SHAPE = "expected a string or a non-empty array of strings";
  const json_value *const *items = &v;
  size_t n = 1;
  if (v->type == JSON_ARRAY) {
    items = (const json_value *const *)v->u.arr.items;
    n = v->u.arr.len;
    if (n == 0) return keel_fail(err, path, SHAPE);
  }
  unsigned mask = 0;
  for (size_t i = 0; i < n; i++) {
    const json_value *e = items[i];
    if (e->type != JSON_STRING) return keel_fail(err, path, SHAPE);
    int found = -1;
    for (int k = 0; k < N_EFFECTS; k++)
      if (str_is(e->u.str, keel_effect_name((keel_effect)k))) found = k;
    if (found < 0) return keel_failq(err, path, "", e->u.str.ptr, e->u.str.len, " is not an effect class");
    mask |= 1u << found;
  }
  *out = mask;
  return true;
}

/* Sorts member indices by key, stable by position, to find duplicates. */
static const json_member *sort_members;

static int cmp_member_index(const void *a, const void *b) {
  size_t i = *(const size_t *)a, j = *(const size_t *)b;
  json_str x = sort_members[i].key, y = sort_members[j].key;
  size_t n = x.len < y.len ? x.len : y.len;
  int c = n ? memcmp(x.ptr, y.ptr, n) : 0;
  if (c == 0) c = (x.len > y.len) - (x.len < y.len);
  if (c == 0) c = (i > j) - (i < j);
  return c;
}

/* Index of the first member (in document order) whose key an earlier member
 * already has; `len` when there is none; -1 when out of memory. Runs in
 * O(n log n), so a config with very many keys stays cheap. */
static long first_duplicate(const json_member *members, size_t len) {
  if (len < 2) return (long)len;
  size_t *idx = malloc(len * sizeof *idx);
  if (idx == NULL) return -1;
  for (size_t i = 0; i < len; i++) idx[i] = i;
  sort_members = members;
  qsort(idx, len, sizeof *idx, cmp_member_index);
  size_t first = len;
  for (size_t i = 1; i < len; i++)
    if (str_eq(members[idx[i]].key, members[idx[i - 1]].key) && idx[i] < first) first = idx[i];
  free(idx);
  return (long)first;
}

static bool check_args(json_doc *doc, const json_value *v, keel_str path, rule *r,
                       keel_error *err) {
  if (v->type != JSON_OBJECT) return keel_fail(err, path, "expected an object");
  size_t n = v->u.obj.len;
  const json_member *m = v->u.obj.members;
  long dup = first_duplicate(m, n);
  if (dup < 0) return oom(err);
  arg_cond *conds = json_doc_alloc(doc, n * sizeof *conds);
  if (conds == NULL) return oom(err);
  for (size_t i = 0; i < n; i++) {
    if ((long)i == dup) return keel_failq(err, path, "duplicate key ", m[i].key.ptr, m[i].key.len, "");
    if (m[i].value->type != JSON_STRING) {
      keel_str kpath = keel_path_key(doc, path, m[i].key.ptr, m[i].key.len);
      return kpath.ptr ? keel_fail(err, kpath, "expected a string") : oom(err);
    }
    conds[i].key = m[i].key;
    conds[i].glob = m[i].value->u.str;
  }
  r->args = conds;
  r->n_args = n;
  return true;
}

enum { K_TOOL, K_EFFECT, K_ARGS, K_ACTION, K_REASON, N_KEYS };
static const char *const RULE_KEYS[N_KEYS] = {"tool", "effect", "args", "action", "reason"};

static bool check_rule(json_doc *doc, size_t index, const json_value *v, keel_str path,
                       rule *r, keel_error *err) {
  if (v->type != JSON_OBJECT) return keel_fail(err, path, "expected an object");
  memset(r, 0, sizeof *r);
  bool seen[N_KEYS] = {false}, has_action = false, has_reason = false;
  for (size_t i = 0; i < v->u.obj.len; i++) {
    const json_member *m = &v->u.obj.members[i];
    int k = 0;
    while (k < N_KEYS && !str_is(m->key, RULE_KEYS[k])) k++;
    if (k == N_KEYS) return keel_failq(err, path, "unknown key ", m->key.ptr, m->key.len, "");
    if (seen[k]) return keel_failq(err, path, "duplicate key ", m->key.ptr, m->key.len, "");
    seen[k] = true;
    const json_value *val = m->value;
    if (val->type == JSON_NULL) continue;
    keel_str kpath = keel_path_key(doc, path, RULE_KEYS[k], strlen(RULE_KEYS[k]));
    if (kpath.ptr == NULL) return oom(err);
    bool ok = true;
    switch (k) {
      case K_TOOL:
        if (val->type == JSON_STRING) r->tool = &val->u.str;
        else ok = keel_fail(err, kpath, "expected a string");
        break;
      case K_EFFECT: ok = check_effect(val, kpath, &r->effects, err); break;
      case K_ARGS: ok = check_args(doc, val, kpath, r, err); break;
      case K_ACTION:
        ok = check_action(val, kpath, &r->action, err);
        has_action = true;
        break;
      case K_REASON:
        if (val->type == JSON_STRING) {
          r->reason = val->u.str;
          has_reason = true;
        } else {
          ok = keel_fail(err, kpath, "expected a string");
        }
        break;
    }
    if (!ok) return false;
  }
  if (!has_action) {
    keel_str kpath = keel_path_key(doc, path, "action", 6);
    return kpath.ptr ? keel_fail(err, kpath, "missing") : oom(err);
  }
  if (!has_reason) {
    static const char PREFIX[] = "matched rule ";
    char num[24];
    size_t digits = json_fmt_uint(num, index), n = sizeof PREFIX - 1 + digits;
    char *s = json_doc_alloc(doc, n + 1);
    if (s == NULL) return oom(err);
    memcpy(s, PREFIX, sizeof PREFIX - 1);
    memcpy(s + sizeof PREFIX - 1, num, digits + 1);
    r->reason.ptr = s;
    r->reason.len = n;
  }
  return true;
}

static bool check_config(rules_policy *p, const keel_obj *root, keel_error *err) {
  const json_value *obj = root->value;
  bool seen_rules = false, seen_default = false, has_rules = false;
  for (size_t i = 0; i < obj->u.obj.len; i++) {
    const json_member *m = &obj->u.obj.members[i];
    const json_value *v = m->value;
    bool is_rules = str_is(m->key, "rules");
    if (!is_rules && !str_is(m->key, "default"))
      return keel_failq(err, root->path, "unknown key ", m->key.ptr, m->key.len, "");
    bool *seen = is_rules ? &seen_rules : &seen_default;
    if (*seen) return keel_failq(err, root->path, "duplicate key ", m->key.ptr, m->key.len, "");
    *seen = true;
    if (v->type == JSON_NULL) continue;
    keel_str path = keel_path_key(p->doc, root->path, m->key.ptr, m->key.len);
    if (path.ptr == NULL) return oom(err);
    if (!is_rules) {
      if (!check_action(v, path, &p->deflt, err)) return false;
    } else {
      if (v->type != JSON_ARRAY) return keel_fail(err, path, "expected an array");
      size_t n = v->u.arr.len;
      if (n > SIZE_MAX / sizeof(rule)) return oom(err);
      p->rules = json_doc_alloc(p->doc, n * sizeof(rule));
      if (p->rules == NULL) return oom(err);
      for (size_t j = 0; j < n; j++) {
        keel_str rpath = keel_path_index(p->doc, path, j);
        if (rpath.ptr == NULL) return oom(err);
        if (!check_rule(p->doc, j, v->u.arr.items[j], rpath, &p->rules[j], err)) return false;
      }
      p->n = n;
      has_rules = true;
    }
  }
  if (!has_rules) {
    keel_str path = keel_path_key(p->doc, root->path, "rules", 5);
    return path.ptr ? keel_fail(err, path, "missing") : oom(err);
  }
  return true;
}

rules_policy *rules_parse(const char *config, size_t len, keel_error *err) {
  rules_policy *p = calloc(1, sizeof *p);
  if (p == NULL) return NULL;
  p->deflt = RULES_DENY;
  keel_obj root;
  /* The SDK reads an empty config as {} and words a JSON error like the others. */
  if (!keel_config_parse(config, len, &p->doc, &root, err) || !check_config(p, &root, err)) {
    rules_free(p);
    return NULL;
  }
  return p;
}

void rules_free(rules_policy *policy) {
  if (policy == NULL) return;
  json_doc_free(policy->doc);
  free(policy);
}

/* ---- evaluation ----------------------------------------------------------- */

/* Length of the UTF-8 character at s[i] (1 for a stray byte). */
static size_t char_len(const unsigned char *s, size_t i, size_t len) {
  unsigned char c = s[i];
  size_t n = c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
  return n <= len - i ? n : len - i;
}

/* Greedy matching with backtracking to the last `*`: O(len(pat) * len(s))
 * at worst, never exponential. A literal match keeps both sides on character
 * boundaries, so `?` and backtracking can step by whole characters. */
bool rules_glob(const char *pattern, size_t pat_len, const char *str, size_t s_len) {
  const unsigned char *pat = (const unsigned char *)pattern, *s = (const unsigned char *)str;
  size_t p = 0, t = 0, star_p = SIZE_MAX, star_t = 0;
  while (t < s_len) {
    if (p < pat_len && pat[p] == '*') {
      star_p = ++p;
      star_t = t;
    } else if (p < pat_len && pat[p] == '?') {
      p++;
      t += char_len(s, t, s_len);
    } else if (p < pat_len && pat[p] == s[t]) {
      p++;
      t++;
    } else if (star_p != SIZE_MAX) {
      star_t += char_len(s, star_t, s_len);
      t = star_t;
      p = star_p;
    } else {
      return false;
    }
  }
  while (p < pat_len && pat[p] == '*') p++;
  return p == pat_len;
}

static bool args_match(const rule *r, const json_doc *args) {
  const json_value *root = args->root;
  for (size_t c = 0; c < r->n_args; c++) {
    const json_value *found = NULL;
    for (size_t i = root->u.obj.len; i-- > 0;) { /* the last one wins */
      if (str_eq(root->u.obj.members[i].key, r->args[c].key)) {
        found = root->u.obj.members[i].value;
        break;
      }
    }
    if (found == NULL || found->type != JSON_STRING) return false;
    if (!rules_glob(r->args[c].glob.ptr, r->args[c].glob.len, found->u.str.ptr, found->u.str.len))
      return false;
  }
  return true;
}

int rules_evaluate(const rules_policy *policy, const char *tool, size_t tool_len,
                   rules_effect effect, const char *args, size_t args_len,
                   rules_verdict *out) {
  json_doc *args_doc = NULL;
  int args_state = 0; /* 0: not parsed yet, 1: an object, 2: not an object */
  for (size_t i = 0; i < policy->n; i++) {
    const rule *r = &policy->rules[i];
    if (r->tool != NULL && !rules_glob(r->tool->ptr, r->tool->len, tool, tool_len)) continue;
    if (r->effects != 0 && ((unsigned)effect >= N_EFFECTS || !(r->effects & (1u << effect))))
      continue;
    if (r->n_args > 0) {
      if (args_state == 0) {
        int status;
        args_doc = json_parse_shallow(args, args_len, &status);
        if (status < 0) return -1;
        args_state = status == 1 ? 1 : 2;
      }
      if (args_state != 1 || !args_match(r, args_doc)) continue;
    }
    out->action = r->action;
    out->rule = (long)i;
    out->reason = r->action == RULES_ALLOW ? NULL : r->reason.ptr;
    out->reason_len = r->action == RULES_ALLOW ? 0 : r->reason.len;
    json_doc_free(args_doc);
    return 0;
  }
  json_doc_free(args_doc);
  static const char NO_MATCH[] = "no rule matched";
  out->action = policy->deflt;
  out->rule = -1;
  out->reason = policy->deflt == RULES_ALLOW ? NULL : NO_MATCH;
  out->reason_len = policy->deflt == RULES_ALLOW ? 0 : sizeof NO_MATCH - 1;
  return 0;
}

char *rules_presentation(long rule, const char *tool, size_t tool_len, size_t *len) {
  json_buf b = {0};
  char num[24];
  if (rule < 0) memcpy(num, "null", 5);
  else json_fmt_uint(num, (unsigned long long)rule);
  if (!(json_buf_append_str(&b, "{\"rule\":") && json_buf_append_str(&b, num) &&
        json_buf_append_str(&b, ",\"tool\":") && json_buf_append_quoted(&b, tool, tool_len) &&
        json_buf_append_str(&b, "}"))) {
    free(b.ptr);
    return NULL;
  }
  *len = b.len;
  return b.ptr;
}
