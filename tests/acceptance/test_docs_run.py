"""Every code block of README.md and docs/**/*.md runs as pasted, twice in a row, against a
live server (issue 16, row 11 and build item 10).

What runs (tests/acceptance/docblocks.py has the markup): every ```python, ```sh,
```bash and ```shell block, file by file (README.md, then docs/ sorted), in file order;
then the whole set once more against the same server, HOME and files, as a reader who
pastes everything a second time. Any error fails the test with the file, line, block text
and its output; every failing block is listed, not only the first.

The reader this simulates has just pasted the first start's ``export`` line:

- server: ``runbell.testing.server()`` (real uvicorn, SQLite, scheduler), tenant
  ``default``, first user ``you@example.com``, as after ``make run``;
- environment: ``RB``, ``RUNTIME``, ``ME``, ``ADMIN`` (the first start's export line);
  ``RUNBELL_URL``/``RUNBELL_KEY``/``RUNBELL_OWNER`` (SDK and CLI); ``RUNBELL_DATABASE_URL``,
  ``RUNBELL_DATA_DIR``, ``RUNBELL_SECRET_KEY`` (the live server's database, so admin
  commands such as ``.venv/bin/runbell user add`` act on it); ``BOB``, the user token of a
  plain member ``bob@example.com`` (api.md's conventions). No other ``RUNBELL_*`` variable,
  a private ``HOME``, and a ``PATH`` without any ``runbell`` on it (the venv is not
  activated: docs call ``.venv/bin/runbell``);
- working directory: a copy of the checkout root made of symlinks to its entries, so
  ``.venv/bin/runbell``, ``tests/fixtures/…`` and ``Makefile`` are there while files a
  block writes (``cat > agent.py``) land in a temporary directory, not in the checkout.

How blocks run:

- ``sh`` (``bash``, ``shell``): ``bash -euo pipefail``. Each block starts a new shell
  unless it is marked ``<!-- docs-test: continue -->``: then it is sourced into the same
  shell as the previous block of the file that runs (skipped blocks are passed over): its
  variables, functions and working directory. Blocks of one file do not otherwise share
  a shell.
- ``python``: a fresh interpreter (the venv's python) per block, same environment; a
  ``continue`` block runs in the previous block's interpreter and ``__main__`` namespace.
- Standard input is /dev/null. Each block is bounded by ``scaled(BLOCK_S)`` seconds; a
  block that needs a second long-running process or a wait for a person must finish by
  itself or carry ``<!-- docs-test: skip: REASON -->``.
- ``curl`` is the real curl behind a thin wrapper first on ``PATH`` that checks each HTTP
  status: any 5xx fails the block, and so does a 4xx unless the docs show that status at
  that place (in the block or in the output block right after it, e.g. ``# 409 …`` or
  ``HTTP/1.1 413``). ``curl -sS`` alone exits 0 on a 409, so without it a second run's
  conflict (a fixed run id) would pass unseen.
- Someone has to answer an approval. The docs tell the reader to open the inbox and press
  Approve, so the test plays that person: while a block that asks runs (``runbell ask``,
  ``.ask(``, ``requires_approval``, ``wait_for_answer``, MCP's ``request_input``, a hook's
  ``permission_request``), a background thread follows the
  owner's feed (``GET /v1/events`` with ``$ME``) and answers each request it sees opened,
  through the API with the owner's token (``approve``; a choice's first option; ``ok``
  for a text), the way the web app does. The examples therefore stay what a reader types,
  with no artificial timeouts, and their happy path (approved → completed) is what runs.
  During other blocks the thread answers nothing, so examples that answer requests
  themselves (api.md 12.4) are not raced.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

import runbell.testing
from tests.acceptance.docblocks import Block, DocsMarkupError, all_blocks, extract
from tests.timeouts import WAIT, scaled

ROOT = Path(__file__).resolve().parents[2]
BLOCK_S = 60.0  # the bound of one block, before scaling (a few CLI starts on a loaded machine)
PASSES = 2
ASKS = re.compile(
    r"\bask\b|\.ask\(|requires_approval|wait_for_answer|request_input|permission_request"
)
STATUS = re.compile(r"(?<![\w.])([45]\d\d)(?![\w.])")

CURL_WRAPPER = textwrap.dedent(
    """\
    #!/usr/bin/env bash
    # docs-test: the real curl, then its HTTP statuses checked (tests/acceptance/test_docs_run.py)
    headers=$(mktemp)
    trap 'rm -f "$headers"' EXIT
    status=0
    "$DOCS_TEST_REAL_CURL" -D "$headers" "$@" || status=$?
    while read -r code; do
      echo "$code curl $*" >> "$DOCS_TEST_CURL_LOG"
      shown=" ${DOCS_TEST_STATUSES:-} "
      if [ "$code" -ge 500 ] || { [ "$code" -ge 400 ] && [[ "$shown" != *" $code "* ]]; }; then
        echo "docs-test: HTTP $code from: curl $*  (the docs do not show a $code here)" >&2
        [ "$status" -eq 0 ] && status=22
      fi
    done < <(grep -aoE '^HTTP/[0-9.]+ [0-9]{3}' "$headers" | awk '{print $2}')
    exit $status
    """
)


@dataclass
class Outcome:
    block: Block
    run: int
    seconds: float = 0.0
    error: str | None = None


@dataclass
class Reader:
    """The person who answers approvals while a block that asks runs (see the module)."""

    srv: runbell.testing.Server
    enabled: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    answered: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def follow(self) -> None:
        headers = {"Authorization": f"Bearer {self.srv.owner_token}"}
        with httpx.Client(base_url=self.srv.url, headers=headers, timeout=WAIT) as http:
            cursor = http.get("/v1/events", params={"after": "latest"}).json()["next_cursor"]
            while not self.stopped.is_set():
                try:
                    page = http.get("/v1/events", params={"after": cursor, "wait": 1}).json()
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))
                    continue
                cursor = page["next_cursor"]
                for event in page["events"]:
                    if event["type"] == "input_request.opened" and self.enabled.is_set():
                        self._answer(http, event["data"]["input_request_id"])

    def _answer(self, http: httpx.Client, request_id: str) -> None:
        try:
            request = http.get(f"/v1/input-requests/{request_id}").json()["input_request"]
            if request["state"] != "pending":
                return
            if request["kind"] == "approval":
                self.srv.answer(request_id, "approve")
            elif request["kind"] == "choice":
                self.srv.answer(request_id, "answer", request["options"][0]["id"])
            else:
                self.srv.answer(request_id, "answer", "ok")
            self.answered.append(request_id)
        except (httpx.HTTPError, KeyError, IndexError) as exc:
            self.errors.append(f"{request_id}: {exc!r}")


class Session:
    """One shell or interpreter that runs a chain of blocks (a block and its continuations)."""

    def __init__(self, lang: str, env: dict[str, str], cwd: Path, work: Path) -> None:
        self.lang, self.work = lang, work
        self.log = (work / f"{lang}-session.log").open("ab")
        if lang == "sh":
            argv = ["bash", "-euo", "pipefail"]
        else:
            argv = [
                str(ROOT / ".venv" / "bin" / "python"),
                str(Path(__file__).with_name("docs_driver.py")),
            ]
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=cwd,
            text=True,
            start_new_session=True,
        )

    def run(self, block: Block, statuses: str, name: str, timeout: float) -> str | None:
        """Run one block; None when it succeeded, else what went wrong (with its output)."""
        out = self.work / f"{name}.out"
        assert self.proc.stdin is not None
        if self.lang == "sh":
            script = self.work / f"{name}.sh"
            script.write_text(block.text)
            command = (
                f"export DOCS_TEST_STATUSES='{statuses}'\n"
                f"source {script} </dev/null >{out} 2>&1\necho ok\n"
            )
        else:
            command = (
                json.dumps(
                    {"path": block.path, "line": block.line, "code": block.text, "out": str(out)}
                )
                + "\n"
            )
        try:
            self.proc.stdin.write(command)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return "the shell or interpreter of the previous block had already exited"
        reply = self._reply(timeout)
        output = out.read_text(errors="replace") if out.exists() else ""
        if reply is None:
            self.close()
            return f"did not finish within {timeout:.0f} s\n--- output ---\n{output}"
        if reply == "":
            code = self.proc.wait(timeout=WAIT)
            return f"exited with status {code}\n--- output ---\n{output}"
        if self.lang == "python":
            answer = json.loads(reply)
            if not answer["ok"]:
                return f"{answer['error']}\n--- output ---\n{output}"
        return None

    def _reply(self, timeout: float) -> str | None:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        return self.proc.stdout.readline()

    def close(self) -> None:
        with suppress(OSError):
            if self.proc.stdin:
                self.proc.stdin.close()
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=scaled(5))
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # background jobs a block left behind
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=WAIT)
        if self.proc.stdout:
            self.proc.stdout.close()
        self.log.close()


def shown_statuses(block: Block, lines: list[str]) -> str:
    """The 4xx statuses the docs show for this block: in it, or in the output block right
    after it (only blank lines between)."""
    text = block.text
    end = block.line + block.text.count("\n")  # the closing fence (0-based index)
    i = end + 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("```"):
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith("```"):
            j += 1
        text += "\n".join(lines[i + 1 : j])
    return " ".join(sorted({code for code in STATUS.findall(text) if code.startswith("4")}))


def shadow_checkout(into: Path) -> Path:
    """The checkout root as symlinks, so blocks find everything and write nothing into it."""
    into.mkdir()
    for entry in ROOT.iterdir():
        (into / entry.name).symlink_to(entry)
    return into


def reader_env(
    srv: runbell.testing.Server, admin_bob: str, home: Path, bin_dir: Path, work: Path
) -> dict[str, str]:
    real_curl = shutil.which("curl")
    assert real_curl, "the docs use curl; it is not installed"
    path = [bin_dir] + [
        entry
        for entry in os.environ.get("PATH", "").split(os.pathsep)
        if entry and not (Path(entry) / "runbell").exists()
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RUNBELL_", "VIRTUAL_ENV", "PYTHON", "XDG_"))
    }
    env.update(srv.env())
    env.update(
        {
            "PATH": os.pathsep.join(str(p) for p in path),
            "HOME": str(home),
            "RB": srv.url,
            "RUNTIME": srv.runtime_key,
            "ME": srv.owner_token,
            "ADMIN": srv.admin_key,
            "BOB": admin_bob,
            "DOCS_TEST_REAL_CURL": real_curl,
            "DOCS_TEST_CURL_LOG": str(work / "curl.log"),
            "RUNBELL_TEST_TIME_SCALE": os.environ.get("RUNBELL_TEST_TIME_SCALE", "1"),
        }
    )
    return env


@contextmanager
def reader_thread(srv: runbell.testing.Server) -> Iterator[Reader]:
    reader = Reader(srv)
    thread = threading.Thread(target=reader.follow, name="docs-reader", daemon=True)
    thread.start()
    try:
        yield reader
    finally:
        reader.stopped.set()
        thread.join(timeout=WAIT)


def run_all(
    blocks: list[Block], env: dict[str, str], cwd: Path, work: Path, reader: Reader
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    lines_of: dict[str, list[str]] = {}
    for run in range(1, PASSES + 1):
        session: Session | None = None
        broken = False  # the chain's earlier block failed: its continuations cannot run
        for n, block in enumerate(blocks):
            if block.skip is not None:
                continue
            if not block.cont and session is not None:
                session.close()
                session, broken = None, False
            outcome = Outcome(block, run)
            outcomes.append(outcome)
            if block.cont and (broken or session is None):
                outcome.error = "not run: the block it continues failed"
                continue
            if session is None:
                session = Session(block.lang, env, cwd, work)
            lines = lines_of.setdefault(block.path, (ROOT / block.path).read_text().splitlines())
            if ASKS.search(block.text):
                reader.enabled.set()
            started = time.monotonic()
            try:
                outcome.error = session.run(
                    block, shown_statuses(block, lines), f"run{run}-{n:03d}", scaled(BLOCK_S)
                )
            finally:
                outcome.seconds = time.monotonic() - started
                reader.enabled.clear()
            if outcome.error is not None:
                broken = True
        if session is not None:
            session.close()
    return outcomes


def failure_text(outcome: Outcome) -> str:
    block = outcome.block
    return (
        f"{block.where} ({block.lang}, run {outcome.run} of {PASSES}) failed: {outcome.error}\n"
        f"--- block ---\n{block.text}"
    )


def summary(outcomes: list[Outcome], blocks: list[Block]) -> str:
    per_file: dict[str, list[int]] = {}
    for block in blocks:
        counts = per_file.setdefault(block.path, [0, 0])
        counts[1 if block.skip is not None else 0] += 1
    seconds: dict[str, float] = {}
    for o in outcomes:
        seconds[o.block.path] = seconds.get(o.block.path, 0.0) + o.seconds
    lines = [
        f"{path}: {ran} run, {skipped} skipped ({seconds.get(path, 0.0):.1f} s for {PASSES} passes)"
        for path, (ran, skipped) in per_file.items()
    ]
    lines.append(f"all blocks: {sum(seconds.values()):.1f} s")
    lines += [f"  skip {b.where}: {b.skip}" for b in blocks if b.skip is not None]
    slow = sorted(outcomes, key=lambda o: o.seconds, reverse=True)[:8]
    lines += [f"slow: {o.block.where} run {o.run}: {o.seconds:.1f} s" for o in slow]
    return "\n".join(lines)


def test_every_doc_block_runs_as_pasted_twice(tmp_path: Path) -> None:
    runbell_cli = ROOT / ".venv" / "bin" / "runbell"
    assert runbell_cli.exists(), (
        f"{runbell_cli} is missing: the docs call it (run `make test`, which builds the venv)"
    )
    only = os.environ.get("DOCS_TEST_ONLY")  # while fixing docs: a substring of the paths to run
    blocks = [b for b in all_blocks(ROOT) if not only or only in b.path]
    assert blocks, "no runnable blocks found in README.md and docs/"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(CURL_WRAPPER)
    (bin_dir / "curl").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    work = tmp_path / "work"
    work.mkdir()
    cwd = shadow_checkout(tmp_path / "checkout")
    with runbell.testing.server(owner_email="you@example.com", tenant="default") as srv:
        _, bob = runbell.testing.add_user(srv.core, srv.tenant_id, "bob@example.com")
        env = reader_env(srv, bob, home, bin_dir, work)
        with reader_thread(srv) as reader:
            outcomes = run_all(blocks, env, cwd, work, reader)
    report = summary(outcomes, blocks)
    print(report)  # shown with -s or -rA: what ran, what was skipped and why, the slow blocks
    (work / "summary.txt").write_text(report)
    failures = [failure_text(o) for o in outcomes if o.error is not None]
    assert not failures, f"{len(failures)} doc block run(s) failed:\n\n" + "\n\n".join(failures)


# The markup itself: a marker that could silently stop applying is an error.


@pytest.mark.parametrize(
    ("markdown", "message"),
    [
        ("<!-- docs-test: skip -->\n```sh\ntrue\n```\n", "needs a reason"),
        ("<!-- docs-test: skip: -->\n```sh\ntrue\n```\n", "needs a reason"),
        ("<!-- docs-test: skip: why -->\n\n```sh\ntrue\n```\n", "immediately before a fence"),
        ("<!-- docs-test: continue -->\n```sh\ntrue\n```\n", "no block before it"),
        (
            "<!-- docs-test: skip: why -->\n```sh\ntrue\n```\n"
            "<!-- docs-test: continue -->\n```sh\ntrue\n```\n",
            "no block before it",
        ),
        (
            "```sh\ntrue\n```\n<!-- docs-test: continue -->\n```python\npass\n```\n",
            "from a sh block",
        ),
        ("<!-- docs-test: skip: why -->\n```json\n{}\n```\n", "never run"),
        ("<!-- docs-test: later -->\n```sh\ntrue\n```\n", "unknown docs-test marker"),
        ("```sh\ntrue\n", "never closed"),
    ],
)
def test_markers_are_checked(tmp_path: Path, markdown: str, message: str) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(markdown)
    with pytest.raises(DocsMarkupError, match=message):
        extract(doc, tmp_path)


def test_blocks_are_extracted_with_their_markers(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# t\n\n```sh\necho one\n```\n```json\n{}\n```\n"
        "<!-- docs-test: continue -->\n```bash\necho two\n```\n"
        "1. a step\n   ```python\n   print(1)\n   ```\n"
        "<!-- docs-test: skip: needs a public URL -->\n```shell\nmake run\n```\n"
    )
    blocks = extract(doc, tmp_path)
    assert [(b.line, b.lang, b.text, b.skip, b.cont) for b in blocks] == [
        (3, "sh", "echo one\n", None, False),
        (10, "sh", "echo two\n", None, True),
        (14, "python", "print(1)\n", None, False),
        (18, "sh", "make run\n", "needs a public URL", False),
    ]


def test_continue_passes_over_skipped_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```sh\nX=1\n```\n<!-- docs-test: skip: why -->\n```sh\nfalse\n```\n"
        "<!-- docs-test: continue -->\n```sh\necho $X\n```\n"
    )
    assert [(b.skip, b.cont) for b in extract(doc, tmp_path)] == [
        (None, False),
        ("why", False),
        (None, True),
    ]


def test_shown_statuses_come_from_the_block_and_its_output() -> None:
    lines = [
        "```sh",
        "curl -X PUT $RB/v1/runs/x   # 409 when finished",
        "```",
        "",
        "```",
        "HTTP/1.1 413 Too Large",
        "```",
    ]
    block = Block("d.md", 1, "sh", lines[1] + "\n")
    assert shown_statuses(block, lines) == "409 413"
