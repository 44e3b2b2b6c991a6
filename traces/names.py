"""Names the trace commands offer (kept apart so the CLI can list them without pandas)."""

FORMATS = ("auto", "azure", "burstgpt", "mooncake", "vidur", "generic")
ARRIVAL_MODELS = ("gamma", "curve")
LENGTH_MODELS = ("empirical", "lognormal")
