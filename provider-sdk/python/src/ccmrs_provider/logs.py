"""Logging for a provider that did not configure any: without a handler,
Python shows only WARNING and above, bare, and a provider built on the SDK
would say nothing about what it serves or which call failed."""

from __future__ import annotations

import logging
import os
import sys
import time

#: The environment variable that sets the level of the SDK's handler
#: (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``, ``CRITICAL``); it wins over
#: ``ProviderServer(log_level=...)``.
LOG_LEVEL_ENV = "CCMRS_LOG_LEVEL"

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _Formatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message>``, then the call's method and
    request id when the record comes from ``CallContext.log``."""

    converter = time.gmtime
    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        method = getattr(record, "method", None)
        request_id = getattr(record, "request_id", None)
        if method:
            line += f" method={method}"
        if request_id:
            line += f" request_id={request_id}"
        return line


def _level(value: int | str, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().upper() in _LEVELS:
        return logging.getLevelName(value.strip().upper())
    raise ValueError(f"{what}={value!r} is not a log level ({', '.join(_LEVELS)})")


def configure_logging(level: int | str | None = None) -> bool:
    """Sends log records to stderr, one line each, at ``$CCMRS_LOG_LEVEL``,
    else ``level``, else INFO, unless the process already configured logging
    (the root logger has a handler): then nothing changes and this returns
    False, and ``$CCMRS_LOG_LEVEL`` is not read. ``ProviderServer`` calls it
    when it starts serving. A level that is not one raises ValueError,
    before anything is changed."""
    root = logging.getLogger()
    if root.handlers:
        return False
    env = os.environ.get(LOG_LEVEL_ENV, "")
    if env.strip():
        resolved = _level(env, LOG_LEVEL_ENV)
    elif level is not None:
        resolved = _level(level, "log_level")
    else:
        resolved = logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter())
    root.addHandler(handler)
    root.setLevel(resolved)
    return True
