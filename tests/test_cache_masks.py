"""The ragged cache and masks against brute force: decoding through them equals one plain forward."""

import torch

from jacobigen.masks import block_mask, causal, prefix_structure
from models import random_model


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
    parent = [-1, 0, 0, 2, 1]                 # node 3 descends from 2, which descends from 0
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


def test_tree_structure_matches_paths():
    """Brute force: name every block node by its path of sibling ranks from the root; a node may
    attend to exactly the nodes whose path is a prefix of its own (itself included)."""
    from itertools import product

    from jacobigen.tree import WindowShape

    shape = WindowShape(drafts=5, depth=2, width=3)
    paths = [()] + [p for t in (1, 2) for p in product(range(3), repeat=t)]
    paths += [(0, 0) + (0,) * i for i in range(1, 4)]          # chain hangs from the all-first path
    assert len(paths) == shape.size
    want = torch.tensor([[pi[:len(pj)] == pj for pj in paths] for pi in paths])
    assert torch.equal(shape.structure(), want)
    assert shape.node_depth().tolist() == [len(p) for p in paths]
    assert [paths[i] for i in shape.spine().tolist()] == [(0,) * t for t in range(6)]
