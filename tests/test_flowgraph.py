"""FlowGraph / FlowKL (SPEC section 7): hand-worked graph, KDE-KL, degenerate sets, bad inputs,
export, and the ``flowkl`` evaluate module against the core."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dialfork_metrics.flowgraph import (
    FlowGraph,
    centroids_from_labels,
    cluster_embeddings,
    flowkl,
    flowkl_from_likelihoods,
    laplace_probabilities,
    nearest_nodes,
    node_confidence,
)
from dialfork_metrics.sdialog_compat import dialog2flow_prune, sdialog_flow_score

# Four orthogonal directions: system nodes A, B; user nodes C, D (cosine distance 1 between them).
VEC = {"A": [1, 0, 0, 0], "B": [0, 1, 0, 0], "C": [0, 0, 1, 0], "D": [0, 0, 0, 1]}
SPK = {"A": "system", "B": "system", "C": "user", "D": "user"}


def dlg(nodes: str, jitter: float = 0.0, seed: int = 0):
    """A dialogue whose turn i sits on node nodes[i] (plus optional small noise)."""
    rng = np.random.default_rng(seed)
    turns = [{"speaker": SPK[n], "text": f"{n} turn {i}"} for i, n in enumerate(nodes)]
    E = np.array([VEC[n] for n in nodes], dtype=np.float64)
    if jitter:
        E = E + jitter * rng.random(E.shape)
    return turns, E


def fitted_tiny() -> FlowGraph:
    d1, e1 = dlg("CADB")
    d2, e2 = dlg("CACA")
    d3, e3 = dlg("DB")
    return FlowGraph().fit([d1, d2, d3], embeddings=[e1, e2, e3])


def node_ids(g: FlowGraph) -> dict[str, int]:
    out = {}
    for n in "ABCD":
        turns, E = dlg(n)
        out[n] = g.node_sequence(turns, embeddings=E)[0]
    return out


# ---------------------------------------------------------------- pure functions


def test_cluster_and_centroids_known_groups():
    E = np.array([[1, 0], [1, 0.01], [0, 1], [0.01, 1], [1, 0]], dtype=float)
    lab = cluster_embeddings(E, 0.55)
    assert lab[0] == lab[1] == lab[4] and lab[2] == lab[3] and lab[0] != lab[2]
    C = centroids_from_labels(E, lab)
    np.testing.assert_allclose(C[lab[0]], [1, 0.01 / 3])
    np.testing.assert_allclose(C[lab[2]], [0.005, 1])
    idx, sim = nearest_nodes(np.array([[2.0, 0.1]]), C)
    assert idx[0] == lab[0] and 0.99 < sim[0] <= 1
    assert cluster_embeddings(np.array([[1.0, 2.0]])).tolist() == [0]
    # a threshold above every distance puts everything in one cluster
    assert len(set(cluster_embeddings(E, 1.5))) == 1


def test_node_confidence_closed_form():
    S = np.array([[0.9, 0.8, 0.1], [0.5, 0.5, 0.5]])
    c = node_confidence(S, K=2, tau=0.05)
    assert c[0] == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert c[1] == pytest.approx(0.5)
    c3 = node_confidence(S, K=64, tau=0.05)  # K larger than the node count: all nodes
    assert c3[0] == pytest.approx(1 / (1 + math.exp(-2.0) + math.exp(-16.0)))
    assert c3[1] == pytest.approx(1 / 3)


def test_laplace_probabilities_rows():
    P = laplace_probabilities(np.array([[0, 2], [1, 1]]), vocab_size=2)
    np.testing.assert_allclose(P, [[1 / 4, 3 / 4], [2 / 4, 2 / 4]])


# ---------------------------------------------------------------- hand-worked graph


def test_hand_worked_counts_and_laplace():
    g = fitted_tiny()
    ids = node_ids(g)
    assert g.vocab_size == 4 and len(g.node_names) == 6
    assert {g.node_names[ids[n]].split(":")[0] for n in "AB"} == {"system"}
    assert g.centroids["system"].shape == (2, 4) and g.centroids["user"].shape == (2, 4)
    S, E = g.start, g.end
    A, B, C, D = (ids[n] for n in "ABCD")
    expected = {(S, C): 2, (S, D): 1, (C, A): 3, (A, D): 1, (A, C): 1, (A, E): 1, (D, B): 2, (B, E): 2}
    nz = {(int(a), int(b)): int(g.counts[a, b]) for a, b in zip(*np.nonzero(g.counts))}
    assert nz == expected
    # P = (count + 1) / (out + V), V = 4
    assert g.transition_prob("[start]", C) == pytest.approx(3 / 7)
    assert g.transition_prob(C, A) == pytest.approx(4 / 7)
    assert g.transition_prob(A, D) == pytest.approx(2 / 7)
    assert g.transition_prob(D, B) == pytest.approx(3 / 6)
    assert g.transition_prob(B, "[end]") == pytest.approx(3 / 6)
    assert g.transition_prob(S, B) == pytest.approx(1 / 7)  # unseen edge
    assert g.is_edge(C, A) and not g.is_edge(S, B)


def test_hand_worked_likelihoods():
    g = fitted_tiny()
    d1, e1 = dlg("CADB")
    p = [3 / 7, 4 / 7, 2 / 7, 1 / 2]
    assert g.likelihood(d1, e1) == pytest.approx(np.prod(p) ** (1 / 4))
    # include_end adds B -> [end] (3/6)
    assert g.likelihood(d1, e1, include_end=True) == pytest.approx(np.prod(p + [1 / 2]) ** (1 / 5))
    # sdialog's normalisation: exp(sum) ** (1 / (n + 1))
    assert g.likelihood(d1, e1, compat="sdialog", node_confidence=False) == pytest.approx(
        np.prod(p) ** (1 / 5)
    )
    # unseen C -> B: known-only keeps start -> C; all edges adds 1 / (out(C) + V) = 1/7
    x, ex = dlg("CB")
    assert g.likelihood(x, ex) == pytest.approx(3 / 7)
    assert g.likelihood(x, ex, use_only_known_edges=False) == pytest.approx(math.sqrt(3 / 7 * 1 / 7))
    # node confidence multiplies known edges only: one-hot -> c = 1 / (1 + e^-20) per turn
    c = 1 / (1 + math.exp(-20))
    got = g.likelihood(x, ex, use_only_known_edges=False, node_confidence=True)
    assert got == pytest.approx(math.sqrt(3 / 7 * c * 1 / 7), rel=1e-12)


def test_self_loops_removed_and_kept():
    d1, e1 = dlg("CCAB")
    d2, e2 = dlg("CAB")
    g = FlowGraph().fit([d1, d2], embeddings=[e1, e2])
    C = node_ids(g)["C"]
    assert not g.is_edge(C, C)
    g2 = FlowGraph(self_loops=True).fit([d1, d2], embeddings=[e1, e2])
    assert g2.is_edge(C, C) and g2.counts[C, C] == 1


def test_no_known_edges_policies():
    g = fitted_tiny()
    x, ex = dlg("BC")  # start -> B unseen, B -> C unseen
    assert g.likelihood(x, ex) == 0.0
    with pytest.raises(ValueError, match="no transition is an edge"):
        g.likelihoods([x], [ex], no_known_edges="raise")
    d1, e1 = dlg("CADB")
    out = g.likelihoods([x, d1], [ex, e1], no_known_edges="drop")
    assert out.shape == (1,)


def test_sdialog_flow_score_quirk():
    assert sdialog_flow_score(np.array([math.log(0.25)]), np.array([1]))[0] == pytest.approx(0.5)
    assert sdialog_flow_score(np.array([-1e4]), np.array([10]))[0] == 0.0  # exp underflows as in sdialog


def test_dialog2flow_prune():
    # clusters 0, 1, 2; [start] = 3, [end] = 4
    S, E = 3, 4
    raw = np.zeros((5, 5), dtype=np.int64)
    raw[S, 0], raw[0, 0], raw[0, E] = 1000, 5000, 999  # node 0 visited 6000 times, with self-loops
    raw[0, 1], raw[S, 1], raw[1, E] = 1, 10, 11  # edge 0 -> 1 has weight 1/6000 < 0.001
    raw[S, 2], raw[2, E] = 1, 1  # node 2: weight 1/6000 < 0.001
    node_fr = raw[:, :3].sum(axis=0).tolist() + [0, 0]
    out = dialog2flow_prune(raw, np.array(node_fr), S, E, 0.001, 0.001)
    assert out[S, 0] == 1000 and out[0, E] == 999 and out[S, 1] == 10 and out[1, E] == 11
    assert out[0, 0] == 0  # self-loop removed
    assert out[0, 1] == 0  # edge pruned (its weight counts the self-loops in the out sum)
    assert out[S, 2] == 0 and out[2, E] == 0  # node pruned
    out0 = dialog2flow_prune(raw, np.array(node_fr), S, E, 0.0, 0.0)
    expected = raw.copy()
    np.fill_diagonal(expected, 0)
    np.testing.assert_array_equal(out0, expected)


# ---------------------------------------------------------------- FlowKL


def _set(n: int, seed: int, pattern: str = "CADB"):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        k = int(rng.integers(1, 4))
        out.append(dlg(pattern * k if i % 3 else pattern[:2] + pattern, jitter=0.2, seed=seed * 1000 + i))
    return [d for d, _ in out], [e for _, e in out]


def test_flowkl_self_is_zero_and_other_positive():
    ref, eref = _set(12, 1)
    assert flowkl(ref, ref, ref_embeddings=eref, tgt_embeddings=eref) == 0.0
    tgt, etgt = _set(10, 2, pattern="CBDA")
    v = flowkl(ref, tgt, ref_embeddings=eref, tgt_embeddings=etgt)
    assert v > 0
    det = flowkl(ref, tgt, ref_embeddings=eref, tgt_embeddings=etgt, return_details=True, compat="sdialog")
    assert det["n_ref"] == 12 and det["n_tgt"] == 10 and det["flowkl"] >= 0


def test_flowkl_from_likelihoods_matches_direct_computation():
    from scipy.stats import gaussian_kde

    rng = np.random.default_rng(0)
    a, b = rng.normal(0.3, 0.05, 40), rng.normal(0.25, 0.08, 30)
    grid = np.linspace(min(a.min(), b.min()), max(a.max(), b.max()), 100)
    p = np.clip(gaussian_kde(a)(grid), 1e-12, None)
    q = np.clip(gaussian_kde(b)(grid), 1e-12, None)
    assert flowkl_from_likelihoods(a, b) == pytest.approx(np.sum(p * np.log(p / q)) / p.sum(), rel=1e-12)
    assert flowkl_from_likelihoods(a, a) == 0.0


def test_flowkl_degenerate_sets_defined_and_deterministic():
    a = np.array([0.5, 0.5, 0.5])
    b = np.array([0.4, 0.5, 0.6, 0.55])
    v1, v2 = flowkl_from_likelihoods(a, b), flowkl_from_likelihoods(a, b)
    assert np.isfinite(v1) and v1 > 0 and v1 == v2
    assert flowkl_from_likelihoods(a, a.copy()) == 0.0  # both constant and equal
    c = np.array([0.7, 0.7])
    v = flowkl_from_likelihoods(a, c)  # both constant, different
    assert np.isfinite(v) and v > 0 and v == flowkl_from_likelihoods(a, c)


@pytest.mark.parametrize(
    "bad, match",
    [
        (([0.1], [0.1, 0.2]), "reference set: a density needs at least 2"),
        (([0.1, 0.2], [0.3]), "target set: a density needs at least 2"),
        (([0.1, np.nan], [0.1, 0.2]), "reference set: likelihoods contain NaN"),
        (([[0.1, 0.2]], [0.1, 0.2]), "1-D"),
    ],
)
def test_flowkl_from_likelihoods_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        flowkl_from_likelihoods(*bad)


def test_flowkl_bad_inputs():
    ref, eref = _set(4, 1)
    with pytest.raises(ValueError, match="target set: FlowKL needs a density of at least 2 dialogues"):
        flowkl(ref, ref[:1], ref_embeddings=eref, tgt_embeddings=eref[:1])
    with pytest.raises(ValueError, match="reference set: FlowKL needs"):
        flowkl(ref[:1], ref, ref_embeddings=eref[:1], tgt_embeddings=eref)
    bad = [e.copy() for e in eref]
    bad[2][1, 0] = np.nan
    with pytest.raises(ValueError, match="reference set embeddings of dialogue 2: contains NaN"):
        flowkl(ref, ref, ref_embeddings=bad, tgt_embeddings=eref)
    with pytest.raises(ValueError, match="dimension 3, expected 4"):
        flowkl(ref, ref, ref_embeddings=eref, tgt_embeddings=[e[:, :3] for e in eref])
    with pytest.raises(ValueError, match="dialogue 1: empty dialogue"):
        flowkl(ref, [ref[0], []], ref_embeddings=eref, tgt_embeddings=[eref[0], np.zeros((0, 4))])
    with pytest.raises(ValueError, match="rows for"):
        flowkl(ref, ref, ref_embeddings=eref, tgt_embeddings=[e[:1] for e in eref])


def test_unseen_speaker_names_the_dialogue():
    sys_only = [[{"speaker": "system", "text": "a"}, {"speaker": "system", "text": "b"}]] * 2
    E = [np.array([[1.0, 0], [0, 1.0]])] * 2
    g = FlowGraph().fit(sys_only, embeddings=E)
    tgt = [{"dialogue_id": "x-1", "turns": [{"speaker": "user", "text": "hi"}]}]
    with pytest.raises(ValueError, match=r"set dialogue 0: speaker 'user' was never seen"):
        g.likelihoods(tgt, [np.array([[1.0, 0]])])


def test_unfitted_graph_raises():
    with pytest.raises(ValueError, match="not fitted"):
        FlowGraph().transition_prob(0, 1)


# ---------------------------------------------------------------- export


def test_graphml_draw_save_load(tmp_path):
    import networkx as nx

    g = fitted_tiny()
    g.to_graphml(tmp_path / "g.graphml")
    G = nx.read_graphml(tmp_path / "g.graphml")
    assert G.number_of_nodes() == 6 and G.number_of_edges() == 8
    assert G.edges["[start]", g.node_names[node_ids(g)["C"]]]["count"] == 2
    g.draw(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    g.save(tmp_path / "g.npz")
    h = FlowGraph.load(tmp_path / "g.npz")
    np.testing.assert_array_equal(h.counts, g.counts)
    d1, e1 = dlg("CADB", jitter=0.1)
    assert h.likelihood(d1, e1) == g.likelihood(d1, e1)
    (tmp_path / "bad.npz").write_bytes(b"nope")
    with pytest.raises(ValueError, match="not a FlowGraph file"):
        FlowGraph.load(tmp_path / "bad.npz")


# ---------------------------------------------------------------- with the packaged encoder


@pytest.fixture(scope="module")
def encoder():
    from dialfork_metrics.encoders import Encoder

    return Encoder("minilm")


def _star_like():
    base = [
        [
            "Hi, what's the weather in Paris?",
            "Which day?",
            "Tomorrow please.",
            "It will be sunny in Paris tomorrow.",
        ],
        ["Weather for Rome today?", "Sure, for today?", "Yes today.", "Rome is rainy today."],
        [
            "Is it going to rain in Oslo?",
            "Which day would you like?",
            "Friday.",
            "No rain in Oslo on Friday.",
        ],
        ["Hello, I need the forecast for Madrid.", "For which day?", "Monday.", "Madrid: cloudy on Monday."],
    ]
    other = [
        ["I want to book a hotel.", "What is your name?", "Ann.", "Your hotel is booked, Ann."],
        ["Book me a taxi.", "Where to?", "The airport.", "A taxi is on its way."],
        ["Can I see a doctor?", "What is your name?", "Bob.", "You have an appointment, Bob."],
    ]
    return base, other


def test_flowkl_with_encoder_and_evaluate_module(encoder):
    import dialfork_metrics

    ref, tgt = _star_like()
    assert flowkl(ref, ref, encoder) == 0.0
    core = flowkl(ref, tgt, encoder)
    assert core > 0
    mod = dialfork_metrics.load("flowkl", encoder=encoder)
    out = mod.compute(predictions=[tgt], references=[ref])
    assert out["flowkl"] == pytest.approx(core, rel=1e-9) and out["scores"] == [pytest.approx(core, rel=1e-9)]
    # add_batch in a loop == one compute
    mod.add_batch(predictions=[tgt], references=[ref])
    mod.add_batch(predictions=[ref], references=[ref])
    out2 = mod.compute()
    assert out2["scores"][0] == pytest.approx(core, rel=1e-9) and out2["scores"][1] == 0.0
    dicts = [
        [{"speaker": "user" if i % 2 == 0 else "system", "text": t} for i, t in enumerate(d)] for d in ref
    ]
    out3 = mod.compute(predictions=[dicts], references=[dicts])
    assert out3["flowkl"] == 0.0
