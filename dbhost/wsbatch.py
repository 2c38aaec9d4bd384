"""Several queued WebSocket messages written to the socket in one write.

Under load many engine replies complete in the same turn of the event loop, and aiohttp's
`send_bytes` writes each message to the transport on its own: one `send` system call per
reply (a quarter of the database host's busy main thread in issue 31's soak, and the lead's
first profile put aiohttp's send path at 12-15%). A server's frames are not masked, so a batch
of binary messages is just their frames back to back; writing them at once is the same bytes
on the wire, in the same order, with one call.
"""

from __future__ import annotations

import struct

# A batch stops growing at this many bytes (a slow reader's backlog goes out in pieces).
MAX_BATCH_BYTES = 1 << 20
# Above this much unsent data in the transport the writer goes back to aiohttp's own send,
# whose flow control waits for the peer (a raw write does not).
HIGH_WATER_BYTES = 1 << 20

_FIN_BINARY = 0x80 | 0x2  # final fragment, opcode 2 (binary)


def binary_frame_header(length: int) -> bytes:
    """The header of one unmasked, unfragmented binary frame of `length` payload bytes
    (RFC 6455, 5.2)."""
    if length < 126:
        return struct.pack("!BB", _FIN_BINARY, length)
    if length < 1 << 16:
        return struct.pack("!BBH", _FIN_BINARY, 126, length)
    return struct.pack("!BBQ", _FIN_BINARY, 127, length)


def frames_of(messages: list[bytes]) -> bytes:
    """`messages` as consecutive binary frames, ready for one transport write."""
    parts: list[bytes] = []
    for m in messages:
        parts.append(binary_frame_header(len(m)))
        parts.append(m)
    return b"".join(parts)
