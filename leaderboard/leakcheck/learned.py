"""Attacks learnt from the public labelled configs and the public conformant dialogues.

* :class:`TaskGuesser`: the task of a blind dialogue (the blind rows carry none), from a TF-IDF
  nearest-centroid model of the public dialogues' system turns;
* :func:`length_rule` (attack d): a dialogue whose system-turn count is the task's modal
  conformant length (within a width) is called conformant, any other is flagged at one position;
  width and position are chosen on the public labelled rows;
* :class:`TurnClassifier` (attack c, the *public-data ceiling*): TF-IDF of each system turn, the one
  before it and the user turn after it, and a logistic regression of "this is the fork's first
  deviating turn", fitted on the public labelled configs; the first turn above a threshold (chosen
  out of fold, grouped by source) is the prediction. Learning from the public training data is
  what the configs are for, so this is reported, never failed;
* :func:`node_prefix_distances` (attack e, metric track): each system turn mapped to a workflow node
  (the simulator's phrasing table, else an agglomerative cluster of TF-IDF vectors, its threshold
  chosen on pairs made from the public configs), the distance of a pair is minus the shared node
  prefix of reference and candidate.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .scoring import VectorScorer
from .simulator import PhrasingTable, system_turns

logger = logging.getLogger("leaderboard.leakcheck")

#: Cosine distance at which the node clustering of turns the phrasing table does not parse stops
#: merging (average linkage, character n-gram TF-IDF), when no public pairs calibrate it.
NODE_CLUSTER_THRESHOLD = 0.5
#: The thresholds tried on public pairs (:func:`node_prefix_distances`).
NODE_CLUSTER_THRESHOLDS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
#: At most this many distinct unparsed turns are clustered; the others join their nearest one's
#: cluster (keeps the distance matrix small).
MAX_CLUSTERED_TURNS = 2000


def _system_text(turns: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(t["text"] for t in turns if t["speaker"] == "system")


def labelled_rows(public: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The public labelled dialogues, once each (by ``dialogue_id``); a fork needs its ``fork_turn``.

    Args:
        public: ``{config: rows}`` of the public configs.

    Returns:
        Rows with ``turns``, ``task``, ``hallucination_type`` and (forks) a ``fork_turn``; the
        first occurrence of each id wins.
    """
    out: dict[str, dict[str, Any]] = {}
    for rows in public.values():
        for r in rows:
            if "turns" not in r or "hallucination_type" not in r or not r.get("dialogue_id"):
                continue
            if r["hallucination_type"] is not None and not r.get("fork_turn"):
                continue
            out.setdefault(r["dialogue_id"], dict(r))
    return list(out.values())


# --------------------------------------------------------------------------- tasks


class TaskGuesser:
    """The task of a dialogue, one of the public rows' tasks (the hidden split reserves scenarios of
    the same tasks): the simulator's phrasings when they parse it, else the nearest task centroid of
    TF-IDF vectors of the public dialogues' system turns.

    Args:
        rows: Public rows with ``turns`` and ``task``.
        table: The phrasing table, or None.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]], table: PhrasingTable | None = None):
        self.table = table
        rows = [r for r in rows if r.get("task")]
        self.tasks = sorted({r["task"] for r in rows})
        self._model = None
        if len(self.tasks) > 1:
            from sklearn.feature_extraction.text import TfidfVectorizer
            from sklearn.neighbors import NearestCentroid
            from sklearn.pipeline import make_pipeline

            self._model = make_pipeline(
                TfidfVectorizer(sublinear_tf=True), NearestCentroid(metric="euclidean")
            )
            self._model.fit([_system_text(r["turns"]) for r in rows], [r["task"] for r in rows])

    def guess(self, dialogues: Sequence[Mapping[str, Any]], key: str = "turns") -> list[str | None]:
        """The task of each dialogue.

        Args:
            dialogues: Rows holding a transcript under ``key``.
            key: The transcript's field (``"turns"``, or a pair's ``"reference"``).

        Returns:
            One task (or None when the public rows hold none) per dialogue.
        """
        out: list[str | None] = []
        todo = []
        for i, d in enumerate(dialogues):
            t = (
                self.table.guess_task([x for x, _ in system_turns(d[key])], self.tasks)
                if self.table is not None
                else None
            )
            out.append(t)
            if t is None:
                todo.append(i)
        if todo and self._model is not None:
            for i, t in zip(todo, self._model.predict([_system_text(dialogues[i][key]) for i in todo])):
                out[i] = str(t)
        elif todo and len(self.tasks) == 1:
            for i in todo:
                out[i] = self.tasks[0]
        return out


# --------------------------------------------------------------------------- attack (d): length


def modal_lengths(conformant: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each task's modal system-turn count over conformant dialogues.

    Args:
        conformant: Conformant rows (``task``, ``num_system_turns`` or ``turns``).

    Returns:
        ``{task: modal T}`` (ties: the smaller T).
    """
    by: dict[str, Counter] = {}
    for r in conformant:
        T = int(r.get("num_system_turns") or len(system_turns(r["turns"])))
        by.setdefault(r.get("task") or "", Counter())[T] += 1
    return {t: min(c, key=lambda x: (-c[x], x)) for t, c in by.items()}


