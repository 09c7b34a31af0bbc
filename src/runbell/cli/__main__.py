"""``python -m runbell.cli``: the same command as ``runbell``."""

from runbell.cli import exit_now, main

exit_now(main(prog="python -m runbell.cli"))
