"""State readers: ask the runtime what a run's state really is.

Advisory sources (DESIGN §3) send callbacks that may be early, late, duplicated or
reordered, so their signals are not applied on their word: reconciliation asks the
source's state reader for the authoritative state and applies the signal only when
the two agree (invariant 3: no success alert before authoritative state agrees).

A reader either answers an :class:`Observed` or raises :class:`ReaderError` — "I
cannot tell" is never guessed into a state. Reconciliation treats that as a reason to
re-check later, not as a mismatch.

:class:`HttpJsonReader` reads a JSON status endpoint of the runtime. It never follows
redirects (a redirect could send configured credentials to another host, and an
SSRF-checked destination must not hop to an unchecked one), caps the body size and
total time (a hostile or broken endpoint must not stall a worker), and never puts
header values into error details or reprs, since headers usually carry credentials.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable
from urllib.parse import quote, urlsplit

import httpx

from runbell.domain.errors import ReaderError, RunbellError, UnsafeDestination, ValidationFailed
from runbell.domain.runs import MAX_SEQUENCE
from runbell.domain.ssrf import parse_url
from runbell.ingress.mappers import RUN_STATES

__all__ = [
    "MAX_BODY_BYTES",
    "HttpJsonReader",
    "Observed",
    "StateReader",
    "StaticReader",
    "reader_from_config",
    "redacted",
]

#: Largest status document read; a run status is a few hundred bytes.
MAX_BODY_BYTES = 1_048_576

_RUN_ID_PLACEHOLDER = "{run_id}"
_EMPTY: Mapping[str, str] = MappingProxyType({})
_CONFIG_KEYS = frozenset(
    {"type", "url_template", "state_field", "sequence_field", "state_map", "headers", "timeout"}
)
_MAX_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Observed:
    """A run's authoritative state as the reader saw it, with its sequence if known.

    ``effects_verified=False`` says the runtime itself reports that a ``completed`` run did
    not do all it set out to (an OpenAI response that ended ``incomplete``): the claim is
    confirmed, but it alerts as ``needs_review``, never as a success. ``None``: the reader
    does not know, and the signal's own word stands.
    """

    state: str
    sequence: int | None
    effects_verified: bool | None = None


@runtime_checkable
class StateReader(Protocol):
    """Reads the authoritative state of one run.

    ``read`` raises :class:`ReaderError` when it cannot tell (network, status code,
    unparsable or unexpected answer); it never guesses.
    """

    def read(self, run_id: str) -> Observed: ...


class HttpJsonReader:
    """A :class:`StateReader` that GETs a JSON document per run from the runtime.

    ``url_template`` contains ``{run_id}``, replaced by the URL-quoted run id (slashes
    included, so an id cannot change the path it reads). ``state_field`` and
    ``sequence_field`` are dotted paths into the document (``data.status``; a numeric
    part indexes a list); ``sequence_field=None`` means the runtime has no sequence.
    ``state_map`` translates provider statuses to Runbell states; a status not in the
    map is used as-is if it already is a Runbell state.

    ``client`` is injected: production passes the SSRF-guarded client, tests a plain
    one. Redirects are refused per request even if the client would follow them.
    """

    def __init__(
        self,
        client: httpx.Client,
        url_template: str,
        *,
        state_field: str = "state",
        sequence_field: str | None = "sequence",
        state_map: Mapping[str, str] = _EMPTY,
        headers: Mapping[str, str] = _EMPTY,
        timeout: float = 5.0,
    ) -> None:
        self._client = client
        self._url_template = _check_url_template(url_template)
        self._state_path = _check_path(state_field, "state_field")
        self._sequence_path = (
            None if sequence_field is None else _check_path(sequence_field, "sequence_field")
        )
        self._state_field = state_field
        self._sequence_field = sequence_field
        self._state_map = MappingProxyType(_check_state_map(state_map))
        self._headers = _check_headers(headers)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise ValidationFailed("timeout must be a number of seconds", field="timeout")
        if not 0 < timeout <= _MAX_TIMEOUT_S:
            raise ValidationFailed(
                f"timeout must be more than 0 and at most {_MAX_TIMEOUT_S:g} seconds",
                field="timeout",
            )
        self._timeout = float(timeout)

    def __repr__(self) -> str:
        # Header names only: values are credentials.
        return (
            f"HttpJsonReader(url_template={self._url_template!r}, "
            f"state_field={self._state_field!r}, sequence_field={self._sequence_field!r}, "
            f"headers=[{', '.join(sorted(self._headers.keys()))}])"
        )

    def url_for(self, run_id: str) -> str:
        """The URL read for ``run_id``; raises :class:`ReaderError` for an unusable id."""
        quoted = quote(run_id, safe="")
        # "." and ".." survive quoting and would be collapsed as dot segments by URL
        # normalisation, reading a different resource than the run's.
        if quoted in {"", ".", ".."}:
            raise ReaderError(f"run id {run_id!r} cannot be placed in a URL")
        return self._url_template.replace(_RUN_ID_PLACEHOLDER, quoted)

    def document(self, run_id: str) -> tuple[Any, str]:
        """GET the run's JSON document: (the parsed document, the redacted URL it came
        from, safe for error details). Raises :class:`ReaderError` like :meth:`read`."""
        url = self.url_for(run_id)
        where = redacted(url)
        body = self._fetch(url, where)
        try:
            return json.loads(body), where
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            raise ReaderError(f"state reader got a non-JSON answer from {where}") from exc

    def read(self, run_id: str) -> Observed:
        """GET the run's status document and extract its state and sequence."""
        document, where = self.document(run_id)
        raw_state = _dig(document, self._state_path)
        if raw_state is _MISSING:
            raise ReaderError(
                f"state field {self._state_field!r} is missing from the answer of {where}"
            )
        if not isinstance(raw_state, str):
            raise ReaderError(f"state field {self._state_field!r} from {where} is not a string")
        state = self._state_map.get(raw_state, raw_state)
        if state not in RUN_STATES:
            raise ReaderError(
                f"state {_short(raw_state)} from {where} is not a Runbell state "
                "and is not in the reader's state_map"
            )
        return Observed(state=state, sequence=self._sequence(document, where))

    def _fetch(self, url: str, where: str) -> bytes:
        deadline = time.monotonic() + self._timeout
        try:
            with self._client.stream(
                "GET",
                url,
                headers=self._headers,
                timeout=self._timeout,
                follow_redirects=False,
            ) as response:
                status = response.status_code
                if not 200 <= status < 300:
                    hint = " (redirects are not followed)" if 300 <= status < 400 else ""
                    raise ReaderError(f"state reader got HTTP {status} from {where}{hint}")
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise ReaderError(
                            f"state reader answer from {where} exceeds {MAX_BODY_BYTES} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise ReaderError(
                            f"state reader answer from {where} took over {self._timeout:g} s"
                        )
                    chunks.append(chunk)
                return b"".join(chunks)
        except ReaderError:
            raise
        except RunbellError as exc:
            # E.g. UnsafeDestination from the SSRF-guarded transport: its detail names
            # the refusing rule, never a credential.
            raise ReaderError(f"state reader request to {where} refused: {exc.detail}") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            # The exception class says what failed (ConnectError, ReadTimeout, …); its
            # message is left out because some transports echo request details.
            raise ReaderError(
                f"state reader request to {where} failed: {type(exc).__name__}"
            ) from exc

    def _sequence(self, document: Any, where: str) -> int | None:
        if self._sequence_path is None:
            return None
        value = _dig(document, self._sequence_path)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, str) and value.isascii() and value.isdigit():
            value = int(value)  # some APIs send 64-bit counters as strings
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQUENCE:
            raise ReaderError(
                f"sequence field {self._sequence_field!r} from {where} "
                "is not a non-negative 64-bit integer"
            )
        return value


