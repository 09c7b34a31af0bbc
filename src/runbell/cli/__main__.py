"""``python -m runbell.cli``: the same command as ``runbell``."""

from runbell.cli import app

app()
