"""The operator's files in deploy/ (issue 16 row 16): the systemd units pass
``systemd-analyze verify`` and its offline security review, take their secrets from the
EnvironmentFile and keep their data in the StateDirectory; the Containerfile's command
serves from a virtualenv exactly as written, and the image is built and started where a
container engine can fetch its base image (RUNBELL_TEST_CONTAINER=podman or docker)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import IN_CI, free_port
from tests.plain_http import TLS
from tests.timeouts import WAIT

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UNITS = ["runbell.service", "runbell-worker.service"]
RUNBELL = str(Path(sys.executable).with_name("runbell"))
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def _needs_systemd_analyze() -> str:
    if SYSTEMD_ANALYZE is None:
        if IN_CI:
            pytest.fail("CI requires systemd-analyze (Debian package systemd)")
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return SYSTEMD_ANALYZE


def _installed(unit: str, tmp_path: Path) -> Path:
    """The unit as installed here: its ExecStart names this virtualenv's runbell (verify
    checks that the program exists)."""
    text = (DEPLOY / unit).read_text().replace("/opt/runbell/bin/runbell", RUNBELL)
    path = tmp_path / unit
    path.write_text(text)
    return path


def _settings(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (DEPLOY / unit).read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_unit_verifies(unit: str, tmp_path: Path) -> None:
    analyze = _needs_systemd_analyze()
    path = _installed(unit, tmp_path)
    res = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=WAIT
    )
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    # The offline security review: "OK" or better (exposure at most 2.5 of 10).
    review = subprocess.run(
        [analyze, "security", "--offline=yes", "--threshold=25", str(path)],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert review.returncode == 0, review.stdout[-2000:]


@pytest.mark.parametrize("unit", UNITS)
def test_systemd_unit_takes_secrets_from_its_environment_file(unit: str) -> None:
    settings = _settings(unit)
    assert settings["EnvironmentFile"] == ["/etc/runbell/runbell.env"]
    assert settings["StateDirectory"] == ["runbell"]
    assert "RUNBELL_DATA_DIR=%S/runbell" in settings["Environment"][0].split()
    for hardening in ("DynamicUser", "NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert settings[hardening] == ["yes"], hardening
    assert settings["ProtectSystem"] == ["strict"]
    text = (DEPLOY / unit).read_text()
    assert "RUNBELL_SECRET_KEY=" not in text and "PASSWORD" not in text
    example = (DEPLOY / "runbell.env.example").read_text()
    assert re.search(r"^RUNBELL_SECRET_KEY=$", example, re.M), "the example names the key"


# --- the Containerfile -----------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Containerfile").read_text())
    steps = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            steps.append((word.upper(), rest.strip()))
    return steps


def _final_stage() -> list[tuple[str, str]]:
    steps = _instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def _env(stage: list[tuple[str, str]]) -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in stage:
        if word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def test_containerfile_builds_a_virtualenv_and_runs_as_a_user() -> None:
    steps = _instructions()
    runs = [shlex.split(rest) for word, rest in steps if word == "RUN"]
    assert runs[0][:4] == ["python", "-m", "venv", "/opt/runbell"]
    assert "/opt/runbell/bin/pip" in runs[0] and "." in runs[0]
    final = _final_stage()
    words = [word for word, _ in final]
    assert ("COPY", "--from=build /opt/runbell /opt/runbell") in final
    user = next(rest for word, rest in final if word == "USER")
    assert user == "runbell" and any("useradd" in rest for w, rest in final if w == "RUN")
    env = _env(final)
    assert env["RUNBELL_DATA_DIR"] == "/var/lib/runbell"
    assert ("VOLUME", "/var/lib/runbell") in final
    assert "STOPSIGNAL" in words and "CMD" in words
    assert "RUNBELL_SECRET_KEY" not in (DEPLOY / "Containerfile").read_text().split("ARG")[1]


def test_containerfile_command_serves_from_a_virtualenv(tmp_path: Path) -> None:
    """The image's CMD, as written, with the image's environment (PATH leading to this
    virtualenv's bin, as it leads to /opt/runbell/bin in the image), serves /healthz and
    stops cleanly on the image's STOPSIGNAL."""
    final = _final_stage()
    command = json.loads(next(rest for word, rest in final if word == "CMD"))
    stop = next(rest for word, rest in final if word == "STOPSIGNAL")
    port = free_port()
    argv = [str(port) if arg == "8080" else arg for arg in command]
    assert argv[0] == "runbell" and str(port) in argv
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNBELL_")}
    for name, value in _env(final).items():
        env[name] = value.replace("$PATH", os.environ["PATH"])
    env["PATH"] = env["PATH"].replace("/opt/runbell/bin", str(Path(RUNBELL).parent))
    env["RUNBELL_DATA_DIR"] = str(tmp_path / "data")
    key = subprocess.run([RUNBELL, "secret-key"], capture_output=True, text=True, check=True)
    env["RUNBELL_SECRET_KEY"] = key.stdout.strip()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2, verify=TLS).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        proc.send_signal(getattr(signal, stop))
        assert proc.wait(timeout=WAIT) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text()
    assert (tmp_path / "data" / "runbell.db").exists()