class StaticReader:
    """An in-memory :class:`StateReader`: a dict ``run_id → Observed`` you can change.

    For tests and for users exercising an integration without a runtime status
    endpoint. Reading an unknown run raises :class:`ReaderError`, like a real reader
    that cannot tell. Thread-safe, since readers are called from worker threads.
    """

    def __init__(self, states: Mapping[str, Observed] | None = None) -> None:
        self._lock = threading.Lock()
        self._states: dict[str, Observed] = {}
        for run_id, observed in (states or {}).items():
            self.set(run_id, observed.state, observed.sequence)

    def set(self, run_id: str, state: str, sequence: int | None = None) -> None:
        """Record what ``read(run_id)`` answers from now on."""
        if state not in RUN_STATES:
            raise ValidationFailed(f"{state!r} is not a Runbell state", field="state")
        with self._lock:
            self._states[run_id] = Observed(state=state, sequence=sequence)

    def forget(self, run_id: str) -> None:
        """Make ``read(run_id)`` raise :class:`ReaderError` again."""
        with self._lock:
            self._states.pop(run_id, None)

    def read(self, run_id: str) -> Observed:
        with self._lock:
            observed = self._states.get(run_id)
        if observed is None:
            raise ReaderError(f"no state known for run {run_id!r}")
        return observed

    def __repr__(self) -> str:
        with self._lock:
            return f"StaticReader({len(self._states)} runs)"


