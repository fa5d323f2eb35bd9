"""Who else holds the host before a cold load, and whether its memory can take the plan (pure).

The Ornith 1.5 recipe: "On GB10, run one 0.70-utilization vLLM server at a time. If another model is
already serving, stop it first." roost's host slot only knows servers roost started; this module
judges what the backend found besides them, before minutes are spent on a cold load:

- an **occupant** is a container roost did not start that holds the host's GPUs (a device request
  for ``gpu``, or the ``nvidia`` runtime) or publishes the port the new server needs, or (process
  hosts) anything listening on that port. :func:`occupancy_refusal` refuses naming each one,
  unless the run says ``replace``: then the backend stops the containers (their restart policy set
  to ``no`` first, so Docker does not bring them back; they are stopped, never removed). A process
  roost did not start is never stopped.
- :func:`memory_refusal`: the host's available memory (``MemAvailable``: unified memory on the
  Spark, so what the GPU can still allocate) against the plan's weights + KV pool + headroom.

The restart policy of the server itself: :func:`restart_policy_for`. Whether the Prefect server lost
the lease of a host's serving slot or let it expire (who gives the slot back): :func:`lease_forgotten`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost.errors import StageFailed
from roost.failures import FailureClass
from roost.units import format_memory

RestartPolicy = Literal["no", "always", "unless-stopped", "on-failure"]
"""Docker's restart policies for a server container: the Ornith 1.5 recipe runs ``unless-stopped``
for the model meant to stay up across reboots."""

PRODUCTION_POLICY: RestartPolicy = "unless-stopped"
"""What a landing that keeps serving carries (the recipe's run.sh default): exactly one serving
container per host has it; swapping models moves it (``docker update --restart no`` on the old one)."""

KEEPS_RUNNING: tuple[str, ...] = ("always", "unless-stopped")
"""Restart policies under which Docker brings a stopped-by-crash or rebooted container back."""


def restart_policy_for(keep_serving: bool, asked: RestartPolicy | None = None) -> RestartPolicy:
    """The server's restart policy: what the run asked for, else ``unless-stopped`` for a landing
    that keeps serving (production) and ``no`` for a test or one-off run (stopped at its end)."""
    if asked is not None:
        return asked
    return PRODUCTION_POLICY if keep_serving else "no"


class Occupant(BaseModel):
    """Something roost did not start that stands in the new server's way."""

    kind: Literal["container", "process"]
    name: str = Field(description="Container name, or how to find the process.")
    holds: list[str] = Field(description="What it holds: 'the GPUs', 'port 8004'.")
    restart_policy: str = Field(default="", description="The container's restart policy (empty for a process).")
    can_stop: bool = Field(description="roost may stop it when told to replace (containers only).")

    def describe(self) -> str:
        policy = f", restart {self.restart_policy}" if self.restart_policy else ""
        return f"{self.kind} {self.name} ({' and '.join(self.holds)}{policy})"


def holds_gpus(host_config: Mapping[str, Any]) -> bool:
    """Does a container's ``HostConfig`` (``docker inspect``) give it the GPUs?"""
    if str(host_config.get("Runtime") or "") == "nvidia":
        return True
    for req in host_config.get("DeviceRequests") or []:
        caps = req.get("Capabilities") or []
        if any("gpu" in (group or []) for group in caps) or str(req.get("Driver") or "") == "nvidia":
            return True
    return False


def published_ports(attrs: Mapping[str, Any]) -> set[int]:
    """Host ports a container publishes (``HostConfig.PortBindings`` and, running, ``NetworkSettings.Ports``)."""
    ports: set[int] = set()
    sources = [(attrs.get("HostConfig") or {}).get("PortBindings") or {},
               (attrs.get("NetworkSettings") or {}).get("Ports") or {}]
    for bindings in sources:
        for binds in bindings.values():
            for b in binds or []:
                try:
                    ports.add(int(b.get("HostPort") or 0))
                except (TypeError, ValueError):
                    continue
    ports.discard(0)
    return ports


def container_occupant(name: str, attrs: Mapping[str, Any], port: int | None) -> Occupant | None:
    """The occupant a running container roost did not start is, given the port the new server needs;
    None when it holds neither the GPUs nor that port."""
    host_config = attrs.get("HostConfig") or {}
    holds = []
    if holds_gpus(host_config):
        holds.append("the GPUs")
    if port is not None and port in published_ports(attrs):
        holds.append(f"port {port}")
    if not holds:
        return None
    policy = str((host_config.get("RestartPolicy") or {}).get("Name") or "no")
    return Occupant(kind="container", name=name, holds=holds, restart_policy=policy, can_stop=True)


class HostBusy(StageFailed):
    """Something roost did not start holds the GPUs or the port: no cold load is attempted."""

    def __init__(self, message: str, remediation: str) -> None:
        super().__init__("host-check", message)
        self.failure_class = FailureClass.HOST_BUSY
        self.remediation = remediation


class HostMemoryShort(StageFailed):
    """The host's available memory cannot hold the plan: no cold load is attempted."""

    def __init__(self, message: str, remediation: str) -> None:
        super().__init__("host-check", message)
        self.failure_class = FailureClass.HOST_MEMORY_SHORT
        self.remediation = remediation


def occupancy_refusal(occupants: Sequence[Occupant], host: str, *, replace: bool) -> HostBusy | None:
    """Why the server cannot start next to ``occupants`` (None when it can, or when ``replace`` lets
    roost stop every one of them)."""
    if not occupants:
        return None
    blocking = [o for o in occupants if not (replace and o.can_stop)]
    if not blocking:
        return None
    names = "; ".join(o.describe() for o in blocking)
    if all(o.can_stop for o in blocking):
        remediation = "stop them yourself, or run again with --replace to let roost stop them (restart policy set to no first)"
    else:
        remediation = "stop what listens there (roost never stops a process it did not start) or use another port"
    return HostBusy(f"host {host} is busy, roost did not start: {names}", remediation)


def memory_refusal(available_bytes: int | None, needed_bytes: int, host: str) -> HostMemoryShort | None:
    """Why the plan cannot load now (None when it fits, or when the available memory is unknown)."""
    if available_bytes is None or available_bytes >= needed_bytes:
        return None
    return HostMemoryShort(
        f"host {host} has {format_memory(available_bytes)} available, the plan needs {format_memory(needed_bytes)} "
        "(weights + KV pool + headroom)",
        "stop what holds the memory (another model server, a notebook), or plan a smaller KV pool",
    )


def mem_available_bytes(meminfo: str) -> int | None:
    """``MemAvailable`` from the text of ``/proc/meminfo``, in bytes; None when it is not there."""
    for line in meminfo.splitlines():
        key, _, rest = line.partition(":")
        if key.strip() == "MemAvailable":
            parts = rest.split()
            try:
                value = int(parts[0])
            except (IndexError, ValueError):
                return None
            unit = parts[1].lower() if len(parts) > 1 else "b"
            return value * 1024 if unit == "kb" else value
    return None


def lease_forgotten(renewed_at: float, refused_at: float, lease_s: float) -> bool:
    """Did the Prefect server forget a held slot's lease rather than let it expire?

    It refused to renew the lease at ``refused_at`` although the last renewal it granted, asked for at
    ``renewed_at`` (the same monotonic clock), was for ``lease_s`` seconds that had not run out: the
    lease is not expired but gone, as after a restart of a server that keeps leases in memory (Prefect's
    default). An expired lease is revoked by the server, which gives its slot back; a forgotten one
    leaves the slot counted until the run holding it gives it back itself.
    """
    return refused_at < renewed_at + lease_s
