"""The iteration kernel and the executor that prices it."""
