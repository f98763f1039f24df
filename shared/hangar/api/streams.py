"""Streamed responses from blocking work: the work runs in a thread of its own and hands its
output to the event loop as it comes, so a long command or a long turn never holds a worker of
the shared thread pool, and the event loop never blocks.

The hand-over is bounded (back-pressure: a slow client slows the work down). When the client
goes away, the work's next ``emit`` raises :class:`ClientGone`; the sandboxes' exec kills a
command whose output cannot be written, so nothing keeps running for a reader that left.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel

logger = logging.getLogger(__name__)

BUFFER = 64


class ClientGone(Exception):
    """The client of a stream went away (or the server is stopping)."""


class Emitter:
    """``emit(data)`` from any thread: hands ``data`` to the event loop that made this."""

    def __init__(self) -> None:
        self._token = anyio.lowlevel.current_token()
        self.send, self.receive = anyio.create_memory_object_stream[bytes](BUFFER)

    def __call__(self, data: bytes) -> None:
        if not data:
            return self.check()
        try:
            anyio.from_thread.run(self.send.send, data, token=self._token)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
            raise ClientGone() from None

    def check(self) -> None:
        """ClientGone if nobody reads any more."""
        try:
            stats = anyio.from_thread.run_sync(self.send.statistics, token=self._token)
        except RuntimeError:
            raise ClientGone() from None
        if stats.open_receive_streams == 0:
            raise ClientGone()

    def close(self) -> None:
        try:
            anyio.from_thread.run_sync(self.send.close, token=self._token)
        except RuntimeError:
            pass  # the event loop is gone: nobody is reading


def in_thread(work: Callable[[Emitter], None], name: str) -> AsyncIterator[bytes]:
    """Run ``work(emit)`` in a new thread when iteration starts; yield what it emits until it
    returns. ``work`` reports its own errors through ``emit`` (the response has started by
    then); an exception that escapes it is logged and ends the stream."""

    async def stream() -> AsyncIterator[bytes]:
        emit = Emitter()

        def run() -> None:
            try:
                work(emit)
            except ClientGone:
                pass
            except Exception:  # a thread's top level: log it; the stream just ends
                logger.exception("streamed %s failed", name)
            finally:
                emit.close()

        threading.Thread(target=run, name=f"hangar-{name}", daemon=True).start()
        async with emit.receive:
            async for chunk in emit.receive:
                yield chunk

    return stream()
