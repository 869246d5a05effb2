"""The training side of the embedded model: caption variants, the word vocabulary, warm starts,
and the steering metric's arithmetic (the scripts themselves run for hours; these parts do not)."""

import io
import json
import tarfile

import caption_ranking
import completion
import eval_steering
import fetch_data
import numpy as np
import pytest
import sample_pool
import tokenize_data
import torch
import train_ar

from jacobigen.models import embedded as E
from jacobigen.models.transformer import Transformer, TransformerConfig, save_transformer

KEYWORDS = {"tags": ["love", "red", "emotion"], "group": "smileys emotion", "subgroup": "heart"}


def test_caption_variants_use_the_name_and_keywords_only():
    rng = np.random.default_rng(0)
    variants = [train_ar.caption_variant("red heart", KEYWORDS, rng) for _ in range(400)]
    allowed = {"red", "heart", "love", "emotion"}
    assert all(set(E.caption_words(v)) <= allowed for v in variants)
    share = variants.count("red heart") / len(variants)
    assert 0.4 < share < 0.65  # the name half the time (plus keyword picks that spell it)
    assert "love" in variants and any(v.startswith("heart ") for v in variants)


def test_an_image_without_keywords_keeps_its_name():
    rng = np.random.default_rng(0)
    empty = {"tags": [], "group": "", "subgroup": ""}
    assert {train_ar.caption_variant("openmoji icon", empty, rng) for _ in range(50)} == {"openmoji icon"}


def test_vocabulary_covers_training_words_and_mirrored_captions_only():
    captions = ["left arrow", "cat face", "dog face"]
    keywords = [KEYWORDS, {"tags": ["kitty"], "group": "animals", "subgroup": "mammal"}, KEYWORDS]
    words = train_ar.build_vocabulary(captions, keywords, [0, 1])
    assert len(set(words)) == len(words)
    assert {"left", "right", "arrow", "cat", "kitty", "mammal"} <= set(words)
    assert "dog" not in words  # held out


