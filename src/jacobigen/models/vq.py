"""Small VQ tokenizer for the embedded emoji model: 64x64 RGB <-> 16x16 codes.

The quantizer looks codes up in a low-dimensional, l2-normalised space
(cosine similarity), which keeps most of the 1024 entries in use; training
restarts dead codes from encoder outputs (see `VectorQuantizer.restart_dead`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from jacobigen.core.errors import WeightsError
from jacobigen.models.transformer import check_finite


@dataclass(frozen=True)
class VQConfig:
    image_size: int = 64
    channels: tuple[int, ...] = (32, 64, 128)  # per resolution: 64, 32, 16
    res_blocks: tuple[int, ...] = (0, 1, 1)  # encoder, per resolution
    dec_res_blocks: tuple[int, ...] = (0, 1, 2)  # decoder: spends more where pixels are cheap
    codebook_size: int = 1024
    code_dim: int = 16
    beta: float = 0.25  # commitment weight

    @property
    def grid(self) -> int:
        return self.image_size // 2 ** (len(self.channels) - 1)

    @classmethod
    def from_dict(cls, d: dict) -> VQConfig:
        d = dict(d)
        for k in ("channels", "res_blocks", "dec_res_blocks"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


def _norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(32, c // 4), c)


class ResBlock(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.body = nn.Sequential(
            _norm(c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1), _norm(c), nn.SiLU(), nn.Conv2d(c, c, 3, padding=1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        ch = cfg.channels
        layers: list[nn.Module] = [nn.Conv2d(3, ch[0], 3, padding=1)]
        for i, c in enumerate(ch):
            layers += [ResBlock(c) for _ in range(cfg.res_blocks[i])]
            if i + 1 < len(ch):
                layers.append(nn.Conv2d(c, ch[i + 1], 4, stride=2, padding=1))
        layers += [_norm(ch[-1]), nn.SiLU(), nn.Conv2d(ch[-1], cfg.code_dim, 1)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        ch = cfg.channels[::-1]
        blocks = cfg.dec_res_blocks[::-1]
        layers: list[nn.Module] = [nn.Conv2d(cfg.code_dim, ch[0], 3, padding=1)]
        for i, c in enumerate(ch):
            layers += [ResBlock(c) for _ in range(blocks[i])]
            if i + 1 < len(ch):  # transposed conv: upsampling priced at the low resolution
                layers.append(nn.ConvTranspose2d(c, ch[i + 1], 4, stride=2, padding=1))
        layers += [_norm(ch[-1]), nn.SiLU(), nn.Conv2d(ch[-1], 3, 3, padding=1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class VectorQuantizer(nn.Module):
    """Nearest-neighbour lookup by cosine similarity in a small code space."""

    def __init__(self, size: int, dim: int, beta: float):
        super().__init__()
        self.beta = beta
        self.codebook = nn.Parameter(torch.randn(size, dim))
        self.register_buffer("usage", torch.zeros(size), persistent=False)

    def codes(self) -> torch.Tensor:
        """Normalised code vectors [K, D] (also the basis for code-neighbour distances)."""
        return F.normalize(self.codebook, dim=-1)

    def lookup(self, z: torch.Tensor) -> torch.Tensor:
        """[B, D, H, W] -> code ids [B, H, W]."""
        flat = F.normalize(z.permute(0, 2, 3, 1), dim=-1)
        return (flat @ self.codes().t()).argmax(-1)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Code ids [B, H, W] -> [B, D, H, W]."""
        return F.embedding(ids, self.codes()).permute(0, 3, 1, 2)

    def forward(self, z: torch.Tensor):
        """Returns straight-through quantised z, ids, and the VQ loss."""
        zn = F.normalize(z, dim=1)
        ids = self.lookup(z)
        q = self.embed(ids)
        loss = F.mse_loss(q, zn.detach()) + self.beta * F.mse_loss(zn, q.detach())
        if self.training:
            with torch.no_grad():
                counts = torch.bincount(ids.flatten(), minlength=self.usage.numel()).float()
                self.usage.mul_(0.99).add_(counts, alpha=0.01)
        return zn + (q - zn).detach(), ids, loss

    @torch.no_grad()
    def restart_dead(self, z: torch.Tensor, threshold: float = 1e-3) -> int:
        """Move codes unused lately onto random encoder outputs from this batch."""
        dead = (self.usage < threshold).nonzero().flatten()
        if dead.numel() == 0:
            return 0
        flat = F.normalize(z.permute(0, 2, 3, 1).reshape(-1, z.shape[1]), dim=-1)
        pick = torch.randint(0, flat.shape[0], (dead.numel(),), device=z.device)
        self.codebook[dead] = flat[pick] + 0.01 * torch.randn_like(flat[pick])
        self.usage[dead] = 1.0
        return int(dead.numel())


def codebook_stats(ids: torch.Tensor, size: int) -> dict[str, float]:
    """Perplexity and fraction of codes used, over any set of code ids."""
    p = torch.bincount(ids.flatten(), minlength=size).float()
    p = p / p.sum()
    entropy = -(p[p > 0] * p[p > 0].log()).sum()
    return {"perplexity": float(entropy.exp()), "used": float((p > 0).float().mean())}


class VQModel(nn.Module):
    """Image tokenizer. Pixels in [0, 1] (or uint8) <-> LongTensor codes [B, 16, 16]."""

    def __init__(self, config: VQConfig | None = None):
        super().__init__()
        self.config = config or VQConfig()
        self.encoder = Encoder(self.config)
        self.quantizer = VectorQuantizer(self.config.codebook_size, self.config.code_dim, self.config.beta)
        self.decoder = Decoder(self.config)

    @staticmethod
    def _to_input(images: torch.Tensor) -> torch.Tensor:
        if images.dtype == torch.uint8:
            images = images.float() / 255.0
        return images.float() * 2.0 - 1.0

    def forward(self, images: torch.Tensor):
        """Training pass: reconstruction in [-1, 1] scale, code ids, VQ loss, pre-quant z."""
        z = self.encoder(self._to_input(images))
        with torch.autocast(z.device.type, enabled=False):  # code lookup stays in fp32
            q, ids, vq_loss = self.quantizer(z.float())
        return self.decoder(q).float(), ids, vq_loss, z.float()

    @torch.no_grad()
    def encode(self, images: torch.Tensor) -> torch.Tensor:
        device = next(self.parameters()).device
        return self.quantizer.lookup(self.encoder(self._to_input(images.to(device))))

    @torch.no_grad()
    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        device = next(self.parameters()).device
        x = self.decoder(self.quantizer.embed(codes.to(device).long()))
        return ((x.float() + 1.0) / 2.0).clamp(0.0, 1.0)

    def save(self, path: str | Path, dtype: torch.dtype = torch.float16) -> None:
        from safetensors.torch import save_file

        tensors = {k: v.detach().to("cpu", dtype).contiguous() for k, v in self.state_dict().items()}
        save_file(tensors, str(path), metadata={"config": json.dumps(asdict(self.config)), "format": "jacobigen-vq-1"})

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> VQModel:
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise WeightsError(f"VQ weights file not found: {path}")
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {k: f.get_tensor(k) for k in f.keys()}
            model = cls(VQConfig.from_dict(json.loads(meta["config"])))
            model.load_state_dict({k: v.float() for k, v in tensors.items()})
        except Exception as exc:  # corrupt file, bad metadata or mismatched tensors
            raise WeightsError(f"cannot load VQ weights from {path}: {exc}") from exc
        check_finite(tensors, path)
        return model.to(device).eval()
