"""Compiled CPU kernels and their build, all behind ``hardware.native``."""
