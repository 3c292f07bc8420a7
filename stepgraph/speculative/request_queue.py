"""Requests handed to a running decoder from other threads: the online side of :meth:`SpecDecoder.serve`.

A server makes requests with :meth:`SpecDecoder.make_requests` (safe from any thread), puts them in a
:class:`RequestQueue` that one thread serves (``decoder.serve(queue)``), streams each request's tokens
through its ``on_tokens`` (or, in asyncio code, :meth:`RequestQueue.stream`), and ends a request early with
:meth:`Request.abort` (a client gone). The loop takes what was put between two steps; while nothing runs
it sleeps until a request is put or the queue is closed. ``serve`` returns once the queue is closed and
every request it took has finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable

from stepgraph.speculative.requests import Request


class RequestQueue:
    """A thread-safe queue of :class:`Request` objects for ``SpecDecoder.serve(queue)``.

    ``put`` and ``close`` may be called from any thread; the serving loop calls ``take`` and ``wait``.
    """

    def __init__(self) -> None:
        self._requests: deque[Request] = deque()
        self._changed = threading.Condition()
        self._closed = False

    def put(self, requests: Request | Iterable[Request]) -> None:
        """Hand one request (or several) to the loop, which admits them in the order put.

        Raises
        ------
        RuntimeError
            When the queue was closed (the loop may have returned: nothing would serve them).
        TypeError
            For anything but requests made by :meth:`SpecDecoder.make_requests`.
        """
        batch = [requests] if isinstance(requests, Request) else list(requests)
        for r in batch:
            if not isinstance(r, Request):
                raise TypeError(f"put takes requests from decoder.make_requests(...), got {type(r).__name__}")
        with self._changed:
            if self._closed:
                raise RuntimeError("this RequestQueue is closed: put requests in a new one")
            self._requests.extend(batch)
            self._changed.notify_all()

    async def stream(self, request: Request) -> AsyncIterator[list[int]]:
        """Put ``request`` and yield its tokens as the serving thread takes them, in the caller's event
        loop, until it finishes (``request.finish_reason`` then says why). Leaving early aborts the
        request: the task cancelled (a client gone), or a ``break`` out of ``async with
        contextlib.aclosing(queue.stream(request))`` (a bare ``break`` aborts it when the generator is
        collected). The request's own ``on_tokens`` and ``on_finish``, if set, are still called."""
        loop, tokens = asyncio.get_running_loop(), asyncio.Queue()
        on_tokens, on_finish = request.on_tokens, request.on_finish

        def hand_over(item: list[int] | None) -> None:  # on the serving thread
            with contextlib.suppress(RuntimeError):  # the caller's loop closed: no one is reading
                loop.call_soon_threadsafe(tokens.put_nowait, item)

        def took(new: list[int]) -> None:
            hand_over(list(new))
            if on_tokens is not None:
                on_tokens(new)

        def ended(r: Request) -> None:
            hand_over(None)
            if on_finish is not None:
                on_finish(r)

        request.on_tokens, request.on_finish = took, ended
        self.put(request)
        try:
            while (new := await tokens.get()) is not None:
                yield new
        finally:
            if not request.finished:
                request.abort()

    def close(self) -> None:
        """No more requests: the loop returns once those it has taken have finished."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def open(self) -> bool:
        """Whether requests may still come: not closed, or closed with some not taken yet."""
        with self._changed:
            return not self._closed or bool(self._requests)

    def take(self) -> list[Request]:
        """Every request put and not taken yet, in order (the loop's, between steps)."""
        with self._changed:
            out = list(self._requests)
            self._requests.clear()
            return out

    def wait(self, timeout: float | None = None) -> None:
        """Sleep until a request is put or the queue is closed (or ``timeout`` seconds pass)."""
        with self._changed:
            if not self._requests and not self._closed:
                self._changed.wait(timeout)
