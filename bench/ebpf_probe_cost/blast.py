"""Loopback TCP traffic: one sender, one receiver, small writes with Nagle off, so every
write is a segment and the network stack raises softirqs at a high rate, as on a busy
node's NIC. Runs until killed."""
import socket
import sys
import threading

size = int(sys.argv[1]) if len(sys.argv) > 1 else 1400
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(1)


def sink():
    conn, _ = srv.accept()
    while conn.recv(1 << 16):
        pass


threading.Thread(target=sink, daemon=True).start()
out = socket.create_connection(srv.getsockname())
out.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
chunk = b"x" * size
while True:
    out.sendall(chunk)
