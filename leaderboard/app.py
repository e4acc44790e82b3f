"""The Hub Space: upload, validate, score, store, refresh, over the same functions as the CLI.

Gradio is an optional extra (``pip install dialfork[leaderboard]``) imported only by
:meth:`LeaderboardApp.build`; the handlers are plain methods returning plain values, so they
are tested without Gradio. Run locally with::

    python -m leaderboard.app --blind HUB_LAYOUT --gold GOLD_DIR --results STORE_DIR

or on a Space with the environment variables ``DIALFORK_BLIND_DIR``, ``DIALFORK_GOLD_DIR``
(kept out of the Space repo, e.g. downloaded at start-up from a private dataset with a token
secret) and ``DIALFORK_RESULTS_DIR`` or ``DIALFORK_RESULTS_REPO`` (+ ``HF_TOKEN``).
"""

# no ``from __future__ import annotations`` here: Gradio reads the ``gr.OAuthProfile`` annotation
# of the submit callback at run time to inject the logged-in user.
import argparse
import html
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .render import render_html
from .store import HubStore, LocalStore, RateLimitError, ResultExistsError, ResultStore
from .submit import evaluate, submit
from .validate import DEFAULT_MAX_BYTES, REGIMES, BlindSet, SubmissionError, validate_submission

logger = logging.getLogger(__name__)


def metadata_from_form(method: str, regime: str | None, used_conformant_train: bool, model_name: str | None,
                       model_size: str | None, code_url: str | None, open_source: bool, contact: str,
                       description: str | None = None, track: str = "detector") -> dict[str, Any]:
    """The metadata object from the Space's form fields (empty strings become null / absent)."""

    def opt(s: str | None) -> str | None:
        s = (s or "").strip()
        return s or None

    md: dict[str, Any] = {
        "track": track,
        "method": (method or "").strip(),
        "used_conformant_train": bool(used_conformant_train),
        "model_name": opt(model_name),
        "model_size": opt(model_size),
        "code_url": opt(code_url),
        "open_source": bool(open_source),
        "contact": (contact or "").strip(),
    }
    if track == "detector":
        md["regime"] = regime
    if opt(description):
        md["description"] = opt(description)
    return md


def _username(profile: Any) -> str | None:
    if profile is None:
        return None
    if isinstance(profile, str):
        return profile or None
    return getattr(profile, "username", None) or getattr(profile, "name", None)


def _errors_markdown(report_dict: Mapping[str, Any], limit: int = 50) -> str:
    errs = report_dict["errors"]
    lines = [f"**{len(errs)} error(s)**; nothing was scored or stored:", ""]
    for e in errs[:limit]:
        where = f"line {e['line']}: " if "line" in e else ""
        lines.append(f"- {html.escape(where + e['message'])}")
    if len(errs) > limit:
        lines.append(f"- ... and {len(errs) - limit} more (see the JSON report)")
    return "\n".join(lines)


