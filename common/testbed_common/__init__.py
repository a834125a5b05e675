"""Code shared by the orchestrator, the node agent and the measurement server: the wire
protocol between orchestrator and agent, the result-bundle format, and the packet
capture both ends of a run take. Each side imports one definition, so they cannot drift.

Keep this file free of imports: the server image copies it with capture.py alone
(standard library only), without the package's other modules or their dependencies."""
