"""Pure domain types and decisions: no I/O, no framework imports."""
