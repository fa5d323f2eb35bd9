"""Upstreams (the model servers behind the gateway) and the model -> upstream choice.

An :class:`Upstream` is one OpenAI-compatible server the gateway forwards to (the serving backends
that start servers are :class:`roost.serve.base.Backend`, another thing). Upstreams come from the
command line (``--backend``) and from landings (``registry``). Each one's ``/v1/models`` is polled
every ``poll_interval_s`` with the upstream key; a model name routes to an upstream that listed it
at its last poll (round-robin when several do). A request for a model no upstream lists re-polls
at once (at most every ``repoll_min_s``), so a server landed a moment ago is found without waiting.
An upstream whose last poll failed, or that refused a connection since, is ``down``: requests for
its models get 503 at once. Logs, metrics, usage rows and ``/health`` keep calling it a backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx

from roost.gateway import registry
from roost.gateway.upstream_client import UpstreamClient
from roost.vllm.client import display_url, normalize_base_url

log = logging.getLogger("roost.gateway")


MODEL_FIELDS = ("id", "object", "created", "owned_by", "max_model_len")
"""What the gateway's ``/v1/models`` tells clients of each model (OpenAI's fields and the context window)."""


class ModelNotFound(Exception):
    def __init__(self, model: str, available: list[str]) -> None:
        super().__init__(model)
        self.model, self.available = model, available


class UpstreamDown(Exception):
    def __init__(self, model: str, url: str) -> None:
        super().__init__(model)
        self.model, self.url = model, url


class Upstream:
    """One OpenAI-compatible server behind the gateway."""

    def __init__(self, url: str, upstream_key: str | None, source: Literal["cli", "landing"], *,
                 connect_timeout_s: float, connections: int) -> None:
        self.url = normalize_base_url(url)
        self.name = display_url(self.url)  # what logs, metrics and usage rows show: no userinfo password
        self.source = source
        self.client = UpstreamClient(self.url, api_key=upstream_key, connect_timeout_s=connect_timeout_s,
                                     http_connections=connections)
        self.models: list[dict[str, Any]] = []
        self.model_set: frozenset[str] = frozenset()  # the ids of models, for routing
        self.up = False
        self.status = "not polled yet"
        self.polled_at = 0.0
        self.in_flight = 0
        self.confirming: asyncio.Task[None] | None = None  # a poll asked for by a failed request

    @property
    def model_ids(self) -> list[str]:
        return [str(m["id"]) for m in self.models]

    async def poll(self, timeout_s: float) -> None:
        try:
            answer = await self.client.models(timeout_s=timeout_s)
        except httpx.HTTPError as exc:
            self.up, self.status = False, f"unreachable ({type(exc).__name__})"
        else:
            if answer.status_code == 200:
                self.up, self.status, self.models = True, "ok", answer.data
                self.model_set = frozenset(str(m["id"]) for m in answer.data)
            elif answer.status_code in (401, 403):
                self.up, self.status = False, "refuses the upstream key (set VLLM_API_KEY to the key it was started with)"
            else:
                self.up, self.status = False, f"/v1/models answered {answer.status_code}"
        self.polled_at = time.monotonic()

    def describe(self) -> dict[str, Any]:
        return {"url": self.name, "source": self.source, "up": self.up, "status": self.status, "models": self.model_ids}


class Router:
    def __init__(self, urls: list[str], upstream_key: str | None, *, poll_interval_s: float = 5.0,
                 use_registry: bool = True, connect_timeout_s: float = 3.0, connections: int = 4096,
                 repoll_min_s: float = 0.5) -> None:
        self.upstream_key = upstream_key
        self.poll_interval_s = poll_interval_s
        self.use_registry = use_registry
        self.connect_timeout_s = connect_timeout_s
        self.connections = connections
        self.repoll_min_s = repoll_min_s
        self.upstreams: dict[str, Upstream] = {}
        for url in urls:
            self._add(url, "cli")
        self._rr = itertools.count()
        self._lock = asyncio.Lock()
        self._last_poll = 0.0
        self._direct: set[str] = set()
        self.on_models: Callable[[set[str]], None] | None = None  # told the models listed after each poll
        self._task: asyncio.Task[None] | None = None

    def _add(self, url: str, source: Literal["cli", "landing"]) -> Upstream:
        norm = normalize_base_url(url)
        if norm not in self.upstreams:
            self.upstreams[norm] = Upstream(norm, self.upstream_key, source, connect_timeout_s=self.connect_timeout_s,
                                            connections=self.connections)
            log.info("backend %s added (%s)", display_url(norm), "command line" if source == "cli" else "registered by a landing")
        return self.upstreams[norm]

    async def _sync_registry(self) -> None:
        if not self.use_registry:
            return
        entries = registry.registered()
        now = time.time()
        self._direct = {r.served_model_name for r in entries if r.direct_until > now and r.served_model_name}
        landed = {normalize_base_url(r.base_url) for r in entries}
        for url in landed:
            self._add(url, "landing")
        for url, b in list(self.upstreams.items()):
            if b.source == "landing" and url not in landed:
                del self.upstreams[url]
                log.info("backend %s removed (its landing was stopped or replaced)", url)
                with contextlib.suppress(Exception):
                    await b.client.aclose()

    async def poll(self) -> None:
        """Re-read the registry and poll every upstream (concurrently)."""
        async with self._lock:
            await self._sync_registry()
            upstreams = list(self.upstreams.values())
            await asyncio.gather(*(u.poll(timeout_s=self.poll_timeout_s) for u in upstreams))
            self._last_poll = time.monotonic()
        if self.on_models is not None:
            self.on_models({m for u in upstreams if u.up for m in u.model_ids})

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.poll()
            except Exception as exc:  # never let the poller die
                log.error("backend poll failed: %s", type(exc).__name__)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self.run(), name="backend-poller")

    async def close(self) -> None:
        for b in self.upstreams.values():
            if b.confirming is not None:
                b.confirming.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for b in self.upstreams.values():
            with contextlib.suppress(Exception):
                await b.client.aclose()

    @property
    def poll_timeout_s(self) -> float:
        return max(self.connect_timeout_s, 2.0)

    def confirm(self, upstream: Upstream) -> None:
        """A request saw ``upstream`` fail (a cut stream, a connection not taken): poll it now. One failure
        a client or a loaded machine may have caused does not take an upstream away from every client: its
        poll decides."""
        if upstream.confirming is None or upstream.confirming.done():
            upstream.confirming = asyncio.get_running_loop().create_task(
                upstream.poll(timeout_s=self.poll_timeout_s), name="backend-confirm")

    def direct_expected(self) -> set[str]:
        """Models whose registered server a roost benchmark is measuring directly now (as of the last
        registry read): their vLLM traffic bypasses the gateway on purpose."""
        return set(self._direct)

    def models(self) -> list[dict[str, Any]]:
        """The union of the upstreams' models (first listing of each id), as ``/v1/models`` data: the
        fields clients read (:data:`MODEL_FIELDS`), never an upstream's ``root`` (the weights' path on its
        disk) or anything else it lists."""
        seen: dict[str, dict[str, Any]] = {}
        for b in self.upstreams.values():
            if b.up:
                for m in b.models:
                    seen.setdefault(str(m["id"]), {k: m[k] for k in MODEL_FIELDS if k in m})
        return list(seen.values())

    def _candidates(self, model: str) -> tuple[list[Upstream], list[Upstream]]:
        listing = [b for b in self.upstreams.values() if model in b.model_set]
        return [b for b in listing if b.up], listing

    def resolve_now(self, model: str) -> Upstream | None:
        """:meth:`resolve` when an upstream that is up lists ``model`` (no poll, nothing raised); else None."""
        if len(self.upstreams) == 1:  # the usual gateway: one server
            only = next(iter(self.upstreams.values()))
            return only if only.up and model in only.model_set else None
        up, _ = self._candidates(model)
        return self._least_busy(up) if up else None

    def _least_busy(self, up: list[Upstream]) -> Upstream:
        """The upstream with the fewest requests in flight (turn by turn among equals)."""
        return min(up, key=lambda b: (b.in_flight, next(self._rr)))

    async def resolve(self, model: str) -> Upstream:
        """The upstream to send a request for ``model`` to; ModelNotFound or UpstreamDown."""
        up, listing = self._candidates(model)
        if not listing and time.monotonic() - self._last_poll >= self.repoll_min_s:
            await self.poll()  # a landing since the last poll?
            up, listing = self._candidates(model)
        if up:
            return self._least_busy(up)
        if listing:
            raise UpstreamDown(model, listing[0].name)
        raise ModelNotFound(model, sorted({str(m["id"]) for m in self.models()}))
