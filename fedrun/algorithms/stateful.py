"""The parts whose settings are attributes and whose round-to-round state is their own (``StatefulPart.init``); the
local rule and the server optimiser have states of their own shapes (``server_init``, ``init``). A module of its own:
the server state (``fedrun.engine.run.state``) and the config checks read it without importing a part or torch."""

STATEFUL_PARTS = ("step_selector", "harmonizer", "privacy", "schedule", "bank", "asynchrony")
