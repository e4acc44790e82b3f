"""The annotation web app (FastAPI, server-rendered Jinja2 pages, a little JavaScript).

``create_app(study, star_dir=...)`` returns the ASGI app; ``python -m annotation serve`` runs it
with uvicorn. Annotator pages live under ``/a/<personal link token>/``; the JSON API under
``/api/a/<link>/``; the admin panel under ``/admin`` (password, hashed in the database).
"""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from .security import LoginThrottle
from .store import AnnotationError, Invalid, NotFound, Study

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
ADMIN_COOKIE = "annotation_admin"
STEP_HEADER = "X-Annotation-Step"


class AdminRequired(Exception):
    pass


def create_app(study: Study, star_dir: str | Path | None = None, analysis_dir: str | Path | None = None,
               throttle: LoginThrottle | None = None, secure_cookies: bool = False,
               analysis_options: dict[str, Any] | None = None) -> FastAPI:
    """The ASGI app over ``study``. ``star_dir``: STAR folder (workflow panel and flowcharts);
    ``analysis_dir``: where the admin's "recompute analyses" writes its report (default: a
    folder ``analyses`` next to the working directory)."""
    app = FastAPI(title="DialFork annotation", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    throttle = throttle or LoginThrottle()
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

    @app.middleware("http")
    async def headers(request: Request, call_next):
        resp = await call_next(request)
        resp.headers.setdefault("Cache-Control", "no-store")
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["X-Content-Type-Options"] = "nosniff"
        return resp

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/") or request.url.path.endswith(".json")

    @app.exception_handler(AnnotationError)
    async def annotation_error(request: Request, exc: AnnotationError):
        if wants_json(request):
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        return templates.TemplateResponse(request, "error.html", {"message": exc.message, "status": exc.status},
                                          status_code=exc.status)

    @app.exception_handler(AdminRequired)
    async def admin_required(request: Request, exc: AdminRequired):
        if wants_json(request) or request.method != "GET":
            return JSONResponse({"error": "the admin panel needs the admin password (log in at /admin/login)"},
                                status_code=401)
        return RedirectResponse("/admin/login", status_code=303)

    async def read_body(request: Request) -> dict[str, Any]:
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            try:
                data = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise Invalid("the body is not valid JSON") from None
            if not isinstance(data, dict):
                raise Invalid("the body must be a JSON object")
            return data
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
        return templates.TemplateResponse(request, "intro.html", {
            "link": link, "task": task, "wf": workflow(task), "ov": study.overview(a)})

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
        return FileResponse(wf.flowchart, media_type="image/jpeg", headers={"Cache-Control": "private, max-age=3600"})

    @app.get("/a/{link}/c/{token}", response_class=HTMLResponse)
    def conversation(request: Request, link: str, token: str):
        a = annotator(link)
        p = study.step_payload(a, token)
        if p["step"] == "done":
            return RedirectResponse(f"/a/{link}/next", status_code=303)
        if not study.intro_seen(a, p["task"]):
            return RedirectResponse(f"/a/{link}/intro/{p['task']}", status_code=303)
        resp = templates.TemplateResponse(request, "conversation.html", {
            "link": link, "p": p, "wf": workflow(p["task"]), "ov": study.overview(a)})
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

    def client_id(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    @app.get("/admin/login", response_class=HTMLResponse)
    def login_form(request: Request):
        return templates.TemplateResponse(request, "login.html", {"message": None})

    @app.post("/admin/login")
    async def login(request: Request):
        who = client_id(request)
        wait = throttle.retry_after(who)
        if wait > 0:
            return templates.TemplateResponse(
                request, "login.html", {"message": f"Too many failed attempts; try again in {int(wait) + 1} s."},
                status_code=429, headers={"Retry-After": str(int(wait) + 1)})
        form = await request.form()
        pw = form.get("password")
        if not isinstance(pw, str) or not study.check_admin_password(pw):
            throttle.failure(who)
            return templates.TemplateResponse(request, "login.html", {"message": "Wrong password."},
                                              status_code=401)
        throttle.success(who)
        resp = RedirectResponse("/admin", status_code=303)
        resp.set_cookie(ADMIN_COOKIE, study.new_admin_session(), httponly=True, samesite="strict",
                        secure=secure_cookies, path="/")
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
        return templates.TemplateResponse(request, "admin.html", {
            "annotators": study.annotators(), "progress": study.progress(), "tasks": study.tasks(),
            "base": base, "created": created, "batch": batch,
            "report": (analysis_dir / "report.md").read_text(encoding="utf-8")
            if (analysis_dir / "report.md").is_file() else None})

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
        try:
            ids = [int(i) for i in ids]
            blocks = int(data.get("blocks_per_annotator") or 1)
            overlap = float(data.get("overlap_share") if data.get("overlap_share") not in (None, "") else 0.15)
            seed = int(data["seed"]) if data.get("seed") not in (None, "") else None
        except (TypeError, ValueError):
            raise Invalid("annotator ids, blocks per annotator and seed must be integers; overlap a number") from None
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
        return JSONResponse(study.export_rows(), headers={"Content-Disposition": 'attachment; filename="answers.json"'})

    @app.get("/admin/export.csv")
    def export_csv(request: Request):
        require_admin(request)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(Study.EXPORT_FIELDS))
        w.writeheader()
        w.writerows(study.export_rows())
        return Response(buf.getvalue(), media_type="text/csv",
                        headers={"Content-Disposition": 'attachment; filename="answers.csv"'})

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
