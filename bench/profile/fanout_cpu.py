"""The SSE fan-out's own CPU per commit, without sockets: ``N`` streams on the runtime key
driven straight through the ASGI app in this process (each ``send`` only counts), one
commit at a time; the event loop thread's CPU (``time.thread_time``) from the commit to
the last stream having it, per commit and per stream. The feed read runs on the tail's
own thread and the commit on the test client's, so neither is counted: what is left is
the Python work of waking/writing the streams, which the machine's load does not change
much (unlike P5's latencies). Socket writes (~8-10 µs a stream on the AMD machine, see
p5-p6-streams.md) come on top in a real server.

    PYTHONPATH=src python bench/profile/fanout_cpu.py [N=1000] [COMMITS=30]

Not part of ``bench.run`` (it imports Runbell directly, which bench modules leave to
``bench/targets.py``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from runbell.app import build, create_app
from runbell.config import Settings
from runbell.testing import make_tenant


class Stream:
    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/v1/events/stream",
            "raw_path": b"/v1/events/stream",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())],
            "client": ("127.0.0.1", 1),
            "server": ("bench", 80),
            "state": {},
        }
        self.writes = 0
        self.asked = False
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.asked:
            self.asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message.get("body"):
            self.writes += 1


def main(n: int, commits: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="fanout-cpu-"))
    settings = Settings(
        data_dir=tmp,
        database_url=f"sqlite:///{tmp}/runbell.db",
        secret_key=Fernet.generate_key().decode(),
        public_url="http://bench",
    )
    core = build(settings, migrate=True)
    creds = make_tenant(core)

    def put_run(client: TestClient, run_id: str) -> None:
        r = client.put(
            f"/v1/runs/{run_id}",
            json={"owner": creds.owner_email, "state": "working"},
            headers={"Authorization": f"Bearer {creds.runtime_key}"},
        )
        assert r.status_code == 201, r.text

    with TestClient(create_app(core, bridge=False)) as client:

        async def run() -> float:
            streams = [Stream(client.app, creds.runtime_key) for _ in range(n)]
            tasks = [asyncio.create_task(s.app(s.scope, s.receive, s.send)) for s in streams]
            while not all(s.writes for s in streams):
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            cpu = 0.0
            for i in range(commits):
                before = [s.writes for s in streams]
                t0 = time.thread_time()
                await asyncio.to_thread(put_run, client, f"c{i}")
                while not all(s.writes > b for s, b in zip(streams, before, strict=True)):
                    await asyncio.sleep(0.005)
                cpu += time.thread_time() - t0
            for s in streams:
                s.gone.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            return cpu

        cpu = asyncio.run(run())
    core.db.dispose()
    print(
        f"{n} streams, {commits} commits: loop-thread CPU {1000 * cpu / commits:.2f} ms per "
        f"commit, {1e6 * cpu / commits / n:.2f} µs per stream "
        f"(1-minute load average {os.getloadavg()[0]:.1f})"
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
