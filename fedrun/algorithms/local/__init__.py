"""Local rules: what a client computes in its steps, with the server-side bookkeeping that belongs to it."""
