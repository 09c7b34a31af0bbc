"""Request bodies. Unknown fields are refused, so a typo is a 422 naming it, not silence.

Booleans, integers and numbers are strict: ``0`` is not ``false``, and ``"7"`` and ``true``
are not ``7`` (a wrong type is a 422 naming the field, as DESIGN §6 says), which is also
what the OpenAPI document promises a generated client. An integer field takes any JSON
number with a zero fraction: ``7.0`` is ``7``, as in JSON Schema (``type: integer``) and
I-JSON, so a client whose JSON library writes every number as a float is not refused.
"""

# size: every request body of the API in one module, so the OpenAPI document and the MCP tools
# read one set of models (split by resource once a resource outgrows a screen of them).

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from runbell.api.jsonschema import (
    CHAT_URL_MIN,
    HEADER_VALUE,
    HTTPS_NAME_URL,
    HTTPS_NAME_URL_MIN,
    QUIET_WINDOW,
    READER_URL_TEMPLATE_MIN,
    SIGNING_SECRET,
    SIGNING_SECRET_MIN,
    TASK_ID_TEMPLATE_MIN,
    Integer,
    NonNegativeInteger,
    Number,
    PositiveInteger,
    SequenceNumber,
    StallSeconds,
    chat_url,
    integral,
    reader_schema,
    refine,
    timezones,
)
from runbell.domain import actions as A
from runbell.domain import limits as L
from runbell.domain.channels import ALL_URGENCIES, PERSON_CHANNELS, RECEIPT_CHANNELS

RUN_ID_PATTERN = rf"^[A-Za-z0-9][A-Za-z0-9._:@~-]{{0,{L.RUN_ID - 1}}}$"


StateName = Literal[
    "queued", "working", "input_required", "stopping", "completed", "failed", "cancelled"
]


class Storable(BaseModel):
    """Text the databases cannot store (U+0000, lone surrogates; ``domain.limits``) is
    refused in every string of the body, nested keys and values included, before any
    field is read: the same 422 on SQLite and PostgreSQL, for every face using the model."""

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        found = L.first_unstorable(data)
        if found is not None:
            raise PydanticCustomError(
                "unstorable", "{field}: {why}", {"field": found[0], "why": found[1]}
            )
        return data


class Strict(Storable):
    model_config = ConfigDict(extra="forbid")


#: A version that may be a number or text: bounded so its text fits the columns that
#: store it (``notifications.subject_version``, ``operations.target_version``).
Version = (
    Annotated[StrictStr, Field(max_length=L.SUBJECT_VERSION)]
    | Annotated[
        StrictInt, Field(ge=-L.MAX_INT_VERSION, le=L.MAX_INT_VERSION), BeforeValidator(integral)
    ]
)


class Subject(Strict):
    type: str = Field(min_length=1, max_length=L.SUBJECT_TYPE)
    id: str = Field(min_length=1, max_length=L.SUBJECT_ID)
    version: Version | None = None


class Authority(Strict):
    users: list[Annotated[str, Field(max_length=L.EMAIL)]] = Field(
        default_factory=list,
        max_length=100,
        description="members who see, answer and may propose amendments (as before roles)",
    )
    roles: list[Literal["owner", "admin", "member"]] = Field(default_factory=list)
    viewers: list[Annotated[str, Field(max_length=L.EMAIL)]] = Field(
        default_factory=list, max_length=100, description="members who only see the run"
    )
    approvers: list[Annotated[str, Field(max_length=L.EMAIL)]] = Field(
        default_factory=list, max_length=100, description="members who see and answer it"
    )
    amenders: list[Annotated[str, Field(max_length=L.EMAIL)]] = Field(
        default_factory=list,
        max_length=100,
        description="members who see it and may propose amendments",
    )


