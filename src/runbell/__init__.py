"""Runbell: trustworthy attention for background AI-agent work."""

__version__ = "0.1.0"

from runbell.logging import ensure_safe_defaults as _ensure_safe_defaults

_ensure_safe_defaults()
