"""A plain decoder-only transformer in torch, and SmolLM2-135M loaded from its GGUF file.

The calibration needs a real forward pass whose shape the roofline knows exactly, so the model
is written out by hand (RMSNorm, rotary attention with grouped KV heads, SwiGLU MLP) instead
of borrowed from a framework whose kernels and fusions we cannot see. The KV cache is a
preallocated tensor with a length pointer, so rolling back rejected speculative tokens is an
O(1) pointer move.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .config import SMOLLM2_135M, ModelConfig
from .weights import smollm2_path


class KVCache:
    """Keys and values of every layer, preallocated; ``length`` tokens are valid.

    All sequences of a batch share one length (the benchmark times equal-context batches and
    the speculative loop runs one sequence), which keeps rollback a pointer move.
    """

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, dtype: torch.dtype,
                 device: torch.device | str = "cpu") -> None:
        # Keys are stored transposed ([..., head_dim, position]) so the score matmul reads them
        # as a plain (not transposed) operand: twice as fast for decode on CPU.
        self.k = torch.zeros((cfg.n_layers, batch, cfg.n_kv_heads, cfg.head_dim, max_len),
                             dtype=dtype, device=device)
        self.v = torch.zeros((cfg.n_layers, batch, cfg.n_kv_heads, max_len, cfg.head_dim),
                             dtype=dtype, device=device)
        self.max_len = max_len
        self.length = 0

    def rollback(self, length: int) -> None:
        """Forget every entry at or after ``length`` (rejected draft tokens)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} from {self.length}")
        self.length = length

    def fill_random(self, length: int, generator: torch.Generator | None = None) -> None:
        """Pretend ``length`` tokens were prefilled (timing does not depend on the values)."""
        if length > self.max_len:
            raise ValueError(f"context {length} exceeds cache size {self.max_len}")
        self.k[..., :length].normal_(generator=generator)
        self.v[:, :, :, :length].normal_(generator=generator)
        self.length = length


