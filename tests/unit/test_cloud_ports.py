"""The platform's port picks: a port handed out is not handed out again while its role
starts, whatever the kernel's probes return (cloud.executor.free_port)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from cloud import executor, reconcile


class _Probe:
    """A socket whose bind to port 0 gets the next port of a script (the kernel may give
    a port it gave the probe before, closed since)."""

    script: Iterator[int] = iter(())
    taken: set[int] = set()  # ports some other process holds

    def __init__(self, *a: Any) -> None:
        self.port = 0

    def __enter__(self) -> _Probe:
        return self

    def __exit__(self, *a: Any) -> None:
        return None

    def bind(self, addr: tuple[str, int]) -> None:
        if addr[1] in self.taken:
            raise OSError(98, "Address already in use")
        self.port = next(self.script) if addr[1] == 0 else addr[1]

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> type[_Probe]:
    monkeypatch.setattr(executor, "_handed_out", {})
    monkeypatch.setattr(executor.socket, "socket", _Probe)
    _Probe.taken = set()
    return _Probe


def test_a_port_the_kernel_gives_twice_is_handed_out_once(probes: type[_Probe]) -> None:
    probes.script = iter([40001, 40001, 40003, 40001, 40003, 40005])
    assert [executor.free_port() for _ in range(3)] == [40001, 40003, 40005]


def test_consecutive_ports_skip_ports_handed_out_or_taken(probes: type[_Probe]) -> None:
    probes.script = iter([40011, 40021, 40011, 40031, 40041])
    assert executor.free_port() == 40011
    probes.taken = {40022}  # 40021's next port is held by another process
    # 40021 + 1 is taken; 40011 was handed out; 40031 has two free ports
    assert reconcile._consecutive_ports(2) == 40031
    assert not executor.reserve_port(40032)  # handed out with it
    assert executor.free_port() == 40041


def test_a_port_comes_back_once_its_reserve_has_passed(probes: type[_Probe],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(executor.time, "monotonic", lambda: now[0])
    probes.script = iter([40051, 40051, 40061])
    assert executor.free_port() == 40051
    now[0] += executor.PORT_RESERVE_SECS + 1
    assert executor.free_port() == 40051
    assert executor.free_port() == 40061


def test_a_real_pick_binds() -> None:
    port = executor.free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