def reader_from_config(config: Mapping[str, Any], client: httpx.Client) -> StateReader:
    """Build the reader a source's stored configuration describes.

    Only ``{"type": "http_json", ...}`` exists today. Unknown keys are refused rather
    than ignored, so a typo such as ``state_feild`` fails loudly at configuration time
    instead of silently reading the wrong field on every signal.
    """
    if not isinstance(config, Mapping):
        raise ValidationFailed("state reader configuration must be an object", field="type")
    kind = config.get("type")
    if kind != "http_json":
        detail = "type is required" if kind is None else f"unknown state reader type {kind!r}"
        raise ValidationFailed(f"{detail}; supported: 'http_json'", field="type")
    unknown = sorted(str(key) for key in config if key not in _CONFIG_KEYS)
    if unknown:
        raise ValidationFailed(f"unknown state reader setting {unknown[0]!r}", field=unknown[0])
    url_template = config.get("url_template")
    if url_template is None:
        raise ValidationFailed("url_template is required", field="url_template")
    if not isinstance(url_template, str):
        raise ValidationFailed("url_template must be a string", field="url_template")
    sequence_field = config.get("sequence_field", "sequence")
    if sequence_field is not None and not isinstance(sequence_field, str):
        raise ValidationFailed("sequence_field must be a string", field="sequence_field")
    return HttpJsonReader(
        client,
        url_template,
        state_field=_config_str(config, "state_field", "state"),
        sequence_field=sequence_field,
        state_map=_config_mapping(config, "state_map"),
        headers=_config_mapping(config, "headers"),
        timeout=config.get("timeout", 5.0),
    )


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()


def _dig(document: Any, path: tuple[str, ...]) -> Any:
    current = document
    for part in path:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isascii() and part.isdigit():
            index = int(part)
            if index >= len(current):
                return _MISSING
            current = current[index]
        else:
            return _MISSING
    return current


def parsed_url(url: str, field: str) -> None:
    """The shared parse step (``domain.ssrf.parse_url``) for a reader's URL: a failure is
    a configuration error naming ``field`` (its ``rule`` kept)."""
    try:
        parse_url(url, field=field)
    except UnsafeDestination as exc:
        raise ValidationFailed(exc.detail, field=field, rule=exc.extra.get("rule")) from exc


