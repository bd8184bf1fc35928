"""Step selectors: which of a client's local steps make its update (BHerd's herding, GraB, a random
subset)."""
