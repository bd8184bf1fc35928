"""``python -m fedrun`` (and ``torchrun ... -m fedrun``): the ``fedrun`` command."""

from fedrun.cli import command

command()
