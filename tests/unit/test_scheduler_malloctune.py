"""scheduler.malloctune: after the pin, a freed large buffer does not move the mmap
threshold, so the next one is mapped (and unmapped when freed) again."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import ctypes, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
if sys.argv[1] == "pin":
    from scheduler.malloctune import pin_mmap_threshold
    assert pin_mmap_threshold()
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(1 << 20))  # the first large block: mapped, then unmapped
again = libc.malloc(1 << 20)
print(libc.mallinfo2().hblkhd >= 1 << 20)  # the second one mapped too?
libc.free(again)
"""


def _mapped_again(mode: str) -> bool:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                         check=True, timeout=60)
    return out.stdout.strip() == "True"


def test_a_large_buffer_is_mapped_again_after_the_pin() -> None:
    assert not _mapped_again("none")  # glibc's own: the first free raised the threshold
    assert _mapped_again("pin")
