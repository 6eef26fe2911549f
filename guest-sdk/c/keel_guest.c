/* keel-guest for C: the one source file; see keel_guest.h and README.md.
 *
 * Sections: JSON, errors, answers, the view, config, log and model, and (with
 * -DKEEL_WORLD_*) the world's bindings and exports.
 */
#include "keel_guest.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


/* ---- arena ------------------------------------------------------------ */

#define ARENA_BLOCK 8192
#define ARENA_ALIGN 16

typedef struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  _Alignas(ARENA_ALIGN) unsigned char data[];
} arena_block;

struct json_arena {
  arena_block *head;
};

static void *arena_alloc(json_arena *a, size_t size) {
  if (size > SIZE_MAX / 2) return NULL;
  size = (size + (ARENA_ALIGN - 1)) & ~(size_t)(ARENA_ALIGN - 1);
  if (size == 0) size = ARENA_ALIGN;
  arena_block *b = a->head;
  if (b == NULL || b->cap - b->used < size) {
    size_t cap = size > ARENA_BLOCK / 4 ? size : ARENA_BLOCK;
    if (cap > SIZE_MAX - sizeof(arena_block)) return NULL;
    arena_block *nb = malloc(sizeof(arena_block) + cap);
    if (nb == NULL) return NULL;
    nb->used = 0;
    nb->cap = cap;
    if (b != NULL && cap != ARENA_BLOCK) {
      /* A big one-off allocation: keep filling the current block after it. */
      nb->next = b->next;
      b->next = nb;
      nb->used = size;
      return nb->data;
    }
    nb->next = b;
    a->head = b = nb;
  }
  void *p = b->data + b->used;
  b->used += size;
  return p;
}

static void arena_free(json_arena *a) {
  arena_block *b = a->head;
  while (b != NULL) {
    arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
}

void *json_doc_alloc(json_doc *doc, size_t size) { return arena_alloc(doc->arena, size); }

void json_doc_free(json_doc *doc) {
  if (doc == NULL) return;
  arena_free(doc->arena);
  free(doc);
}

/* The doc and its arena header are one allocation, the doc first. */
static json_doc *new_doc(void) {
  struct both {
    json_doc doc;
    json_arena arena;
  } *b = malloc(sizeof *b);
  if (b == NULL) return NULL;
  b->arena.head = NULL;
  b->doc.arena = &b->arena;
  b->doc.root = NULL;
  return &b->doc; /* first member: free(doc) frees both */
}

/* ---- parser state ------------------------------------------------------ */

typedef struct {
  const unsigned char *s;
  size_t len, pos;
  json_arena *arena; /* NULL: validate strings without storing them */
  const char *err;   /* static message; NULL while all is well */
  size_t err_pos;
  bool oom;
} parser;

static bool fail(parser *p, const char *msg) {
  if (p->err == NULL) {
    p->err = msg;
    p->err_pos = p->pos;
  }
  return false;
}

static bool fail_oom(parser *p) {
  p->oom = true;
  return fail(p, "out of memory");
}

static void skip_ws(parser *p) {
  while (p->pos < p->len) {
    unsigned char c = p->s[p->pos];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->pos++;
  }
}

static int peek(const parser *p) { return p->pos < p->len ? p->s[p->pos] : -1; }

/* Length of the valid UTF-8 sequence at s (RFC 3629), 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t avail) {
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
  } else
    return 0;
  if (avail < n) return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if (s[i] < 0x80 || s[i] > 0xBF) return 0;
  return n;
}

static int hex4(const unsigned char *s) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    int c = s[i], d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

static size_t put_utf8(unsigned char *out, uint32_t cp) {
  if (cp < 0x80) {
    out[0] = (unsigned char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (unsigned char)(0xC0 | (cp >> 6));
    out[1] = (unsigned char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (unsigned char)(0xE0 | (cp >> 12));
    out[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (unsigned char)(0xF0 | (cp >> 18));
  out[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Parses the string at p->pos (a `"`). With an arena, stores the decoded
 * text in *out; without one, only checks it. The decoded text is never
 * longer than the raw one: every escape is at least as long as its UTF-8. */
static bool parse_string(parser *p, json_str *out) {
  size_t start = ++p->pos, end = start;
  while (end < p->len && p->s[end] != '"') end += (p->s[end] == '\\') ? 2 : 1;
  if (end >= p->len) {
    p->pos = p->len;
    return fail(p, "unterminated string");
  }
  unsigned char *buf = NULL;
  size_t n = 0;
  if (p->arena != NULL) {
    buf = arena_alloc(p->arena, end - start + 1);
    if (buf == NULL) return fail_oom(p);
  }
  for (;;) {
    unsigned char c = p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c == '\\') {
      if (p->pos + 1 >= p->len) return fail(p, "unterminated string");
      unsigned char e = p->s[p->pos + 1], d;
      uint32_t cp;
      switch (e) {
        case '"': d = '"'; break;
        case '\\': d = '\\'; break;
        case '/': d = '/'; break;
        case 'b': d = '\b'; break;
        case 'f': d = '\f'; break;
        case 'n': d = '\n'; break;
        case 'r': d = '\r'; break;
        case 't': d = '\t'; break;
        case 'u': {
          int h = p->pos + 6 <= p->len ? hex4(p->s + p->pos + 2) : -1;
          if (h < 0) return fail(p, "invalid \\u escape");
          cp = (uint32_t)h;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone trailing surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            int lo = -1;
            if (p->pos + 12 <= p->len && p->s[p->pos + 6] == '\\' && p->s[p->pos + 7] == 'u')
              lo = hex4(p->s + p->pos + 8);
            if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, "lone leading surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            p->pos += 6;
          }
          p->pos += 6;
          if (buf != NULL) n += put_utf8(buf + n, cp);
          continue;
        }
        default:
          p->pos++;
          return fail(p, "invalid escape");
      }
      if (buf != NULL) buf[n++] = d;
      p->pos += 2;
    } else if (c < 0x20) {
      return fail(p, "control character in string");
    } else {
      size_t k = utf8_seq(p->s + p->pos, p->len - p->pos);
      if (k == 0) return fail(p, "invalid UTF-8 in string");
      if (buf != NULL) memcpy(buf + n, p->s + p->pos, k);
      n += k;
      p->pos += k;
    }
  }
  if (buf != NULL) {
    buf[n] = '\0';
    out->ptr = (const char *)buf;
    out->len = n;
  }
  return true;
}

static bool digits(parser *p) {
  size_t start = p->pos;
  while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
  return p->pos > start || fail(p, "expected a digit");
}

