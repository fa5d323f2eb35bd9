"""Where each variant of a sweep stands, and what to start next. Pure: the flow reports what it saw,
this decides.

A variant goes ``refused`` (its plan says vLLM would not start it: never landed), ``measured`` (an
earlier run of the same commit, arguments and image on one of the sweep's hosts: not landed again),
or ``pending`` -> ``running`` (its landing sent to a host's queue) -> ``done`` / ``failed`` (the landing
ran and failed: vLLM refused the flags, the benchmark broke) / ``missing`` (never measured: its host's
worker died under it, no worker took it, no host was left).

Each host runs one landing at a time; hosts run in parallel. A host is *lost* when a landing on it
crashed (its worker or machine died: the run is Crashed) or when no worker took a run from its queue
in time: nothing more is sent there, and a variant it never started goes back to ``pending`` for the
other hosts. A crashed variant is not retried on another host in the same sweep (it may be what
brought the host down); a rerun of the sweep lands what is missing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from roost.sweep.grid import Variant

VariantStatus = Literal["refused", "measured", "pending", "running", "done", "failed", "missing"]


class VariantState(BaseModel):
    variant: Variant
    status: VariantStatus = "pending"
    vllm_args: list[str] = Field(default_factory=list, description="What the plan serves it with.")
    host: str = ""
    flow_run_id: str = ""
    flow_run_name: str = ""
    run_id: str = Field(default="", description="The stored run that measured it (done or measured earlier).")
    reason: str = Field(default="", description="Why it was refused, failed or is missing.")
    failure_class: str = ""

    @property
    def name(self) -> str:
        return self.variant.name


class SweepState(BaseModel):
    """Every variant and every host of one sweep."""

    hosts: list[str]
    variants: list[VariantState]
    lost: dict[str, str] = Field(default_factory=dict, description="host -> why nothing more is sent there")

    def running_on(self, host: str) -> VariantState | None:
        return next((v for v in self.variants if v.status == "running" and v.host == host), None)

    @property
    def pending(self) -> list[VariantState]:
        return [v for v in self.variants if v.status == "pending"]

    @property
    def running(self) -> list[VariantState]:
        return [v for v in self.variants if v.status == "running"]

    def free_hosts(self) -> list[str]:
        return [h for h in self.hosts if h not in self.lost and self.running_on(h) is None]

    def assignments(self) -> list[tuple[VariantState, str]]:
        """The next landings to start: each free host takes the next pending variant, in grid order."""
        out = []
        queue = self.pending
        for host in self.free_hosts():
            if not queue:
                break
            out.append((queue.pop(0), host))
        return out

    def start(self, v: VariantState, host: str, flow_run_id: str, flow_run_name: str = "") -> None:
        v.status, v.host, v.flow_run_id, v.flow_run_name = "running", host, flow_run_id, flow_run_name

    def finish(self, v: VariantState, run_id: str) -> None:
        v.status, v.run_id, v.reason = "done", run_id, ""

    def fail(self, v: VariantState, reason: str, failure_class: str = "", run_id: str = "") -> None:
        """The landing ran and failed: the variant is not tried again, the host goes on."""
        v.status, v.reason, v.failure_class, v.run_id = "failed", reason, failure_class, run_id

    def crash(self, v: VariantState, reason: str) -> None:
        """The landing's host died under it: the variant is missing and the host is lost."""
        self.lost[v.host] = reason
        v.status, v.reason = "missing", reason

    def not_stored(self, v: VariantState, reason: str) -> None:
        """The landing ended, but what it measured cannot be read: the variant is missing, the host goes on."""
        v.status, v.reason = "missing", reason

    def unclaimed(self, v: VariantState, reason: str) -> None:
        """No worker took the landing: the host is lost, the variant goes back for another host."""
        self.lost[v.host] = reason
        v.status, v.host, v.flow_run_id, v.flow_run_name = "pending", "", "", ""

    def settle(self) -> bool:
        """True while there is something to wait for; pending variants with no host left become missing."""
        if self.running:
            return True
        if self.pending and not self.free_hosts():
            why = "; ".join(f"{h}: {r}" for h, r in self.lost.items()) or "no host"
            for v in self.pending:
                v.status, v.reason = "missing", f"no host left to land it ({why})"
            return False
        return bool(self.pending)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for v in self.variants:
            out[v.status] = out.get(v.status, 0) + 1
        return out
