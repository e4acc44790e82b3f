"""The annotation web app (FastAPI, server-rendered Jinja2 pages, a little JavaScript).

``create_app(study, star_dir=...)`` returns the ASGI app; ``python -m annotation serve`` runs it
with uvicorn. Annotator pages live under ``/a/<personal link token>/``; the JSON API under
``/api/a/<link>/``; the admin panel under ``/admin`` (password, hashed in the database).
"""

from __future__ import annotations

import csv
import io
import logging
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from .security import LoginThrottle, neutralize_cell
from .store import AnnotationError, Invalid, NotFound, Study, parse_float, parse_int, parse_json_body

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
ADMIN_COOKIE = "annotation_admin"
STEP_HEADER = "X-Annotation-Step"
#: Largest request body accepted (bytes): a step-3 note of 2,000 characters fits many times.
MAX_BODY_BYTES = 64 * 1024
#: Longest admin password checked (characters); longer ones are refused before hashing.
MAX_PASSWORD_CHARS = 1024
#: Password verifications (scrypt) running at once, each in a worker thread, never on the event loop.
VERIFY_THREADS = 1
#: Worker threads doing login-throttle bookkeeping at once (a burst waits as coroutines, not threads).
THROTTLE_THREADS = 2
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # same-origin: the browser still sends Origin/Referer to this app (checked on every POST) and
    # never sends a personal link to another site
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class AdminRequired(Exception):
    pass


def _origin(url: str | None) -> str | None:
    """``scheme://host[:port]`` of a URL (lower case), ``None`` when it has none."""
    if not url:
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if not parts.scheme or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def _limiter(cache: weakref.WeakKeyDictionary, size: int):
    """A capacity limiter of ``size`` threads for the running event loop (one per loop)."""
    import asyncio

    import anyio

    loop = asyncio.get_running_loop()
    lim = cache.get(loop)
    if lim is None:
        lim = cache[loop] = anyio.CapacityLimiter(size)
    return lim