static bool parse_number(parser *p) {
  if (peek(p) == '-') p->pos++;
  if (peek(p) == '0') {
    p->pos++;
  } else if (peek(p) >= '1' && peek(p) <= '9') {
    digits(p);
  } else {
    return fail(p, "expected a digit");
  }
  if (peek(p) == '.') {
    p->pos++;
    if (!digits(p)) return false;
  }
  if (peek(p) == 'e' || peek(p) == 'E') {
    p->pos++;
    if (peek(p) == '+' || peek(p) == '-') p->pos++;
    if (!digits(p)) return false;
  }
  return true;
}

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0) return fail(p, "expected a value");
  p->pos += n;
  return true;
}

/* A scalar (not an array or object) starting at p->pos. */
static bool parse_scalar(parser *p, json_value *v) {
  int c = peek(p);
  switch (c) {
    case '"': v->type = JSON_STRING; return parse_string(p, &v->u.str);
    case 't': v->type = JSON_TRUE; return literal(p, "true");
    case 'f': v->type = JSON_FALSE; return literal(p, "false");
    case 'n': v->type = JSON_NULL; return literal(p, "null");
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        v->type = JSON_NUMBER;
        size_t start = p->pos;
        if (!parse_number(p)) return false;
        if (p->arena != NULL) { /* the number keeps its text, in u.str */
          size_t n = p->pos - start;
          char *t = arena_alloc(p->arena, n + 1);
          if (t == NULL) return fail_oom(p);
          memcpy(t, p->s + start, n);
          t[n] = '\0';
          v->u.str.ptr = t;
          v->u.str.len = n;
        }
        return true;
      }
      return fail(p, c < 0 ? "unexpected end of input" : "expected a value");
  }
}

/* ---- building values (recursive, depth-limited) ------------------------ */

static json_value *parse_value(parser *p, int depth);

/* A growable array of `elem`-sized items in malloc'd memory. */
typedef struct {
  void *ptr;
  size_t len, cap;
} vec;

static bool vec_push(vec *v, const void *item, size_t elem) {
  if (v->len == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    if (cap > SIZE_MAX / elem) return false;
    void *np = realloc(v->ptr, cap * elem);
    if (np == NULL) return false;
    v->ptr = np;
    v->cap = cap;
  }
  memcpy((char *)v->ptr + v->len * elem, item, elem);
  v->len++;
  return true;
}

/* Moves the vector's items into the arena. */
static void *vec_finish(parser *p, vec *v, size_t elem) {
  void *out = arena_alloc(p->arena, v->len * elem);
  if (out != NULL && v->len) memcpy(out, v->ptr, v->len * elem);
  free(v->ptr);
  v->ptr = NULL;
  if (out == NULL) fail_oom(p);
  return out;
}

static bool parse_array(parser *p, json_value *v, int depth) {
  vec items = {0};
  p->pos++; /* [ */
  skip_ws(p);
  if (peek(p) == ']') {
    p->pos++;
  } else {
    for (;;) {
      json_value *item = parse_value(p, depth);
      if (item == NULL) goto error;
      if (!vec_push(&items, &item, sizeof item)) {
        fail_oom(p);
        goto error;
      }
      skip_ws(p);
      int c = peek(p);
      p->pos++;
      if (c == ']') break;
      if (c != ',') {
        p->pos--;
        fail(p, "expected `,` or `]`");
        goto error;
      }
    }
  }
  v->type = JSON_ARRAY;
  v->u.arr.len = items.len;
  v->u.arr.items = vec_finish(p, &items, sizeof(json_value *));
  return v->u.arr.items != NULL;
error:
  free(items.ptr);
  return false;
}

static bool parse_object(parser *p, json_value *v, int depth) {
  vec members = {0};
  p->pos++; /* { */
  skip_ws(p);
  if (peek(p) == '}') {
    p->pos++;
  } else {
    for (;;) {
      json_member m;
      skip_ws(p);
      if (peek(p) != '"') {
        fail(p, "expected a string key");
        goto error;
      }
      if (!parse_string(p, &m.key)) goto error;
      skip_ws(p);
      if (peek(p) != ':') {
        fail(p, "expected `:`");
        goto error;
      }
      p->pos++;
      m.value = parse_value(p, depth);
      if (m.value == NULL) goto error;
      if (!vec_push(&members, &m, sizeof m)) {
        fail_oom(p);
        goto error;
      }
      skip_ws(p);
      int c = peek(p);
      p->pos++;
      if (c == '}') break;
      if (c != ',') {
        p->pos--;
        fail(p, "expected `,` or `}`");
        goto error;
      }
    }
  }
  v->type = JSON_OBJECT;
  v->u.obj.len = members.len;
  v->u.obj.members = vec_finish(p, &members, sizeof(json_member));
  return v->u.obj.members != NULL;
error:
  free(members.ptr);
  return false;
}

static json_value *parse_value(parser *p, int depth) {
  skip_ws(p);
  json_value *v = arena_alloc(p->arena, sizeof *v);
  if (v == NULL) {
    fail_oom(p);
    return NULL;
  }
  memset(v, 0, sizeof *v);
  int c = peek(p);
  bool ok;
  if (c == '[' || c == '{') {
    if (depth >= JSON_MAX_DEPTH) {
      fail(p, "nesting deeper than 128 levels");
      return NULL;
    }
    ok = c == '[' ? parse_array(p, v, depth + 1) : parse_object(p, v, depth + 1);
  } else {
    ok = parse_scalar(p, v);
  }
  return ok ? v : NULL;
}

/* "msg at line L column C"; the column counts characters, from 1. */
static char *format_error(const parser *p) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < p->err_pos && i < p->len; i++) {
    if (p->s[i] == '\n') {
      line++;
      col = 1;
    } else if ((p->s[i] & 0xC0) != 0x80) {
      col++;
    }
  }
  char num[24];
  json_buf b = {0};
  if (json_buf_append_str(&b, p->err) && json_buf_append_str(&b, " at line ") &&
      json_buf_append(&b, num, json_fmt_uint(num, line)) && json_buf_append_str(&b, " column ") &&
      json_buf_append(&b, num, json_fmt_uint(num, col)))
    return b.ptr;
  free(b.ptr);
  return NULL;
}

json_doc *json_parse(const char *text, size_t len, char **err) {
  if (err != NULL) *err = NULL;
  json_doc *doc = new_doc();
  if (doc == NULL) return NULL;
  parser p = {(const unsigned char *)text, len, 0, doc->arena, NULL, 0, false};
  doc->root = parse_value(&p, 0);
  if (doc->root != NULL) {
    skip_ws(&p);
    if (p.pos < p.len) fail(&p, "trailing characters");
  }
  if (p.err != NULL) {
    if (err != NULL) *err = format_error(&p);
    json_doc_free(doc);
    return NULL;
  }
  return doc;
}

/* ---- shallow scan of an object (iterative, no depth limit) ------------- */

