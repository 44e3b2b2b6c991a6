"""Time a catalog model's own forward passes on this device (``calibrate --model NAME``).

A SmolLM2-135M pass (hidden 576) is launch-bound on any GPU and cannot tell how fast the
chip runs the model a user serves, so this builds the served model's shape with random
weights (fused QKV and gate|up GEMMs, RoPE, grouped-query attention through torch's SDPA,
SwiGLU; MoE layers with a fixed round-robin routing, each expert one GEMM pair, plus the
shared experts) and times, as JSON lines in the ``--from-steps`` format (``steps.py``):

- decode/verify passes (``batch`` rows of ``q`` new tokens over ``context`` cached ones,
  the LM head over every new token), replayed as CUDA graphs on a GPU as vLLM runs them;
- prefill chunks (``batch`` causal chunks of ``tokens / batch`` tokens over ``context``
  cached ones, the LM head once per sequence), eager, as engines run prefill.

A model too large for the device is timed at ``layers`` of its layers and at none (embedding,
final norm and LM head alone), and scaled: T = T(0) + n_layers / layers * (T(layers) - T(0)).
A point whose KV cache would not fit the memory budget is written as an ``error`` line (the
fit skips it). Each time is the mean of ``repeats`` replays after ``warmup`` untimed ones,
bracketed by CUDA events (a host clock on CPU).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from ..catalog import ModelSpec
from .bench import DTYPES, device_description, measure_bandwidth, measure_peak_flops, sync


@dataclass(frozen=True)
class ShapeGrid:
    """The passes to time: decode batch x q x context, and prefill (batch, tokens, context)."""

    batches: tuple[int, ...]
    qs: tuple[int, ...]
    contexts: tuple[int, ...]
    prefills: tuple[tuple[int, int, int], ...]  # (batch, tokens in all, cached context)
    warmup: int = 3
    repeats: int = 20

    @staticmethod
    def for_device(device: str, quick: bool) -> ShapeGrid:
        """The default grid: GPU passes from launch-bound (batch 1) to compute-bound
        (batch 256 x 8 tokens) and context 512 to 8k; a CPU grid small enough for minutes."""
        if torch.device(device).type == "cuda":
            if quick:
                return ShapeGrid((1, 8, 64, 256), (1, 4), (512, 4096),
                                 ((1, 512, 0), (1, 2048, 0), (1, 512, 4096)), 2, 10)
            return ShapeGrid((1, 2, 4, 8, 16, 32, 64, 128, 256), (1, 2, 4, 8), (512, 2048, 8192),
                             ((1, 128, 0), (1, 512, 0), (1, 2048, 0), (1, 8192, 0), (4, 2048, 0),
                              (4, 8192, 0), (1, 512, 4096), (1, 2048, 4096)), 3, 20)
        if quick:
            return ShapeGrid((1, 4), (1, 4), (64, 256), ((1, 64, 0), (1, 256, 0), (1, 64, 256)),
                             1, 3)
        return ShapeGrid((1, 2, 4, 8, 16), (1, 2, 4, 8), (128, 512, 2048),
                         ((1, 128, 0), (1, 512, 0), (1, 2048, 0), (4, 512, 0), (1, 256, 1024)),
                         2, 5)

    def decode_points(self) -> Iterator[tuple[int, int, int]]:
        for b in self.batches:
            for c in self.contexts:
                for q in self.qs:
                    yield b, q, c


def _rope(hd: int, max_len: int, device: torch.device, dtype: torch.dtype
          ) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32, device=device) / hd))
    ang = torch.outer(torch.arange(max_len, dtype=torch.float32, device=device), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class ShapeStack:
    """``layers`` decoder layers of ``spec``'s shape (random weights) with its embedding and
    LM head; ``layers`` = 0 times the embedding, final norm and LM head alone."""

    def __init__(self, spec: ModelSpec, layers: int, dtype: torch.dtype, device: str,
                 seed: int = 0) -> None:
        self.spec, self.layers, self.dtype = spec, layers, dtype
        self.device = torch.device(device)
        g = torch.Generator(device="cpu").manual_seed(seed)
        d, hd = spec.hidden_size, spec.head_dim
        nh, nkv = spec.n_heads, spec.n_kv_heads

        def w(*shape: int) -> torch.Tensor:  # small values: no overflow through the layers
            t = torch.randn(*shape, generator=g, dtype=torch.float32) * (0.5 / math.sqrt(shape[-1]))
            return t.to(self.device, dtype)

        self.embed = w(spec.vocab_size, d)
        self.head = self.embed if spec.tied_embeddings else w(spec.vocab_size, d)
        self.norm = torch.ones(d, device=self.device, dtype=dtype)
        moe = spec.moe
        self.blocks: list[dict[str, torch.Tensor]] = []
        for i in range(layers):
            # the timed layers are the model's last ones (its MoE layers, where it has any)
            dense = moe is None or spec.n_layers - layers + i < moe.first_dense_layers
            b = {"wqkv": w((nh + 2 * nkv) * hd, d), "wo": w(d, nh * hd)}
            if dense:
                b["gate_up"], b["down"] = w(2 * spec.intermediate_size, d), w(d, spec.intermediate_size)
            else:
                e = moe.expert_intermediate_size
                b["router"] = w(moe.n_experts, d)
                b["experts_gate_up"] = torch.stack([w(2 * e, d) for _ in range(moe.n_experts)])
                b["experts_down"] = torch.stack([w(d, e) for _ in range(moe.n_experts)])
                if moe.n_shared_experts:
                    s = moe.n_shared_experts * moe.shared_expert_intermediate_size
                    b["gate_up"], b["down"] = w(2 * s, d), w(d, s)
            self.blocks.append(b)
        self.cos = self.sin = None
        self.k = self.v = None

    def weight_bytes(self) -> int:
        seen, total = set(), 0
        for t in [self.embed, self.head, *(x for b in self.blocks for x in b.values())]:
            if id(t) not in seen:
                seen.add(id(t))
                total += t.numel() * t.element_size()
        return total

    def kv_bytes(self, batch: int, length: int) -> int:
        s = self.spec
        return 2 * max(self.layers, 1) * batch * s.n_kv_heads * length * s.head_dim * \
            torch.empty((), dtype=self.dtype).element_size()

    def alloc_cache(self, batch: int, length: int) -> None:
        """KV cache of ``batch`` sequences of ``length`` positions (random: timing does not
        depend on the values), and the rotary tables."""
        s = self.spec
        self.k = self.v = None
        shape = (max(self.layers, 1), batch, s.n_kv_heads, length, s.head_dim)
        self.k = torch.empty(shape, device=self.device, dtype=self.dtype).normal_(0.0, 0.1)
        self.v = torch.empty(shape, device=self.device, dtype=self.dtype).normal_(0.0, 0.1)
        self.cos, self.sin = _rope(s.head_dim, length, self.device, self.dtype)

    def _moe(self, b: dict[str, torch.Tensor], h: torch.Tensor) -> torch.Tensor:
        """Experts by a fixed round-robin routing (token j to experts j*top_k .. +top_k-1):
        shapes are static, so the pass is capturable in a CUDA graph, and at any batch the
        active experts are what a balanced router activates."""
        moe = self.spec.moe
        n, d = h.shape
        torch.softmax(F.linear(h, b["router"]).float(), dim=-1)  # the router's work
        out = torch.zeros_like(h)
        slots = torch.arange(n * moe.top_k, device=self.device)
        expert_of = slots % moe.n_experts
        token_of = slots // moe.top_k
        for e in range(min(moe.n_experts, n * moe.top_k)):
            idx = token_of[expert_of == e]
            x = h.index_select(0, idx)
            gate, up = F.linear(x, b["experts_gate_up"][e]).chunk(2, dim=-1)
            out.index_add_(0, idx, F.linear(F.silu(gate) * up, b["experts_down"][e]))
        return out

    def forward(self, tokens: torch.Tensor, ctx: int, last_only: bool) -> torch.Tensor:
        """Logits of ``tokens`` [batch, q] written at positions ctx .. ctx+q-1 of the cache."""
        s = self.spec
        bsz, q = tokens.shape
        d, hd, nh, nkv = s.hidden_size, s.head_dim, s.n_heads, s.n_kv_heads
        end = ctx + q
        x = self.embed[tokens]
        cos = self.cos[ctx:end][None, :, None, :]
        sin = self.sin[ctx:end][None, :, None, :]
        # causal with an offset (query i sees ctx + i + 1 positions): torch's lower-right
        # causal bias, which keeps SDPA on its flash kernels where a boolean mask would not
        mask = causal_lower_right(q, end) if q > 1 else None
        for i, b in enumerate(self.blocks):
            h = F.rms_norm(x, (d,), self.norm, 1e-5)
            qkv = F.linear(h, b["wqkv"]).view(bsz, q, nh + 2 * nkv, hd)
            qk = qkv[:, :, :nh + nkv]
            qk = qk * cos + _rotate_half(qk) * sin
            self.k[i, :, :, ctx:end] = qk[:, :, nh:].transpose(1, 2)
            self.v[i, :, :, ctx:end] = qkv[:, :, nh + nkv:].transpose(1, 2)
            att = F.scaled_dot_product_attention(
                qk[:, :, :nh].transpose(1, 2), self.k[i, :, :, :end], self.v[i, :, :, :end],
                attn_mask=mask, enable_gqa=nh != nkv)
            x = x + F.linear(att.transpose(1, 2).reshape(bsz, q, nh * hd), b["wo"])
            h = F.rms_norm(x, (d,), self.norm, 1e-5)
            if "experts_down" in b:
                y = self._moe(b, h.reshape(bsz * q, d)).view(bsz, q, d)
                if "down" in b:
                    gate, up = F.linear(h, b["gate_up"]).chunk(2, dim=-1)
                    y = y + F.linear(F.silu(gate) * up, b["down"])
            else:
                gate, up = F.linear(h, b["gate_up"]).chunk(2, dim=-1)
                y = F.linear(F.silu(gate) * up, b["down"])
            x = x + y
        if last_only:
            x = x[:, -1:]
        x = F.rms_norm(x, (d,), self.norm, 1e-5)
        return F.linear(x, self.head).argmax(-1)


def _timed(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    """Mean seconds per call of ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1e3 / repeats
    import time

    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def _graphed(fn: Callable[[], object], device: torch.device) -> Callable[[], object]:
    """``fn`` captured as a CUDA graph (its replay), or ``fn`` itself off a GPU."""
    if device.type != "cuda":
        return fn
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up off the capture stream, as torch asks
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _free_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return float(free)
    from .bench import _memory_bytes

    return _memory_bytes("cpu") * 0.5


