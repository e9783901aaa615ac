"""The ``slurm`` backend: each kernel is one Slurm batch job (docs/slurm.md).

``backend.py`` holds :class:`SlurmBackend`. The private modules are its parts:
``_settings.py`` its ``[backend.settings]``, ``_script.py`` what a kernel spec
becomes in Slurm (``sbatch`` arguments, the batch script), ``_tools.py`` running
Slurm's tools and reading what they print, ``_client.py`` the backend's calls to
Slurm, ``_reports.py`` what a job's state means for its kernel.
"""

from drover.backends.slurm._settings import SlurmSettings
from drover.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend", "SlurmSettings"]
