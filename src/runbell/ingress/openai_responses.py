"""The ``openai_responses`` state reader: what OpenAI says a background response is now.

An OpenAI ``response.*`` webhook is thin (``data.id`` only) and, like every advisory
callback, may be early, late, duplicated or reordered. This reader asks the source of
truth, ``GET {base_url}/v1/responses/{id}`` with the source's API key, and maps the
response's ``status``:

==============  =======================================================================
``queued``      ``working`` (a background response waiting for capacity is under way)
``in_progress`` ``working``
``completed``   ``completed``
``failed``      ``failed``
``cancelled``   ``cancelled``
``incomplete``  ``completed`` with ``effects_verified=False``: it stopped early (token
                limit, content filter; ``incomplete_details.reason``), so it alerts as
                ``needs_review``, never as a success
==============  =======================================================================

Any other status is a :class:`ReaderError` ("cannot tell"), never a guess.

The run ↔ response mapping: the Runbell ``run_id`` *is* the response id (``resp_…``),
as the OpenAI webhook mapper assumes; the id is URL-quoted into the path.

The request goes through :class:`~runbell.ingress.readers.HttpJsonReader` on the client
it is given (production: ``runbell.outbound.safe_client``: https only unless the
operator allow-lists the host, every resolved address checked, the checked address
dialled, no redirects followed), so ``base_url`` may point at an OpenAI-compatible
gateway but never into our own network.
"""

from __future__ import annotations

from typing import Any

import httpx

from runbell.domain.errors import ReaderError, ValidationFailed
from runbell.ingress.readers import HttpJsonReader, Observed

__all__ = ["DEFAULT_BASE_URL", "RESPONSE_STATES", "OpenAIResponsesReader"]

DEFAULT_BASE_URL = "https://api.openai.com"

#: OpenAI response ``status`` → (Runbell state, effects_verified).
RESPONSE_STATES: dict[str, tuple[str, bool | None]] = {
    "queued": ("working", None),
    "in_progress": ("working", None),
    "completed": ("completed", None),
    "failed": ("failed", None),
    "cancelled": ("cancelled", None),
    "incomplete": ("completed", False),
}


class OpenAIResponsesReader:
    """A :class:`~runbell.ingress.readers.StateReader` over OpenAI's Responses API.

    ``api_key`` is sent as ``Authorization: Bearer …`` and never appears in a repr or
    an error detail. ``base_url`` is the API origin (``https://api.openai.com``, or a
    compatible gateway), without ``/v1``.
    """

    def __init__(
        self,
        client: httpx.Client,
        api_key: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        organization: str | None = None,
        project: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not isinstance(api_key, str) or not api_key.strip():
            raise ValidationFailed("api_key is required", field="api_key")
        if not isinstance(base_url, str) or not base_url:
            raise ValidationFailed("base_url must be an http(s) URL", field="base_url")
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            raise ValidationFailed(
                "base_url is the API origin without /v1 (e.g. https://api.openai.com)",
                field="base_url",
            )
        if "{" in base or "}" in base or "?" in base or "#" in base:
            raise ValidationFailed(
                "base_url must not carry braces, a query or a fragment", field="base_url"
            )
        headers = {"Authorization": f"Bearer {api_key}"}
        if organization:
            headers["OpenAI-Organization"] = organization
        if project:
            headers["OpenAI-Project"] = project
        try:
            self._http = HttpJsonReader(
                client,
                base + "/v1/responses/{run_id}",
                state_field="status",
                sequence_field=None,
                headers=headers,
                timeout=timeout,
            )
        except ValidationFailed as exc:
            field = exc.extra.get("field")
            # The template is ours; a fault in it is a fault in base_url.
            raise ValidationFailed(
                exc.detail.replace("url_template", "base_url"),
                field="base_url" if field == "url_template" else field,
            ) from exc
        self.base_url = base

    def __repr__(self) -> str:
        return f"OpenAIResponsesReader(base_url={self.base_url!r})"

    def url_for(self, run_id: str) -> str:
        """The URL read for ``run_id`` (the response id)."""
        return self._http.url_for(run_id)

    def read(self, run_id: str) -> Observed:
        document, where = self._http.document(run_id)
        status = document.get("status") if isinstance(document, dict) else None
        if not isinstance(status, str):
            raise ReaderError(f"the answer of {where} has no response status")
        if isinstance(document, dict) and document.get("object") not in (None, "response"):
            raise ReaderError(f"the answer of {where} is not a response object")
        mapped = RESPONSE_STATES.get(status)
        if mapped is None:
            shown = status if len(status) <= 40 else status[:40] + "…"
            raise ReaderError(f"response status {shown!r} from {where} is not one Runbell knows")
        state, effects_verified = mapped
        return Observed(state=state, sequence=None, effects_verified=effects_verified)


def from_config(config: dict[str, Any], client: httpx.Client) -> OpenAIResponsesReader:
    """Build the reader from a stored (opened) ``openai_responses`` configuration."""
    return OpenAIResponsesReader(
        client,
        config.get("api_key") or "",
        base_url=config.get("base_url") or DEFAULT_BASE_URL,
        organization=config.get("organization"),
        project=config.get("project"),
        timeout=config.get("timeout", 10.0),
    )
