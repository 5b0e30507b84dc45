"""Karpenter-style log lines from activities: Karpenter's message, its fields under `karpenter` (the formatters of
`workers.logs` print them as Karpenter's logs read)."""

from __future__ import annotations

import logging
from typing import Any


def karpenter_log(logger: logging.Logger, message: str, **fields: Any) -> None:
    """Log `message` at INFO with Karpenter's fields."""
    logger.info(message, extra={"karpenter": fields})
