"""Where and when runs train: a session's runs fetched from the run cache or trained (runs, cache),
on this machine's processes or a Ray cluster (workers, cluster), priced before they start
(runtimes), followed while they train (progress), and a user's norm loaded from its file
(usernorm). Built on normsys.training; it decides no claim."""
