"""A private PgBouncer in transaction mode in front of a PostgreSQL server, for tests of
the production topology (docs/operations.md, "PgBouncer").

:meth:`PgBouncer.start` writes a config into a fresh temporary directory and runs
``pgbouncer`` on a free port on 127.0.0.1, every database name passed through to the
server at ``host:port`` with trust auth. PgBouncer refuses to run as root, so when the
process is root it runs as the ``postgres`` user (as :mod:`tests.pgcluster` does).
``stop()`` ends it and removes the directory. Skips (:class:`PgBouncerUnavailable`) when
no ``pgbouncer`` binary is installed (Debian: ``apt-get install pgbouncer``).
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

import sqlalchemy as sa

from tests.ports import free_port
from tests.timeouts import WAIT

__all__ = ["PgBouncer", "PgBouncerUnavailable"]


class PgBouncerUnavailable(RuntimeError):
    """No pgbouncer binary (or no way to run it) on this machine."""


class PgBouncer:
    def __init__(self, server_host: str, server_port: int, pool_size: int = 10) -> None:
        self.server_host = server_host
        self.server_port = server_port
        self.pool_size = pool_size
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="runbell-pgbouncer-"))
        self.logfile = self.root / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, server_url: str, pool_size: int = 10) -> Self:
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise PgBouncerUnavailable("no pgbouncer binary; install the pgbouncer package")
        url = sa.make_url(server_url)
        bouncer = cls(url.host or "127.0.0.1", url.port or 5432, pool_size)
        try:
            bouncer._run(binary)
        except BaseException:
            bouncer.stop()
            raise
        return bouncer

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, direct_url: str) -> str:
        """``direct_url`` (same user and database) through this PgBouncer."""
        return (
            sa.make_url(direct_url)
            .set(host="127.0.0.1", port=self.port)
            .render_as_string(hide_password=False)
        )

    def _run(self, binary: str) -> None:
        users = self.root / "users.txt"
        users.write_text('"postgres" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.pool_size}\n"
            "max_client_conn = 1000\n"
            f"logfile = {self.logfile}\n"
            f"pidfile = {self.root / 'pgbouncer.pid'}\n"
            "server_reset_query =\n"
        )
        command = [binary, str(config)]
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PgBouncerUnavailable("running as root, but no 'postgres' user") from exc
            for path in (self.root, users, config):
                os.chown(path, user.pw_uid, user.pw_gid)
            command = ["runuser", "-u", "postgres", "--", *command]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + WAIT
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise PgBouncerUnavailable(f"pgbouncer did not start: {err}{self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        return self.logfile.read_text(errors="replace") if self.logfile.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=WAIT)
        if self.proc is not None and self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.root, ignore_errors=True)
