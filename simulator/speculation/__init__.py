"""Drafters, speculation policies and acceptance models."""
