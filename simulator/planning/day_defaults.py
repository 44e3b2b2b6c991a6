"""The day planner's assumed switch delays, apart so the CLI's flags (``day_cli``) and the
planner (``day``) read them without importing each other."""

#: seconds from asking for a replica to its engine starting to load weights (assumed: a
#: warm node pool starting a container; a cold cloud VM takes minutes more)
SCALE_UP_DELAY_S = 120.0
#: seconds of engine warm-up after the weights are in HBM (assumed, of the order of a
#: measured vLLM CUDA-graph capture: 43 s for a 32K-token capture profile, API ready in
#: ~132 s, vLLM 0.25 on GB10: huggingface.co/nvidia/Nemotron-3-Embed-1B-NVFP4/discussions/4)
WARMUP_S = 45.0
