"""drover's version and the name it is installed under (re-exported by :mod:`drover`).

Here rather than in ``drover/__init__.py``, which names every public module for type
checkers: drover's own modules read the version from here without importing that list.
"""

__all__ = ["DISTRIBUTION_NAME", "__version__"]

__version__ = "0.2.0.dev0"

#: The name drover is installed under (``pip install``, a plugin's ``dependencies``); the
#: import package is ``drover``. The PyPI name ``drover`` belongs to an unrelated project.
DISTRIBUTION_NAME = "drover-coordinator"
