"""Commands for scripts and CI jobs, built on :mod:`runbell.client`: ``login``, ``report``,
``progress``, ``ask``, ``wait``, ``delegate`` and ``undelegate``. Configured like every
integration: ``RUNBELL_URL``, ``RUNBELL_KEY`` and ``RUNBELL_OWNER``, else the file
``runbell login`` writes.

Exit codes are part of the interface (scripts branch on them):

==========  ====================================  =====================================
command     0                                     1 / 2 / 3
==========  ====================================  =====================================
``ask``     approved, or answered (value on       1 rejected · 2 expired, timed out,
            stdout)                               superseded or cancelled · 3 error
``wait``    completed                             1 failed or cancelled · 2 timeout ·
                                                  3 error
``report``  applied, duplicate, stale, mismatch   1 rejected · 3 error
others      done                                  3 error
==========  ====================================  =====================================

An error is one line on stderr (``runbell: …``, then ``hint: …`` when there is something
to do), never a traceback; a usage error exits 3 too, so that 2 always means "no answer
in time". The SDK (and httpx) is imported when a command runs, not when ``runbell``
starts.
"""

from __future__ import annotations

from runbell.cli import common
from runbell.cli.specs import Argument, Commands, Flag, Option, path

TYPE_CHECKING = False  # not typing's, see runbell.cli.common
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, NoReturn

    from runbell.client import Client, RetryPolicy, RunbellError

__all__ = [
    "ask",
    "commands",
    "delegate",
    "login",
    "progress",
    "report",
    "undelegate",
    "wait",
]

EXIT_ERROR = common.EXIT_UNREACHABLE
#: Their usage errors exit 3 too (not 2, which ``ask`` and ``wait`` use for "no answer in
#: time").
commands = Commands(usage_exit=EXIT_ERROR)
KINDS = ("approval", "choice", "text")
KEY_HINT = "RUNBELL_KEY must be a runtime key of this server: runbell key create --tenant TENANT"

RUN_ID = Argument("run_id", "your run's id, e.g. ci-$GITHUB_RUN_ID")


def _retry() -> RetryPolicy:
    """A script wants a clear answer soon when the server is down: about 2 s of retries."""
    from runbell.client import RetryPolicy

    return RetryPolicy(attempts=4, base_delay=0.25, max_delay=1.0)


def _fail(message: str, hint: str | None = None) -> NoReturn:
    common.fail(message, hint, EXIT_ERROR)


def _client() -> Client:
    from runbell.client import Client, RunbellError

    try:
        return Client.from_env(retry=_retry())
    except RunbellError as exc:
        _fail(exc.detail, _hint(exc))


def _error(exc: RunbellError, prefix: str = "") -> NoReturn:
    """One line for an SDK error (``401 invalid key``), the hint, exit 3."""
    from runbell.client import errors

    line = exc.detail
    if isinstance(exc, errors.APIError):
        where = f" ({exc.field})" if exc.field else ""
        line = f"{exc.status} {exc.detail}{where}"
    _fail(prefix + line, _hint(exc))


def _hint(exc: RunbellError) -> str | None:
    from runbell.client import errors

    if isinstance(exc, errors.ConnectionFailed):
        return "is the server running (runbell serve)? RUNBELL_URL names it"
    if isinstance(exc, errors.Unauthorized):
        return KEY_HINT
    if isinstance(exc, errors.Forbidden) and exc.problem.get("rule") == "completion_owner":
        return (
            "report what you found (runbell finding) or take the run over "
            "(runbell claim RUN_ID --worker-id W)"
        )
    if isinstance(exc, errors.Forbidden) and exc.missing_capability:
        return (
            f"this key lacks {exc.missing_capability}: use a key created with "
            f"runbell key create --capability {exc.missing_capability}"
        )
    if isinstance(exc, errors.Forbidden):
        return "this needs a runtime key: runbell key create --tenant TENANT --role runtime"
    return None


@commands.command(
    Option("--url", "the server, e.g. http://127.0.0.1:8080", metavar="URL"),
    Option("--key", "a runtime key (rbk_…)", metavar="KEY"),
    Option("--owner", "email of the person runs are for", metavar="EMAIL"),
    Option("--config", "where to write (default: see above)", metavar="PATH", type=path),
    Flag("--check/--no-check", "check the key against the server first"),
)
def login(
    url: str | None = None,
    key: str | None = None,
    owner: str | None = None,
    config: Path | None = None,
    check: bool = True,
) -> None:
    """Save the server URL, runtime key and owner for later commands.

    A 0600 file: $RUNBELL_CONFIG, else ~/.config/runbell/config.toml. Prompts for what is
    missing; RUNBELL_URL, RUNBELL_KEY and RUNBELL_OWNER still win over the file."""
    from runbell.client import Client, ClientConfig, RunbellError, write_config
    from runbell.client.config import config_path

    url = url or common.prompt("Runbell URL", default="http://127.0.0.1:8080")
    key = key or common.prompt("Runtime key", hide=True)
    owner = owner or common.prompt("Owner email (who runs are for)", default="") or None
    settings = ClientConfig(url.rstrip("/"), key, owner)
    if check:
        try:
            with Client(settings.url, settings.key, settings.owner, retry=_retry()) as core:
                core.head_cursor()
        except RunbellError as exc:
            _error(exc, "not saved: ")
    try:
        path = write_config(settings, config or config_path())
    except OSError as exc:
        _fail(f"cannot write {config or config_path()}: {exc.strerror or exc}")
    print(f"saved {path}")


