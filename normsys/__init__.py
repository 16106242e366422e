"""normsys: executable, statistically honest claims about normalization in deep networks.

Stages (one module each): norms -> diagnostics -> stats (and, built on them, data, models, train,
cache and the claims plugin). ``import normsys`` stays light: heavy optional dependencies are
imported inside the functions that need them.
"""

from __future__ import annotations

__version__ = "0.2.0"

from normsys.norms import NORMS, build_norm  # noqa: E402

__all__ = ["NORMS", "build_norm", "__version__"]
