"""The claim files, as one package: pytest imports each as ``claims.test_...``, the name the
catalog and the scorecard import it by (normsys.catalog.claim_files), so a session that runs the
claims and reads their declarations holds one module of each file, not two."""
