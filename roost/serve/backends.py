"""``backend_for(host)``: the serving backend a host uses (``HostProfile.backend``)."""

from __future__ import annotations

from roost.hosts import HostProfile
from roost.serve.base import Backend
from roost.serve.process import ProcessBackend


def backend_for(host: HostProfile) -> Backend:
    """The ``process`` or ``docker`` backend of ``host``."""
    if host.backend == "process":
        return ProcessBackend(host)
    # the Docker SDK (~0.3 s to import) only for hosts that serve in containers
    from roost.serve.docker.backend import DockerBackend

    return DockerBackend(host, xgrammar_version=host.xgrammar_version)
