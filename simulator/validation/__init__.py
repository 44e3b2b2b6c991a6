"""Validation against measured serving runs: load a run, replay it through the simulator,
compare predicted with measured (``specsim replay``, ``benchmarks/fidelity.py``)."""
