"""What the claims run on: the decision (verdict), the experiments and readings more
than one claim shares, the runs a session fetches and caches, the ledger, the report and the
pytest plugin that holds them together. Built on normsys.training; nothing in it trains."""
