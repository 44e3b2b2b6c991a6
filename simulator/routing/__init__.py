"""Routers: worker snapshots in, a decision with a reason out."""
