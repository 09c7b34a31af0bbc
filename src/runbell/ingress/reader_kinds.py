"""The kinds of state reader a source can have, and what each keeps secret.

=====================  ==============================================  ==================
``type``               reads                                           secret (sealed)
=====================  ==============================================  ==================
``http_json``          a JSON status document per run                  header values
``openai_responses``   ``GET {base_url}/v1/responses/{run_id}``        ``api_key``
``mcp_tasks``          ``tasks/get`` on an MCP server (streamable      ``bearer``
                       HTTP)
=====================  ==============================================  ==================

Registration (``flows.sources``) builds the reader once to refuse a config that cannot
work (naming the field), checks :func:`destination` with the SSRF guard, then stores the
config with :func:`seal`; a source view shows :func:`masked`; the process's reader
factory (``flows.context``) builds from :func:`opened`. Unknown keys are refused for
every kind, so a typo fails at registration instead of on every signal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from runbell.domain.errors import ValidationFailed
from runbell.ingress import mcp_tasks, openai_responses, readers
from runbell.ingress.readers import StateReader

__all__ = ["KINDS", "build", "destination", "masked", "opened", "seal"]

#: Reader type → the keys its configuration may carry.
KINDS: dict[str, frozenset[str]] = {
    "http_json": frozenset(
        {"type", "url_template", "state_field", "sequence_field", "state_map", "headers", "timeout"}
    ),
    "openai_responses": frozenset(
        {"type", "base_url", "api_key", "organization", "project", "timeout"}
    ),
    "mcp_tasks": frozenset({"type", "url", "bearer", "task_id_template", "timeout"}),
}

#: Reader type → its top-level secret string fields (http_json's are its header values).
_SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    "http_json": (),
    "openai_responses": ("api_key",),
    "mcp_tasks": ("bearer",),
}


def _kind(config: Mapping[str, Any]) -> str:
    if not isinstance(config, Mapping):
        raise ValidationFailed("state reader configuration must be an object", field="type")
    kind = config.get("type")
    if kind not in KINDS:
        detail = "type is required" if kind is None else f"unknown state reader type {kind!r}"
        supported = ", ".join(repr(k) for k in KINDS)
        raise ValidationFailed(f"{detail}; supported: {supported}", field="type")
    unknown = sorted(str(key) for key in config if key not in KINDS[str(kind)])
    if unknown:
        raise ValidationFailed(f"unknown state reader setting {unknown[0]!r}", field=unknown[0])
    return str(kind)


def build(
    config: Mapping[str, Any], client: httpx.Client, *, allow_hosts: frozenset[str]
) -> StateReader:
    """The reader ``config`` (secrets opened) describes. ``client`` serves the HTTP
    kinds; ``mcp_tasks`` makes its own SSRF-guarded connection per read, with
    ``allow_hosts``."""
    kind = _kind(config)
    if kind == "http_json":
        return readers.reader_from_config(config, client)
    if kind == "openai_responses":
        return openai_responses.from_config(dict(config), client)
    return mcp_tasks.from_config(dict(config), allow_hosts=allow_hosts)


def destination(config: Mapping[str, Any]) -> str:
    """A URL standing for where the reader connects, for the registration SSRF check."""
    kind = _kind(config)
    if kind == "http_json":
        return str(config["url_template"]).replace("{run_id}", "probe")
    if kind == "openai_responses":
        base = str(config.get("base_url") or openai_responses.DEFAULT_BASE_URL).rstrip("/")
        return base + "/v1/responses/probe"
    return str(config["url"])


def seal(config: Mapping[str, Any], seal_one: Callable[[str], str]) -> dict[str, Any]:
    """The config to store: every secret sealed with ``seal_one``."""
    return _map_secrets(config, seal_one)


def opened(config: Mapping[str, Any], open_one: Callable[[str], str]) -> dict[str, Any]:
    """A stored config with its secrets opened, to build the reader from."""
    return _map_secrets(config, open_one)


def masked(config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config as a view shows it: each secret only as ``***``."""
    return _map_secrets(config, lambda _value: "***")


def _map_secrets(config: Mapping[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    out = dict(config)
    kind = out.get("type", "http_json")
    if kind == "http_json" or "headers" in out:
        out["headers"] = {k: fn(v) for k, v in (out.get("headers") or {}).items()}
    for name in _SECRET_FIELDS.get(str(kind), ()):
        if out.get(name) is not None:
            out[name] = fn(out[name])
    return out
