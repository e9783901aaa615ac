"""The ``container`` backend: each kernel is one container (docs/containers.md).

``backend.py`` holds :class:`ContainerBackend`. The private modules are its
parts: ``_settings.py`` its ``[backend.settings]``, ``_spec.py`` what a kernel
spec becomes in the Engine API, ``_mounts.py`` which host paths a kernel may
mount, ``_engine.py`` the backend's calls to the engine (one method per call),
``_reports.py`` what a container's state means for its kernel.
"""

from drover.backends.container._settings import ContainerSettings
from drover.backends.container.backend import ContainerBackend

__all__ = ["ContainerBackend", "ContainerSettings"]
