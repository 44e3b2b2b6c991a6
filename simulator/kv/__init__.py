"""The paged KV block pool and eviction (preemption victims)."""
