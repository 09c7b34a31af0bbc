"""The runs overview over the API (issue 10 item 10): ``GET /v1/runs?group=…`` puts every
run the caller may see in one group — needs you, stalled, needs review, working, finished
— on SQLite and PostgreSQL. Visibility is the same as ``GET /v1/runs``: a member sees
only their own runs and those whose authority names them; another tenant's runs never
appear. One query per group, whatever the number of runs."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from runbell.flows import overview
from runbell.flows.attention import raise_attention
from runbell.flows.context import Core
from runbell.flows.policy import policy_in
from runbell.store import runs as run_store
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer

GROUPS = ("needs_you", "stalled", "needs_review", "working", "finished")


# --- helpers -----------------------------------------------------------------------------


def put_run(client: TestClient, creds: TenantCreds, run_id: str, **fields: Any) -> None:
    body = {"owner": creds.owner_email, "state": "working", "title": f"Run {run_id}", **fields}
    r = client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 201, r.text


def signal(client: TestClient, creds: TenantCreds, run_id: str, state: str, **fields: Any) -> None:
    body = {"event_id": f"{run_id}-{state}", "state": state, **fields}
    r = client.post(f"/v1/runs/{run_id}/signals", json=body, headers=bearer(creds.runtime_key))
    assert r.status_code == 200 and r.json()["outcome"] == "applied", r.text


def ask(client: TestClient, creds: TenantCreds, run_id: str) -> None:
    body = {"input_request_id": f"ask-{run_id}", "kind": "approval", "summary": "Go ahead?"}
    r = client.post(
        f"/v1/runs/{run_id}/input-requests", json=body, headers=bearer(creds.runtime_key)
    )
    assert r.status_code == 201, r.text


def stall(core: Core, tenant_id: str, run_id: str) -> str:
    """A ``stalled`` notification through the normal attention path (what the stall
    sweep raises), in its own transaction."""
    with core.db.transaction() as tx:
        run = run_store.require_run(tx.conn, tenant_id, run_id, for_update=True)
        raised = raise_attention(
            tx,
            policy_in(core, tx, tenant_id),
            run,
            attention="stalled",
            version=run.version,
            facts={},
            reason="no progress for 5 minutes",
            owner_present=False,
        )
    assert raised.created and raised.notification_id
    return raised.notification_id


def grouped(client: TestClient, token: str, query: str = "") -> dict[str, list[str]]:
    sep = "&" if query else ""
    r = client.get(f"/v1/runs?group={','.join(GROUPS)}{sep}{query}", headers=bearer(token))
    assert r.status_code == 200, r.text
    out: dict[str, list[str]] = {g: [] for g in GROUPS}
    for run in r.json()["runs"]:
        out[run["group"]].append(run["run_id"])
    return out


@pytest.fixture
def world(core: Core, client: TestClient, creds: TenantCreds, clock: Clock) -> dict[str, Any]:
    """One run in each group for the tenant owner, one run a member owns, one the member
    is named on, and another tenant's run."""
    clock.freeze()
    member_email = "mia@acme.test"
    member_id, member_token = add_user(core, creds.tenant_id, member_email, "member")

    put_run(client, creds, "ask")
    ask(client, creds, "ask")
    put_run(client, creds, "quiet")
    stall(core, creds.tenant_id, "quiet")
    put_run(client, creds, "review")
    signal(client, creds, "review", "completed", effects_verified=False)
    put_run(client, creds, "busy")
    r = client.post(
        "/v1/runs/busy/progress",
        json={"message": "moving tasks", "counts": {"confirmed": 9, "conflicts": 2}},
        headers=bearer(creds.runtime_key),
    )
    assert r.status_code == 202, r.text
    for n in range(3):
        clock.advance(10)
        put_run(client, creds, f"done-{n}")
        signal(client, creds, f"done-{n}", "completed", effects_verified=True)
    # The member's own run, waiting for them (the tenant owner sees it, cannot answer it).
    put_run(client, creds, "mine", owner=member_email)
    ask(client, creds, "mine")
    # The tenant owner's run that names the member in its authority.
    put_run(client, creds, "shared", authority={"users": [member_email]})
    # A run whose authority names the admin role: the tenant owner (role owner) is not it.
    put_run(client, creds, "admins", owner=member_email, authority={"roles": ["admin"]})
    ask(client, creds, "admins")

    other = make_tenant(core, "globex")
    put_run(client, other, "ask")  # the same run id, in another tenant
    ask(client, other, "ask")
    return {"member_token": member_token, "member_id": member_id, "other": other}


