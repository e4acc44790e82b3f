"""Device placement of backends under ``accelerate launch`` (a :class:`~generation.backends.BackendSpec`'s
``placement``). Imports nothing heavy: :func:`generation.distributed.backend_options_for_process` loads
it by its registry string.
"""

from __future__ import annotations

from typing import Any


def place_on_process_device(options: dict[str, Any], state: Any) -> dict[str, Any]:
    """Device placement of a backend that holds one model copy per process (the ``transformers``
    backend's :attr:`~generation.backends.BackendSpec.placement`): without a ``device`` (or with
    ``"auto"``) under several processes, ``device`` becomes the process's device.

    Args:
        options: the backend's constructor options (a copy; returned changed).
        state: this process's ``PartialState`` (``num_processes``, ``device``).

    Returns:
        ``options``, with ``device`` set where it applies.

    Raises:
        ValueError: ``device_map`` is given under several processes.
    """
    if options.get("device") in (None, "auto") and state.num_processes > 1:
        if options.get("device_map") is not None:
            raise ValueError(
                "device_map cannot be combined with several processes (each process holds one model copy on its "
                "own device); launch one process per model copy, or one process with device_map='auto'"
            )
        options["device"] = str(state.device)
    return options


__all__ = ["place_on_process_device"]
