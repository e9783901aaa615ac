"""``python -m drover``: the same as the ``drover`` command."""

from drover.cli.main import main

main()
