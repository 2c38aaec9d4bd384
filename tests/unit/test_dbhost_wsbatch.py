"""A batch of messages is the bytes aiohttp's own writer puts on the wire for each in turn."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp._websocket.writer import WebSocketWriter

from dbhost.wsbatch import binary_frame_header, frames_of


class _Transport:
    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return False


class _Protocol:
    _paused = False


def _aiohttp_bytes(messages: list[bytes]) -> bytes:
    transport = _Transport()
    proto: Any = _Protocol()
    writer = WebSocketWriter(proto, transport, use_mask=False)  # type: ignore[arg-type]

    async def run() -> None:
        for m in messages:
            await writer.send_frame(m, 2)  # opcode 2: binary, as send_bytes

    asyncio.run(run())
    return bytes(transport.data)


def test_a_batch_is_the_frames_aiohttp_writes() -> None:
    messages = [b"", b"a", b"x" * 125, b"y" * 126, b"z" * 65535, b"w" * 65536, b"v" * 70_000]
    assert frames_of(messages) == _aiohttp_bytes(messages)
    for m in messages:
        assert frames_of([m]) == _aiohttp_bytes([m])


def test_header_length_forms() -> None:
    assert binary_frame_header(125) == b"\x82\x7d"
    assert binary_frame_header(126) == b"\x82\x7e\x00\x7e"
    assert binary_frame_header(1 << 16) == b"\x82\x7f" + (1 << 16).to_bytes(8, "big")
