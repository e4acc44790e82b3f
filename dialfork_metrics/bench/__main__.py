"""``python -m dialfork_metrics.bench``: see :func:`dialfork_metrics.bench.cli.main`."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
