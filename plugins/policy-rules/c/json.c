/* A small, strict JSON parser; see json.h. */
#include "json.h"

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
        return parse_number(p);
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
