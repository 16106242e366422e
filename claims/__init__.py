"""The claim files, as one package: pytest imports each as ``claims.test_...``. They hold what is
more than a claim's declaration (its evidence, figures and negative controls); the declarations
themselves are the library's (normsys.declarations), which imports none of these files."""
