"""An interactive CLI in a detached tmux session, read with ``capture-pane``."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.realclients.npm import unavailable
from tests.timeouts import WAIT

TMUX = shutil.which("tmux") or "/usr/bin/tmux"


def require_tmux() -> None:
    """Skip without tmux locally; fail in CI (see :func:`tests.realclients.npm.unavailable`)."""
    if not Path(TMUX).exists():
        unavailable("tmux is not installed (Claude Code runs interactively in it)")


class Tmux:
    """One tmux server of its own (a private socket), with one window running ``argv``."""

    def __init__(self) -> None:
        # A short path of its own: a Unix socket's path may not exceed ~100 bytes, and a
        # test's tmp_path under xdist can come close.
        self.dir = Path(tempfile.mkdtemp(prefix="rb-tmux-"))
        self.socket = self.dir / "s"
        self.started = False

    def _tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TMUX, "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=check,
        )

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, width: int = 160
    ) -> None:
        # tmux gives the window the server's environment, not ours: run it under `env -i`.
        command = " ".join(
            ["env", "-i", *(shlex.quote(f"{k}={v}") for k, v in env.items()),
             *(shlex.quote(a) for a in argv)]
        )  # fmt: skip
        self._tmux(
            "-f", "/dev/null", "new-session", "-d", "-s", "agent", "-x", str(width), "-y", "50",
            "-c", str(cwd), command,
        )  # fmt: skip
        self.started = True
        # Keep the pane after the program exits, so a failure can still be read.
        self._tmux("set-option", "-t", "agent", "remain-on-exit", "on", check=False)

    def pane(self) -> str:
        if not self.started:
            return ""
        res = self._tmux("capture-pane", "-p", "-J", "-t", "agent", check=False)
        return res.stdout

    def send(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "agent", *keys)

    def type(self, text: str) -> None:
        self._tmux("send-keys", "-t", "agent", "-l", text)

    def wait_for(self, what: str, condition: Callable[[str], bool], timeout: float = WAIT) -> str:
        """Poll the pane until ``condition(pane)``; the pane's text, or AssertionError."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.pane()
            if condition(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"waiting for {what}: not within {timeout:.0f}s")
            time.sleep(0.2)

    def close(self) -> None:
        if self.started:
            self._tmux("kill-server", check=False)
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