def _fuse(weights: dict[str, torch.Tensor], cfg: ModelConfig, dtype: torch.dtype,
          device: torch.device) -> dict[str, torch.Tensor]:
    """Cast to ``dtype`` and fuse Q|K|V and gate|up into one matrix each, as serving engines do.

    Fewer, larger matmuls per layer: less per-op overhead, closer to the roofline's picture
    of a layer as a few weight reads.
    """
    out = {k: weights[k].to(device=device, dtype=dtype)
           for k in ("embed", "norm", "lm_head") if k in weights}
    for i in range(cfg.n_layers):
        p = f"l{i}."
        out[p + "attn_norm"] = weights[p + "attn_norm"].to(device=device, dtype=dtype)
        out[p + "ffn_norm"] = weights[p + "ffn_norm"].to(device=device, dtype=dtype)
        out[p + "wqkv"] = torch.cat([weights[p + n] for n in ("wq", "wk", "wv")]).to(
            device=device, dtype=dtype)
        out[p + "wo"] = weights[p + "wo"].to(device=device, dtype=dtype)
        out[p + "w_gate_up"] = torch.cat([weights[p + "w_gate"], weights[p + "w_up"]]).to(
            device=device, dtype=dtype)
        out[p + "w_down"] = weights[p + "w_down"].to(device=device, dtype=dtype)
    return out


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Transformer(torch.nn.Module):
    """Llama-style decoder; ``forward`` runs new tokens against (and appends to) a KV cache."""

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", seed: int = 0,
                 weights: dict[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.cfg, self.dtype, self.device = cfg, dtype, torch.device(device)
        if weights is None:
            weights = random_weights(cfg, seed)
        self.w = _fuse(weights, cfg, dtype, self.device)
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64)
                                        / cfg.head_dim))
        ang = torch.outer(torch.arange(cfg.max_context, dtype=torch.float64), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.cos = ang.cos().to(self.device, dtype)
        self.sin = ang.sin().to(self.device, dtype)

    @staticmethod
    def _attention(qh: torch.Tensor, kt: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None, g: int, scale: float) -> torch.Tensor:
        """Grouped-query attention as two batched matmuls (q: [b, q, heads, d], kt: K^T).

        The g query heads sharing a KV head are stacked along the query axis, so K and V are
        read once per KV head and never expanded per query head (torch's CPU SDPA was 4-8x
        slower for bf16 decode when measured here).
        Scores stay in the model dtype (softmax accumulates in float32 inside the kernel):
        materialising float32 scores costs more than the matmuls on CPU. Returns
        [b, q, heads * d].
        """
        b, q, nh, hd = qh.shape
        nkv = nh // g
        qg = (qh * scale).view(b, q, nkv, g, hd).permute(0, 2, 3, 1, 4).reshape(b, nkv, g * q, hd)
        s = torch.matmul(qg, kt)
        if mask is not None:
            s.view(b, nkv, g, q, -1).masked_fill_(~mask, float("-inf"))
        # One pass: the CPU/GPU softmax kernels accumulate in float32 internally.
        att = torch.matmul(torch.softmax(s, dim=-1), v)
        return att.view(b, nkv, g, q, hd).permute(0, 3, 1, 2, 4).reshape(b, q, nh * hd)

    def truncated(self, n_layers: int) -> Transformer:
        """First ``n_layers`` of this model plus its final norm and LM head (shared tensors)."""
        sub = Transformer.__new__(Transformer)
        torch.nn.Module.__init__(sub)
        sub.cfg, sub.dtype, sub.device = self.cfg.truncated(n_layers), self.dtype, self.device
        sub.w, sub.cos, sub.sin = self.w, self.cos, self.sin
        return sub

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        return KVCache(self.cfg, batch, max_len, self.dtype, self.device)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache, logits: str = "all") -> torch.Tensor:
        """Logits (float32) for ``tokens`` [batch, q] appended at ``cache.length``.

        ``logits="last"`` computes the LM head for the last position only (prefill);
        verification needs all q positions.
        """
        cfg, w = self.cfg, self.w
        b, q = tokens.shape
        start = cache.length
        end = start + q
        if end > cache.max_len:
            raise ValueError(f"KV cache full: {end} > {cache.max_len}")
        cos = self.cos[start:end][None, :, None, :]
        sin = self.sin[start:end][None, :, None, :]
        mask = None
        if q > 1:
            pos_q = torch.arange(start, end, device=self.device)[:, None]
            mask = torch.arange(end, device=self.device)[None, :] <= pos_q
        x = w["embed"][tokens]
        hd, nh, nkv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
        g = nh // nkv
        scale = hd ** -0.5
        d, eps = cfg.hidden_size, cfg.rms_eps
        for i in range(cfg.n_layers):
            p = f"l{i}."
            h = F.rms_norm(x, (d,), w[p + "attn_norm"], eps)
            qkv = F.linear(h, w[p + "wqkv"]).view(b, q, nh + 2 * nkv, hd)
            qk = qkv[:, :, :nh + nkv]
            qk = qk * cos + _rotate_half(qk) * sin  # rotary on Q and K heads in one go
            cache.k[i, ..., start:end] = qk[:, :, nh:].permute(0, 2, 3, 1)
            cache.v[i, :, :, start:end] = qkv[:, :, nh + nkv:].transpose(1, 2)
            att = self._attention(qk[:, :, :nh], cache.k[i, ..., :end], cache.v[i, :, :, :end],
                                  mask, g, scale)
            x = x + F.linear(att, w[p + "wo"])
            h = F.rms_norm(x, (d,), w[p + "ffn_norm"], eps)
            gate, up = F.linear(h, w[p + "w_gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w[p + "w_down"])
        cache.length = end
        if logits == "last":
            x = x[:, -1:]
        x = F.rms_norm(x, (d,), w["norm"], eps)
        head = w["embed"] if cfg.tied_embeddings else w["lm_head"]
        return F.linear(x, head).float()


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    """Scaled Gaussian weights: enough for timing and for the exactness tests."""
    g = torch.Generator().manual_seed(seed)
    d, f = cfg.hidden_size, cfg.intermediate_size

    def mat(o: int, i: int) -> torch.Tensor:
        return torch.randn(o, i, generator=g) / i ** 0.5

    w: dict[str, torch.Tensor] = {"embed": torch.randn(cfg.vocab_size, d, generator=g),
                                  "norm": torch.ones(d)}
    if not cfg.tied_embeddings:
        w["lm_head"] = mat(cfg.vocab_size, d)
    for i in range(cfg.n_layers):
        p = f"l{i}."
        w[p + "attn_norm"] = torch.ones(d)
        w[p + "ffn_norm"] = torch.ones(d)
        w[p + "wq"] = mat(cfg.n_heads * cfg.head_dim, d)
        w[p + "wk"] = mat(cfg.n_kv_heads * cfg.head_dim, d)
        w[p + "wv"] = mat(cfg.n_kv_heads * cfg.head_dim, d)
        w[p + "wo"] = mat(d, cfg.n_heads * cfg.head_dim)
        w[p + "w_gate"] = mat(f, d)
        w[p + "w_up"] = mat(f, d)
        w[p + "w_down"] = mat(d, f)
    return w


# ---------------------------------------------------------------- SmolLM2 from GGUF


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K reordering (HF halves -> interleaved pairs) back to HF layout.

    The converter stores rows of each head as interleaved (x0, x_{d/2}, x1, ...) pairs for its
    GPT-J style rope; we use the HF rotate-half rope, so the rows go back to two halves.
    """
    out_dim = w.shape[0]
    return (w.reshape(n_head, out_dim // n_head // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


@functools.cache
def _gguf_reader(path: str) -> Any:
    from gguf import GGUFReader

    return GGUFReader(path)


@functools.cache
def smollm2_weights(path: str | None = None) -> dict[str, torch.Tensor]:
    """Dequantised float32 weights of SmolLM2-135M keyed as ``Transformer`` expects.

    Cached per process: dequantising the file takes a few seconds.
    """
    from gguf import quants

    reader = _gguf_reader(str(path or smollm2_path()))
    cfg = SMOLLM2_135M
    names = {"attn_norm": "attn_norm", "ffn_norm": "ffn_norm", "attn_q": "wq", "attn_k": "wk",
             "attn_v": "wv", "attn_output": "wo", "ffn_gate": "w_gate", "ffn_up": "w_up",
             "ffn_down": "w_down"}
    w: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        arr = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name == "token_embd.weight":
            key = "embed"
        elif t.name == "output_norm.weight":
            key = "norm"
        elif t.name == "output.weight":
            key = "lm_head"
        elif t.name.startswith("blk."):
            _, layer, kind, _ = t.name.split(".")
            key = f"l{layer}.{names[kind]}"
            if kind == "attn_q":
                arr = _unpermute(arr, cfg.n_heads)
            elif kind == "attn_k":
                arr = _unpermute(arr, cfg.n_kv_heads)
        else:
            continue
        w[key] = torch.from_numpy(arr.copy())
    return w


def load_smollm2(dtype: torch.dtype = torch.float32, device: str = "cpu") -> Transformer:
    """SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to ``dtype``)."""
    w = smollm2_weights()
    cfg = SMOLLM2_135M if "lm_head" not in w else replace(SMOLLM2_135M, tied_embeddings=False)
    return Transformer(cfg, dtype=dtype, device=device, weights=w)


@functools.cache
def smollm2_tokenizer() -> Any:
    """Byte-level BPE built from the GGUF's own vocabulary and merges (no download).

    The ``smollm`` pre-tokenizer splits digits one by one before the GPT-2 byte-level split;
    control tokens (``<|im_start|>`` ...) are registered as special so they stay whole.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = _gguf_reader(str(smollm2_path()))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([tok for tok, ty in zip(tokens, types, strict=True) if ty == 3])
    return tk


def chat_prompt(user: str, system: str = "You are a helpful AI assistant named SmolLM, "
                "trained by Hugging Face") -> str:
    """The GGUF's ChatML template applied to one user turn (generation prompt added)."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def greedy_generate(model: Transformer, prompt_ids: list[int], n_new: int,
                    stop_id: int | None = None) -> list[int]:
    """Plain greedy decoding (the reference the speculative loop must reproduce at T=0)."""
    cache = model.new_cache(1, len(prompt_ids) + n_new + 1)
    logits = model(torch.tensor([prompt_ids], device=model.device), cache, logits="last")
    out: list[int] = []
    for _ in range(n_new):
        tok = int(logits[0, -1].argmax())
        out.append(tok)
        if tok == stop_id:
            break
        logits = model(torch.tensor([[tok]], device=model.device), cache)
    return out