class GuardMiddleware:
    """Pure ASGI middleware (no per-request task group, cheap under a burst): answers a request
    that ``guard(request)`` refuses, and adds :data:`SECURITY_HEADERS` (and ``Cache-Control:
    no-store`` unless set) to every response.

    Args:
        app: The ASGI app it wraps.
        guard: Function of a Starlette ``Request`` returning the ``Response`` that refuses it, or
            None to let it through to ``app``.
    """

    def __init__(self, app, guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import MutableHeaders

        async def send_secured(message):
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if "cache-control" not in headers:
                    headers["Cache-Control"] = "no-store"
                for k, v in SECURITY_HEADERS.items():
                    headers[k] = v
            await send(message)

        refusal = self.guard(Request(scope, receive))
        if refusal is not None:
            await refusal(scope, receive, send_secured)
            return
        await self.app(scope, receive, send_secured)


def create_app(
    study: Study,
    star_dir: str | Path | None = None,
    analysis_dir: str | Path | None = None,
    throttle: LoginThrottle | None = None,
    secure_cookies: bool = False,
    analysis_options: dict[str, Any] | None = None,
    trusted_origins: Sequence[str] = (),
) -> FastAPI:
    """The ASGI app over ``study``: the annotators' pages, the JSON API and the admin panel.

    Args:
        study: The study (database, corpus and settings) the app serves.
        star_dir: The workflow source (a STAR folder, a workflow file, or ``star:PATH`` /
            ``workflow:PATH``) of the workflow panel and flowcharts; None shows no workflow (a
            source that fails to load also shows none, with a warning logged).
        analysis_dir: Where the admin's "recompute analyses" writes its report; None: a folder
            ``analyses`` in the working directory.
        throttle: The admin-login limiter; None: a :class:`LoginThrottle` with default limits
            on the study's database.
        secure_cookies: Mark the admin session cookie ``Secure`` (sent over HTTPS only); set it
            when the app is served over HTTPS.
        analysis_options: Keyword arguments passed to :func:`annotation.report.run_analyses` when
            the admin recomputes the analyses (e.g. ``n_boot``, ``seed``); None: its defaults.
        trusted_origins: Origins (``https://study.example.org``) accepted on POST besides the
            one the request was sent to (needed behind a reverse proxy that changes the scheme
            or host).

    Returns:
        The FastAPI application (no OpenAPI or docs routes); ``app.state.study`` is ``study``.

    Raises:
        ValueError: An entry of ``trusted_origins`` is not of the form ``scheme://host[:port]``.
    """
    app = FastAPI(title="DialFork annotation", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    throttle = throttle or LoginThrottle(study.engine)
    trusted = {o for o in (_origin(t) for t in trusted_origins) if o}
    bad = [t for t in trusted_origins if not _origin(t)]
    if bad:
        raise ValueError(f"trusted origins must look like https://host[:port], got {bad}")
    verify_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    throttle_limiters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    analysis_dir = Path(analysis_dir) if analysis_dir else Path("analyses")
    app.state.study = study

    def workflow(task: str):
        if star_dir is None:
            return None
        from .corpus import task_workflow

        try:
            return task_workflow(str(star_dir), task)
        except Exception as e:  # a broken STAR folder must not block annotation
            logger.warning("workflow of task %r unavailable: %s", task, e)
            return None

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/") or request.url.path.endswith(".json")

    def refuse(request: Request, status: int, message: str) -> Response:
        if wants_json(request) or "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"error": message}, status_code=status)
        return templates.TemplateResponse(
            request, "error.html", {"message": message, "status": status}, status_code=status
        )

    def cross_site(request: Request) -> str | None:
        """Why a POST is refused as cross-site (``None``: it is not). The browser's Origin (or,
        without one, the Referer's origin) must be this app's origin or a trusted one. A
        request with neither comes from a non-browser client (every current browser sends
        Origin on POST), which cannot carry a victim's cookies."""
        own = f"{request.url.scheme}://{request.url.netloc}".lower()
        origin = request.headers.get("origin")
        if origin is not None:
            o = _origin(origin) if origin.strip().lower() != "null" else None
            return None if o is not None and (o == own or o in trusted) else f"Origin {origin[:100]!r}"
        referer = request.headers.get("referer")
        if referer is not None:
            o = _origin(referer)
            return None if o is not None and (o == own or o in trusted) else "Referer from another site"
        return None

    def guard(request: Request) -> Response | None:
        """The refusal of a request before any route sees it (``None``: let it through)."""
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return None
        why = cross_site(request)
        if why is not None:
            logger.warning("refused a cross-site %s %s (%s)", request.method, request.url.path, why)
            return refuse(
                request,
                403,
                f"cross-site request refused ({why} is not this site); reload the page "
                "and submit again from the study's own address",
            )
        if request.headers.get("transfer-encoding", "").lower() == "chunked":
            return refuse(request, 411, "send the request body with a Content-Length")
        try:
            length = int(request.headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            return refuse(request, 413, f"the request body must be at most {MAX_BODY_BYTES} bytes")
        return None

    app.add_middleware(GuardMiddleware, guard=guard)

    @app.exception_handler(AnnotationError)
    async def annotation_error(request: Request, exc: AnnotationError):
        if wants_json(request):
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        return templates.TemplateResponse(
            request, "error.html", {"message": exc.message, "status": exc.status}, status_code=exc.status
        )

    @app.exception_handler(AdminRequired)
    async def admin_required(request: Request, exc: AdminRequired):
        if wants_json(request) or request.method != "GET":
            return JSONResponse(
                {"error": "the admin panel needs the admin password (log in at /admin/login)"},
                status_code=401,
            )
        return RedirectResponse("/admin/login", status_code=303)

    async def read_body(request: Request) -> dict[str, Any]:
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            return parse_json_body(await request.body())
        if ctype.startswith("application/x-www-form-urlencoded") or ctype.startswith("multipart/form-data"):
            form = await request.form()
            return {k: v for k, v in form.items() if not k.startswith("_")}
        raise Invalid("send the answer as JSON (application/json) or as a form")

    # ------------------------------------------------------------------ annotator pages
    def annotator(link: str):
        return study.annotator_by_link(link)

    @app.get("/a/{link}", response_class=HTMLResponse)
    def home(request: Request, link: str):
        a = annotator(link)
        return templates.TemplateResponse(request, "home.html", {"link": link, "ov": study.overview(a)})

    @app.get("/a/{link}/next")
    def next_conversation(link: str):
        a = annotator(link)
        ov = study.overview(a)
        if ov["next"] is None:
            return RedirectResponse(f"/a/{link}", status_code=303)
        if ov["intro_due"]:
            return RedirectResponse(f"/a/{link}/intro/{ov['next']['task']}", status_code=303)
        return RedirectResponse(f"/a/{link}/c/{ov['next']['token']}", status_code=303)

    def check_task(a, task: str) -> None:
        if task not in study.annotator_tasks(a):
            raise NotFound("no such task in your assignments")

    @app.get("/a/{link}/intro/{task}", response_class=HTMLResponse)
    def intro(request: Request, link: str, task: str):
        a = annotator(link)
        check_task(a, task)
        return templates.TemplateResponse(
            request, "intro.html", {"link": link, "task": task, "wf": workflow(task), "ov": study.overview(a)}
        )

    @app.post("/a/{link}/intro/{task}")
    def intro_done(link: str, task: str):
        a = annotator(link)
        check_task(a, task)
        study.mark_intro_seen(a, task)
        return RedirectResponse(f"/a/{link}/next", status_code=303)

    @app.get("/a/{link}/flowchart/{task}")
    def flowchart(link: str, task: str):
        a = annotator(link)
        check_task(a, task)
        wf = workflow(task)
        if wf is None or wf.flowchart is None:
            raise NotFound("no flowchart for this task")
        return FileResponse(
            wf.flowchart, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"}
        )

    @app.get("/a/{link}/c/{token}", response_class=HTMLResponse)
    def conversation(request: Request, link: str, token: str):
        a = annotator(link)
        task = study.task_of(a, token)
        if not study.intro_seen(a, task):
            return RedirectResponse(f"/a/{link}/intro/{task}", status_code=303)
        p = study.step_payload(a, token)
        if p["step"] == "done":
            return RedirectResponse(f"/a/{link}/next", status_code=303)
        resp = templates.TemplateResponse(
            request,
            "conversation.html",
            {"link": link, "p": p, "wf": workflow(p["task"]), "ov": study.overview(a)},
        )
        resp.headers[STEP_HEADER] = str(p["step"])
        return resp

    @app.post("/a/{link}/c/{token}/step/{step}")
    async def submit_form(request: Request, link: str, token: str, step: int):
        a = annotator(link)
        data = await read_body(request)
        r = study.submit(a, token, step, data)
        if r["next_step"] is None:
            return RedirectResponse(f"/a/{link}/next", status_code=303)
        return RedirectResponse(f"/a/{link}/c/{token}", status_code=303)

    # ------------------------------------------------------------------ annotator JSON API
    @app.get("/api/a/{link}/overview")
    def api_overview(link: str):
        return study.overview(annotator(link))

    @app.get("/api/a/{link}/c/{token}")
    def api_current(link: str, token: str):
        p = study.step_payload(annotator(link), token)
        return JSONResponse(p, headers={STEP_HEADER: str(p["step"])})

    @app.get("/api/a/{link}/c/{token}/step/{step}")
    def api_step(link: str, token: str, step: int):
        p = study.step_payload(annotator(link), token, step)
        return JSONResponse(p, headers={STEP_HEADER: str(p["step"])})

    @app.post("/api/a/{link}/c/{token}/step/{step}")
    async def api_submit(request: Request, link: str, token: str, step: int):
        a = annotator(link)
        return study.submit(a, token, step, await read_body(request))

    # ------------------------------------------------------------------ admin
    def require_admin(request: Request) -> None:
        if not study.check_admin_session(request.cookies.get(ADMIN_COOKIE)):
            raise AdminRequired()

    def client_id(request: Request) -> str | None:
        return request.client.host if request.client else None

    @app.get("/admin/login", response_class=HTMLResponse)
    def login_form(request: Request):
        return templates.TemplateResponse(request, "login.html", {"message": None})

    @app.post("/admin/login")
    async def login(request: Request):
        import math

        import anyio

        who = client_id(request)
        # checked and counted before the body is read and long before the password is hashed:
        # a concurrent burst cannot pass between the check and the verification. A wait this
        # process already knows is answered at once, on the loop, without a thread or a query.
        wait = throttle.quick_wait(who)
        if wait <= 0:
            wait = await anyio.to_thread.run_sync(
                throttle.attempt, who, limiter=_limiter(throttle_limiters, THROTTLE_THREADS)
            )
        if wait > 0:
            secs = max(1, math.ceil(wait))
            return templates.TemplateResponse(
                request,
                "login.html",
                {"message": f"Too many failed attempts; try again in {secs} s."},
                status_code=429,
                headers={"Retry-After": str(secs)},
            )
        form = await request.form()
        pw = form.get("password")
        ok = isinstance(pw, str) and 0 < len(pw) <= MAX_PASSWORD_CHARS
        if ok:  # scrypt in a worker thread: the event loop keeps serving annotators meanwhile
            ok = await anyio.to_thread.run_sync(
                study.check_admin_password, pw, limiter=_limiter(verify_limiters, VERIFY_THREADS)
            )
        if not ok:
            return templates.TemplateResponse(
                request, "login.html", {"message": "Wrong password."}, status_code=401
            )
        await anyio.to_thread.run_sync(
            throttle.success, who, limiter=_limiter(throttle_limiters, THROTTLE_THREADS)
        )
        resp = RedirectResponse("/admin", status_code=303)
        resp.set_cookie(
            ADMIN_COOKIE,
            study.new_admin_session(),
            httponly=True,
            samesite="strict",
            secure=secure_cookies,
            path="/",
        )
        return resp

    @app.post("/admin/logout")
    def logout(request: Request):
        study.end_admin_session(request.cookies.get(ADMIN_COOKIE))
        resp = RedirectResponse("/admin/login", status_code=303)
        resp.delete_cookie(ADMIN_COOKIE, path="/")
        return resp

    @app.get("/admin", response_class=HTMLResponse)
    def admin(request: Request, created: str | None = None, batch: str | None = None):
        require_admin(request)
        base = str(request.base_url).rstrip("/")
        return templates.TemplateResponse(
            request,
            "admin.html",
            {
                "annotators": study.annotators(),
                "progress": study.progress(),
                "tasks": study.tasks(),
                "base": base,
                "created": created,
                "batch": batch,
                "report": (analysis_dir / "report.md").read_text(encoding="utf-8")
                if (analysis_dir / "report.md").is_file()
                else None,
            },
        )

    @app.post("/admin/annotators")
    async def add_annotator(request: Request):
        require_admin(request)
        form = await read_body(request)
        a = study.create_annotator(str(form.get("name", "")))
        if wants_json(request) or request.headers.get("content-type", "").startswith("application/json"):
            return {**a, "link": f"{str(request.base_url).rstrip('/')}/a/{a['link_token']}"}
        return RedirectResponse(f"/admin?created={a['id']}", status_code=303)

    @app.post("/admin/batches")
    async def add_batch(request: Request):
        require_admin(request)
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            data = await read_body(request)
            ids = data.get("annotator_ids") or []
        else:
            form = await request.form()
            data = dict(form.items())
            ids = form.getlist("annotator_ids")
        if not isinstance(ids, list) or len(ids) > 10_000:
            raise Invalid("annotator_ids must be a list of annotator ids")
        ids = [parse_int(i, "annotator id", 1, 2**31) for i in ids]
        blocks = parse_int(data.get("blocks_per_annotator"), "blocks_per_annotator", 1, 1000, default=1)
        overlap = parse_float(data.get("overlap_share"), "overlap_share", 0.0, 1.0, default=0.15)
        seed = parse_int(data.get("seed"), "seed", 0, 2**63 - 1, default=None)
        from .design import SamplingError

        try:
            r = study.draw_batch(str(data.get("task", "")), ids, blocks, seed=seed, overlap_share=overlap)
        except SamplingError as e:
            raise Invalid(str(e)) from None
        except ValueError as e:
            raise Invalid(str(e)) from None
        if ctype.startswith("application/json"):
            return r
        return RedirectResponse(f"/admin?batch={r['batch_id']}", status_code=303)

    @app.get("/admin/progress.json")
    def progress(request: Request):
        require_admin(request)
        return study.progress()

    @app.get("/admin/export.json")
    def export_json(request: Request):
        require_admin(request)
        return JSONResponse(
            study.export_rows(), headers={"Content-Disposition": 'attachment; filename="answers.json"'}
        )

    @app.get("/admin/export.csv")
    def export_csv(request: Request):
        require_admin(request)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(Study.EXPORT_FIELDS))
        w.writeheader()
        w.writerows({k: neutralize_cell(v) for k, v in r.items()} for r in study.export_rows())
        return Response(
            buf.getvalue(),
            media_type="text/csv",
            headers={"Content-Disposition": 'attachment; filename="answers.csv"'},
        )

    @app.post("/admin/analyses")
    def recompute(request: Request):
        require_admin(request)
        from .report import run_analyses

        run_analyses(study.judgments(), analysis_dir, **(analysis_options or {}))
        return RedirectResponse("/admin#analyses", status_code=303)

    @app.get("/admin/analyses/{name}")
    def analysis_file(request: Request, name: str):
        require_admin(request)
        allowed = {"report.md", "analyses.json", "figure8.png", "summary.csv"}
        if name not in allowed or not (analysis_dir / name).is_file():
            raise NotFound("no such analysis output; recompute the analyses first")
        return FileResponse(analysis_dir / name)

    @app.get("/")
    def root():
        return RedirectResponse("/admin", status_code=303)

    return app
