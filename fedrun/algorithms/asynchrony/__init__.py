"""Asynchrony: whether the server waits for a round's cohort (``none``) or steps as updates arrive on the simulated
clock (``fedbuff``, ``fedasync``), owning its rounds (``AsyncServer.apply``)."""
