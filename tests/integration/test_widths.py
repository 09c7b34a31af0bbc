"""Issue 16 row 1: every value the API accepts fits where it is stored (PostgreSQL enforces
``varchar(n)``, SQLite does not), composites such as ``notifications.subject_version``
included. The widths come from one place, :mod:`runbell.domain.limits`."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pydantic import BaseModel

from runbell.api.routers.cancellation import CancelIn
from runbell.api.routers.schedules import ScheduleIn, StateIn
from runbell.api.schemas import (
    ChatIn,
    ClaimIn,
    InputRequestIn,
    OperationIn,
    PreferencesIn,
    PushSubscriptionIn,
    RunLinkIn,
    RunPut,
    ScheduleRefIn,
    SignalIn,
    SourceCreate,
    Subject,
)
from runbell.app import create_app
from runbell.domain import limits as L
from runbell.domain import notify_throttle
from runbell.flows.context import Core
from runbell.store import tables as t
from runbell.store.tables import metadata
from runbell.testing import TenantCreds, make_tenant
from tests.conftest import bearer


def test_widest_subject_still_notifies(client: TestClient, creds: TenantCreds) -> None:
    """Row 1: subject type 100 + id 200 characters is accepted, and every later signal and
    input request still answers (it was a 500 forever on PostgreSQL: varchar(200))."""
    key = bearer(creds.runtime_key)
    subject = {"type": "t" * 100, "id": "i" * 200, "version": "v1"}
    r = client.put(
        "/v1/runs/wide-subject",
        json={"owner": creds.owner_email, "state": "working", "subject": subject},
        headers=key,
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/v1/runs/wide-subject/input-requests",
        json={"input_request_id": "ask-1", "kind": "approval", "summary": "Deploy?"},
        headers=key,
    )
    assert r.status_code in (200, 201), r.text
    r = client.post(
        "/v1/runs/wide-subject/signals",
        json={"event_id": "e-fail", "state": "failed"},
        headers=key,
    )
    assert r.status_code == 200, r.text
    assert r.json()["notifications"], r.json()


# --- the column-width walker ------------------------------------------------------------

ENUM = 14  # states, kinds, channels, outcomes, roles: server-checked words ("input_required")
INTERNAL = {
    "id": L.ID,  # every server-made id (usr_…, ntf_…) and hash
    "tenant_id": L.ID,
    "user_id": L.ID,
    "recipient_user_id": L.ID,
    "owner_user_id": L.ID,
    "source_id": L.ID,
    "notification_id": L.ID,
    "delivery_id": L.ID,
    "digest_id": L.ID,
    "proposed_by": L.ID,
    "decided_by": L.ID,
    "cancel_requested_by": L.ID,
    "token_hash": L.ID,
    "key_hash": L.ID,
    "request_hash": L.ID,
    "body_hash": L.ID,
    "csrf_token": L.ID,
    "holder": L.ID,
}


def api_max(model: type[BaseModel], dotted: str) -> int:
    """The widest text the API model accepts at ``dotted`` (an integer as its digits)."""
    schema = model.model_json_schema()
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
        return node

    node: dict[str, Any] = schema
    for part in dotted.split("."):
        node = resolve(node)
        if "anyOf" in node:
            node = next(resolve(b) for b in node["anyOf"] if "properties" in resolve(b))
        node = node["properties"][part]
    widths = []
    for branch in [resolve(b) for b in node.get("anyOf", [node])]:
        if branch.get("type") == "string":
            assert "maxLength" in branch or "pattern" in branch, (model, dotted, branch)
            widths.append(branch.get("maxLength", L.RUN_ID))
        elif branch.get("type") == "integer":
            widths.append(len(str(int(branch["maximum"]))) + int(branch.get("minimum", 0) < 0))
    assert widths, (model, dotted, node)
    return max(widths)


def stored_widths() -> dict[str, int]:
    """What the API (or the server) can put in every string column: table.column →
    the widest value. A column missing here fails the walker: declare what it stores."""
    run = L.RUN_ID
    subject = (
        api_max(Subject, "type") + 1 + api_max(Subject, "id") + 1 + api_max(Subject, "version")
    )
    event_key = L.EVENT_TYPE + 1 + run + 1 + max(run, api_max(OperationIn, "operation_id"))
    event_key += 1 + max(run, ENUM)
    api = {
        "runs.run_id": run,
        "runs.title": api_max(RunPut, "title"),
        "runs.kind": api_max(RunPut, "kind"),
        "runs.stop_reason": api_max(SignalIn, "reason"),
        "runs.cancel_reason": api_max(CancelIn, "reason"),
        "runs.worker_id": api_max(ClaimIn, "worker_id"),
        "runs.owner_credential_id": L.ID,  # a credential's id
        "owner_changes.from_credential_id": L.ID,
        "owner_changes.to_credential_id": L.ID,
        "owner_changes.from_worker_id": api_max(ClaimIn, "worker_id"),
        "owner_changes.to_worker_id": api_max(ClaimIn, "worker_id"),
        "owner_changes.reason": L.PUBLIC_LINE,  # stored as one safe line (domain.text)
        "tenants.name": L.NAME,
        "users.email": api_max(RunPut, "owner"),
        "users.name": L.NAME,
        "api_keys.name": L.NAME,
        "sources.name": api_max(SourceCreate, "name"),
        "sources.mapper": ENUM,
        "transitions.event_id": api_max(SignalIn, "event_id"),
        "transitions.reason": api_max(SignalIn, "reason"),
        "inbound_events.event_id": api_max(SignalIn, "event_id"),
        "inbound_events.reason": api_max(SignalIn, "reason"),
        "mismatches.event_id": api_max(SignalIn, "event_id"),
        "mismatches.last_error": L.REASON,  # cut by the reconciler
        "notifications.subject_version": subject,
        "notifications.input_request_id": api_max(InputRequestIn, "input_request_id"),
        "notifications.reason": api_max(SignalIn, "reason"),
        "notifications.rule_id": L.RULE_ID,
        "notifications.summary": 300,  # a neutral summary of ours
        "notifications.closed_reason": L.REASON,
        "digest_items.rule_id": L.RULE_ID,
        "digest_items.digest_key": L.DIGEST_KEY,
        "digests.digest_key": L.DIGEST_KEY,
        "input_requests.id": api_max(InputRequestIn, "input_request_id"),
        "input_requests.summary": api_max(InputRequestIn, "summary"),
        "input_requests.superseded_by": api_max(InputRequestIn, "input_request_id"),
        "responses.input_request_id": run,
        "callback_urls.input_request_id": api_max(InputRequestIn, "input_request_id"),
        "responses.idempotency_key": L.IDEMPOTENCY_KEY,  # the header's max_length
        "idempotency_keys.key": L.IDEMPOTENCY_KEY,
        "idempotency_keys.principal": L.ID,
        "amendments.input_request_id": L.ID,
        "operations.operation_id": api_max(OperationIn, "operation_id"),
        "operations.target_type": api_max(OperationIn, "target.type"),
        "operations.target_id": api_max(OperationIn, "target.id"),
        "operations.target_version": api_max(OperationIn, "target.version"),
        "operations.intent": L.PUBLIC_LINE,  # stored as one safe line (domain.text)
        "operations.idempotency_key": api_max(OperationIn, "idempotency_key"),
        "preferences.timezone": api_max(PreferencesIn, "timezone"),
        "preferences.locale": api_max(PreferencesIn, "locale"),
        "webhook_endpoints.url": L.URL,
        "webhook_endpoints.description": L.DESCRIPTION,
        "webhook_endpoints.disabled_reason": L.REASON,
        "push_subscriptions.endpoint": api_max(PushSubscriptionIn, "endpoint"),
        "push_subscriptions.p256dh": api_max(PushSubscriptionIn, "keys.p256dh"),
        "push_subscriptions.auth": api_max(PushSubscriptionIn, "keys.auth"),
        "push_subscriptions.user_agent": api_max(PushSubscriptionIn, "user_agent"),
        "chat_destinations.url_hint": L.CHAT_URL_HINT,  # cut by flows.preferences
        "chat_destinations.label": api_max(ChatIn, "label"),
        "deliveries.destination": max(L.EMAIL, L.ID),  # an address or a destination id
        "deliveries.event_type": L.EVENT_TYPE,
        "deliveries.event_key": event_key,
        "deliveries.claimed_by": 100,  # a worker's name
        "deliveries.last_error": L.REASON,
        "delivery_attempts.provider_message_id": 300,
        "delivery_attempts.error": L.REASON,
        "delivery_attempts.response_excerpt": 1000,
        "feed_events.type": L.EVENT_TYPE,
        "operator_events.kind": L.EVENT_TYPE,
        "escalation_steps.reason": L.REASON,
        "kv.key": 100,
        "rate_limits.key": 9 + L.ID,  # "endpoint:" + id
        # "bearer:addr:" + an address (cut to 64) or "webhook:source:" + a source id
        "auth_failures.key": 15 + max(64, L.ID),
        "runs.depends_on_run": run,
        "runs.depends_on_request": api_max(InputRequestIn, "input_request_id"),
        "run_links.kind": api_max(RunLinkIn, "kind"),
        "run_links.link_id": api_max(RunLinkIn, "id"),
        "run_links.url": api_max(RunLinkIn, "url"),
        # scheduled work (issue 18)
        "runs.schedule_id": api_max(ScheduleRefIn, "id"),
        "schedules.name": api_max(ScheduleIn, "name"),
        "schedules.cadence": api_max(ScheduleIn, "cadence"),
        "schedules.url": api_max(ScheduleIn, "url"),
        "schedules.mode": ENUM,
        "schedules.owner_user_id": L.ID,
        "schedules.state_reason": api_max(StateIn, "reason"),
        "schedule_instructions.schedule_id": L.ID,
        "schedule_firings.schedule_id": L.ID,
        "schedule_firings.webhook_id": len("msg__") + L.ID + 12,  # msg_<id>_<epoch seconds>
        "schedule_firings.error": L.REASON,
        # people, scoped keys, fallback (issue 18)
        "run_access.via": L.ID,  # "run", or the id of the grant that gave the access
        "subject_grants.subject_type": api_max(Subject, "type"),
        "subject_grants.subject_id": api_max(Subject, "id"),
        "subject_grants.created_by": L.ID,
        "runs.created_by_credential": L.ID,
        "delegated_tokens.key_id": L.ID,
        "delegated_tokens.name": L.NAME,
        "escalation_steps.trigger": ENUM,
        # throttles (issue 19 item 5): a rule id, a key name, a run id / run kind / key id
        "throttle_counts.rule_id": L.RULE_ID,
        "throttle_counts.throttle_key": max(len(k) for k in notify_throttle.KEYS),
        "throttle_counts.key_value": max(L.RUN_ID, api_max(RunPut, "kind"), L.ID),
        # acting from a web push (issue 19 item 2)
        "push_action_uses.action": ENUM,
    }
    out: dict[str, int] = {}
    for table in metadata.sorted_tables:
        for column in table.columns:
            if not isinstance(column.type, sa.String) or isinstance(column.type, sa.Text):
                continue
            name = f"{table.name}.{column.name}"
            if name in api:
                out[name] = api[name]
            elif column.name in INTERNAL:
                out[name] = INTERNAL[column.name]
            elif column.name.endswith("run_id"):
                out[name] = run
            elif column.name in (
                "state",
                "status",
                "kind",
                "role",
                "trust",
                "outcome",
                "channel",
                "decision",
                "urgency",
                "attention_type",
                "claimed_state",
                "from_state",
                "to_state",
                "purpose",
            ):
                out[name] = ENUM
    return out


def test_every_string_column_fits_the_widest_value_the_api_accepts(db_url: str) -> None:
    """Walk every character column of the migrated PostgreSQL schema (information_schema,
    so the migrations are what is checked, not tables.py) against what is stored there."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite ignores varchar widths: the walker reads PostgreSQL's")
    engine = sa.create_engine(db_url)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT table_name, column_name, character_maximum_length "
                "FROM information_schema.columns WHERE table_schema = 'public' "
                "AND data_type = 'character varying' AND table_name <> 'alembic_version'"
            )
        ).all()
    engine.dispose()
    widths = stored_widths()
    reflected = {f"{t}.{c}": n for t, c, n in rows}
    assert set(reflected) == set(widths), (
        "declare what these columns store in stored_widths()",
        sorted(set(reflected) ^ set(widths)),
    )
    too_narrow = {
        name: (reflected[name], widths[name])
        for name in reflected
        if reflected[name] is not None and reflected[name] < widths[name]
    }
    assert not too_narrow, f"column width < widest accepted value: {too_narrow}"