@dataclass(frozen=True)
class Plan:
    """How a model is timed: ``layers`` of its layers, scaled when fewer than all."""

    layers: int
    scaled: bool


def plan_layers(spec: ModelSpec, device: torch.device, dtype: torch.dtype,
                layers: int | None, budget_share: float = 0.5) -> Plan:
    """All layers when they fit in ``budget_share`` of free memory, else as many as do (at
    least 1); ``layers`` given: that many (at most the model's)."""
    if layers is not None:
        n = max(1, min(int(layers), spec.n_layers))
        return Plan(n, n < spec.n_layers)
    size = torch.empty((), dtype=dtype).element_size()
    per_layer = spec.attn_params_per_layer
    moe = spec.moe
    ffn = (3 * spec.hidden_size * spec.intermediate_size if moe is None else
           moe.n_experts * 3 * spec.hidden_size * moe.expert_intermediate_size
           + 3 * spec.hidden_size * moe.n_shared_experts * moe.shared_expert_intermediate_size)
    layer_bytes = (per_layer + ffn) * size
    head_bytes = spec.vocab_size * spec.hidden_size * size * (1 if spec.tied_embeddings else 2)
    room = budget_share * _free_bytes(device) - head_bytes
    n = int(max(1, min(spec.n_layers, room // max(layer_bytes, 1))))
    return Plan(n, n < spec.n_layers)


def time_model(spec: ModelSpec, grid: ShapeGrid, device: str = "cuda", dtype: str = "bf16",
               layers: int | None = None, kv_budget_share: float = 0.35,
               progress: Callable[[str], None] | None = None) -> list[dict]:
    """JSON-lines records (``--from-steps`` format) of ``spec``'s passes on ``device``."""
    dev = torch.device(device)
    tdtype = DTYPES[dtype]
    plan = plan_layers(spec, dev, tdtype, layers)
    depths = (0, plan.layers) if plan.scaled else (plan.layers,)
    stacks = {n: ShapeStack(spec, n, tdtype, device) for n in depths}
    budget = kv_budget_share * _free_bytes(dev)
    records: list[dict] = []
    name = spec.name.lower()
    say = progress or (lambda _m: None)
    say(f"{spec.name}: timing {plan.layers} of {spec.n_layers} layers"
        + (" and the head alone, scaled" if plan.scaled else ""))

    def measure(kind: str, batch: int, q: int, ctx: int) -> dict:
        rec: dict = {"kind": kind, "model": name, "batch": batch}
        if kind == "decode":
            rec.update(q=q, context=ctx, tokens=batch * q)
        else:
            rec.update(tokens=batch * q, context=ctx)
        need = stacks[plan.layers].kv_bytes(batch, ctx + q)
        if need > budget:
            rec["error"] = (f"skipped: KV cache {need / 1e9:.1f} GB over the budget "
                            f"{budget / 1e9:.1f} GB")
            return rec
        times = {}
        try:
            for n, st in stacks.items():
                st.alloc_cache(batch, ctx + q)
                toks = torch.randint(0, spec.vocab_size, (batch, q), device=dev)
                last = kind == "prefill"
                with torch.inference_mode():
                    def call(st=st, toks=toks, last=last):
                        return st.forward(toks, ctx, last)

                    run = _graphed(call, dev) if kind == "decode" else call
                    times[n] = _timed(run, dev, grid.warmup, grid.repeats)
                st.k = st.v = None
                del run
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
        except (torch.OutOfMemoryError, RuntimeError) as exc:  # one shape, not the run
            for st in stacks.values():
                st.k = st.v = None
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            what = "out of memory" if isinstance(exc, torch.OutOfMemoryError) else "failed"
            rec["error"] = f"{what}: {(str(exc).splitlines() or [''])[0][:160]}"
            say(f"{spec.name} {kind} batch {batch} q {q} context {ctx}: {rec['error']}")
            return rec
        if plan.scaled:
            t0, tl = times[0], times[plan.layers]
            rec["seconds"] = t0 + spec.n_layers / plan.layers * max(tl - t0, 0.0)
            rec["scaled_from"] = {"layers": plan.layers, "seconds": tl, "head_only_s": t0}
        else:
            rec["seconds"] = times[plan.layers]
        return rec

    for b, q, c in grid.decode_points():
        records.append(measure("decode", b, q, c))
    for b, tokens, c in grid.prefills:
        if tokens % b:
            continue
        records.append(measure("prefill", b, tokens // b, c))
    ok = [r for r in records if "error" not in r]
    say(f"{spec.name}: {len(ok)} passes timed, {len(records) - len(ok)} skipped")
    return records


def info_record(device: str, dtype: str = "bf16", quick: bool = False) -> dict:
    """The ``info`` line: the device, torch, and its measured matmul and copy ceilings
    (``quick`` on a CPU: a smaller matmul and copy, seconds less, a noisier ceiling)."""
    gpu = torch.device(device).type == "cuda"
    n = None if gpu or not quick else 768
    mbytes = 1024 if gpu else (64 if quick else 256)
    return {"kind": "info", "torch": torch.__version__, "device": device_description(device),
            "dtype": dtype, "matmul_tflops": measure_peak_flops(dtype, device, n=n) / 1e12,
            "copy_gb_s": measure_bandwidth(device, mbytes=mbytes) / 1e9,
            "source": "specsim calibrate --model (cost_models/calibrate/shape_bench.py)"}


def dumps(records: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=False) + "\n" for r in records)
