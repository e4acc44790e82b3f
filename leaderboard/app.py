"""The Hub Space: upload, validate, score, store, refresh, over the same functions as the CLI.

Gradio is an optional extra (``pip install 'dialfork[leaderboard]'``) imported only by
:meth:`LeaderboardApp.build`; the handlers are plain methods returning plain values, so they
are tested without Gradio. Two ways to run it:

* on a Hugging Face Space (``hf_spaces/leaderboard/``: ``hf_oauth: true``): the submitter is the
  account logged in through the *Sign in with Hugging Face* button (OAuth); nobody can submit
  under another name. Configure with ``DIALFORK_BLIND_DIR`` or ``DIALFORK_BLIND_REPO``,
  ``DIALFORK_GOLD_DIR`` or ``DIALFORK_GOLD_REPO`` (a private dataset, downloaded at start-up with
  the ``HF_TOKEN`` secret), and ``DIALFORK_RESULTS_REPO`` (+ ``HF_TOKEN``) or ``DIALFORK_RESULTS_DIR``;
* locally, offline::

      python -m leaderboard.app --blind HUB_LAYOUT --gold GOLD_DIR --results STORE_DIR --no-login

  ``--no-login`` builds no login button and needs no OAuth: the form gets a *Submitter* field.

The maintainers' path for scoring a file by hand is the CLI, ``python -m leaderboard score ...
--submitter NAME``.
"""

# no ``from __future__ import annotations`` here: Gradio reads the ``gr.OAuthProfile`` annotation
# of the submit callback at run time to inject the logged-in user.
import argparse
import html
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .render import about_html, render_html
from .store import HubStore, LocalStore, RateLimitError, ResultExistsError, ResultStore
from .submissions import evaluate, submit
from .validate import DEFAULT_MAX_BYTES, REGIMES, BlindSet, SubmissionError, validate_submission

logger = logging.getLogger(__name__)

#: How many errors the Space lists (the JSON report beside it holds the first 100 and the count).
ERRORS_SHOWN = 50
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~&])")


def md_escape(text: str) -> str:
    """``text`` shown literally inside Markdown (every Markdown and HTML special character escaped):
    ids, method names and messages that quote a submitter's data cannot format or link anything.

    Args:
        text: Any value; it is converted with ``str``.

    Returns:
        The text with a backslash before each special character and newlines replaced by spaces.
    """
    return _MD_SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")


def metadata_from_form(
    method: str,
    regime: str | None,
    used_conformant_train: bool,
    model_name: str | None,
    model_size: str | None,
    code_url: str | None,
    open_source: bool,
    contact: str,
    description: str | None = None,
    track: str = "detector",
) -> dict[str, Any]:
    """The metadata object from the Space's form fields (empty strings become null / absent).

    Args:
        method: The method's name (stripped).
        regime: The detector's regime; stored only on the detector track.
        used_conformant_train: Whether the method used the conformant training dialogues.
        model_name: The model's name, or empty.
        model_size: The model's size, or empty.
        code_url: A link to the code, or empty.
        open_source: Whether the method is open source.
        contact: The submitter's contact (stripped).
        description: A free-text description, or empty (then absent from the result).
        track: ``"detector"`` (default) or ``"metric"``.

    Returns:
        The metadata dict: ``track``, ``method``, ``used_conformant_train``, ``model_name``,
        ``model_size``, ``code_url`` (None when empty), ``open_source``, ``contact``, plus
        ``regime`` on the detector track and ``description`` when given.
    """

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


def _errors_markdown(report_dict: Mapping[str, Any], limit: int = ERRORS_SHOWN) -> str:
    errs = report_dict["errors"]
    total = report_dict.get("n_errors", len(errs))
    lines = [f"**{total:,} error(s)**; nothing was scored or stored:", ""]
    for e in errs[:limit]:
        where = f"line {e['line']}: " if "line" in e else ""
        lines.append(f"- {md_escape(where + e['message'])}")
    if total > min(limit, len(errs)):
        lines.append(
            f"- ... and {total - min(limit, len(errs)):,} more (the report lists the first {len(errs)})"
        )
    return "\n".join(lines)