@dataclass
class LeaderboardApp:
    """State of the Space: where the blind set, the gold and the results live."""

    blind_dir: str
    gold_dir: str
    store: ResultStore
    cache_dir: str | None = None  # local mirror of a HubStore's results (for rendering)
    max_bytes: int = DEFAULT_MAX_BYTES
    require_login: bool = True

    def __post_init__(self):
        self._blind: BlindSet | None = None

    @property
    def blind(self) -> BlindSet:
        if self._blind is None:
            self._blind = BlindSet.from_dir(self.blind_dir)
        return self._blind

    # ------------------------------------------------------------------ handlers
    def handle_validate(self, file_path: str | None, metadata: Mapping[str, Any] | None,
                        track: str = "detector") -> tuple[str, dict[str, Any]]:
        """(markdown status, JSON report) for an uploaded file; never touches the gold."""
        if not file_path:
            return "Upload a submission file first.", {"ok": False, "errors": []}
        rep = validate_submission(file_path, track, self.blind, metadata=dict(metadata or {}),
                                  max_bytes=self.max_bytes)
        d = rep.to_dict()
        d["file"] = Path(file_path).name
        if rep.ok:
            s = rep.summary
            extra = (f", {s['flagged']:,} flagged ({100 * s['share_flagged']:.1f}%)" if track == "detector" else "")
            return f"**Valid** {track} submission: {s['lines']:,} lines{extra}.", d
        return _errors_markdown(d), d

    def handle_submit(self, file_path: str | None, metadata: Mapping[str, Any] | None, track: str = "detector",
                      profile: Any = None) -> tuple[str, dict[str, Any]]:
        """Validate, score and store; returns (markdown status, public result or report)."""
        if not file_path:
            return "Upload a submission file first.", {"ok": False}
        who = _username(profile)
        if who is None and self.require_login:
            return "Log in with your Hugging Face account to submit.", {"ok": False}
        try:
            st = submit(file_path, track=track, gold=self.gold_dir, blind=self.blind, store=self.store,
                        submitter=who, metadata=dict(metadata or {}), max_bytes=self.max_bytes)
        except SubmissionError as e:
            d = e.report.to_dict()
            d["file"] = Path(file_path).name
            return _errors_markdown(d), d
        except (RateLimitError, ResultExistsError) as e:
            return f"**Refused**: {html.escape(str(e))}", {"ok": False, "refused": str(e)}
        pub = st.result["scores"]["public"] or {}
        main = pub.get("score") if track == "detector" else pub.get("tau")
        label = "Score" if track == "detector" else "Avg. tau"
        shown = "n/a" if main is None else f"{main:.2f}" if track == "detector" else f"{main:.3f}"
        msg = (f"**Stored** as `{st.key}`. Public {label}: **{shown}**. "
               "The private score is withheld until the maintainers reveal it.")
        return msg, st.result

    def handle_dry_run(self, file_path: str | None, metadata: Mapping[str, Any] | None,
                       track: str = "detector") -> tuple[str, dict[str, Any]]:
        """Validate and score without storing (public scores only)."""
        if not file_path:
            return "Upload a submission file first.", {"ok": False}
        try:
            ev = evaluate(file_path, track=track, gold=self.gold_dir, blind=self.blind,
                          metadata=dict(metadata or {}), max_bytes=self.max_bytes)
        except SubmissionError as e:
            d = e.report.to_dict()
            return _errors_markdown(d), d
        return "Scored (not stored).", {"scores": ev.public["scores"], "submission": ev.public["submission"]}

    def results(self) -> list[dict[str, Any]]:
        if isinstance(self.store, HubStore) and self.cache_dir:
            self.store.sync(self.cache_dir)
            from .store import load_results

            return load_results([Path(self.cache_dir) / "results"])
        return self.store.results()

    def handle_refresh(self) -> str:
        """The leaderboard page (HTML string, self-contained)."""
        return render_html(self.results())

    def page_iframe(self) -> str:
        page = self.handle_refresh()
        return (f'<iframe title="DialFork leaderboard" sandbox="allow-scripts" style="width:100%;height:900px;border:0" '
                f'srcdoc="{html.escape(page, quote=True)}"></iframe>')

    # ------------------------------------------------------------------ UI
    def build(self):
        """The Gradio Blocks app (needs the optional ``gradio`` dependency)."""
        try:
            import gradio as gr
        except ImportError:
            raise ImportError("the leaderboard Space needs gradio: pip install 'dialfork[leaderboard]'") from None

        with gr.Blocks(title="DialFork leaderboard") as demo:
            gr.Markdown("# DialFork leaderboard\nSubmit detector predictions (Task 3) or distances (Task 2) "
                        "for the blind test set.")
            with gr.Tab("Leaderboard"):
                page = gr.HTML(self.page_iframe())
                gr.Button("Refresh").click(self.page_iframe, outputs=page)
            with gr.Tab("Submit"):
                gr.LoginButton()
                track = gr.Radio(["detector", "metric"], value="detector", label="Track")
                upload = gr.File(label="Submission (.jsonl)", type="filepath", file_types=[".jsonl"])
                with gr.Row():
                    method = gr.Textbox(label="Method name")
                    regime = gr.Dropdown(list(REGIMES), value="streaming", label="Regime (detector track)")
                    used_train = gr.Checkbox(label="Used the conformant train split", value=True)
                with gr.Row():
                    model_name = gr.Textbox(label="Model name (optional)")
                    model_size = gr.Textbox(label="Model size, e.g. 31B (optional)")
                    code_url = gr.Textbox(label="Code URL (optional)")
                    open_source = gr.Checkbox(label="Open source", value=True)
                contact = gr.Textbox(label="Contact e-mail (kept private)")
                description = gr.Textbox(label="Description (optional)", lines=2)
                status = gr.Markdown()
                report = gr.JSON(label="Report")
                form = [method, regime, used_train, model_name, model_size, code_url, open_source, contact,
                        description, track]

                def do_validate(path, method, regime, used_train, model_name, model_size, code_url, open_source,
                                contact, description, track):
                    md = metadata_from_form(method, regime, used_train, model_name, model_size, code_url,
                                            open_source, contact, description, track)
                    return self.handle_validate(path, md, track)

                def do_submit(path, method, regime, used_train, model_name, model_size, code_url, open_source,
                              contact, description, track, profile: gr.OAuthProfile | None):
                    md = metadata_from_form(method, regime, used_train, model_name, model_size, code_url,
                                            open_source, contact, description, track)
                    return self.handle_submit(path, md, track, profile)

                gr.Button("Validate").click(do_validate, inputs=[upload, *form], outputs=[status, report])
                gr.Button("Submit", variant="primary").click(do_submit, inputs=[upload, *form],
                                                              outputs=[status, report], concurrency_limit=1)
        return demo


