"""A slow-body attack on the console, run as a process of its own by tests/web/test_console_slow_body.py.

``python -m tests.web.slow_body_attack PORT PATH DECLARED CONNECTIONS SECONDS BYTE_EVERY_S PAUSE_S SOURCE...``:
CONNECTIONS threads, spread over the SOURCE addresses (127.0.0.x), each opening a TLS connection to 127.0.0.1:PORT,
sending ``GET PATH`` with ``Content-Length: DECLARED`` and then one body byte every BYTE_EVERY_S, and opening a new
connection PAUSE_S after the server closes on it, for SECONDS.  Prints "attacking" when started, and at the end
the server's answers counted by status line (JSON).
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
import threading
import time
from collections import Counter


def main(argv: list[str]) -> int:
    port, path, declared, connections = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    seconds, every_s, pause_s, sources = float(argv[4]), float(argv[5]), float(argv[6]), argv[7:]
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the appliance's self-signed certificate
    answers: Counter[str] = Counter()
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {declared}\r\n\r\n".encode("ascii")

    def one_connection(source: str) -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=every_s, source_address=(source, 0))
        with context.wrap_socket(raw) as tls:
            tls.sendall(head)
            while time.monotonic() < stop_at:
                try:
                    answer = tls.recv(4096)
                except TimeoutError:
                    tls.sendall(b"x")  # one more byte of the body
                    continue
                with lock:
                    answers[answer.split(b"\r\n", 1)[0].decode("ascii", "replace") if answer else "closed"] += 1
                return

    def attacker(source: str) -> None:
        while time.monotonic() < stop_at:
            try:
                one_connection(source)
            except OSError:
                with lock:
                    answers["connection failed"] += 1
            time.sleep(pause_s)

    threads = [threading.Thread(target=attacker, args=(sources[i % len(sources)],)) for i in range(connections)]
    print("attacking", flush=True)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(dict(answers)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
