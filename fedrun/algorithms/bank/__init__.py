"""The server's models: one, or MA-/GA-FSVRG's bank of diversified global models."""
