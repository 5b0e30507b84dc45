"""The rate limit all requests of one cluster share, as client-go's token bucket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """`qps` requests a second on average, up to `burst` at once; shared by every thread of one cluster."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"the rate limit needs qps > 0 and burst >= 1, not qps={qps}, burst={burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0 when one was there)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            return 0.0 if self._tokens >= 0 else -self._tokens / self.qps

    def try_take(self) -> bool:
        """Take a token if one is there now (client-go's TryAccept); False leaves the bucket as it was."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True
