"""``python -m dialfork_metrics.bench``: see :func:`dialfork_metrics.bench.cli.main`."""

import sys

from .cli import main

if __name__ == "__main__":
    code = main()
    from ..sharded import exit_worker, is_worker_process

    if is_worker_process():  # a launched worker is done once the sharded encoding is: leave
        exit_worker(code or 0)  # without the gloo teardown that can abort it (see exit_worker)
    sys.exit(code)