class DoneWhenIn(Strict):
    """What counts as done: in words, and the operations a verified completion needs."""

    text: str = Field(min_length=1, max_length=L.DONE_WHEN)
    operations: list[Annotated[str, Field(min_length=1, max_length=L.RUN_ID)]] = Field(
        default_factory=list,
        max_length=L.DONE_WHEN_OPERATIONS,
        description="operation ids that must be confirmed for the run to be verified done",
    )


class RunLinkIn(Strict):
    kind: str = Field(
        min_length=1,
        pattern=rf"^[a-z][a-z0-9_.-]{{0,{L.LINK_KIND - 1}}}$",
        max_length=L.LINK_KIND,
        description="conversation, message, ticket…",
    )
    id: str = Field(min_length=1, max_length=L.LINK_ID, description="its id in its own system")
    url: str | None = Field(
        default=None,
        max_length=L.URL,
        description="an http(s) address shown on the run page; never fetched by Runbell",
    )


class DependsOnIn(Strict):
    run: str = Field(min_length=1, pattern=RUN_ID_PATTERN, description="another run of this tenant")
    request_id: str = Field(
        min_length=1, max_length=L.RUN_ID, description="that run's proposal (an approval)"
    )
    version: Annotated[StrictInt, Field(ge=1, le=2**31 - 1), BeforeValidator(integral)] | None = (
        Field(default=None, description="the request version (default: its current one)")
    )


class ScheduleRefIn(Strict):
    id: str = Field(min_length=1, max_length=L.ID, description="the schedule's id (sch_…)")


class RunPut(Strict):
    owner: str | None = Field(
        default=None, max_length=L.EMAIL, description="user id (usr_…) or email of a member"
    )
    title: str | None = Field(default=None, max_length=L.TITLE)
    kind: str | None = Field(
        default=None, max_length=L.KIND, description="driver: coding, browser…"
    )
    subject: Subject | None = None
    objective: str | None = Field(default=None, max_length=L.OBJECTIVE)
    authority: Authority | None = None
    notify_on_complete: StrictBool | None = None
    metadata: dict[str, Any] | None = None
    details: dict[str, Any] | None = Field(default=None, description="sensitive; never sent out")
    state: Literal["queued", "working"] | None = None
    sequence: SequenceNumber | None = None
    stall_after_seconds: StallSeconds | None = Field(
        default=None,
        description="stalled after this many seconds without progress while working "
        "(0: never; null: the tenant policy's default)",
    )
    done_when: DoneWhenIn | None = Field(default=None, description="null clears it")
    links: list[RunLinkIn] | None = Field(
        default=None,
        max_length=L.RUN_LINKS,
        description="replaces the run's links (null or [] clears them); not a new version",
    )
    depends_on: DependsOnIn | None = Field(
        default=None, description="another run's proposal this run's work assumes"
    )
    schedule: ScheduleRefIn | None = Field(
        default=None,
        description="only on creation: the schedule the run starts under (it must be "
        "active; the run records its instruction version and authority)",
    )
    worker_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=L.WORKER_ID,
        description="on creation: the worker that owns the run's completion (with the "
        "creating credential); changed later only by POST …/claim",
    )


class RunError(Storable):
    model_config = ConfigDict(extra="allow")
    code: str | None = Field(default=None, max_length=L.ERROR_CODE)
    message: str | None = Field(default=None, max_length=L.ERROR_MESSAGE)
    retryable: StrictBool = False
    user_action_required: StrictBool = False
    data_inconsistent: StrictBool = False


class Spend(Strict):
    amount: Number = Field(ge=0)
    currency: str = Field(min_length=1, max_length=L.CURRENCY, description="e.g. USD, or 'tokens'")


class Link(Strict):
    label: str = Field(min_length=1, max_length=L.LINK_LABEL)
    url: str = Field(min_length=1, max_length=L.URL)


