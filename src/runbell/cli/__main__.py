"""``python -m runbell.cli``: the same command as ``runbell``."""

import sys

from runbell.cli import main

sys.exit(main(prog="python -m runbell.cli"))