/* Checks one value of any depth with an explicit stack of open containers. */
static bool skip_value(parser *p) {
  vec stack = {0}; /* of char: '[' or '{' */
  bool ok = false;
  for (;;) {
    /* A value. */
    skip_ws(p);
    int c = peek(p);
    if (c == '[' || c == '{') {
      char open = (char)c;
      p->pos++;
      skip_ws(p);
      if (peek(p) == (c == '[' ? ']' : '}')) {
        p->pos++;
      } else {
        if (!vec_push(&stack, &open, 1)) {
          fail_oom(p);
          goto done;
        }
        if (open == '{') {
          if (peek(p) != '"') {
            fail(p, "expected a string key");
            goto done;
          }
          if (!parse_string(p, NULL)) goto done;
          skip_ws(p);
          if (peek(p) != ':') {
            fail(p, "expected `:`");
            goto done;
          }
          p->pos++;
        }
        continue;
      }
    } else {
      json_value scratch;
      if (!parse_scalar(p, &scratch)) goto done;
    }
    /* After a value: close containers or go on to the next item. */
    for (;;) {
      if (stack.len == 0) {
        ok = true;
        goto done;
      }
      char open = ((char *)stack.ptr)[stack.len - 1];
      skip_ws(p);
      c = peek(p);
      if (c == (open == '[' ? ']' : '}')) {
        p->pos++;
        stack.len--;
        continue;
      }
      if (c != ',') {
        fail(p, open == '[' ? "expected `,` or `]`" : "expected `,` or `}`");
        goto done;
      }
      p->pos++;
      if (open == '{') {
        skip_ws(p);
        if (peek(p) != '"') {
          fail(p, "expected a string key");
          goto done;
        }
        if (!parse_string(p, NULL)) goto done;
        skip_ws(p);
        if (peek(p) != ':') {
          fail(p, "expected `:`");
          goto done;
        }
        p->pos++;
      }
      break;
    }
  }
done:
  free(stack.ptr);
  return ok;
}

json_doc *json_parse_shallow(const char *text, size_t len, int *status) {
  json_doc *doc = new_doc();
  if (doc == NULL) {
    *status = -1;
    return NULL;
  }
  parser p = {(const unsigned char *)text, len, 0, doc->arena, NULL, 0, false};
  vec members = {0}; /* of json_member */
  json_value *root = NULL;
  *status = 0;
  skip_ws(&p);
  if (peek(&p) != '{') goto done;
  p.pos++;
  skip_ws(&p);
  if (peek(&p) == '}') {
    p.pos++;
  } else {
    for (;;) {
      json_member m = {{NULL, 0}, NULL};
      skip_ws(&p);
      if (peek(&p) != '"' || !parse_string(&p, &m.key)) goto done;
      skip_ws(&p);
      if (peek(&p) != ':') goto done;
      p.pos++;
      skip_ws(&p);
      m.value = arena_alloc(p.arena, sizeof(json_value));
      if (m.value == NULL) {
        fail_oom(&p);
        goto done;
      }
      memset(m.value, 0, sizeof(json_value));
      switch (peek(&p)) {
        case '"': m.value->type = JSON_STRING; break;
        case '[': m.value->type = JSON_ARRAY; break;
        case '{': m.value->type = JSON_OBJECT; break;
        case 't': m.value->type = JSON_TRUE; break;
        case 'f': m.value->type = JSON_FALSE; break;
        case 'n': m.value->type = JSON_NULL; break;
        default: m.value->type = JSON_NUMBER; break;
      }
      if (m.value->type == JSON_STRING) {
        if (!parse_string(&p, &m.value->u.str)) goto done;
      } else {
        p.arena = NULL; /* nested strings are checked, not stored */
        bool ok = skip_value(&p);
        p.arena = doc->arena;
        if (!ok) goto done;
      }
      if (!vec_push(&members, &m, sizeof m)) {
        fail_oom(&p);
        goto done;
      }
      skip_ws(&p);
      int c = peek(&p);
      if (c == '}') {
        p.pos++;
        break;
      }
      if (c != ',') goto done;
      p.pos++;
    }
  }
  skip_ws(&p);
  if (p.pos != p.len) goto done;
  root = arena_alloc(p.arena, sizeof *root);
  if (root == NULL) {
    fail_oom(&p);
    goto done;
  }
  root->type = JSON_OBJECT;
  root->u.obj.len = members.len;
  root->u.obj.members = vec_finish(&p, &members, sizeof(json_member));
  if (root->u.obj.members == NULL) goto done;
  doc->root = root;
  *status = 1;
done:
  free(members.ptr);
  if (p.oom) *status = -1;
  if (*status != 1) {
    json_doc_free(doc);
    return NULL;
  }
  return doc;
}

/* ---- output ------------------------------------------------------------ */

size_t json_fmt_uint(char out[24], unsigned long long v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
  out[n] = '\0';
  return n;
}

bool json_buf_append(json_buf *b, const char *s, size_t len) {
  if (len > SIZE_MAX - b->len - 1) return false;
  if (b->len + len + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + len + 1) {
      if (cap > SIZE_MAX / 2) {
        cap = b->len + len + 1;
        break;
      }
      cap *= 2;
    }
    char *np = realloc(b->ptr, cap);
    if (np == NULL) return false;
    b->ptr = np;
    b->cap = cap;
  }
  if (len) memcpy(b->ptr + b->len, s, len);
  b->len += len;
  b->ptr[b->len] = '\0';
  return true;
}

bool json_buf_append_str(json_buf *b, const char *s) { return json_buf_append(b, s, strlen(s)); }

/* Escapes like serde_json: `"`, `\` and control characters; the rest as is. */
bool json_buf_append_quoted(json_buf *b, const char *s, size_t len) {
  static const char hex[] = "0123456789abcdef";
  if (!json_buf_append(b, "\"", 1)) return false;
  size_t run = 0; /* start of the pending unescaped run */
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[7];
    size_t n = 2;
    esc[0] = '\\';
    switch (c) {
      case '"': esc[1] = '"'; break;
      case '\\': esc[1] = '\\'; break;
      case '\b': esc[1] = 'b'; break;
      case '\f': esc[1] = 'f'; break;
      case '\n': esc[1] = 'n'; break;
      case '\r': esc[1] = 'r'; break;
      case '\t': esc[1] = 't'; break;
      default:
        if (c >= 0x20) continue;
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        n = 6;
    }
    if (!json_buf_append(b, s + run, i - run) || !json_buf_append(b, esc, n)) return false;
    run = i + 1;
  }
  return json_buf_append(b, s + run, len - run) && json_buf_append(b, "\"", 1);
}

/* ==== Errors ============================================================= */

bool keel_failq(keel_error *err, keel_str path, const char *before, const char *quoted,
                size_t quoted_len, const char *after) {
  err->len = 0;
  if (err->ptr != NULL) err->ptr[0] = '\0';
  bool ok = json_buf_append(err, path.ptr, path.len) && json_buf_append_str(err, ": ") &&
            json_buf_append_str(err, before) &&
            (quoted == NULL || json_buf_append_quoted(err, quoted, quoted_len)) &&
            json_buf_append_str(err, after);
  if (!ok) err->len = 0; /* out of memory: the SDK reports that instead */
  return false;
}

