"""The guard (issues 17, 46): in-process cost per turn, the default monitor's latency per turn, proxy
overhead, a concurrent load run and a crash run, all measured in one run on a template corpus with the
packaged MiniLM. The monitor is fitted on the first ``--train-dialogues`` (10) train dialogues of the
task; ``--detector`` (default: ``Monitor.fit``'s own default, the workflow-aware ``wf``) picks another.

1. ``in-process``: ``session.observe(speaker, text)`` per turn that the monitor encodes (every turn; system
   turns only for ``wf``; encoder cache cleared, so every turn is really encoded) vs encoding that turn alone with the same encoder (``Encoder.encode([text])``, fresh
   cache, same model), interleaved turn by turn. Targets: median ratio <= 1.5, p99 ratio <= 3. Also the
   detector step alone (precomputed embeddings) at turns 1-20 vs 381-400 of one long session: a turn
   costs the same early or late.
1b. ``latency``: ``session.observe`` per turn of the default monitor, every turn new to the encoder cache,
   with the encoder's defaults (one intra-op thread for a small job, ``Encoder.small_job_threads``) vs
   the previous path (torch's thread count for every job, ``small_job_threads=None``), interleaved turn
   by turn in random order on the same texts and the same model: p50, p95, p99 and the ratio previous /
   default. ``--busy N`` keeps N other processes spinning meanwhile (issue 46 measured with one).
   ``--only-latency`` stops after this step.
2. ``overhead``: the proxy (``serve``, annotate mode) vs calling the fake upstream directly with the same
   request, sequentially; overhead = proxied time - the proxy's encoding time (``Server-Timing``) -
   direct time, on the load run's dialogues (conversation ids ``overhead/...``; their texts are then in
   the proxy's encoder cache). ``encode`` is the encoding the response waited for: the proxy encodes a
   request's history turns while the upstream answers. Target: median <= 10 ms.
3. ``load``: ``--conversations`` (50) conversations of ``--turns`` (20) turns (the conformant dialogues
   and forks of as few sources as possible, so they share openings) played concurrently on loopback; every stored turn and every reply's verdict checked against the in-process Monitor: zero
   lost, duplicated or misattributed turns.
4. ``crash``: the same load on a fresh database, the proxy killed with SIGKILL after ``--kill-at`` of the
   replies and restarted on the same database and port; its stored verdicts must equal the uninterrupted
   run's (step 3) and the in-process Monitor's.

    python benchmarks/bench_guard.py [--per-task 30] [--conversations 50] [--turns 20] [--json OUT]
    python benchmarks/bench_guard.py --only-latency --busy 1 --json benchmarks/results/guard_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pct(xs, q):
    import numpy as np

    return float(np.percentile(np.asarray(xs, dtype=float), q))


def in_process(monitor_path, dialogues, n_turns: int, seed: int = 0) -> dict:
    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.guard import Monitor

    mon = Monitor.load(monitor_path)
    mon.encode("warm-up")
    menc = mon.detector.get_encoder()
    enc = Encoder("minilm", show_progress=False, model=menc.model)  # same encoder, own cache
    enc.encode(["warm-up"])
    rng = random.Random(seed)
    t_obs, t_enc, pos = [], [], []
    for d in dialogues:
        s = mon.session()
        for t in d["turns"]:
            if mon.workflow_aware and t["speaker"] != "system":
                s.observe(t["speaker"], t["text"])  # wf encodes system turns only: no encoding to compare
                continue
            menc.clear_cache()
            enc.clear_cache()
            first = rng.random() < 0.5
            if first:
                a = time.perf_counter()
                enc.encode([t["text"]])
                te = time.perf_counter() - a
            a = time.perf_counter()
            s.observe(t["speaker"], t["text"])
            to = time.perf_counter() - a
            if not first:
                a = time.perf_counter()
                enc.encode([t["text"]])
                te = time.perf_counter() - a
            t_obs.append(to)
            t_enc.append(te)
            pos.append(s.turn)
            if len(t_obs) >= n_turns:
                break
        if len(t_obs) >= n_turns:
            break
    ratios = [o / e for o, e in zip(t_obs, t_enc)]
    # the detector alone over one long session: the step at turns 1-20 vs 381-400
    E = [mon.encode(t["text"]) for t in dialogues[0]["turns"]]
    sp = [t["speaker"] for t in dialogues[0]["turns"]]
    s = mon.session()
    step = []
    for i in range(400):
        a = time.perf_counter()
        s.observe(sp[i % len(sp)], "x", embedding=E[i % len(E)])
        step.append(time.perf_counter() - a)
    out = {
        "turns": len(t_obs),
        "observe_ms_median": 1000 * statistics.median(t_obs),
        "encode_ms_median": 1000 * statistics.median(t_enc),
        "observe_ms_p99": 1000 * pct(t_obs, 99),
        "encode_ms_p99": 1000 * pct(t_enc, 99),
        "ratio_median": statistics.median(t_obs) / statistics.median(t_enc),
        "ratio_p99": pct(t_obs, 99) / pct(t_enc, 99),
        "per_turn_ratio_median": statistics.median(ratios),
        "per_turn_ratio_p99": pct(ratios, 99),
        "step_us_turns_1_20": 1e6 * statistics.median(step[:20]),
        "step_us_turns_381_400": 1e6 * statistics.median(step[380:]),
    }
    return out


def latency(monitor_path, dialogues, n_turns: int, seed: int = 0) -> dict:
    """Per-turn ``observe`` of the monitor at its encoder's defaults vs the previous path (torch's thread
    count for every job), interleaved on the same turns, every turn new to the encoder cache."""
    import torch

    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.guard import Monitor

    default = Monitor.load(monitor_path)
    enc = default.detector.get_encoder()
    # the previous path: the same model, its own cache, torch's thread count for a single text too
    prev_enc = Encoder(enc.name, show_progress=False, model=enc.model, small_job_threads=None)
    previous = Monitor.load(monitor_path, encoder=prev_enc)
    for m in (default, previous):
        m.encode("warm-up")
    rng = random.Random(seed)
    times: dict[str, list[float]] = {"default": [], "previous": []}
    system: list[bool] = []  # a wf monitor encodes system turns only (user turns are read for slots)
    n = 0
    for d in dialogues:
        sessions = {"default": default.session(), "previous": previous.session()}
        for t in d["turns"]:
            order = ["default", "previous"]
            rng.shuffle(order)
            for k in order:
                enc.clear_cache()
                prev_enc.clear_cache()
                a = time.perf_counter()
                sessions[k].observe(t["speaker"], t["text"])
                times[k].append(time.perf_counter() - a)
            system.append(t["speaker"] == "system")
            n += 1
            if n >= n_turns:
                break
        if n >= n_turns:
            break
    out: dict = {
        "detector": "wf" if default.workflow_aware else default.detector.name,
        "turns": n,
        "torch_threads": torch.get_num_threads(),
        "small_job_threads": enc.small_job_threads,
    }
    out["system_turns"] = sum(system)
    for k, xs in times.items():
        sys_xs = [x for x, s in zip(xs, system) if s]
        for q in (50, 95, 99):
            out[f"{k}_ms_p{q}"] = 1000 * pct(xs, q)
            out[f"{k}_system_ms_p{q}"] = 1000 * pct(sys_xs, q)
    for q in (50, 95, 99):
        out[f"ratio_p{q}"] = out[f"previous_ms_p{q}"] / out[f"default_ms_p{q}"]
        out[f"ratio_system_p{q}"] = out[f"previous_system_ms_p{q}"] / out[f"default_system_ms_p{q}"]
    return out


def _busy(n: int) -> list:
    """``n`` processes that keep a core busy each (stopped by the caller)."""
    import subprocess

    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def overhead(
    proxy_url: str,
    upstream_url: str,
    dialogues,
    n: int,
    prefix: str = "overhead/",
    proxy_pid: int | None = None,
) -> dict:
    import httpx

    from dialfork_metrics.guard.loadgen import turns_until_last_system

    over, direct, proxied, enc = [], [], [], []
    with httpx.Client(timeout=120) as c:
        c.post(
            upstream_url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "warm"}]}
        )
        cpu0 = _cpu_s(proxy_pid) if proxy_pid else None
        for d in dialogues:
            msgs = []
            for t in turns_until_last_system(d):
                if t["speaker"] == "user":
                    msgs.append({"role": "user", "content": t["text"]})
                    continue
                body = {"model": "m", "messages": list(msgs)}
                h = {"X-Fake-Dialogue": d["dialogue_id"], "X-Conversation-Id": prefix + d["dialogue_id"]}
                a = time.perf_counter()
                r1 = c.post(upstream_url + "/v1/chat/completions", json=body, headers=h)
                t_direct = time.perf_counter() - a
                a = time.perf_counter()
                r2 = c.post(proxy_url + "/v1/chat/completions", json=body, headers=h)
                t_proxy = time.perf_counter() - a
                assert r1.status_code == r2.status_code == 200, r2.text
                timing = dict(part.strip().split(";dur=") for part in r2.headers["server-timing"].split(","))
                e = float(timing["encode"]) / 1000
                direct.append(t_direct)
                proxied.append(t_proxy)
                enc.append(e)
                over.append(t_proxy - e - t_direct)
                msgs.append({"role": "assistant", "content": r2.json()["choices"][0]["message"]["content"]})
                if len(over) >= n:
                    break
            if len(over) >= n:
                break
        cpu = (_cpu_s(proxy_pid) - cpu0) / len(over) if proxy_pid else None
    return {
        "requests": len(over),
        "proxy_cpu_ms_per_request": None if cpu is None else 1000 * cpu,
        "overhead_ms_median": 1000 * statistics.median(over),
        "overhead_ms_p90": 1000 * pct(over, 90),
        "overhead_ms_p95": 1000 * pct(over, 95),
        "direct_ms_median": 1000 * statistics.median(direct),
        "proxied_ms_median": 1000 * statistics.median(proxied),
        "encode_ms_median": 1000 * statistics.median(enc),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="doctor_schedule")
    ap.add_argument("--per-task", type=int, default=30, help="scenarios of the generated template corpus")
    ap.add_argument(
        "--train-dialogues", type=int, default=10, help="the monitor is fitted on the first N train dialogues"
    )
    ap.add_argument("--detector", default=None, help="the monitor's detector (default: Monitor.fit's, wf)")
    ap.add_argument(
        "--detector-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of the detector (repeatable; e.g. slot_reader=auto); VALUE read as JSON when it parses",
    )
    ap.add_argument("--latency-turns", type=int, default=400, help="turns of the latency step")
    ap.add_argument(
        "--busy", type=int, default=0, help="processes kept spinning during the latency step (the load)"
    )
    ap.add_argument("--only-latency", action="store_true", help="stop after the latency step")
    ap.add_argument(
        "--star",
        default=os.environ.get(
            "DIALFORK_STAR_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "star")
        ),
    )
    ap.add_argument("--conversations", type=int, default=50)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--in-process-turns", type=int, default=200)
    ap.add_argument("--overhead-requests", type=int, default=100)
    ap.add_argument(
        "--kill-at", type=float, default=0.4, help="share of the crash run's replies before SIGKILL"
    )
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--only-overhead", action="store_true", help="stop after the proxy overhead step")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    from dialfork_dataset.jsonl import write_json_atomic, write_jsonl
    from dialfork_metrics.guard import Monitor
    from dialfork_metrics.guard.loadgen import (
        ServerProcess,
        check_against_monitor,
        play,
        turns_until_last_system,
    )
    from dialfork_metrics.guard.store import Store
    from dialfork_metrics.task3 import load_examples
    from generation.engine import GenerationConfig, generate_corpus

    work = Path(tempfile.mkdtemp(prefix="bench_guard_"))
    generate_corpus(
        GenerationConfig(
            star=args.star, out=str(work / "corpus"), tasks=(args.task,), per_task=args.per_task
        ),
        progress=False,
    )
    train, test = load_examples(work / "corpus", "train"), load_examples(work / "corpus", "test")
    if len(train) < args.train_dialogues:
        raise SystemExit(f"only {len(train)} train dialogues; raise --per-task")
    train = sorted(train, key=lambda d: d["dialogue_id"])[: args.train_dialogues]
    t = time.perf_counter()
    options = {}
    for kv in args.detector_option:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--detector-option {kv!r}: expected KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    mon = Monitor.fit(
        train, detector=args.detector, encoder="minilm", workflow=f"star:{args.star}", **options
    )
    path = mon.save(work / f"{args.task}.monitor")
    print(
        f"corpus: {len(train)} train, {len(test)} test dialogues; fitted {mon!r} in {time.perf_counter() - t:.1f} s"
    )
    long_enough = [d for d in test if len(turns_until_last_system(d, args.turns)) == args.turns]
    if len(long_enough) < args.conversations:
        raise SystemExit(
            f"only {len(long_enough)} test dialogues have {args.turns} playable turns; raise --per-task"
        )
    # the conformant dialogues and forks of as few sources as possible: forks share their opening with
    # their source, so conversations share turns (as users of one agent do) and the run stays short
    by_source: dict[str, list] = {}
    for d in long_enough:
        src = d["dialogue_id"] if d["hallucination_type"] is None else d["dialogue_id"].rsplit("-", 2)[0]
        by_source.setdefault(src, []).append(d)
    groups = sorted(by_source.values(), key=len, reverse=True)
    conv = [d for g in groups for d in g][: args.conversations]
    random.Random(0).shuffle(conv)
    write_jsonl(work / "dialogues.jsonl", test)
    figures: dict = {
        "task": args.task,
        "detector": "wf" if mon.workflow_aware else mon.detector.name,
        "detector_options": options,
        "train_dialogues": len(train),
        "conversations": args.conversations,
        "turns_per_conversation": args.turns,
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg()[0],
    }

    busy = _busy(args.busy)
    try:
        time.sleep(1 if busy else 0)
        figures["latency"] = la = latency(path, conv, args.latency_turns)
        la["busy_processes"] = args.busy
        la["load_average_after"] = os.getloadavg()[0]
    finally:
        for b in busy:
            b.kill()
            b.wait()
    print(
        f"latency per turn ({la['detector']}, {la['turns']} turns new to the cache, {args.busy} busy "
        f"process(es)): default ({la['small_job_threads']} intra-op thread per small job) p50 "
        f"{la['default_ms_p50']:.2f} ms, p95 {la['default_ms_p95']:.2f} ms, p99 {la['default_ms_p99']:.2f} ms; "
        f"previous ({la['torch_threads']} threads) p50 {la['previous_ms_p50']:.2f} ms, p95 "
        f"{la['previous_ms_p95']:.2f} ms, p99 {la['previous_ms_p99']:.2f} ms; previous / default: p50 "
        f"{la['ratio_p50']:.2f}x, p95 {la['ratio_p95']:.2f}x, p99 {la['ratio_p99']:.2f}x; system turns "
        f"({la['system_turns']}) p50 {la['default_system_ms_p50']:.2f} vs {la['previous_system_ms_p50']:.2f} ms, "
        f"p95 {la['default_system_ms_p95']:.2f} vs {la['previous_system_ms_p95']:.2f} ms"
    )
    if args.only_latency:
        if args.json:
            write_json_atomic(args.json, figures)
        return 0

    figures["in_process"] = ip = in_process(
        path, conv, args.in_process_turns if not args.only_overhead else 5
    )
    print(
        f"in-process: observe {ip['observe_ms_median']:.2f} ms vs encode alone {ip['encode_ms_median']:.2f} ms "
        f"median -> ratio {ip['ratio_median']:.3f} (target <= 1.5); p99 {ip['observe_ms_p99']:.2f} vs "
        f"{ip['encode_ms_p99']:.2f} ms -> ratio {ip['ratio_p99']:.3f} (target <= 3); per-turn ratio median "
        f"{ip['per_turn_ratio_median']:.3f}; detector step {ip['step_us_turns_1_20']:.0f} us at turns 1-20, "
        f"{ip['step_us_turns_381_400']:.0f} us at turns 381-400"
    )

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    up = ServerProcess(
        ["fake-upstream", "--dialogues", work / "dialogues.jsonl", "--port", 0], work, "upstream", env=env
    )
    serve = ["serve", "--upstream", up.url + "/v1", "--monitor", path]
    try:
        px = ServerProcess([*serve, "--db", work / "load.db", "--port", 0], work, "proxy", env=env)
        try:
            figures["overhead"] = ov = overhead(px.url, up.url, conv, args.overhead_requests)
            print(
                f"proxy overhead (excluding encoding): median {ov['overhead_ms_median']:.2f} ms (target <= 10), "
                f"p90 {ov['overhead_ms_p90']:.2f} ms, p95 {ov['overhead_ms_p95']:.2f} ms over {ov['requests']} requests; direct "
                f"{ov['direct_ms_median']:.2f} ms, proxied {ov['proxied_ms_median']:.2f} ms, encoding "
                f"{ov['encode_ms_median']:.2f} ms"
            )
            # the same requests again as new conversations: every text is in the proxy's encoder cache, so
            # the proxy's CPU time per request is its own work (parsing, hashing, SQLite, forwarding)
            figures["overhead_cached"] = oc = overhead(
                px.url, up.url, conv, args.overhead_requests, prefix="overhead-cached/", proxy_pid=px.proc.pid
            )
            print(
                f"proxy overhead, texts cached: median {oc['overhead_ms_median']:.2f} ms, p90 "
                f"{oc['overhead_ms_p90']:.2f} ms, p95 {oc['overhead_ms_p95']:.2f} ms; proxy CPU {oc['proxy_cpu_ms_per_request']:.2f} ms per request"
            )
            if args.only_overhead:
                return 0
            t = time.perf_counter()
            res = play(px.url, conv, concurrency=args.conversations, max_turns=args.turns, retry_for=600)
            wall = time.perf_counter() - t
        finally:
            px.stop()
        ref = Monitor.load(path)
        by_id = {d["dialogue_id"]: d for d in conv}
        counts = check_against_monitor(ref, Store(work / "load.db", ref.fingerprint), res, by_id, args.turns)
        lat = [x for r in res for x in r.latencies]
        figures["load"] = ld = {
            **counts,
            "wall_s": wall,
            "replies_per_s": counts["replies"] / wall,
            "latency_ms_p50": 1000 * pct(lat, 50),
            "latency_ms_p99": 1000 * pct(lat, 99),
            "retries": sum(r.retries for r in res),
            "lost": 0,
            "duplicated": 0,
            "misattributed": 0,
            "equal_to_in_process": True,
        }
        print(
            f"load: {ld['conversations']} conversations x {args.turns} turns = {ld['turns']} turns "
            f"({ld['replies']} requests) in {wall:.1f} s, {ld['replies_per_s']:.1f} req/s, p50 "
            f"{ld['latency_ms_p50']:.0f} ms, p99 {ld['latency_ms_p99']:.0f} ms; 0 lost / duplicated / "
            f"misattributed; every verdict equal to the in-process Monitor's"
        )

        total = counts["replies"]
        done: list[str] = []
        reached = threading.Event()

        def on_reply(c, k):
            done.append(c)
            if len(done) >= int(args.kill_at * total):
                reached.set()

        px = ServerProcess([*serve, "--db", work / "crash.db", "--port", 0], work, "proxy-crash", env=env)
        out: dict = {}
        player = threading.Thread(
            target=lambda: out.setdefault(
                "r",
                play(
                    px.url,
                    conv,
                    concurrency=args.conversations,
                    max_turns=args.turns,
                    retry_for=900,
                    on_reply=on_reply,
                ),
            )
        )
        player.start()
        reached.wait(timeout=1800)
        rc = px.kill9()
        at = len(done)
        t = time.perf_counter()
        px = ServerProcess(
            [*serve, "--db", work / "crash.db", "--port", px.port], work, "proxy-restart", env=env
        )
        restart_s = time.perf_counter() - t
        try:
            player.join()
        finally:
            px.stop()
        crash_res = out["r"]
        counts2 = check_against_monitor(
            ref, Store(work / "crash.db", ref.fingerprint), crash_res, by_id, args.turns
        )
        a, b = Store(work / "load.db", ref.fingerprint), Store(work / "crash.db", ref.fingerprint)
        same = all(
            [(r["turn"], r["speaker"], r["verdict"]) for r in a.conversation("id:" + r0.conversation_id)]
            == [(r["turn"], r["speaker"], r["verdict"]) for r in b.conversation("id:" + r0.conversation_id)]
            for r0 in crash_res
        )
        assert same, "the crash run's verdicts differ from the uninterrupted run's"
        figures["crash"] = cr = {
            **counts2,
            "killed_after_replies": at,
            "exit_code": rc,
            "restart_s": restart_s,
            "client_retries": sum(r.retries for r in crash_res),
            "identical_to_uninterrupted": same,
            "equal_to_in_process": True,
        }
        print(
            f"crash: SIGKILL (exit {rc}) after {at}/{total} replies, restarted in {restart_s:.1f} s, "
            f"{cr['client_retries']} client retries; all {counts2['turns']} turns stored once, verdicts identical "
            f"to the uninterrupted run and to the in-process Monitor"
        )
    finally:
        up.stop()
    figures["targets_met"] = {
        "in_process_median": ip["ratio_median"] <= 1.5,
        "in_process_p99": ip["ratio_p99"] <= 3,
        "proxy_overhead_median": figures["overhead"]["overhead_ms_median"] <= 10,
        "load": True,
        "crash": True,
    }
    print("targets met:", figures["targets_met"])
    if args.json:
        write_json_atomic(args.json, figures)
    return 0 if all(figures["targets_met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
