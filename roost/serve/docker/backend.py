"""``DockerBackend``: the serving lifecycle on a host's Docker engine (the DGX Spark's way, and the
local CPU stand-in ``cpu-docker``).

prepare = build or find the serving image (``images``), keyed ``roost-build-<Dockerfile sha256>``;
start = run roost's container for the spec, replacing roost's own container on the host and never
anyone else's (``containers``); servers = the running containers with roost's labels.
"""

from __future__ import annotations

import docker

import roost
from roost.hosts import HostProfile
from roost.serve.base import Backend, LogFn, Prepared, Server, ServerInfo, ServeSpec, _ignore
from roost.serve.docker.containers import docker_servers, start_container
from roost.serve.docker.images import build_image, docker_client, image_exists, render_for_engine
from roost.serve.dockerfile import BuildSpec


class DockerBackend(Backend):
    """vLLM in a roost-managed container on ``host.docker_url``'s engine, from the image ``prepare`` builds.

    ``build_args`` go into the image build (and its content-addressed tag); ``replace_existing``
    False refuses to start while another roost container serves on the host; ``client`` reuses an
    engine client (else one is opened on first use and kept).
    """

    name = "docker"

    def __init__(self, host: HostProfile, *, build_args: dict[str, str] | None = None,
                 replace_existing: bool = True, client: docker.DockerClient | None = None) -> None:
        super().__init__(host)
        self.build_args = dict(build_args or {})
        self.replace_existing = replace_existing
        self._client = client

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client(self.host)
        return self._client

    def build_spec(self) -> BuildSpec:
        """What the serving image is made of on this host: its base image, this roost, the build args."""
        return BuildSpec(base_image=self.host.base_image, roost_version=roost.__version__, build_args=self.build_args)

    def prepare_key(self) -> str | None:
        """``roost-build-<sha256 of the rendered Dockerfile + build args>`` (the base image's digest included)."""
        return f"roost-build-{render_for_engine(self.client, self.build_spec())[0].sha256}"

    def is_prepared(self) -> bool:
        """Is the image ``prepare()`` would build on the engine now?"""
        return image_exists(self.client, render_for_engine(self.client, self.build_spec())[0].tag)

    def prepare(self, log: LogFn = _ignore) -> Prepared:
        """Build the serving image, or find it (``cached``) when its content-addressed tag exists."""
        built = build_image(self.build_spec(), client=self.client, log=log)
        return Prepared(
            backend="docker", image=built.tag, image_digest=built.base_image_digest or built.image_id,
            cached=built.skipped, seconds=built.seconds, note=f"{built.tag} on {built.base_image}",
        )

    def start(self, spec: ServeSpec, api_key: str | None, prepared: Prepared, log: LogFn = _ignore) -> Server:
        """Run roost's container for ``spec`` from ``prepared.image`` (``containers.start_container``)."""
        return start_container(spec, self.host, image=prepared.image, api_key=api_key, client=self.client,
                               replace_existing=self.replace_existing, log=log)

    def servers(self) -> list[ServerInfo]:
        return docker_servers(self.host, self.client)
