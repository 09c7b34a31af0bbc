"""A bounded schemathesis run against the real app: what /openapi.json promises is what
the server does, on SQLite and PostgreSQL.

It runs the ``schemathesis`` CLI with ``--checks all`` and no check excluded: status
codes, problem+json media types, response and header schemas, Allow on 405, refusing
schema-violating input (``negative_data_rejection``), accepting schema-valid input
(``positive_data_acceptance``), auth, no 500s. A person's token (the tenant's owner, who
may also use the admin operations) for every operation but the runtime's, which get an
admin API key (``schemathesis.toml``, written per run). Three examples per operation and a
fixed seed, so a failure reproduces; ``docs/api.md`` has the command for a big budget.

Each database gets the phases whose answers depend on it, so no case is paid for twice:

- SQLite (this file): the examples, fuzzing and stateful phases, every operation. Fuzzing
  (three random cases per operation, schema-valid and not) and the stateful chains test
  the API's logic, which is the same code on both databases; its hypothesis generation is
  what they cost (about 30 s of CPU per run), not the database.
- PostgreSQL: the examples and coverage phases, every operation. The coverage phase sends
  each schema's boundary values (longest and shortest strings, smallest and largest
  numbers, one past each, wrong types, missing fields, unexpected methods): boundaries
  matter most where the database enforces widths and types, and PostgreSQL does, SQLite
  does not. It is two files of about equal cost (``test_schemathesis_postgres_runs.py``:
  the ``/v1/runs`` and ``/v1/me`` operations; ``test_schemathesis_postgres.py``: every
  other one), so that xdist runs the halves on two workers; each asserts its share of
  :data:`OPERATIONS`, so together they still test every operation.

What PostgreSQL no longer gets is fuzzing's random cases and the stateful phase's chains
(at three examples: a list, then a call on one of its items), which SQLite runs with the
same seed; what SQLite does not get is the coverage phase, as before.

Rules JSON Schema cannot state are declared in the document itself, per operation, as
``x-runbell-rules`` (``runbell.api.openapi.rules``): those that depend on stored state
(an owner must be a member; a run is created with an owner; an Idempotency-Key already
used for another request), on the operator's settings or DNS (the SSRF guard on outbound
URLs, with the test server's allow-list of 127.0.0.1), or compare values (``since``
before ``until``; unique option ids). ``tests/integration/schemathesis_hooks.py`` makes
schema-valid cases satisfy the state rules it can know of (a fresh Idempotency-Key, the
tenant's member as owner) and forgives exactly one thing: a ``positive_data_acceptance``
failure whose answer is a 422 problem of the type and ``field`` that one of the
operation's declared rules names. Nothing else is excluded, except:

- ``GET /v1/events/stream``: an SSE stream does not end, so it cannot be one request.
  Long-polls are cut to 50 ms (``longpoll_max_s``) so ``wait`` does not make the run slow,
  and so is an HTTP hook's wait for a person (``hook_wait_max_s``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from runbell.app import build
from runbell.testing import Clock, make_tenant
from tests.conftest import LiveServer, make_settings
from tests.timeouts import scaled

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")
ROOT = Path(__file__).resolve().parents[2]
HOOKS = "tests.integration.schemathesis_hooks"
# Every operation but the SSE stream: 53 before issue 16; issue 18 adds 7 for /v1/schedules,
# 5 for scoped keys and delegated tokens, 3 for /v1/subject-grants and 3 for the trace
# (run history, supersede, findings); issue 19 adds 1 for POST /v1/inbox/acknowledge,
# 2 for callback URLs (mint, use) and 1 for POST /v1/push-actions; issue 20 adds 2 for
# the HTTP hooks (POST /v1/hooks/claude-code, /v1/hooks/codex).
OPERATIONS = 77
# CI's budget; docs/api.md runs a big one with these two set.
EXAMPLES = int(os.environ.get("RUNBELL_SCHEMATHESIS_EXAMPLES", "3"))
SEED = int(os.environ.get("RUNBELL_SCHEMATHESIS_SEED", "1"))


#: The operations only an API key may call (a runtime's); every other one takes a person.
RUNTIME_ONLY = (
    r"^(PUT /v1/runs/\{run_id\}"
    r"|POST /v1/runs/\{run_id\}/(signals|progress|input-requests|claim|operations|delegations)"
    r"|PATCH /v1/runs/\{run_id\}/operations/\{operation_id\}"
    r"|POST /v1/runs/\{run_id\}/operations/\{operation_id\}/supersede"
    r"|POST /v1/input-requests/\{request_id\}/callback-urls"
    r"|POST /v1/hooks/(claude-code|codex))$"
)


def write_config(path: Path, person: str, key: str) -> Path:
    """The credentials per operation, as a schemathesis config file."""
    path.write_text(
        f'headers = {{ Authorization = "Bearer {person}" }}\n\n'
        "[[operations]]\n"
        f"include-name-regex = '{RUNTIME_ONLY}'\n"
        f'headers = {{ Authorization = "Bearer {key}" }}\n',
        encoding="utf-8",
    )
    return path


#: The phases per database (the module's docstring says why). The coverage phase's cost is
#: mostly schemathesis generating strings a pattern accepts at a boundary length; on
#: PostgreSQL the fuzzing and stateful phases were another 50 s of a 3-minute run.
#: ``RUNBELL_SCHEMATHESIS_PHASES`` runs the given phases on every database instead.
ALL_PHASES = "examples,coverage,fuzzing,stateful"
PHASES = {"sqlite": "examples,fuzzing,stateful", "postgres": "examples,coverage"}
PHASES_OVERRIDE = os.environ.get("RUNBELL_SCHEMATHESIS_PHASES")

#: The PostgreSQL run's two halves, one file each (about 70 s of a quiet machine each):
#: the operations under these paths, then every other one. ``RUNS_AND_ME_OPERATIONS`` of
#: :data:`OPERATIONS` are under them.
RUNS_AND_ME = r"^/v1/(runs|me)(/|$)"
RUNS_AND_ME_OPERATIONS = 26


@dataclass(frozen=True)
class Share:
    """Which operations one run tests (schemathesis' path filter) and how many they are."""

    option: tuple[str, ...]
    operations: int


EVERY_OPERATION = Share((), OPERATIONS)
RUNS_AND_ME_SHARE = Share(("--include-path-regex", RUNS_AND_ME), RUNS_AND_ME_OPERATIONS)
OTHERS_SHARE = Share(("--exclude-path-regex", RUNS_AND_ME), OPERATIONS - RUNS_AND_ME_OPERATIONS)


def schemathesis_command(
    url: str,
    config: Path,
    *,
    examples: int = 3,
    seed: int = 1,
    phases: str = ALL_PHASES,
    share: Share = EVERY_OPERATION,
) -> list[str]:
    """The CLI call, also what docs/api.md gives for a big budget."""
    return [
        str(SCHEMATHESIS),
        "--config-file",
        str(config),
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--exclude-path",
        "/v1/events/stream",
        *share.option,
        "--max-examples",
        str(examples),
        "--seed",
        str(seed),
        "--request-timeout",
        "20",
        "--phases",
        phases,
        # No example database: each run's cases come from the seed alone (a fresh
        # tmp_path never had one to replay from; with a shared storage directory it would).
        "--generation-database",
        "none",
    ]


def run_schemathesis(tmp_path: Path, db_url: str, share: Share = EVERY_OPERATION) -> None:
    """The bounded run of ``share``'s operations against a live server on ``db_url``; fails
    on any finding."""
    assert SCHEMATHESIS.exists(), "schemathesis is a dev dependency: make .venv/.installed-dev"
    settings = make_settings(tmp_path, db_url, longpoll_max_s=0.05, hook_wait_max_s=0.05)
    core = build(settings, clock=Clock(), migrate=False)
    tenant = make_tenant(core)
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": HOOKS,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "RUNBELL_SCHEMATHESIS_MEMBER": tenant.owner_email,
        # Hypothesis keeps the Unicode tables it derives (2 s of CPU to build) under its
        # storage directory, by default in the working directory: a fresh tmp_path each
        # run. The suite's own (the repository's .hypothesis/, gitignored) keeps them
        # across runs; --generation-database none keeps no examples there.
        "HYPOTHESIS_STORAGE_DIRECTORY": str(ROOT / ".hypothesis"),
    }
    try:
        with LiveServer(core, bridge=False) as server:
            result = subprocess.run(
                schemathesis_command(
                    server.url,
                    write_config(
                        tmp_path / "schemathesis.toml", tenant.owner_token, tenant.admin_key
                    ),
                    examples=EXAMPLES,
                    seed=SEED,
                    phases=PHASES_OVERRIDE
                    or PHASES["postgres" if db_url.startswith("postgresql") else "sqlite"],
                    share=share,
                ),
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                # A bound to give up at, never a budget: a quiet 2-core machine needs about
                # a minute and a half per database; a loaded one (load 20) over ten.
                timeout=scaled(1800) * max(1, EXAMPLES / 3),
                check=False,
            )
    finally:
        core.db.dispose()
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-8000:]
    assert "Failures:" not in report, report[-8000:]
    # Each operation got a credential it accepts (else it was tested for 401/403 only).
    assert "Authentication failed" not in report, report[-8000:]
    assert f"Tested: {share.operations}\n" in report, report[-3000:]
    print(report[report.rfind("SUMMARY") - 40 :])  # shown with -s / -rP: the run's summary


# One file per run (this one SQLite, test_schemathesis_postgres*.py PostgreSQL's halves):
# the suite keeps each file on one xdist worker, and the runs are its longest tests.
@pytest.mark.slow
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_schemathesis_finds_no_contract_violation(tmp_path: Path, db_url: str) -> None:
    run_schemathesis(tmp_path, db_url)
