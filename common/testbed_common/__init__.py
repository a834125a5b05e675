"""Code shared by the orchestrator and the node agent: the wire protocol between them,
run states, input bounds and the result-bundle format. Each side imports one
definition, so they cannot drift. What the images' own code needs (experiments, the
measurement server) is in ``testbed_kit``, which stays free of this package's
dependencies."""
