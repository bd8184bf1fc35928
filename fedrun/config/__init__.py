"""Configuration: the typed schemas of every group, composition, override checks and start-up advice."""
