"""The experiment kit: what an experiment's entry point imports, and nothing else of
the project (docs/experiment-contract.md).

- :mod:`testbed_kit.contract`: the run's configuration and results directory as the
  node agent hands them over, and the failure convention (the reason as the last line
  of stderr, exit code 1);
- :mod:`testbed_kit.results`: raw tool outputs and the versioned result file;
- :mod:`testbed_kit.watch`: a measurement client watched against its deadline and
  against a server that accepts but never starts;
- :mod:`testbed_kit.interface`: the interface's address and kernel byte counters;
- :mod:`testbed_kit.connections`: the namespace's established TCP connections;
- :mod:`testbed_kit.iperf3` and :mod:`testbed_kit.tat_result`: an iperf3 transfer, and
  its report as a ``testbed.tat`` result;
- :mod:`testbed_kit.session`: the ABw-TAT session figures, which the orchestrator's
  pages and ingest compute with the same code;
- :mod:`testbed_kit.capture`: tcpdump of a run's interface, for the node agent and the
  measurement server's capture service.

Standard library only, and importing nothing else of the project (import-linter
contracts in pyproject.toml): an experiment image copies this folder beside its entry
point and needs nothing but python3. The orchestrator and the node agent import the
same modules from the project's wheel.
"""
