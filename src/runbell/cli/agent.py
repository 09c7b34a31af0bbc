"""Commands for scripts and CI jobs, built on :mod:`runbell.client`: ``login``, ``report``,
``progress``, ``ask`` and ``wait``. Configured like every integration: ``RUNBELL_URL``,
``RUNBELL_KEY`` and ``RUNBELL_OWNER``, else the file ``runbell login`` writes.

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

# No ``from __future__ import annotations`` in the command modules: Typer would then
# eval every parameter's annotation string when `runbell` starts (runbell.cli.common).
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from runbell.cli import common

if TYPE_CHECKING:
    from runbell.client import Client, RetryPolicy, RunbellError

__all__ = ["AgentCommand", "ask", "login", "progress", "report", "wait"]

EXIT_ERROR = common.EXIT_UNREACHABLE
KINDS = ("approval", "choice", "text")
KEY_HINT = (
    "RUNBELL_KEY must be a runtime key of this server: runbell key create --tenant TENANT"
)

RunId = Annotated[str, typer.Argument(help="your run's id, e.g. ci-$GITHUB_RUN_ID")]


def _retry() -> "RetryPolicy":
    """A script wants a clear answer soon when the server is down: about 2 s of retries."""
    from runbell.client import RetryPolicy

    return RetryPolicy(attempts=4, base_delay=0.25, max_delay=1.0)


class AgentCommand(common.Command):
    """A command whose usage errors exit 3 (not click's 2, which ``ask`` and ``wait`` use
    for "no answer in time")."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:
            # Typer vendors click (typer._click): match its UsageError by its exit code
            # rather than import a private module.
            if getattr(exc, "exit_code", None) == 2:
                exc.exit_code = EXIT_ERROR  # type: ignore[attr-defined]
            raise


def _fail(message: str, hint: str | None = None) -> NoReturn:
    common.fail(message, hint, EXIT_ERROR)


def _client() -> "Client":
    from runbell.client import Client, RunbellError

    try:
        return Client.from_env(retry=_retry())
    except RunbellError as exc:
        _fail(exc.detail, _hint(exc))


def _error(exc: "RunbellError", prefix: str = "") -> NoReturn:
    """One line for an SDK error (``401 invalid key``), the hint, exit 3."""
    from runbell.client import errors

    line = exc.detail
    if isinstance(exc, errors.APIError):
        where = f" ({exc.field})" if exc.field else ""
        line = f"{exc.status} {exc.detail}{where}"
    _fail(prefix + line, _hint(exc))


def _hint(exc: "RunbellError") -> str | None:
    from runbell.client import errors

    if isinstance(exc, errors.ConnectionFailed):
        return "is the server running (runbell serve)? RUNBELL_URL names it"
    if isinstance(exc, errors.Unauthorized):
        return KEY_HINT
    if isinstance(exc, errors.Forbidden):
        return "this needs a runtime key: runbell key create --tenant TENANT --role runtime"
    return None


def login(
    url: Annotated[
        str | None, typer.Option(metavar="URL", help="the server, e.g. http://127.0.0.1:8080")
    ] = None,
    key: Annotated[str | None, typer.Option(metavar="KEY", help="a runtime key (rbk_…)")] = None,
    owner: Annotated[
        str | None, typer.Option(metavar="EMAIL", help="email of the person runs are for")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(metavar="PATH", help="where to write (default: see above)")
    ] = None,
    check: Annotated[bool, typer.Option(help="check the key against the server first")] = True,
) -> None:
    """Save the server URL, runtime key and owner for later commands.

    A 0600 file: $RUNBELL_CONFIG, else ~/.config/runbell/config.toml. Prompts for what is
    missing; RUNBELL_URL, RUNBELL_KEY and RUNBELL_OWNER still win over the file."""
    from runbell.client import Client, ClientConfig, RunbellError, write_config
    from runbell.client.config import config_path

    url = url or typer.prompt("Runbell URL", default="http://127.0.0.1:8080")
    key = key or typer.prompt("Runtime key", hide_input=True)
    owner = owner or typer.prompt("Owner email (who runs are for)", default="") or None
    settings = ClientConfig(url.rstrip("/"), key, owner)
    if check:
        try:
            with Client(settings.url, settings.key, settings.owner, retry=_retry()) as rb:
                rb.head_cursor()
        except RunbellError as exc:
            _error(exc, "not saved: ")
    try:
        path = write_config(settings, config or config_path())
    except OSError as exc:
        _fail(f"cannot write {config or config_path()}: {exc.strerror or exc}")
    print(f"saved {path}")