#: The length rule's flag positions: ``(kind, parameter)``: a relative position of the dialogue
#: (0 = first system turn, 1 = last), ``c`` turns before the end of the task's modal conformant
#: length, or system turn ``c``.
LENGTH_POSITIONS: tuple[tuple[str, float], ...] = (
    *(("relative", r) for r in (0.0, 0.25, 0.5, 0.75, 1.0)),
    *(("before modal end", c) for c in range(6)),
    *(("turn", c) for c in range(1, 7)),
)


def _length_preds(T: np.ndarray, m: np.ndarray, width: int, kind: str, c: float) -> np.ndarray:
    """Predictions (0 = conformant) of the length rule for system-turn counts ``T`` and modal
    lengths ``m`` (NaN: task unknown, always flagged)."""
    if kind == "relative":
        pos = np.rint(1 + c * (T - 1))
    elif kind == "before modal end":
        pos = np.where(np.isnan(m), T, np.fmin(T, m)) - c
    else:
        pos = np.full_like(T, c)
    pos = np.clip(pos, 1, T)
    return np.where(np.abs(T - m) <= width, 0.0, pos)  # NaN compares False: flagged


def length_rule(
    public_rows: Sequence[Mapping[str, Any]],
    public_tasks: Sequence[str | None],
    modal: Mapping[str, int],
    widths: Sequence[int] = (0, 1, 2, 3),
    positions: Sequence[tuple[str, float]] = LENGTH_POSITIONS,
) -> tuple[Callable[[Sequence[Mapping[str, Any]], Sequence[str | None]], dict[str, int | None]], str]:
    """Attack (d): the length rule whose width and flag position score best on the public rows.

    A dialogue with ``|T - modal| <= width`` is called conformant, any other is flagged at one
    position: two parameters, fitted on the public rows.

    Args:
        public_rows: Public labelled rows (conformant and forks).
        public_tasks: Their tasks.
        modal: ``{task: modal conformant T}`` (:func:`modal_lengths`).
        widths: Candidate widths.
        positions: Candidate flag positions (:data:`LENGTH_POSITIONS`).

    Returns:
        ``(predict, description)``: ``predict(rows, tasks)`` gives ``{dialogue_id: turn or None}``.
    """

    def arrays(
        rows: Sequence[Mapping[str, Any]], tasks: Sequence[str | None]
    ) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.asarray([float(r["num_system_turns"]) for r in rows]),
            np.asarray([float(modal.get(t or "", np.nan)) for t in tasks]),
        )

    best: tuple[float, int, tuple[str, float]] = (-1.0, 0, positions[0])
    if public_rows:
        sc = VectorScorer(public_rows)
        T, m = arrays(public_rows, public_tasks)
        for w in widths:
            for pos in positions:
                s = sc.score(_length_preds(T, m, w, *pos))
                if s > best[0]:
                    best = (s, w, pos)
    _, w, pos = best

    def predict(rows: Sequence[Mapping[str, Any]], tasks: Sequence[str | None]) -> dict[str, int | None]:
        p = _length_preds(*arrays(rows, tasks), w, *pos)
        return {r["dialogue_id"]: (int(x) if x > 0 else None) for r, x in zip(rows, p)}

    return predict, (
        f"|T - the task's modal conformant T| <= {w} called conformant, others flagged at "
        f"{pos[0]} {pos[1]:g} (chosen on the public rows: Score {best[0]:.1f})"
    )


