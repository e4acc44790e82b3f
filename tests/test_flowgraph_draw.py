"""The flow graph drawn as a workflow: typical turn positions, layered layout, rendering."""

import numpy as np
import pytest

from dialfork_metrics.flowgraph import FlowGraph, expected_turn_positions, workflow_layout
from dialfork_metrics.flowgraph.drawing import _shorten


def _chain(edges: dict[tuple[int, int], float], n: int) -> np.ndarray:
    C = np.zeros((n, n))
    for (a, b), c in edges.items():
        C[a, b] = c
    return C


def test_expected_positions_hand_worked():
    # nodes 0, 1; start = 2, end = 3. start -> 0 -> 1 -> end: positions 1 and 2
    pos = expected_turn_positions(_chain({(2, 0): 1, (0, 1): 1, (1, 3): 1}, 4), 2, 3)
    assert pos[:2].tolist() == [1.0, 2.0] and np.isnan(pos[2]) and np.isnan(pos[3])
    # a self-loop kept with probability 1/2: visits at t = 1, 2, 3, ... with mass 1, 1/2, 1/4, ...
    # sum t 2^-(t-1) / sum 2^-(t-1) = 4 / 2 = 2
    pos = expected_turn_positions(_chain({(1, 0): 2, (0, 0): 1, (0, 2): 1}, 3), 1, 2)
    assert pos[0] == pytest.approx(2.0)
    # a node reached directly or after a detour: start -> 0 (1/2) or start -> 1 -> 0 (1/2): 0 at 1.5
    pos = expected_turn_positions(_chain({(2, 0): 1, (2, 1): 1, (1, 0): 1, (0, 3): 2}, 4), 2, 3)
    assert pos[0] == pytest.approx(1.5) and pos[1] == pytest.approx(1.0)
    # unreachable node -> nan
    assert np.isnan(expected_turn_positions(_chain({(2, 0): 1, (0, 3): 1}, 4), 2, 3)[1])


def test_layout_columns_edges_and_selection():
    # start(5) -> 0 -> {1 (3x), 2 (1x), 3 (1x)} -> 4 -> end(6)
    C = _chain({(5, 0): 5, (0, 1): 3, (0, 2): 1, (0, 3): 1, (1, 4): 3, (2, 4): 1, (3, 4): 1, (4, 6): 5}, 7)
    pos = expected_turn_positions(C, 5, 6)
    counts = np.array([5, 3, 1, 1, 5, 0, 0])
    lay = workflow_layout(C, pos, counts, 5, 6, max_nodes=4, top_edges=1)
    xy = lay["xy"]
    assert set(xy) == {0, 1, 2, 4, 5, 6}  # node 3 (least visited, ties broken by id) is left out
    assert [xy[i][0] for i in (5, 0, 1, 4, 6)] == [0, 1, 2, 3, 4]  # columns follow the turn position
    assert xy[1][0] == xy[2][0]
    # top 1 edge per node, only between kept nodes
    assert (0, 1, pytest.approx(3 / 5)) in lay["edges"] and not any(
        a == 0 and b == 2 for a, b, _ in lay["edges"]
    )
    assert all(a in xy and b in xy for a, b, _ in lay["edges"])
    assert len([e for e in lay["edges"] if e[0] == 0]) == 1
    assert lay["max_column"] == 2


def test_shorten():
    assert _shorten("Hello   there", 60) == "Hello there"
    s = _shorten("I would like to book an appointment with Dr. Morgan for next Tuesday please", 40)
    assert s.replace("\n", " ").endswith("…") and len(s.replace("\n", "")) <= 40


def test_draw_renders_a_workflow(tmp_path):
    vec = {"A": [1, 0, 0, 0], "B": [0, 1, 0, 0], "C": [0, 0, 1, 0], "D": [0, 0, 0, 1]}
    spk = {"A": "system", "B": "system", "C": "user", "D": "user"}
    dialogues, embs = [], []
    for pattern in ("CADB", "CACA", "CADB"):
        dialogues.append(
            [{"speaker": spk[n], "text": f"{n}: a long central utterance of node {n} " * 3} for n in pattern]
        )
        embs.append(np.array([vec[n] for n in pattern], dtype=float))
    g = FlowGraph().fit(dialogues, embeddings=embs)
    pos = g.typical_positions()
    assert pos[g.start] == 0 and pos[g.end] > np.nanmax(pos[: g.vocab_size])
    g.draw(tmp_path / "g.png", max_nodes=10, top_edges=2)
    data = (tmp_path / "g.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
