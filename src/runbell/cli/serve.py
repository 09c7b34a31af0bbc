"""The process commands: ``migrate``, ``serve`` (API, delivery worker and scheduler in one
process), ``api`` (the API alone) and ``worker`` (a delivery worker alone)."""

# No ``from __future__ import annotations`` in the command modules: Typer would then
# eval every parameter's annotation string when `runbell` starts (runbell.cli.common).
from typing import TYPE_CHECKING, Annotated, Any

import typer

from runbell.cli import common
from runbell.cli.common import out
from runbell.cli.welcome import login_commands, welcome_text

if TYPE_CHECKING:
    import socket

Host = Annotated[str, typer.Option(metavar="HOST", help="the interface to listen on")]
Port = Annotated[int, typer.Option(metavar="PORT", help="the port to listen on (0: any free)")]


def migrate() -> None:
    """Create or upgrade the database schema (idempotent)."""
    from runbell.app import migrate as upgrade

    settings = common.settings()
    common.data_dir(settings)
    revision, dialect = upgrade(settings)
    out.print(f"schema at revision {revision} ({dialect})")


def _serve(asgi: Any, sock: "socket.socket", on_exit: Any = None, **config: Any) -> None:
    """uvicorn, minus its habit of re-raising SIGTERM after a graceful shutdown (which
    kills the process before our cleanup runs and leaves the SQLite WAL unmerged);
    ``on_exit()`` runs when a stop signal arrives (open event streams end at once instead
    of holding the graceful shutdown for its whole timeout)."""
    import contextlib
    from collections.abc import Iterator

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if on_exit is not None:
                on_exit()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            with super().capture_signals():
                yield
                self._captured_signals.clear()  # we already shut down: exit 0

    Server(uvicorn.Config(asgi, **config)).run(sockets=[sock])


def _listen(host: str, port: int) -> "socket.socket":
    """Bind before anything is created or printed: a taken port fails here, and links use
    the port really bound (``--port 0`` included)."""
    import socket

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        common.fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            "is another server running there? Choose another port: --port 18080 "
            "(make run PORT=18080)",
        )
    return sock


def _served_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):  # noqa: S104 (we detect it, not bind)
        host = "127.0.0.1"  # listening everywhere: links still need a host a browser opens
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _demo(core: Any, base: str) -> tuple[list[Any], list[Any]]:
    """Wire the demo: a local mail sink (unless SMTP is set), a webhook endpoint on this
    server, and the simulated agent. See runbell.demo."""
    from urllib.parse import urlsplit

    from runbell import demo

    state = demo.DemoState()
    if not core.settings.smtp_host:
        host, port = demo.start_mail_sink(state)
        core.settings.smtp_host, core.settings.smtp_port = host, port
        out.print(f"Demo mail sink: {base}/demo/mailbox", markup=False, highlight=False)
    netloc = urlsplit(base).netloc
    core.settings.outbound_allow_hosts = frozenset({*core.settings.outbound_allow_hosts, netloc})
    who = demo.setup(core, base)
    if who is None:
        return [], []
    tenant_id, owner_id = who

    async def run_agent(stop: Any) -> None:
        await demo.agent(core, tenant_id, owner_id, stop)

    out.print(
        "Demo: a run will ask for your approval in a few seconds. Sign in with the "
        "sign-in link, then open the inbox.",
        markup=False,
        highlight=False,
    )
    return [run_agent], [demo.sink_router(core, state)]


