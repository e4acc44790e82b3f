"""Real-time guardrail (SPEC section 10): a streaming Task 3 detector watching live conversations.

* in process: :class:`Monitor` (``fit``/``save``/``load``/``session``), :class:`Session`
  (``observe(speaker, text) -> Verdict``, ``state()``), :class:`Verdict`;
* as an OpenAI-compatible proxy: ``python -m dialfork_metrics.guard serve --upstream URL
  --monitor PATH --db PATH`` (:func:`dialfork_metrics.guard.proxy.create_app`);
* ``python -m dialfork_metrics.guard fit|replay|fake-upstream``; :class:`ServerProcess` starts a
  server as a child process (tests, benchmarks, the docs) and :func:`play` plays recorded
  dialogues' user side through a proxy.

See ``docs/guard.md``. Names resolve lazily (numpy loads only when used).
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Monitor": "monitor",
    "MonitorFileError": "monitor",
    "Session": "monitor",
    "Verdict": "monitor",
    "ServerProcess": "loadgen",
    "play": "loadgen",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
