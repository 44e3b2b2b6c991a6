"""Model shapes for the calibration transformer (no torch: the fit and simulator use them too)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..catalog import ModelSpec


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a llama-style decoder (the fields the roofline's ModelSpec also has)."""

    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-5
    tied_embeddings: bool = True
    max_context: int = 8192
    name: str = "synthetic"

    def truncated(self, n_layers: int) -> ModelConfig:
        """The same model cut to its first ``n_layers`` (self-speculation drafter)."""
        if not 1 <= n_layers <= self.n_layers:
            raise ValueError(f"n_layers must be in 1..{self.n_layers}, got {n_layers}")
        return replace(self, n_layers=n_layers, name=f"{self.name}-first{n_layers}")

    def to_model_spec(self, name: str | None = None) -> ModelSpec:
        """The roofline's view of this shape (so measured and priced passes match)."""
        n_params = (self.n_layers * (2 * self.hidden_size * self.n_heads * self.head_dim
                                     + 2 * self.hidden_size * self.n_kv_heads * self.head_dim
                                     + 3 * self.hidden_size * self.intermediate_size)
                    + self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2))
        return ModelSpec(
            name=name or self.name, n_layers=self.n_layers, hidden_size=self.hidden_size,
            n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, head_dim=self.head_dim,
            intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
            tied_embeddings=self.tied_embeddings, max_context=self.max_context,
            params_b=n_params / 1e9, moe=None, mtp_layers=0, native_weight_format="bf16",
            tokenizer=self.name, source="specsim calibration model (cost_models/calibrate/model.py)",
        )


SMOLLM2_135M = ModelConfig(
    n_layers=30, hidden_size=576, n_heads=9, n_kv_heads=3, head_dim=64, intermediate_size=1536,
    vocab_size=49152, rope_theta=100000.0, rms_eps=1e-5, tied_embeddings=True,
    max_context=8192, name="SmolLM2-135M",
)

__all__ = ["SMOLLM2_135M", "ModelConfig"]
