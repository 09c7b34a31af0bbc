"""Jobs: what counts as done, what a run is linked to, and what it depends on — pure.

A run is a job (seed 004): it can say **what counts as done** (``done_when``: words, and
the operations a verified completion needs confirmed), be **linked** to the conversations,
messages or tickets it came from (``links``: display links, never fetched), and **depend**
on another run's proposal at a version (``depends_on``). This module checks those fields
and says, in words, where a dependency stands; flows read and write the rows.

Where a dependency stands follows the input request it names, as it is now:

=============  ==========================================================================
``pending``    not decided yet: "depends on a proposal that is not approved yet"
``approved``   answered ``approve``
``rejected``   answered ``reject``
``answered``   answered otherwise (a choice or a text: not an approval)
``replaced``   a newer request replaced it, or its version moved past the one named
``cancelled``  its run stopped waiting for it (or finished without deciding)
``expired``    nobody decided in time
=============  ==========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypedDict

from runbell.domain import limits
from runbell.domain.errors import UnsafeDestination, ValidationFailed
from runbell.domain.ssrf import parse_url


class DoneWhen(TypedDict):
    """What counts as done: in words, and the operations that must be ``confirmed``."""

    text: str
    operations: list[str]


class RunLink(TypedDict):
    """A conversation, message, ticket… a run is linked to; ``url`` is for display."""

    kind: str
    id: str
    url: str | None


#: A link's kind: a short lowercase word (``conversation``, ``message``, ``ticket``, …).
LINK_KIND = re.compile(rf"^[a-z][a-z0-9_.-]{{0,{limits.LINK_KIND - 1}}}$")


def _text(value: Any, field: str, most: int) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > most:
        raise ValidationFailed(f"{field} is 1 to {most} characters, not blank", field=field)
    if any(not ch.isprintable() and ch not in "\n\t" for ch in value):
        raise ValidationFailed(f"{field} contains control characters", field=field)
    return value


def check_done_when(value: Any, field: str = "done_when") -> DoneWhen | None:
    """``{text, operations?}`` (or the text alone) checked and normalized:
    ``operations`` always a list, in the order given (an id named twice is a 422).
    None clears it."""
    if value is None:
        return None
    if isinstance(value, str):  # the words alone
        value = {"text": value}
    if not isinstance(value, Mapping):
        raise ValidationFailed(f"{field} is an object {{text, operations}}", field=field)
    unknown = set(value) - {"text", "operations"}
    if unknown:
        raise ValidationFailed(
            f"{field} takes text and operations, not {', '.join(sorted(unknown))}", field=field
        )
    text = _text(value.get("text"), f"{field}.text", limits.DONE_WHEN).strip()
    ops = value.get("operations") or []
    if not isinstance(ops, list) or len(ops) > limits.DONE_WHEN_OPERATIONS:
        raise ValidationFailed(
            f"{field}.operations is a list of at most {limits.DONE_WHEN_OPERATIONS} operation ids",
            field=f"{field}.operations",
        )
    for op in ops:
        _text(op, f"{field}.operations", limits.RUN_ID)
    if len(set(ops)) != len(ops):
        raise ValidationFailed(
            f"{field}.operations names an operation twice", field=f"{field}.operations"
        )
    return {"text": text, "operations": list(ops)}


def check_links(value: Any, field: str = "links") -> list[RunLink]:
    """``[{kind, id, url?}]`` checked: at most :data:`limits.RUN_LINKS`, no (kind, id)
    twice, ``url`` an http(s) address without credentials (``domain.ssrf.parse_url``).
    A link's URL is shown on the run page, never fetched by the server, so the address
    rules that guard what Runbell dials (private ranges, DNS) do not apply to it."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > limits.RUN_LINKS:
        raise ValidationFailed(
            f"{field} is a list of at most {limits.RUN_LINKS} links", field=field
        )
    out: list[RunLink] = []
    seen: set[tuple[str, str]] = set()
    for n, link in enumerate(value):
        at = f"{field}.{n}"
        if not isinstance(link, Mapping) or set(link) - {"kind", "id", "url"}:
            raise ValidationFailed(f"{at} is an object {{kind, id, url?}}", field=at)
        kind = link.get("kind")
        if not isinstance(kind, str) or not LINK_KIND.match(kind):
            raise ValidationFailed(
                f"{at}.kind is a lowercase word of at most {limits.LINK_KIND} characters "
                "(conversation, message, ticket…)",
                field=f"{at}.kind",
            )
        link_id = _text(link.get("id"), f"{at}.id", limits.LINK_ID)
        url = link.get("url")
        if url is not None:
            try:
                parse_url(url, field=f"{at}.url")
            except UnsafeDestination as exc:
                raise ValidationFailed(
                    f"{at}.url: {exc.detail} (a link is an http(s) address)", field=f"{at}.url"
                ) from exc
        if (kind, link_id) in seen:
            raise ValidationFailed(f"{at} repeats {kind}:{link_id}", field=at)
        seen.add((kind, link_id))
        out.append({"kind": kind, "id": link_id, "url": url})
    return out


def parse_link(value: str, field: str = "link") -> tuple[str, str]:
    """``conversation:abc`` → ``("conversation", "abc")`` (the id may hold colons)."""
    kind, sep, link_id = value.partition(":")
    if not sep or not LINK_KIND.match(kind) or not link_id or len(link_id) > limits.LINK_ID:
        raise ValidationFailed(
            f"{field} is kind:id, such as conversation:abc (not {value[:60]!r})", field=field
        )
    return kind, link_id


# --- dependencies ----------------------------------------------------------------------

DEPENDENCY_STATES = (
    "pending",
    "approved",
    "rejected",
    "answered",
    "replaced",
    "cancelled",
    "expired",
)

_WORDS = {
    "pending": "depends on a proposal that is not approved yet",
    "approved": "depends on a proposal that was approved",
    "rejected": "depends on a proposal that was rejected",
    "answered": "depends on a proposal that was answered",
    "replaced": "depends on a proposal that was replaced by a newer version",
    "cancelled": "depends on a proposal that was cancelled",
    "expired": "depends on a proposal that expired without a decision",
}


def dependency_state(
    request_state: str, decision: str | None, request_version: int, wanted_version: int
) -> str:
    """Where a dependency on a request at ``wanted_version`` stands, from the request as
    it is now (its state, its answer's decision, its version)."""
    if request_version > wanted_version or request_state == "superseded":
        return "replaced"
    if request_state == "answered":
        return {"approve": "approved", "reject": "rejected"}.get(decision or "", "answered")
    if request_state in ("cancelled", "expired"):
        return request_state
    return "pending"


def dependency_text(state: str, superseded_by: str | None = None) -> str:
    """The sentence a page and a notification show: "Depends on a proposal that …"."""
    text = _WORDS[state]
    if state == "replaced" and superseded_by:
        text += f" ({superseded_by})"
    return text[0].upper() + text[1:]


# --- what counts as done ----------------------------------------------------------------


def unmet(required: list[str], states: Mapping[str, str]) -> dict[str, str | None]:
    """The required operations that are not ``confirmed``, with their state (None: never
    declared), in the order ``done_when`` names them. ``absent`` does not count: the
    effect a job needs did not happen."""
    return {op: states.get(op) for op in required if states.get(op) != "confirmed"}
