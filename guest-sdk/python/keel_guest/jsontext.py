"""Strict JSON text in and out, as the host reads and writes it.

`parse` refuses what serde_json refuses (NaN, Infinity, nesting past 127
levels) instead of letting CPython accept it or overflow the wasm stack;
`compact` writes the compact form the host stores.
"""

import json
import re

#: Deepest nesting of arrays and objects accepted, as serde_json's default
#: recursion limit (127 levels parse, 128 do not). CPython compiled to wasm
#: traps, rather than raising RecursionError, a few thousand levels deep, so
#: the depth is checked before parsing.
MAX_DEPTH = 127

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKET = re.compile(r"[\[\]{}]")


class JsonError(ValueError):
    """Text that is not strict JSON; `str(err)` says why."""


def _too_deep(text):
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        else:
            depth -= 1
    return False


def _reject_constant(name):
    raise JsonError("%s is not JSON" % name)


def parse(text):
    """The value of JSON `text`. Raises `JsonError`."""
    if not isinstance(text, str):
        raise JsonError("expected JSON text, got %s" % type(text).__name__)
    if _too_deep(text):
        raise JsonError("nested more than %d levels deep" % MAX_DEPTH)
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise JsonError("nested too deeply") from None
    except JsonError:
        raise
    except ValueError as err:
        raise JsonError(str(err)) from None


def compact(value):
    """Compact JSON text of `value`, non-ASCII kept as is (like serde_json).

    Falls back to ASCII escapes when the text would not be valid UTF-8 (a
    lone surrogate from a `\\ud800` escape), so the result always lowers to
    a WIT string. Raises `JsonError` for NaN, infinities and values JSON
    cannot hold.
    """
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise JsonError("cannot encode as JSON: %s" % err) from None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text