# --- the groups ----------------------------------------------------------------------------


def test_every_run_is_in_the_group_that_says_what_it_needs(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    groups = grouped(client, creds.owner_token)
    working = groups.pop("working")
    assert groups == {
        "needs_you": ["ask"],
        "stalled": ["quiet"],
        "needs_review": ["review"],
        "finished": ["done-2", "done-1", "done-0"],  # most recent first
    }
    # The member's requests are not the tenant owner's to answer: working, for them.
    assert sorted(working) == ["admins", "busy", "mine", "shared"]


def test_rows_say_what_their_counts_count(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    r = client.get("/v1/runs?group=working,needs_you", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    rows = {run["run_id"]: run for run in r.json()["runs"]}
    assert rows["busy"]["counts_text"] == "9 confirmed, 2 conflicts"
    assert rows["busy"]["title"] == "Run busy"
    assert rows["busy"]["state"] == "working"
    assert "details" not in rows["busy"]
    assert rows["ask"]["group"] == "needs_you"
    assert rows["ask"]["pending_input_request"]["id"] == "ask-ask"
    assert rows["ask"]["pending_input_request"]["summary"] == "Go ahead?"
    assert r.json()["more"] == {"needs_you": False, "working": False}


def test_a_member_sees_only_their_runs_and_those_naming_them(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    groups = grouped(client, world["member_token"])
    groups["needs_you"].sort()
    assert groups == {
        "needs_you": ["admins", "mine"],
        "stalled": [],
        "needs_review": [],
        "working": ["shared"],
        "finished": [],
    }
    # Without group= the same visibility holds (the list by id).
    r = client.get("/v1/runs", headers=bearer(world["member_token"]))
    assert sorted(run["run_id"] for run in r.json()["runs"]) == ["admins", "mine", "shared"]


def test_another_tenants_runs_never_appear(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    other: TenantCreds = world["other"]
    assert grouped(client, other.owner_token) == {
        "needs_you": ["ask"],
        "stalled": [],
        "needs_review": [],
        "working": [],
        "finished": [],
    }
    r = client.get("/v1/runs?group=needs_you", headers=bearer(other.owner_token))
    (row,) = r.json()["runs"]
    assert row["pending_input_request"]["id"] == "ask-ask"
    assert row["title"] == "Run ask"
    # The API key of the first tenant sees its own "ask" only, and nobody to ask for it.
    keyed = grouped(client, creds.runtime_key)
    assert keyed["needs_you"] == []
    assert "ask" in keyed["working"] and len(keyed["working"]) == 5


def test_a_role_named_in_the_authority_needs_to_answer(
    core: Core, client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    _, admin_token = add_user(core, creds.tenant_id, "ada@acme.test", "admin")
    groups = grouped(client, admin_token)
    assert groups["needs_you"] == ["admins"]
    assert "ask" in groups["working"]  # an admin sees the owner's request, cannot answer it


def test_answering_moves_the_run_out_of_needs_you(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    run = client.get("/v1/runs/ask", headers=bearer(creds.owner_token)).json()
    r = client.post(
        "/v1/input-requests/ask-ask/responses",
        json={
            "decision": "approve",
            "expected_run_version": run["version"],
            "expected_request_version": 1,
        },
        headers={**bearer(creds.owner_token), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 200, r.text
    groups = grouped(client, creds.owner_token)
    assert groups["needs_you"] == []
    assert "ask" in groups["working"]


def test_progress_after_the_stall_is_resolved_moves_it_back_to_working(
    core: Core, client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    # The stall sweep resolves its notification on progress; here it is closed through
    # the one closing path, as that sweep does.
    from runbell.flows.attention import close_notification
    from runbell.store import notifications as notes

    with core.db.transaction() as tx:
        (note,) = [
            n
            for n in notes.open_for_run(tx.conn, creds.tenant_id, "quiet")
            if n["attention_type"] == "stalled"
        ]
        assert close_notification(tx, note, "resolved", "recovered")
    groups = grouped(client, creds.owner_token)
    assert groups["stalled"] == []
    assert "quiet" in groups["working"]


def test_an_acknowledged_review_still_needs_review(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    r = client.get("/v1/notifications?limit=200", headers=bearer(creds.owner_token))
    (review,) = [n for n in r.json()["notifications"] if n["attention_type"] == "needs_review"]
    r = client.post(f"/v1/notifications/{review['id']}/ack", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    groups = grouped(client, creds.owner_token)
    assert groups["needs_review"] == ["review"]
    assert "review" not in groups["finished"]


def test_finished_runs_page_most_recent_first(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    seen: list[str] = []
    url = "/v1/runs?group=finished&limit=2"
    r = client.get(url, headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    page = r.json()
    seen += [run["run_id"] for run in page["runs"]]
    assert page["more"] == {"finished": True} and page["next_cursor"]
    r = client.get(f"{url}&after={page['next_cursor']}", headers=bearer(creds.owner_token))
    page = r.json()
    seen += [run["run_id"] for run in page["runs"]]
    assert page["next_cursor"] is None and page["more"] == {"finished": False}
    assert seen == ["done-2", "done-1", "done-0"]


def test_state_filter_and_bad_values_name_their_field(
    client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    r = client.get("/v1/runs?state=completed&state=failed", headers=bearer(creds.owner_token))
    assert r.status_code == 200
    assert sorted(x["run_id"] for x in r.json()["runs"]) == ["done-0", "done-1", "done-2", "review"]
    r = client.get(
        "/v1/runs?state=completed,input_required&group=working,finished",
        headers=bearer(creds.owner_token),
    )
    assert {x["run_id"] for x in r.json()["runs"]} == {
        "done-0",
        "done-1",
        "done-2",
        "mine",
        "admins",
    }
    for query, field in [
        ("group=needs_you,bogus", "group"),
        ("state=working,nope", "state"),
        ("group=finished&after=not-a-cursor", "after"),
    ]:
        r = client.get(f"/v1/runs?{query}", headers=bearer(creds.owner_token))
        assert r.status_code == 422, (query, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert field in r.text


def test_one_query_per_group_however_many_runs(
    core: Core, client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    def statements() -> int:
        seen: list[str] = []

        def count(conn: Any, cursor: Any, sql: str, *args: Any) -> None:
            seen.append(sql)

        sa.event.listen(core.db.engine, "before_cursor_execute", count)
        try:
            who = _principal(core, creds)
            shown = overview.overview(core, who)
        finally:
            sa.event.remove(core.db.engine, "before_cursor_execute", count)
        assert sum(len(g["runs"]) for g in shown["groups"].values()) >= 9
        return len([s for s in seen if s.lstrip().upper().startswith("SELECT")])

    before = statements()
    for n in range(10):
        put_run(client, creds, f"more-{n}")
        ask(client, creds, f"more-{n}")
        put_run(client, creds, f"late-{n}")
        signal(client, creds, f"late-{n}", "failed")
    assert statements() == before
    # the feed head, one query per group, then the page's operation counts in one
    assert before <= 2 + len(GROUPS)


def _principal(core: Core, creds: TenantCreds) -> Any:
    from runbell.domain.principal import Principal

    return Principal(tenant_id=creds.tenant_id, kind="user", role="owner", user_id=creds.owner_id)


# --- the /runs page (both databases; the browser test covers what a person sees) --------


def page_groups(html: str) -> dict[str, list[str]]:
    """The run ids each group of a rendered /runs page links to, in order."""
    out: dict[str, list[str]] = {}
    for name in GROUPS:
        start = html.index(f'id="group-{name}"')
        end = html.find("<section", start + 1)
        section = html[start : end if end != -1 else len(html)]
        out[name] = re.findall(r'class="run-link" href="/runs/([^"]+)"', section)
    return out


def test_the_runs_page_shows_the_groups_to_whoever_is_signed_in(
    core: Core, client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    from tests.integration.test_web import sign_in

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    r = client.get("/runs")
    assert r.status_code == 200, r.text
    assert 'href="/runs" aria-current="page"' in r.text
    groups = page_groups(r.text)
    assert groups["needs_you"] == ["ask"]
    assert groups["stalled"] == ["quiet"]
    assert groups["needs_review"] == ["review"]
    assert sorted(groups["working"]) == ["admins", "busy", "mine", "shared"]
    assert groups["finished"] == ["done-2", "done-1", "done-0"]
    assert "9 confirmed, 2 conflicts" in r.text
    assert "Waiting for: Go ahead?" in r.text


def test_the_runs_page_of_a_member_and_its_empty_groups(
    core: Core, client: TestClient, creds: TenantCreds, world: dict[str, Any]
) -> None:
    from tests.integration.test_web import sign_in

    sign_in(client, core, creds.tenant_id, world["member_id"])
    r = client.get("/runs")
    assert r.status_code == 200, r.text
    groups = page_groups(r.text)
    assert sorted(groups["needs_you"]) == ["admins", "mine"]
    assert groups["working"] == ["shared"]
    assert groups["stalled"] == groups["needs_review"] == groups["finished"] == []
    assert "No run has stopped making progress." in r.text
    assert "No run has finished yet." in r.text
    for hidden in ("Run ask", "Run busy", "Run quiet", "Run review"):
        assert hidden not in r.text


def test_the_runs_page_pages_finished_runs(
    core: Core,
    client: TestClient,
    creds: TenantCreds,
    clock: Clock,
    world: dict[str, Any],
) -> None:
    from tests.integration.test_web import sign_in

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    for n in range(3, 3 + overview.DEFAULT_LIMIT):
        clock.advance(1)
        put_run(client, creds, f"done-{n}")
        signal(client, creds, f"done-{n}", "completed", effects_verified=True)
    first = client.get("/runs")
    assert page_groups(first.text)["finished"][0] == f"done-{2 + overview.DEFAULT_LIMIT}"
    older = re.search(r'href="(/runs\?after=[^"]+)" id="older-runs"', first.text)
    assert older, "a full page of finished runs links to the older ones"
    second = client.get(older.group(1))
    assert page_groups(second.text)["finished"] == ["done-2", "done-1", "done-0"]
    assert 'id="older-runs"' not in second.text
    bad = client.get("/runs?after=nonsense")
    assert bad.status_code == 422
    assert "does not exist" in bad.text


def test_a_row_with_an_operations_ledger_says_what_the_ledger_counts(
    client: TestClient, creds: TenantCreds
) -> None:
    """The ledger's own words win over progress counts: "2 confirmed, 1 uncertain"."""
    from tests.integration.test_operations import declare, move, op

    put_run(client, creds, "ledger-row")
    declare(client, creds, "ledger-row", {"operations": [op("l-1"), op("l-2"), op("l-3")]})
    for op_id in ("l-1", "l-2", "l-3"):
        move(client, creds, "ledger-row", op_id, "sent")
    move(client, creds, "ledger-row", "l-1", "confirmed", evidence={"receipt_id": "r-1"})
    move(client, creds, "ledger-row", "l-2", "confirmed", evidence={"receipt_id": "r-2"})
    move(client, creds, "ledger-row", "l-3", "uncertain", evidence={"error": "timeout"})
    r = client.get("/v1/runs?group=working", headers=bearer(creds.owner_token))
    assert r.status_code == 200, r.text
    [row] = [run for run in r.json()["runs"] if run["run_id"] == "ledger-row"]
    assert row["counts_text"] == "2 confirmed, 1 uncertain"
    assert row["operations"]["counts"]["uncertain"] == 1
