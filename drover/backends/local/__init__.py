"""The ``local`` backend: each kernel is one real OS process on this machine.

``backend.py`` holds :class:`LocalBackend` (docs/daemon.md). The private modules
are its parts: ``_supervisor.py`` is the script each command runs under (run by
path, never imported), ``_disk.py`` the spawn records in a kernel's working
directory, ``_proc.py`` processes as ``/proc`` shows them, ``_watch.py`` what is
watched and the process work around it, ``_outcome.py`` how an end becomes a
report, ``_reports.py`` reports kept until they commit, ``_spec.py`` what a kernel
spec asks for.
"""

from drover.backends.local._proc import process_identity
from drover.backends.local.backend import LocalBackend

__all__ = ["LocalBackend", "process_identity"]
