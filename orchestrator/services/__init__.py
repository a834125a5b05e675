"""Use cases. Each function takes the ``Context`` and plain inputs, does its work in one
unit of work, and raises only ``orchestrator.errors``."""