bool keel_fail(keel_error *err, keel_str path, const char *why) {
  return keel_failq(err, path, why, NULL, 0, "");
}

/* ==== Strings and answers ================================================ */

/* Strings the SDK owns are malloc'd; a zero-length string is never
 * allocated and never freed, as the generated bindings do. */
static void kg_str_free(keel_str *s) {
  if (s->len > 0) free((void *)s->ptr);
  s->ptr = NULL;
  s->len = 0;
}

static bool kg_str_dup(keel_str *out, const char *s, size_t len) {
  out->ptr = NULL;
  out->len = 0;
  if (len == 0) return true;
  char *p = malloc(len);
  if (p == NULL) return false;
  memcpy(p, s, len);
  out->ptr = p;
  out->len = len;
  return true;
}

static bool kg_is_json(const char *s, size_t len) {
  json_doc *doc = json_parse(s, len, NULL);
  json_doc_free(doc);
  return doc != NULL;
}

const char *keel_effect_name(keel_effect e) {
  static const char *const NAMES[] = {"read-only", "idempotent", "local-mutation",
                                      "remote-mutation", "destructive"};
  return (unsigned)e < 5 ? NAMES[e] : "?";
}

bool keel_decision_call_n(keel_decision *out, keel_str tool, keel_str args) {
  memset(out, 0, sizeof *out);
  if (args.ptr == NULL) args = (keel_str){"{}", 2};
  if (!kg_is_json(args.ptr, args.len)) return false;
  out->tag = KEEL_DECISION_CALL;
  if (!kg_str_dup(&out->val.call.tool, tool.ptr, tool.len)) return false;
  if (!kg_str_dup(&out->val.call.arguments, args.ptr, args.len)) {
    kg_str_free(&out->val.call.tool);
    return false;
  }
  return true;
}

bool keel_decision_call(keel_decision *out, const char *tool, const char *args) {
  keel_str a = {args, args == NULL ? 0 : strlen(args)};
  return keel_decision_call_n(out, (keel_str){tool, strlen(tool)}, a);
}

bool keel_decision_complete_n(keel_decision *out, keel_str json) {
  memset(out, 0, sizeof *out);
  if (json.ptr == NULL) json = (keel_str){"null", 4};
  if (!kg_is_json(json.ptr, json.len)) return false;
  out->tag = KEEL_DECISION_COMPLETE;
  return kg_str_dup(&out->val.complete, json.ptr, json.len);
}

bool keel_decision_complete(keel_decision *out, const char *json) {
  return keel_decision_complete_n(out, (keel_str){json, json == NULL ? 0 : strlen(json)});
}

bool keel_decision_fail(keel_decision *out, const char *reason) {
  memset(out, 0, sizeof *out);
  out->tag = KEEL_DECISION_FAIL;
  return kg_str_dup(&out->val.fail, reason, strlen(reason));
}

bool keel_decision_invalid(keel_decision *out, const char *reason) {
  memset(out, 0, sizeof *out);
  out->tag = KEEL_DECISION_INVALID;
  return kg_str_dup(&out->val.invalid, reason, strlen(reason));
}

void keel_decision_free(keel_decision *d) {
  switch (d->tag) {
    case KEEL_DECISION_CALL:
      kg_str_free(&d->val.call.tool);
      kg_str_free(&d->val.call.arguments);
      break;
    case KEEL_DECISION_COMPLETE: kg_str_free(&d->val.complete); break;
    case KEEL_DECISION_FAIL: kg_str_free(&d->val.fail); break;
    case KEEL_DECISION_INVALID: kg_str_free(&d->val.invalid); break;
  }
}

void keel_verdict_allow(keel_verdict *out) {
  memset(out, 0, sizeof *out);
  out->tag = KEEL_VERDICT_ALLOW;
}

bool keel_verdict_deny(keel_verdict *out, const char *reason, size_t len) {
  memset(out, 0, sizeof *out);
  out->tag = KEEL_VERDICT_DENY;
  return kg_str_dup(&out->val.deny, reason, len);
}

bool keel_verdict_abort(keel_verdict *out, const char *reason, size_t len) {
  memset(out, 0, sizeof *out);
  out->tag = KEEL_VERDICT_ABORT;
  return kg_str_dup(&out->val.abort, reason, len);
}

bool keel_verdict_require_approval(keel_verdict *out, const char *reason, size_t len,
                                   const char *presentation, size_t presentation_len) {
  memset(out, 0, sizeof *out);
  if (presentation == NULL) {
    presentation = "null";
    presentation_len = 4;
  }
  if (!kg_is_json(presentation, presentation_len)) return false;
  out->tag = KEEL_VERDICT_REQUIRE_APPROVAL;
  keel_approval_request *r = &out->val.require_approval;
  if (!kg_str_dup(&r->reason, reason, len)) return false;
  if (!kg_str_dup(&r->presentation, presentation, presentation_len)) {
    kg_str_free(&r->reason);
    return false;
  }
  return true;
}

void keel_verdict_free(keel_verdict *v) {
  switch (v->tag) {
    case KEEL_VERDICT_DENY: kg_str_free(&v->val.deny); break;
    case KEEL_VERDICT_ABORT: kg_str_free(&v->val.abort); break;
    case KEEL_VERDICT_REQUIRE_APPROVAL:
      kg_str_free(&v->val.require_approval.reason);
      kg_str_free(&v->val.require_approval.presentation);
      break;
  }
}

static void kg_tool_spec_free(keel_tool_spec *s) {
  kg_str_free(&s->name);
  kg_str_free(&s->description);
  kg_str_free(&s->parameters);
}

bool keel_tool_specs_add(keel_tool_specs_out *out, const char *name, const char *description,
                         const char *parameters, keel_effect effect) {
  if (parameters == NULL) parameters = "{\"type\":\"object\"}";
  if ((unsigned)effect > KEEL_DESTRUCTIVE || !kg_is_json(parameters, strlen(parameters)))
    return false;
  if (out->len == out->cap) {
    size_t cap = out->cap ? out->cap * 2 : 4;
    keel_tool_spec *p = realloc(out->ptr, cap * sizeof *p);
    if (p == NULL) return false;
    out->ptr = p;
    out->cap = cap;
  }
  keel_tool_spec *s = &out->ptr[out->len];
  memset(s, 0, sizeof *s);
  s->effect = (uint8_t)effect;
  if (!kg_str_dup(&s->name, name, strlen(name)) ||
      !kg_str_dup(&s->description, description ? description : "",
                  description ? strlen(description) : 0) ||
      !kg_str_dup(&s->parameters, parameters, strlen(parameters))) {
    kg_tool_spec_free(s);
    return false;
  }
  out->len++;
  return true;
}

