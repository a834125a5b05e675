"""The agent's error vocabulary: third-party errors (httpx, Docker, OS) are wrapped into
these with ``raise ... from e`` so the loop decides on meaning, not on library types."""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agent raises on purpose; the message says what to do."""


class ConfigError(AgentError):
    """The agent configuration is missing or invalid."""


class OrchestratorUnreachable(AgentError):
    """Network error, timeout or 5xx: try again later, keep the data."""


class Unauthorized(AgentError):
    """401/403: the node token is wrong or revoked. Retrying fast will not help."""


class RunFinal(AgentError):
    """409 on a state report: the run is already final on the orchestrator."""


class NotFound(AgentError):
    """404: the orchestrator does not know the run (or its upload)."""


class OffsetMismatch(AgentError):
    """409 on an upload chunk: the orchestrator holds ``offset`` bytes; resume there."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class Corrupted(AgentError):
    """422 ``fault: corrupted``: the bytes the orchestrator held hashed to something
    else than declared (damaged in transit). It dropped them: send again from offset 0."""


class Rejected(AgentError):
    """4xx the agent cannot fix by retrying (422 refused by inspection, 413, 409 on
    create): the bundle is kept aside in ``rejected/``, never sent again."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ProtocolError(AgentError):
    """The orchestrator answered something the wire protocol does not allow."""


class RunnerError(AgentError):
    """The local Docker engine could not run an experiment; the message is the reason."""
