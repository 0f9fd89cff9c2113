"""Statistics on plain numbers: intervals, hypothesis tests, reducers, agreement. Pure, no I/O."""
