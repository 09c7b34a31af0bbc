"""What the run page's "edit before approving" form shows (issue 19 item 3): a request's
editable value as text the person can change. Pure: the form's routes are
:mod:`runbell.web.edit_form`.

A schema of one string property (``{command: string}``: a shell command, a file's
content) is edited as that string, in a monospace textarea; any other schema as the
value's JSON. A refused edit is shown again as the person typed it, with the reason.
"""

from __future__ import annotations

import json
from typing import Any

from runbell.domain import editable
from runbell.domain.records import InputRequest
from runbell.i18n import _

#: The textarea's limit: the schema's own limit when it has one, else the JSON limit.
MAX_TEXT = editable.MAX_JSON


def edit_view(
    req: InputRequest, typed: str | None = None, error: str | None = None
) -> dict[str, Any] | None:
    """The form's fields for a pending approval with an editable value, else None.
    ``typed``: what the person sent (shown again with ``error`` after a refusal)."""
    spec = editable.parse_stored(req.editable)
    if spec is None or req.kind != "approval":
        return None
    name = spec.single_string
    if name is not None:
        sub = (spec.schema.get("properties") or {}).get(name) or {}
        initial = (spec.value or {}).get(name) if isinstance(spec.value, dict) else None
        text = initial if isinstance(initial, str) else ""
        return {
            "mode": "text",
            "field": name,
            "label": str(sub.get("title") or name.replace("_", " ").capitalize()),
            "text": text if typed is None else typed,
            "maxlength": int(sub.get("maxLength") or MAX_TEXT),
            "rows": min(max(text.count("\n") + 2, 3), 12),
            "error": error,
        }
    shown = json.dumps(spec.value, indent=2, ensure_ascii=False, sort_keys=True)
    return {
        "mode": "json",
        "field": None,
        "label": str(spec.schema.get("title") or _("Value (JSON)")),
        "text": shown if typed is None else typed,
        "maxlength": MAX_TEXT,
        "rows": min(max(shown.count("\n") + 2, 4), 16),
        "error": error,
    }


def edited_value(stored: object, typed: str) -> Any:
    """The value the person approves from what they typed over the request's ``editable``
    (``stored``); ValueError (with the words to show) when the JSON does not parse. The
    schema check is the answer flow's."""
    spec = editable.parse_stored(stored)
    if spec is None:
        raise ValueError(_("This request has no value to edit."))
    text = typed.replace("\r\n", "\n")  # browsers send textarea lines with CRLF
    name = spec.single_string
    if name is not None:
        base = dict(spec.value) if isinstance(spec.value, dict) else {}
        return {**base, name: text}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            _("The value is not valid JSON (line {line}, column {column}: {problem}).").format(
                line=exc.lineno, column=exc.colno, problem=exc.msg
            )
        ) from exc


def approved_text(req: InputRequest) -> str | None:
    """What an answer approved as edited, as the form showed it (the single string, or
    the JSON); None for an answer that did not edit."""
    if not req.edited:
        return None
    spec = editable.parse_stored(req.editable)
    name = spec.single_string if spec is not None else None
    if name is not None and isinstance(req.value, dict) and isinstance(req.value.get(name), str):
        return str(req.value[name])
    return json.dumps(req.value, indent=2, ensure_ascii=False, sort_keys=True)
