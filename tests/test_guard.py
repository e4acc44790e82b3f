"""The in-process guardrail (dialfork_metrics.guard): Monitor, Session, Verdict. Equivalence with the
Task 3 streaming prediction on synthetic embeddings (every detector, several orders) and on a STAR
template corpus with the packaged MiniLM; exact state round trips; the monitor file format; attacks
on restored states and monitor files."""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest

from dialfork_dataset.forks import fork_turns
from dialfork_dataset.taxonomy import forks_per_source
from dialfork_metrics.guard import Monitor, MonitorFileError, Verdict

D = 16


def _units(rng, n):
    x = rng.normal(size=(n, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


_proto = np.random.default_rng(7)
SYS, USR, OFF = _units(_proto, 6), _units(_proto, 6), _units(_proto, 4)


def _unit(v):
    return v / np.linalg.norm(v)


def _dialogue(rng, name, fork_k=None):
    """(record, embeddings): a walk over 6 steps (next .7, skip .2, repeat .1); from the fork turn on,
    system turns are off-workflow; now and then two user turns in a row (user turns can raise alarms)."""
    i, steps = 0, [0]
    while i < 5:
        u = rng.random()
        i = min(5, i + 1 if u < 0.7 else i + 2 if u < 0.9 else i)
        steps.append(i)
    fork_at = None if fork_k is None else fork_turns(len(steps))[fork_k - 1]
    turns, emb = [], []
    for k, s in enumerate(steps, 1):
        for _ in range(1 + (rng.random() < 0.15)):
            turns.append({"speaker": "user", "text": f"user {s}"})
            emb.append(_unit(USR[s] + 0.1 * rng.normal(size=D) / np.sqrt(D)))
        off = fork_at is not None and k >= fork_at
        turns.append({"speaker": "system", "text": f"system {'off' if off else 'on'} {s}"})
        emb.append(_unit((OFF[rng.integers(4)] if off else SYS[s]) + 0.1 * rng.normal(size=D) / np.sqrt(D)))
    rec = {
        "dialogue_id": name,
        "task": "synthetic",
        "turns": turns,
        "hallucination_type": None if fork_at is None else "SSPC",
    }
    return rec, np.stack(emb)


def _corpus(seed, n_conf, n_fork=0):
    rng = np.random.default_rng(seed)
    out = [_dialogue(rng, f"c{seed}-{i}") for i in range(n_conf)]
    out += [_dialogue(rng, f"f{seed}-{i}", fork_k=1 + i % 4) for i in range(n_fork)]
    return [r for r, _ in out], [e for _, e in out]


TRAIN, TRAIN_E = _corpus(0, 60)
TEST, TEST_E = _corpus(1, 25, 50)


def _fit(name="ss+nc", order=6, **kw):
    return Monitor.fit(TRAIN, detector=name, encoder=None, order=order, embeddings=TRAIN_E, **kw)


@pytest.fixture(scope="module")
def monitors():
    return {(n, o): _fit(n, o) for n in ("it", "ss", "it+nc", "ss+nc") for o in (1, 2, 6)}


def _observe_all(mon, rec, emb, state_every=None):
    s = mon.session()
    out = []
    for t, e in zip(rec["turns"], emb):
        if state_every is not None:
            s = mon.session(json.loads(json.dumps(s.state())))
        out.append(s.observe(t["speaker"], t["text"], embedding=e))
    return out


# -- equivalence with Task 3 -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["it", "ss", "it+nc", "ss+nc"])
@pytest.mark.parametrize("order", [1, 2, 6])
def test_first_alarm_equals_task3_streaming_prediction(monitors, name, order):
    mon = monitors[(name, order)]
    preds = mon.detector.predict_many(TEST, embeddings=TEST_E)
    n_alarm = 0
    for rec, emb, pred in zip(TEST, TEST_E, preds):
        verdicts = _observe_all(mon, rec, emb)
        first = next((v for v in verdicts if v.alarm), None)
        assert (first.first_alarm if first else None) == pred, rec["dialogue_id"]
        n_alarm += pred is not None
        if first is not None:
            assert first.raised
            if first.speaker == "system":  # raised by a system turn: that very turn is the prediction
                assert first.system_turn == pred
            else:  # raised by a user turn: the latest system turn before it (1 if none), SPEC 8
                assert first.system_turn is None and pred == max(
                    1, sum(v.speaker == "system" for v in verdicts[: first.turn])
                )
    assert n_alarm < len(TEST)
    if order > 1:  # a unigram model cannot see order; with context the comparison sees both outcomes
        assert n_alarm > 0


def test_verdict_fields_and_sticky_alarm(monitors):
    mon = monitors[("ss+nc", 6)]
    for rec, emb in zip(TEST, TEST_E):
        vs = _observe_all(mon, rec, emb)
        assert [v.turn for v in vs] == list(range(1, len(vs) + 1))
        sys_idx = [v.system_turn for v in vs if v.speaker == "system"]
        assert sys_idx == list(range(1, len(sys_idx) + 1))
        assert all(v.system_turn is None for v in vs if v.speaker == "user")
        assert vs[0].score is None  # SS: no jump into the first turn
        assert all(v.threshold == mon.detector.threshold_ for v in vs)
        seen = None
        for v in vs:
            if seen is not None:
                assert v.alarm and v.first_alarm == seen
            elif v.alarm:
                seen = v.first_alarm
            assert v.raised == (v.score is not None and v.score > v.threshold)
    with pytest.raises(AttributeError):
        vs[0].alarm = True  # frozen
    assert Verdict.from_dict(json.loads(json.dumps(vs[-1].to_dict()))) == vs[-1]


@pytest.mark.parametrize("gamma", [0.0, 1.0])
def test_it_score_is_the_weighted_p_and_alarm_below_threshold(monitors, gamma):
    from dialfork_metrics.task3.streaming import system_turn_index, turn_scores

    mon = _fit("it", 2, position_weight=gamma)
    assert mon.detector.position_weight == gamma
    vs = _observe_all(mon, TEST[30], TEST_E[30])
    p = mon.detector.turn_probabilities([TEST[30]], embeddings=[TEST_E[30]])[0]
    score = turn_scores(p, "it", system_turn_index(TEST[30]["turns"]), gamma)  # p_t / j^gamma
    assert [v.score for v in vs] == score.tolist()
    if gamma == 0:
        assert score.tolist() == p.tolist()
    assert [v.raised for v in vs] == (score < mon.detector.threshold_).tolist()


def test_position_weight_enters_the_fingerprint_only_when_set(monitors):
    import copy

    from dialfork_metrics.guard.monitor import detector_fingerprint

    det = monitors[("ss+nc", 6)].detector
    zero, one, old = copy.deepcopy(det), copy.deepcopy(det), copy.deepcopy(det)
    zero.position_weight_, one.position_weight_ = 0.0, 1.0  # the fitted value the fingerprint covers
    assert detector_fingerprint(zero) != detector_fingerprint(one)
    # a gamma = 0 detector keeps the fingerprint of a version whose config had no such key
    cfg = {k: v for k, v in zero.config().items() if k != "position_weight"}
    old.config = lambda: cfg
    assert detector_fingerprint(zero) == detector_fingerprint(old)
    mon = _fit("ss+nc", 6, position_weight=1.0)
    preds = mon.detector.predict_many(TEST, embeddings=TEST_E)
    for rec, emb, pred in zip(TEST, TEST_E, preds):
        first = next((v for v in _observe_all(mon, rec, emb) if v.alarm), None)
        assert (first.first_alarm if first else None) == pred


# -- state -----------------------------------------------------------------------------------------
def test_state_round_trip_is_exact_at_every_turn(monitors):
    for key in (("ss+nc", 6), ("it", 2), ("ss", 1)):
        mon = monitors[key]
        for rec, emb in zip(TEST[::5], TEST_E[::5]):
            assert _observe_all(mon, rec, emb, state_every=1) == _observe_all(mon, rec, emb)


def test_state_is_constant_size():
    mon = _fit("ss+nc", 3)
    s = mon.session()
    rng = np.random.default_rng(3)
    sizes = []
    for i in range(400):
        sp = "user" if i % 2 == 0 else "system"
        s.observe(sp, "x", embedding=_unit(rng.normal(size=D)))
        st = s.state()
        assert len(st["context"]) == min(i + 1, 2)
        sizes.append(len(json.dumps({k: v for k, v in st.items() if k not in ("turn", "system_turn")})))
    assert s.turn == 400 and s.system_turn == 200
    assert max(sizes[5:]) - min(sizes[5:]) <= 40  # only digits of numbers vary, never a growing history


@pytest.mark.parametrize(
    "patch,msg",
    [
        ({"monitor": "0" * 64}, "another monitor"),
        ({"format": "x"}, "not a guard session state"),
        ({"version": 99}, "version"),
        ({"context": [10**6]}, "node ids"),
        ({"context": [True]}, "node ids"),
        ({"turn": -1}, "turn"),
        ({"turn": 1.5}, "turn"),
        ({"system_turn": 10**6}, "system_turn"),
        ({"prev_p": 2.0}, "prev_p"),
        ({"prev_p": None}, "prev_p"),
        ({"first_alarm": 0}, "first_alarm"),
        ({"first_alarm": 10**6}, "first_alarm"),
    ],
)
def test_restoring_a_bad_state_is_refused(monitors, patch, msg):
    mon = monitors[("ss+nc", 6)]
    s = mon.session()
    for t, e in list(zip(TEST[0]["turns"], TEST_E[0]))[:4]:
        s.observe(t["speaker"], t["text"], embedding=e)
    st = {**s.state(), **patch}
    with pytest.raises(ValueError, match=msg):
        mon.session(st)


def test_restoring_garbage_is_refused(monitors):
    mon = monitors[("ss+nc", 6)]
    for bad in ("{not json", "[]", 42):
        with pytest.raises(ValueError):
            mon.session(bad)
    other = _fit("ss+nc", 6, false_alarm_rate=0.2)
    with pytest.raises(ValueError, match="another monitor"):
        other.session(mon.session().state())


def test_bad_turns_are_refused_and_leave_the_session_unchanged(monitors):
    mon = monitors[("ss+nc", 6)]
    s = mon.session()
    s.observe("user", "hello", embedding=TEST_E[0][0])
    before = s.state()
    for sp, text, emb in [
        ("assistant", "hi", TEST_E[0][1]),
        ("system", "   ", TEST_E[0][1]),
        ("system", 3, TEST_E[0][1]),
        ("system", "hi", np.ones(D + 1)),
        ("system", "hi", np.full(D, np.nan)),
    ]:
        with pytest.raises(ValueError):
            s.observe(sp, text, embedding=emb)
        assert s.state() == before
    with pytest.raises(ValueError, match="no encoder"):
        s.observe("system", "hi")


# -- fitting ----------------------------------------------------------------------------------------
def test_fit_accepts_turn_lists_records_and_datasets():
    import datasets

    a = _fit("ss+nc", 6)
    b = Monitor.fit([r["turns"] for r in TRAIN], encoder=None, embeddings=TRAIN_E)
    c = Monitor.fit(datasets.Dataset.from_list(TRAIN), encoder=None, embeddings=TRAIN_E)
    assert a.fingerprint == b.fingerprint == c.fingerprint
    assert a.task == c.task == "synthetic" and b.task is None


def test_fit_refuses_bad_input():
    with pytest.raises(ValueError, match="one task"):
        Monitor.fit([TRAIN[0], {**TRAIN[1], "task": "other"}], encoder=None, embeddings=TRAIN_E[:2])
    with pytest.raises(ValueError, match="streaming detector"):
        Monitor.fit(TRAIN, detector="last", encoder=None, embeddings=TRAIN_E)
    with pytest.raises(TypeError, match="single dialogue"):
        Monitor.fit(TRAIN[0]["turns"], encoder=None)
    with pytest.raises(ValueError, match="fork"):
        Monitor.fit(TEST[-1:], encoder=None, embeddings=TEST_E[-1:])


# -- the monitor file --------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path, monitors):
    mon = monitors[("ss+nc", 6)]
    path = mon.save(tmp_path / "m" / "weather.monitor")
    assert sorted(p.name for p in path.parent.iterdir()) == ["weather.monitor"]  # no temp files left
    back = Monitor.load(path)
    assert back.fingerprint == mon.fingerprint and back.task == "synthetic"
    assert back.detector.threshold_ == mon.detector.threshold_
    for rec, emb in zip(TEST[:20], TEST_E[:20]):
        assert _observe_all(back, rec, emb) == _observe_all(mon, rec, emb)
    # a state saved with one copy restores into the other
    s = mon.session()
    s.observe("user", "x", embedding=TEST_E[0][0])
    assert back.session(s.state()).state() == s.state()
    # overwrite is atomic and loadable
    monitors[("it", 2)].save(path)
    assert Monitor.load(path).detector.name == "it"


def _rewrite(src, dst, meta_patch=None, drop=None, extra=None, tamper=None):
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for n in z.namelist():
            if n == drop:
                continue
            data = z.read(n)
            if n == "monitor.json" and meta_patch:
                data = json.dumps({**json.loads(data), **meta_patch}).encode()
            if n == tamper:
                data = tamper_fn(data)
            out.writestr(n, data)
        for n, data in (extra or {}).items():
            out.writestr(n, data)
    return dst


def tamper_fn(data: bytes) -> bytes:
    import io

    with np.load(io.BytesIO(data)) as z:
        arrays = {k: z[k] for k in z.files}
    key = next(k for k in arrays if k.startswith("centroids_"))
    arrays[key] = arrays[key] * 0.5
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_load_refuses_bad_files_with_a_clear_message(tmp_path, monitors):
    good = monitors[("ss+nc", 6)].save(tmp_path / "good.monitor")
    with pytest.raises(MonitorFileError, match="no such monitor file"):
        Monitor.load(tmp_path / "missing.monitor")
    (tmp_path / "text.monitor").write_text("hello")
    with pytest.raises(MonitorFileError, match="not a DialFork monitor file"):
        Monitor.load(tmp_path / "text.monitor")
    cases = {
        "newer.monitor": ({"meta_patch": {"format_version": 99}}, "version 99 .*upgrade dialfork"),
        "zero.monitor": ({"meta_patch": {"format_version": 0}}, "version 0"),
        "other.monitor": ({"meta_patch": {"format": "something-else"}}, "not a DialFork monitor file"),
        "nometa.monitor": ({"drop": "monitor.json"}, "no monitor.json"),
        "slip.monitor": ({"extra": {"detector/../../evil.json": "{}"}}, "unexpected member"),
        "tampered.monitor": ({"tamper": "detector/arrays.npz"}, "fingerprint"),
        "noarrays.monitor": ({"drop": "detector/arrays.npz"}, "corrupt detector"),
    }
    for name, (kw, msg) in cases.items():
        with pytest.raises(MonitorFileError, match=msg):
            Monitor.load(_rewrite(good, tmp_path / name, **kw))
    assert not (tmp_path.parent / "evil.json").exists()


def test_truncated_or_corrupt_monitor_files_say_so_and_how_to_remake_them(
    template_corpus, tmp_path, monitors, capsys
):
    from dialfork_metrics.guard.__main__ import main

    data = monitors[("ss+nc", 6)].save(tmp_path / "good.monitor").read_bytes()
    (tmp_path / "cut.monitor").write_bytes(data[: len(data) // 2])  # a copy cut short
    (tmp_path / "empty.monitor").write_bytes(b"")
    flipped = bytearray(data)
    at = data.index(b"monitor.json") + 40  # inside the first member's compressed bytes
    flipped[at] ^= 0xFF
    (tmp_path / "flipped.monitor").write_bytes(bytes(flipped))
    for name in ("cut.monitor", "empty.monitor", "flipped.monitor"):
        with pytest.raises(MonitorFileError) as e:
            Monitor.load(tmp_path / name)
        msg = str(e.value)
        assert msg.startswith(f"{tmp_path / name}: the monitor file is truncated or corrupt"), msg
        assert "Monitor.fit(...).save(path)" in msg and "python -m dialfork_metrics.guard fit" in msg
        assert "File is not a zip file" not in msg
    assert (
        main(
            [
                "replay",
                "--monitor",
                str(tmp_path / "cut.monitor"),
                "--data",
                str(template_corpus),
                "--task",
                "weather",
            ]
        )
        == 2
    )
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and "cut.monitor: the monitor file is truncated or corrupt" in err[0]


# -- end to end: STAR template corpus, packaged MiniLM -----------------------------------------------------
@pytest.mark.slow
def test_equivalence_on_every_dialogue_of_a_template_corpus(template_corpus, tmp_path):
    from dialfork_metrics.task3 import load_examples

    # one task of the shared template corpus (its 4 test sources and their forks: 68 dialogues): a small template corpus whose
    # every dialogue is replayed turn by turn, each turn encoded alone
    task = "weather"
    train = [e for e in load_examples(template_corpus, "train") if e["task"] == task]
    test = [e for e in load_examples(template_corpus, "test") if e["task"] == task]
    # fit on every conformant dialogue of the task (train and test): with 4 train dialogues everything
    # alarms; the equivalence must be seen on dialogues with and without an alarm
    mon = Monitor.fit(
        [e for e in train + test if e["hallucination_type"] is None], detector="ss+nc", encoder="minilm"
    )
    verdicts = [mon.replay(d) for d in test]  # turn by turn, each turn encoded once, alone
    preds = mon.detector.predict_many(test)  # the Task 3 streaming prediction of the same detector
    firsts = [next((v.first_alarm for v in vs if v.alarm), None) for vs in verdicts]
    assert firsts == preds
    assert len(test) == 4 * (1 + forks_per_source()) and 0 < sum(p is not None for p in preds) < len(test)
    # the saved and reloaded monitor (a fresh encoder) gives the same verdicts
    back = Monitor.load(mon.save(tmp_path / f"{task}.monitor"))
    for d, vs in zip(test[:3], verdicts[:3]):
        assert back.replay(d) == vs


# -- command line ---------------------------------------------------------------------------------
def test_cli_bad_input_exits_2_with_one_line(template_corpus, tmp_path, capsys):
    from dialfork_metrics.guard.__main__ import main

    assert (
        main(["fit", "--data", str(template_corpus), "--task", "no_such_task", "--out", str(tmp_path / "m")])
        == 2
    )
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]  # not datasets' bars
    assert len(err) == 1 and "no_such_task" in err[0] and "weather" in err[0]
    assert (
        main(
            [
                "replay",
                "--monitor",
                str(tmp_path / "missing.monitor"),
                "--data",
                str(template_corpus),
                "--task",
                "weather",
            ]
        )
        == 2
    )
    assert "no such monitor file" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_replay_fits_saves_and_prints_the_first_alarm(template_corpus, tmp_path, capsys):
    from dialfork_metrics.guard.__main__ import main
    from dialfork_metrics.task3 import load_examples

    path = tmp_path / "guard" / "weather.monitor"
    assert (
        main(["replay", "--fit", "--data", str(template_corpus), "--task", "weather", "--monitor", str(path)])
        == 0
    )
    out = capsys.readouterr().out
    assert path.is_file() and Monitor.load(path).task == "weather"
    assert "(conformant" in out and "(fork " in out and out.count("first alarm: ") == 2
    # the printed first alarms are the detector's Task 3 predictions
    mon = Monitor.load(path)
    test = {e["dialogue_id"]: e for e in load_examples(template_corpus, "test")}
    shown = re.findall(r"^(\S+) \(", out, flags=re.M)
    printed = re.findall(r"first alarm: (none|system turn \d+)", out)
    for did, p in zip(shown, printed):
        mon.replay(
            test[did]
        )  # each turn encoded alone (as the CLI did); predict then reads the same embeddings
        pred = mon.detector.predict(test[did])
        assert p == ("none" if pred is None else f"system turn {pred}")


def test_the_cli_names_the_missing_extra(monkeypatch, capsys):
    """Without the guard extra, ``python -m dialfork_metrics.guard`` says what to install instead of a
    traceback from the web stack's import."""
    import sys

    from dialfork_metrics.guard.__main__ import main

    monkeypatch.delitem(sys.modules, "dialfork_metrics.guard.proxy", raising=False)
    monkeypatch.setitem(sys.modules, "fastapi", None)  # as if fastapi were not installed
    assert main(["serve", "--help"]) == 2
    err = capsys.readouterr().err
    assert (
        "the guard needs the 'guard' extra" in err
        and "'fastapi'" in err
        and "pip install 'dialfork[guard]'" in err
    )


def test_monitor_files_load_through_the_detector_registry(tmp_path, monitors):
    """Issue 52 item 2: the guard loads a saved detector through the registry entry of its format, and
    refuses one whose entry has guard=False (a baseline here) with what is wrong."""
    from dialfork_metrics.task3.detectors import saved_detector_spec

    good = monitors[("ss", 2)].save(tmp_path / "good.monitor")
    assert Monitor.load(good).fingerprint == monitors[("ss", 2)].fingerprint
    with zipfile.ZipFile(good) as z:
        z.extract("detector/config.json", tmp_path)
    assert saved_detector_spec(tmp_path / "detector").guard
    baseline = json.dumps({"format": "dialfork-task3-baseline", "name": "first"})
    bad = _rewrite(good, tmp_path / "baseline.monitor", drop="detector/config.json")
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("detector/config.json", baseline)
    with pytest.raises(MonitorFileError, match=r"registry entry has guard=False"):
        Monitor.load(bad)
    # a detector file of any name is the detector's own (a registered detector may write more files)
    extra = _rewrite(good, tmp_path / "extra.monitor", extra={"detector/notes.txt": "x"})
    assert Monitor.load(extra).fingerprint == monitors[("ss", 2)].fingerprint
