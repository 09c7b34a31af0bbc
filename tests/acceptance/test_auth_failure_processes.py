"""The failed-authentication limit is one limit across API processes (issue 16 row 6):
two real `runbell api` children on one PostgreSQL database, guesses sent to each in turn,
answer 401 for the burst in total and 429 after it, with one warning line between the
two processes' logs; a correct credential passes on both."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runbell.app import build
from runbell.flows.context import Core
from runbell.testing import make_tenant
from tests.acceptance.processes import ApiProc, start_apis
from tests.acceptance.test_worker_processes import child_env
from tests.conftest import make_settings, pg_database
from tests.timeouts import WAIT

pytestmark = pytest.mark.postgres

BURST = 6


@pytest.fixture
def pg_url(pg_template: str | None) -> Iterator[str]:
    yield from pg_database(pg_template)


@pytest.fixture
def core(tmp_path: Path, pg_url: str) -> Iterator[Core]:
    rb = build(make_settings(tmp_path, pg_url), migrate=False)
    yield rb
    rb.db.dispose()


def auth_failures(api: ApiProc) -> dict[str, float]:
    text = httpx.get(f"{api.url}/metrics", timeout=WAIT).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "runbell_auth_failures_total" and sample.labels["kind"] == "bearer":
                found[sample.labels["answer"]] = sample.value
    return found


def test_the_limit_holds_across_two_api_processes(tmp_path: Path, pg_url: str, core: Core) -> None:
    creds = make_tenant(core)
    env = child_env(
        tmp_path,
        pg_url,
        RUNBELL_AUTH_FAILURE_BURST=str(BURST),
        RUNBELL_AUTH_FAILURE_WINDOW_S="600",  # one window for the whole test
    )
    with ExitStack() as stack:
        apis = start_apis(stack, env, tmp_path, 2)
        codes, tokens = [], []
        for n in range(2 * BURST):
            api = apis[n % 2]
            token = f"rbk_{uuid.uuid4().hex}{uuid.uuid4().hex}"
            tokens.append(token)
            r = httpx.get(
                f"{api.url}/v1/runs", headers={"Authorization": f"Bearer {token}"}, timeout=WAIT
            )
            codes.append(r.status_code)
            if r.status_code == 429:
                assert 1 <= int(r.headers["retry-after"]) <= 600
        assert codes == [401] * BURST + [429] * BURST
        for api in apis:
            ok = httpx.get(
                f"{api.url}/v1/runs",
                headers={"Authorization": f"Bearer {creds.runtime_key}"},
                timeout=WAIT,
            )
            assert ok.status_code == 200, ok.text
        counted = [auth_failures(api) for api in apis]
        assert sum(c.get("refused", 0) for c in counted) == BURST
        assert sum(c.get("throttled", 0) for c in counted) == BURST
        assert all(c.get("refused", 0) > 0 for c in counted)  # both processes took part
    lines = [
        line
        for api in apis
        for line in api.log.read_text(errors="replace").splitlines()
        if "auth.throttled" in line
    ]
    assert len(lines) == 1, lines
    assert "127.0.0.1" in lines[0]
    assert not any(token in lines[0] for token in tokens)