class Report(Strict):
    """What the runtime says about the outcome. Not sensitive: tenant webhooks carry it."""

    iterations: NonNegativeInteger | None = None
    spend: Spend | None = None
    summary: str | None = Field(default=None, max_length=L.REPORT_SUMMARY)
    trace_id: str | None = Field(default=None, max_length=L.TRACE_ID)
    links: list[Link] | None = Field(default=None, max_length=20)


class SignalIn(Strict):
    event_id: str = Field(min_length=1, max_length=L.EVENT_ID)
    state: StateName
    sequence: SequenceNumber | None = None
    at: datetime | None = None
    reason: str | None = Field(
        default=None,
        max_length=L.REASON,
        description="PUBLIC: shown in the inbox, the feed and every tenant webhook. Stored as "
        "one safe line of at most 200 characters (control characters removed, longer text "
        "cut with …). Put private diagnostics in error",
    )
    error: RunError | None = Field(
        default=None,
        description="private: kept in authenticated run views, never in webhooks, the feed "
        "or notifications",
    )
    effects_verified: StrictBool | None = None
    report: Report | None = None
    worker_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=L.WORKER_ID,
        description="the worker reporting (recorded in the trace; a worker other than the "
        "run's completion owner may not report completed)",
    )

    @field_validator("at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("at must carry a timezone offset (e.g. Z)")
        return value


class ProgressIn(Strict):
    message: str | None = Field(default=None, max_length=L.PROGRESS_MESSAGE)
    counts: (
        dict[
            Annotated[str, Field(max_length=L.PROGRESS_KEY)],
            Integer | Number | Annotated[StrictStr, Field(max_length=L.PROGRESS_VALUE)],
        ]
        | None
    ) = Field(
        default=None,
        description='say what is counted, e.g. {"done": 2, "total": 5, "unit": "files"}',
    )
    at: datetime | None = None


class ReaderConfig(Strict):
    """``http_json``: a JSON status document per run."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=reader_schema)

    type: Literal["http_json"]
    url_template: str = Field(min_length=READER_URL_TEMPLATE_MIN, max_length=L.URL)
    state_field: str = Field(default="state", min_length=1, max_length=L.READER_FIELD)
    sequence_field: str | None = Field(default="sequence", min_length=1, max_length=L.READER_FIELD)
    state_map: dict[
        Annotated[str, Field(max_length=L.READER_FIELD)],
        Annotated[str, Field(max_length=L.READER_FIELD)],
    ] = Field(default_factory=dict)
    headers: dict[
        Annotated[str, Field(min_length=1, max_length=L.READER_HEADER_NAME)],
        Annotated[str, Field(max_length=L.READER_HEADER_VALUE)],
    ] = Field(default_factory=dict)
    timeout: Number = Field(default=5.0, gt=0, le=30)


class OpenAIResponsesReaderConfig(Strict):
    """``openai_responses``: ``GET {base_url}/v1/responses/{run_id}``; the run id is the
    response id (``resp_…``)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=refine(
            base_url={"allOf": [{"pattern": r"^https?://[^/?#{}@\s\\]+(/[^?#{}\s]*)?$"}]},
            organization={"allOf": [{"pattern": HEADER_VALUE}]},
            project={"allOf": [{"pattern": HEADER_VALUE}]},
            api_key={"allOf": [{"pattern": HEADER_VALUE}]},
        ),
    )

    type: Literal["openai_responses"]
    api_key: str = Field(
        min_length=1, max_length=L.READER_API_KEY, description="sealed at rest, shown only as ***"
    )
    base_url: str = Field(
        default="https://api.openai.com",
        min_length=8,
        max_length=L.URL,
        description="the API origin, without /v1",
    )
    organization: str | None = Field(default=None, max_length=L.READER_ORG)
    project: str | None = Field(default=None, max_length=L.READER_ORG)
    timeout: Number = Field(default=10.0, gt=0, le=30)