@commands.command(
    RUN_ID,
    Argument("state", "working, completed, failed, cancelled, …"),
    Option("--title", "the run's title (creates it if new)", metavar="TITLE"),
    Option("--reason", "a short public label", metavar="REASON"),
    Option("--event-id", "a stable id for this report (retries stay one)", metavar="ID"),
    Flag("--notify/--no-notify", "push when it completes"),
    Option("--summary", "report.summary: what it achieved", metavar="TEXT"),
    Option("--link", "a link in the report (repeatable)", metavar="LABEL=URL", repeat=True),
    Option("--done-when", "the job: what counts as done", metavar="TEXT"),
    Option(
        "--done-when-operation",
        "the job: an operation that must be confirmed (repeatable)",
        metavar="ID",
        repeat=True,
    ),
    Option(
        "--job-link",
        "the job: a linked conversation, message… (repeatable)",
        metavar="KIND:ID",
        repeat=True,
    ),
    Option(
        "--depends-on",
        "the job: another run's proposal it depends on (:VERSION pins one)",
        metavar="RUN:REQUEST_ID",
    ),
)
def report(
    run_id: str,
    state: str,
    title: str | None = None,
    reason: str | None = None,
    event_id: str | None = None,
    notify: bool | None = None,
    summary: str | None = None,
    link: list[str] | None = None,
    done_when: str | None = None,
    done_when_operation: list[str] | None = None,
    job_link: list[str] | None = None,
    depends_on: str | None = None,
) -> None:
    """Report a run's state.

    The run is created for RUNBELL_OWNER if it does not exist."""
    from runbell.client import RunbellError, errors

    body = _report(summary, link or [])
    job = _job(done_when, done_when_operation or [], job_link or [], depends_on)
    with _client() as core:
        try:
            if title is not None or notify is not None or job:
                core.put_run(run_id, title=title, notify_on_complete=notify, **job)
            try:
                result = core.signal(run_id, state, event_id=event_id, reason=reason, report=body)
            except errors.NotFound:
                core.put_run(run_id, title=title, notify_on_complete=notify, **job)
                result = core.signal(run_id, state, event_id=event_id, reason=reason, report=body)
        except RunbellError as exc:
            _error(exc)
    print(f"{result.outcome}: {result.reason}" if result.reason else result.outcome)
    if result.outcome == "rejected":
        raise common.Exit(common.EXIT_NO)


def _job(
    done_when: str | None, operations: list[str], links: list[str], depends_on: str | None
) -> dict[str, Any]:
    """``put_run``'s job fields from the flags given (issue 18 item 5); none: ``{}``."""
    job: dict[str, Any] = {}
    if operations and done_when is None:
        _fail("--done-when-operation needs --done-when TEXT", "say what counts as done")
    if done_when is not None:
        job["done_when"] = {"text": done_when, "operations": operations}
    for item in links:
        kind, sep, ident = item.partition(":")
        if not sep or not kind or not ident:
            _fail(f"--job-link must be KIND:ID, not {item!r}", "e.g. --job-link conversation:c-7")
        job.setdefault("links", []).append(item)
    if depends_on is not None:
        job["depends_on"] = _depends_on(depends_on)
    return job


def _depends_on(raw: str) -> dict[str, Any]:
    """``RUN:REQUEST_ID[:VERSION]`` → ``{run, request_id, version?}``. A run id may hold
    ``:`` (the request id is the last part, after an all-digit version if any)."""
    rest, version = raw, None
    head, sep, tail = raw.rpartition(":")
    if sep and tail.isdigit() and ":" in head:
        rest, version = head, int(tail)
    run, sep, request_id = rest.rpartition(":")
    if not sep or not run or not request_id:
        _fail(
            f"--depends-on must be RUN:REQUEST_ID[:VERSION], not {raw!r}",
            "e.g. --depends-on launch-plan:approve-dates:2",
        )
    target: dict[str, Any] = {"run": run, "request_id": request_id}
    if version is not None:
        target["version"] = version
    return target


def _report(summary: str | None, links: list[str]) -> dict[str, Any] | None:
    body: dict[str, Any] = {}
    if summary:
        body["summary"] = summary
    for item in links:
        label, sep, url = item.partition("=")
        if not sep or not label or not url:
            _fail(f"--link must be LABEL=URL, not {item!r}", "e.g. --link run=https://…")
        body.setdefault("links", []).append({"label": label, "url": url})
    return body or None


