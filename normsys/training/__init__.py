"""The training path: everything a run's record depends on (configs, data, tasks, models and
norms, the training loop and what it measures). The run cache keys on this package's source, so
nothing outside it may change a record."""
