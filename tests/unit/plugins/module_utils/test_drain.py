"""A router's drain, seen in its sockets (module_utils.drain): done once it listens no more and every
connection it accepted is closed, while its process may still be on its way out."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time

from ansible_collections.dsv4.deploy.plugins.module_utils import drain

# A server that drains as sglang-router does on SIGTERM: closes its listener at once, answers the request
# it holds, closes that connection, and then takes its time to end.
SERVER = textwrap.dedent("""
    import signal, socket, sys, time
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    conn.recv(100)
    signal.sigwait({signal.SIGTERM})
    listener.close()
    time.sleep(0.5)  # the request in flight goes on after the TERM
    conn.sendall(b"answer")
    conn.close()
    time.sleep(60)  # the process's own slow end
""")


def test_drained_once_the_answer_is_written_not_when_the_process_ends() -> None:
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"request")
        while not any(state == drain.LISTEN for _, state in drain.sockets([server.pid]) or []):
            time.sleep(0.01)
        ports = drain.listening([server.pid])
        assert ports == {port}
        while len(drain.sockets([server.pid]) or []) < 2:  # the accepted connection too
            time.sleep(0.01)
        assert not drain.drained([server.pid], ports)
        server.send_signal(signal.SIGTERM)
        assert drain.wait_drained([server.pid], ports, time.monotonic() + 30)
        # The answer was written before the drain was over; the process is still there.
        client.settimeout(5)
        assert client.recv(100) == b"answer"
        assert server.poll() is None
        client.close()
    finally:
        server.kill()
        server.wait()


def test_a_process_that_ended_has_drained_reaped_or_not() -> None:
    server = subprocess.Popen([sys.executable, "-c", "pass"])
    while drain.alive(server.pid):  # a zombie until waited for
        time.sleep(0.01)
    assert drain.drained([server.pid], frozenset({1}))
    server.wait()
    assert drain.drained([server.pid], frozenset({1}))
    assert drain.listening([server.pid]) == frozenset()
