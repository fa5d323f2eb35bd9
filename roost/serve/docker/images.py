"""The Docker engine client and the serving image: the Dockerfile from ``roost.serve.dockerfile``
(vLLM base + xgrammar patch), built with the low-level ``APIClient.build(decode=True)``.

Every build line goes to a ``log`` callback (the Prefect logger in ``tasks/build.py``); a failing
build raises StageFailed naming its step and last lines; an existing content-addressed tag skips
the build and says so.
"""

from __future__ import annotations

import io
import re
import time
from collections import deque
from collections.abc import Callable

import docker
from docker.errors import APIError, DockerException, ImageNotFound
from pydantic import BaseModel, Field

from roost.errors import StageFailed
from roost.hosts import HostProfile
from roost.serve.dockerfile import BuildSpec, RenderedDockerfile, render_dockerfile

LogFn = Callable[[str], None]

DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"


def _noop(_: str) -> None:
    return None


def docker_client(host: HostProfile | None = None, *, timeout: int = 300) -> docker.DockerClient:
    """A client for the host's Docker engine (``host.docker_url``), checked with a ping."""
    url = host.docker_url if host is not None else DEFAULT_DOCKER_URL
    try:
        client = docker.DockerClient(base_url=url, version="auto", timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise StageFailed(
            "docker", f"no Docker engine answers at {url} ({exc}); start it (scripts/docker-up) or fix the host's docker_url"
        ) from None
    return client


class BuildResult(BaseModel):
    """What a build produced (``DockerBackend.prepare`` turns it into a ``Prepared``)."""

    tag: str
    image_id: str
    dockerfile_sha256: str
    base_image: str
    base_image_id: str
    base_image_digest: str = Field(description="The base's repo digest when it came from a registry, else ''.")
    xgrammar_version: str
    skipped: bool = Field(description="True when the tag already existed and nothing was built.")
    seconds: float
    steps: int = 0
    log_tail: list[str] = Field(default_factory=list)


def resolve_base_image(client: docker.DockerClient, base_image: str, *, pull: bool = True) -> tuple[str, str]:
    """(image id, repo digest or '') of the base image; pulled when absent and ``pull``."""
    try:
        image = client.images.get(base_image)
    except ImageNotFound:
        if not pull:
            raise StageFailed("build", f"base image {base_image} is not present locally") from None
        try:
            image = client.images.pull(base_image)
        except APIError as exc:
            raise StageFailed(
                "build",
                f"base image {base_image} is not present locally and cannot be pulled ({exc.explanation or exc}); "
                "pull or load it on the host (for the local CPU stand-in run scripts/build-test-base-image)",
            ) from None
    digests: list[str] = image.attrs.get("RepoDigests") or []
    return str(image.id), (digests[0] if digests else "")


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def render_for_engine(client: docker.DockerClient, spec: BuildSpec) -> tuple[RenderedDockerfile, str, str]:
    """Render with the base image's identity filled in: (rendered, base image id, base repo digest)."""
    base_id, base_digest = resolve_base_image(client, spec.base_image)
    filled = spec.model_copy(update={"base_image_digest": base_digest or base_id})
    return render_dockerfile(filled), base_id, base_digest


_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def build_image(
    spec: BuildSpec,
    *,
    client: docker.DockerClient,
    log: LogFn = _noop,
    timeout_s: int = 3600,
    tail_lines: int = 20,
) -> BuildResult:
    """Build (or find) the serving image for ``spec``; every build line goes to ``log``."""
    t0 = time.monotonic()
    rendered, base_id, base_digest = render_for_engine(client, spec)

    def result(image_id: str, *, skipped: bool, steps: int = 0, log_tail: list[str] | None = None) -> BuildResult:
        return BuildResult(
            tag=rendered.tag, image_id=image_id, dockerfile_sha256=rendered.sha256, base_image=spec.base_image,
            base_image_id=base_id, base_image_digest=base_digest, xgrammar_version=spec.xgrammar_version,
            skipped=skipped, seconds=round(time.monotonic() - t0, 3), steps=steps, log_tail=log_tail or [],
        )

    if image_exists(client, rendered.tag):
        image = client.images.get(rendered.tag)
        log(f"image {rendered.tag} already exists (Dockerfile sha256 {rendered.sha256[:12]}); build skipped")
        return result(str(image.id), skipped=True)

    log(f"building {rendered.tag} FROM {spec.base_image} (xgrammar=={spec.xgrammar_version})")
    api = client.api
    tail: deque[str] = deque(maxlen=tail_lines)
    step = "before the first step"
    steps = 0
    image_id = ""
    api_timeout = api.timeout
    try:
        api.timeout = timeout_s
        stream = api.build(
            fileobj=io.BytesIO(rendered.text.encode()), tag=rendered.tag, rm=True, forcerm=True, pull=False,
            decode=True, labels=rendered.labels, buildargs=rendered.build_args or None,
        )
        for chunk in stream:
            if "stream" in chunk:
                for line in str(chunk["stream"]).splitlines():
                    line = line.rstrip()
                    if not line:
                        continue
                    m = _STEP.match(line)
                    if m:
                        step = line
                        steps = int(m.group(1))
                    tail.append(line)
                    log(line)
            if "error" in chunk:
                error = str(chunk.get("errorDetail", {}).get("message") or chunk["error"]).strip()
                last = " | ".join(tail)
                raise StageFailed("build", f"docker build of {rendered.tag} failed at {step!r}: {error}. Last lines: {last}")
            aux = chunk.get("aux")
            if isinstance(aux, dict) and aux.get("ID"):
                image_id = str(aux["ID"])
    except APIError as exc:
        raise StageFailed("build", f"docker build of {rendered.tag} failed at {step!r}: {exc.explanation or exc}") from None
    finally:
        api.timeout = api_timeout
    if not image_id:
        image_id = str(client.images.get(rendered.tag).id)
    built = result(image_id, skipped=False, steps=steps, log_tail=list(tail))
    log(f"built {rendered.tag} ({image_id[:19]}) in {built.seconds:.1f} s")
    return built