class McpTasksReaderConfig(Strict):
    """``mcp_tasks``: ``tasks/get`` on an MCP server over streamable HTTP."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=refine(
            url={"allOf": [{"pattern": r"^https?://[^/?#@\s\\]+([/?][^#\s]*)?$"}]},
            bearer={"allOf": [{"pattern": r"^[\x20-\x7e]+$"}]},
            task_id_template={"allOf": [{"pattern": r"\{run_id\}"}]},
        ),
    )

    type: Literal["mcp_tasks"]
    url: str = Field(min_length=8, max_length=L.URL, description="the streamable HTTP endpoint")
    bearer: str | None = Field(
        default=None,
        min_length=1,
        max_length=L.READER_BEARER,
        description="sealed, shown only as ***",
    )
    task_id_template: str = Field(
        default="{run_id}",
        min_length=TASK_ID_TEMPLATE_MIN,
        max_length=L.TASK_ID_TEMPLATE,
        description="the task id of a run",
    )
    timeout: Number = Field(default=10.0, gt=0, le=30)


#: The tags of the discriminated unions above: pydantic puts them in an error's location,
#: ``api.problems`` leaves them out of the field it names.
UNION_TAGS = frozenset({"http_json", "openai_responses", "mcp_tasks"})

AnyReaderConfig = Annotated[
    ReaderConfig | OpenAIResponsesReaderConfig | McpTasksReaderConfig,
    Field(discriminator="type"),
]


class SourceCreate(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                SIGNING_SECRET,
                {  # kind webhook (the default) needs a mapper; only it has a secret
                    "if": {"required": ["kind"], "properties": {"kind": {"const": "api"}}},
                    "then": {"properties": {"signing_secret": {"type": "null"}}},
                    "else": {
                        "required": ["mapper"],
                        "properties": {"mapper": {"enum": ["generic", "openai"]}},
                    },
                },
                {  # trust advisory (the default) needs a state reader to confirm signals
                    "if": {
                        "required": ["trust"],
                        "properties": {"trust": {"const": "authoritative"}},
                    },
                    "else": {"required": ["reader"], "properties": {"reader": {"type": "object"}}},
                },
            ]
        },
    )
    name: str = Field(min_length=1, max_length=L.NAME, pattern=r"^[A-Za-z0-9._-]+$")
    kind: Literal["api", "webhook"] = "webhook"
    mapper: Literal["generic", "openai"] | None = None
    trust: Literal["authoritative", "advisory"] = "advisory"
    reader: AnyReaderConfig | None = None
    signing_secret: str | None = Field(
        default=None,
        min_length=SIGNING_SECRET_MIN,
        max_length=L.SIGNING_SECRET,
        description="a webhook source's provider-issued whsec_ secret (OpenAI makes its own); "
        "omitted: Runbell makes one and shows it once",
    )


class SigningSecretIn(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"allOf": [SIGNING_SECRET]})
    signing_secret: str = Field(
        min_length=SIGNING_SECRET_MIN,
        max_length=L.SIGNING_SECRET,
        description="the provider's new whsec_ secret",
    )


class OptionIn(Strict):
    id: str = Field(min_length=1, max_length=L.OPTION_ID)
    label: str = Field(min_length=1, max_length=L.OPTION_LABEL)


# --- an input request's action (issue 19 item 1; runbell.domain.actions) --------------


class ShellActionIn(Strict):
    kind: Literal["shell"]
    command: str = Field(min_length=1, max_length=A.MAX_COMMAND, description="as a shell runs it")
    cwd: str | None = Field(default=None, max_length=A.MAX_PATH, description="where it runs")


class FileWriteActionIn(Strict):
    kind: Literal["file_write"]
    path: str = Field(min_length=1, max_length=A.MAX_PATH)
    content: str | None = Field(default=None, max_length=A.MAX_CONTENT)
    cwd: str | None = Field(default=None, max_length=A.MAX_PATH, description="the project")


class FileEditActionIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "oneOf": [
                {
                    "required": ["diff"],
                    "not": {"anyOf": [{"required": ["old"]}, {"required": ["new"]}]},
                },
                {"required": ["old", "new"], "not": {"required": ["diff"]}},
            ]
        },
    )
    kind: Literal["file_edit"]
    path: str = Field(min_length=1, max_length=A.MAX_PATH)
    diff: str | None = Field(default=None, max_length=A.MAX_CONTENT, description="unified")
    old: str | None = Field(default=None, max_length=A.MAX_EDIT_STRING)
    new: str | None = Field(default=None, max_length=A.MAX_EDIT_STRING)
    cwd: str | None = Field(default=None, max_length=A.MAX_PATH, description="the project")


HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
assert HttpMethod.__args__ == A.METHODS  # type: ignore[attr-defined]


class WebFetchActionIn(Strict):
    kind: Literal["web_fetch"]
    # 7: the pattern's shortest match, ``http://``
    url: str = Field(min_length=7, max_length=A.MAX_URL, pattern=r"^[Hh][Tt][Tt][Pp][Ss]?://")
    method: HttpMethod | None = Field(default=None, description="default GET")


class McpToolActionIn(Strict):
    kind: Literal["mcp_tool"]
    server: str | None = Field(default=None, min_length=1, max_length=A.MAX_TOOL)
    tool: str = Field(min_length=1, max_length=A.MAX_TOOL)
    arguments: dict[str, Any] | None = None


class GenericActionIn(Strict):
    kind: Literal["generic"]
    tool: str = Field(min_length=1, max_length=A.MAX_TOOL)
    arguments: dict[str, Any] | None = None


ActionIn = Annotated[
    ShellActionIn
    | FileWriteActionIn
    | FileEditActionIn
    | WebFetchActionIn
    | McpToolActionIn
    | GenericActionIn,
    Field(discriminator="kind"),
]


# --- edit before approving; machines that answer (issue 19 items 3, 4) ---------------

EDITABLE: dict[str, Any] = {
    "required": ["schema"],
    "properties": {"schema": {"type": "object"}, "value": {}},
    "additionalProperties": False,
}
Decision = Literal["approve", "reject", "answer"]


def _answer_value(value: Any) -> Any:
    if isinstance(value, str) and len(value) > L.ANSWER_VALUE:
        raise ValueError(f"value is at most {L.ANSWER_VALUE} characters")
    return value


#: A response's value: an option id or text (choice, text), or an approved editable
#: request's value, whatever its schema's type (checked against it by the flow).
AnswerValue = Annotated[
    Any,
    AfterValidator(_answer_value),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "maxLength": L.ANSWER_VALUE},
                {"type": "object"},
                {"type": "array"},
                {"type": "number"},
                {"type": "boolean"},
                {"type": "null"},
            ]
        }
    ),
]


class CallbackIn(Strict):
    decisions: list[Decision] | None = Field(
        default=None,
        min_length=1,
        max_length=3,
        description="the decisions the URL may give; omitted: all the request's kind takes",
    )


class CallbackAnswerIn(Strict):
    decision: Decision
    value: AnswerValue = Field(
        default=None,
        description="choice: an option id; text: the answer; approval: the edited value",
    )


class InputRequestIn(Strict):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {  # a choice has 2 or more options; other kinds none
                    "if": {"properties": {"kind": {"const": "choice"}}},
                    "then": {
                        "required": ["options"],
                        "properties": {"options": {"type": "array", "minItems": 2}},
                    },
                    "else": {
                        "properties": {"options": {"anyOf": [{"type": "null"}, {"maxItems": 0}]}}
                    },
                }
            ]
        },
    )
    input_request_id: str = Field(
        min_length=1,
        pattern=RUN_ID_PATTERN,
        description="runtime-chosen, unique per tenant; reuse to retry",
    )
    kind: Literal["approval", "choice", "text"]
    summary: str = Field(
        min_length=1, max_length=L.REQUEST_SUMMARY, description="safe to show a signed-in person"
    )
    details: dict[str, Any] | None = Field(
        default=None, description="sensitive: arguments, evidence, risk"
    )
    options: list[OptionIn] | None = Field(default=None, max_length=50, description="choice")
    expires_at: datetime | None = None
    blocks_work: StrictBool = True
    approvers: list[Annotated[str, Field(min_length=1, max_length=L.EMAIL)]] | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="who may answer this request (user ids or emails of members who may "
        "see the run); default: the run's approvers",
    )
    action: ActionIn | None = Field(
        default=None,
        description="sensitive, like details: what approving lets happen (a shell command, a "
        "file write or edit, a web fetch, a tool call), shown first to the person; risky "
        "patterns in it are flagged (``risks`` in the answer), never approved by themselves",
    )
    editable: dict[str, Any] | None = Field(
        default=None,
        description="approval: a value the person may edit before approving, "
        '{"schema": <JSON Schema subset>, "value": <initial value>} (docs/api.md)',
        json_schema_extra=EDITABLE,
    )
    callback: CallbackIn | None = Field(
        default=None,
        description="mint a single-use callback URL with the request (shown once, in the "
        "201's callback.url)",
    )

    @field_validator("expires_at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("expires_at must carry a timezone offset (e.g. Z)")
        return value


class ResponseIn(Strict):
    decision: Literal["approve", "reject", "answer"]
    value: AnswerValue = Field(
        default=None,
        description="choice: an option id; text: the answer; an approval of a request with "
        "an editable value: the (edited) value, checked against its schema",
    )
    expected_run_version: PositiveInteger
    expected_request_version: PositiveInteger


class CancelIn(Strict):
    reason: str | None = Field(
        default=None,
        max_length=L.REASON,
        description="PUBLIC: why, shown on the run and sent to the runtime, the feed and "
        "tenant webhooks (kept as one safe line of at most 200 characters)",
    )


# Channel names are spelled out for the OpenAPI document and mypy; checked against the
# channel facts (runbell.domain.channels) so they cannot drift apart.
ReceiptChannel = Literal["inbox", "email", "webpush", "chat"]
PersonChannel = Literal["email", "webpush", "chat"]
assert ReceiptChannel.__args__ == RECEIPT_CHANNELS  # type: ignore[attr-defined]
assert PersonChannel.__args__ == PERSON_CHANNELS  # type: ignore[attr-defined]


class ReceiptIn(Strict):
    kind: Literal["displayed", "opened", "dismissed", "clicked"]
    channel: ReceiptChannel | None = None


# --- you: preferences and destinations ------------------------------------------------

Urgency = Literal["low", "normal", "time_sensitive", "urgent"]
assert Urgency.__args__ == ALL_URGENCIES  # type: ignore[attr-defined]


class PreferencesIn(Storable):
    model_config = ConfigDict(extra="forbid", json_schema_extra=timezones)
    consent: dict[PersonChannel, list[Urgency]] | None = Field(
        default=None, description="urgencies each channel may interrupt you for"
    )
    quiet_hours: list[dict[str, Any]] | None = Field(
        default=None, max_length=14, json_schema_extra={"items": QUIET_WINDOW}
    )
    timezone: str | None = Field(default=None, max_length=L.TIMEZONE)
    locale: str | None = Field(default=None, max_length=L.LOCALE)


class PushKeys(Storable):
    model_config = ConfigDict(extra="forbid")
    p256dh: str = Field(min_length=40, max_length=L.P256DH)
    auth: str = Field(min_length=16, max_length=L.PUSH_AUTH)


class PushSubscriptionIn(Storable):
    model_config = ConfigDict(
        extra="ignore",  # browsers add expirationTime
        json_schema_extra=refine(endpoint={"allOf": [{"pattern": HTTPS_NAME_URL}]}),
    )
    # The shortest URL the pattern accepts (``https://a.b``). A smaller minLength
    # promised lengths nothing could fill, and schemathesis' coverage phase spent ~18 s
    # per run searching for a 10-character match.
    endpoint: str = Field(min_length=HTTPS_NAME_URL_MIN, max_length=L.URL)
    keys: PushKeys
    user_agent: str | None = Field(default=None, max_length=L.USER_AGENT)


class ChatIn(Storable):
    model_config = ConfigDict(extra="forbid", json_schema_extra=chat_url)
    url: str = Field(min_length=CHAT_URL_MIN, max_length=L.URL, description="an Apprise URL")
    label: str | None = Field(default=None, max_length=L.CHAT_LABEL)


# --- the operations ledger (issue 10) ---------------------------------------------------

OperationState = Literal[
    "planned",
    "sent",
    "confirmed",
    "conflict",
    "failed",
    "uncertain",
    "absent",
    "unresolved",
    "not_started",
]


class TargetIn(Strict):
    type: str = Field(
        min_length=1, max_length=L.TARGET_TYPE, description="e.g. invoice, issue, file"
    )
    id: str = Field(min_length=1, max_length=L.TARGET_ID)
    version: (
        Annotated[StrictStr, Field(max_length=L.TARGET_VERSION)]
        | Annotated[
            StrictInt, Field(ge=-L.MAX_INT_VERSION, le=L.MAX_INT_VERSION), BeforeValidator(integral)
        ]
        | None
    ) = Field(default=None, description="the version acted on")


class OperationIn(Strict):
    operation_id: str = Field(
        min_length=1,
        pattern=RUN_ID_PATTERN,
        description="stable, unique per run; a replacement worker declares the same id",
    )
    target: TargetIn
    intent: str = Field(
        min_length=1,
        max_length=L.INTENT,
        description="PUBLIC, short and non-sensitive (feed, webhooks, notifications); "
        "stored as one safe line of at most 200 characters",
    )
    details: dict[str, Any] | None = Field(
        default=None, description="sensitive: never in the feed, webhooks, logs or channels"
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=L.IDEMPOTENCY_KEY,
        description="the destination's own key",
    )


class OperationsIn(Strict):
    """``{"operations": [...]}``, or one operation's fields at the top level."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "anyOf": [
                {"required": ["operations"], "properties": {"operations": {"type": "array"}}},
                {
                    "required": ["operation_id", "target", "intent"],
                    "properties": {
                        "operation_id": {"type": "string"},
                        "target": {"type": "object"},
                        "intent": {"type": "string"},
                    },
                },
            ]
        },
    )

    operations: list[OperationIn] | None = Field(default=None, min_length=1, max_length=500)
    operation_id: str | None = Field(default=None, min_length=1, pattern=RUN_ID_PATTERN)
    target: TargetIn | None = None
    intent: str | None = Field(default=None, min_length=1, max_length=L.INTENT)
    details: dict[str, Any] | None = None
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=L.IDEMPOTENCY_KEY)
    epoch: NonNegativeInteger | None = Field(
        default=None, description="the epoch POST …/claim gave this worker"
    )


