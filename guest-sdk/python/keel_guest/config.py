"""Strict config reading with errors that name the key.

A plugin gets its config as JSON text. `parse` returns an `Obj` that hands
out keys one by one, remembering where it is, so every error reads like
`config.rules[2].action: missing`; `Obj.finish` refuses the keys nobody
asked for. Each error is a `ConfigError`, which the SDK returns to the host
as the `init` error.
"""

from . import jsontext


class ConfigError(Exception):
    """A bad config; `str(err)` starts with the key path, then `: why`."""


def parse(text, root="config"):
    """The config object of `text` (an empty text is `{}`)."""
    if text.strip() == "":
        value = {}
    else:
        try:
            value = jsontext.parse(text)
        except jsontext.JsonError as err:
            raise ConfigError("%s: invalid JSON: %s" % (root, err)) from None
    return Obj(root, value)


def _describe(value):
    return jsontext.compact(value)


class Obj:
    """One JSON object of the config and its path."""

    __slots__ = ("path", "_map")

    def __init__(self, path, value):
        if not isinstance(value, dict):
            raise ConfigError("%s: expected an object" % path)
        self.path = path
        self._map = dict(value)

    def key_path(self, key):
        return "%s.%s" % (self.path, key)

    def take(self, key, default=None):
        """The value at `key`, taken out (`default` when absent)."""
        return self._map.pop(key, default)

    def require(self, key):
        if key not in self._map:
            raise ConfigError("%s: missing" % self.key_path(key))
        return self._map.pop(key)

    def _typed(self, key, required, check, what):
        if required:
            value = self.require(key)
        else:
            value = self.take(key)
            if value is None:
                return None
        if not check(value):
            raise ConfigError("%s: expected %s" % (self.key_path(key), what))
        return value

    def str(self, key, required=False, choices=None):
        """A string; with `choices`, one of them."""
        value = self._typed(key, required, lambda v: isinstance(v, str), "a string")
        if value is not None and choices is not None and value not in choices:
            raise ConfigError(
                "%s: %s is not one of %s" % (self.key_path(key), _describe(value), ", ".join(choices))
            )
        return value

    def int(self, key, required=False, minimum=None):
        """An integer (not a boolean, not 1.0), at least `minimum` if given."""
        value = self._typed(
            key, required, lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"
        )
        if value is not None and minimum is not None and value < minimum:
            raise ConfigError("%s: must be at least %d" % (self.key_path(key), minimum))
        return value

    def number(self, key, required=False):
        return self._typed(
            key,
            required,
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "a number",
        )

    def bool(self, key, required=False):
        return self._typed(key, required, lambda v: isinstance(v, bool), "true or false")

    def array(self, key, required=False):
        """A list of `(path, element)` pairs, or None when absent."""
        value = self._typed(key, required, lambda v: isinstance(v, list), "an array")
        if value is None:
            return None
        path = self.key_path(key)
        return [("%s[%d]" % (path, i), v) for i, v in enumerate(value)]

    def obj(self, key, required=False):
        """The object at `key` as an `Obj`, or None when absent."""
        value = self._typed(key, required, lambda v: isinstance(v, dict), "an object")
        return None if value is None else Obj(self.key_path(key), value)

    def entries(self):
        """Every key left, as `(path, key, value)`, in document order; the
        object is empty afterwards."""
        out = [(self.key_path(k), k, v) for k, v in self._map.items()]
        self._map.clear()
        return out

    def finish(self):
        """Refuses the first key nobody took."""
        for key in self._map:
            raise ConfigError("%s: unknown key %s" % (self.path, _describe(key)))
