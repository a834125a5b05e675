"""The node agent: registers the node, heartbeats, runs its experiment containers with
the local Docker engine, meters and enforces their data volume and time slot, and
uploads each run's result bundle, storing it while the orchestrator is unreachable."""

__version__ = "0.1.0"
