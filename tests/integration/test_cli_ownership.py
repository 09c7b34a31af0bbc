"""``runbell history/claim/supersede/finding`` and the job flags of ``runbell report``
(issue 18 items 2, 3, 5 and 8 through the command line), run as processes against a real
running Runbell, on SQLite and PostgreSQL. Operations are declared through the SDK, as a
runtime would; what the commands did is read back through the SDK."""

from __future__ import annotations

import json
from pathlib import Path

from runbell.client import Client
from runbell.flows import accounts
from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.conftest import LiveServer
from tests.integration.test_cli_agent import env_for, runbell
from tests.integration.test_completion_owner import Keys, keys, task


def _envs(
    live: LiveServer, creds: TenantCreds, k: Keys, tmp: Path
) -> tuple[dict[str, str], dict[str, str]]:
    """The owner's key and a helper's (a second runtime key of the tenant)."""
    owner = env_for(live.url, k.owner, creds.owner_email, tmp / "none.toml")
    helper = env_for(live.url, k.helper, creds.owner_email, tmp / "none.toml")
    return owner, helper


def _in_flight(live: LiveServer, k: Keys, run_id: str) -> None:
    """task-4 declared and sent by the owner's worker (epoch 1)."""
    with Client(live.url, k.owner) as sdk:
        sdk.declare_operations(run_id, [task("task-4")], epoch=1)
        sdk.move_operation(run_id, "task-4", "sent", epoch=1)


def test_history_lists_a_takeover_with_its_actor(
    live: LiveServer, core: Core, creds: TenantCreds, tmp_path: Path
) -> None:
    k = keys(core, creds)
    owner, helper = _envs(live, creds, k, tmp_path)
    assert runbell(owner, "report", "job-1", "working", "--title", "Move tasks").returncode == 0
    first = runbell(owner, "claim", "job-1", "--worker-id", "worker-a")
    assert (first.returncode, first.stdout) == (0, "claimed job-1 for worker-a: epoch 1\n")
    _in_flight(live, k, "job-1")
    why = "worker-a stopped answering"
    taken = runbell(helper, "claim", "job-1", "--worker-id", "worker-b", "--reason", why)
    assert (taken.returncode, taken.stdout) == (0, "claimed job-1 for worker-b: epoch 2\n")

    shown = runbell(owner, "history", "job-1")
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    lines = shown.stdout.splitlines()
    [took] = [line for line in lines if "owner takeover" in line]
    assert (
        f"owner takeover: {k.owner_id} worker worker-a -> {k.helper_id} worker worker-b, "
        f"epoch 2, previous may still act ({why})  by key {k.helper_id} (runtime) "
        "worker worker-b"
    ) in took
    [sent] = [line for line in lines if "operation task-4 moved" in line]
    assert "planned -> sent" in sent and f"by key {k.owner_id} (runtime)" in sent
    assert "create v1: - -> queued (created)  by key" in lines[0]  # oldest first

    as_json = runbell(owner, "history", "job-1", "--json")
    steps = json.loads(as_json.stdout)
    [step] = [s for s in steps if s["kind"] == "owner_change" and s["change"] == "takeover"]
    assert step["actor"]["credential_id"] == k.helper_id and step["reason"] == why
    assert len(steps) == len(lines)
    assert k.helper not in as_json.stdout and k.owner not in shown.stdout  # never a secret

    unknown = runbell(owner, "history", "no-such-run")
    assert unknown.returncode == 3 and unknown.stderr.startswith("runbell: 404 ")


def test_supersede_refused_to_a_non_owner_with_the_rule_then_done_by_the_owner(
    live: LiveServer, core: Core, creds: TenantCreds, tmp_path: Path
) -> None:
    k = keys(core, creds)
    owner, helper = _envs(live, creds, k, tmp_path)
    assert runbell(owner, "report", "job-2", "working", "--title", "Move tasks").returncode == 0
    assert runbell(owner, "claim", "job-2", "--worker-id", "worker-a").returncode == 0
    _in_flight(live, k, "job-2")
    why = "looked it up in the tracker: the old request never arrived"

    refused = runbell(helper, "supersede", "job-2", "task-4", "--reason", why)
    assert (refused.returncode, refused.stdout) == (3, "")
    first, hint = refused.stderr.splitlines()
    assert first.startswith("runbell: 403 only the run's completion owner may supersede")
    assert f"'{k.owner_id}' (worker 'worker-a')" in first
    assert hint == (
        "hint: report what you found (runbell finding) or take the run over "
        "(runbell claim RUN_ID --worker-id W)"
    )
    with Client(live.url, k.owner) as sdk:
        [op] = sdk.operations("job-2")
        assert "superseded" not in op.raw or op.raw["superseded"] is None

    done = runbell(
        owner, "supersede", "job-2", "task-4", "--reason", why, "--worker-id", "worker-a"
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "superseded task-4 (sent)\n", "")
    with Client(live.url, k.owner) as sdk:
        [op] = sdk.operations("job-2")
        assert op.state == "sent" and op.raw["superseded"]["reason"] == why
        # In flight no longer blocks: the retry is declared.
        sdk.declare_operations("job-2", [task("task-4-retry")], epoch=1)
    shown = runbell(owner, "history", "job-2").stdout
    assert f"operation task-4 superseded (sent): {why}  by key {k.owner_id}" in shown


