"""Karpenter-style log lines from workflows and activities.

Workflows log a Karpenter message ("created nodeclaim", "launched nodeclaim", ...) with its fields under the
`karpenter` key; the text formatter prints them the way people read Karpenter's logs, one line each:
`2026-11-22T10:00:01Z INFO created nodeclaim NodePool=default NodeClaim=default-x8k2p ...`. The JSON formatter
writes what Karpenter's zap logger writes in a cluster, one object per line, for a log pipeline:
`{"level": "info", "time": "2026-11-22T10:00:01.000Z", "logger": "temporalio.workflow", "message": "created
nodeclaim", "NodePool": "default", "NodeClaim": "default-x8k2p", ...}`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import temporalio.activity
import temporalio.workflow

from workers.settings import LogFormat

LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}
"""zap's level names; anything above ERROR is `fatal`."""


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    text = str(value)
    return f'"{text}"' if " " in text and not text.startswith("{") else text


def _moment(record: logging.LogRecord) -> str:
    """The record's time in RFC 3339, UTC, to the millisecond."""
    return datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = getattr(record, "karpenter", None) or {}
    return fields


def _line_fields(record: logging.LogRecord) -> dict[str, Any]:
    """A Karpenter line's fields; for another line, which activity or workflow it came from (the SDK's own lines,
    such as "Completing activity as failed", name neither in their message): from the `temporal_activity` or
    `temporal_workflow` extra the SDK's loggers add."""
    if fields := _fields(record):
        return dict(fields)
    if activity := getattr(record, "temporal_activity", None):
        return {
            "activity": activity.get("activity_type"),
            "attempt": activity.get("attempt"),
            "workflow": activity.get("workflow_type"),
            "workflow-id": activity.get("workflow_id"),
        }
    if workflow := getattr(record, "temporal_workflow", None):
        return {"workflow": workflow.get("workflow_type"), "workflow-id": workflow.get("workflow_id")}
    return {}


def _error(record: logging.LogRecord) -> str | None:
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        return str(error) or type(error).__name__
    return None


def _message(record: logging.LogRecord) -> str:
    # A Karpenter line's message is its fixed text; its values are the fields.
    return str(record.msg) if _fields(record) else record.getMessage()


class KarpenterFormatter(logging.Formatter):
    """Time, level, message, then `key=value` fields: a Karpenter line's own, else the activity or workflow it
    came from, and `error` for an exception (its message; the JSON format carries the stack trace too)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _line_fields(record)
        if (error := _error(record)) is not None:
            fields["error"] = error
        parts = [_moment(record), record.levelname, _message(record)]
        parts += [f"{key}={_value(value)}" for key, value in fields.items() if value is not None]
        return " ".join(parts)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: `level` (zap's lowercase names), `time`, `logger`, `message`, the Karpenter
    fields flat, and for an exception `error` (its message) and `stacktrace`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "level": LEVELS.get(record.levelno, "fatal" if record.levelno > logging.ERROR else "debug"),
            "time": _moment(record),
            "logger": record.name,
            "message": _message(record),
        }
        for key, value in _line_fields(record).items():
            entry.setdefault(key, value)
        if record.exc_info and (error := _error(record)) is not None:
            entry["error"] = error
            entry["stacktrace"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class UnlockedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler without the handler lock. The Temporal SDK stops a workflow activation that holds its
    thread for 2 s (a "potential deadlock": on a busy worker, one that only waited for the GIL) by raising an
    exception in that thread. A thread that had just acquired a handler's lock, after waiting for it while
    another wrote, gets it there and never releases the lock: every later log line of the process, the event
    loop's included, waits for it forever (a workflows-only worker hung so at 200 NodeClaims). Each record is
    one `write` of the stream, which the io module does whole, so lines from threads never mix."""

    def createLock(self) -> None:
        self.lock = None


class KarpenterOnly(logging.Filter):
    """Only the lines that carry Karpenter fields (the workflows' decisions), not SDK chatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        return hasattr(record, "karpenter")


def setup_logging(
    stream: TextIO = sys.stdout,
    level: int = logging.INFO,
    karpenter_only: bool = False,
    log_format: LogFormat = LogFormat.TEXT,
) -> None:
    """Route every logger, the Temporal SDK's workflow and activity loggers included, through the Karpenter
    formatter of `log_format`."""
    handler = UnlockedStreamHandler(stream)
    handler.setFormatter(JsonFormatter() if log_format is LogFormat.JSON else KarpenterFormatter())
    if karpenter_only:
        handler.addFilter(KarpenterOnly())
    # The Karpenter fields already say which NodeClaim a line is about; the SDK's dict suffix would only clutter.
    temporalio.workflow.logger.workflow_info_on_message = False
    temporalio.activity.logger.activity_info_on_message = False
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    # The Azure SDK logs every request's and response's headers at INFO: thousands of lines a minute at scale.
    for noisy in ("temporalio.worker", "temporalio.activity", "aiohttp.access", "azure", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
