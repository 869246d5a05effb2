"""The VQ tokenizer's public contract: shapes, dtypes, save/load round trip, clear errors."""

import pytest
import torch

from jacobigen.core.errors import WeightsError
from jacobigen.models.vq import VQConfig, VQModel, codebook_stats

TINY = VQConfig(channels=(8, 16, 16), res_blocks=(0, 0, 1), dec_res_blocks=(0, 0, 1), codebook_size=32, code_dim=4)


def test_encode_decode_shapes_and_ranges():
    torch.manual_seed(0)
    model = VQModel(TINY).eval()
    images = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    codes = model.encode(images)
    assert codes.shape == (2, 16, 16) and codes.dtype == torch.long
    assert int(codes.min()) >= 0 and int(codes.max()) < TINY.codebook_size
    assert torch.equal(codes, model.encode(images.float() / 255))  # uint8 and [0,1] floats agree
    out = model.decode(codes)
    assert out.shape == (2, 3, 64, 64) and float(out.min()) >= 0 and float(out.max()) <= 1


def test_save_load_round_trip(tmp_path):
    torch.manual_seed(0)
    model = VQModel(TINY).eval()
    path = tmp_path / "vq.safetensors"
    model.save(path, dtype=torch.float32)
    loaded = VQModel.load(path)
    assert loaded.config == TINY
    codes = torch.randint(0, TINY.codebook_size, (1, 16, 16))
    assert torch.allclose(model.decode(codes), loaded.decode(codes))


def test_missing_and_corrupt_files_name_the_file(tmp_path):
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(WeightsError, match="nope.safetensors"):
        VQModel.load(missing)
    corrupt = tmp_path / "bad.safetensors"
    corrupt.write_bytes(b"not a safetensors file")
    with pytest.raises(WeightsError, match="bad.safetensors"):
        VQModel.load(corrupt)


def test_restart_dead_codes_moves_unused_entries():
    q = VQModel(TINY).quantizer
    z = torch.randn(2, TINY.code_dim, 16, 16)
    assert q.restart_dead(z) == TINY.codebook_size  # nothing used yet: all restart
    assert q.restart_dead(z) == 0


def test_codebook_stats():
    s = codebook_stats(torch.tensor([0, 1, 2, 3]), 8)
    assert s["used"] == 0.5 and abs(s["perplexity"] - 4) < 1e-5
