"""Every length and character rule, in one place (issue 16 rows 1 and 2).

The API's request models (``api.schemas`` and the routers' own models: ``Field(max_length=…)``),
the store's column widths (``store.tables``: ``sa.String(…)``) and so the OpenAPI document's
``maxLength`` all read these constants, so a value the API accepts always fits where it is
stored. A column that stores a *composite* of several accepted values is as wide as the
widest composite (``SUBJECT_VERSION_STORED``, ``EVENT_KEY``), never the other way round:
the API is not shrunk to fit a column. ``tests/integration/test_widths.py`` walks every
string column of every table on PostgreSQL against a map of what each column stores.

The character rule: text the databases cannot store is refused before anything is written
(422 naming the field), identically on SQLite and PostgreSQL. PostgreSQL's ``text`` and
``jsonb`` cannot hold U+0000 (NUL); no database (and no UTF-8 response) can hold a lone
UTF-16 surrogate (U+D800-U+DFFF). :data:`STORABLE_PATTERN` is the rule as the OpenAPI
document states it (only NUL: a JSON document cannot carry a lone surrogate as valid
UTF-8, and a non-Unicode-mode regular expression would misread surrogate pairs).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# --- identifiers --------------------------------------------------------------------
ID = 64  # server-made ids (usr_…, ntf_…, dlv_…) and hashes
RUN_ID = 200  # run_id, input_request_id, operation_id (RUN_ID_PATTERN: 1 + 199)
EVENT_ID = 200  # a signal's event_id (and a provider webhook's webhook-id)
IDEMPOTENCY_KEY = 200  # the Idempotency-Key header, and an operation's idempotency_key
WORKER_ID = 200

# --- people and tenants ---------------------------------------------------------------
EMAIL = 320  # RFC 3696 erratum 1690: 64 + 1 + 255
NAME = 200  # a person's, a tenant's, a source's or an API key's name
TIMEZONE = 64
LOCALE = 32

# --- runs -----------------------------------------------------------------------------
TITLE = 500
KIND = 100
OBJECTIVE = 10_000
SUBJECT_TYPE = 100
SUBJECT_ID = 200
SUBJECT_VERSION = 100  # as text; an integer version is within ±MAX_INT_VERSION
REASON = 500  # a signal's / cancellation's reason as sent (stored cut to PUBLIC_LINE)
PUBLIC_LINE = 200  # public text kept as one safe line (reason, intent)
ERROR_CODE = 200
ERROR_MESSAGE = 2000
CURRENCY = 8
LINK_LABEL = 200
URL = 2000  # every URL: links, readers, webhook endpoints, push endpoints, chat
REPORT_SUMMARY = 500
DONE_WHEN = 2000  # what counts as done, in words
DONE_WHEN_OPERATIONS = 100  # operations a run's done_when may require
LINK_KIND = 32  # a run link's kind: conversation, message, ticket…
LINK_ID = 200  # a run link's id in its own system
RUN_LINKS = 50  # links per run
TRACE_ID = 200
PROGRESS_MESSAGE = 500
PROGRESS_KEY = 100  # a key of progress counts
PROGRESS_VALUE = 200  # a text value of progress counts

# --- input requests, answers, amendments, cancellation --------------------------------
REQUEST_SUMMARY = 300
OPTION_ID = 100
OPTION_LABEL = 200
ANSWER_VALUE = 10_000
AMENDMENT_TEXT = 2000

# --- operations -----------------------------------------------------------------------
TARGET_TYPE = 100
TARGET_ID = 200
TARGET_VERSION = 100
INTENT = 500  # as sent; stored cut to PUBLIC_LINE

# --- sources, readers, endpoints, destinations ----------------------------------------
SIGNING_SECRET = 300
READER_API_KEY = 500
READER_ORG = 200
READER_BEARER = 4000
TASK_ID_TEMPLATE = 300
READER_FIELD = 200  # state_field, sequence_field, state_map keys and values
READER_HEADER_NAME = 200
READER_HEADER_VALUE = 4000
DESCRIPTION = 500
P256DH = 200
PUSH_AUTH = 100
USER_AGENT = 300
CHAT_LABEL = 200
CHAT_URL_HINT = 200  # scheme and host of a chat URL, for display (cut)

# --- policy ---------------------------------------------------------------------------
RULE_ID = 200
DIGEST_KEY = 100

# --- composites: columns that store several accepted values joined --------------------
#: notifications.subject_version = f"{type}:{id}:{version}" (flows.attention)
SUBJECT_VERSION_STORED = SUBJECT_TYPE + 1 + SUBJECT_ID + 1 + SUBJECT_VERSION
#: deliveries.event_key: f"{event type}:{run_id}:{operation_id or version}:{state or id}"
#: (flows.fanout); event types are at most 50 characters, states 20.
EVENT_TYPE = 50
EVENT_KEY = EVENT_TYPE + 1 + RUN_ID + 1 + RUN_ID + 1 + RUN_ID

#: The largest integer accepted where a version may be a number: its text fits
#: SUBJECT_VERSION and TARGET_VERSION, and it is exact as a JSON number in every client
#: (JavaScript's Number.MAX_SAFE_INTEGER).
MAX_INT_VERSION = 2**53 - 1

# --- the character rule -----------------------------------------------------------------
#: What the OpenAPI document states for every free-text string: no U+0000.
STORABLE_PATTERN = r"^[^\u0000]*$"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> str | None:
    """Why ``text`` cannot be stored (a short phrase), or None when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains U+0000 (NUL), which cannot be stored"
    return "contains a lone UTF-16 surrogate, which cannot be stored"


def first_unstorable(value: Any, path: str = "") -> tuple[str, str] | None:
    """The first string in a JSON value (keys included) that cannot be stored:
    ``(field path, why)``, the path dotted like the API's field names (``details.a.0``);
    a bad key names the object that holds it. None when everything can be stored."""
    for where, text, is_key in _strings(value, path):
        why = unstorable(text)
        if why is not None:
            return where or "body", (f"a key {why}" if is_key else why)
    return None


def _strings(value: Any, path: str) -> Iterator[tuple[str, str, bool]]:
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                yield path, key, True
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}.{index}" if path else str(index))
