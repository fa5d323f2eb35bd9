"""What Prometheus should scrape on a host: every vLLM server landings keep (the gateway's landing
registry, :mod:`roost.gateway.registry`) and the metering gateway, and for each kept server the
decode rate its landing measured (the floor the decode-speed alert holds it to)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from roost.gateway import registry
from roost.records import RunRecord


@dataclass(frozen=True)
class DecodeFloor:
    """The per-request decode rate a landing measured at its highest measured concurrency (tok/s,
    1 / mean TPOT). vLLM never runs more requests at once than the landing's ``--max-num-seqs``,
    which the landing's sweep reaches, so live traffic decoding well below it is a slowdown, not load."""

    model_name: str
    tok_s: float
    concurrency: int
    run_id: str


@dataclass(frozen=True)
class ScrapeTarget:
    address: str  # host:port, as Prometheus dials it
    model_name: str = ""
    roost_host: str = ""
    run_id: str = ""


@dataclass
class Targets:
    vllm: list[ScrapeTarget] = field(default_factory=list)
    gateway: str = "127.0.0.1:8080"
    floors: list[DecodeFloor] = field(default_factory=list)


def address_of(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def decode_floor(record: RunRecord) -> DecodeFloor | None:
    """The landing's decode rate at its highest measured concurrency (the slowest such point when
    several share it), or None when it measured no decode timing."""
    best: tuple[int, float] | None = None
    for p in record.points:
        if not p.measured or not p.tpot_s.mean:
            continue
        rate = 1.0 / p.tpot_s.mean
        if best is None or p.concurrency > best[0] or (p.concurrency == best[0] and rate < best[1]):
            best = (p.concurrency, rate)
    if best is None:
        return None
    return DecodeFloor(record.meta.served_model_name, best[1], best[0], record.meta.run_id)


def kept_servers(host: str | None = None) -> list[registry.Registration]:
    """The registered servers (of roost host ``host`` when given), by address."""
    return sorted((r for r in registry.registered() if host is None or r.host == host), key=lambda r: r.base_url)
