"""Failed authentication is throttled (issue 16 row 6): 300 random bearer tokens were
300 answers of 401 with nothing logged. Now, for every credential kind (API key, user token, the
/mcp bearer, a sign-in link, a provider webhook signature), the first
RUNBELL_AUTH_FAILURE_BURST failures of a window are answered as before and later ones
429 with Retry-After, counted in /metrics and logged once; a correct credential passes
whatever its address failed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from runbell import metrics
from runbell.flows.context import Core
from runbell.signatures import sign_headers
from runbell.store import tables as t
from tests.conftest import Env, LiveServer, bearer
from tests.timeouts import WAIT

BURST = 3


def failures(kind: str, answer: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "runbell_auth_failures_total", {"kind": kind, "answer": answer}
    )
    return value or 0.0


def rows(core: Core) -> dict[str, int]:
    with core.db.read() as conn:
        got = conn.execute(sa.select(t.auth_failures.c.key, t.auth_failures.c.failures)).all()
    return {r.key: r.failures for r in got}


def guess(prefix: str = "rbk_") -> str:
    return prefix + uuid.uuid4().hex + uuid.uuid4().hex[:11]


@pytest.fixture
def env(make_env: Callable[..., Env]) -> Env:
    return make_env(auth_failure_burst=BURST, auth_failure_window_s=60)


def throttled_warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "auth.throttled"]


@pytest.mark.parametrize("prefix", ["rbk_", "rbu_"])
def test_bearer_failures_past_the_burst_answer_429_with_retry_after(env: Env, prefix: str) -> None:
    before = (failures("bearer", "refused"), failures("bearer", "throttled"))
    with capture_logs() as logs:
        answers = [
            env.client.get("/v1/runs", headers=bearer(guess(prefix))) for _ in range(BURST + 4)
        ]
    assert [r.status_code for r in answers] == [401] * BURST + [429] * 4
    too_many = answers[BURST]
    assert too_many.headers["content-type"].startswith("application/problem+json")
    doc = too_many.json()
    assert doc["status"] == 429
    assert doc["type"].endswith("/too-many-attempts")
    assert 1 <= int(too_many.headers["retry-after"]) <= 60
    assert failures("bearer", "refused") - before[0] == BURST
    assert failures("bearer", "throttled") - before[1] == 4
    # One line for the address over its burst, none per further guess; never a token.
    warned = throttled_warnings(logs)
    assert [(e["kind"], e["by"]) for e in warned] == [("bearer", "address")]
    assert warned[0]["log_level"] == "warning"
    assert warned[0]["address"] == "testclient"
    assert not any(prefix in json.dumps(e, default=str) for e in warned)


def test_a_correct_credential_passes_from_a_throttled_address(env: Env) -> None:
    for _ in range(BURST + 1):
        env.client.get("/v1/runs", headers=bearer(guess()))
    assert env.client.get("/v1/runs", headers=bearer(guess())).status_code == 429
    counted = rows(env.core)
    before = failures("bearer", "refused") + failures("bearer", "throttled")
    for creds in (env.runtime, env.owner, env.admin):
        assert env.client.get("/v1/runs", headers=creds).status_code == 200
    # Nothing was written or counted for them: the success path costs nothing.
    assert rows(env.core) == counted
    assert failures("bearer", "refused") + failures("bearer", "throttled") == before


def test_missing_credentials_are_not_failures(env: Env) -> None:
    for _ in range(BURST + 2):
        assert env.client.get("/v1/runs").status_code == 401
    assert rows(env.core) == {}


def test_the_window_ends_and_the_count_starts_again(env: Env) -> None:
    env.clock.freeze(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
    for _ in range(BURST):
        env.client.get("/v1/runs", headers=bearer(guess()))
    refused = env.client.get("/v1/runs", headers=bearer(guess()))
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "60"
    env.clock.advance(45)
    assert env.client.get("/v1/runs", headers=bearer(guess())).headers["retry-after"] == "15"
    env.clock.advance(15)
    with capture_logs() as logs:
        again = [env.client.get("/v1/runs", headers=bearer(guess())) for _ in range(BURST + 1)]
    assert [r.status_code for r in again] == [401] * BURST + [429]
    assert len(throttled_warnings(logs)) == 1  # one line in the new window too


def test_a_credential_prefix_is_throttled_across_addresses(
    core: Core, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone who knows a key's first characters and tries the rest from many addresses
    (uvicorn takes X-Forwarded-For from a proxy on loopback)."""
    monkeypatch.setattr(
        core, "settings", core.settings.model_copy(update={"auth_failure_burst": BURST})
    )
    known = "rbk_Ab3d"
    with LiveServer(core) as live, capture_logs() as logs:
        codes = [
            httpx.get(
                f"{live.url}/v1/runs",
                headers={**bearer(known + uuid.uuid4().hex), "X-Forwarded-For": f"10.9.0.{n}"},
                timeout=WAIT,
            ).status_code
            for n in range(1, BURST + 3)
        ]
    assert codes == [401] * BURST + [429, 429]
    warned = throttled_warnings(logs)
    assert [(e["by"], e["credential"]) for e in warned] == [("credential", known)]
    assert rows(core)[f"bearer:cred:{known}"] == BURST + 1
    assert rows(core)["bearer:addr:10.9.0.1"] == 1


