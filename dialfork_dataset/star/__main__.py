"""``python -m dialfork_dataset.star``: see :mod:`dialfork_dataset.star.cli`."""

from .cli import main

raise SystemExit(main())
