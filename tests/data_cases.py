"""What the data tests share."""

from fedrun.config.compose import option


def settings(name: str, **values):
    """The ``data`` option ``name`` as a run composes it (conf/data/<name>.yaml), with ``values`` set."""
    return option("data", name, **values)
