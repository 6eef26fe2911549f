/* keel-guest for C (0.1.0): write Keel agents, policies and tools in C.
 *
 * One header and one source file. Compile keel_guest.c with your own sources
 * and -DKEEL_WORLD_AGENT, -DKEEL_WORLD_POLICY or -DKEEL_WORLD_TOOL: it then
 * holds the world's generated bindings and exports, rebuilds the run's view
 * from the host's deltas and calls the functions your plugin defines (the
 * "implemented by the plugin" section below). Without a world it builds
 * natively, for unit tests of plugin logic. See README.md.
 *
 * Strings are UTF-8 with a length and may hold NUL. Everything the SDK hands
 * to plugin code is borrowed and read-only for the call; everything plugin
 * code returns is built with the keel_*_set / keel_verdict_* / ... functions,
 * which copy. Functions returning bool return false on failure: a config or
 * arguments problem (the message is in the keel_error) or out of memory.
 */
#ifndef KEEL_GUEST_H
#define KEEL_GUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KEEL_GUEST_VERSION "0.1.0"

/* ==== JSON =============================================================== */
/* A small, strict JSON parser (RFC 8259) with no dependencies beyond libc.
 *
 * Strings are decoded to UTF-8 (escapes, \uXXXX and surrogate pairs; a lone
 * surrogate, invalid UTF-8 or a raw control character is an error) and keep
 * their length, so they may contain NUL. Numbers are checked, not converted:
 * a number keeps its text in u.str.
 * Everything a document holds lives in one arena, freed by json_doc_free.
 */

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
    json_str str; /* JSON_STRING; JSON_NUMBER: the number's text */
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

/* ==== Strings and errors ================================================= */

/* A UTF-8 string with its length (it may hold NUL); not NUL-terminated. */
typedef struct {
  const char *ptr;
  size_t len;
} keel_str;
/* A keel_str of a string literal. */
#define KEEL_STR(lit) ((keel_str){(lit), sizeof(lit) - 1})

/* A message for the host: what keel_fail and the config reader write. The
 * SDK hands it over as the call's error and frees it. */
typedef json_buf keel_error;

/* Sets the error to "<path>: <why>" and returns false (so `return
 * keel_fail(...)` reads well). Paths are keel_str because a JSON key may
 * hold NUL: KEEL_STR("config"), or what keel_path_* return. */
bool keel_fail(keel_error *err, keel_str path, const char *why);
/* "<path>: <before><quoted><after>", the quoted part as a JSON string. */
bool keel_failq(keel_error *err, keel_str path, const char *before, const char *quoted,
                size_t quoted_len, const char *after);

/* ==== The values the host and plugins exchange =========================== */
/* Enumerations number their cases in WIT order; records mirror the WIT. */


typedef enum {
  KEEL_READ_ONLY, KEEL_IDEMPOTENT, KEEL_LOCAL_MUTATION, KEEL_REMOTE_MUTATION, KEEL_DESTRUCTIVE,
} keel_effect;
typedef enum { KEEL_VIEW_FULL, KEEL_VIEW_CALL_ONLY } keel_policy_view;
typedef enum {
  KEEL_STEP_STARTED, KEEL_STEP_DECIDED, KEEL_STEP_AWAITING_APPROVAL, KEEL_STEP_EXECUTING,
  KEEL_STEP_DONE, KEEL_STEP_INTERRUPTED,
} keel_step_state;
typedef enum {
  KEEL_OBS_TOOL_RESULT, KEEL_OBS_TOOL_ERROR, KEEL_OBS_DENIED, KEEL_OBS_INVALID_DECISION,
  KEEL_OBS_FINAL,
} keel_observation_kind;
typedef enum { KEEL_APPROVAL_POLICY, KEEL_APPROVAL_INTERRUPTED_SIDE_EFFECT } keel_approval_kind;
typedef enum {
  KEEL_APPROVAL_PENDING, KEEL_APPROVAL_APPROVED, KEEL_APPROVAL_DENIED, KEEL_APPROVAL_EXPIRED,
} keel_approval_status;
typedef enum {
  KEEL_RUN_RUNNING, KEEL_RUN_WAITING_FOR_APPROVAL, KEEL_RUN_COMPLETED, KEEL_RUN_FAILED,
  KEEL_RUN_CANCELLED,
} keel_run_status;
typedef enum { KEEL_TRACE, KEEL_DEBUG, KEEL_INFO, KEEL_WARN, KEEL_ERROR } keel_level;

