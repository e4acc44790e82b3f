"""Generation engine + template backend: fork invariants, determinism, variants, seeds, bad input,
and the LLM message layout (injection placement) with a fake recording backend."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns, system_turn_to_position
from dialfork_dataset.jsonl import read_jsonl, validate_jsonl_file
from dialfork_dataset.records import RECORD_FIELDS, validate_record
from dialfork_dataset.taxonomy import forks_per_source
from generation import prompts
from generation.backends import get_backend
from generation.engine import (
    GenerationConfig,
    GenerationError,
    Manifest,
    generate_corpus,
    injection_message,
)
from generation.seeds import Rng, dialogue_seed, fork_seed, stable_seed
from generation.types.sspc import SSPC_STRATEGIES
from generation.variants import (
    VariantError,
    default_variants_data,
    draw_substitute_task,
    draw_variant,
    load_variants,
)

TASKS = ("weather", "bank_balance", "hotel_book", "trivia", "trip_directions", "apartment_search")


def _records(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.jsonl")) for r in read_jsonl(f)]


def _corpus_bytes(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.glob("*.jsonl"))}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, star_dir):
    out = tmp_path_factory.mktemp("gen") / "corpus"
    cfg = GenerationConfig(star=str(star_dir), out=str(out), tasks=TASKS, per_task=3, seed=7)
    manifest = generate_corpus(cfg, progress=False)
    return out, manifest, _records(out)


# ------------------------------------------------------------------ fork invariants (every type)


@pytest.mark.parametrize("htype", taxonomy.names())
def test_fork_invariants_per_type(corpus, htype):
    _, _, recs = corpus
    sources = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    forks = [r for r in recs if r["hallucination_type"] == htype]
    assert len(forks) == 4 * len(sources) > 0
    for f in forks:
        validate_record(f)
        src = sources[f["source_id"]]
        T = src["num_system_turns"]
        k, tk = f["fork_position"], f["fork_turn"]
        assert tk == fork_turns(T)[k - 1]
        assert f["dialogue_id"] == f"{src['dialogue_id']}-{htype}-k{k}"
        # prefix identity: every turn before system turn t_k equals D+'s
        cut = system_turn_to_position(src["turns"], tk)
        assert f["turns"][:cut] == src["turns"][:cut]
        assert system_turn_to_position(f["turns"], tk) == cut
        # divergence at t_k: the fork's system turn t_k differs from D+'s
        assert f["turns"][cut]["speaker"] == "system"
        assert f["turns"][cut]["text"] != src["turns"][cut]["text"]
        assert f["prefix_mode"] == "replay" and f["prefix_divergence"] == 0
        assert f["seed"] == src["seed"] and f["generator"] == "template"
        assert f["instruction"] == load_variants().by_id(f["variant"]).render_instruction(
            f["substitute_task"], f["task"].replace("_", " ")
        )
        if taxonomy.get(htype).substitute:  # WIC among the paper's types
            assert f["substitute_task"] and f["substitute_task"] != f["task"]
        else:
            assert f["substitute_task"] is None


def test_sixteen_forks_per_kept_source_and_valid_files(corpus):
    out, manifest, recs = corpus
    by_src = defaultdict(list)
    for r in recs:
        assert list(r) == list(RECORD_FIELDS)
        if r["hallucination_type"] is not None:
            by_src[r["source_id"]].append((r["hallucination_type"], r["fork_position"]))
    sources = [r for r in recs if r["hallucination_type"] is None]
    assert len(sources) == manifest.counts["total"]["kept"]
    for s in sources:
        assert s["num_system_turns"] >= 4
        assert s["dialogue_id"] == f"{s['task']}-{s['scenario_id']}"
        assert sorted(by_src[s["dialogue_id"]]) == sorted(
            (h, k) for h in taxonomy.names() for k in (1, 2, 3, 4)
        )
    for f in out.glob("*.jsonl"):
        validate_jsonl_file(f)
    assert manifest.counts["total"]["records"] == len(recs) == (1 + forks_per_source()) * len(sources)
    assert set(manifest["files"]) == {f.name for f in out.glob("*.jsonl")}
    assert not (out / "shards").exists()


def test_records_in_canonical_order(corpus):
    out, _, _ = corpus
    order = {h: i for i, h in enumerate(taxonomy.names())}
    for f in out.glob("*.jsonl"):
        rows = read_jsonl(f)
        keys = [
            (
                int(r["scenario_id"]),
                -1 if r["hallucination_type"] is None else order[r["hallucination_type"]],
                r["fork_position"] or 0,
            )
            for r in rows
        ]
        assert keys == sorted(keys)


def test_simulated_dialogues_are_varied_and_end_cleanly(corpus):
    _, _, recs = corpus
    conf = [r for r in recs if r["hallucination_type"] is None]
    for r in conf:
        assert r["turns"][0]["speaker"] == "user"
        assert all(a["speaker"] != b["speaker"] for a, b in zip(r["turns"], r["turns"][1:]))
        assert all(prompts.END_TOKEN not in t["text"] and "{" not in t["text"] for t in r["turns"])
    # several phrasings of the same node across dialogues: the first system turns are not all equal
    firsts = Counter(r["turns"][1]["text"] for r in conf)
    assert len(firsts) > 3
    # forks are not trivially detectable by their length: GR/CSC add 1-3 turns whatever k is (fewer
    # when the length budget cuts them)
    recs_by_id = {r["dialogue_id"]: r for r in recs}
    for h in ("GR", "CSC"):
        d = defaultdict(list)
        for r in recs:
            if r["hallucination_type"] == h:
                d[r["fork_position"]].append(
                    r["num_system_turns"] - recs_by_id[r["source_id"]]["num_system_turns"]
                )
        for k in (1, 2, 3, 4):
            assert all(-1 <= x <= 3 for x in d[k]), (h, k, d[k])
            assert sum(x >= 1 for x in d[k]) >= 0.7 * len(d[k])


def test_manifest_contents(corpus, star_dir):
    out, manifest, _ = corpus
    m = json.loads((out / "manifest.json").read_text())
    assert m["format"].startswith("dialfork-generation-manifest")
    assert m["config"]["seed"] == 7 and m["config"]["per_task"] == 3
    assert m["variants_version"] == load_variants().version
    assert set(m["counts"]["per_task"]) == set(TASKS)
    for c in m["counts"]["per_task"].values():
        assert c["scenarios"] == 3 and c["kept"] + sum(c["dropped"].values()) == 3
    assert m["counts"]["forks_same_at_fork_turn"] == 0
    assert {"generation_seconds", "merge_seconds", "wall_seconds"} <= set(m["timings"])
    assert Manifest.load(out).counts == m["counts"]


def test_manifest_records_the_source_as_given_not_an_absolute_path(tmp_path, star_dir, monkeypatch):
    """Issue 37: the manifest named this machine's absolute STAR path. It records --star as given
    (relative to the folder the command ran in, as the task3 and leaderboard readers resolve it); a
    rerun naming the same folder another way resumes, another folder is refused."""
    from leaderboard.__main__ import _recorded_source

    monkeypatch.chdir(tmp_path)
    rel = os.path.relpath(star_dir, tmp_path)
    cfg = GenerationConfig(star=rel, out="c", tasks=("weather",), per_task=1, seed=7)
    generate_corpus(cfg, progress=False)
    text = (tmp_path / "c" / "manifest.json").read_text()
    assert json.loads(text)["config"]["star"] == rel and not os.path.isabs(rel)
    assert json.dumps(str(Path(star_dir).resolve())) not in text
    assert _recorded_source("c") == rel  # the leaderboard's reader finds the source again
    before = _corpus_bytes(tmp_path / "c")
    for same in (str(Path(star_dir).resolve()), f"star:{rel}", rel + "/"):
        generate_corpus(
            GenerationConfig(star=same, out="c", tasks=("weather",), per_task=1, seed=7), progress=False
        )  # complete already: nothing to do, not refused
    assert _corpus_bytes(tmp_path / "c") == before
    with pytest.raises(GenerationError, match="differing setting.*star"):
        generate_corpus(
            GenerationConfig(star=str(tmp_path), out="c", tasks=("weather",), per_task=1, seed=7),
            progress=False,
        )


# ------------------------------------------------------------------ determinism, resume, modes


def test_determinism_and_worker_independence(corpus, tmp_path, star_dir):
    out, _, _ = corpus
    again = tmp_path / "again"
    cfg = GenerationConfig(
        star=str(star_dir), out=str(again), tasks=TASKS, per_task=3, seed=7, workers=2, batch_size=2
    )
    generate_corpus(cfg, progress=False)
    assert _corpus_bytes(again) == _corpus_bytes(out)
    # rerunning a complete run does nothing and keeps the bytes
    generate_corpus(cfg, progress=False)
    assert _corpus_bytes(again) == _corpus_bytes(out)
    other = tmp_path / "other"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(other), tasks=TASKS, per_task=3, seed=8), progress=False
    )
    assert _corpus_bytes(other) != _corpus_bytes(out)


def test_reuse_mode_equals_replay_for_the_exact_backend(corpus, tmp_path, star_dir):
    out, _, recs = corpus
    reuse = tmp_path / "reuse"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(reuse), tasks=TASKS, per_task=3, seed=7, prefix_mode="reuse"
        ),
        progress=False,
    )
    r2 = _records(reuse)
    assert len(r2) == len(recs)
    for a, b in zip(recs, r2):
        assert a["turns"] == b["turns"]
        if a["hallucination_type"]:
            assert b["prefix_mode"] == "reuse" and b["prefix_divergence"] == 0


def test_shards_merge_to_the_same_corpus(corpus, tmp_path, star_dir):
    from generation.engine import merge_shards

    out, _, _ = corpus
    sharded = tmp_path / "sharded"
    cfg = GenerationConfig(star=str(star_dir), out=str(sharded), tasks=TASKS, per_task=3, seed=7)
    assert generate_corpus(cfg, shard_index=1, num_shards=2, progress=False) is None
    with pytest.raises(GenerationError, match="not generated yet"):
        merge_shards(sharded)
    generate_corpus(cfg, shard_index=0, num_shards=2, progress=False)
    merge_shards(sharded)
    assert _corpus_bytes(sharded) == _corpus_bytes(out)


def test_resume_after_torn_and_unfinished_units(corpus, tmp_path, star_dir):
    """Simulate a kill mid-write: a shard ending with a unit's records but no marker, then a torn line."""
    from generation.engine import read_shard, shard_path

    out, _, _ = corpus
    work = tmp_path / "torn"
    cfg = GenerationConfig(
        star=str(star_dir), out=str(work), tasks=TASKS, per_task=3, seed=7, keep_shards=True
    )
    generate_corpus(cfg, progress=False)
    spath = shard_path(work, 0, 1)
    data = spath.read_bytes()
    lines = data.splitlines(keepends=True)
    # keep 5 full units + 7 records of the 6th + half a line
    markers = [i for i, ln in enumerate(lines) if ln.startswith(b'{"_unit":')]
    cut = markers[4] + 1
    partial = b"".join(lines[: cut + 7]) + lines[cut + 7][: len(lines[cut + 7]) // 2]
    spath.write_bytes(partial)
    (work / "manifest.json").unlink()
    for f in work.glob("*.jsonl"):
        f.unlink()
    assert len(read_shard(spath)) == 5
    generate_corpus(cfg, progress=False)
    assert _corpus_bytes(work) == _corpus_bytes(out)


def _sharded_run(star_dir, work):
    from generation.engine import shard_path

    cfg = GenerationConfig(star=str(star_dir), out=str(work), tasks=TASKS, per_task=3, seed=7)
    generate_corpus(cfg, shard_index=0, num_shards=2, progress=False)
    generate_corpus(cfg, shard_index=1, num_shards=2, progress=False)
    return cfg, shard_path(work, 0, 2), shard_path(work, 1, 2)


@pytest.mark.parametrize("where", ["text", "speaker"])
def test_merge_refuses_a_same_length_corruption(corpus, tmp_path, star_dir, where):
    """A shard edited in place without changing its length (so every marker's byte count still
    holds) is refused at merge with file:line, and regenerating that shard fixes the corpus."""
    from generation.engine import merge_shards

    out, _, _ = corpus
    work = tmp_path / "corrupt"
    cfg, s0, s1 = _sharded_run(star_dir, work)
    data = s1.read_bytes()
    lines = data.splitlines(keepends=True)
    i = next(k for k, ln in enumerate(lines) if b'"hallucination_type":"GR"' in ln)  # a fork's record
    if where == "text":  # still a valid record: only the hash can tell
        j = lines[i].index(b'"text":"') + len(b'"text":"')
        old = lines[i][j : j + 1]
        lines[i] = lines[i][:j] + (b"Z" if old != b"Z" else b"Y") + lines[i][j + 1 :]
    else:  # an invalid record too
        lines[i] = lines[i].replace(b'"speaker":"system"', b'"speaker":"sYstem"', 1)
    corrupted = b"".join(lines)
    assert len(corrupted) == len(data) and corrupted != data
    s1.write_bytes(corrupted)
    did = json.loads(lines[i])["dialogue_id"]
    with pytest.raises(GenerationError) as ei:
        merge_shards(work)
    msg = str(ei.value)
    assert (
        f"{s1}:{i + 1}: dialogue_id={did!r}: the record differs from the one written at generation time"
        in msg
    )
    if where == "speaker":
        assert f"{s1}:{i + 1}: dialogue_id={did!r}: turns[" in msg and "must be 'user' or 'system'" in msg
    assert f"remove {s1} and rerun the same generation command" in msg and str(s0) + ":" not in msg
    assert not (work / "manifest.json").exists() and not list(work.glob("*.jsonl"))
    assert not list(work.glob(".*.tmp"))  # no temporary file left behind
    # the advice works: remove the shard, regenerate it, merge
    s1.unlink()
    generate_corpus(cfg, shard_index=1, num_shards=2, progress=False)
    merge_shards(work)
    assert _corpus_bytes(work) == _corpus_bytes(out)


def test_merge_validates_shards_without_line_hashes(corpus, tmp_path, star_dir):
    """A shard written before markers carried line hashes is still validated record by record."""
    from generation.engine import merge_shards

    out, _, _ = corpus
    work = tmp_path / "old"
    _, s0, _ = _sharded_run(star_dir, work)
    lines = s0.read_bytes().splitlines(keepends=True)
    for k, ln in enumerate(lines):
        if ln.startswith(b'{"_unit":'):
            m = json.loads(ln)
            m.pop("line_sha256")
            lines[k] = (json.dumps(m, separators=(",", ":")) + "\n").encode()
    s0.write_bytes(b"".join(lines))
    merge_shards(work, keep_shards=True)  # hashes absent, records valid: merged
    assert _corpus_bytes(work) == _corpus_bytes(out)
    (work / "manifest.json").unlink()
    i = next(k for k, ln in enumerate(lines) if b'"num_system_turns":' in ln)
    lines[i] = lines[i].replace(b'"seed":', b'"seex":', 1)
    s0.write_bytes(b"".join(lines))
    with pytest.raises(
        GenerationError, match=rf"{s0}:{i + 1}: dialogue_id='[^']+': seed: must be an integer"
    ):
        merge_shards(work)


# ------------------------------------------------------------------ variants and seeds


def test_variant_pool_file():
    pool = load_variants()
    assert isinstance(pool.version, int)
    for h in taxonomy.names():
        assert len(pool[h]) >= 5
        for v in pool[h]:
            assert v.id and v.instruction and v.cue and v.description
    assert sorted(v.template["strategy"] for v in pool["SSPC"]) == sorted(SSPC_STRATEGIES)
    ids = [v.id for h in taxonomy.names() for v in pool[h]]
    assert len(ids) == len(set(ids))


def test_variant_pool_errors_are_collected(tmp_path):
    import yaml

    data = default_variants_data()
    data["types"]["SSPC"] = data["types"]["SSPC"][:4]
    data["types"]["GR"][0]["cue"] = ""
    del data["version"]
    p = tmp_path / "v.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(VariantError) as e:
        load_variants(p)
    msg = str(e.value)
    assert "version" in msg and "types.SSPC" in msg and "types.GR[0]" in msg and len(e.value.errors) >= 4


def test_seeds_are_stable_and_spread():
    assert stable_seed("a", 1) == stable_seed("a", 1) != stable_seed("a", 2)
    # fixed value: the seed derivation must never change silently (it would change every corpus)
    assert dialogue_seed(0, "1") == stable_seed("dialogue", 0, "1")
    assert fork_seed(0, "1", "WIC", 1) != fork_seed(0, "1", "WIC", 2)
    r1, r2 = Rng(5, 1), Rng(5, 1)
    assert [r1.next64() for _ in range(5)] == [r2.next64() for _ in range(5)]
    counts = Counter(Rng(9).below(4) for _ in range(1))  # smoke
    assert sum(counts.values()) == 1
    rng = Rng(123)
    hist = Counter(rng.below(4) for _ in range(4000))
    assert all(850 < hist[i] < 1150 for i in range(4))


def test_substitute_task_rule(star_dir):
    from dialfork_dataset.star import StarCorpus

    c = StarCorpus(star_dir)
    domain_of = {n: t.domain for n, t in c.tasks.items()}
    for seed in range(5):
        sub = draw_substitute_task("bank_balance", domain_of, seed, "1", 1)
        assert sub == "bank_fraud_report"  # the only other bank task
        w = draw_substitute_task("weather", domain_of, seed, "1", 2)  # single-task domain
        assert w != "weather" and domain_of[w] != "weather"
    subs = {draw_substitute_task("hotel_book", domain_of, 0, str(i), 1) for i in range(30)}
    assert subs == {"hotel_search", "hotel_service_request"}
    pool = load_variants()
    vs = {draw_variant(pool, 0, str(i), "SSPC", 1).id for i in range(60)}
    assert len(vs) == 5


# ------------------------------------------------------------------ bad input


def _cfg(star_dir, out, **kw):
    return GenerationConfig(star=str(star_dir), out=str(out), tasks=("weather",), per_task=1, **kw)


def test_bad_inputs_are_refused_and_write_nothing(tmp_path, star_dir):
    out = tmp_path / "o"
    with pytest.raises(GenerationError, match="unknown task"):
        generate_corpus(
            GenerationConfig(star=str(star_dir), out=str(out), tasks=("weather", "nope")), progress=False
        )
    with pytest.raises(GenerationError, match="budget must be an integer >= 1"):
        generate_corpus(_cfg(star_dir, out, budget=0), progress=False)
    with pytest.raises(GenerationError, match="prefix mode"):
        generate_corpus(_cfg(star_dir, out, prefix_mode="copy"), progress=False)
    with pytest.raises(GenerationError, match="not a STAR copy|unusable"):
        generate_corpus(_cfg(tmp_path / "nostar", out), progress=False)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(GenerationError, match="is not a folder"):
        generate_corpus(_cfg(star_dir, blocker / "sub"), progress=False)
    assert not out.exists()


def test_unwritable_output_folder(tmp_path, star_dir):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK) and os.geteuid() == 0:
            # root ignores permission bits: use a read-only mount instead
            ro_target = Path("/proc/dialfork-test-out")
        else:
            ro_target = ro / "out"
        with pytest.raises(GenerationError, match="not writable|cannot be created"):
            generate_corpus(_cfg(star_dir, ro_target), progress=False)
        assert not ro_target.exists()
    finally:
        ro.chmod(0o700)


