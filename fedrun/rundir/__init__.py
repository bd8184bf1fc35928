"""A run directory: its files, checkpoints, loggers, resume, sweeps' skip/refuse and the report over runs."""