/* The WIT name of an enumeration case ("read-only", "done", ...). */
const char *keel_effect_name(keel_effect e);

typedef struct {
  keel_str name, description;
  keel_str parameters; /* JSON Schema text */
  uint8_t effect;      /* keel_effect */
} keel_tool_spec;

typedef struct {
  keel_str tool;
  keel_str arguments; /* JSON text of an object */
} keel_tool_call;

typedef enum { KEEL_DECISION_CALL, KEEL_DECISION_COMPLETE, KEEL_DECISION_FAIL, KEEL_DECISION_INVALID } keel_decision_tag;
typedef struct {
  uint8_t tag; /* keel_decision_tag */
  union {
    keel_tool_call call;
    keel_str complete; /* JSON text */
    keel_str fail;
    keel_str invalid;
  } val;
} keel_decision;

typedef enum { KEEL_VERDICT_ALLOW, KEEL_VERDICT_DENY, KEEL_VERDICT_REQUIRE_APPROVAL, KEEL_VERDICT_ABORT } keel_verdict_tag;
typedef struct {
  keel_str reason;
  keel_str presentation; /* JSON text */
} keel_approval_request;
typedef struct {
  uint8_t tag; /* keel_verdict_tag */
  union {
    keel_str deny;
    keel_approval_request require_approval;
    keel_str abort;
  } val;
} keel_verdict;

typedef struct {
  uint8_t kind; /* keel_observation_kind */
  keel_str content;
} keel_observation;

typedef struct { bool is_some; keel_decision val; } keel_opt_decision;
typedef struct { bool is_some; keel_verdict val; } keel_opt_verdict;
typedef struct { bool is_some; keel_observation val; } keel_opt_observation;
typedef struct { bool is_some; keel_str val; } keel_opt_str;

typedef struct {
  uint32_t index, version;
  uint8_t state; /* keel_step_state */
  keel_opt_decision decision;
  keel_opt_verdict verdict;
  keel_opt_observation observation;
} keel_step;

typedef struct {
  keel_str id;
  uint32_t step_index;
  uint8_t kind, status; /* keel_approval_kind, keel_approval_status */
  keel_tool_call call;
  keel_str reason;
  keel_opt_str decided_by, note;
} keel_approval;

typedef struct {
  keel_str id, goal;
  uint8_t status; /* keel_run_status */
  uint32_t step_count, model_calls;
  uint64_t tokens;
} keel_run_info;

/* What changed in the run since this instance's previous call. */
typedef struct {
  bool reset;
  keel_run_info run;
  struct { keel_step *ptr; size_t len; } steps;
  struct { keel_approval *ptr; size_t len; } approvals;
} keel_view_delta;

/* ==== The view =========================================================== */

/* The whole run as the host has stored it, rebuilt from deltas: a reset
 * clears it, steps replace the step at their index (or extend the run by
 * one), approvals replace the approval with their id. */
typedef struct keel_view keel_view;

keel_view *keel_view_new(void); /* NULL when out of memory */
void keel_view_free(keel_view *view);
/* Applies `delta`, taking ownership of every string in it (they must be
 * malloc'd) and of its step and approval arrays; on failure the view is
 * unchanged, `delta` is freed all the same and *err says why (a first delta
 * that does not reset, a gap, a step whose version does not move forward). */
