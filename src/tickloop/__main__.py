"""`python -m tickloop`: the command line, as the `tickloop` script."""

from ._cli import script

script()
