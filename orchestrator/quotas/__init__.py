"""Pure quota accounting: per-SIM monthly caps and per-project data budgets.

No I/O: the services load a :class:`~orchestrator.quotas.ledger.LedgerState` from the
database, the scheduler reserves against it, and the services store what comes back.
"""
