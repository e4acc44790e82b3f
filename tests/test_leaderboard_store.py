"""Results stores: write-once, per submitter, rate limit (injected clock), Hub repo via a fake HfApi."""

from __future__ import annotations

import inspect
import json
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from huggingface_hub import HfApi

from leaderboard.store import (
    HubStore,
    LocalStore,
    RateLimitError,
    ResultExistsError,
    load_results,
    parse_key,
    result_key,
    slugify,
)

T0 = datetime(2026, 5, 4, 10, 30, 0, 123456, tzinfo=timezone.utc)


class Clock:
    def __init__(self, t: datetime):
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def advance(self, **kw) -> None:
        self.t += timedelta(**kw)


def _res(i=0):
    return {"schema": "dialfork-leaderboard-result", "track": "detector", "n": i}


def test_keys_and_slugs():
    assert slugify("IT + NC (D2F, 6-gram)") == "it-nc-d2f-6-gram"
    assert slugify("Ünïcode/../..") == "unicode"
    assert slugify("///") == "method"
    k = result_key("alice", "My Method", T0)
    assert k == "alice/my-method/20260504T103000.123456Z.json"
    assert parse_key(k) == ("alice", "my-method", T0)
    for bad in ("../x", "a/b", "", "-x", "x" * 65):
        with pytest.raises(ValueError, match="not a valid id"):
            result_key(bad, "m", T0)
    with pytest.raises(ValueError, match="timezone-aware"):
        result_key("a", "m", datetime(2026, 1, 1))


def test_local_store_is_write_once_and_per_submitter(tmp_path):
    clock = Clock(T0)
    st = LocalStore(tmp_path, clock=clock)
    k1 = st.put("alice", "M", _res(1), {"contact": "a@x.org"})
    path = tmp_path / "results" / k1
    assert json.loads(path.read_text()) == _res(1)
    assert json.loads((tmp_path / "private" / k1).read_text()) == {"contact": "a@x.org"}
    assert not stat.S_IMODE(path.stat().st_mode) & 0o222  # read-only
    with pytest.raises(ResultExistsError, match="immutable"):
        st.put("alice", "M", _res(2))  # same instant, same key
    assert json.loads(path.read_text()) == _res(1)
    clock.advance(seconds=1)
    k2 = st.put("alice", "M", _res(2))  # a resubmission is a new file
    k3 = st.put("bob", "M", _res(3))  # another submitter, same method: own folder
    assert len({k1, k2, k3}) == 3 and k3.startswith("bob/")
    assert st.keys(submitter="alice") == [k1, k2]
    assert [r["n"] for r in st.results()] == [1, 2, 3]
    assert not [p for p in tmp_path.rglob("*.tmp")]  # no temp file left behind
    assert [r["n"] for r in load_results([tmp_path / "results"])] == [1, 2, 3]


def test_local_write_refuses_existing_file_even_without_listing(tmp_path):
    st = LocalStore(tmp_path)
    key = result_key("eve", "m", T0)
    (tmp_path / "results" / "eve" / "m").mkdir(parents=True)
    (tmp_path / "results" / key).write_text("{}")
    with pytest.raises(ResultExistsError):
        st._write_new("results", key, b"{}")
    assert (tmp_path / "results" / key).read_text() == "{}"


def test_rate_limit_per_submitter_per_utc_day(tmp_path):
    clock = Clock(T0.replace(hour=23, minute=58))
    st = LocalStore(tmp_path, clock=clock, max_per_day=2)
    st.put("alice", "m", _res())
    clock.advance(seconds=1)
    assert st.check_rate_limit("alice") == 1
    st.put("alice", "m", _res())
    clock.advance(seconds=1)
    with pytest.raises(RateLimitError, match=r"limit 2 per UTC day\); try again from 2026-05-05 00:00 UTC"):
        st.put("alice", "other method", _res())
    st.put("bob", "m", _res())  # others are not affected
    clock.advance(minutes=3)  # next UTC day
    st.put("alice", "m", _res())
    assert st.count_today("alice") == 1 and len(st.keys(submitter="alice")) == 3


# ---- Hub dataset repo, through a fake HfApi whose calls are checked against HfApi's signatures ----


class Conflict(Exception):
    def __init__(self):
        super().__init__("412 Precondition Failed: a commit has happened since")
        self.response = SimpleNamespace(status_code=412)


