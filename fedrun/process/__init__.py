"""Process-level tricks of a command: lazy imports, a held-back garbage collector, a quick exit."""
