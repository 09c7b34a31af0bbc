"""Fixtures the channel tests share (the peers themselves: ``tests/peers.py``,
``push_receiver.py``, ``smtp_peer.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.channels.smtp_peer import EphemeralController, Recorder


@pytest.fixture
def start_smtp() -> Iterator[Callable[..., tuple[Recorder, int]]]:
    """``start(recorder=None, **controller_kwargs)`` starts an SMTP peer (TLS, AUTH as the
    keyword arguments say) and returns its recorder and port; all stop when idle."""
    controllers: list[EphemeralController] = []

    def start(recorder: Recorder | None = None, **kwargs: Any) -> tuple[Recorder, int]:
        recorder = recorder or Recorder()
        controller = EphemeralController(recorder, hostname="127.0.0.1", port=0, **kwargs)
        controller.start()
        controllers.append(controller)
        return recorder, controller.port

    yield start
    for controller in controllers:
        controller.stop_when_idle()