void keel_tool_specs_free(keel_tool_specs_out *out) {
  for (size_t i = 0; i < out->len; i++) kg_tool_spec_free(&out->ptr[i]);
  free(out->ptr);
  memset(out, 0, sizeof *out);
}

/* ==== The view =========================================================== */

struct keel_view {
  bool started;
  keel_run_info run;
  keel_step *steps;
  size_t n_steps, cap_steps;
  keel_approval *approvals;
  size_t n_approvals, cap_approvals;
  size_t decided;
};

static void kg_call_free(keel_tool_call *c) {
  kg_str_free(&c->tool);
  kg_str_free(&c->arguments);
}

static void kg_step_free(keel_step *s) {
  if (s->decision.is_some) keel_decision_free(&s->decision.val);
  if (s->verdict.is_some) keel_verdict_free(&s->verdict.val);
  if (s->observation.is_some) kg_str_free(&s->observation.val.content);
}

static void kg_approval_free(keel_approval *a) {
  kg_str_free(&a->id);
  kg_call_free(&a->call);
  kg_str_free(&a->reason);
  if (a->decided_by.is_some) kg_str_free(&a->decided_by.val);
  if (a->note.is_some) kg_str_free(&a->note.val);
}

static void kg_run_free(keel_run_info *r) {
  kg_str_free(&r->id);
  kg_str_free(&r->goal);
}

void keel_view_delta_free(keel_view_delta *d) {
  kg_run_free(&d->run);
  for (size_t i = 0; i < d->steps.len; i++) kg_step_free(&d->steps.ptr[i]);
  for (size_t i = 0; i < d->approvals.len; i++) kg_approval_free(&d->approvals.ptr[i]);
  if (d->steps.len > 0) free(d->steps.ptr);
  if (d->approvals.len > 0) free(d->approvals.ptr);
  d->steps.len = d->approvals.len = 0;
}

keel_view *keel_view_new(void) { return calloc(1, sizeof(keel_view)); }

static void kg_view_clear(keel_view *v) {
  for (size_t i = 0; i < v->n_steps; i++) kg_step_free(&v->steps[i]);
  for (size_t i = 0; i < v->n_approvals; i++) kg_approval_free(&v->approvals[i]);
  v->n_steps = v->n_approvals = v->decided = 0;
}

void keel_view_free(keel_view *v) {
  if (v == NULL) return;
  kg_view_clear(v);
  kg_run_free(&v->run);
  free(v->steps);
  free(v->approvals);
  free(v);
}

static bool kg_reserve(void **ptr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t cap2 = *cap ? *cap : 8;
  while (cap2 < need) cap2 *= 2;
  void *p = realloc(*ptr, cap2 * elem);
  if (p == NULL) return false;
  *ptr = p;
  *cap = cap2;
  return true;
}

static bool kg_delta_error(keel_error *err, const char *a, uint32_t x, const char *b, uint32_t y,
                           const char *c, const uint32_t *z) {
  char n1[24], n2[24], n3[24];
  json_fmt_uint(n1, x);
  json_fmt_uint(n2, y);
  if (z != NULL) json_fmt_uint(n3, *z);
  err->len = 0;
  bool ok = json_buf_append_str(err, a) && json_buf_append_str(err, n1) &&
            json_buf_append_str(err, b) && json_buf_append_str(err, n2) &&
            (z == NULL || (json_buf_append_str(err, c) && json_buf_append_str(err, n3)));
  if (!ok) err->len = 0;
  return false;
}

static bool kg_str_eq(keel_str a, keel_str b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

bool keel_view_apply(keel_view *v, keel_view_delta *d, keel_error *err) {
  bool ok = false;
  if (!v->started && !d->reset) {
    json_buf_append_str(err, "view delta: the first delta did not reset the view");
    goto done;
  }
  size_t held = d->reset ? 0 : v->n_steps;
  for (size_t i = 0; i < d->steps.len; i++) {
    const keel_step *s = &d->steps.ptr[i];
    if (s->index > held) {
      kg_delta_error(err, "view delta: step ", s->index, " arrived while only ", (uint32_t)held,
                     " steps are held", NULL);
      json_buf_append_str(err, " steps are held");
      goto done;
    }
    if (s->index == held) {
      held++;
    } else if (!d->reset && s->version <= v->steps[s->index].version) {
      uint32_t old = v->steps[s->index].version;
      kg_delta_error(err, "view delta: step ", s->index, " arrived with version ", s->version,
                     ", not newer than the held version ", &old);
      goto done;
    }
  }
  /* Room first, so nothing changes when memory runs out. */
  size_t room = v->n_approvals + d->approvals.len;
  if (!kg_reserve((void **)&v->steps, &v->cap_steps, held, sizeof(keel_step)) ||
      !kg_reserve((void **)&v->approvals, &v->cap_approvals, room, sizeof(keel_approval))) {
    json_buf_append_str(err, "view delta: out of memory");
    goto done;
  }
  if (d->reset) kg_view_clear(v);
  for (size_t i = 0; i < d->steps.len; i++) {
    keel_step *s = &d->steps.ptr[i];
    if (s->decision.is_some) v->decided++;
    if (s->index == v->n_steps) {
      v->steps[v->n_steps++] = *s;
    } else {
      keel_step *old = &v->steps[s->index];
      if (old->decision.is_some) v->decided--;
      kg_step_free(old);
      *old = *s;
    }
  }
  for (size_t i = 0; i < d->approvals.len; i++) {
    keel_approval *a = &d->approvals.ptr[i];
    size_t j = 0;
    while (j < v->n_approvals && !kg_str_eq(v->approvals[j].id, a->id)) j++;
    if (j == v->n_approvals) {
      v->approvals[v->n_approvals++] = *a;
    } else {
      kg_approval_free(&v->approvals[j]);
      v->approvals[j] = *a;
    }
  }
  kg_run_free(&v->run);
  v->run = d->run;
  v->started = true;
  /* Everything in the delta now belongs to the view; only its arrays go. */
  if (d->steps.len > 0) free(d->steps.ptr);
  if (d->approvals.len > 0) free(d->approvals.ptr);
  memset(d, 0, sizeof *d);
  return true;
done:
  if (err->len == 0) json_buf_append_str(err, "view delta: out of memory");
  keel_view_delta_free(d);
  return ok;
}

const keel_run_info *keel_view_run(const keel_view *v) { return &v->run; }

const keel_step *keel_view_steps(const keel_view *v, size_t *len) {
  *len = v->n_steps;
  return v->steps;
}

const keel_approval *keel_view_approvals(const keel_view *v, size_t *len) {
  *len = v->n_approvals;
  return v->approvals;
}

size_t keel_view_decided_steps(const keel_view *v) { return v->decided; }

/* ==== Strict config ====================================================== */

keel_str keel_path_key(json_doc *doc, keel_str path, const char *key, size_t key_len) {
  size_t n = path.len;
  char *p = json_doc_alloc(doc, n + 1 + key_len + 1);
  if (p == NULL) return (keel_str){NULL, 0};
  memcpy(p, path.ptr, n);
  p[n] = '.';
  memcpy(p + n + 1, key, key_len);
  p[n + 1 + key_len] = '\0';
  return (keel_str){p, n + 1 + key_len};
}

keel_str keel_path_index(json_doc *doc, keel_str path, size_t i) {
  char num[24];
  size_t d = json_fmt_uint(num, i), n = path.len;
  char *p = json_doc_alloc(doc, n + d + 3);
  if (p == NULL) return (keel_str){NULL, 0};
  memcpy(p, path.ptr, n);
  p[n] = '[';
  memcpy(p + n + 1, num, d);
  p[n + 1 + d] = ']';
  p[n + 2 + d] = '\0';
  return (keel_str){p, n + 2 + d};
}

static bool kg_oom(keel_error *err) {
  err->len = 0;
  return false;
}

bool keel_obj_of(json_doc *doc, const json_value *v, keel_str path, keel_obj *out,
                 keel_error *err) {
  memset(out, 0, sizeof *out);
  if (v == NULL || v->type != JSON_OBJECT) return keel_fail(err, path, "expected an object");
  out->doc = doc;
  out->value = v;
  out->path = path;
  out->taken = json_doc_alloc(doc, v->u.obj.len + 1);
  if (out->taken == NULL) return kg_oom(err);
  memset(out->taken, 0, v->u.obj.len + 1);
  return true;
}

static bool kg_parse_root(const char *text, size_t len, const char *root, json_doc **doc,
                          keel_obj *out, keel_error *err) {
  *doc = NULL;
  size_t i = 0;
  while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) i++;
  if (i == len) { /* an empty text is {}, as in every SDK */
    text = "{}";
    len = 2;
  }
  char *jerr = NULL;
  *doc = json_parse(text, len, &jerr);
  if (*doc == NULL) {
    if (jerr == NULL) return kg_oom(err);
    keel_fail(err, (keel_str){root, strlen(root)}, "invalid JSON: ");
    if (err->len > 0 && !json_buf_append_str(err, jerr)) err->len = 0;
    free(jerr);
    return false;
  }
  return keel_obj_of(*doc, (*doc)->root, (keel_str){root, strlen(root)}, out, err);
}

