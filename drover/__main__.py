"""``python -m drover``: the same as the ``drover`` command."""

from drover.cli.group import main

main()