# --- one run with every field at its widest, end to end --------------------------------


def widest_email() -> str:
    domain = ".".join(["d" * 63, "e" * 63, "f" * 63, "g" * 59]) + ".com"  # 255
    return "o" * 64 + "@" + domain


def test_a_run_with_every_field_at_its_widest_notifies(core: Core) -> None:
    """PUT, signals, progress, an input request and its answer, operations and their
    moves, an amendment, a tenant webhook: every field at the API's maximum. No 500,
    and the notifications (and the webhook deliveries, whose keys are composites) exist."""
    creds = make_tenant(core, owner_email=widest_email())
    assert len(creds.owner_email) == L.EMAIL
    run_id = "r" + "x" * (L.RUN_ID - 1)
    path = f"/v1/runs/{run_id}"
    with TestClient(create_app(core, bridge=False)) as client:
        rt, admin, owner = (
            bearer(creds.runtime_key),
            bearer(creds.admin_key),
            bearer(creds.owner_token),
        )

        def ok(r: Any) -> dict[str, Any]:
            assert r.status_code < 300, r.text
            return dict(r.json()) if r.content else {}

        ok(
            client.post(
                "/v1/webhook-endpoints",
                json={
                    "url": "http://127.0.0.1:9/" + "h" * 1900,
                    "description": "d" * L.DESCRIPTION,
                },
                headers=admin,
            )
        )
        url = "https://example.com/" + "p" * (L.URL - len("https://example.com/"))
        ok(
            client.put(
                path,
                json={
                    "owner": creds.owner_email,
                    "title": "t" * L.TITLE,
                    "kind": "k" * L.KIND,
                    "subject": {
                        "type": "s" * L.SUBJECT_TYPE,
                        "id": "i" * L.SUBJECT_ID,
                        "version": "v" * L.SUBJECT_VERSION,
                    },
                    "objective": "o" * L.OBJECTIVE,
                    "authority": {"users": [creds.owner_email]},
                    "metadata": {"m" * 100: "v" * 1000},
                    "state": "working",
                },
                headers={**rt, "Idempotency-Key": "k" * L.IDEMPOTENCY_KEY},
            )
        )
        ok(
            client.post(
                f"{path}/progress",
                json={
                    "message": "m" * L.PROGRESS_MESSAGE,
                    "counts": {"c" * L.PROGRESS_KEY: "u" * L.PROGRESS_VALUE},
                },
                headers=rt,
            )
        )
        ask_id = "a" + "q" * (L.RUN_ID - 1)
        option = "o" * L.OPTION_ID
        ok(
            client.post(
                f"{path}/input-requests",
                json={
                    "input_request_id": ask_id,
                    "kind": "choice",
                    "summary": "s" * L.REQUEST_SUMMARY,
                    "options": [
                        {"id": option, "label": "l" * L.OPTION_LABEL},
                        {"id": "p" * L.OPTION_ID, "label": "m" * L.OPTION_LABEL},
                    ],
                    "details": {"d" * 100: "x" * 1000},
                },
                headers=rt,
            )
        )
        run = ok(client.get(path, headers=rt))
        ok(
            client.post(
                f"/v1/input-requests/{ask_id}/responses",
                json={
                    "decision": "answer",
                    "value": option,
                    "expected_run_version": run["version"],
                    "expected_request_version": 1,
                },
                headers={**owner, "Idempotency-Key": "a" * L.IDEMPOTENCY_KEY},
            )
        )
        op_id = "o" + "p" * (L.RUN_ID - 1)
        ok(
            client.post(
                f"{path}/operations",
                json={
                    "operation_id": op_id,
                    "target": {
                        "type": "t" * L.TARGET_TYPE,
                        "id": "i" * L.TARGET_ID,
                        "version": "v" * L.TARGET_VERSION,
                    },
                    "intent": "i" * L.INTENT,
                    "idempotency_key": "k" * L.IDEMPOTENCY_KEY,
                    "details": {"d": "x" * 1000},
                },
                headers=rt,
            )
        )
        for state in ("sent", "uncertain"):
            ok(
                client.patch(
                    f"{path}/operations/{op_id}",
                    json={"state": state, "evidence": {"e" * 100: "x" * 1000}},
                    headers=rt,
                )
            )
        ok(
            client.post(
                f"{path}/amendments",
                json={
                    "text": "a" * L.AMENDMENT_TEXT,
                    "changes": {"title": "n" * L.TITLE, "objective": "o" * L.OBJECTIVE},
                },
                headers=owner,
            )
        )
        done = ok(
            client.post(
                f"{path}/signals",
                json={
                    "event_id": "e" * L.EVENT_ID,
                    "state": "completed",
                    "reason": "r" * L.REASON,
                    "error": {"code": "c" * L.ERROR_CODE, "message": "m" * L.ERROR_MESSAGE},
                    "report": {
                        "summary": "s" * L.REPORT_SUMMARY,
                        "trace_id": "t" * L.TRACE_ID,
                        "links": [{"label": "l" * L.LINK_LABEL, "url": url}],
                    },
                },
                headers=rt,
            )
        )
        assert done["notifications"], done
        notes = ok(client.get("/v1/notifications", headers=owner))["notifications"]
        assert any(n["run_id"] == run_id for n in notes)
    with core.db.read() as conn:
        keys = conn.execute(sa.select(t.deliveries.c.event_key)).scalars().all()
        versions = conn.execute(sa.select(t.notifications.c.subject_version)).scalars().all()
    assert max(len(k or "") for k in keys) > 300, "a composite event key wider than before"
    assert max(len(v or "") for v in versions) == L.SUBJECT_VERSION_STORED