bool keel_config_parse(const char *text, size_t len, json_doc **doc, keel_obj *root,
                       keel_error *err) {
  return kg_parse_root(text, len, "config", doc, root, err);
}

bool keel_args_parse(const char *text, size_t len, json_doc **doc, keel_obj *root,
                     keel_error *err) {
  return kg_parse_root(text, len, "arguments", doc, root, err);
}

/* Takes `key` out of `o`: the last member with it wins; `null` is absent. */
static const json_value *kg_take(keel_obj *o, const char *key) {
  size_t klen = strlen(key);
  const json_value *found = NULL;
  for (size_t i = 0; i < o->value->u.obj.len; i++) {
    const json_member *m = &o->value->u.obj.members[i];
    if (m->key.len == klen && memcmp(m->key.ptr, key, klen) == 0) {
      o->taken[i] = 1;
      found = m->value;
    }
  }
  return found != NULL && found->type == JSON_NULL ? NULL : found;
}

/* The value at key, or NULL when absent and not required; false on error. */
static bool kg_get(keel_obj *o, const char *key, bool required, json_type want1, json_type want2,
                   const char *what, const json_value **out, keel_error *err) {
  *out = kg_take(o, key);
  if (*out == NULL && !required) return true;
  keel_str path = keel_path_key(o->doc, o->path, key, strlen(key));
  if (path.ptr == NULL) return kg_oom(err);
  if (*out == NULL) return keel_fail(err, path, "missing");
  if ((*out)->type != want1 && (*out)->type != want2) return keel_fail(err, path, what);
  return true;
}

bool keel_obj_str(keel_obj *o, const char *key, bool required, keel_str *out, keel_error *err) {
  const json_value *v;
  out->ptr = NULL;
  out->len = 0;
  if (!kg_get(o, key, required, JSON_STRING, JSON_STRING, "expected a string", &v, err))
    return false;
  if (v != NULL) {
    out->ptr = v->u.str.ptr;
    out->len = v->u.str.len;
  }
  return true;
}

bool keel_obj_bool(keel_obj *o, const char *key, bool required, bool *out, bool *present,
                   keel_error *err) {
  const json_value *v;
  if (!kg_get(o, key, required, JSON_TRUE, JSON_FALSE, "expected true or false", &v, err))
    return false;
  if (present != NULL) *present = v != NULL;
  if (v != NULL) *out = v->type == JSON_TRUE;
  return true;
}

bool keel_obj_int(keel_obj *o, const char *key, bool required, long long *out, bool *present,
                  keel_error *err) {
  const json_value *v;
  if (!kg_get(o, key, required, JSON_NUMBER, JSON_NUMBER, "expected an integer", &v, err))
    return false;
  if (present != NULL) *present = v != NULL;
  if (v == NULL) return true;
  const char *s = v->u.str.ptr;
  size_t n = v->u.str.len, i = s[0] == '-';
  long long acc = 0;
  keel_str path;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') {
      path = keel_path_key(o->doc, o->path, key, strlen(key));
      return path.ptr ? keel_fail(err, path, "expected an integer") : kg_oom(err);
    }
    int d = s[i] - '0';
    if (acc > (9007199254740991LL - d) / 10) { /* beyond 2^53, as in the JS SDK */
      path = keel_path_key(o->doc, o->path, key, strlen(key));
      return path.ptr ? keel_fail(err, path, "is too large") : kg_oom(err);
    }
    acc = acc * 10 + d;
  }
  *out = s[0] == '-' ? -acc : acc;
  return true;
}

bool keel_obj_obj(keel_obj *o, const char *key, bool required, keel_obj *out, keel_error *err) {
  const json_value *v;
  memset(out, 0, sizeof *out);
  if (!kg_get(o, key, required, JSON_OBJECT, JSON_OBJECT, "expected an object", &v, err))
    return false;
  if (v == NULL) return true;
  keel_str path = keel_path_key(o->doc, o->path, key, strlen(key));
  return path.ptr ? keel_obj_of(o->doc, v, path, out, err) : kg_oom(err);
}

bool keel_obj_array(keel_obj *o, const char *key, bool required, const json_value **out,
                    keel_str *path, keel_error *err) {
  if (!kg_get(o, key, required, JSON_ARRAY, JSON_ARRAY, "expected an array", out, err))
    return false;
  if (path != NULL && *out != NULL) {
    *path = keel_path_key(o->doc, o->path, key, strlen(key));
    if (path->ptr == NULL) return kg_oom(err);
  }
  return true;
}

