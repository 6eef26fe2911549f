/* A small, strict JSON parser (RFC 8259) with no dependencies beyond libc.
 *
 * Strings are decoded to UTF-8 (escapes, \uXXXX and surrogate pairs; a lone
 * surrogate, invalid UTF-8 or a raw control character is an error) and keep
 * their length, so they may contain NUL. Numbers are checked, not converted.
 * Everything a document holds lives in one arena, freed by json_doc_free.
 */
#ifndef KEEL_JSON_H
#define KEEL_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* Deepest nesting of arrays and objects json_parse accepts. */
#define JSON_MAX_DEPTH 128

typedef enum {
  JSON_NULL,
  JSON_FALSE,
  JSON_TRUE,
  JSON_NUMBER,
  JSON_STRING,
  JSON_ARRAY,
  JSON_OBJECT,
} json_type;

typedef struct json_value json_value;

typedef struct {
  const char *ptr; /* NUL-terminated for convenience; len is authoritative */
  size_t len;
} json_str;

typedef struct {
  json_str key;
  json_value *value;
} json_member;

struct json_value {
  json_type type;
  union {
    json_str str; /* JSON_STRING */
    struct {
      json_value **items;
      size_t len;
    } arr; /* JSON_ARRAY */
    struct {
      json_member *members; /* in document order, duplicates kept */
      size_t len;
    } obj; /* JSON_OBJECT */
  } u;
};

typedef struct json_arena json_arena;

typedef struct {
  json_arena *arena;
  json_value *root;
} json_doc;

/* Parses `len` bytes of `text`. On success returns a document (free it with
 * json_doc_free). On failure returns NULL and, if `err` is not NULL, sets
 * *err to a malloc'd NUL-terminated message such as
 * "expected `,` or `}` at line 1 column 9" (NULL if even that allocation
 * failed); free it with free(). */
json_doc *json_parse(const char *text, size_t len, char **err);

void json_doc_free(json_doc *doc);

/* Allocates `size` bytes that live as long as `doc` (NULL when out of memory). */
void *json_doc_alloc(json_doc *doc, size_t size);

/* Parses a JSON object's top-level members without building nested values
 * (so there is no nesting limit): the root's members hold decoded strings;
 * any other member value only has its type (an array or object is empty).
 * Returns the document and sets *status to 1 when the text is a well-formed
 * object; returns NULL and sets *status to 0 when it is another JSON value or
 * not valid JSON, or to -1 when out of memory. */
json_doc *json_parse_shallow(const char *text, size_t len, int *status);

/* A growable NUL-terminated text buffer for building output; the append
 * functions return false when out of memory. */
typedef struct {
  char *ptr;
  size_t len;
  size_t cap;
} json_buf;

bool json_buf_append(json_buf *b, const char *s, size_t len);
bool json_buf_append_str(json_buf *b, const char *s); /* NUL-terminated */
/* Writes `v` in decimal, NUL-terminated; returns the number of digits. (No
 * stdio here: it would pull WASI file descriptors into the component.) */
size_t json_fmt_uint(char out[24], unsigned long long v);

/* `s` as a JSON string literal, quotes included, escaped like serde_json. */
bool json_buf_append_quoted(json_buf *b, const char *s, size_t len);

#endif