class FakeHfApi:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.repos: dict[str, dict] = {}
        self.calls: list[str] = []
        self.conflicts = 0  # how many concurrent commits to simulate before our commit lands

    def _bind(self, name, *args, **kw):
        inspect.signature(getattr(HfApi, name)).bind(self, *args, **kw)  # TypeError if we misuse the API
        self.calls.append(name)

    def _repo(self, repo_id):
        if repo_id not in self.repos:
            raise KeyError(f"404 repo {repo_id}")
        return self.repos[repo_id]

    def create_repo(self, *args, **kw):
        self._bind("create_repo", *args, **kw)
        rid = kw.get("repo_id", args[0] if args else None)
        self.repos.setdefault(rid, {"files": {}, "sha": "0" * 40, "n": 0, "private": bool(kw.get("private"))})

    def repo_info(self, *args, **kw):
        self._bind("repo_info", *args, **kw)
        return SimpleNamespace(sha=self._repo(args[0])["sha"])

    def list_repo_files(self, *args, **kw):
        self._bind("list_repo_files", *args, **kw)
        return sorted(self._repo(args[0])["files"])

    def _commit(self, repo, path, data):
        repo["files"][path] = data
        repo["n"] += 1
        repo["sha"] = f"{repo['n']:040d}"

    def create_commit(self, *args, **kw):
        self._bind("create_commit", *args, **kw)
        repo = self._repo(args[0])
        if self.conflicts:
            self.conflicts -= 1
            self._commit(repo, f"results/zed/other/{self.conflicts}.json", b"{}")
        if kw.get("parent_commit") != repo["sha"]:
            raise Conflict()
        for op in args[1]:
            if op.path_in_repo in repo["files"]:
                raise AssertionError("the fake Hub would overwrite a file")
            self._commit(repo, op.path_in_repo, op.path_or_fileobj)

    def hf_hub_download(self, *args, **kw):
        self._bind("hf_hub_download", *args, **kw)
        data = self._repo(args[0])["files"][args[1]]
        out = self.tmp / "dl" / args[0] / args[1]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        return str(out)


def test_hub_store_roundtrip_private_repo_and_sync(tmp_path):
    api = FakeHfApi(tmp_path)
    clock = Clock(T0)
    st = HubStore("org/dialfork-results", api=api, clock=clock, create=True, max_per_day=2)
    assert api.repos["org/dialfork-results-private"]["private"] is True
    k = st.put("alice", "M", _res(1), {"contact": "a@x.org"})
    assert api.repos["org/dialfork-results"]["files"] == {
        f"results/{k}": json.dumps(_res(1), indent=2).encode() + b"\n"
    }
    assert list(api.repos["org/dialfork-results-private"]["files"]) == [f"private/{k}"]
    assert st.results() == [_res(1)]
    assert st.results("private") == [{"contact": "a@x.org"}]
    with pytest.raises(ResultExistsError):
        st.put("alice", "M", _res(9))
    clock.advance(seconds=5)
    st.put("alice", "M", _res(2))
    clock.advance(seconds=5)
    with pytest.raises(RateLimitError):
        st.put("alice", "M", _res(3))
    got = st.sync(tmp_path / "mirror")
    assert len(got) == 2 and st.sync(tmp_path / "mirror") == []  # immutable: nothing new to fetch
    assert [r["n"] for r in load_results([tmp_path / "mirror" / "results"])] == [1, 2]
    with pytest.raises(ValueError, match="must differ"):
        HubStore("a/b", private_repo_id="a/b", api=api)


def test_hub_store_retries_on_concurrent_commit(tmp_path):
    api = FakeHfApi(tmp_path)
    st = HubStore("o/r", api=api, create=True, clock=Clock(T0), max_retries=3)
    api.conflicts = 2
    k = st.put("alice", "m", _res())
    assert f"results/{k}" in api.repos["o/r"]["files"]
    assert api.calls.count("create_commit") == 3  # two concurrent commits moved the head, the third try lands
    api.conflicts = 5
    with pytest.raises(Conflict):
        st.put("bob", "m", _res())


def test_submit_through_hub_store(tmp_path):
    from leaderboard.submissions import submit
    from leaderboard.synthetic import make_fixture, write_metadata, write_predictions

    env = make_fixture(tmp_path / "fx", n_sources=2, seed=1, with_text=False)
    preds = {b["dialogue_id"]: 1 for b in env["blind"]}
    sub = write_predictions(preds, tmp_path / "p.jsonl")
    write_metadata(
        tmp_path / "p.metadata.json", method="Always first", contact="me@lab.org", code_url="https://x.org/c"
    )
    api = FakeHfApi(tmp_path)
    st = HubStore("o/r", api=api, create=True, clock=Clock(T0))
    out = submit(
        sub, track="detector", gold=env["gold_dir"], blind=env["blind_dir"], store=st, submitter="frank"
    )
    pub = json.loads(api.repos["o/r"]["files"][f"results/{out.key}"])
    priv = json.loads(api.repos["o/r-private"]["files"][f"private/{out.key}"])
    assert pub == out.result and pub["submitted_at"] == T0.isoformat()
    assert "me@lab.org" not in json.dumps(pub) and priv["contact"] == "me@lab.org"
    assert "private" in priv["scores"] and set(pub["scores"]) == {"public"}
    assert os.path.basename(out.key) == "20260504T103000.123456Z.json"
