"""The ``testbed`` command: serve the orchestrator, and talk to its API."""
