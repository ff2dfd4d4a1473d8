"""What bounds the server's work: per-analyst rate limits and sessions, and batches answered at once.

A rate limit is a token bucket per analyst (Turner 1986, "New directions in communications"):
it holds at most ``batches_per_minute`` tokens, refills at that many a minute, and every batch or
EXPLAIN takes one, so an analyst can burst up to the limit and then sustain the rate. Planning
itself is bounded by the planner's own work limits, never by time; the clock here only paces
requests. ``workers`` batches are planned and answered at once; the others wait their turn, so
a burst from many sessions cannot take more CPU than the owner allowed. Catalog questions take a
token and a worker too: they are answered by a query engine, and some cost seconds.

Connections are counted before a thread is started for them: at most ``max_connections`` at once,
and of those at most ``max_unauthenticated`` still in start-up or authentication, so clients that
never log in can hold neither threads nor memory beyond those caps (and the start-up timeout
frees their places).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dpsql.server.config import Analyst


class Limits:
    """The server's shared limits; thread-safe."""

    def __init__(self, workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._workers = threading.BoundedSemaphore(workers)
        self._lock = threading.Lock()
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # analyst -> (tokens, at)
        self._sessions: dict[str, int] = {}

    def take(self, analyst: Analyst) -> float | None:
        """Take one token from the analyst's bucket: None if there was one, else the seconds until one."""
        rate = analyst.batches_per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, at = self._buckets.get(analyst.name, (float(analyst.batches_per_minute), now))
            tokens = min(float(analyst.batches_per_minute), tokens + (now - at) * rate)
            if tokens < 1.0:
                self._buckets[analyst.name] = (tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[analyst.name] = (tokens - 1.0, now)
            return None

    def open_session(self, analyst: Analyst) -> bool:
        """Count a new session of ``analyst``; False (and not counted) when she has max_sessions open."""
        with self._lock:
            count = self._sessions.get(analyst.name, 0)
            if count >= analyst.max_sessions:
                return False
            self._sessions[analyst.name] = count + 1
            return True

    def close_session(self, analyst: Analyst) -> None:
        with self._lock:
            self._sessions[analyst.name] -= 1

    @contextmanager
    def worker(self) -> Iterator[None]:
        """Hold one of the ``workers`` slots while a batch is planned and answered."""
        with self._workers:
            yield


class Connections:
    """The open connections, and how many of them are not authenticated yet; thread-safe."""

    def __init__(self, most: int, unauthenticated: int) -> None:
        self._most, self._most_unauthenticated = most, unauthenticated
        self._lock = threading.Lock()
        self._open = self._unauthenticated = 0

    def enter(self) -> str | None:
        """Count a new, unauthenticated connection; or, when a cap is reached, why it is refused (not counted)."""
        with self._lock:
            if self._open >= self._most:
                return f"the server has max_connections = {self._most} connections open: try again later."
            if self._unauthenticated >= self._most_unauthenticated:
                return (f"the server has max_unauthenticated = {self._most_unauthenticated} connections still "
                        "authenticating: try again later.")
            self._open += 1
            self._unauthenticated += 1
            return None

    def authenticated(self) -> None:
        """One counted connection has authenticated."""
        with self._lock:
            self._unauthenticated -= 1

    def leave(self, *, authenticated: bool) -> None:
        """One counted connection has closed."""
        with self._lock:
            self._open -= 1
            self._unauthenticated -= 0 if authenticated else 1
