"""specsim's user-facing error for scenarios (and the limits any package checks): one line,
naming the file and key. It lives at the root so every package can raise it."""


class ScenarioError(ValueError):
    """A user-facing problem with a scenario: the message names the file/key and what was expected."""
