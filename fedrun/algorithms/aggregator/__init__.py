"""Aggregators: the weights and form of the round's aggregate (a weighted mean, FedNova)."""
