"""generation.llm.prefix_cache on hand-made tensors: known prefixes, budget, staleness."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from generation.llm.prefix_cache import PrefixCache, common_prefix_length  # noqa: E402


def layers(n: int, n_layers: int = 2, heads: int = 1, dim: int = 4):
    """Per-layer (keys, values) whose entry at position p is p (so cuts are checkable)."""
    pos = torch.arange(n, dtype=torch.float32).reshape(1, 1, n, 1).expand(1, heads, n, dim).contiguous()
    return [(pos.clone(), -pos.clone()) for _ in range(n_layers)]


def nbytes(n: int) -> int:
    return 2 * 2 * n * 4 * 4  # layers x (k, v) x positions x dim x float32


@pytest.mark.parametrize(
    "a,b,expected",
    [
        ([], [], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2], 2),
        ([1, 2, 3], [1, 9, 3], 1),
        ([4], [5], 0),
    ],
)
def test_common_prefix_length(a, b, expected):
    assert common_prefix_length(a, b) == expected == common_prefix_length(b, a)


def test_lookup_cuts_to_the_common_prefix_and_keeps_one_token_to_feed():
    c = PrefixCache(10**6, min_reuse=2)
    c.new_call()
    ids = list(range(100, 120))
    assert c.store(("d", "system"), ids, layers(20))
    n, past = c.lookup(("d", "system"), ids[:12] + [7, 8, 9])
    assert n == 12 and past[0][0].shape == (1, 1, 12, 4) and past[1][1][0, 0, -1, 0].item() == -11
    n, past = c.lookup(("d", "system"), ids)  # the very same prompt: the last token is fed again
    assert n == 19
    assert c.lookup(("d", "user"), ids) == (0, None)  # another agent (no entry of its role)
    assert c.lookup(("d", "system"), [1] + ids) == (0, None)  # no common prefix
    assert c.lookup(("d", "system"), ids[:1] + [0] * 5) == (0, None)  # shorter than min_reuse
    assert c.stats["hits"] == 2 and c.stats["misses"] == 3 and c.stats["reused_tokens"] == 31


def test_budget_evicts_entries_unused_in_this_call_then_refuses():
    c = PrefixCache(nbytes(10) * 2, min_reuse=1)
    c.new_call()
    assert c.store(("a", "system"), list(range(10)), layers(10))
    assert c.store(("b", "system"), list(range(10)), layers(10))
    assert c.nbytes == nbytes(10) * 2
    assert not c.store(("c", "system"), list(range(10)), layers(10))  # both used in this call: kept
    c.new_call()
    c.lookup(("b", "system"), list(range(10)))  # b used again, a not
    assert c.store(("c", "system"), list(range(10)), layers(10))  # a is dropped for c
    assert set(c.entries) == {("b", "system"), ("c", "system")}
    assert c.store(("b", "system"), list(range(5)), layers(5))  # a replacement frees the old one
    assert c.nbytes == nbytes(10) + nbytes(5)


def test_another_dialogues_entry_serves_a_shared_prefix():
    """A fork's first prompt is its D+'s conversation so far: D+'s entry serves it; the agent's own
    entry wins when it shares more, and other roles' entries never serve."""
    c = PrefixCache(10**6, min_reuse=4)
    c.new_call()
    dplus = list(range(100, 140))
    c.store(("w-1", "system"), dplus, layers(40))
    c.store(("w-1", "user"), dplus, layers(40))
    c.new_call()
    fork_prompt = dplus[:25] + [1, 2, 3]
    n, past = c.lookup(("w-1-GR-k2", "system"), fork_prompt)
    assert n == 25 and past[0][0][0, 0, -1, 0].item() == 24 and c.stats["shared_hits"] == 1
    c.store(("w-1-GR-k2", "system"), fork_prompt + [4, 5], layers(30))
    n, _ = c.lookup(("w-1-GR-k2", "system"), fork_prompt + [4, 5, 6])
    assert n == 30 and c.stats["shared_hits"] == 1  # its own entry now
    assert c.lookup(("other", "system"), [7] * 20) == (0, None)
    c.store(("x", "user"), [9] * 20, layers(20))
    assert c.lookup(("y", "system"), [9] * 20 + [1]) == (0, None)  # a user entry never serves a system prompt


def test_zero_budget_disables_and_bad_settings():
    off = PrefixCache(0)
    assert (
        not off.enabled
        and not off.store(("a", "system"), [1], layers(1))
        and off.lookup(("a", "system"), [1]) == (0, None)
    )
    with pytest.raises(ValueError, match="max_bytes"):
        PrefixCache(-1)
    with pytest.raises(ValueError, match="min_reuse"):
        PrefixCache(10, min_reuse=0)