@dataclass
class LeaderboardApp:
    """State of the Space: where the blind set, the gold and the results live.

    ``require_login``: the submitter is the OAuth user (a Space); False: the submitter comes
    from the form's *Submitter* field (local use, ``--no-login``).

    Attributes:
        blind_dir: The Hub layout holding the blind sets (read once, on first use).
        gold_dir: The gold folder (read by the scorer; of it, only the audit report's verdict is
            shown).
        store: Where results are stored (:class:`LocalStore` or :class:`HubStore`).
        cache_dir: Local mirror of a :class:`HubStore`'s results, synced before rendering;
            None reads the store directly.
        max_bytes: Size cap of an uploaded submission, in bytes.
        require_login: The submitter is the logged-in Hugging Face user (a Space); False takes
            it from the form.
    """

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
        """The blind set of ``blind_dir``, read on first use (:meth:`BlindSet.from_dir`)."""
        if self._blind is None:
            self._blind = BlindSet.from_dir(self.blind_dir)
        return self._blind

    # ------------------------------------------------------------------ handlers
    def handle_validate(
        self, file_path: str | None, metadata: Mapping[str, Any] | None, track: str = "detector"
    ) -> tuple[str, dict[str, Any]]:
        """(markdown status, JSON report) for an uploaded file; never touches the gold.

        Args:
            file_path: The uploaded file's path; None or empty asks for an upload.
            metadata: The form's metadata object (None: empty, so its problems are reported).
            track: ``"detector"`` or ``"metric"``.

        Returns:
            ``(status, report)``: a Markdown line (valid, with counts, or the errors) and the
            :meth:`ValidationReport.to_dict` with the file's base name.
        """
        if not file_path:
            return "Upload a submission file first.", {"ok": False, "errors": []}
        rep = validate_submission(
            file_path, track, self.blind, metadata=dict(metadata or {}), max_bytes=self.max_bytes
        )
        d = rep.to_dict()
        d["file"] = Path(file_path).name
        if rep.ok:
            s = rep.summary
            extra = (
                f", {s['flagged']:,} flagged ({100 * s['share_flagged']:.1f}%)" if track == "detector" else ""
            )
            return f"**Valid** {track} submission: {s['lines']:,} lines{extra}.", d
        return _errors_markdown(d), d

    def _submitter(self, profile: Any, submitter: str | None) -> tuple[str | None, str | None]:
        """(submitter id, refusal message): the OAuth user on a Space, the form field locally."""
        if self.require_login:
            who = _username(profile)
            return (who, None) if who else (None, "Log in with your Hugging Face account to submit.")
        who = submitter if submitter else _username(profile)
        return (who, None) if who else (None, "Enter a submitter name (letters, digits, '.', '_' or '-').")

    def handle_submit(
        self,
        file_path: str | None,
        metadata: Mapping[str, Any] | None,
        track: str = "detector",
        profile: Any = None,
        submitter: str | None = None,
    ) -> tuple[str, dict[str, Any]]:
        """Validate, score and store; returns (markdown status, public result or report).

        The submitter is the logged-in user when ``require_login`` (any ``submitter`` argument
        is ignored), else ``submitter`` (the form's field).

        Args:
            file_path: The uploaded file's path; None or empty asks for an upload.
            metadata: The form's metadata object.
            track: ``"detector"`` or ``"metric"``.
            profile: The Gradio OAuth profile of the logged-in user, or None.
            submitter: The form's submitter field (used only without ``require_login``).

        Returns:
            ``(status, payload)``: a Markdown message (stored with its key and public score, the
            validation errors, a refusal for the rate limit or an existing result, or a request
            to log in) and the public result, the validation report, or ``{"ok": False, ...}``.
        """
        if not file_path:
            return "Upload a submission file first.", {"ok": False}
        who, refusal = self._submitter(profile, submitter)
        if refusal:
            return refusal, {"ok": False}
        try:
            st = submit(
                file_path,
                track=track,
                gold=self.gold_dir,
                blind=self.blind,
                store=self.store,
                submitter=who,
                metadata=dict(metadata or {}),
                max_bytes=self.max_bytes,
            )
        except SubmissionError as e:
            d = e.report.to_dict()
            d["file"] = Path(file_path).name
            return _errors_markdown(d), d
        except (RateLimitError, ResultExistsError) as e:
            return f"**Refused**: {md_escape(str(e))}", {"ok": False, "refused": str(e)}
        pub = st.result["scores"]["public"] or {}
        main = pub.get("score") if track == "detector" else pub.get("tau")
        label = "Score" if track == "detector" else "Avg. tau"
        shown = "n/a" if main is None else f"{main:.2f}" if track == "detector" else f"{main:.3f}"
        msg = (
            f"**Stored** as `{st.key}`. Public {label}: **{shown}**. "
            "The private score is withheld until the maintainers reveal it."
        )
        return msg, st.result

    def handle_dry_run(
        self, file_path: str | None, metadata: Mapping[str, Any] | None, track: str = "detector"
    ) -> tuple[str, dict[str, Any]]:
        """Validate and score without storing (public scores only).

        Args:
            file_path: The uploaded file's path; None or empty asks for an upload.
            metadata: The form's metadata object.
            track: ``"detector"`` or ``"metric"``.

        Returns:
            ``(status, payload)``: a Markdown message and either ``{"scores", "submission"}`` of
            the public result or the validation report.
        """
        if not file_path:
            return "Upload a submission file first.", {"ok": False}
        try:
            ev = evaluate(
                file_path,
                track=track,
                gold=self.gold_dir,
                blind=self.blind,
                metadata=dict(metadata or {}),
                max_bytes=self.max_bytes,
            )
        except SubmissionError as e:
            d = e.report.to_dict()
            return _errors_markdown(d), d
        return "Scored (not stored).", {"scores": ev.public["scores"], "submission": ev.public["submission"]}

    def results(self) -> list[dict[str, Any]]:
        """Every public result of the store (synced into ``cache_dir`` first for a Hub store).

        Returns:
            The result objects.
        """
        if isinstance(self.store, HubStore) and self.cache_dir:
            self.store.sync(self.cache_dir)
            from .store import load_results

            return load_results([Path(self.cache_dir) / "results"])
        return self.store.results()

    def audit_report(self) -> dict[str, Any] | None:
        """The release's audit report (``audit_report.json`` of the gold folder), if the export wrote one.

        Returns:
            The report as JSON, or None (no report, or one that is not a JSON object).
        """
        import json

        from dialfork_dataset.hub import AUDIT_FILE

        path = Path(self.gold_dir) / AUDIT_FILE
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return obj if isinstance(obj, dict) else None

    def handle_refresh(self, embedded: bool = False) -> str:
        """The leaderboard page (HTML string, self-contained).

        Args:
            embedded: The page as the Space's Leaderboard tab shows it: without the page title and
                the About tab, which the Space has already (:func:`render_html`).

        Returns:
            :func:`render_html` of :meth:`results` (private scores withheld), with the release
            audit's verdict above the tables when the gold folder holds its report.
        """
        return render_html(self.results(), audit=self.audit_report(), embedded=embedded)

    def page_iframe(self) -> str:
        """The leaderboard page inside a sandboxed ``<iframe srcdoc>`` (scripts allowed, no
        same-origin access), as the Space's HTML component shows it.

        Returns:
            The iframe element as an HTML string (the page escaped into ``srcdoc``).
        """
        page = self.handle_refresh(embedded=True)  # the Space has the title and an About tab of its own
        return (
            f'<iframe title="DialFork leaderboard" sandbox="allow-scripts allow-popups allow-popups-to-escape-sandbox" style="width:100%;height:900px;border:0" '
            f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
        )

    # ------------------------------------------------------------------ UI
    def build(self):
        """The Gradio Blocks app (needs the optional ``gradio`` dependency).

        With ``require_login`` a *Sign in with Hugging Face* button and an OAuth-injected
        submit callback; without it no login button, no OAuth and a *Submitter* field.

        Returns:
            The ``gradio.Blocks`` app (call ``.launch()`` on it).

        Raises:
            ImportError: gradio is not installed.
        """
        try:
            import gradio as gr
        except ImportError:
            raise ImportError(
                "the leaderboard Space needs gradio: pip install 'dialfork[leaderboard]'"
            ) from None

        def safe(fn):
            def run(*args):
                try:
                    return fn(*args)
                except Exception:  # never a traceback (nor gold details) in the page; the log has it
                    logger.exception("leaderboard handler failed")
                    return "**Internal error**; nothing was stored. The maintainers have the log.", {
                        "ok": False
                    }

            return run

        with gr.Blocks(title="DialFork leaderboard") as demo:
            gr.Markdown(
                "# DialFork leaderboard\nProcedural hallucination in conversational agents: submit detector "
                "predictions (Task 3) or distances (Task 2) for the blind test set."
            )
            with gr.Tab("Leaderboard"):
                page = gr.HTML(self.page_iframe())
                gr.Button("Refresh", elem_id="refresh").click(self.page_iframe, outputs=page)
            with gr.Tab("Submit"):
                if self.require_login:
                    gr.LoginButton()
                    submitter_box = None
                else:
                    submitter_box = gr.Textbox(
                        label="Submitter (your account or team id)", elem_id="submitter"
                    )
                track = gr.Radio(["detector", "metric"], value="detector", label="Track", elem_id="track")
                upload = gr.File(
                    label="Submission (.jsonl)", type="filepath", file_types=[".jsonl"], elem_id="upload"
                )
                with gr.Row():
                    method = gr.Textbox(label="Method name", elem_id="method")
                    regime = gr.Dropdown(list(REGIMES), value="streaming", label="Regime (detector track)")
                    used_train = gr.Checkbox(label="Used the conformant train split", value=True)
                with gr.Row():
                    model_name = gr.Textbox(label="Model name (optional)", elem_id="model-name")
                    model_size = gr.Textbox(label="Model size, e.g. 31B (optional)", elem_id="model-size")
                    code_url = gr.Textbox(label="Code URL (optional)", elem_id="code-url")
                    open_source = gr.Checkbox(label="Open source", value=True)
                contact = gr.Textbox(label="Contact e-mail (kept private)", elem_id="contact")
                description = gr.Textbox(label="Description (optional)", lines=2)
                with gr.Row():
                    validate_btn = gr.Button("Validate", elem_id="validate")
                    submit_btn = gr.Button("Submit", variant="primary", elem_id="submit")
                status = gr.Markdown(elem_id="status")
                report = gr.JSON(label="Report")
                form = [
                    method,
                    regime,
                    used_train,
                    model_name,
                    model_size,
                    code_url,
                    open_source,
                    contact,
                    description,
                    track,
                ]

                def metadata(*fields):
                    return metadata_from_form(*fields)

                @safe
                def do_validate(path, *fields):
                    return self.handle_validate(path, metadata(*fields), fields[-1])

                validate_btn.click(do_validate, inputs=[upload, *form], outputs=[status, report])
                if self.require_login:

                    @safe
                    def _submit_oauth(path, *fields_and_profile):
                        *fields, profile = fields_and_profile
                        return self.handle_submit(path, metadata(*fields), fields[-1], profile=profile)

                    # Gradio injects the logged-in user into a parameter annotated gr.OAuthProfile
                    def do_submit(
                        path,
                        method,
                        regime,
                        used_train,
                        model_name,
                        model_size,
                        code_url,
                        open_source,
                        contact,
                        description,
                        track,
                        profile: gr.OAuthProfile | None,
                    ):
                        return _submit_oauth(
                            path,
                            method,
                            regime,
                            used_train,
                            model_name,
                            model_size,
                            code_url,
                            open_source,
                            contact,
                            description,
                            track,
                            profile,
                        )

                    inputs = [upload, *form]
                else:

                    @safe
                    def do_submit(path, *fields_and_submitter):
                        *fields, who = fields_and_submitter
                        return self.handle_submit(path, metadata(*fields), fields[-1], submitter=who or None)

                    inputs = [upload, *form, submitter_box]
                submit_btn.click(
                    do_submit, inputs=inputs, outputs=[status, report], concurrency_limit=1
                ).then(self.page_iframe, outputs=page)
            with gr.Tab("About"):
                gr.HTML(about_html())
        return demo


