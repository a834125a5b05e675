"""The orchestrator's error vocabulary. Services raise these; only the API layer maps
them to HTTP status codes, and the CLI to exit codes. Messages say what to do."""

from __future__ import annotations

from testbed_common.wire import UploadFault


class TestbedError(Exception):
    """Base of every error the orchestrator raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name


class NotFound(TestbedError):
    pass


class Unauthorized(TestbedError):
    pass


class Forbidden(TestbedError):
    pass


class Invalid(TestbedError):
    """Input that can never succeed as sent (bad spec, unknown parameter)."""


class UploadFailed(Invalid):
    """An upload whose bytes cannot become the run's bundle as sent. ``fault`` says what
    the sender can do: send it all again (corrupted in transit) or nothing (refused)."""

    def __init__(self, message: str, *, fault: UploadFault) -> None:
        super().__init__(message)
        self.fault = fault


class Conflict(TestbedError):
    """Valid input that clashes with stored state (final run, offset mismatch)."""

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


class TooLarge(TestbedError):
    pass


class OverCapacity(TestbedError):
    """A share of the orchestrator's storage is used up for now (a node's unfinished
    uploads); it frees as uploads complete or expire, so the sender retries later."""


class NoSpace(TestbedError):
    """The disk has no room for what was asked (a dataset release, with the reserve it
    keeps for the archive); nothing was written or kept. The message says how much was
    wanted and what to change."""


class NotInstalled(TestbedError):
    """A part of the orchestrator whose optional dependencies are not installed here
    (the ``dataset`` extra); the message names the extra."""
