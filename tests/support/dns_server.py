"""A small authoritative DNS server on a loopback UDP port for tests: answers TXT queries from
a dict the test edits (``records[name] = [values]``), NXDOMAIN for other names. Built on
dnspython's message classes; one thread, stopped by :meth:`LocalDns.stop`."""

from __future__ import annotations

import socket
import threading

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset


class LocalDns:
    def __init__(self) -> None:
        self.records: dict[str, list[str]] = {}
        self.queries = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _answer(self, data: bytes) -> bytes | None:
        try:
            q = dns.message.from_wire(data)
        except Exception:  # noqa: BLE001 - a garbage datagram gets no answer
            return None
        r = dns.message.make_response(q)
        r.flags |= dns.flags.AA
        for question in q.question:
            name = question.name.to_text().rstrip(".").lower()
            values = self.records.get(name)
            if values is None:
                r.set_rcode(dns.rcode.NXDOMAIN)
            elif question.rdtype == dns.rdatatype.TXT:
                r.answer.append(dns.rrset.from_text_list(
                    question.name, 60, "IN", "TXT", [f'"{v}"' for v in values]))
        return r.to_wire()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.queries += 1
            out = self._answer(data)
            if out is not None:
                self.sock.sendto(out, peer)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=2)
        self.sock.close()
