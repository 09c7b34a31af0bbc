"""The SDK's two clients through one surface, so every SDK test runs on both.

``runbell.client.Client`` is generated from ``AsyncClient`` (scripts/unasync.py); the
tests are written against the sync surface and :class:`Blocking` gives the async client
that surface: every coroutine it returns runs on one event loop in a thread (anyio's
blocking portal), its async iterators become iterators and its async context managers
context managers. Nothing of Runbell is mocked: the async client talks to the same live
server over loopback.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from runbell.client import AsyncClient, Client

VARIANTS = ("sync", "async")


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


async def _next(iterator: Any) -> tuple[bool, Any]:
    try:
        return True, await iterator.__anext__()
    except StopAsyncIteration:
        return False, None


class Blocking:
    """An async SDK object (the client, a run block) with the sync client's surface."""

    def __init__(self, portal: BlockingPortal, target: Any) -> None:
        object.__setattr__(self, "_portal", portal)
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value) or inspect.isclass(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._adapt(value(*args, **kwargs))

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)  # e.g. a run block's ``report``

    def _adapt(self, result: Any) -> Any:
        if inspect.isawaitable(result):
            return self._adapt(self._portal.call(_await, result))
        if hasattr(result, "__aiter__"):
            return self._iterate(result.__aiter__())
        if hasattr(result, "__aenter__"):
            return _Context(self._portal, result)
        return result

    def _iterate(self, iterator: Any) -> Iterator[Any]:
        while True:
            more, item = self._portal.call(_next, iterator)
            if not more:
                return
            yield item


class _Context:
    """An async context manager entered and exited in one task of the portal's loop (a
    run block resets in its exit the context variable its entry set)."""

    def __init__(self, portal: BlockingPortal, manager: Any) -> None:
        self.portal, self.held = portal, portal.wrap_async_context_manager(manager)

    def __enter__(self) -> Any:
        return Blocking(self.portal, self.held.__enter__())

    def __exit__(self, *exc: Any) -> bool | None:
        return self.held.__exit__(*exc)


@contextmanager
def connected(variant: str, *args: Any, **options: Any) -> Iterator[Any]:
    """A client of ``variant`` (``sync`` or ``async``) made with ``Client``'s arguments,
    closed on exit; the async one behind :class:`Blocking`."""
    if variant == "sync":
        with Client(*args, **options) as client:
            yield client
        return
    with start_blocking_portal() as portal:

        async def make() -> AsyncClient:
            return AsyncClient(*args, **options)

        client = portal.call(make)
        try:
            yield Blocking(portal, client)
        finally:
            portal.call(client.aclose)


Connect = Callable[..., Any]