def report(
    run_id: RunId,
    state: Annotated[str, typer.Argument(help="working, completed, failed, cancelled, …")],
    title: Annotated[
        str | None, typer.Option(metavar="TITLE", help="the run's title (creates it if new)")
    ] = None,
    reason: Annotated[
        str | None, typer.Option(metavar="REASON", help="a short public label")
    ] = None,
    event_id: Annotated[
        str | None,
        typer.Option(metavar="ID", help="a stable id for this report (retries stay one)"),
    ] = None,
    notify: Annotated[
        bool | None, typer.Option("--notify/--no-notify", help="push when it completes")
    ] = None,
    summary: Annotated[
        str | None, typer.Option(metavar="TEXT", help="report.summary: what it achieved")
    ] = None,
    link: Annotated[
        list[str] | None,
        typer.Option(metavar="LABEL=URL", help="a link in the report (repeatable)"),
    ] = None,
) -> None:
    """Report a run's state.

    The run is created for RUNBELL_OWNER if it does not exist."""
    from runbell.client import RunbellError, errors

    body = _report(summary, link or [])
    with _client() as rb:
        try:
            if title is not None or notify is not None:
                rb.put_run(run_id, title=title, notify_on_complete=notify)
            try:
                result = rb.signal(run_id, state, event_id=event_id, reason=reason, report=body)
            except errors.NotFound:
                rb.put_run(run_id, title=title, notify_on_complete=notify)
                result = rb.signal(run_id, state, event_id=event_id, reason=reason, report=body)
        except RunbellError as exc:
            _error(exc)
    print(f"{result.outcome}: {result.reason}" if result.reason else result.outcome)
    if result.outcome == "rejected":
        raise typer.Exit(1)


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


def progress(
    run_id: RunId,
    message: Annotated[str, typer.Argument(help="what is happening now (public)")],
    count: Annotated[
        list[str] | None,
        typer.Option(metavar="NAME=VALUE", help="a count, e.g. done=3 (repeatable)"),
    ] = None,
) -> None:
    """Send a heartbeat: progress shown, nobody notified.

    It keeps the run from counting as stalled."""
    from runbell.client import RunbellError

    counts: dict[str, Any] = {}
    for item in count or []:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            _fail(f"--count must be NAME=VALUE, not {item!r}")
        counts[name] = _number(raw)
    with _client() as rb:
        try:
            result = rb.progress(run_id, message, counts or None)
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


def ask(
    run_id: RunId,
    summary: Annotated[str, typer.Argument(help="the question a person answers")],
    kind: Annotated[
        str, typer.Option(metavar="KIND", help="approval, choice or text")
    ] = "approval",
    option: Annotated[
        list[str] | None,
        typer.Option(metavar="ID[=LABEL]", help="a choice (repeatable)"),
    ] = None,
    details: Annotated[
        str | None,
        typer.Option(metavar="JSON", help="an object shown after sign-in (sensitive)"),
    ] = None,
    expires_in: Annotated[
        float | None, typer.Option(metavar="S", help="seconds until no answer is accepted")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(metavar="S", help="seconds to wait (default: until it ends)")
    ] = None,
    request_id: Annotated[
        str | None, typer.Option(metavar="ID", help="a stable id (retries reuse the request)")
    ] = None,
    title: Annotated[
        str | None, typer.Option(metavar="TITLE", help="the run's title if it is created")
    ] = None,
) -> None:
    """Ask a person and wait for the answer.

    Long-polling, no busy polling. Exits 0 approved or answered (the value on stdout),
    1 rejected, 2 expired, timed out, superseded or cancelled, 3 error."""
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
    with _client() as rb:
        try:
            try:
                run = rb.get_run(run_id)
            except errors.NotFound:
                run = rb.put_run(run_id, title=title, state="working")
            if run.state == "queued":
                rb.signal(run_id, "working")
            answer = rb.ask(
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
        raise typer.Exit(1 if answer.rejected else 0)
    common.say(f"no answer: {answer.outcome}")
    raise typer.Exit(2)


def _option(raw: str) -> dict[str, str]:
    ident, _, label = raw.partition("=")
    return {"id": ident, "label": label or ident}


def wait(
    run_id: RunId,
    timeout: Annotated[
        float | None, typer.Option(metavar="S", help="seconds to wait (default: for ever)")
    ] = None,
) -> None:
    """Wait until the run finishes; print its state.

    Exits 0 completed, 1 failed or cancelled, 2 timeout, 3 error."""
    from runbell.client import RunbellError

    with _client() as rb:
        try:
            run = rb.await_run(run_id, timeout)
        except RunbellError as exc:
            _error(exc)
    print(run.state + (f": {run.stop_reason}" if run.stop_reason else ""))
    if not run.terminal:
        raise typer.Exit(2)
    raise typer.Exit(0 if run.state == "completed" else 1)
