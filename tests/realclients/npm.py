"""Install the pinned agent CLIs from npm once, into a cache outside the repository.

``~/.cache/runbell-tests/npm-<package>-<version>`` (``RUNBELL_TEST_CACHE`` moves the
cache), reused across runs; a file lock keeps xdist workers from installing the same
package at once. Without node/npm, or when npm cannot install, the tests skip locally
and fail in CI (CI=true), like PostgreSQL in ``tests/conftest.py``: nothing real is
skipped there.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import IN_CI
from tests.timeouts import scaled

CLAUDE_CODE = ("@anthropic-ai/claude-code", "2.1.197", "claude")
CODEX = ("@openai/codex", "0.171.0", "codex")


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "runbell-tests"
    return Path(os.environ.get("RUNBELL_TEST_CACHE") or default).expanduser()


def unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI requires the real agent CLIs: {reason}")
    pytest.skip(reason)


def install(package: str, version: str, binary: str) -> Path:
    """The installed ``binary`` of ``package@version``, installing it on first use."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not on PATH (needed for {package}@{version})")
    npm = shutil.which("npm")
    assert npm is not None
    prefix = cache_dir() / f"npm-{package.replace('@', '').replace('/', '-')}-{version}"
    exe = prefix / "node_modules" / ".bin" / binary
    done = prefix / ".installed"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with open(prefix.with_name(prefix.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it now
        if done.exists() and exe.exists():
            return exe
        prefix.mkdir(exist_ok=True)
        try:
            res = subprocess.run(
                [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                 "--no-save", "--loglevel=error", f"{package}@{version}"],
                capture_output=True,
                text=True,
                timeout=scaled(600),
                check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            unavailable(f"npm install {package}@{version} did not finish")
        if res.returncode != 0 or not exe.exists():
            unavailable(
                f"npm install {package}@{version} failed (rc={res.returncode}):\n"
                f"{(res.stdout + res.stderr)[-2000:]}"
            )
        done.write_text(f"{package}@{version}\n")
    return exe