def app_from_env(env: Mapping[str, str] | None = None) -> LeaderboardApp:
    env = os.environ if env is None else env
    blind, gold = env.get("DIALFORK_BLIND_DIR"), env.get("DIALFORK_GOLD_DIR")
    if not blind or not gold:
        raise ValueError("set DIALFORK_BLIND_DIR (Hub layout with data/blind) and DIALFORK_GOLD_DIR (gold folder)")
    per_day = int(env.get("DIALFORK_MAX_PER_DAY", "5"))
    if env.get("DIALFORK_RESULTS_REPO"):
        store: ResultStore = HubStore(env["DIALFORK_RESULTS_REPO"], private_repo_id=env.get("DIALFORK_PRIVATE_REPO"),
                                      token=env.get("HF_TOKEN"), max_per_day=per_day, create=True)
        cache = env.get("DIALFORK_RESULTS_CACHE", "results_cache")
    else:
        store = LocalStore(env.get("DIALFORK_RESULTS_DIR", "leaderboard_results"), max_per_day=per_day)
        cache = None
    return LeaderboardApp(blind_dir=blind, gold_dir=gold, store=store, cache_dir=cache)


def main(argv: list[str] | None = None) -> None:  # pragma: no cover - starts a server
    ap = argparse.ArgumentParser(prog="python -m leaderboard.app", description="Run the leaderboard Space locally.")
    ap.add_argument("--blind", help="Hub layout folder (data/blind)")
    ap.add_argument("--gold", help="gold folder")
    ap.add_argument("--results", help="local results store")
    ap.add_argument("--no-login", action="store_true", help="take the submitter from the metadata (local use)")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    for k, v in (("DIALFORK_BLIND_DIR", a.blind), ("DIALFORK_GOLD_DIR", a.gold), ("DIALFORK_RESULTS_DIR", a.results)):
        if v:
            env[k] = v
    app = app_from_env(env)
    app.require_login = not a.no_login
    logging.basicConfig(level=logging.INFO)
    app.build().launch()


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["LeaderboardApp", "app_from_env", "metadata_from_form"]
