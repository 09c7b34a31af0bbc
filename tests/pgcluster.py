"""A private, throwaway PostgreSQL cluster for tests that stop, restart or break the server.

The shared cluster on 127.0.0.1:5432 serves every test and engineer on the machine, so it
must never be restarted. :class:`PgCluster` builds a cluster of its own instead: binaries
from ``pg_config --bindir`` (or ``/usr/lib/postgresql/*/bin``), ``initdb`` into a fresh
temporary directory, a free TCP port on 127.0.0.1 and the unix socket inside that
directory. Tests run as root and PostgreSQL refuses to run as root, so when the process is
root every server command runs as the ``postgres`` user (``runuser -u postgres --``) in a
directory owned by it. ``destroy()`` stops the server and removes the directory.

Example::

    with PgCluster.create() as pg:        # initdb + start, ~1-2 s
        engine = sa.create_engine(pg.url())
        ...
        pg.stop()                          # pg_ctl stop -m fast: sessions are terminated
        pg.start()                         # same data, same port
        pg.restart()                       # both at once

Durability settings are for speed (``fsync=off``): data survives a server stop or a
crash of PostgreSQL itself (the OS still has it), not a crash of the machine, which no
test simulates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Self

from tests.ports import free_port
from tests.timeouts import WAIT, scaled

__all__ = ["PgCluster", "PgUnavailable", "find_bindir"]

PG_CTL_T = str(int(scaled(60)))  # pg_ctl -t: seconds to wait for a start or stop


class PgUnavailable(RuntimeError):
    """No PostgreSQL server binaries (or no way to run them) on this machine."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``."""
    candidates: list[str] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, timeout=WAIT, check=True
        )
        candidates.append(out.stdout.strip())
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)  # newest first
    for directory in candidates:
        if (
            directory
            and (Path(directory) / "initdb").exists()
            and (Path(directory) / "pg_ctl").exists()
        ):
            return Path(directory)
    raise PgUnavailable(
        "no initdb/pg_ctl found (pg_config --bindir, /usr/lib/postgresql/*/bin); "
        "install the PostgreSQL server package"
    )


class PgCluster:
    """One PostgreSQL server of our own; see the module docstring."""

    def __init__(self, bindir: Path, root: Path, port: int) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.sockets = root / "sockets"
        self.logfile = root / "server.log"
        self.port = port
        self._as_postgres = os.geteuid() == 0

    # --- lifecycle -------------------------------------------------------------------

    @classmethod
    def create(cls) -> Self:
        """initdb a new cluster in a fresh temporary directory and start it."""
        bindir = find_bindir()
        root = Path(tempfile.mkdtemp(prefix="runbell-pg-"))
        cluster = cls(bindir, root, free_port())
        try:
            cluster._prepare()
            cluster.start()
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _prepare(self) -> None:
        self.sockets.mkdir()
        if self._as_postgres:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PgUnavailable("running as root, but there is no 'postgres' user") from exc
            for path in (self.root, self.sockets):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run(
            "initdb",
            "-D", str(self.data),
            "-U", "postgres",
            "-A", "trust",
            "-E", "UTF8",
            "--locale=C",
            "--no-sync",
        )  # fmt: skip
        settings = {
            "port": str(self.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.sockets}'",
            "max_connections": "100",
            "shared_buffers": "'16MB'",
            "fsync": "off",
            "full_page_writes": "off",
            "log_min_messages": "warning",
        }
        conf = "".join(f"{name} = {value}\n" for name, value in settings.items())
        self._append(self.data / "postgresql.conf", conf)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run(
            "pg_ctl", "start", "-w", "-t", PG_CTL_T, "-D", str(self.data), "-l", str(self.logfile)
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` terminates sessions, ``immediate`` is a crash."""
        self._run("pg_ctl", "stop", "-w", "-t", PG_CTL_T, "-m", mode, "-D", str(self.data))

    def restart(self, mode: str = "fast") -> None:
        self._run(
            "pg_ctl", "restart", "-w", "-t", PG_CTL_T, "-m", mode,
            "-D", str(self.data), "-l", str(self.logfile),
        )  # fmt: skip

    def running(self) -> bool:
        res = self._run("pg_ctl", "status", "-D", str(self.data), check=False)
        return res.returncode == 0

    def destroy(self) -> None:
        """Stop the server (if it runs) and delete everything it wrote."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run(
                    "pg_ctl", "stop", "-w", "-t", PG_CTL_T, "-m", "immediate", "-D", str(self.data)
                )
        shutil.rmtree(self.root, ignore_errors=True)

    # --- use -------------------------------------------------------------------------

    def url(self, database: str = "postgres") -> str:
        """A SQLAlchemy URL (psycopg 3) over TCP to ``database``."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name``; returns its URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def psql(self, sql: str, database: str = "postgres") -> str:
        res = self._run(
            "psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
            "-h", str(self.sockets), "-p", str(self.port), "-U", "postgres",
            "-d", database, "-c", sql,
        )  # fmt: skip
        return res.stdout

    def log(self) -> str:
        """The server's log so far (for failure messages)."""
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    # --- internals -------------------------------------------------------------------

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [str(self.bindir / tool), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        res = subprocess.run(
            command, capture_output=True, text=True, timeout=scaled(120), check=False, cwd=self.root
        )
        if check and res.returncode != 0:
            raise RuntimeError(
                f"{tool} {' '.join(args[:2])} failed ({res.returncode}):\n"
                f"{res.stdout}\n{res.stderr}\n--- server log\n{self.log()[-4000:]}"
            )
        return res

    def _append(self, path: Path, text: str) -> None:
        # The file belongs to postgres; root can append to it anyway.
        with path.open("a") as f:
            f.write(text)