bool keel_obj_value(keel_obj *o, const char *key, bool required, const json_value **out,
                    keel_error *err) {
  *out = kg_take(o, key);
  if (*out != NULL || !required) return true;
  keel_str path = keel_path_key(o->doc, o->path, key, strlen(key));
  return path.ptr ? keel_fail(err, path, "missing") : kg_oom(err);
}

bool keel_obj_finish(keel_obj *o, keel_error *err) {
  for (size_t i = 0; i < o->value->u.obj.len; i++) {
    if (!o->taken[i]) {
      const json_member *m = &o->value->u.obj.members[i];
      return keel_failq(err, o->path, "unknown key ", m->key.ptr, m->key.len, "");
    }
  }
  return true;
}

/* ==== The world: bindings, log, model, exports =========================== */

#if defined(KEEL_WORLD_AGENT) + defined(KEEL_WORLD_POLICY) + defined(KEEL_WORLD_TOOL) > 1
#error "define only one of KEEL_WORLD_AGENT, KEEL_WORLD_POLICY, KEEL_WORLD_TOOL"
#endif

#if defined(KEEL_WORLD_AGENT)
#include "gen/agent.c"
typedef agent_string_t kg_wstring;
#define KG_WORLD "agent"
/* The component type is embedded by `xtask componentize` from wit/, so the
 * symbol the generated code links against is a no-op. */
void __component_type_object_force_link_agent(void) {}
#elif defined(KEEL_WORLD_POLICY)
#include "gen/policy.c"
typedef policy_string_t kg_wstring;
#define KG_WORLD "policy"
void __component_type_object_force_link_policy(void) {}
#elif defined(KEEL_WORLD_TOOL)
#include "gen/tool.c"
typedef tool_string_t kg_wstring;
#define KG_WORLD "tool"
void __component_type_object_force_link_tool(void) {}
#endif

#ifdef KG_WORLD
/* The SDK's records have the generated records' layout, so what the host
 * sends is taken over as it is and answers are handed back the same way. */
