"""The way through the metering gateway for a landing's own measurements (``roost.gateway.door``): the
run's benchmark key issued and the model routed (or why not), and the key revoked at the end.
Never cached; the key is a ``SecretStr`` and never logged (only its name)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from roost.gateway.door import Door, close_door, open_door
from roost.records import Usage


@task(name="gateway-door", cache_policy=NO_CACHE, persist_result=False)
def open_door_task(gateway_url: str, host: str, model: str, wait_s: float = 30.0) -> Door | str:
    """The door for ``model`` on ``host``, or why the run measures directly only."""
    door = open_door(gateway_url, host, model, wait_s)
    if isinstance(door, str):
        get_run_logger().warning("gateway: %s; measured directly only", door)
    else:
        get_run_logger().info("gateway: %s routes %s; key %s issued for this run", door.display, model, door.key_name)
    return door


@task(name="gateway-door-close", cache_policy=NO_CACHE, persist_result=False)
def close_door_task(door: Door) -> None:
    close_door(door)
    get_run_logger().info("gateway: key %s revoked", door.key_name)


@task(name="gateway-metered", cache_policy=NO_CACHE, persist_result=False)
def metered_task(door: Door, since: float, requests: int) -> Usage:
    """What the gateway metered for the run's key since ``since`` (waiting for ``requests`` rows)."""
    from roost.gateway.bench_key import metered

    return metered(door.db_url, door.key_name, since, requests)