# --------------------------------------------------------------------------- attack (c): the text classifier


def _turn_fields(turns: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    st = system_turns(turns)
    return [(text, st[i - 1][0] if i else "<start>", nxt or "<end>") for i, (text, nxt) in enumerate(st)]


class TurnClassifier:
    """Attack (c), the public-data ceiling: a logistic regression over TF-IDF features of each
    system turn, the system turn before it and the user turn after it.

    The TF-IDF vocabularies are fitted once on every public turn (they use no label); the
    regression is fitted per fold for the threshold, then on every public row.

    Args:
        folds: Grouped folds (by source) for the out-of-fold threshold choice.
        C: The inverse regularisation strength of the logistic regression.
        seed: The solver's seed.
    """

    def __init__(self, folds: int = 3, C: float = 1.0, seed: int = 0):
        self.folds, self.C, self.seed = folds, C, seed
        self.threshold = 0.5
        self.public_score: float | None = None
        self._vecs: list[Any] = []
        self._lr = None

    @staticmethod
    def _samples(
        rows: Sequence[Mapping[str, Any]], key: str = "turns"
    ) -> tuple[list[tuple[str, str, str]], np.ndarray, np.ndarray]:
        """Every system turn's fields, its label (1 at a fork's first deviating turn) and owner row."""
        X, y, owner = [], [], []
        for i, r in enumerate(rows):
            f = _turn_fields(r[key])
            tk = r.get("fork_turn") if r.get("hallucination_type") is not None else None
            X += f
            y += [int(tk is not None and s == int(tk)) for s in range(1, len(f) + 1)]
            owner += [i] * len(f)
        return X, np.asarray(y, dtype=int), np.asarray(owner, dtype=int)

    def _matrix(self, X: Sequence[tuple[str, str, str]]) -> Any:
        import scipy.sparse as sp

        return sp.hstack([v.transform([x[j] for x in X]) for j, v in enumerate(self._vecs)]).tocsr()

    def _regression(self, M: Any, y: np.ndarray) -> Any:
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=self.C, max_iter=2000, random_state=self.seed).fit(M, y)

    @staticmethod
    def _first(p: np.ndarray, owner: np.ndarray, n: int, threshold: float) -> np.ndarray:
        """Per dialogue, the first turn (1-based) with ``p >= threshold``; 0 where there is none."""
        start = np.searchsorted(owner, np.arange(n))
        hits = np.flatnonzero(p >= threshold)
        first = np.zeros(n)
        o, idx = np.unique(owner[hits], return_index=True)  # hits are in order: the first per dialogue
        first[o] = hits[idx] - start[o] + 1
        return first

    def fit(self, rows: Sequence[Mapping[str, Any]]) -> TurnClassifier:
        """Fit on public labelled rows; the threshold maximises the out-of-fold public Score.

        Args:
            rows: Public labelled rows (``turns``, ``hallucination_type``, ``fork_turn``,
                ``source_id``, ``num_system_turns``), conformant and forks.

        Returns:
            ``self``.

        Raises:
            ValueError: ``rows`` hold no fork or no conformant turn (nothing to learn).
        """
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.model_selection import GroupKFold

        X, y, owner = self._samples(rows)
        if len(set(y.tolist())) < 2:
            raise ValueError("the public rows need both conformant turns and deviating turns")
        self._vecs = [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2).fit([x[j] for x in X])
            for j in range(3)
        ]
        M = self._matrix(X)
        groups = np.asarray([rows[i].get("source_id") or rows[i]["dialogue_id"] for i in owner])
        n_groups = len(set(groups.tolist()))
        if n_groups >= 2:
            oof = np.zeros(len(y))
            for tr, te in GroupKFold(n_splits=min(self.folds, n_groups)).split(M, y, groups):
                if len(set(y[tr].tolist())) < 2:
                    oof[te] = y[tr].mean()
                    continue
                oof[te] = self._regression(M[tr], y[tr]).predict_proba(M[te])[:, 1]
            sc = VectorScorer(rows)
            best = (-1.0, 0.5)
            for th in np.unique(np.round(np.quantile(oof, np.linspace(0.01, 0.999, 100)), 4)):
                s = sc.score(self._first(oof, owner, len(rows), th))
                if s > best[0]:
                    best = (s, float(th))
            self.public_score, self.threshold = best
        self._lr = self._regression(M, y)
        return self

    def predict(self, dialogues: Sequence[Mapping[str, Any]], key: str = "turns") -> list[int | None]:
        """The first system turn above the threshold of each dialogue.

        Args:
            dialogues: Rows holding a transcript under ``key``.
            key: The transcript's field.

        Returns:
            One system turn index (or None: no turn above the threshold) per dialogue.
        """
        X, _, owner = self._samples([{key: d[key]} for d in dialogues], key)
        p = self._lr.predict_proba(self._matrix(X))[:, 1] if X else np.zeros(0)
        return [int(x) if x > 0 else None for x in self._first(p, owner, len(dialogues), self.threshold)]


