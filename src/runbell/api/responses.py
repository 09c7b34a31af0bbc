"""How every JSON answer is written: compact, UTF-8, and ending in one newline.

The newline is for people: ``curl`` output otherwise runs into the shell prompt. Clients
parse it as whitespace. Server-Sent Events and the Prometheus text are not JSON and keep
their own framing.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


def dumps(content: Any) -> bytes:
    """The bytes of one JSON body, as every API answer (and every stored replay) has them."""
    return (
        json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
        + b"\n"
    )


class JSON(JSONResponse):
    """FastAPI's ``default_response_class`` and the problem+json renderer."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
