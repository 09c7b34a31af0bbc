"""Runbell: trustworthy attention for background AI-agent work."""

__version__ = "0.1.0"
