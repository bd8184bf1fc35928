"""Harmonisers: the round's stacked client updates, changed before aggregation (FedGH, DGT)."""
