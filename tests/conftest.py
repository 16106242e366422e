from __future__ import annotations

from hypothesis import settings

# Derandomized so CI and a developer see the same examples; no deadline (first calls warm up torch).
settings.register_profile("normsys", derandomize=True, deadline=None, max_examples=40)
settings.load_profile("normsys")
