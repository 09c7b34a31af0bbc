"""An inbox that scales (issue 19 item 7): a digest folds its items and acknowledging it
acknowledges them; groups acknowledged at once (by run, by subject, by ids, within a
filter, none newer than the newest seen); filters; tenant and person isolation. SQLite and
PostgreSQL; the API and the web page."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from fastapi.testclient import TestClient

from runbell.domain.digests import window_of
from runbell.flows import digests as digest_flow
from runbell.flows.context import Core
from runbell.testing import Clock, TenantCreds, add_user, make_tenant
from tests.conftest import bearer
from tests.integration.test_web import sign_in

DIGEST_RULE = {
    "id": "completed.digest_all",
    "when": {"attention": "completed"},
    "decision": "digest",
    "urgency": "low",
    "digest_window_s": 600,
    "digest_max_items": 50,
}


def ok(response: Any, *codes: int) -> Any:
    assert response.status_code in (codes or (200,)), response.text
    return response.json()


def run(
    client: TestClient, creds: TenantCreds, run_id: str, subject: str | None = None, **f: Any
) -> None:
    body: dict[str, Any] = {"owner": creds.owner_email, "state": "working", "title": run_id, **f}
    if subject:
        kind, ident = subject.split(":")
        body["subject"] = {"type": kind, "id": ident}
    ok(client.put(f"/v1/runs/{run_id}", json=body, headers=bearer(creds.runtime_key)), 201)


def finish(client: TestClient, creds: TenantCreds, run_id: str, state: str, **extra: Any) -> str:
    """Move the run to ``state``; the id of the owner's notification about it."""
    r = ok(
        client.post(
            f"/v1/runs/{run_id}/signals",
            json={"event_id": f"{run_id}-{state}", "state": state, **extra},
            headers=bearer(creds.runtime_key),
        )
    )
    assert r["outcome"] == "applied", r
    (note,) = r["notifications"]
    return str(note["id"])


def completed(client: TestClient, creds: TenantCreds, run_id: str, subject: str | None) -> str:
    run(client, creds, run_id, subject, notify_on_complete=True)
    return finish(client, creds, run_id, "completed")


def listed(client: TestClient, token: str, query: str = "") -> list[dict[str, Any]]:
    return list(ok(client.get(f"/v1/notifications{query}", headers=bearer(token)))["notifications"])


def ack_group(client: TestClient, token: str, body: dict[str, Any], status: int = 200) -> Any:
    return ok(client.post("/v1/inbox/acknowledge", json=body, headers=bearer(token)), status)


def states(client: TestClient, token: str) -> dict[str, str]:
    return {n["id"]: n["state"] for n in listed(client, token, "?limit=200")}


def a_digest(client: TestClient, core: Core, creds: TenantCreds, n: int) -> tuple[str, list[str]]:
    """``n`` quiet completions folded into one digest: its id and theirs."""
    ok(client.put("/v1/policy", json={"rules": [DIGEST_RULE]}, headers=bearer(creds.admin_key)))
    # Windows are epoch-aligned: freeze the clock just after the next boundary, so the
    # items cannot straddle two windows (they did once, at 22:50:00, in CI).
    clock = core.db.clock
    assert isinstance(clock, Clock)
    _, end = window_of(clock(), 600)
    clock.freeze(end + timedelta(seconds=1))
    items = [completed(client, creds, f"quiet-{i}", None) for i in range(n)]
    assert digest_flow.flush_due(core, core.db.clock() + timedelta(seconds=1200)) == 1
    (digest,) = [
        n["id"] for n in listed(client, creds.owner_token) if n["attention_type"] == "digest"
    ]
    ok(client.put("/v1/policy", json={"rules": []}, headers=bearer(creds.admin_key)))
    return digest, items


# --- a digest folds its items ------------------------------------------------------------