def test_ipv6_addresses_count_by_their_64(core: Core, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        core, "settings", core.settings.model_copy(update={"auth_failure_burst": BURST})
    )
    with LiveServer(core) as live:
        codes = [
            httpx.get(
                f"{live.url}/v1/runs",
                headers={**bearer(guess()), "X-Forwarded-For": f"2001:db8:1:2::{n:x}"},
                timeout=WAIT,
            ).status_code
            for n in range(1, BURST + 2)
        ]
    assert codes == [401] * BURST + [429]
    assert rows(core)["bearer:addr:2001:db8:1:2::/64"] == BURST + 1


# --- /mcp ------------------------------------------------------------------------------------


@pytest.fixture
def throttled_live(core: Core, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveServer]:
    monkeypatch.setattr(
        core, "settings", core.settings.model_copy(update={"auth_failure_burst": BURST})
    )
    with LiveServer(core) as live:
        yield live


def test_the_mcp_bearer_is_throttled_too(throttled_live: LiveServer, core: Core) -> None:
    from runbell.testing import make_tenant

    creds = make_tenant(core)
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    def call(token: str, accept: str = "application/json") -> httpx.Response:
        return httpx.post(
            f"{throttled_live.url}/mcp",
            json=listing,
            headers={**bearer(token), "Accept": accept},
            timeout=WAIT,
        )

    codes = [call(guess()).status_code for _ in range(BURST)]
    assert codes == [401] * BURST
    refused = call(guess())
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert int(refused.headers["retry-after"]) >= 1
    as_mcp = call(guess(), "application/json, text/event-stream")
    assert as_mcp.status_code == 429
    assert as_mcp.json()["error"]["data"]["status"] == 429
    # The API and /mcp take the same credentials and share the same count.
    api = httpx.get(f"{throttled_live.url}/v1/runs", headers=bearer(guess()), timeout=WAIT)
    assert api.status_code == 429
    ok = call(creds.runtime_key, "application/json, text/event-stream")
    assert ok.status_code == 200, ok.text


# --- sign-in links ---------------------------------------------------------------------------


def test_unknown_sign_in_links_past_the_burst_answer_429(env: Env) -> None:
    before = failures("sign_in_link", "throttled")
    with capture_logs() as logs:
        codes = [
            env.client.get(f"/auth/{guess('rbl_')}", follow_redirects=False).status_code
            for _ in range(BURST)
        ]
        page = env.client.get(f"/auth/{guess('rbl_')}", headers={"Accept": "text/html"})
        doc = env.client.get(f"/auth/{guess('rbl_')}", headers={"Accept": "application/json"})
    assert codes == [404] * BURST
    assert page.status_code == 429
    assert page.headers["content-type"].startswith("text/html")
    assert "Too many sign-in links" in page.text
    assert int(page.headers["retry-after"]) >= 1
    assert page.headers["cache-control"] == "no-store"
    assert doc.status_code == 429
    assert doc.headers["content-type"].startswith("application/problem+json")
    assert int(doc.headers["retry-after"]) >= 1
    assert failures("sign_in_link", "throttled") - before == 2
    warned = throttled_warnings(logs)
    assert [(e["kind"], e["by"]) for e in warned] == [("sign_in_link", "address")]


def test_a_real_sign_in_link_works_from_a_throttled_address(env: Env) -> None:
    from runbell.flows import accounts

    for _ in range(BURST + 1):
        env.client.get(f"/auth/{guess('rbl_')}")
    link = accounts.login_link_token(env.core.db, env.creds.tenant_id, env.creds.owner_email)
    used = env.client.get(f"/auth/{link}", follow_redirects=False)
    assert used.status_code == 303
    # A used link is a real one: answered 410, never counted.
    counted = rows(env.core)
    assert env.client.get(f"/auth/{link}", follow_redirects=False).status_code == 410
    assert rows(env.core) == counted


# --- provider webhook signatures ----------------------------------------------------------


def test_bad_webhook_signatures_are_throttled_per_source(env: Env) -> None:
    made = env.client.post(
        "/v1/sources",
        json={
            "name": "ci-provider",
            "kind": "webhook",
            "mapper": "generic",
            "trust": "authoritative",
        },
        headers=env.admin,
    )
    assert made.status_code == 201, made.text
    source_id, secret = made.json()["id"], made.json()["signing_secret"]
    run = env.client.put(
        "/v1/runs/wh-100", json={"owner": env.creds.owner_email}, headers=env.runtime
    )
    assert run.status_code == 201, run.text
    wrong = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"

    def send(key: str, n: int) -> httpx.Response:
        body = json.dumps({"run_id": f"wh-{n}", "state": "working"}).encode()
        headers = sign_headers(body, key, f"msg-{n}-{uuid.uuid4().hex}", datetime.now(UTC))
        return env.client.post(
            f"/v1/sources/{source_id}/webhook",
            content=body,
            headers={**headers, "Content-Type": "application/json"},
        )

    before = failures("webhook_signature", "refused")
    codes = [send(wrong, n).status_code for n in range(BURST)]
    assert codes == [401] * BURST
    assert failures("webhook_signature", "refused") - before == BURST
    refused = send(wrong, 99)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    counted = rows(env.core)
    assert counted[f"webhook_signature:source:{source_id}"] == BURST + 1
    # The provider's correctly signed events keep going through.
    good = send(secret, 100)
    assert good.status_code == 200, good.text
    assert rows(env.core) == counted
