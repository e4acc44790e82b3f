"""Agent audit (SPEC 10): how well a user's own agent, behind an OpenAI-compatible endpoint, follows
its workflows, measured with DialFork's metrics and detectors (docs/audit.md).

``audit_agent(...) -> AuditReport`` (``to_markdown()``, ``to_html()``, ``to_json()``); CLI
``python -m dialfork_metrics.audit``; fake agents for tests and the demo in
:mod:`dialfork_metrics.audit.fakes`. Names resolve lazily.
"""

from __future__ import annotations

from dialfork_dataset.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "audit_agent": "core",
    "AuditError": "store",
    "AuditReport": "report",
    "load_reference": "report",
    "step_coverage": ".task3.workflow.coverage",
    "StepMatcher": "user",
    "TemplateUser": "user",
    "serve_fake_agent": "fakes",
    "AgentPolicy": "fakes",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
