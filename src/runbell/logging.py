"""structlog set-up: dotted event names, bound context, never secrets."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(*, json: bool = False, level: str = "INFO") -> None:
    logging.basicConfig(stream=sys.stderr, level=level, format="%(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Their DEBUG lines carry request paths: push endpoints and chat URLs are capabilities.
    for noisy in ("urllib3", "httpx", "httpcore", "apprise"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
