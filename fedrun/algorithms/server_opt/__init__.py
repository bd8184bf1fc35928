"""Server optimisers: the server's step on the aggregated update (SGD, momentum, Adam, Yogi, Adagrad)."""
