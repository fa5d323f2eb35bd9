"""The Docker engine client and the serving image: the Dockerfile from ``roost.serve.dockerfile``
(vLLM base + xgrammar patch), built with the low-level ``APIClient.build(decode=True)``.

``plan_build`` resolves the base image, reads what it holds (``roost.serve.image.probe`` in a throw-away
container: vLLM's distribution, version and xgrammar requirement and the xgrammar it has, from
package metadata, without importing vLLM) and renders the Dockerfile with the xgrammar pin that
follows from it (a patch layer only when the pin differs from the base's own); ``build_image`` builds
that plan. Every build line goes to a ``log`` callback (the Prefect logger in ``tasks/build.py``); a
failing build raises StageFailed naming its step and last lines, and a failed xgrammar check says
which base, vLLM and xgrammar did not work together; an existing content-addressed tag skips the
build and says so, with the xgrammar versions its labels carry.
"""

from __future__ import annotations

import io
import ipaddress
import re
import tarfile
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound
from pydantic import BaseModel, Field

from roost.errors import StageFailed
from roost.hosts import HostProfile
from roost.serve.dockerfile import (
    LABEL_MANAGED,
    LABEL_VLLM,
    LABEL_VLLM_DISTRIBUTION,
    BaseImageFacts,
    BuildSpec,
    RenderedDockerfile,
    XgrammarPin,
    check_failure_detail,
    parse_probe,
    pin_from_labels,
    probe_command,
    render_dockerfile,
    table_note,
)

LogFn = Callable[[str], None]

DEFAULT_DOCKER_URL = "unix:///var/run/docker.sock"


def _noop(_: str) -> None:
    return None


def is_loopback(address: str) -> bool:
    """``localhost`` or a loopback IP (127.0.0.0/8, ::1); a name or another address is not."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def remote_engine_address(docker_url: str) -> str | None:
    """The address of a Docker engine on another machine (``tcp://10.0.0.5:2375``, ``ssh://me@spark.lan``,
    a bare ``HOST:PORT``), as the URL names it; None for this machine's (a unix or npipe socket, an empty
    URL, ``localhost`` or a loopback address)."""
    if not docker_url or docker_url.startswith(("unix://", "npipe://")):
        return None
    hostname = urlsplit(docker_url if "://" in docker_url else f"tcp://{docker_url}").hostname or ""
    return None if not hostname or is_loopback(hostname) else hostname


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
    xgrammar_source: str = Field(description="vllm-pin, installed or override (``XgrammarPin.source``).")
    xgrammar_requirement: str = Field(description="vLLM's xgrammar specifier in the base image; '' for none.")
    xgrammar_base: str = Field(default="", description="The xgrammar the base image already had; '' for none.")
    xgrammar_summary: str = Field(default="", description="``XgrammarPin.summary()``: patched A -> B, or no patch needed.")
    vllm_distribution: str
    vllm_version: str = Field(description="The vLLM the base image holds (its package metadata).")
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


class BuildPlan(BaseModel):
    """What a build will make, before it runs: the base's identity, what it holds, the Dockerfile."""

    spec: BuildSpec = Field(description="The spec with the base's digest (or id) filled in.")
    base_image_id: str
    base_repo_digest: str
    facts: BaseImageFacts
    rendered: RenderedDockerfile


def probe_base_image(client: docker.DockerClient, base_image: str, image_id: str, *,
                     timeout_s: int = 120) -> BaseImageFacts:
    """Run the probe (``roost.serve.image.probe``) in a throw-away container of the base image (no network;
    removed after)."""
    what = f"cannot read the packages of base image {base_image}"
    try:
        container = client.containers.create(image_id, entrypoint=probe_command(),
                                             labels={LABEL_MANAGED: "true"}, network_disabled=True)
    except APIError as exc:
        raise StageFailed("build", f"{what}: {exc.explanation or exc}") from None
    try:
        container.start()
        code = int(container.wait(timeout=timeout_s).get("StatusCode", -1))
        out = container.logs(stdout=True, stderr=False).decode(errors="replace")
        err = container.logs(stdout=False, stderr=True).decode(errors="replace").strip().splitlines()
    except (APIError, requests.RequestException) as exc:
        explanation = exc.explanation if isinstance(exc, APIError) else None
        raise StageFailed("build", f"{what} with python3 (roost needs it there): {explanation or exc}") from None
    finally:
        container.remove(force=True)
    if code != 0:
        raise StageFailed("build", f"{what}: python3 exited with code {code}: {err[-1] if err else 'no output'}")
    return parse_probe(out, base_image)


