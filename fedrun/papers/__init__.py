"""The papers as data: artefacts, their tables, summaries, claims and the measures they report."""
