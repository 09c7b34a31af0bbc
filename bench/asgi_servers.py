"""uvicorn (uvloop + httptools) against granian, serving the same Runbell API app.

Issue 9 asks to measure both and keep the faster. One SQLite database, the app built by
:func:`bench.targets.asgi_app_from_env` (API only: no worker, no scheduler), each server
started in turn on its own port; per repeat and server, the load generator sends the
no-op and then ``completed`` signals (fresh runs each time), closed loop, 8 keep-alive
connections, for ``SECONDS``. Interleaved repeats, medians printed as one JSON object.

    python -m bench.asgi_servers [repeats]

granian is not a dependency of Runbell; this script says so and exits 2 without it
(``pip install granian`` into the virtualenv to run it).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import targets
from bench.servers import free_port

SECONDS = 5.0
COUNT = 6000


def _servers(port: dict[str, int]) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "uvicorn": [
            py, "-m", "uvicorn", "--factory", "bench.targets:asgi_app_from_env",
            "--port", str(port["uvicorn"]), "--loop", "uvloop", "--http", "httptools",
            "--no-access-log", "--log-level", "warning",
        ],
        "granian": [
            py, "-m", "granian", "--interface", "asgi", "--factory", "--port",
            str(port["granian"]), "--loop", "uvloop", "--http", "1", "--no-ws",
            "--log-level", "warning", "bench.targets:asgi_app_from_env",
        ],
    }  # fmt: skip


def _load(port: int, kind: str, token: str, prefix: str) -> float:
    cfg = {
        "targets": [["127.0.0.1", port]],
        "mode": "closed",
        "conns": 8,
        "seconds": SECONDS,
        "request": {"kind": kind, "token": token, "run_prefix": prefix, "count": COUNT},
    }
    out = subprocess.run(
        [sys.executable, "-m", "bench.loadgen", json.dumps(cfg)],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["statuses"] != {"200": result["ok"]} or result["errors"]:
        raise SystemExit(f"{kind} on :{port} answered {result['statuses']} {result['errors']}")
    return float(result["ok"]) / float(result["elapsed_s"])


def main(repeats: int) -> dict[str, Any]:
    try:
        import granian  # noqa: F401
    except ImportError:
        print("granian is not installed here (pip install granian)", file=sys.stderr)
        sys.exit(2)
    workdir = Path(tempfile.mkdtemp(prefix="rb-asgi-"))
    url, key = f"sqlite:///{workdir}/runbell.db", targets.new_secret_key()
    env = {**os.environ, "BENCH_URL": url, "BENCH_DIR": str(workdir), "BENCH_KEY": key}
    subprocess.run(
        [Path(sys.executable).with_name("runbell"), "migrate"],
        env={**env, "RUNBELL_DATABASE_URL": url, "RUNBELL_DATA_DIR": str(workdir)},
        check=True,
        capture_output=True,
    )
    core = targets.open_core(url, workdir, key)
    tenant = targets.setup_tenant(core)
    port = {"uvicorn": free_port(), "granian": free_port()}
    figures: dict[str, list[float]] = {}
    batch = 0
    for _ in range(repeats):
        for name, cmd in _servers(port).items():
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
            try:
                time.sleep(4)  # started and warm enough (first requests build caches)
                for kind in ("noop", "signal"):
                    batch += 1
                    prefix = f"asgi{batch}-"
                    if kind == "signal":
                        targets.create_runs(core, tenant, [f"{prefix}{i}" for i in range(COUNT)])
                    rate = _load(port[name], kind, tenant.runtime_key, prefix)
                    figures.setdefault(f"{name} {kind}", []).append(rate)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    targets.close_core(core)
    medians = {k: round(statistics.median(v)) for k, v in figures.items()}
    return {
        "per_s_median": medians,
        "per_s_all": {k: [round(x) for x in v] for k, v in figures.items()},
        "granian_over_uvicorn": {
            kind: round(medians[f"granian {kind}"] / medians[f"uvicorn {kind}"], 2)
            for kind in ("noop", "signal")
        },
        "load_avg_1m": os.getloadavg()[0],
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3), indent=2))
