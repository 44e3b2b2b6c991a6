"""The error type for bad scenarios: one line, naming the file and key."""


class ScenarioError(ValueError):
    """A user-facing problem with a scenario: the message names the file/key and what was expected."""