def serve(
    host: Host = "127.0.0.1",
    port: Port = 8080,
    scheduler: Annotated[bool, typer.Option(help="run the scheduler in this process")] = True,
    deliver: Annotated[bool, typer.Option(help="run a delivery worker in this process")] = True,
    demo: Annotated[
        bool, typer.Option(help="a simulated agent run that asks you for approval")
    ] = False,
) -> None:
    """Run the API, a worker and the scheduler in one process.

    The API, the web app, a delivery worker and the scheduler; SQLite in RUNBELL_DATA_DIR
    unless RUNBELL_DATABASE_URL names a database. The first start creates the first
    tenant, its keys and user."""
    from runbell.api.routers.health import metrics_refusal
    from runbell.app import create_app, record_served_url
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.flows.accounts import bootstrap_if_empty
    from runbell.logging import configure

    settings = common.settings()
    configure(json=settings.log_json, level=settings.log_level)
    sock = _listen(host, port)
    core = common.core(settings)
    served = _served_url(host, sock.getsockname()[1])
    # Links in alerts and the welcome text point at RUNBELL_PUBLIC_URL when it is set,
    # else at where this server really listens; recorded for commands run elsewhere.
    given = "public_url" in settings.model_fields_set
    base = settings.public_url.rstrip("/") if given else served
    core.settings.public_url = base
    record_served_url(core.db, base)
    first = bootstrap_if_empty(core, settings.first_user_email)
    if first is not None:
        login = login_commands(settings, first.user_email)
        out.print(welcome_text(first, base, login), markup=False, highlight=False)
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    background: list[Any] = []
    routers: list[Any] = []
    if demo:
        background, routers = _demo(core, base)
    worker = Worker(core, build_channels(core)) if deliver else None
    out.print(
        f"Runbell listening on {served}  (database: {core.db.dialect})"
        + (f"; links use {base} (RUNBELL_PUBLIC_URL)" if base != served else "")
        + ". Ctrl-C stops it.",
        markup=False,
        highlight=False,
    )
    if metrics_refusal(host, core.settings.metrics_token):
        out.print(
            f"/metrics is off: listening on {host or '*'} without RUNBELL_METRICS_TOKEN "
            "(set it to scrape with a bearer token)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    if first is None and _has_default_tenant(core):
        lines = "\n  ".join(login_commands(settings, None))
        out.print(
            f"A new browser sign-in link, from another terminal here:\n  {lines}",
            markup=False,
            highlight=False,
        )
    from runbell.flows.feed import end_streams

    try:
        _serve(
            create_app(
                core, worker=worker, background=background, routers=routers, listen_host=host
            ),
            sock,
            lambda: end_streams(core),
            host=host,
            port=sock.getsockname()[1],
            log_level="warning",
            timeout_graceful_shutdown=5,
        )
    finally:
        sched.stop()
        core.db.dispose()


def _has_default_tenant(core: Any) -> bool:
    """Whether the tenant the first start creates (named ``default``) is there."""
    from runbell.flows import accounts

    return accounts.has_tenant(core.db, "default")


def api(host: Host = "127.0.0.1", port: Port = 8080) -> None:
    """Run the API alone (no worker, no scheduler).

    To scale out: N api replicas next to M `runbell worker` processes on one PostgreSQL."""
    serve(host=host, port=port, scheduler=False, deliver=False)


def worker(
    scheduler: Annotated[bool, typer.Option(help="also run the scheduler sweeps")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(metavar="PORT", help="serve this worker's /metrics on 127.0.0.1:PORT"),
    ] = None,
) -> None:
    """Run a delivery worker alone.

    Several may share one PostgreSQL; each delivery goes out once. Stops cleanly on
    SIGTERM or SIGINT (in-flight sends finish first)."""
    import asyncio
    import signal

    from runbell.app import links_base, start_wakeups
    from runbell.dispatch.scheduler import Scheduler
    from runbell.dispatch.wiring import build_channels
    from runbell.dispatch.worker import Worker
    from runbell.logging import configure

    settings = common.settings()
    configure(json=settings.log_json, level=settings.log_level)
    core = common.core(settings)
    # Links in alerts: RUNBELL_PUBLIC_URL, else where `runbell serve` last served.
    core.settings.public_url = links_base(settings, core.db)
    sched = Scheduler(core)
    if scheduler:
        sched.start()
    bridge = start_wakeups(core.db, settings.listen_database_url)
    the_worker = Worker(core, build_channels(core))
    if metrics_port is not None:
        from prometheus_client import start_http_server

        from runbell import metrics

        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.REGISTRY)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await the_worker.run(stop)

    try:
        asyncio.run(main())
    finally:
        if bridge:
            bridge.stop()
        sched.stop()
        core.db.dispose()