class OperationMove(Strict):
    state: OperationState
    evidence: dict[str, Any] | None = Field(
        default=None,
        description="receipt id, lookup result, who or what checked (kept in the ledger; "
        "never in the feed or webhooks)",
    )
    epoch: NonNegativeInteger | None = None


class ClaimIn(Strict):
    worker_id: str = Field(min_length=1, max_length=L.WORKER_ID)
    reason: str | None = Field(
        default=None,
        max_length=L.REASON,
        description="why the run is taken over (recorded in its history; one safe line)",
    )


class SupersedeIn(Strict):
    reason: str = Field(
        min_length=1,
        max_length=L.REASON,
        description="why new work may go ahead although this operation may still land "
        "(recorded in its history; one safe line)",
    )
    worker_id: str | None = Field(default=None, min_length=1, max_length=L.WORKER_ID)


class FindingIn(Strict):
    finding: Literal["confirmed", "absent", "conflict", "failed", "uncertain", "evidence"]
    evidence: dict[str, Any] | None = Field(
        default=None,
        description="receipt id, lookup result, who or what checked (kept in the ledger; "
        "never in the feed or webhooks)",
    )
    worker_id: str | None = Field(default=None, min_length=1, max_length=L.WORKER_ID)


# --- scoped keys and delegated tokens (issue 18 item 1) -----------------------------

