"""Log lines through the host: they land in its tracing output and in the
run's events (rate-limited per instance). Outside a component, as in a
plugin's unit tests, they go to standard error."""

import sys

_LEVELS = ("trace", "debug", "info", "warn", "error")
_sink = None


def _host_sink():
    try:
        from wit_world.imports import log as wit_log
        from wit_world.imports import types as wit_types
    except ImportError:
        return lambda level, message: print("[%s] %s" % (level, message), file=sys.stderr)
    levels = {name: getattr(wit_types.Level, name.upper()) for name in _LEVELS}
    return lambda level, message: wit_log.log(levels[level], message)


def log(level, message):
    """Sends `message` at `level` (`trace` ... `error`)."""
    global _sink
    if level not in _LEVELS:
        raise ValueError("log level %r is not one of %s" % (level, ", ".join(_LEVELS)))
    if _sink is None:
        _sink = _host_sink()
    _sink(level, str(message))


def trace(message):
    log("trace", message)


def debug(message):
    log("debug", message)


def info(message):
    log("info", message)


def warn(message):
    log("warn", message)


def error(message):
    log("error", message)