# --------------------------------------------------------------------------- attack (e): node-level prefix


def cluster_texts(
    texts: Sequence[str],
    thresholds: Sequence[float] = (NODE_CLUSTER_THRESHOLD,),
    max_clustered: int = MAX_CLUSTERED_TURNS,
) -> list[list[int]]:
    """Agglomerative clusters (average linkage, cosine distance of character n-gram TF-IDF), the
    tree built once and cut at each threshold.

    Args:
        texts: Distinct turn texts.
        thresholds: Cosine distances at which to cut the tree (clusters whose average distance
            stays within it).
        max_clustered: At most this many texts (an even sample) enter the tree; every other text
            joins the cluster of its most similar one.

    Returns:
        Per threshold, one cluster id per text.
    """
    if len(texts) < 2:
        return [[0] * len(texts) for _ in thresholds]
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_distances

    X = TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True).fit_transform(texts)
    idx = np.arange(len(texts))
    core = idx if len(texts) <= max_clustered else np.linspace(0, len(texts) - 1, max_clustered).astype(int)
    D = np.clip(cosine_distances(X[core]), 0.0, None)
    D = (D + D.T) / 2
    np.fill_diagonal(D, 0.0)
    Z = linkage(squareform(D, checks=False), method="average")
    rest = np.setdiff1d(idx, core)
    nearest = (X[rest] @ X[core].T).toarray().argmax(axis=1) if rest.size else np.zeros(0, dtype=int)
    out = []
    for t in thresholds:
        lab = fcluster(Z, t=float(t), criterion="distance")
        labels = np.empty(len(texts), dtype=int)
        labels[core] = lab
        labels[rest] = lab[nearest]
        out.append(labels.tolist())
    return out


