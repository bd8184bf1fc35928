"""The papers as data: artefacts, their tables, summaries, claims and the measures they report."""

# seeds from here on are the claims' confirmatory block: no exploration may see them (here, where the command line's
# check reads it without loading the papers)
CONFIRMATORY_FROM = 1000
