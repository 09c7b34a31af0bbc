"""structlog set-up: dotted event names, bound context, never secrets.

Tracebacks are rendered plain, without frame locals: structlog's default pretty
tracebacks print every local variable, which would put request headers (bearer
tokens) and sealed-secret plaintext into the log on the first unhandled error.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog

#: ``drop(method_name, event_dict)``: True to leave a line out (see :func:`configure`).
Drop = Callable[[str, MutableMapping[str, Any]], bool]


def _dropping(drop: Drop) -> structlog.types.Processor:
    def processor(
        _logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if drop(method_name, event_dict):
            raise structlog.DropEvent
        return event_dict

    return processor


def _processors(json: bool, drop: Drop | None = None) -> list[structlog.types.Processor]:
    renderer: structlog.types.Processor
    first: list[structlog.types.Processor] = [_dropping(drop)] if drop else []
    if json:
        renderer = structlog.processors.JSONRenderer()
        return [
            *first,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,  # plain text, no locals
            renderer,
        ]
    renderer = structlog.dev.ConsoleRenderer(
        colors=False, exception_formatter=structlog.dev.plain_traceback
    )
    return [
        *first,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        renderer,
    ]


#: Libraries whose INFO and DEBUG lines carry secrets: request URLs (push endpoints,
#: webhook and chat URLs are capabilities), SMTP conversations (aiosmtpd's ``mail.log``,
#: the demo's sink, logs AUTH). httpx2/httpcore2/mcp: the mcp SDK's HTTP stack, used by
#: the mcp_tasks reader. ``tests/channels/test_channel_contract.py`` sends through every
#: channel with these levels and checks no secret reaches any log.
QUIET_LIBRARIES = (
    "alembic",
    "urllib3",
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "mcp",
    "apprise",
    "mail.log",
)


def quiet_libraries() -> None:
    """Only warnings and errors from :data:`QUIET_LIBRARIES`, whatever the level."""
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure(*, json: bool = False, level: str = "INFO", drop: Drop | None = None) -> None:
    """Log to stderr at ``level``; ``drop`` leaves out lines a reader does not need (``runbell
    serve --demo`` drops the per-item INFO lines that would bury its first-start text)."""
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    quiet_libraries()
    structlog.configure(
        processors=_processors(json, drop),
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def ensure_safe_defaults() -> None:
    """If nobody configured structlog, use plain tracebacks instead of its default
    locals-dumping ones (embedders and tests get the same safety as the CLI)."""
    if not structlog.is_configured():
        structlog.configure(
            processors=_processors(json=False),
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        )
