"""The fixtures every real-client test shares: one `runbell serve` per module, and per test
a :class:`~tests.realclients.harness.Session` around a fresh scripted model (its tmux pane
closed afterwards). A module or a test changes the script through ``model_options``
(keyword arguments of :class:`~tests.realclients.model.ScriptedModel`), e.g.
``@pytest.mark.parametrize("model_options", [{"subagent": True}])``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realclients.harness import Runbell, Session, runbell_serve
from tests.realclients.model import ScriptedModel


@pytest.fixture(scope="module")
def runbell(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[Runbell]:
    with runbell_serve(tmp_path_factory.mktemp("runbell"), sqlite_template) as server:
        yield server


@pytest.fixture
def model_options() -> dict[str, Any]:
    return {}


@pytest.fixture
def session(tmp_path: Path, runbell: Runbell, model_options: dict[str, Any]) -> Iterator[Session]:
    with ScriptedModel(**model_options) as model:
        s = Session(tmp_path, runbell, model)
        try:
            yield s
        finally:
            if s.tmux is not None:
                s.tmux.close()
