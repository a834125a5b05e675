"""Code shared by the orchestrator and the node agent: the wire protocol between them
and the result-bundle format. Both sides import one definition, so they cannot drift."""
