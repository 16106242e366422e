"""normsys: executable, statistically honest claims about normalization in deep networks.

Two folders. ``normsys.training`` is everything a run's record depends on (configs, data, tasks,
models and norms, the training loop and what it measures); the run cache keys on its source, and it
imports nothing of the rest. Built on it: the decisions (stats, sequential), the claims machinery
(runs, cache, ledger, plugin, report), the scorecard and the command line. ``import normsys``
stays light: heavy optional dependencies are imported inside the functions that need them.
"""

from __future__ import annotations

__version__ = "0.2.0"

from normsys.training.norms import NORMS, build_norm  # noqa: E402

__all__ = ["NORMS", "build_norm", "__version__"]
