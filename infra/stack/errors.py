"""One root for everything that can go wrong while installing or running the local stack.

Each error carries the hint a person needs to fix it; the CLI prints it and exits non-zero.
"""


class StackError(Exception):
    """Root of the local stack's errors."""

    hint: str = ""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        if hint:
            self.hint = hint


class PrerequisiteMissing(StackError):
    """Something the machine must provide is missing (Java, Maven, apt, a package)."""


class DownloadFailed(StackError):
    """A registry did not deliver an artifact."""

    hint = (
        "Check that Maven Central (or apt/PyPI) is reachable, then run `make up` again; "
        "finished downloads are cached in ~/.m2 and are not fetched twice."
    )


class PortInUse(StackError):
    """A port the stack needs is taken by another process."""


class ComponentFailed(StackError):
    """A component died or did not become healthy in time."""
