"""Typed tool arguments.

`decode(text, Cls)` reads a call's JSON arguments into a dataclass, checking
each field's type and refusing keys the dataclass lacks; errors name the key
(`arguments.path: expected a string`). `read(text)` gives the same strict
reader as the config (`config.Obj`) for arguments read by hand.
"""

import dataclasses
import typing

from . import config, jsontext


class ArgumentsError(ValueError):
    """Arguments that do not fit; `str(err)` names the key."""


def read(text):
    """An `Obj` over the arguments object, whose paths start at `arguments`."""
    try:
        return config.parse(text, root="arguments")
    except config.ConfigError as err:
        raise ArgumentsError(str(err)) from None


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
          list: "an array", dict: "an object"}


def _check(value, hint, path):
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(value, option, path)
            except ArgumentsError as err:
                errors.append(str(err))
        raise ArgumentsError(errors[0] if len(errors) == 1 else "%s: has the wrong type" % path)
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise ArgumentsError("%s: expected an array" % path)
        inner = typing.get_args(hint)
        if inner and inner[0] is not Ellipsis:
            return [_check(v, inner[0], "%s[%d]" % (path, i)) for i, v in enumerate(value)]
        return list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise ArgumentsError("%s: expected an object" % path)
        return dict(value)
    if hint is typing.Any or hint is object:
        return value
    if dataclasses.is_dataclass(hint):
        return _build(value, hint, path)
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    if not ok:
        raise ArgumentsError("%s: expected %s" % (path, _NAMES.get(hint, hint.__name__)))
    return value


def _build(value, cls, path):
    if not isinstance(value, dict):
        raise ArgumentsError("%s: expected an object" % path)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in value:
        if key not in fields:
            raise ArgumentsError("%s: unknown key %s" % (path, jsontext.compact(key)))
    kwargs = {}
    for name, f in fields.items():
        if name in value:
            kwargs[name] = _check(value[name], hints[name], "%s.%s" % (path, name))
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ArgumentsError("%s.%s: missing" % (path, name))
    return cls(**kwargs)


def decode(text, cls):
    """An instance of dataclass `cls` from JSON arguments `text`."""
    try:
        value = jsontext.parse(text)
    except jsontext.JsonError as err:
        raise ArgumentsError("arguments: invalid JSON: %s" % err) from None
    return _build(value, cls, "arguments")
