"""Privacy: what the server may learn of the round's updates (``algo/privacy``): all of them (``none``), or only their
clipped, noised sum (``dp_fedavg``: client-level differential privacy, accounted by Google's dp-accounting)."""
