"""The state of one bench run, shared by the benchmark modules (p1_core, p2_http, …)."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench import targets, verify
from bench.common import Child, Mode, Row, Tally
from bench.servers import Databases, Db, Server, Workers


@dataclass
class Bench:
    mode: Mode
    workdir: Path
    dbs: Databases
    secret_key: str
    rows: list[Row] = field(default_factory=list)
    tallies: list[Tally] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # figures later benchmarks build on (P4 runs at half of P3's max, …)
    facts: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    _loadgen: Child | None = None

    @property
    def logs(self) -> Path:
        path = self.workdir / "logs"
        path.mkdir(exist_ok=True)
        return path

    def say(self, message: str) -> None:
        sys.stderr.write(f"[bench {time.monotonic() - self.started:6.1f}s] {message}\n")
        sys.stderr.flush()

    def add(self, row: Row) -> None:
        self.rows.append(row)
        m = row.measured
        self.say(
            f"{row.id}: {m.median:,.4g} {m.unit} ({m.lo:,.4g}–{m.hi:,.4g})"
            + (f", ratio {row.ratio.median:.3g}×" if row.ratio else "")
        )

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # --- resources -----------------------------------------------------------------------

    @contextlib.contextmanager
    def core(self, db: Db, **settings: Any) -> Iterator[Any]:
        core = targets.open_core(db.url, db.data_dir, self.secret_key, **settings)
        try:
            yield core
        finally:
            targets.close_core(core)

    @contextlib.contextmanager
    def read_engine(self, db: Db) -> Iterator[sa.Engine]:
        engine = verify.read_engine(db.url)
        try:
            yield engine
        finally:
            engine.dispose()

    @contextlib.contextmanager
    def database(self, kind: str, name: str) -> Iterator[Db]:
        db = self.dbs.postgres(name) if kind == "postgres" else self.dbs.sqlite(name)
        try:
            yield db
        finally:
            self.dbs.drop(db)

    @contextlib.contextmanager
    def servers(
        self,
        db: Db,
        command: str,
        n: int = 1,
        workers: int = 0,
        env: dict[str, str] | None = None,
    ) -> Iterator[list[Server]]:
        """``n`` HTTP processes (and ``workers`` ``runbell worker`` processes), all
        started at once and then waited for; ``env`` adds RUNBELL_* settings."""
        env = env or {}
        started = [
            Server(self.dbs.env(db, **env), command, self.logs / f"{db.name}-{command}{i}.log")
            for i in range(n)
        ]
        w = Workers(self.dbs.env(db, **env), workers, self.logs, f"{db.name}-{workers}")
        try:
            w.ready()
            yield [s.ready() for s in started]
        finally:
            w.stop()
            for s in started:
                s.stop()

    @contextlib.contextmanager
    def serve_each(self, dbs: list[Db]) -> Iterator[list[Server]]:
        """One ``runbell serve`` on each database, started at once."""
        started = [
            Server(self.dbs.env(db), "serve", self.logs / f"{db.name}-serve.log") for db in dbs
        ]
        try:
            yield [s.ready() for s in started]
        finally:
            for s in started:
                s.stop()

    @contextlib.contextmanager
    def workers(self, db: Db, n: int, **env: str) -> Iterator[Workers]:
        w = Workers(self.dbs.env(db, **env), n, self.logs, f"{db.name}-{n}")
        try:
            yield w.ready()
        finally:
            w.stop()

    def loadgen(self, config: dict[str, Any]) -> dict[str, Any]:
        """One load from the load-generator process (started on first use)."""
        if self._loadgen is None or self._loadgen.proc.poll() is not None:
            self._loadgen = Child("bench.loadgen", {"serve": True}, self.logs / "loadgen.log")
        return self._loadgen.call("run", timeout=600, config=config)

    def close(self) -> None:
        if self._loadgen is not None:
            self._loadgen.close()
            self._loadgen = None
