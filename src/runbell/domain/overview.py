"""The runs overview's pure parts: its groups, what a row's counts say, its page cursor.

A run the viewer may see is in exactly one group, the first that applies:

1. ``needs_you`` — it waits for an answer the viewer may give (a pending input request on
   a run they own or are named on, or an open ``input_required`` notification to them);
2. ``stalled`` — it is active and has an open ``stalled`` notification;
3. ``needs_review`` — its current version has a ``needs_review`` notification that is
   open or acknowledged (a completed run whose effects still need a check);
4. ``working`` — any other active run (queued, working, input_required, stopping);
5. ``finished`` — any other terminal run, most recent first, paged.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from runbell.domain.errors import ValidationFailed

GROUPS = ("needs_you", "stalled", "needs_review", "working", "finished")
STATES = ("queued", "working", "input_required", "stopping", "completed", "failed", "cancelled")


def parse_list(values: Iterable[str] | None, allowed: tuple[str, ...], field: str) -> list[str]:
    """``?x=a&x=b,c`` as ``[a, b, c]`` (repeatable and comma-separated, order kept, no
    repeats); an unknown value is a 422 naming ``field``."""
    out: list[str] = []
    for value in values or []:
        for part in value.split(","):
            item = part.strip()
            if not item:
                continue
            if item not in allowed:
                raise ValidationFailed(
                    f"{field}: {item!r} is not one of {', '.join(allowed)}", field=field
                )
            if item not in out:
                out.append(item)
    return out


def may_answer(
    viewer_id: str | None,
    viewer_role: str,
    owner_user_id: str,
    authority: Mapping[str, Any] | None,
    named: bool,
) -> bool:
    """Whether the viewer may answer the run's request: its owner, a person whose access
    rows let them answer (``named``: ``authority.users``/``approvers``, an approver grant
    of its subject — not a viewer), or a member of a role its authority names. Tenant
    owners and admins see every run but answer only when named. (A request that names its
    own approvers is decided by the caller: only they.)"""
    if viewer_id is None:
        return False
    if named or owner_user_id == viewer_id:
        return True
    roles = authority.get("roles") if isinstance(authority, Mapping) else None
    return isinstance(roles, list) and viewer_role in roles


def _label(name: str) -> str:
    return name.replace("_", " ").strip()


def counts_text(counts: Any) -> str:
    """A runtime's progress counts as "N label" pairs, in the order given: ``{"confirmed":
    9, "conflicts": 2}`` → ``9 confirmed, 2 conflicts``. Never "N of M": ``done`` and
    ``total`` are two counts (``2 done, 5 total``), and a ``unit`` says what they count
    (``2 done, 5 total (test files)``). Non-numeric values other than ``unit`` are left out.

    >>> counts_text({"done": 2, "total": 5, "unit": "test files"})
    '2 done, 5 total (test files)'
    >>> counts_text({"confirmed": 9, "being_checked": 1})
    '9 confirmed, 1 being checked'
    """
    if not isinstance(counts, Mapping):
        return ""
    pairs = []
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        number = int(value) if isinstance(value, float) and value.is_integer() else value
        pairs.append(f"{number} {_label(str(name))}")
    if not pairs:
        return ""
    text = ", ".join(pairs)
    unit = counts.get("unit")
    if isinstance(unit, str) and unit.strip():
        text += f" ({unit.strip()})"
    return text


def encode_cursor(finished_at: datetime, run_id: str) -> str:
    """The ``finished`` group's page cursor: opaque to clients."""
    raw = json.dumps([finished_at.isoformat(), run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(finished_at, run_id)`` a cursor from :func:`encode_cursor` names; 422
    (field ``after``) for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, run_id = json.loads(raw)
        when = datetime.fromisoformat(at)
        if not isinstance(run_id, str) or when.tzinfo is None:
            raise ValueError("bad cursor")
    except (ValueError, TypeError, binascii.Error, json.JSONDecodeError) as exc:
        raise ValidationFailed(
            "after: not a cursor of the finished group (use next_cursor as given)",
            field="after",
        ) from exc
    return when, run_id
