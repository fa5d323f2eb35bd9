"""A host whose Docker engine is on another machine (``docker_url`` tcp://, ssh://), without an engine: where
roost reaches the server it publishes there, and what it can know from here about who holds its port. The
end-to-end landing on such an engine (a second dockerd in a network namespace): ``tests/flows/docker/
test_remote_engine_e2e.py``."""

from __future__ import annotations

import socket

import pytest

from roost.errors import UserError
from roost.hosts import CPU_DOCKER, SPARK
from roost.serve.docker.containers import _client_address, local_listener
from roost.serve.docker.images import remote_engine_address

REMOTE = CPU_DOCKER.model_copy(update={"name": "remote", "docker_url": "tcp://10.231.0.2:23750",
                                       "bind_addrs": ["127.0.0.1", "10.231.0.2"]})


@pytest.mark.parametrize(("url", "address"), [
    ("unix:///var/run/docker.sock", None),
    ("npipe:////./pipe/docker_engine", None),
    ("", None),
    ("tcp://127.0.0.1:2375", None),
    ("tcp://127.0.0.2:2375", None),
    ("tcp://localhost:2375", None),
    ("tcp://[::1]:2375", None),
    ("tcp://10.231.0.2:23750", "10.231.0.2"),
    ("https://spark.lan:2376", "spark.lan"),
    ("ssh://me@spark.lan", "spark.lan"),
    ("10.0.0.5:2375", "10.0.0.5"),  # docker-py takes a bare HOST:PORT as tcp://
])
def test_an_engine_is_remote_when_its_url_names_another_machine(url: str, address: str | None) -> None:
    assert remote_engine_address(url) == address


def test_a_local_engine_is_reached_where_the_spec_listens() -> None:
    assert _client_address(CPU_DOCKER, "127.0.0.1") == "127.0.0.1"
    assert _client_address(SPARK, "172.17.0.1") == "172.17.0.1"
    assert _client_address(SPARK, "") == "127.0.0.1"
    assert _client_address(CPU_DOCKER.model_copy(update={"bind_addrs": ["0.0.0.0"]}), "127.0.0.1") == "127.0.0.1"


def test_a_remote_engine_is_reached_at_its_own_address_never_this_machines_loopback() -> None:
    # the spec asks for 127.0.0.1 (the default) and the port is published there too, but on the engine's
    # machine: roost was reaching its own loopback
    assert _client_address(REMOTE, "127.0.0.1") == "10.231.0.2"
    assert _client_address(REMOTE, "") == "10.231.0.2"
    everywhere = REMOTE.model_copy(update={"bind_addrs": ["0.0.0.0"]})
    assert _client_address(everywhere, "127.0.0.1") == "10.231.0.2"  # was 127.0.0.1
    # the engine's API on one address (a name), the port published on another of that machine's
    lan = REMOTE.model_copy(update={"docker_url": "ssh://me@spark.lan", "bind_addrs": ["127.0.0.1", "192.168.1.5"]})
    assert _client_address(lan, "127.0.0.1") == "192.168.1.5"


def test_a_remote_engine_publishing_on_loopback_only_is_a_user_error() -> None:
    unreachable = REMOTE.model_copy(update={"bind_addrs": ["127.0.0.1"]})  # the profile's default bind_addrs
    with pytest.raises(UserError) as refused:
        _client_address(unreachable, "127.0.0.1")
    assert str(refused.value) == (
        "host remote's Docker engine is on another machine (tcp://10.231.0.2:23750) but its bind_addrs (127.0.0.1) "
        "publish vLLM's port on that machine's loopback only, which roost cannot reach from here: add an address "
        "of it roost reaches (e.g. 10.231.0.2) to the host's bind_addrs")


def test_a_process_here_holds_a_local_engines_port_not_a_remote_ones() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        held = local_listener(CPU_DOCKER, port)
        assert held is not None and held.describe() == f"process a process listening on 127.0.0.1:{port} (port {port})"
        # the remote engine's 127.0.0.1 is another machine's; its 10.231.0.2 is not an address here at all
        # (binding it fails, which read as "in use": every fixed-port landing on a remote engine was refused)
        assert local_listener(REMOTE, port) is None
    assert local_listener(CPU_DOCKER, port) is None