def _check_url_template(url_template: str) -> str:
    if not isinstance(url_template, str) or _RUN_ID_PLACEHOLDER not in url_template:
        raise ValidationFailed("url_template must contain {run_id}", field="url_template")
    # The run id is the caller's input: in the scheme, credentials, host or port it would
    # choose which server is asked (and the SSRF check at registration saw only "probe").
    # Only the path and the query are the run's to fill.
    misplaced = ValidationFailed(
        "url_template may place {run_id} only in the path or the query, "
        "never in the scheme, credentials, host, port or fragment",
        field="url_template",
    )
    invalid = ValidationFailed("url_template is not a valid URL", field="url_template")
    try:
        parts = urlsplit(url_template)
    except ValueError as exc:
        raise invalid from exc
    # urlsplit reads no scheme in "http{run_id}://…" (braces are not scheme characters)
    scheme = url_template.partition(":")[0]
    if _RUN_ID_PLACEHOLDER in scheme + parts.scheme + parts.netloc + parts.fragment:
        raise misplaced
    # The shared parse step (domain.ssrf): whatever the SSRF guard and the HTTP client
    # would fail to read (invalid IDNA, bad labels or ports) is refused here, naming
    # the field, not later as a 500 from the client's lazy host decoding.
    parsed_url(url_template.replace(_RUN_ID_PLACEHOLDER, "probe"), "url_template")
    try:
        probe = httpx.URL(url_template.replace(_RUN_ID_PLACEHOLDER, "probe"))
        other = httpx.URL(url_template.replace(_RUN_ID_PLACEHOLDER, "other"))
        probe_origin = (probe.scheme, probe.userinfo, probe.host, probe.port)
        other_origin = (other.scheme, other.userinfo, other.host, other.port)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:  # UnicodeError: lazy IDNA
        raise invalid from exc
    # Belt and braces against parser differences: whatever the run id is, the URL the
    # client sends must name the same origin.
    if other_origin != probe_origin:
        raise misplaced
    if probe.scheme not in {"http", "https"} or not probe.host:
        raise ValidationFailed("url_template must be an absolute http(s) URL", field="url_template")
    if probe.userinfo:
        raise ValidationFailed(
            "url_template must not carry credentials; use headers", field="url_template"
        )
    return url_template


def _check_path(dotted: str, field: str) -> tuple[str, ...]:
    if not isinstance(dotted, str) or not dotted:
        raise ValidationFailed(f"{field} must be a non-empty dotted path", field=field)
    parts = tuple(dotted.split("."))
    if any(not part for part in parts):
        raise ValidationFailed(f"{field} has an empty segment", field=field)
    return parts


def _check_state_map(state_map: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(state_map, Mapping):
        raise ValidationFailed("state_map must be an object", field="state_map")
    checked: dict[str, str] = {}
    for key, value in state_map.items():
        if not isinstance(key, str):
            raise ValidationFailed("state_map keys must be strings", field="state_map")
        if value not in RUN_STATES:
            raise ValidationFailed(
                f"state_map[{key!r}] must be one of {', '.join(sorted(RUN_STATES))}",
                field=f"state_map.{key}",
            )
        checked[key] = value
    return checked


def _check_headers(headers: Mapping[str, str]) -> dict[str, str]:
    # Validated up front so a bad value fails at configuration time, and the error
    # names the header but never echoes its value.
    if not isinstance(headers, Mapping):
        raise ValidationFailed("headers must be an object", field="headers")
    checked: dict[str, str] = {}
    for name, value in headers.items():
        if not isinstance(name, str) or not name or not name.isascii():
            raise ValidationFailed("header names must be ASCII strings", field="headers")
        field = f"headers.{name}"
        if not isinstance(value, str):
            raise ValidationFailed(f"header {name!r} must be a string", field=field)
        try:
            httpx.Headers({name: value})
        except (UnicodeEncodeError, ValueError, TypeError) as exc:
            raise ValidationFailed(f"header {name!r} is not a valid header", field=field) from exc
        if any(ch in value for ch in "\r\n\0") or any(ch in name for ch in "\r\n\0: "):
            raise ValidationFailed(f"header {name!r} is not a valid header", field=field)
        checked[name] = value
    return checked


def _config_str(config: Mapping[str, Any], key: str, default: str) -> str:
    value = config.get(key, default)
    if not isinstance(value, str):
        raise ValidationFailed(f"{key} must be a string", field=key)
    return value


def _config_mapping(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    if value is None:
        return _EMPTY
    if not isinstance(value, Mapping):
        raise ValidationFailed(f"{key} must be an object", field=key)
    return value


def redacted(url: str) -> str:
    """The URL without query string or credentials, safe to put in an error detail."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError):
        return "the configured URL"
    host = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port is not None else ""
    return f"{parsed.scheme}://{host}{port}{parsed.raw_path.split(b'?')[0].decode()}"


def _short(value: str, limit: int = 64) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "…")
