"""The HTTP API face: it parses, authenticates, calls one flow and renders the answer."""

from __future__ import annotations

from runbell.api.app import install

__all__ = ["install"]