Capability = Literal[
    "runs.report",
    "operations.declare",
    "operations.settle",
    "runs.cancel",
    "input_requests.create",
    "runs.read",
    "input_requests.answer",  # never implied by an unscoped key (issue 19 item 4)
]


class KeyIn(Strict):
    role: Literal["runtime", "admin"] = "runtime"
    name: str | None = Field(default=None, max_length=L.NAME)
    capabilities: list[Capability] | None = Field(
        default=None,
        max_length=7,
        description="a runtime key's capabilities; omitted or null: every capability but "
        "input_requests.answer, which is held only when named",
    )
    run_patterns: (
        list[Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9._:@~*?-]{1,200}$")]] | None
    ) = Field(
        default=None,
        min_length=1,
        max_length=20,
        description="run-id globs (* any characters, ? one); omitted or null: any run",
    )
    own_runs: StrictBool = Field(
        default=False, description="only the runs this key creates (with run_patterns: both)"
    )


class DelegationIn(Strict):
    capabilities: list[Capability] = Field(min_length=1, max_length=7)
    expires_in: Annotated[StrictInt, BeforeValidator(integral)] = Field(
        ge=60, le=7 * 24 * 3600, description="seconds until the token stops working"
    )
    name: str = Field(min_length=1, max_length=L.NAME, description="who the token is for")


