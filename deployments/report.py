"""What ``roost setup`` reports: one item per object it manages, and the report of a run (its ``--json``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Kind = Literal["block-type", "block", "secret", "work-pool", "work-queue", "concurrency-limit", "automation",
               "deployment"]
Status = Literal["created", "updated", "migrated", "removed", "unchanged", "kept", "skipped"]
CHANGED: tuple[Status, ...] = ("created", "updated", "migrated", "removed")
"""The statuses of an object this run wrote."""


class SetupItem(BaseModel):
    """One object ``roost setup`` manages and what it did to it."""

    kind: Kind
    name: str
    status: Status
    detail: str = ""


class SetupReport(BaseModel):
    api_url: str
    pool: str
    pool_note: str = Field(default="", description="why the pool is not the one asked for or the default (a legacy "
                                                    "name kept), or empty")
    hosts: list[str]
    skipped_hosts: dict[str, str] = Field(default_factory=dict, description="host -> why it was not set up")
    crash_alerts: str = Field(default="", description="where crash alerts go, or why they are off")
    sweep: str = Field(default="", description="whether the sweep deployment exists, and why not")
    workers: list[str] = Field(default_factory=list, description="the worker to start on each host: together they "
                                                                 "serve every queue a deployment is on")
    items: list[SetupItem] = Field(default_factory=list)

    @property
    def changed(self) -> list[SetupItem]:
        """The items this run created, updated, migrated or removed (empty on a repeated run)."""
        return [i for i in self.items if i.status in CHANGED]
