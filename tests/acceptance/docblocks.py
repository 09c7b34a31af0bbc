"""The runnable code blocks of README.md and docs/**/*.md, in file order.

A fenced block tagged ``python`` is run as Python; ``sh``, ``bash`` or ``shell`` as a
shell script. Every other tag (``json``, ``toml``, ``yaml``, ``text``, none…) is a file
format or output and is never run. Two marker lines, each the line immediately before a
fence, change how a runnable block is run:

- ``<!-- docs-test: skip: REASON -->``: not run. The reason is required (a skip without
  one is an error): it says why a reader's paste cannot run here (a public URL, an
  account elsewhere, a second long-running process…).
- ``<!-- docs-test: continue -->``: runs in the same shell or interpreter as the previous
  block of the same file that runs (skipped blocks in between are passed over; it must
  be of the same language), so it sees that block's variables, functions and working
  directory. Without it every block starts afresh.

A marker anywhere else (not followed by a fence, an unknown directive, on a block that is
never run) is an error too, so a marker can never silently stop applying.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

LANGUAGES = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


class DocsMarkupError(ValueError):
    """A marker that is malformed or does not sit right before a runnable fence."""


@dataclass(frozen=True)
class Block:
    path: str  # relative to the checkout, e.g. "docs/integrations/sdk.md"
    line: int  # 1-based line of the opening fence
    lang: str  # "python" or "sh"
    text: str  # the block's content, its indentation removed
    skip: str | None = None  # the reason, when marked skip
    cont: bool = False  # runs in the previous block's shell / interpreter

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def doc_files(root: Path) -> list[Path]:
    """README.md, then every Markdown file under docs/, sorted by path."""
    files = [root / "README.md"] if (root / "README.md").is_file() else []
    return files + sorted((root / "docs").rglob("*.md"))


def extract(path: Path, root: Path) -> list[Block]:
    """The runnable blocks of one Markdown file, in order, with their markers applied."""
    rel = path.relative_to(root).as_posix()
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: tuple[int, str] | None = None  # (line, body) of a marker awaiting its fence
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            if pending is not None:
                raise DocsMarkupError(
                    f"{rel}:{pending[0]}: a docs-test marker not followed by a fence"
                )
            pending = (i + 1, marker.group("body"))
            i += 1
            continue
        fence = FENCE.match(line)
        if not fence:
            if pending is not None:
                raise DocsMarkupError(
                    f"{rel}:{pending[0]}: a docs-test marker must be the line "
                    "immediately before a fence"
                )
            i += 1
            continue
        indent, mark, info = (
            fence.group("indent"),
            fence.group("fence"),
            fence.group("info").strip(),
        )
        start = i + 1
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(mark[0] * len(mark)) and set(close) == {mark[0]}:
                break
            body.append(
                lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i].lstrip()
            )
            i += 1
        else:
            raise DocsMarkupError(f"{rel}:{start}: a fence that is never closed")
        i += 1  # past the closing fence
        lang = LANGUAGES.get(info.split()[0].lower() if info else "")
        skip, cont = _directive(rel, pending, lang) if pending else (None, False)
        pending = None
        if lang is not None:
            blocks.append(Block(rel, start, lang, "\n".join(body) + "\n", skip, cont))
    if pending is not None:
        raise DocsMarkupError(f"{rel}:{pending[0]}: a docs-test marker at the end of the file")
    _check_continuations(blocks)
    return blocks


def _directive(rel: str, pending: tuple[int, str], lang: str | None) -> tuple[str | None, bool]:
    at, body = pending
    if lang is None:
        raise DocsMarkupError(f"{rel}:{at}: a docs-test marker on a block that is never run")
    if body == "continue":
        return None, True
    if body == "skip" or body.startswith("skip:") or body.startswith("skip "):
        reason = body[4:].lstrip(" :").strip()
        if not reason:
            raise DocsMarkupError(
                f"{rel}:{at}: `docs-test: skip` needs a reason: <!-- docs-test: skip: why -->"
            )
        return reason, False
    raise DocsMarkupError(
        f"{rel}:{at}: unknown docs-test marker {body!r} (skip: REASON, or continue)"
    )


def _check_continuations(blocks: list[Block]) -> None:
    previous: Block | None = None  # the last block that runs
    for block in blocks:
        if block.skip is not None:
            continue
        if not block.cont:
            previous = block
            continue
        if previous is None:
            raise DocsMarkupError(
                f"{block.where}: `continue` with no block before it that runs in this file"
            )
        if previous.lang != block.lang:
            raise DocsMarkupError(
                f"{block.where}: `continue` from a {previous.lang} block to a {block.lang} block"
            )


def all_blocks(root: Path) -> list[Block]:
    """Every runnable block of the docs, file by file, in file order."""
    return [block for path in doc_files(root) for block in extract(path, root)]