def test_broken_star_folder(tmp_path, star_dir):
    star = tmp_path / "star"
    (star / "tasks").mkdir(parents=True)
    os.symlink(star_dir / "apis", star / "apis")
    os.symlink(star_dir / "scenarios.jsonl", star / "scenarios.jsonl")
    for t in (star_dir / "tasks").iterdir():
        if t.name != "weather":
            os.symlink(t, star / "tasks" / t.name)
    bad = star / "tasks" / "weather"
    shutil.copytree(star_dir / "tasks" / "weather", bad)
    (bad / "weather.json").write_text('{"task": "weather", "replies": ')
    out = tmp_path / "o"
    with pytest.raises(GenerationError) as e:
        generate_corpus(_cfg(star, out), progress=False)
    assert "weather.json" in str(e.value)
    assert not out.exists()


def test_refuses_to_mix_configurations(tmp_path, star_dir):
    out = tmp_path / "o"
    generate_corpus(_cfg(star_dir, out, seed=1), progress=False)
    before = _corpus_bytes(out)
    with pytest.raises(GenerationError, match=r"seed: existing 1 vs requested 2"):
        generate_corpus(_cfg(star_dir, out, seed=2), progress=False)
    with pytest.raises(GenerationError, match="prefix_mode"):
        generate_corpus(_cfg(star_dir, out, seed=1, prefix_mode="reuse"), progress=False)
    assert _corpus_bytes(out) == before
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "x.jsonl").write_text("{}\n")
    with pytest.raises(GenerationError, match="not written by a run"):
        generate_corpus(_cfg(star_dir, stray), progress=False)


