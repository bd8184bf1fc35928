"""Errors that fedrun reports to a user as a message, not a traceback."""


class FedrunError(Exception):
    """Base class: the message says what is wrong and how to fix it."""


class ConfigError(FedrunError):
    """A composed config holds a value fedrun refuses; raised before any work is done."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid configuration:\n" + "\n".join(f"  - {p}" for p in self.problems))


class DataMissingError(FedrunError):
    """A dataset's files are not where fedrun looks; the message says which files to put where."""


class IntegrityError(FedrunError):
    """A download is not what its publisher published (its digest differs, or an archive member would land outside
    its folder); it is deleted and nothing is unpacked."""


class StaleRunError(FedrunError):
    """A run folder holds a finished run of another config than the one asked for there."""


class OverwriteError(FedrunError):
    """A single run would replace the run its directory holds; the message says how to continue it or start over."""