def plan_build(client: docker.DockerClient, spec: BuildSpec, *, pull: bool = True,
               reuse: BuildPlan | None = None) -> BuildPlan:
    """The plan for ``spec`` on this engine: the base resolved (pulled when absent and ``pull``, else
    StageFailed says it is absent), read and rendered. ``reuse`` is returned as it is while the spec
    and the base image's id are the same: the base is read and the Dockerfile rendered once per base
    image, not once per question (cache key, is-prepared, build)."""
    base_id, base_digest = resolve_base_image(client, spec.base_image, pull=pull)
    filled = spec.model_copy(update={"base_image_digest": base_digest or base_id})
    if reuse is not None and reuse.spec == filled and reuse.base_image_id == base_id:
        return reuse
    facts = probe_base_image(client, spec.base_image, base_id)
    return BuildPlan(spec=filled, base_image_id=base_id, base_repo_digest=base_digest, facts=facts,
                     rendered=render_dockerfile(filled, facts))


def build_context(rendered: RenderedDockerfile) -> io.BytesIO:
    """The build context: a tar of the Dockerfile and the files it copies."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, content in {"Dockerfile": rendered.text, **rendered.files}.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


def _stream_build(client: docker.DockerClient, rendered: RenderedDockerfile, *, log: LogFn, timeout_s: int,
                  tail_lines: int) -> tuple[str, int, list[str]]:
    """Run the docker build of ``rendered``, every line to ``log``: (image id, steps run, the last
    ``tail_lines`` lines). StageFailed on a failing build, naming its step and last lines, or, when the
    xgrammar check failed, which base, vLLM and xgrammar did not work together."""
    api = client.api
    tail: deque[str] = deque(maxlen=tail_lines)
    check: list[str] = []  # the check step's FAIL line, when it prints one
    step = "before the first step"
    steps = 0
    image_id = ""
    api_timeout = api.timeout
    try:
        api.timeout = timeout_s
        stream = api.build(
            fileobj=build_context(rendered), custom_context=True, tag=rendered.tag, rm=True, forcerm=True,
            pull=False, decode=True, labels=rendered.labels, buildargs=rendered.build_args or None,
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
                    if check_failure_detail([line]) is not None:
                        check.append(line)
                    log(line)
            if "error" in chunk:
                detail = check_failure_detail(check)
                if detail is not None:
                    raise StageFailed("build", rendered.check_failure(detail))
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
    return image_id, steps, list(tail)


def build_image(
    spec: BuildSpec,
    *,
    client: docker.DockerClient,
    log: LogFn = _noop,
    timeout_s: int = 3600,
    tail_lines: int = 20,
    plan: BuildPlan | None = None,
) -> BuildResult:
    """Build (or find) the serving image for ``spec`` (``plan``: ``plan_build``'s for it, else made
    here); every build line goes to ``log``."""
    t0 = time.monotonic()
    plan = plan if plan is not None else plan_build(client, spec)
    rendered, facts, pin = plan.rendered, plan.facts, plan.rendered.xgrammar

    def result(image_id: str, made: XgrammarPin, vllm_distribution: str, vllm_version: str, *, skipped: bool,
               steps: int = 0, log_tail: list[str] | None = None) -> BuildResult:
        return BuildResult(
            tag=rendered.tag, image_id=image_id, dockerfile_sha256=rendered.sha256, base_image=spec.base_image,
            base_image_id=plan.base_image_id, base_image_digest=plan.base_repo_digest, xgrammar_version=made.version,
            xgrammar_source=made.source, xgrammar_requirement=made.requirement, xgrammar_base=made.base,
            xgrammar_summary=made.summary(), vllm_distribution=vllm_distribution, vllm_version=vllm_version,
            skipped=skipped, seconds=round(time.monotonic() - t0, 3), steps=steps, log_tail=log_tail or [],
        )

    if image_exists(client, rendered.tag):
        image = client.images.get(rendered.tag)
        labels: dict[str, str] = dict(image.labels or {})  # what the image itself says it was built with
        found = pin_from_labels(labels, pin)
        log(f"image {rendered.tag} already exists (Dockerfile sha256 {rendered.sha256[:12]}); build skipped: "
            f"{found.summary()}")
        return result(str(image.id), found, labels.get(LABEL_VLLM_DISTRIBUTION) or rendered.vllm_distribution,
                      labels.get(LABEL_VLLM) or rendered.vllm_version, skipped=True)

    required = f"requires xgrammar{pin.requirement}" if pin.requirement else "names no xgrammar requirement"
    has = f"xgrammar {facts.xgrammar_installed}" if facts.xgrammar_installed else "no xgrammar"
    log(f"base image {spec.base_image} holds {facts.vllm} ({required}) and {has}; Python {facts.python}")
    note = table_note(facts)
    if note:
        log(note)
    if not pin.satisfies:
        log(f"warning: {pin.describe()}; the build's check decides whether vLLM works with it")
    log(f"building {rendered.tag} FROM {spec.base_image}: {pin.summary()}")
    image_id, steps, tail = _stream_build(client, rendered, log=log, timeout_s=timeout_s, tail_lines=tail_lines)
    built = result(image_id, pin, rendered.vllm_distribution, rendered.vllm_version, skipped=False, steps=steps,
                   log_tail=tail)
    log(f"built {rendered.tag} ({image_id[:19]}) in {built.seconds:.1f} s")
    return built
