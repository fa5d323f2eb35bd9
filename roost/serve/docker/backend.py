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
from roost.serve.base import Backend, LogFn, Prepared, Server, ServerInfo, ServeSpec, StartPlan, _ignore
from roost.serve.docker.containers import (
    container_start_plan,
    docker_servers,
    foreign_occupants,
    release_container,
    retire_containers,
    start_container,
)
from roost.serve.docker.images import (
    BuildPlan,
    build_image,
    docker_client,
    image_exists,
    plan_build,
    remote_engine_address,
)
from roost.serve.dockerfile import BuildSpec
from roost.serve.occupancy import Occupant


class DockerBackend(Backend):
    """vLLM in a roost-managed container on ``host.docker_url``'s engine, from the image ``prepare`` builds.

    ``build_args`` go into the image build (and its content-addressed tag); ``xgrammar_version``
    pins the patch's xgrammar explicitly (None: the version the base image's vLLM requires);
    ``replace_existing`` False refuses to start while another roost container serves on the host;
    ``client`` reuses an engine client (else one is opened on first use and kept).
    """

    name = "docker"

    def __init__(self, host: HostProfile, *, build_args: dict[str, str] | None = None,
                 replace_existing: bool = True, client: docker.DockerClient | None = None,
                 xgrammar_version: str | None = None) -> None:
        super().__init__(host)
        self.build_args = dict(build_args or {})
        self.xgrammar_version = xgrammar_version
        self._plan: BuildPlan | None = None
        self.replace_existing = replace_existing
        self._client = client

    @property
    def client(self) -> docker.DockerClient:
        if self._client is None:
            self._client = docker_client(self.host)
        return self._client

    def build_spec(self) -> BuildSpec:
        """What the serving image is made of on this host: its base image, this roost, the xgrammar
        override (if any), the build args."""
        return BuildSpec(base_image=self.host.base_image, roost_version=roost.__version__,
                         xgrammar_version=self.xgrammar_version, build_args=self.build_args)

    def build_plan(self, *, pull: bool = True) -> BuildPlan:
        """The build's plan (``images.plan_build``), shared by ``prepare_key``, ``is_prepared`` and
        ``prepare``: the base image's id is looked up each time, but it is read and the Dockerfile
        rendered only when the base (or the spec) changed. ``pull`` False: StageFailed when the base
        image is not on the engine (a dry run never pulls it)."""
        self._plan = plan_build(self.client, self.build_spec(), pull=pull, reuse=self._plan)
        return self._plan

    def prepare_key(self) -> str | None:
        """``roost-build-<sha256 of the rendered Dockerfile + build args>`` (the base image's digest included)."""
        return f"roost-build-{self.build_plan().rendered.sha256}"

    def is_prepared(self) -> bool:
        """Is the image ``prepare()`` would build on the engine now?"""
        return image_exists(self.client, self.build_plan().rendered.tag)

    def prepare(self, log: LogFn = _ignore) -> Prepared:
        """Build the serving image, or find it (``cached``: the xgrammar versions then come from its labels)
        when its content-addressed tag exists. The note says whether the base's xgrammar needed a patch."""
        built = build_image(self.build_spec(), client=self.client, log=log, plan=self.build_plan())
        return Prepared(
            backend="docker", image=built.tag, image_digest=built.base_image_digest or built.image_id,
            cached=built.skipped, seconds=built.seconds, xgrammar_version=built.xgrammar_version,
            xgrammar_base=built.xgrammar_base, vllm_version=built.vllm_version,
            note=f"{built.tag} on {built.base_image}: {built.xgrammar_summary}",
        )

    def start(self, spec: ServeSpec, api_key: str | None, prepared: Prepared, log: LogFn = _ignore) -> Server:
        """Run roost's container for ``spec`` from ``prepared.image`` (``containers.start_container``)."""
        return start_container(spec, self.host, image=prepared.image, api_key=api_key, client=self.client,
                               replace_existing=self.replace_existing, log=log)

    def servers(self) -> list[ServerInfo]:
        return docker_servers(self.host, self.client)

    def start_plan(self, spec: ServeSpec) -> StartPlan:
        """``containers.run`` as ``start`` would call it. The image: its tag once this backend planned the
        build (``prepare``); before that (a dry run), the base it is built from: tagging needs the base's
        vLLM read in a container, and a dry run starts nothing and needs no engine."""
        plan = self._plan
        image = plan.rendered.tag if plan is not None else (
            f"the serving image built from {self.host.base_image} + the xgrammar patch (tagged at the build stage)")
        return container_start_plan(spec, self.host, image=image)

    def occupants(self, spec: ServeSpec) -> list[Occupant]:
        """Running containers roost did not start that hold the GPUs or ``spec``'s fixed port, and a
        process (not a container) listening on that port."""
        return foreign_occupants(self.client, self.host, spec)

    def release(self, occupant: Occupant, log: LogFn = _ignore) -> None:
        release_container(self.client, occupant, log)

    def retire(self, spec: ServeSpec, log: LogFn = _ignore) -> list[str]:
        return retire_containers(self.client, self.host, spec, log)

    def available_memory_bytes(self) -> int | None:
        """This machine's ``MemAvailable`` when the engine is on it (a socket, a loopback address); None for
        an engine on another machine (``remote_engine_address``)."""
        return super().available_memory_bytes() if remote_engine_address(self.host.docker_url) is None else None
