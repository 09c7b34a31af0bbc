"""`runbell api` beyond loopback without RUNBELL_METRICS_TOKEN: it starts, says in one
line that /metrics is off and how to turn it on, and /metrics answers 404 problem."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.acceptance.test_cli import RUNBELL, cli_env
from tests.conftest import free_port
from tests.plain_http import TLS
from tests.timeouts import WAIT, scaled

BANNER = "/metrics is off"
TOKEN = "metrics-token-0c4d"
ANY_V4 = "0.0.0.0"  # noqa: S104 (the interface under test)


@contextmanager
def api(tmp_path: Path, host: str, **env: str) -> Iterator[tuple[str, Path]]:
    """`runbell api --host HOST` on a fresh SQLite directory; yields (local URL, stdout)."""
    port = free_port()
    out_path = tmp_path / f"api-{port}.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [RUNBELL, "api", "--host", host, "--port", str(port)],
            env={**cli_env(tmp_path / f"data-{port}"), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, out_path.read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=scaled(5), verify=TLS).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.1)
        yield url, out_path
    finally:
        proc.terminate()
        proc.wait(timeout=WAIT)


def banner_lines(out_path: Path) -> list[str]:
    return [line for line in out_path.read_text().splitlines() if BANNER in line]


def test_beyond_loopback_without_token_metrics_are_off_and_the_banner_says_so(
    tmp_path: Path,
) -> None:
    with api(tmp_path, ANY_V4) as (url, out):
        r = httpx.get(f"{url}/metrics", timeout=WAIT)
        assert r.status_code == 404
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "RUNBELL_METRICS_TOKEN" in r.json()["detail"]
        assert "runbell_" not in r.text
        (line,) = banner_lines(out)
        assert "RUNBELL_METRICS_TOKEN" in line and ANY_V4 in line
        assert "Traceback" not in out.read_text()


@pytest.mark.parametrize(
    ("host", "env", "status"),
    [(ANY_V4, {"RUNBELL_METRICS_TOKEN": TOKEN}, 401), ("127.0.0.1", {}, 200)],
)
def test_with_a_token_or_on_loopback_there_is_no_such_line(
    tmp_path: Path, host: str, env: dict[str, str], status: int
) -> None:
    with api(tmp_path, host, **env) as (url, out):
        assert httpx.get(f"{url}/metrics", timeout=WAIT).status_code == status
        if "RUNBELL_METRICS_TOKEN" in env:
            authorized = httpx.get(
                f"{url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=WAIT
            )
            assert authorized.status_code == 200
            assert "runbell_deliveries" in authorized.text
        assert banner_lines(out) == []
