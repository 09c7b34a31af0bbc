"""How every JSON answer is written: compact, UTF-8, and ending in one newline.

The newline is for people: ``curl`` output otherwise runs into the shell prompt. Clients
parse it as whitespace. Server-Sent Events and the Prometheus text are not JSON and keep
their own framing.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse, Response

from runbell.flows.idempotency import Answer
from runbell.flows.views import json_body

dumps = json_body

REPLAYED = "Idempotent-Replayed"


class JSON(JSONResponse):
    """FastAPI's ``default_response_class`` and the problem+json renderer."""

    def render(self, content: Any) -> bytes:
        return json_body(content)


def answered(answer: Answer) -> Response:
    """An answer of an Idempotency-Key-aware action: its exact bytes and status. A replay
    says so in ``Idempotent-Replayed: true`` (the body is the original, byte for byte)."""
    headers = {REPLAYED: "true"} if answer.replayed else None
    return Response(
        answer.body, status_code=answer.status, media_type="application/json", headers=headers
    )


def answer_json(answer: Answer) -> dict[str, Any]:
    """An answer's body as an object, for a face that passes it on parsed (MCP tools, the
    CLI, the demo): every answer of an Idempotency-Key-aware action is a JSON object."""
    doc = json.loads(answer.body)
    assert isinstance(doc, dict)
    return doc