def test_a_continued_run_keeps_its_exports_word_ids(tmp_path):
    captions = ["cat face", "cat face", "sun", "red apple"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 4
    base = train_ar.build_vocabulary(captions, keywords, [2, 3])  # sun, red, apple
    (tmp_path / "words.json").write_text(json.dumps({"words": base}))
    first = train_ar.initial_words(tmp_path / "ar.safetensors")
    grown = train_ar.build_vocabulary(captions, keywords, [0, 1, 2, 3], first)  # cat, face now most common
    assert first == base and grown[: len(base)] == base and set(grown[len(base) :]) == {"cat", "face"}
    assert train_ar.initial_words(None) == []


def test_capped_names_weigh_at_most_the_cap_and_small_names_keep_theirs():
    # a person in 5 skin tones x 2 vendors, a 2-image name and a single image
    tones = ["", " light skin tone", " medium skin tone", " medium-dark skin tone", " dark skin tone"]
    captions = [f"waving hand{t}" for t in tones for _ in range(2)] + ["sun", "sun", "olive"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * len(captions)
    grids = np.zeros((len(captions), 2, 2), dtype=np.int64)
    data = train_ar.Batches(grids, grids, captions, keywords, None, range(len(captions)), 0.0, train=True)
    assert np.array_equal(data.draw(4, np.random.default_rng(0)), np.random.default_rng(0).integers(0, 13, 4))
    data.cap_names(4)
    drawn = np.bincount(data.draw(40_000, np.random.default_rng(0)), minlength=len(captions)) / 40_000
    # weights 4 : 2 : 1 (the person's 10 images share four images' worth)
    np.testing.assert_allclose([drawn[:10].sum(), drawn[10:12].sum(), drawn[12]], [4 / 7, 2 / 7, 1 / 7], atol=0.01)
    np.testing.assert_allclose(drawn[10], drawn[12], atol=0.01)  # small names: images drawn alike


def test_drawing_rows_find_the_first_inked_row_of_the_code_grid():
    images = np.full((3, 64, 64, 3), 255, dtype=np.uint8)
    images[1, 9, 30] = (200, 255, 255)  # one faint pixel in code row 2 (pixels 8-11)
    images[2, 60:, :] = 0  # ink in the last code row only
    assert train_ar.drawing_rows(images).tolist() == [0, 2, 15]  # a blank image starts at row 0


def test_canonical_background_rewrites_blank_patches_away_from_ink_only():
    images = np.full((1, 32, 32, 3), 255, np.uint8)  # a 4 x 4 grid of 8-pixel patches
    images[0, 9, 1] = (254, 255, 255)  # one almost-white pixel is ink: patch (1, 0)
    tokens = np.arange(16, dtype=np.int16).reshape(1, 4, 4) + 100
    white = np.full((4, 4), 7, np.int16)
    out = tokenize_data.canonical_background(tokens, images, white)
    near = np.zeros((4, 4), bool)
    near[0:3, 0:2] = True  # the ink patch and its 8 neighbours (clipped at the border)
    assert (out[0][near] == tokens[0][near]).all() and (out[0][~near] == 7).all()
    assert out.dtype == tokens.dtype
    assert (tokenize_data.canonical_background(tokens, images, white, margin=3) == tokens).all()


def test_caption_ranking_splits_each_image_at_its_own_drawn_rows():
    grid = np.zeros((E.GRID, E.GRID), np.int64)
    batches = _ranking_batches()
    seqs = [batches.tokens_of(c, grid) for c in ("sun", "red apple")]
    x, y = train_ar.Batches.pad(seqs)
    ce = (y != train_ar.IGNORE).float()  # one nat per image target: regions count targets
    boi = torch.tensor([b for _, b in seqs])
    out = caption_ranking.region_nll(ce, boi, torch.tensor([2, 0]), rows=3)
    row = E.GRID + 1
    assert out.tolist() == [[2 * row, 3 * row, 11 * row + 1], [0, 3 * row, 13 * row + 1]]  # + EOI


def test_caption_ranking_counts_own_caption_wins_and_its_margin():
    nll = np.array([[1.0, 4.0, 7.0], [5.0, 2.0, 2.0], [3.0, 9.0, 0.0]])
    top1, gain = caption_ranking.ranking(nll, np.array([0, 2, 1]))
    assert top1 == pytest.approx(1 / 3)  # image 1 ties (argmin takes the first), image 2 loses
    assert gain == pytest.approx(((4 - 1) + (3 - 2) + (4 - 9)) / 3)


def _ranking_batches():
    return train_ar.Batches(
        np.zeros((1, E.GRID, E.GRID), np.int64), None, ["sun"], [{}], E.WordCaptions(["sun", "red", "apple"]),
        [0], 0.0, train=False,
    )  # fmt: skip


def test_start_weighting_weighs_the_first_drawn_rows_and_nothing_outside_the_image():
    captions = ["sun", "red apple"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 2
    grids = np.arange(2 * E.GRID * E.GRID).reshape(2, E.GRID, E.GRID) % E.CODEBOOK_SIZE
    reader = E.WordCaptions(["sun", "red", "apple"])
    data = train_ar.Batches(grids, grids, captions, keywords, reader, [0, 1], 0.0, train=False)
    _, y, plain = data.make([0, 1], np.random.default_rng(0))
    assert torch.equal(plain, (y != train_ar.IGNORE).float())
    data.weigh_start(np.array([0, 5]), weight=4.0, rows=2)
    _, y2, w = data.make([0, 1], np.random.default_rng(0))
    assert torch.equal(y, y2)
    row = E.GRID + 1
    for r, first in enumerate([0, 5]):
        start = int((y[r] != train_ar.IGNORE).nonzero()[0])  # the first code, right after BOI
        heavy = torch.zeros_like(w[r], dtype=torch.bool)
        heavy[start + first * row : start + (first + 2) * row] = True
        assert torch.all(w[r][heavy] == 4.0) and int(heavy.sum()) == 2 * row
        assert torch.equal(w[r][~heavy], plain[r][~heavy])
    # the loss is the weighted mean; the reported code CE is not weighted
    logits = torch.randn(*y.shape, 40)
    y_small = torch.where(y == train_ar.IGNORE, y, y % 40)
    loss, ce_sum, n = train_ar.code_loss(logits, y_small, w)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y_small.flatten(), ignore_index=-100, reduction="none")
    assert torch.allclose(loss, (ce * w.flatten()).sum() / w.sum())
    assert n == int(((y_small >= 0) & (y_small < E.CODEBOOK_SIZE)).sum())


def test_completion_keeps_the_given_rows_and_samples_the_rest_as_generate_does():
    from jacobigen.models.load import embedded_bundle

    pipe = embedded_bundle()
    grid = np.random.default_rng(0).integers(0, E.CODEBOOK_SIZE, (E.GRID, E.GRID))
    out = completion.complete(pipe, "sun", grid, rows=13, seed=3, temperature=0.5, top_k=50)
    assert out.shape == (E.GRID, E.GRID) and torch.equal(out[:13], torch.as_tensor(grid[:13]))
    again = completion.complete(pipe, "sun", grid, rows=13, seed=3, temperature=0.5, top_k=50)
    assert torch.equal(out, again)  # seeded
    # greedy: the completion is the model's argmax continuation of caption + given rows
    greedy = completion.complete(pipe, "sun", grid, rows=15, seed=0, top_k=1, cfg=1.0)
    model, cond, _ = completion.encode_one(pipe, "sun")
    seq = torch.tensor([cond + E.frame_tokens(grid[:15])])
    with torch.no_grad():
        first = int(model(seq)[0, -1, : E.CODEBOOK_SIZE].argmax())
    assert int(greedy[15, 0]) == first


def test_warm_start_copies_shared_rows_and_every_other_tensor(tmp_path):
    torch.manual_seed(0)
    old = Transformer(TransformerConfig(vocab_size=E.UNK + 5, dim=32, n_layers=1, n_heads=2, max_seq_len=64))
    save_transformer(old, tmp_path / "old.safetensors", dtype=torch.float32)
    cfg = TransformerConfig(vocab_size=E.WORD_OFFSET + 7, dim=32, n_layers=1, n_heads=2, max_seq_len=40)
    new = train_ar.initial_model(cfg, tmp_path / "old.safetensors", E.UNK)
    old_state, new_state = old.state_dict(), new.state_dict()
    for name, tensor in new_state.items():
        if tensor.shape == old_state[name].shape:
            assert torch.equal(tensor, old_state[name]), name
        else:
            assert torch.equal(tensor[: E.UNK], old_state[name][: E.UNK]), name
            assert tensor[E.UNK :].std() > 0, name


def test_contrast_pairs_each_image_with_the_next_caption():
    captions = ["red heart", "sun", "cat face", "sun"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 4
    grids = np.arange(4)[:, None, None].repeat(E.GRID, 1).repeat(E.GRID, 2)
    words = E.WordCaptions(train_ar.build_vocabulary(captions, keywords, range(4)))
    data = train_ar.Batches(grids, grids, captions, keywords, words, range(4), 0.0, train=False)
    x, y, mismatched = data.make_contrast([0, 1, 2, 3], np.random.default_rng(0))
    assert mismatched.tolist() == [True, True, True, True]
    for r in range(4):  # same image targets, caption of the next example (rolled)
        pos, neg = y[r][y[r] != train_ar.IGNORE], y[4 + r][y[4 + r] != train_ar.IGNORE]
        assert torch.equal(pos, neg) and int(pos[0]) == r
        assert x[4 + r, 1] == words.tokens(captions[(r + 1) % 4])[1]
    _, _, same = data.make_contrast([1, 3], np.random.default_rng(0))  # "sun" twice: not a negative
    assert same.tolist() == [False, False]


def test_cca_loss_rewards_own_captions_and_punishes_others():
    ref = torch.zeros(4)
    mismatched = torch.tensor([True, False])
    base = train_ar.cca_loss(torch.zeros(4), ref, mismatched, beta=0.02, lam=10.0)
    # raising a positive's likelihood, or lowering a real negative's, lowers the loss
    assert train_ar.cca_loss(torch.tensor([5.0, 0, 0, 0]), ref, mismatched, 0.02, 10.0) < base
    assert train_ar.cca_loss(torch.tensor([0, 0, -5.0, 0]), ref, mismatched, 0.02, 10.0) < base
    # a negative that is not a mismatch (same caption or dropped) is rewarded like a positive
    assert train_ar.cca_loss(torch.tensor([0, 0, 0, 5.0]), ref, mismatched, 0.02, 10.0) < base
    logp = torch.zeros(4, requires_grad=True)
    train_ar.cca_loss(logp, ref, mismatched, 0.02, 10.0).backward()
    assert logp.grad[2] > 0 > logp.grad[0]  # descent lowers the negative, raises the positive
    assert abs(float(logp.grad[2])) > abs(float(logp.grad[0]))  # the negative weighs lam times more


def test_cca_fine_tuning_moves_the_model_from_its_frozen_reference(tmp_path):
    captions = ["red heart", "sun", "cat face", "red apple"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 4
    grids = np.random.default_rng(0).integers(0, 8, (4, E.GRID, E.GRID))
    words = E.WordCaptions(train_ar.build_vocabulary(captions, keywords, range(4)))
    train = train_ar.Batches(grids, grids, captions, keywords, words, [0, 1, 2], 0.0, train=True)
    test = train_ar.Batches(grids, grids, captions, keywords, words, [3], 0.0, train=False)
    cfg = TransformerConfig(
        vocab_size=words.vocab_size, dim=16, n_layers=1, n_heads=2, max_seq_len=E.max_seq_len(words)
    )
    torch.manual_seed(0)
    save_transformer(Transformer(cfg), tmp_path / "init.safetensors", dtype=torch.float32)
    options = ["--dim", "16", "--layers", "1", "--heads", "2", "--batch", "3", "--steps", "2", "--warmup", "1"]
    options += ["--log-every", "1", "--export-minutes", "0", "--no-bf16", "--cca-lambda", "1", "--lr", "1e-2"]
    args = train_ar.arguments("test", run="t").parse_args([*options, "--init", str(tmp_path / "init.safetensors")])
    exported, lines = [], []
    train_ar.fit(args, tmp_path, lines.append, cfg, E.UNK, train, test, lambda m, s, h: exported.append(m), "")
    logged = [float(line.split(" loss ")[1].split()[0]) for line in lines if " loss " in line]
    assert len(logged) == 2 and abs(logged[0] - 2 * np.log(2)) < 0.05  # starts at the reference: gap 0
    init = train_ar.initial_model(cfg, tmp_path / "init.safetensors", E.UNK).state_dict()
    assert any(not torch.equal(v, init[k]) for k, v in exported[-1].state_dict().items())
    args.init = None
    with pytest.raises(SystemExit, match="need --init"):
        train_ar.fit(args, tmp_path / "other", lines.append, cfg, E.UNK, train, test, lambda *a: None, "")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_a_gpu_run_on_a_machine_without_one_says_so(tmp_path):
    args = train_ar.arguments("test", run="t").parse_args(["--device", "cuda"])
    cfg = TransformerConfig(vocab_size=E.UNK + 1, dim=16, n_layers=1, n_heads=2, max_seq_len=32)
    with pytest.raises(SystemExit, match="no CUDA device"):
        train_ar.fit(args, tmp_path, print, cfg, E.UNK, None, None, lambda *a: None, "")


def test_self_play_pairs_a_real_image_of_the_name_with_the_models_sample(tmp_path):
    captions = ["sun", "red heart", "waving hand medium skin tone", "sun", "sun"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 5
    grids = np.arange(5)[:, None, None].repeat(E.GRID, 1).repeat(E.GRID, 2)
    words = E.WordCaptions(train_ar.build_vocabulary(captions, keywords, range(5)))
    data = train_ar.Batches(grids, grids, captions, keywords, words, [0, 1, 2, 3], 0.1, train=True)
    samples = np.full((3, E.GRID, E.GRID), 9)
    np.savez(tmp_path / "pool.npz", grids=samples, names=np.array(["sun", "red heart", "waving hand"]))
    pairs = train_ar.SelfPlay(tmp_path / "pool.npz", data)
    assert pairs.real == [[0, 3], [1], [2]]  # exact name first (image 4 is not training), else skin tones
    x, y, mismatched = pairs.make_contrast([0, 1, 2] * 20, np.random.default_rng(0))
    assert mismatched.all() and len(x) == 120
    first = [int(t[t != train_ar.IGNORE][0]) for t in y]  # each row's first code: which grid it is
    assert set(first[:20:3]) == {0, 3} and set(first[1:60:3]) == {1} and set(first[60:]) == {9}
    for r in range(60):  # a sample is scored under the caption its real image got, or both under none
        assert torch.equal(x[r, :2], x[60 + r, :2])
    dropped = [r for r in range(60) if x[r, 1] == E.BOI]
    assert 0 < len(dropped) < 20
    np.savez(tmp_path / "other.npz", grids=samples[:1], names=np.array(["grinning face"]))
    with pytest.raises(SystemExit, match="no training image"):
        train_ar.SelfPlay(tmp_path / "other.npz", data)


def test_pool_names_are_distinct_training_names_fixed_by_the_seed():
    captions = ["sun", "red heart", "waving hand medium skin tone", "waving hand", "cat face", "dog face"]
    names = sample_pool.pool_names(captions, [0, 1, 2, 3, 4], 3, seed=0)
    assert len(set(names)) == 3 and set(names) <= {"sun", "red heart", "waving hand", "cat face"}
    assert names == sample_pool.pool_names(captions, [0, 1, 2, 3, 4], 3, seed=0)


def test_an_iconify_set_without_codepoints_keeps_icons_named_like_a_cldr_emoji(tmp_path):
    icons = {"icons": {"red-apple": {"body": "<g/>"}, "a-logo": {"body": "<g/>"}}, "width": 32, "height": 32}
    icons["aliases"] = {"apple-facing-right": {"parent": "red-apple", "hFlip": True}}
    icons["icons"]["waving-hand-medium-dark-skin-tone"] = {"body": "<g/>"}
    path = tmp_path / "set.tgz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"icons.json": icons, "chars.json": {}}.items():
            raw = json.dumps(data).encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    cldr = {"1F34E": "red apple", "1F44B-1F3FE": "waving hand medium-dark skin tone", "X": "apple facing right"}
    captions = [c for c, _ in fetch_data.iconify_items(fetch_data.Tarball(path), cldr)]
    assert captions == ["red apple", "waving hand medium-dark skin tone", "apple facing right"]


def test_retrieval_hits_and_chance():
    order = np.array([[0, 1, 2], [2, 1, 0]])
    labels = np.array(["cat", "dog", "sun"])
    assert eval_steering.hits(order, labels, ["cat", "cat"]) == {1: 0.5, 10: 1.0}
    p = eval_steering.derangement(5, np.random.default_rng(0))
    assert sorted(p) == list(range(5)) and not np.any(p == np.arange(5))


@pytest.mark.parametrize(("when", "exports"), [("always", 3), ("better", None)])
def test_export_when_always_rewrites_the_export_at_every_measurement(tmp_path, when, exports):
    captions = ["red heart", "sun", "cat face"]
    keywords = [{"tags": [], "group": "", "subgroup": ""}] * 3
    grids = np.random.default_rng(0).integers(0, 8, (3, E.GRID, E.GRID))
    words = E.WordCaptions(train_ar.build_vocabulary(captions, keywords, [0, 1, 2]))
    train = train_ar.Batches(grids, grids, captions, keywords, words, [0, 1], 0.0, train=True)
    test = train_ar.Batches(grids, grids, captions, keywords, words, [2], 0.0, train=False)
    args = train_ar.arguments("test", run="t").parse_args(
        ["--dim", "16", "--layers", "1", "--heads", "2", "--batch", "2", "--steps", "3", "--warmup", "1"]
        + ["--export-minutes", "0", "--ckpt-minutes", "1000", "--export-when", when, "--no-bf16"]
    )
    cfg = TransformerConfig(
        vocab_size=words.vocab_size, dim=16, n_layers=1, n_heads=2, max_seq_len=E.max_seq_len(words)
    )
    exported, lines = [], []
    train_ar.fit(args, tmp_path, lines.append, cfg, E.UNK, train, test, lambda m, s, h: exported.append((s, h)), "")
    measured = [line for line in lines if "heldout_code_ce" in line]
    assert len(measured) == 3 and (tmp_path / "last.pt").exists()
    if exports is None:  # only improvements: the exported losses fall strictly
        losses = [h for _, h in exported]
        assert exported[0][0] == 1 and losses == sorted(set(losses), reverse=True)
        assert sum("exported" in line for line in measured) == len(exported)
    else:
        assert [s for s, _ in exported] == [1, 2, 3]


def test_a_curated_run_trains_every_image_of_its_names_under_the_exact_name(monkeypatch):
    import vocabulary

    monkeypatch.setattr(vocabulary, "NAMES", {"hearts": ["red heart"], "nature": ["sun", "left arrow"]})
    monkeypatch.setattr(vocabulary, "ALIASES", {"heart": "red heart"})
    captions = ["red heart", "sun", "red heart medium skin tone", "cat face", "left arrow", "sun"]
    keywords = [
        KEYWORDS,
        {"tags": ["sunny"], "group": "", "subgroup": ""},
        *[{"tags": [], "group": "", "subgroup": ""}] * 4,
    ]
    split = {"train": [0, 2, 3, 4], "test": [1, 5]}
    chosen, words, names = train_ar.curated_run(captions, keywords, split, first=["red", "cat"])
    assert chosen == {"train": [0, 1, 4, 5], "test": []}  # held-out suns too; no skin tone, no other name
    assert words.words == ["red", "cat", "heart", "sun", "left", "arrow", "right"]  # mirrored: right
    assert names["names"] == ["red heart", "sun", "left arrow"] and names["aliases"] == {"heart": "red heart"}
    assert names["keywords"]["red heart"] == ["emotion", "love", "red"] and names["keywords"]["sun"] == ["sunny"]
    assert vocabulary.check(captions) == []
    assert vocabulary.check(["sun"]) == ["no image: red heart", "no image: left arrow"]


def test_one_style_keeps_each_names_image_from_the_first_set_that_has_it():
    captions = ["sun", "sun", "red heart", "red heart", "cat face"]
    sources = ["noto", "twemoji", "openmoji", "noto", "openmoji"]
    assert train_ar.one_style([0, 1, 2, 3, 4], captions, sources, ["twemoji", "noto", "openmoji"]) == [1, 3, 4]
    assert train_ar.one_style([0, 2], captions, sources, ["openmoji", "noto"]) == [0, 2]  # only among drawn
    with pytest.raises(SystemExit, match="no image for 1 names"):
        train_ar.one_style([0, 1, 4], captions, sources, ["noto", "twemoji"])  # no cat face in either


def test_the_curated_vocabulary_holds_the_names_the_docs_use():
    import vocabulary

    names = vocabulary.all_names()
    assert 200 <= len(names) <= 300 and len(set(names)) == len(names)
    assert {"grinning face", "red heart", "cat face", "red apple", "sun"} <= set(names)
    assert set(vocabulary.ALIASES.values()) <= set(names)


def test_a_clip_model_reads_every_word_and_grows_its_vocabulary_by_the_motion_words():
    import train_video

    from jacobigen.models.names import KnownNames

    names = E.NamedCaptions(["red", "heart", "left"], KnownNames(["red heart"], {}, {}, E.caption_words))
    reader, shared = train_video.clip_reader(names, ["red heart drifting left", "red heart blinking"])
    assert type(reader) is E.WordCaptions and reader.words == ["red", "heart", "left", "drifting", "blinking"]
    assert shared == names.vocab_size and reader.vocab_size == names.vocab_size + 2  # EOF comes after them
    words = ("red", "heart", "drifting", "left")
    assert reader.tokens("red heart drifting left")[1:-1] == [reader.ids[w] for w in words]
    byte_reader = E.ByteCaptions()
    assert train_video.clip_reader(byte_reader, ["sun blinking"]) == (byte_reader, byte_reader.vocab_size)
