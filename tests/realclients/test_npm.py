"""The installer's rule for a machine without node or npm: skip locally, fail in CI."""

from __future__ import annotations

import pytest

from tests.realclients import npm


@pytest.mark.parametrize("in_ci", [False, True])
def test_missing_npm_skips_locally_and_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, in_ci: bool
) -> None:
    monkeypatch.setattr(npm.shutil, "which", lambda name: None)
    monkeypatch.setattr(npm, "IN_CI", in_ci)
    outcome = pytest.fail.Exception if in_ci else pytest.skip.Exception
    with pytest.raises(outcome, match="node is not on PATH"):
        npm.install(*npm.CLAUDE_CODE)
