"""A run: its rounds from state to state (the tools a round uses), who takes part with which minibatches, the
evaluation, the accounting of bytes and simulated time, and the experiment loop that writes the run directory."""
