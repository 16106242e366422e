"""What more than one source's claims share: the experiments and arms several declarations
modules run (experiments), the feedback-alignment protocol (protocol) and the figures claim files
draw (figures). No claim is declared here."""
