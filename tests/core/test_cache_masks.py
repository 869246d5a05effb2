"""The ragged cache and masks against brute force: decoding through them equals one plain forward."""

import pytest
import torch

from jacobigen.core.masks import block_mask, causal, prefix_structure
from tests.helpers.models import random_model


def test_block_mask_matches_brute_force():
    lengths = torch.tensor([0, 3, 5])
    struct = torch.rand(3, 4, 4) > 0.5
    mask = block_mask(lengths, 12, struct)
    for r in range(3):
        for t in range(4):
            for s in range(12):
                rel = s - int(lengths[r])
                visible = rel < 0 or (rel < 4 and bool(struct[r, t, rel]))
                assert (mask[r, 0, t, s] == 0) == visible
                assert mask[r, 0, t, s] in (0.0, float("-inf"))


def test_prefix_structure_hides_padding():
    s = prefix_structure(torch.tensor([2, 4]), 4)
    assert s[0].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
    assert torch.equal(s[1], causal(4))


def test_commit_arbitrary_subset_equals_plain_forward():
    """Write a tree-shaped block, keep one root-to-leaf path, continue: logits equal a plain causal
    forward over the kept tokens at the same positions."""
    model = random_model(seed=1)
    prefix = torch.tensor([[4098, 5, 6, 7]])
    block = torch.tensor([[10, 11, 12, 13, 14]])
    keep = torch.tensor([[0, 2, 3]])
    parent = [-1, 0, 0, 2, 1]  # node 3 descends from 2, which descends from 0
    tree = torch.eye(5, dtype=torch.bool)
    for node in range(5):
        a = parent[node]
        while a >= 0:
            tree[node, a], a = True, parent[a]
    depth = torch.tensor([0, 1, 1, 2, 2])
    nxt = torch.tensor([[20, 21]])
    cache = model.new_cache(1, 16)
    with torch.inference_mode():
        model(prefix, torch.arange(4)[None], block_mask(cache.lengths, 16, causal(4)), cache)
        cache.commit(torch.arange(4)[None], torch.tensor([4]))
        model(block, (4 + depth)[None], block_mask(cache.lengths, 16, tree), cache)
        cache.commit(keep, torch.tensor([3]))
        pos = torch.tensor([[7, 8]])
        got = model(nxt, pos, block_mask(cache.lengths, 16, causal(2)), cache)
        seq = torch.cat([prefix, block[:, keep[0]], nxt], 1)
        positions = torch.arange(9)[None]
        want = model(seq, positions)[:, -2:]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_tree_block_matches_paths():
    """Brute force over random drafts: name every node by its path of sibling ranks from the root.
    The chosen off-spine nodes are the ``count`` best by the least value among a node and its
    prerequisites (parent, lower ranks), closed under both; a node attends to exactly the nodes
    whose path is a prefix of its own; spine first, then the tree, then padding that sees the root."""
    import random
    from itertools import product

    from jacobigen.parts.tree import Ranking, arrange, select, universe

    levels, width, drafts = 2, 3, 8
    uni = universe(levels, width, torch.device("cpu"))
    paths = [p for t in range(1, levels + 1) for p in product(range(width), repeat=t)]
    for seed in range(20):
        random.seed(seed)
        torch.manual_seed(seed)
        cand_q = torch.rand(1, levels, width)
        ok = torch.rand(1, uni.size) > 0.1
        values = uni.values(cand_q)
        scores = uni.scores(values, ok)

        def value(p, cand_q=cand_q):
            return float(torch.prod(torch.tensor([cand_q[0, t, r] for t, r in enumerate(p)])))

        def worth(p, ok=ok):  # the least value among p and its prerequisites; spine: always in
            if not any(p):
                return float("inf")
            u = paths.index(p)
            own = value(p) if ok[0, u] else float("-inf")
            pre = [worth(p[:-1])] if len(p) > 1 else []
            pre += [worth(p[:-1] + (p[-1] - 1,))] if p[-1] > 0 else []
            return min([own, *pre])

        assert [worth(p) for p in paths] == pytest.approx(scores[0].tolist())

        count = random.randint(0, 6)
        extra = torch.where(uni.spine, float("-inf"), scores).sort(dim=1, descending=True, stable=True)
        nodes = select(
            uni, Ranking(values, extra.values, extra.indices), torch.tensor([count]), torch.tensor([drafts - count])
        )
        tb = arrange(
            nodes,
            torch.tensor([9]),
            torch.arange(10, 10 + drafts)[None],
            torch.arange(100, 100 + levels * width).view(1, levels, width),
            drafts + 1,
        )
        off = [p for p in paths if any(p)]
        ranking = sorted((p for p in off if worth(p) > float("-inf")), key=lambda p: (-worth(p), paths.index(p)))
        chosen = set(ranking[:count])
        for p in chosen:  # closed under parents and lower ranks (the spine is always in)
            prerequisites = [p[:-1]] + ([p[:-1] + (p[-1] - 1,)] if p[-1] else [])
            assert all(not any(x) or x in chosen for x in prerequisites)
        spine = drafts - count
        names = [(0,) * i for i in range(spine + 1)] + sorted(chosen, key=paths.index)
        n_real = len(names)
        assert tb.nodes.spine.tolist() == [spine] and tb.real[0].tolist() == [i < n_real for i in range(drafts + 1)]
        for u, p in enumerate(paths):
            want = len(p) if not any(p) else (names.index(p) if p in chosen else -1)
            assert int(tb.nodes.index[0, u]) == want
        assert tb.nodes.ranks == [max([p[t] + 1 for p in chosen if len(p) == t + 1], default=1) for t in range(levels)]
        for i, pi in enumerate(names):
            assert int(tb.depth[0, i]) == len(pi)
            token = 9 if not pi else (10 + len(pi) - 1 if not any(pi) else 100 + (len(pi) - 1) * width + pi[-1])
            assert int(tb.tokens[0, i]) == token
            for j, pj in enumerate(names):
                assert bool(tb.structure[0, i, j]) == (pi[: len(pj)] == pj)
        for i in range(n_real, drafts + 1):
            assert tb.structure[0, i].nonzero().flatten().tolist() == [0, i]
