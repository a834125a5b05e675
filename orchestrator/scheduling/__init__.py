"""Pure scheduling decisions: no database, no clock, no I/O."""
