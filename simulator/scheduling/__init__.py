"""Batch schedulers: admission and the shape of the next iteration."""