def test_container_image_builds_and_serves(tmp_path: Path) -> None:
    """Opt-in (RUNBELL_TEST_CONTAINER=podman or docker): needs an engine that runs here
    and a registry it can pull the base image from."""
    engine = os.environ.get("RUNBELL_TEST_CONTAINER")
    if not engine:
        pytest.skip("set RUNBELL_TEST_CONTAINER=podman (or docker) to build and run the image")
    # Rootful podman on a host without CAP_SYS_RESOURCE and with hybrid cgroups (this
    # development machine) needs runc and limits it can set; both are harmless elsewhere.
    extra = shlex.split(os.environ.get("RUNBELL_TEST_CONTAINER_ARGS", ""))
    tag = f"localhost/runbell-test:{os.getpid()}"
    build = subprocess.run(
        [engine, *extra, "build", "-t", tag, "-f", str(DEPLOY / "Containerfile"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=WAIT * 40,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    port = free_port()
    key = subprocess.run([RUNBELL, "secret-key"], capture_output=True, text=True, check=True)
    name = f"runbell-test-{os.getpid()}"
    run = [engine, *extra, "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080"]
    started = subprocess.run(
        [*run, "-e", f"RUNBELL_SECRET_KEY={key.stdout.strip()}", tag],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
    )
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + WAIT * 2
        while True:
            try:
                if (
                    httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2, verify=TLS).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the container never answered /healthz"
            time.sleep(0.5)
        stopped = subprocess.run(
            [engine, *extra, "stop", "-t", "30", name], capture_output=True, timeout=WAIT * 2
        )
        assert stopped.returncode == 0
        logs = subprocess.run(
            [engine, *extra, "logs", name], capture_output=True, text=True, timeout=WAIT
        )
        assert "Traceback" not in logs.stdout + logs.stderr
    finally:
        subprocess.run([engine, *extra, "rm", "-f", name], capture_output=True, timeout=WAIT)
        subprocess.run([engine, *extra, "rmi", "-f", tag], capture_output=True, timeout=WAIT)


# --- deploy/Caddyfile (issue 20 item 5) --------------------------------------------------


def test_caddyfile_in_the_docs_is_the_tested_file() -> None:
    """docs/operations.md prints deploy/Caddyfile, the file the HTTPS browser test runs
    (tests/browser/test_https_proxy.py): a change to one shows in the other."""
    docs = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    block = re.search(r"^```caddyfile\n(.*?)^```$", docs, re.S | re.M)
    assert block is not None, "operations.md has no caddyfile block"
    assert block.group(1) == (DEPLOY / "Caddyfile").read_text(encoding="utf-8")


def test_caddyfile_defaults_adapt(tmp_path: Path) -> None:
    """With none of its variables set (as installed for the system service), Caddy reads
    the file: https on 443 for runbell.lan, to 127.0.0.1:8080, unbuffered, no redirects."""
    caddy = shutil.which("caddy")
    if caddy is None:
        if IN_CI:
            pytest.fail("CI requires caddy (Debian package caddy)")
        pytest.skip("caddy is not installed (Debian package caddy)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CADDY_", "RUNBELL_"))}
    env.update(HOME=str(tmp_path), XDG_DATA_HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path))
    done = subprocess.run(
        [caddy, "adapt", "--config", str(DEPLOY / "Caddyfile"), "--adapter", "caddyfile"],
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    (server,) = config["apps"]["http"]["servers"].values()
    assert server["listen"] == [":443"]
    assert server["automatic_https"] == {"disable_redirects": True}
    route = server["routes"][0]
    assert route["match"] == [{"host": ["runbell.lan"]}]
    (proxy,) = route["handle"][0]["routes"][0]["handle"]
    assert proxy["upstreams"] == [{"dial": "127.0.0.1:8080"}]
    assert proxy["flush_interval"] == -1
    assert config["apps"]["pki"]["certificate_authorities"]["local"]["install_trust"] is False
    policy = config["apps"]["tls"]["automation"]["policies"][0]
    assert policy["issuers"] == [{"module": "internal"}]