# --- the inbox: acknowledging a group at once (issue 19 item 7) -----------------------

InboxFilterName = Literal["needs_me", "failures", "finished"]


class InboxSubject(Strict):
    type: str = Field(min_length=1, max_length=L.SUBJECT_TYPE)
    id: str = Field(min_length=1, max_length=L.SUBJECT_ID)


def _one_selector(schema: dict[str, Any]) -> None:
    # Exactly one of run_id, subject, notification_ids (flows.inbox_bulk checks it too).
    schema["oneOf"] = [
        {"required": ["run_id"], "properties": {"run_id": {"type": "string"}}},
        {"required": ["subject"], "properties": {"subject": {"type": "object"}}},
        {"required": ["notification_ids"], "properties": {"notification_ids": {"type": "array"}}},
    ]


class InboxAckIn(Strict):
    """Acknowledge one group of your open notifications: one run's, one subject's, or the
    ids named (exactly one of the three)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_selector)

    run_id: str | None = Field(default=None, min_length=1, pattern=RUN_ID_PATTERN)
    subject: InboxSubject | None = None
    notification_ids: list[Annotated[str, Field(min_length=1, max_length=L.ID)]] | None = Field(
        default=None, min_length=1, max_length=1000
    )
    filter: InboxFilterName | None = Field(
        default=None, description="only the notifications this inbox filter shows"
    )
    up_to: str | None = Field(
        default=None,
        min_length=1,
        max_length=L.ID,
        description="the newest notification id to include (the newest you saw)",
    )


# --- acting from a web push (issue 19 item 2) ------------------------------------------


class PushActionIn(Strict):
    """``POST /v1/push-actions``: what the service worker sends when a notification's
    button is pressed. The token (from the encrypted push payload) is the credential."""

    token: Annotated[StrictStr, Field(min_length=1, max_length=2000)]
    action: Literal["acknowledge", "snooze", "approve", "reject"]