#define KG_SAME(a, b) \
  _Static_assert(sizeof(a) == sizeof(b) && _Alignof(a) == _Alignof(b), #a " must match " #b)
KG_SAME(keel_str, kg_wstring);
KG_SAME(keel_tool_spec, keel_plugin_types_tool_spec_t);
KG_SAME(keel_tool_call, keel_plugin_types_tool_call_t);
KG_SAME(keel_decision, keel_plugin_types_decision_t);
KG_SAME(keel_verdict, keel_plugin_types_verdict_t);
KG_SAME(keel_step, keel_plugin_types_step_t);
KG_SAME(keel_approval, keel_plugin_types_approval_t);
KG_SAME(keel_run_info, keel_plugin_types_run_info_t);
KG_SAME(keel_view_delta, keel_plugin_types_view_delta_t);
_Static_assert(offsetof(keel_step, observation) == offsetof(keel_plugin_types_step_t, observation),
               "step layout");
_Static_assert(offsetof(keel_approval, note) == offsetof(keel_plugin_types_approval_t, note),
               "approval layout");
_Static_assert(offsetof(keel_view_delta, approvals) ==
                   offsetof(keel_plugin_types_view_delta_t, approvals),
               "delta layout");
_Static_assert(KEEL_PLUGIN_TYPES_VERDICT_ABORT == KEEL_VERDICT_ABORT &&
                   KEEL_PLUGIN_TYPES_DECISION_INVALID == KEEL_DECISION_INVALID &&
                   KEEL_PLUGIN_TYPES_EFFECT_DESTRUCTIVE == KEEL_DESTRUCTIVE &&
                   KEEL_PLUGIN_TYPES_LEVEL_ERROR == KEEL_ERROR,
               "enumerations are numbered like the WIT");

void keel_log_n(keel_level level, const char *message, size_t len) {
  kg_wstring s = {(uint8_t *)message, len};
  keel_plugin_log_log((keel_plugin_log_level_t)level, &s); /* borrowed for the call */
}

/* Hands `err` to the host as the call's error; the post-return frees it. */
static void kg_give_error(keel_error *err, const char *what, kg_wstring *out) {
  if (err->len == 0) {
    err->len = 0;
    if (!json_buf_append_str(err, what)) abort(); /* as the generated cabi_realloc does */
  }
  out->ptr = (uint8_t *)err->ptr;
  out->len = err->len;
}
#else
#include <stdio.h>

void keel_log_n(keel_level level, const char *message, size_t len) {
  static const char *const NAMES[] = {"trace", "debug", "info", "warn", "error"};
  fprintf(stderr, "[%s] %.*s\n", (unsigned)level < 5 ? NAMES[level] : "?", (int)len, message);
}
#endif

void keel_log(keel_level level, const char *message) {
  keel_log_n(level, message, strlen(message));
}

void keel_model_response_free(keel_model_response *r) {
  kg_str_free(&r->message.content);
  for (size_t i = 0; i < r->message.tool_calls.len; i++) {
    keel_model_tool_call *c = &r->message.tool_calls.ptr[i];
    kg_str_free(&c->id);
    kg_str_free(&c->name);
    kg_str_free(&c->arguments);
  }
  if (r->message.tool_calls.len > 0) free(r->message.tool_calls.ptr);
  r->message.tool_calls.len = 0;
  if (r->message.tool_call_id.is_some) kg_str_free(&r->message.tool_call_id.val);
}

#if defined(KEEL_WORLD_AGENT)
static const char *const KG_MODEL_ERRORS[] = {"limit-exceeded", "transient", "permanent",
                                              "invalid-request"};

KG_SAME(keel_model_request, keel_plugin_model_model_request_t);
KG_SAME(keel_model_response, keel_plugin_model_model_response_t);
KG_SAME(keel_message, keel_plugin_types_message_t);

bool keel_model_complete(const keel_model_request *req, keel_model_response *resp,
                         keel_model_error_kind *kind, keel_error *err) {
  keel_plugin_model_model_response_t r;
  keel_plugin_model_model_error_t e;
  /* The import borrows the request; the response and error are ours. */
  if (keel_plugin_model_complete((keel_plugin_model_model_request_t *)req, &r, &e)) {
    memcpy(resp, &r, sizeof *resp);
    return true;
  }
  *kind = e.tag < 4 ? (keel_model_error_kind)e.tag : KEEL_MODEL_PERMANENT;
  keel_str msg;
  memcpy(&msg, &e.val.permanent, sizeof msg);
  err->len = 0;
  if (!(json_buf_append_str(err, KG_MODEL_ERRORS[*kind]) && json_buf_append_str(err, ": ") &&
        json_buf_append(err, msg.ptr, msg.len)))
    err->len = 0;
  kg_str_free(&msg);
  return false;
}

static keel_view *kg_agent_view;

bool exports_agent_init(agent_json_t *config, agent_list_tool_spec_t *tools, agent_string_t *ret_err) {
  keel_error err = {0};
  keel_view_free(kg_agent_view);
  kg_agent_view = keel_view_new();
  bool ok = kg_agent_view != NULL;
  if (ok)
    ok = keel_agent_init((keel_str){(const char *)config->ptr, config->len},
                         (const keel_tool_spec *)tools->ptr, tools->len, &err);
  else
    json_buf_append_str(&err, "config: out of memory");
  agent_json_free(config);
  agent_list_tool_spec_free(tools);
  if (!ok) {
    keel_view_free(kg_agent_view);
    kg_agent_view = NULL;
    kg_give_error(&err, "config: keel_agent_init failed without a message", ret_err);
  }
  return ok;
}

bool exports_agent_decide(agent_view_delta_t *delta, agent_decision_t *ret, agent_string_t *ret_err) {
  keel_error err = {0};
  if (kg_agent_view == NULL) {
    agent_view_delta_free(delta);
    json_buf_append_str(&err, "decide called before a successful init");
    kg_give_error(&err, "out of memory", ret_err);
    return false;
  }
  if (!keel_view_apply(kg_agent_view, (keel_view_delta *)delta, &err)) {
    kg_give_error(&err, "view delta: out of memory", ret_err);
    return false;
  }
  keel_decision d;
  memset(&d, 0, sizeof d);
  if (!keel_agent_decide(kg_agent_view, &d, &err)) {
    keel_decision_free(&d);
    kg_give_error(&err, "keel_agent_decide failed without a message", ret_err);
    return false;
  }
  if (d.tag > KEEL_DECISION_INVALID) {
    json_buf_append_str(&err, "keel_agent_decide returned a decision with an unknown tag");
    kg_give_error(&err, "out of memory", ret_err);
    return false;
  }
  memcpy(ret, &d, sizeof d);
  free(err.ptr);
  return true;
}
#else
bool keel_model_complete(const keel_model_request *req, keel_model_response *resp,
                         keel_model_error_kind *kind, keel_error *err) {
  (void)req;
  (void)resp;
  *kind = KEEL_MODEL_PERMANENT;
  err->len = 0;
  json_buf_append_str(err, "permanent: the model client exists only in an agent component");
  return false;
}
#endif

#if defined(KEEL_WORLD_POLICY)
static keel_view *kg_policy_view;

bool exports_policy_init(policy_json_t *config, policy_policy_view_t *ret, policy_string_t *ret_err) {
  keel_error err = {0};
  keel_view_free(kg_policy_view);
  kg_policy_view = keel_view_new();
  keel_policy_view view = KEEL_VIEW_FULL;
  bool ok = kg_policy_view != NULL;
  if (ok)
    ok = keel_policy_init((keel_str){(const char *)config->ptr, config->len}, &view, &err);
  else
    json_buf_append_str(&err, "config: out of memory");
  policy_json_free(config);
  if (ok && (unsigned)view > KEEL_VIEW_CALL_ONLY) {
    ok = false;
    json_buf_append_str(&err, "config: keel_policy_init chose an unknown view");
  }
  if (!ok) {
    keel_view_free(kg_policy_view);
    kg_policy_view = NULL;
    kg_give_error(&err, "config: keel_policy_init failed without a message", ret_err);
    return false;
  }
  *ret = (policy_policy_view_t)view;
  free(err.ptr);
  return true;
}

bool exports_policy_evaluate(policy_tool_call_t *call, policy_effect_t effect,
                             policy_view_delta_t *delta, policy_verdict_t *ret,
                             policy_string_t *ret_err) {
  keel_error err = {0};
  bool ok = false;
  keel_verdict v;
  memset(&v, 0, sizeof v);
  if (kg_policy_view == NULL) {
    policy_view_delta_free(delta);
    json_buf_append_str(&err, "evaluate called before a successful init");
  } else if (keel_view_apply(kg_policy_view, (keel_view_delta *)delta, &err)) {
    ok = keel_policy_evaluate((const keel_tool_call *)call, (keel_effect)effect, kg_policy_view,
                              &v, &err);
    if (!ok) {
      keel_verdict_free(&v);
      if (err.len == 0) json_buf_append_str(&err, "keel_policy_evaluate failed without a message");
    } else if (v.tag > KEEL_VERDICT_ABORT) {
      ok = false;
      json_buf_append_str(&err, "keel_policy_evaluate returned a verdict with an unknown tag");
    }
  }
  policy_tool_call_free(call);
  if (!ok) {
    kg_give_error(&err, "out of memory", ret_err);
    return false;
  }
  memcpy(ret, &v, sizeof v);
  free(err.ptr);
  return true;
}
#endif

#if defined(KEEL_WORLD_TOOL)
static bool kg_tool_ready;

bool exports_tool_init(tool_json_t *config, tool_string_t *ret_err) {
  keel_error err = {0};
  kg_tool_ready = keel_tool_init((keel_str){(const char *)config->ptr, config->len}, &err);
  tool_json_free(config);
  if (!kg_tool_ready) {
    kg_give_error(&err, "config: keel_tool_init failed without a message", ret_err);
    return false;
  }
  free(err.ptr);
  return true;
}

void exports_tool_specs(tool_list_tool_spec_t *ret) {
  keel_tool_specs_out out = {0};
  if (kg_tool_ready) keel_tool_specs(&out);
  /* The post-return frees the array and its strings with free(). */
  ret->ptr = (keel_plugin_types_tool_spec_t *)out.ptr;
  ret->len = out.len;
  if (out.len == 0) {
    free(out.ptr);
    ret->ptr = NULL;
  }
}

bool exports_tool_call(tool_string_t *name, tool_json_t *arguments, tool_json_t *ret,
                       tool_string_t *ret_err) {
  keel_error err = {0};
  json_buf result = {0};
  bool ok = false;
  if (!kg_tool_ready) {
    json_buf_append_str(&err, "call before a successful init");
  } else {
    ok = keel_tool_run((keel_str){(const char *)name->ptr, name->len},
                        (keel_str){(const char *)arguments->ptr, arguments->len}, &result, &err);
    if (ok && result.len == 0) {
      ok = false;
      json_buf_append_str(&err, "keel_tool_run returned no JSON");
    }
  }
  tool_string_free(name);
  tool_json_free(arguments);
  if (!ok) {
    free(result.ptr);
    kg_give_error(&err, "keel_tool_run failed without a message", ret_err);
    return false;
  }
  ret->ptr = (uint8_t *)result.ptr;
  ret->len = result.len;
  free(err.ptr);
  return true;
}
#endif
