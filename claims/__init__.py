"""The claim files, as one package: pytest imports each as ``claims.test_...``. The library
imports none of them: the catalog and the scorecard read the claims' declarations from pytest's
collection of this folder (normsys.catalog.collected), so a session that runs the claims and reads
their declarations holds one module of each file, not two."""
