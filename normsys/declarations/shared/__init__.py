"""What more than one source's claims share: the experiments and arms several declarations
modules run (experiments), the feedback-alignment protocol (protocol), the figures claim files
draw (figures) and DyT's kinds at other initial alphas (dyt_alphas, a file of their own: the run
cache keys a registered kind's runs on its file's code). No claim is declared here."""
