"""The claims machinery: a claim's declaration, its decision (verdict), its record (ledger) and
the statistics across a record's entries (across), the report and the pytest plugin that holds
them together. Its runs come from normsys.orchestration; nothing in it trains."""
