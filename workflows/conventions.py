"""What every workflow here does the same way: Karpenter-style log lines and the activity retry policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))
"""Activities retry with backoff from 1 s to 10 s until their timeout; non-retryable errors stop them."""


def log(message: str, **fields: Any) -> None:
    """A Karpenter-style log line: the message Karpenter writes, with its fields (silent during replay)."""
    workflow.logger.info(message, extra={"karpenter": fields})


def log_error(message: str, **fields: Any) -> None:
    """A Karpenter-style line at error level, where Karpenter logs an error (silent during replay)."""
    workflow.logger.error(message, extra={"karpenter": fields})