def test_a_digest_is_one_entry_and_acknowledging_it_acknowledges_what_it_folds(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    digest, items = a_digest(client, core, creds, 5)
    loose = completed(client, creds, "loud", None)

    # Folded: the digest once, with its counts, and none of the five apart.
    folded = listed(client, creds.owner_token, "?state=open&fold=true")
    assert [n["id"] for n in folded] == [loose, digest]
    assert (folded[1]["folded"], folded[1]["folded_open"]) == (5, 5)
    assert "folded" not in folded[0]
    # The record of every notification is unchanged without fold.
    assert {n["id"] for n in listed(client, creds.owner_token, "?state=open")} == {
        digest,
        loose,
        *items,
    }

    # Acknowledging the digest acknowledges the five, in one go; the loose one stays open.
    ok(client.post(f"/v1/notifications/{digest}/ack", headers=bearer(creds.owner_token)))
    now = states(client, creds.owner_token)
    assert {now[i] for i in [digest, *items]} == {"acknowledged"}
    assert now[loose] == "open"
    shown = ok(client.get(f"/v1/notifications/{items[0]}", headers=bearer(creds.owner_token)))
    assert shown["closed_reason"] == f"acknowledged by {creds.owner_id} with digest {digest}"
    # Again: nothing changes.
    again = ok(client.post(f"/v1/notifications/{digest}/ack", headers=bearer(creds.owner_token)))
    assert again["state"] == "acknowledged"


def test_the_inbox_page_folds_a_digest_and_its_ack_button_acknowledges_them_all(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    digest, items = a_digest(client, core, creds, 3)
    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/")
    assert page.status_code == 200, page.text
    assert page.text.count(f'id="n-{digest}"') == 1
    for item in items:
        assert f'id="n-{item}"' not in page.text  # not listed apart
    for i in range(3):
        assert f'href="/runs/quiet-{i}"' in page.text  # inside the digest's details
    assert "What it folds (3)" in page.text
    assert "Acknowledge all 4" in page.text

    r = client.post(
        f"/notifications/{digest}/ack",
        data={"csrf_token": csrf, "next": "/"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    now = states(client, creds.owner_token)
    assert {now[i] for i in [digest, *items]} == {"acknowledged"}


# --- groups ----------------------------------------------------------------------------


def test_a_subject_or_a_run_is_acknowledged_at_once_and_again_changes_nothing(
    client: TestClient, creds: TenantCreds
) -> None:
    alpha = [completed(client, creds, f"alpha-{i}", "agent:alpha") for i in range(3)]
    beta = [completed(client, creds, f"beta-{i}", "agent:beta") for i in range(2)]

    body = {"subject": {"type": "agent", "id": "alpha"}}
    first = ack_group(client, creds.owner_token, body)
    assert (first["acknowledged"], first["folded"], first["more"]) == (3, 0, False)
    assert sorted(first["ids"]) == sorted(alpha)
    now = states(client, creds.owner_token)
    assert {now[i] for i in alpha} == {"acknowledged"}
    assert {now[i] for i in beta} == {"open"}
    assert ack_group(client, creds.owner_token, body)["acknowledged"] == 0

    # One run's; and up_to leaves out what is newer than the newest the person saw.
    assert ack_group(client, creds.owner_token, {"run_id": "beta-0"})["ids"] == [beta[0]]
    late = completed(client, creds, "beta-late", "agent:beta")
    body = {"subject": {"type": "agent", "id": "beta"}, "up_to": beta[1]}
    assert ack_group(client, creds.owner_token, body)["ids"] == [beta[1]]
    assert states(client, creds.owner_token)[late] == "open"


def test_a_group_within_a_filter_and_by_ids(client: TestClient, creds: TenantCreds) -> None:
    done = completed(client, creds, "mixed-done", "project:p")
    run(client, creds, "mixed-fail", "project:p")
    failed = finish(client, creds, "mixed-fail", "failed", reason="broke")
    body = {"subject": {"type": "project", "id": "p"}, "filter": "failures"}
    assert ack_group(client, creds.owner_token, body)["ids"] == [failed]
    assert states(client, creds.owner_token)[done] == "open"

    named = ack_group(client, creds.owner_token, {"notification_ids": [done, failed, "ntf_nope"]})
    assert (named["acknowledged"], named["already_closed"], named["not_found"]) == (1, 1, 1)


def test_a_bulk_acknowledgement_names_exactly_one_group(
    client: TestClient, creds: TenantCreds
) -> None:
    for body in (
        {},
        {"run_id": "a", "subject": {"type": "agent", "id": "x"}},
        {"run_id": "a", "notification_ids": ["ntf_x"]},
    ):
        r = client.post("/v1/inbox/acknowledge", json=body, headers=bearer(creds.owner_token))
        assert r.status_code == 422, (body, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
    r = client.post(
        "/v1/inbox/acknowledge",
        json={"run_id": "a", "filter": "everything"},
        headers=bearer(creds.owner_token),
    )
    assert r.status_code == 422


# --- filters ---------------------------------------------------------------------------


def test_filters_on_the_api_and_the_page(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    done = completed(client, creds, "f-done", "agent:alpha")
    run(client, creds, "f-fail", "agent:beta")
    failed = finish(client, creds, "f-fail", "failed", reason="broke")
    run(client, creds, "f-ask", "agent:alpha")
    asked = ok(
        client.post(
            "/v1/runs/f-ask/input-requests",
            json={"input_request_id": "f-ask-1", "kind": "approval", "summary": "Go?"},
            headers=bearer(creds.runtime_key),
        ),
        201,
    )
    (ask,) = [n["id"] for n in asked["notifications"]]

    def ids(query: str) -> list[str]:
        return [n["id"] for n in listed(client, creds.owner_token, query)]

    assert ids("?filter=needs_me") == [ask]
    assert ids("?filter=failures") == [failed]
    assert ids("?filter=finished") == [done]
    assert ids("?subject_type=agent&subject_id=alpha") == [ask, done]
    assert ids("?run_id=f-fail") == [failed]
    assert ids("?subject_type=agent") == [ask, failed, done]  # every agent
    assert ids("?subject_id=beta&filter=failures") == [failed]

    sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/?show=failures").text
    assert f'id="n-{failed}"' in page
    assert f'id="n-{done}"' not in page and f'id="n-{ask}"' not in page
    assert re.search(r'aria-current="page">Failures <span class="count">\(1\)', page)
    assert re.search(r'aria-current="page">All', client.get("/").text)
    by_agent = client.get("/?group=agent").text
    assert "agent: alpha" in by_agent and "agent: beta" in by_agent
    only = client.get("/?subject_type=agent&subject_id=beta").text
    assert f'id="n-{failed}"' in only and f'id="n-{done}"' not in only
    assert "Showing only Agent or project: agent: beta" in only
    assert client.get("/?show=bogus&group=bogus").status_code == 200  # ignored, never a 500


# --- the page's group form ---------------------------------------------------------------


def test_the_page_acknowledges_a_group_as_it_showed_it(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    mine = [completed(client, creds, f"g-{i}", "agent:gamma") for i in range(4)]
    csrf = sign_in(client, core, creds.tenant_id, creds.owner_id)
    page = client.get("/?group=agent").text
    assert "Acknowledge all in this group" in page
    (ids,) = re.findall(r'name="ids" value="([^"]+)"', page)
    assert sorted(ids.split()) == sorted(mine)
    assert 'class="group-count" data-count="4">4 open' in page

    forged = client.post("/inbox/acknowledge", data={"csrf_token": "x", "ids": ids})
    assert forged.status_code == 403
    assert {states(client, creds.owner_token)[i] for i in mine} == {"open"}
    r = client.post(
        "/inbox/acknowledge",
        data={"csrf_token": csrf, "ids": ids, "next": "/?group=agent"},
        follow_redirects=False,
    )
    assert (r.status_code, r.headers["location"]) == (303, "/?group=agent")
    assert {states(client, creds.owner_token)[i] for i in mine} == {"acknowledged"}


# --- isolation ---------------------------------------------------------------------------


def test_another_tenants_or_persons_notifications_are_never_acknowledged(
    client: TestClient, core: Core, creds: TenantCreds
) -> None:
    mine = completed(client, creds, "iso-1", "agent:alpha")
    digest, folded = a_digest(client, core, creds, 2)
    other = make_tenant(core, "other")
    theirs = completed(client, other, "iso-1", "agent:alpha")
    _, member = add_user(core, creds.tenant_id, "member@acme.test")

    # Another tenant: ids ignored (not_found), subject and run match none of mine.
    r = ack_group(client, other.owner_token, {"notification_ids": [mine, digest]})
    assert (r["acknowledged"], r["not_found"]) == (0, 2)
    r = ack_group(client, other.owner_token, {"subject": {"type": "agent", "id": "alpha"}})
    assert r["ids"] == [theirs]
    for note in (mine, digest):
        assert (
            client.post(
                f"/v1/notifications/{note}/ack", headers=bearer(other.owner_token)
            ).status_code
            == 404
        )
    # A member of my tenant: my ids are not theirs; their groups hold none of mine.
    r = ack_group(client, member, {"notification_ids": [mine, *folded]})
    assert (r["acknowledged"], r["not_found"]) == (0, 3)
    assert ack_group(client, member, {"run_id": "iso-1"})["acknowledged"] == 0
    assert client.post(f"/v1/notifications/{digest}/ack", headers=bearer(member)).status_code == 404
    now = states(client, creds.owner_token)
    assert {now[i] for i in [mine, digest, *folded]} == {"open"}
