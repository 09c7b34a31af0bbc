"""Run a command in a real terminal (a pty of a given width) and read what a person would
see: for checks on terminal-only output (tables, spinners) that a pipe never shows."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.timeouts import WAIT

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_a_terminal(
    argv: Sequence[str],
    env: Mapping[str, str],
    columns: int = 80,
    cwd: Path | None = None,
    keep_escapes: bool = False,
) -> tuple[int, str]:
    """(exit code, output) of ``argv`` with stdin, stdout and stderr on a terminal
    ``columns`` wide; colour and cursor codes removed unless ``keep_escapes``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    proc = subprocess.Popen(
        list(argv),
        env={**env, "COLUMNS": str(columns)},
        cwd=cwd,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=WAIT)
    text = b"".join(chunks).decode(errors="replace").replace("\r", "")
    return code, text if keep_escapes else ESCAPES.sub("", text)
