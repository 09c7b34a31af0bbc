"""Runbell: trustworthy attention for background AI-agent work.

Importing ``runbell`` stays light (the ``runbell`` command starts in well under 150 ms of
CPU): structlog is not imported here. Its safe defaults (plain tracebacks, never frame
locals; :func:`runbell.logging.ensure_safe_defaults`) are applied the moment anything
imports structlog, or now if something already has.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~20 ms of a start's CPU
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Any

__version__ = "0.1.0"


def _safe_defaults() -> None:
    from runbell.logging import ensure_safe_defaults

    ensure_safe_defaults()


class _AfterStructlog:
    """Runs :func:`_safe_defaults` right after ``structlog`` is first imported, before any
    logger of ours can log; then steps out of the import system. (A meta path finder is
    anything with ``find_spec``; ``importlib.abc`` alone would cost 40 ms to import.)"""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "structlog":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_configure(module: Any) -> None:
            exec_module(module)
            _safe_defaults()

        loader.exec_module = exec_then_configure  # type: ignore[method-assign]
        return spec


if "structlog" in sys.modules:
    _safe_defaults()
elif not any(isinstance(f, _AfterStructlog) for f in sys.meta_path):
    sys.meta_path.insert(0, _AfterStructlog())
