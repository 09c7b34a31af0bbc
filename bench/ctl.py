"""The child side of :class:`bench.common.Child`: JSON commands on stdin, answers on stdout.

A helper process (receiver, SSE clients) greets with one JSON line, then answers each
command line with one JSON line; ``{"cmd": "quit"}`` ends it. Commands run on the
child's event loop, between its network callbacks.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


def say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def serve_commands(handle: Handler) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return
        cmd = json.loads(line)
        if cmd.get("cmd") == "quit":
            say({"bye": True})
            return
        try:
            say(await handle(cmd))
        except Exception as exc:
            traceback.print_exc()
            say({"error": f"{type(exc).__name__}: {exc}"})


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``main`` on uvloop when it is installed (it is, with uvicorn[standard])."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())
