"""Entry point of ``python -m generation`` (see :mod:`generation.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