def public_pairs(
    rows: Sequence[Mapping[str, Any]], max_sources: int = 64
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Metric-track pairs made from the public configs (a source and each of its forks), with their
    gold, to calibrate a metric-track cheat on public data.

    Args:
        rows: Public labelled rows (:func:`labelled_rows`).
        max_sources: At most this many sources (the first by id) whose (source, type) units are
            complete.

    Returns:
        ``(pairs, gold2)``: pairs ``{pair_id, reference, candidate, task}`` and Task 2 gold rows
        ``{pair_id, unit_id, hallucination_type, fork_position, task, subset}``.
    """
    sources = {r["dialogue_id"]: r for r in rows if r["hallucination_type"] is None}
    units: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["hallucination_type"] is not None and r.get("fork_position") and r.get("source_id") in sources:
            units.setdefault((r["source_id"], r["hallucination_type"]), []).append(r)
    keep = sorted({s for (s, _), forks in units.items() if len({f["fork_position"] for f in forks}) == 4})
    keep = set(keep[:max_sources])
    pairs, gold = [], []
    for (sid, h), forks in sorted(units.items()):
        if sid not in keep or len({f["fork_position"] for f in forks}) != 4:
            continue
        for f in sorted(forks, key=lambda f: f["fork_position"])[:4]:
            pid = f"{f['dialogue_id']}"
            pairs.append(
                {
                    "pair_id": pid,
                    "reference": sources[sid]["turns"],
                    "candidate": f["turns"],
                    "task": f.get("task"),
                }
            )
            gold.append(
                {
                    "pair_id": pid,
                    "unit_id": f"{sid}|{h}",
                    "hallucination_type": h,
                    "fork_position": int(f["fork_position"]),
                    "task": f.get("task"),
                    "subset": "public",
                }
            )
    return pairs, gold


def node_prefix_distances(
    pairs: Sequence[Mapping[str, Any]],
    tasks: Sequence[str | None],
    table: PhrasingTable | None,
    calibration: tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]] | None = None,
    thresholds: Sequence[float] = NODE_CLUSTER_THRESHOLDS,
) -> tuple[dict[str, float], str]:
    """Attack (e): minus the shared node prefix of each pair's reference and candidate.

    A system turn's node is the phrasing table's (when it parses the turn), else its cluster
    (:func:`cluster_texts` over every unparsed turn, the blind pairs' and the calibration pairs');
    the clustering threshold is the one whose node prefix orders the public calibration pairs best.

    Args:
        pairs: Metric-track pairs (``pair_id``, ``reference``, ``candidate``).
        tasks: The task of each pair.
        table: The phrasing table, or None (clusters only).
        calibration: Public pairs and their gold (:func:`public_pairs`; each pair's ``task``), or
            None: the threshold is :data:`NODE_CLUSTER_THRESHOLD`.
        thresholds: The candidate clustering thresholds.

    Returns:
        ``({pair_id: -shared node prefix (system turns)}, description of the threshold choice)``.
    """
    from .scoring import _Metric, common_prefix

    cal_pairs, cal_gold = calibration if calibration and calibration[0] else ([], [])
    allp = [*pairs, *cal_pairs]
    all_tasks = [*tasks, *(p.get("task") for p in cal_pairs)]
    seqs: list[list[str | None]] = []
    unparsed: dict[str, int] = {}
    for turns, task in zip([p["reference"] for p in allp] + [p["candidate"] for p in allp], all_tasks * 2):
        seq: list[str | None] = []
        for text, _ in system_turns(turns):
            node = table.node(text, task) if table is not None else None
            if node is None:
                unparsed.setdefault(text, len(unparsed))
            seq.append(None if node is None else "n:" + node)
        seqs.append(seq)
    ths = list(thresholds) if cal_pairs else [NODE_CLUSTER_THRESHOLD]
    cuts = cluster_texts(list(unparsed), ths)
    texts = [
        [x for x, _ in system_turns(t)]
        for t in [p["reference"] for p in allp] + [p["candidate"] for p in allp]
    ]
    n = len(allp)

    def distances(cl: list[int]) -> list[float]:
        nodes = [
            [lab if lab is not None else f"c:{cl[unparsed[texts[i][j]]]}" for j, lab in enumerate(seq)]
            for i, seq in enumerate(seqs)
        ]
        return [-float(common_prefix(nodes[i], nodes[n + i])) for i in range(n)]

    best, why = 0, f"clustering threshold {ths[0]:g}"
    if cal_pairs:
        met = _Metric(cal_gold, 1, 0)
        taus = [
            met.tau(dict(zip((p["pair_id"] for p in cal_pairs), distances(cl)[len(pairs) :]))) for cl in cuts
        ]
        best = int(np.argmax(taus))
        why = (
            f"clustering threshold {ths[best]:g}, chosen on {len(cal_pairs)} public pairs (their tau "
            f"{taus[best]:.3f})"
        )
    d = distances(cuts[best])
    return {p["pair_id"]: d[i] for i, p in enumerate(pairs)}, why


def turn_distances(pairs: Sequence[Mapping[str, Any]], first: Sequence[int | None]) -> dict[str, float]:
    """A detector's first deviating turn of each candidate as a metric-track distance (earlier =
    farther).

    Args:
        pairs: Metric-track pairs (``pair_id``, ``candidate``).
        first: The predicted turn of each candidate (None: no deviation, counted as T + 1).

    Returns:
        ``{pair_id: -predicted turn}``.
    """
    return {
        p["pair_id"]: -float(t if t is not None else len(system_turns(p["candidate"])) + 1)
        for p, t in zip(pairs, first)
    }


__all__ = [
    "LENGTH_POSITIONS",
    "MAX_CLUSTERED_TURNS",
    "NODE_CLUSTER_THRESHOLD",
    "NODE_CLUSTER_THRESHOLDS",
    "TaskGuesser",
    "TurnClassifier",
    "cluster_texts",
    "labelled_rows",
    "length_rule",
    "modal_lengths",
    "node_prefix_distances",
    "public_pairs",
    "turn_distances",
]
