"""The typed scenario: read, --set, validate (pydantic)."""