def test_budget_cuts_and_drops(tmp_path, star_dir):
    out = tmp_path / "o"
    m = generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(out), tasks=("weather",), per_task=4, budget=3, cut_after=2
        ),
        progress=False,
    )
    # 3 + 2 turns at most -> at most 2 system turns: every scenario is dropped as too short
    assert m.counts["total"]["kept"] == 0
    assert m.counts["per_task"]["weather"]["dropped"] == {"too_short": 4}
    assert list(out.glob("*.jsonl")) == []


def test_cli(tmp_path, star_dir, capsys):
    from generation.cli import main

    out = tmp_path / "cli"
    assert (
        main(
            [
                "--star",
                str(star_dir),
                "--out",
                str(out),
                "--tasks",
                "weather",
                "--per-task",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    assert f"{2 * (1 + forks_per_source())} records" in capsys.readouterr().out
    assert (
        main(
            [
                "--star",
                str(star_dir),
                "--out",
                str(out),
                "--tasks",
                "weather",
                "--per-task",
                "2",
                "--seed",
                "3",
                "--no-progress",
            ]
        )
        == 2
    )
    assert "seed" in capsys.readouterr().err
    assert (
        main(["--star", str(star_dir), "--out", str(tmp_path / "x"), "--tasks", "nope", "--no-progress"]) == 2
    )
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0


# ------------------------------------------------------------------ the LLM path: message layout


class RecordingBackend:
    """A fake chat backend: records every request; answers 'HALLUCINATING' once an injection is in
    its context; the user closes after 8 turns. ``ignore`` makes it ignore instructions."""

    name = "fake-llm"

    def __init__(self, ignore: bool = False):
        self.requests = []
        self.ignore = ignore

    def decoding(self):
        return {"temperature": 1.3, "top_p": 0.95, "top_k": 64, "max_new_tokens": 64}

    def generate(self, requests):
        out = []
        for r in requests:
            self.requests.append(r)
            injected = any(
                m["role"] == "system" and m["content"].startswith("New instruction") for m in r.messages
            )
            if r.role == "system":
                text = f"system turn {r.turn_index}" + (
                    " HALLUCINATING" if injected and not self.ignore else ""
                )
            else:
                text = f"user turn {r.turn_index}" + (f" {prompts.END_TOKEN}" if r.turn_index >= 12 else "")
            out.append(text)
        return out


def test_injection_placement_with_a_recording_backend(tmp_path, star_dir):
    be = RecordingBackend()
    out = tmp_path / "llm"
    cfg = GenerationConfig(star=str(star_dir), out=str(out), tasks=("weather",), per_task=2, backend="fake")
    m = generate_corpus(cfg, backend=be, progress=False)
    recs = {r["dialogue_id"]: r for r in _records(out)}
    assert m.counts["total"]["records"] == 2 * (1 + forks_per_source())
    by_key = defaultdict(list)
    for r in be.requests:
        by_key[r.dialogue_key].append(r)
    for did, rec in recs.items():
        reqs = by_key[did]
        sys_reqs = [r for r in reqs if r.role == "system"]
        user_reqs = [r for r in reqs if r.role == "user"]
        assert (
            sys_reqs[0].messages[0]["role"] == "system"
            and "follow this workflow faithfully" in sys_reqs[0].messages[0]["content"].lower()
        )
        assert "[weather_ask_day]" in sys_reqs[0].messages[0]["content"]  # the rendered workflow
        assert (
            user_reqs[0].messages[0]["role"] == "system"
            and "do not volunteer all details" in user_reqs[0].messages[0]["content"].lower()
        )
        assert user_reqs[0].messages[1]["role"] == "user"
        for r in user_reqs:
            assert not any(x["content"].startswith("New instruction") for x in r.messages)
        if rec["hallucination_type"] is None:
            assert all(
                not any(x["content"].startswith("New instruction") for x in r.messages) for r in sys_reqs
            )
            continue
        tk = rec["fork_turn"]
        inj = injection_message_for(rec)
        for i, r in enumerate(sys_reqs, 1):
            has = [x for x in r.messages if x == inj]
            if i < tk:
                assert not has
            elif i == tk:
                assert r.messages[-1] == inj  # right before system turn t_k
                # the dialogue so far precedes it: the last turn before t_k is the user's
                assert r.messages[-2]["role"] == "user"
            else:
                assert len(has) == 1
        cut = system_turn_to_position(rec["turns"], tk)
        assert rec["turns"][cut]["text"].endswith("HALLUCINATING")
        assert all("HALLUCINATING" not in t["text"] for t in rec["turns"][:cut])
        assert rec["prefix_divergence"] == 0 and rec["generator"] == "fake-llm"
        assert rec["decoding"]["temperature"] == 1.3


def _recording_tqdm(monkeypatch):
    """Replace tqdm.auto.tqdm (the engine imports it at call time) by a subclass that records each
    bar's description, whether it was created disabled (close() disables every bar), its update
    amounts and its postfixes."""
    import tqdm.auto

    bars = []

    class RecordingTqdm(tqdm.auto.tqdm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.label, self.off, self.updates, self.postfixes = kw["desc"], kw.get("disable", False), [], []
            bars.append(self)

        def update(self, n=1):
            self.updates.append(n)
            return super().update(n)

        def set_postfix_str(self, s="", refresh=True):
            self.postfixes.append(s)
            return super().set_postfix_str(s, refresh)

    monkeypatch.setattr(tqdm.auto, "tqdm", RecordingTqdm)
    return bars


def test_llm_backends_show_turns_advance(tmp_path, star_dir, monkeypatch, capsys):
    """Issue 37: an LLM backend's turns show on a second bar, one update per lockstep step (the
    dialogue bar moves only once a whole scenario and its forks are done)."""
    bars = _recording_tqdm(monkeypatch)
    be = RecordingBackend()
    calls = []
    generate = be.generate
    monkeypatch.setattr(be, "generate", lambda reqs: calls.append(len(reqs)) or generate(reqs))
    cfg = GenerationConfig(
        star=str(star_dir), out=str(tmp_path / "llm"), tasks=("weather",), per_task=2, backend="fake"
    )
    generate_corpus(cfg, backend=be, progress=True)
    by_desc = {b.label: b for b in bars}
    dlg, turns = by_desc["generate[0]"], by_desc["turns[0]"]
    assert not turns.off and turns.updates == calls  # one update per backend call, its utterance count
    assert turns.n == len(be.requests) == sum(calls)
    assert turns.postfixes[0] == "D+" and turns.postfixes[-1] == "forks"
    assert dlg.updates == [1 + forks_per_source()] * 2  # D+ and its forks, per scenario
    assert "turns[0]" in capsys.readouterr().err  # drawn on stderr


def test_the_template_backend_has_no_turn_bar(tmp_path, star_dir, monkeypatch):
    bars = _recording_tqdm(monkeypatch)
    cfg = GenerationConfig(star=str(star_dir), out=str(tmp_path / "t"), tasks=("weather",), per_task=2)
    generate_corpus(cfg, progress=True)
    turns = [b for b in bars if b.label.startswith("turns")]
    assert len(turns) == 1 and turns[0].off and turns[0].updates == []


def injection_message_for(rec):
    from generation.engine import ForkSpec
    from generation.variants import load_variants

    v = load_variants().by_id(rec["variant"])
    return injection_message(
        ForkSpec(
            rec["hallucination_type"],
            rec["fork_position"],
            rec["fork_turn"],
            v,
            rec["instruction"],
            rec["substitute_task"],
        )
    )


def test_llm_ignoring_the_instruction_is_counted_not_hidden(tmp_path, star_dir):
    out = tmp_path / "llm2"
    cfg = GenerationConfig(
        star=str(star_dir),
        out=str(out),
        tasks=("weather",),
        per_task=1,
        backend="fake",
        budget=6,
        cut_after=5,
        prefix_mode="reuse",
    )
    be = RecordingBackend(ignore=True)
    m = generate_corpus(cfg, backend=be, progress=False)
    assert m.counts["forks_same_at_fork_turn"] == forks_per_source()
    # wrap-up at the budget (6 turns) for both agents, cut 5 turns later
    for r in be.requests:
        wraps = [i for i, x in enumerate(r.messages) if x["content"] == prompts.render("wrap_up")]
        assert bool(wraps) == (r.turn_index >= 6)
    assert all(len(r["turns"]) <= 11 for r in _records(out))


def test_backend_registry():
    be = get_backend("template")
    assert be.name == "template" and be.uses_messages is False
    with pytest.raises(ValueError, match="unknown backend"):
        get_backend("nope")


def test_code_version_follows_the_backend_registry():
    """code_version hashes the module (or package) the registry names for a backend: registering a
    backend is all it takes, and a backend not in the registry hashes the engine-side code only."""
    import generation.backends as backends
    from generation.engine.version import ENGINE_CODE, backend_code_files, code_files, code_version

    template = backend_code_files("template")
    assert {p.name for p in template} >= {"__init__.py", "planners.py", "backend.py"}  # the whole package
    assert [p.name for p in backend_code_files("openai")] == ["openai_backend.py"]
    assert backend_code_files("not-registered") == []
    assert code_files("not-registered") == code_files("template")[: -len(template)]
    assert ENGINE_CODE[0] == "engine/*.py"
    versions = {code_version(name) for name in backends.BACKENDS}
    assert len(versions) == len(backends.BACKENDS)  # each backend's code shows in its records' version
    backends.register("template2", "generation.backends.template:TemplateBackend")
    try:  # the registry is read-only: generation.backends.register is the one way to add a backend
        assert code_version("template2") == code_version("template")
    finally:
        backends.unregister("template2")


def test_every_hallucination_type_has_a_planner():
    """Every registered type has a planner and variants (a built-in type's module names both)."""
    from generation.backends.template import Planner, planner_for
    from generation.types.sspc import SSPC_PLANS, SSPC_STRATEGIES

    assert all(isinstance(planner_for(h), Planner) for h in taxonomy.names())
    assert set(SSPC_PLANS) == set(SSPC_STRATEGIES)
    assert set(load_variants().types) == set(taxonomy.names())


def test_generation_errors_share_one_base():
    from dialfork_dataset.errors import CollectedErrors
    from generation.errors import GenerationError, PromptError, UnknownBackendError, VariantError

    for cls in (PromptError, UnknownBackendError, VariantError):
        assert (
            issubclass(cls, GenerationError)
            and issubclass(cls, CollectedErrors)
            and issubclass(cls, ValueError)
        )
    with pytest.raises(UnknownBackendError) as e:
        get_backend("nope")
    assert e.value.errors == [str(e.value)]


def test_cli_and_distributed_do_not_import_each_other():
    """The options both command lines share live in generation.options, which imports neither."""
    import ast
    import inspect

    import generation.distributed
    import generation.options

    def imported(mod):
        tree = ast.parse(inspect.getsource(mod))
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}

    assert not imported(generation.options) & {"cli", "distributed"}
    assert "cli" not in imported(generation.distributed)


def test_every_star_task_simulates_and_forks(tmp_path, star_dir):
    out = tmp_path / "all"
    m = generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(out), per_task=1, seed=11), progress=False
    )
    assert len(m.counts["per_task"]) == 24
    recs = _records(out)
    conf = [r for r in recs if r["hallucination_type"] is None]
    assert len(conf) == m.counts["total"]["kept"] >= 22
    for r in conf:
        texts = [t["text"] for t in r["turns"]]
        assert not any("{" in t or "}" in t for t in texts), r["dialogue_id"]
        # the task's outcome is reached: a closing turn ends the dialogue
        assert r["turns"][-1]["speaker"] in ("system", "user")
    assert m.counts["forks_same_at_fork_turn"] == 0


def test_plan_units_selection(star_dir):
    from dialfork_dataset.star import StarCorpus
    from generation.engine import plan_units

    c = StarCorpus(star_dir)
    cfg = GenerationConfig(
        star=str(star_dir), out="unused", tasks=("weather", "bank_balance"), per_task=5, happy_only=True
    )
    units = plan_units(c, cfg)
    assert [u.task for u in units] == ["bank_balance"] * 5 + ["weather"] * 5
    assert all(u.scenario.happy and not u.scenario.multitask for u in units)
    ids = [int(u.scenario.scenario_id) for u in units[:5]]
    assert ids == sorted(ids)
    assert [u.ordinal for u in units] == list(range(10))
    all_weather = plan_units(c, GenerationConfig(star=str(star_dir), out="x", tasks=("weather",)))
    assert len(all_weather) == len(c.scenarios_for("weather")) == 222
    own = plan_units(
        c, GenerationConfig(star=str(star_dir), out="x"), scenarios=c.scenarios_for("trivia")[:3]
    )
    assert [u.unit_id for u in own] == [f"trivia-{s.scenario_id}" for s in c.scenarios_for("trivia")[:3]]
    assert GenerationConfig(star="s", out="o", tasks="weather").check()


def test_workers_refused_for_llm_backends(tmp_path, star_dir):
    out = tmp_path / "w"
    with pytest.raises(GenerationError, match="worker processes are for the template backend"):
        generate_corpus(_cfg(star_dir, out, workers=2), backend=RecordingBackend(), progress=False)
    assert not out.exists()
