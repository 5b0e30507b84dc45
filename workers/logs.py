"""Karpenter-style log lines from workflows and activities.

Workflows log a Karpenter message ("created nodeclaim", "launched nodeclaim", ...) with its fields under the
`karpenter` key; this formatter prints them the way people read Karpenter's logs, one line each:
`2026-11-22T10:00:01Z INFO created nodeclaim NodePool=default NodeClaim=default-x8k2p ...`.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import temporalio.activity
import temporalio.workflow


def _value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    text = str(value)
    return f'"{text}"' if " " in text and not text.startswith("{") else text


class KarpenterFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "karpenter", None) or {}
        moment = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        message = record.msg if fields else record.getMessage()
        parts = [moment, record.levelname, str(message)]
        parts += [f"{key}={_value(value)}" for key, value in fields.items()]
        return " ".join(parts)


class KarpenterOnly(logging.Filter):
    """Only the lines that carry Karpenter fields (the workflows' decisions), not SDK chatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        return hasattr(record, "karpenter")


def setup_logging(
    stream: TextIO = sys.stdout, level: int = logging.INFO, karpenter_only: bool = False
) -> None:
    """Route the Temporal SDK's workflow and activity loggers through the Karpenter formatter."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(KarpenterFormatter())
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