bool keel_view_apply(keel_view *view, keel_view_delta *delta, keel_error *err);
const keel_run_info *keel_view_run(const keel_view *view);
const keel_step *keel_view_steps(const keel_view *view, size_t *len);
const keel_approval *keel_view_approvals(const keel_view *view, size_t *len); /* creation order */
size_t keel_view_decided_steps(const keel_view *view); /* steps that carry a decision */

/* Frees the strings of a delta (and its arrays) that was not applied. */
void keel_view_delta_free(keel_view_delta *delta);

/* ==== Building answers =================================================== */
/* Each copies its arguments into malloc'd strings the SDK hands to the host;
 * false means out of memory. JSON text arguments are checked to parse. */

bool keel_decision_call(keel_decision *out, const char *tool, const char *arguments_json);
bool keel_decision_complete(keel_decision *out, const char *result_json);
bool keel_decision_fail(keel_decision *out, const char *reason);
bool keel_decision_invalid(keel_decision *out, const char *reason);
/* The same with lengths (strings that may hold NUL). */
bool keel_decision_call_n(keel_decision *out, keel_str tool, keel_str arguments_json);
bool keel_decision_complete_n(keel_decision *out, keel_str result_json);

void keel_verdict_allow(keel_verdict *out);
bool keel_verdict_deny(keel_verdict *out, const char *reason, size_t len);
bool keel_verdict_abort(keel_verdict *out, const char *reason, size_t len);
/* `presentation` is JSON text (NULL: null). */
bool keel_verdict_require_approval(keel_verdict *out, const char *reason, size_t len,
                                   const char *presentation, size_t presentation_len);

/* Frees what a builder allocated (the SDK does this for answers it sends). */
void keel_decision_free(keel_decision *d);
void keel_verdict_free(keel_verdict *v);

/* The tools a tool component offers, built in keel_tool_specs. */
typedef struct {
  keel_tool_spec *ptr;
  size_t len, cap;
} keel_tool_specs_out;
bool keel_tool_specs_add(keel_tool_specs_out *out, const char *name, const char *description,
                         const char *parameters_json, keel_effect effect);
void keel_tool_specs_free(keel_tool_specs_out *out);

/* ==== Strict config (and tool arguments) ================================= */

/* One JSON object of a config and its path. Getters take keys out; `null`
 * counts as absent; keel_obj_finish refuses any key nobody took. Errors start
 * with the key path: "config.rules[2].action: missing". */
typedef struct {
  json_doc *doc;
  const json_value *value; /* a JSON_OBJECT */
  keel_str path;           /* lives in doc */
  unsigned char *taken;    /* one flag per member, in doc */
} keel_obj;

/* Parses a config (an empty text is {}) into *doc (free it with
 * json_doc_free when done with everything read from it) and its root object
 * at path "config". */
bool keel_config_parse(const char *text, size_t len, json_doc **doc, keel_obj *root,
                       keel_error *err);
/* The same for a tool call's arguments, at path "arguments". */
bool keel_args_parse(const char *text, size_t len, json_doc **doc, keel_obj *root,
                     keel_error *err);
/* An object value at `path` as a keel_obj. */
bool keel_obj_of(json_doc *doc, const json_value *v, keel_str path, keel_obj *out,
                 keel_error *err);

/* *out->ptr is NULL when the key is absent and not required. */
bool keel_obj_str(keel_obj *o, const char *key, bool required, keel_str *out, keel_error *err);
/* An integer written without fraction or exponent; *present says whether it was there. */
bool keel_obj_int(keel_obj *o, const char *key, bool required, long long *out, bool *present,
                  keel_error *err);
bool keel_obj_bool(keel_obj *o, const char *key, bool required, bool *out, bool *present,
                   keel_error *err);
/* A nested object; out->value is NULL when absent. */
bool keel_obj_obj(keel_obj *o, const char *key, bool required, keel_obj *out, keel_error *err);
/* An array (*out NULL when absent) and its path, for keel_path_index. */
bool keel_obj_array(keel_obj *o, const char *key, bool required, const json_value **out,
                    keel_str *path, keel_error *err);
