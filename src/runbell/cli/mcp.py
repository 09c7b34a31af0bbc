"""``runbell mcp``: Runbell's MCP tools over stdio, for Claude Code, Claude Desktop or any
MCP client that starts its servers as processes.

The process talks to a remote Runbell over HTTP (:class:`runbell.mcp.remote.RemoteBackend`),
configured by ``RUNBELL_URL``, ``RUNBELL_KEY`` (a runtime API key) and ``RUNBELL_OWNER``
(the email of the person the runs are for). Stdout carries only MCP messages.
"""

from __future__ import annotations

from runbell.cli.specs import Commands

commands = Commands()


@commands.command()
def mcp() -> None:
    """Serve Runbell's MCP tools over stdio.

    Configured by RUNBELL_URL, RUNBELL_KEY and RUNBELL_OWNER; stdout carries only MCP
    messages."""
    import logging

    import anyio

    from runbell.mcp.remote import RemoteBackend
    from runbell.mcp.tools import build_server

    backend = RemoteBackend.from_env()
    # The SDK logs at INFO to stderr; one line per HTTP call would drown the client's log.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    async def serve() -> None:
        try:
            await build_server(lambda: backend).run_stdio_async()
        finally:
            await backend.aclose()

    anyio.run(serve)
