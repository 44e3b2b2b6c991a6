"""Planning: sweeps over scenario keys (``sweep``) and the capacity planner (``plan``)."""
