"""`python -m tickloop._cli`: the command line without the installed script."""

from ._main import script

script()