@commands.command(
    RUN_ID,
    Argument("message", "what is happening now (public)"),
    Option("--count", "a count, e.g. done=3 (repeatable)", metavar="NAME=VALUE", repeat=True),
)
def progress(run_id: str, message: str, count: list[str] | None = None) -> None:
    """Send a heartbeat: progress shown, nobody notified.

    It keeps the run from counting as stalled."""
    from runbell.client import RunbellError

    counts: dict[str, Any] = {}
    for item in count or []:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            _fail(f"--count must be NAME=VALUE, not {item!r}")
        counts[name] = _number(raw)
    with _client() as core:
        try:
            result = core.progress(run_id, message, counts or None)
        except RunbellError as exc:
            _error(exc)
    print("accepted" if result.accepted else f"not recorded: {result.reason}")


def _number(raw: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw


@commands.command(
    RUN_ID,
    Argument("summary", "the question a person answers"),
    Option("--kind", "approval, choice or text", metavar="KIND"),
    Option("--option", "a choice (repeatable)", metavar="ID[=LABEL]", repeat=True),
    Option("--details", "an object shown after sign-in (sensitive)", metavar="JSON"),
    Option("--expires-in", "seconds until no answer is accepted", metavar="S", type=float),
    Option("--timeout", "seconds to wait (default: until it ends)", metavar="S", type=float),
    Option("--request-id", "a stable id (retries reuse the request)", metavar="ID"),
    Option("--title", "the run's title if it is created", metavar="TITLE"),
)
def ask(
    run_id: str,
    summary: str,
    kind: str = "approval",
    option: list[str] | None = None,
    details: str | None = None,
    expires_in: float | None = None,
    timeout: float | None = None,
    request_id: str | None = None,
    title: str | None = None,
) -> None:
    """Ask a person and wait for the answer.

    Long-polling, no busy polling. Exits 0 approved or answered (the value on stdout),
    1 rejected, 2 expired, timed out, superseded or cancelled, 3 error."""
    import json

    from runbell.client import RunbellError, errors

    if kind not in KINDS:
        _fail(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    extra: dict[str, Any] | None = None
    if details is not None:
        try:
            extra = json.loads(details)
        except ValueError as exc:
            _fail(f"--details is not JSON: {exc}")
        if not isinstance(extra, dict):
            _fail("--details must be a JSON object")
    options = [_option(o) for o in option or []] or None
    with _client() as core:
        try:
            try:
                run = core.get_run(run_id)
            except errors.NotFound:
                run = core.put_run(run_id, title=title, state="working")
            if run.state == "queued":
                core.signal(run_id, "working")
            answer = core.ask(
                run_id,
                summary,
                kind=kind,
                request_id=request_id,
                details=extra,
                options=options,
                expires_in=expires_in,
                timeout=timeout,
            )
        except RunbellError as exc:
            _error(exc)
    if answer.outcome == "answered":
        if answer.value is not None:
            print(answer.value)
        else:
            print("approved" if answer.approved else "rejected")
        raise common.Exit(common.EXIT_NO if answer.rejected else common.EXIT_OK)
    common.say(f"no answer: {answer.outcome}")
    raise common.Exit(2)


def _option(raw: str) -> dict[str, str]:
    ident, _, label = raw.partition("=")
    return {"id": ident, "label": label or ident}


@commands.command(
    RUN_ID, Option("--timeout", "seconds to wait (default: for ever)", metavar="S", type=float)
)
def wait(run_id: str, timeout: float | None = None) -> None:
    """Wait until the run finishes; print its state.

    Exits 0 completed, 1 failed or cancelled, 2 timeout, 3 error."""
    from runbell.client import RunbellError

    with _client() as core:
        try:
            run = core.await_run(run_id, timeout)
        except RunbellError as exc:
            _error(exc)
    print(run.state + (f": {run.stop_reason}" if run.stop_reason else ""))
    if not run.terminal:
        raise common.Exit(2)
    raise common.Exit(common.EXIT_OK if run.state == "completed" else common.EXIT_NO)


@commands.command(
    RUN_ID,
    Option(
        "--capability",
        "what the helper may do (repeatable), at most what your key holds",
        metavar="NAME",
        repeat=True,
    ),
    Option("--expires-in", "seconds the token works (60 to 604800)", metavar="S", type=float),
    Option("--name", "who the token is for", metavar="NAME"),
)
def delegate(
    run_id: str,
    capability: list[str] | None = None,
    expires_in: float | None = None,
    name: str | None = None,
) -> None:
    """Mint a token for a helper, bound to one run.

    It is printed once.

    Revoke it with runbell undelegate ID."""
    from runbell.client import RunbellError

    if not capability:
        _fail("name at least one --capability, e.g. --capability runs.report")
    if expires_in is None or not name:
        _fail("--expires-in and --name are required")
    with _client() as core:
        try:
            made = core.delegate(run_id, capabilities=capability, expires_in=expires_in, name=name)
        except RunbellError as exc:
            _error(exc)
    print(f"token id {made.id}\ntoken    {made.token}   (shown once)")


@commands.command(Argument("delegation_id", "the token's id (dlg_…), not its secret"))
def undelegate(delegation_id: str) -> None:
    """Revoke a delegated token at once."""
    from runbell.client import RunbellError

    with _client() as core:
        try:
            core.revoke_delegation(delegation_id)
        except RunbellError as exc:
            _error(exc)
    print(f"revoked {delegation_id}")
