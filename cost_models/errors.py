"""The one error type the cost-model package raises for bad user input."""


class CatalogError(ValueError):
    """A one-line, user-facing problem with a catalog name or an inline definition."""
