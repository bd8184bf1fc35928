"""fedrun: a Hydra-configured federated-learning experiment runner."""

__version__ = "0.1.0"