def test_a_finding_lands_on_the_ledger_and_changes_no_state(
    live: LiveServer, core: Core, creds: TenantCreds, tmp_path: Path
) -> None:
    k = keys(core, creds)
    owner, helper = _envs(live, creds, k, tmp_path)
    assert runbell(owner, "report", "job-3", "working", "--title", "Move tasks").returncode == 0
    assert runbell(owner, "claim", "job-3", "--worker-id", "worker-a").returncode == 0
    _in_flight(live, k, "job-3")
    evidence = '{"due": "2026-12-12", "seen_in": "tracker"}'
    args = ["finding", "job-3", "task-4", "--finding", "conflict", "--evidence", evidence]
    found = runbell(helper, *args, "--worker-id", "checker")
    assert (found.returncode, found.stdout, found.stderr) == (
        0,
        "reported conflict on task-4 (sent)\n",
        "",
    )
    with Client(live.url, k.owner) as sdk:
        [op] = sdk.operations("job-3")
    assert op.state == "sent"
    [report] = op.raw["reports"]
    assert report["finding"] == "conflict" and report["evidence"] == json.loads(evidence)
    assert report["actor"]["credential_id"] == k.helper_id
    assert report["actor"]["worker_id"] == "checker"
    shown = runbell(owner, "history", "job-3").stdout
    assert f"operation task-4 finding conflict  by key {k.helper_id} (runtime) worker checker" in (
        shown
    )

    # A scoped key that may only read gets the 403 naming what it lacks.
    _, reader = accounts.create_key(
        core, creds.tenant_id, "runtime", name="reader", capabilities=["runs.read"]
    )
    read_only = env_for(live.url, reader, None, tmp_path / "none.toml")
    lacks = runbell(read_only, *args)
    assert (lacks.returncode, lacks.stdout) == (3, "")
    first, hint = lacks.stderr.splitlines()
    assert first == "runbell: 403 this credential lacks the capability 'runs.report'"
    assert hint == (
        "hint: this key lacks runs.report: use a key created with "
        "runbell key create --capability runs.report"
    )
    assert runbell(read_only, "history", "job-3").returncode == 0  # reading it may

    bad = runbell(helper, "finding", "job-3", "task-4", "--finding", "maybe")
    assert bad.returncode == 3 and "--finding must be one of conflict, confirmed" in bad.stderr
    not_json = runbell(helper, *args[:5], "--evidence", "{nope")
    assert not_json.returncode == 3 and "--evidence is not JSON" in not_json.stderr


def test_report_sets_the_job_fields(
    live: LiveServer, core: Core, creds: TenantCreds, tmp_path: Path
) -> None:
    k = keys(core, creds)
    owner, _ = _envs(live, creds, k, tmp_path)
    with Client(live.url, k.owner, creds.owner_email) as sdk:
        sdk.put_run("ci:plan", title="Launch plan", state="working")  # a run id with ':'
        sdk.open_input_request("ci:plan", summary="Move the dates?", request_id="plan-dates")

    made = runbell(
        owner,
        "report",
        "job-4",
        "working",
        "--title",
        "Move twelve tasks",
        "--done-when",
        "all twelve tasks moved",
        "--done-when-operation",
        "t1",
        "--done-when-operation",
        "t2",
        "--job-link",
        "conversation:chat-7",
        "--job-link",
        "message:m-1",
        "--depends-on",
        "ci:plan:plan-dates",
    )
    assert (made.returncode, made.stderr) == (0, ""), made.stderr
    with Client(live.url, k.owner) as sdk:
        run = sdk.get_run("job-4")
        linked = [r.run_id for r in sdk.list_runs(link="conversation:chat-7")]
    assert run.state == "working"
    assert run.done_when == {"text": "all twelve tasks moved", "operations": ["t1", "t2"]}
    assert [(link["kind"], link["id"]) for link in run.links] == [
        ("conversation", "chat-7"),
        ("message", "m-1"),
    ]
    assert run.depends_on is not None
    assert (run.depends_on["run"], run.depends_on["request_id"]) == ("ci:plan", "plan-dates")
    assert run.depends_on["version"] == 1  # filled in with the request's version
    assert linked == ["job-4"]

    # On an existing run, only the flags given change.
    again = runbell(owner, "report", "job-4", "working", "--done-when", "all moved")
    assert again.returncode == 0, again.stderr
    with Client(live.url, k.owner) as sdk:
        run = sdk.get_run("job-4")
    assert run.done_when == {"text": "all moved", "operations": []}
    assert len(run.links) == 2 and run.depends_on is not None
    pinned = runbell(owner, "report", "job-4", "working", "--depends-on", "ci:plan:plan-dates:1")
    assert pinned.returncode == 0, pinned.stderr
    with Client(live.url, k.owner) as sdk:
        run = sdk.get_run("job-4")
    assert run.depends_on == {"run": "ci:plan", "request_id": "plan-dates", "version": 1}

    for flags, message in (
        (["--depends-on", "plan"], "--depends-on must be RUN:REQUEST_ID[:VERSION]"),
        (["--job-link", "chat-7"], "--job-link must be KIND:ID"),
        (["--done-when-operation", "t1"], "--done-when-operation needs --done-when"),
    ):
        bad = runbell(owner, "report", "job-4", "working", *flags)
        assert bad.returncode == 3 and message in bad.stderr, bad.stderr
    refused = runbell(owner, "report", "job-5", "working", "--depends-on", "nope:req")
    assert refused.returncode == 3 and "422" in refused.stderr and "depends_on" in refused.stderr
