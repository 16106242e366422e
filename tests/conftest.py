from __future__ import annotations

import pytest
from hypothesis import settings

# Derandomized so CI and a developer see the same examples; no deadline (first calls warm up torch).
settings.register_profile("normsys", derandomize=True, deadline=None, max_examples=40)
settings.load_profile("normsys")


@pytest.fixture
def no_cache(monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", "off")


@pytest.fixture
def light_compile(monkeypatch):
    """torch.compile with the aot_eager backend: dynamo's graph capture and AOT autograd (graph
    breaks, vmap and autocast under compile, the backward graph) without inductor's C++ code
    generation, which costs seconds per graph on CPU and is not the CUDA code anyway; the CUDA
    numerics are checked by the gpu tests."""
    import functools

    import torch

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
