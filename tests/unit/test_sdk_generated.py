"""The SDK has one implementation: ``client/_sync.py`` is generated from ``_async.py``.

Editing ``_sync.py`` by hand, or ``_async.py`` without ``make sdk``, fails here."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sync_client_is_what_the_async_one_generates() -> None:
    script = unasync()
    assert script.TARGET.read_text() == script.generate(), (
        "src/runbell/client/_sync.py is not generated from _async.py: run `make sdk`"
    )


def test_the_generated_client_blocks_and_names_its_own_types() -> None:
    made = unasync().generate()
    assert not re.search(r"\b(async|await)\b(?! with``)", made.split('"""', 2)[2])
    for name in ("class Client:", "class RunContext:", "def close(self)", "time.sleep("):
        assert name in made
    for leftover in ("AsyncClient", "AsyncRunContext", "aclose", "asyncio", "Awaitable"):
        assert leftover not in made