/* Any value (NULL when absent). */
bool keel_obj_value(keel_obj *o, const char *key, bool required, const json_value **out,
                    keel_error *err);
bool keel_obj_finish(keel_obj *o, keel_error *err);
/* "<path>.<key>" and "<path>[<i>]", allocated in doc (ptr NULL when out of memory). */
keel_str keel_path_key(json_doc *doc, keel_str path, const char *key, size_t key_len);
keel_str keel_path_index(json_doc *doc, keel_str path, size_t i);

/* ==== Log and the model client =========================================== */

/* A line in the host's log and the run's events (stderr in a native build). */
void keel_log(keel_level level, const char *message);
void keel_log_n(keel_level level, const char *message, size_t len);

typedef enum { KEEL_ROLE_SYSTEM, KEEL_ROLE_USER, KEEL_ROLE_ASSISTANT, KEEL_ROLE_TOOL } keel_role;
typedef enum {
  KEEL_FINISH_STOP, KEEL_FINISH_TOOL_CALLS, KEEL_FINISH_LENGTH, KEEL_FINISH_CONTENT_FILTER,
  KEEL_FINISH_OTHER,
} keel_finish_reason;
typedef struct { keel_str id, name, arguments; } keel_model_tool_call;
typedef struct {
  uint8_t role; /* keel_role */
  keel_str content;
  struct { keel_model_tool_call *ptr; size_t len; } tool_calls;
  keel_opt_str tool_call_id;
} keel_message;
typedef struct { bool is_some; uint32_t val; } keel_opt_u32;
typedef struct { bool is_some; float val; } keel_opt_f32;
typedef struct {
  struct { keel_message *ptr; size_t len; } messages;
  struct { keel_tool_spec *ptr; size_t len; } tools;
  keel_opt_u32 max_tokens;
  keel_opt_f32 temperature;
} keel_model_request;
typedef struct {
  keel_message message;
  uint8_t finish_reason; /* keel_finish_reason */
  uint32_t prompt_tokens, completion_tokens;
} keel_model_response;
typedef enum {
  KEEL_MODEL_LIMIT_EXCEEDED, KEEL_MODEL_TRANSIENT, KEEL_MODEL_PERMANENT, KEEL_MODEL_INVALID_REQUEST,
} keel_model_error_kind;

/* Agents only: a completion from the host's model client. The request is
 * borrowed. On success free *resp with keel_model_response_free; on failure
 * *kind says which error and *err holds "<kind>: <message>". */
bool keel_model_complete(const keel_model_request *req, keel_model_response *resp,
                         keel_model_error_kind *kind, keel_error *err);
void keel_model_response_free(keel_model_response *resp);

/* ==== Implemented by the plugin ========================================== */
/* Define the functions of your world. Return false with *err set to fail the
 * call; a config error in init names the key and the run does not start.
 * Arguments are borrowed for the call. */

/* agent (-DKEEL_WORLD_AGENT) */
bool keel_agent_init(keel_str config, const keel_tool_spec *tools, size_t n_tools, keel_error *err);
bool keel_agent_decide(const keel_view *view, keel_decision *out, keel_error *err);

/* policy (-DKEEL_WORLD_POLICY): *view says how much of the run evaluate needs
 * (the SDK's default is KEEL_VIEW_FULL). */
bool keel_policy_init(keel_str config, keel_policy_view *view, keel_error *err);
bool keel_policy_evaluate(const keel_tool_call *call, keel_effect effect, const keel_view *view,
                          keel_verdict *out, keel_error *err);

/* tool (-DKEEL_WORLD_TOOL): the result is JSON text appended to *result. */
bool keel_tool_init(keel_str config, keel_error *err);
void keel_tool_specs(keel_tool_specs_out *out);
bool keel_tool_run(keel_str name, keel_str arguments, json_buf *result, keel_error *err);

#endif