def _data_dir(env: Mapping[str, str], dir_key: str, repo_key: str) -> str | None:
    """A folder from ``dir_key``, or a snapshot of the dataset repo ``repo_key`` (private repos
    with ``HF_TOKEN``), downloaded once at start-up."""
    if env.get(dir_key):
        return env[dir_key]
    if env.get(repo_key):
        from huggingface_hub import snapshot_download

        return snapshot_download(env[repo_key], repo_type="dataset", token=env.get("HF_TOKEN"))
    return None


def app_from_env(env: Mapping[str, str] | None = None) -> LeaderboardApp:
    """The leaderboard app configured from environment variables.

    ``DIALFORK_BLIND_DIR`` (a Hub layout folder) or ``DIALFORK_BLIND_REPO`` (a dataset repo,
    downloaded once), and ``DIALFORK_GOLD_DIR`` or ``DIALFORK_GOLD_REPO`` (with ``HF_TOKEN`` for a
    private repo) give the data; ``DIALFORK_MAX_PER_DAY`` the results per submitter per UTC day
    (default 5). With ``DIALFORK_RESULTS_REPO`` the results go to that Hub repo (private twins to
    ``DIALFORK_PRIVATE_REPO``, local cache ``DIALFORK_RESULTS_CACHE``, default
    ``results_cache``); else to the local folder ``DIALFORK_RESULTS_DIR`` (default
    ``leaderboard_results``).

    Args:
        env: The variables to read; None (default) reads ``os.environ``.

    Returns:
        A :class:`LeaderboardApp` over that data and result store.

    Raises:
        ValueError: Neither a blind folder nor a blind repo, or neither a gold folder nor a gold
            repo, is set.
    """
    env = os.environ if env is None else env
    blind = _data_dir(env, "DIALFORK_BLIND_DIR", "DIALFORK_BLIND_REPO")
    gold = _data_dir(env, "DIALFORK_GOLD_DIR", "DIALFORK_GOLD_REPO")
    if not blind or not gold:
        raise ValueError(
            "set DIALFORK_BLIND_DIR (Hub layout with data/blind) or DIALFORK_BLIND_REPO, and "
            "DIALFORK_GOLD_DIR (gold folder) or DIALFORK_GOLD_REPO (a private dataset repo)"
        )
    per_day = int(env.get("DIALFORK_MAX_PER_DAY", "5"))
    if env.get("DIALFORK_RESULTS_REPO"):
        store: ResultStore = HubStore(
            env["DIALFORK_RESULTS_REPO"],
            private_repo_id=env.get("DIALFORK_PRIVATE_REPO"),
            token=env.get("HF_TOKEN"),
            max_per_day=per_day,
            create=True,
        )
        cache = env.get("DIALFORK_RESULTS_CACHE", "results_cache")
    else:
        store = LocalStore(env.get("DIALFORK_RESULTS_DIR", "leaderboard_results"), max_per_day=per_day)
        cache = None
    return LeaderboardApp(blind_dir=blind, gold_dir=gold, store=store, cache_dir=cache)


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m leaderboard.app``.

    Returns:
        A parser with ``--blind``, ``--gold``, ``--results``, ``--no-login``, ``--host``,
        ``--port`` and ``--max-per-day``.
    """
    ap = argparse.ArgumentParser(
        prog="python -m leaderboard.app", description="Run the leaderboard Space (locally: add --no-login)."
    )
    ap.add_argument("--blind", help="Hub layout folder (data/blind); default $DIALFORK_BLIND_DIR")
    ap.add_argument("--gold", help="gold folder; default $DIALFORK_GOLD_DIR")
    ap.add_argument("--results", help="local results store; default $DIALFORK_RESULTS_DIR")
    ap.add_argument(
        "--no-login",
        action="store_true",
        help="no Hugging Face login (no OAuth): the form asks for the submitter (local use)",
    )
    ap.add_argument(
        "--host", default=None, help="address to bind (default: Gradio's, 127.0.0.1 or $GRADIO_SERVER_NAME)"
    )
    ap.add_argument(
        "--port", type=int, default=None, help="port (default: Gradio's, 7860 or $GRADIO_SERVER_PORT)"
    )
    ap.add_argument("--max-per-day", type=int, default=None, help="rate limit per submitter per UTC day")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the leaderboard Space (Gradio) until it is stopped.

    The options override the matching environment variables of :func:`app_from_env`. Errors in
    the data folders or a missing ``gradio`` are printed to stderr instead of raised.

    Args:
        argv: The arguments; None (default) reads ``sys.argv``.

    Returns:
        0 after the server stops; 2 when the blind or gold folder is unusable, ``gradio`` is
        missing, or a login is asked for outside a Space without an HF token.
    """
    a = build_parser().parse_args(argv)
    env = dict(os.environ)
    for k, v in (
        ("DIALFORK_BLIND_DIR", a.blind),
        ("DIALFORK_GOLD_DIR", a.gold),
        ("DIALFORK_RESULTS_DIR", a.results),
        ("DIALFORK_MAX_PER_DAY", None if a.max_per_day is None else str(a.max_per_day)),
    ):
        if v:
            env[k] = v
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        from dialfork_dataset.hub import resolve_data

        for option, var, kind in (
            ("--blind", "DIALFORK_BLIND_DIR", "layout"),
            ("--gold", "DIALFORK_GOLD_DIR", "gold"),
        ):
            if env.get(var):  # a mistyped folder, given or from the environment: "no such folder", at once
                resolve_data(env[var], accept=(kind,), option=option if getattr(a, option[2:]) else f"${var}")
        app = app_from_env(env)
        app.blind  # noqa: B018 - fail now, with a clear message, if --blind is not a Hub layout
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    app.require_login = not a.no_login
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no call home: the app runs offline
    try:
        demo = app.build()
    except (ImportError, ValueError) as e:  # no gradio; or a login outside a Space without an HF token
        hint = "" if a.no_login else " (outside a Hugging Face Space, run with --no-login)"
        print(f"error: {e}{hint}", file=sys.stderr)
        return 2
    demo.queue(default_concurrency_limit=4)
    demo.launch(
        server_name=a.host, server_port=a.port, max_file_size=app.max_bytes, ssr_mode=False, show_error=False
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

__all__ = ["LeaderboardApp", "app_from_env", "main", "md_escape", "metadata_from_form"]
