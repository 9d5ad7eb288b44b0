"""Socket probes for the emulated cluster's tests (tests/test_cluster.py), run inside hosts.

  serve ADDR          listen on ADDR port 0, print "PORT p", accept one connection, print
                      "PEER ip", then echo lines back until the peer closes
  sink ADDR           listen, print "PORT p", accept one, read to EOF, print
                      "RECEIVED bytes seconds"
  send ADDR PORT N    connect, send N bytes, close, print "SENT n"
  connect ADDR PORT   connect (5 s), print "CONNECTED" or "FAILED why"
  echo ADDR PORT      connect, one echo round trip, print "ECHO 1"; then for each line on stdin,
                      another round trip with a 5 s timeout: "ECHO i" or "FAILED why"
  cutwatch            under forestcc-run on 2 hosts: rank 1 serves, rank 0 echoes once a
                      second for at most 120 s until a round trip fails: "LOST" or "NEVER LOST"
Every timeout only turns a hang into an answer; nothing here measures speed but `sink`.
"""
import os
import socket
import sys
import time


def listener(addr):
    s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
    s.bind((addr, 0))
    s.listen(4)
    print("PORT", s.getsockname()[1], flush=True)
    return s


def connect(addr, port, timeout=5.0):
    return socket.create_connection((addr, int(port)), timeout=timeout)


def round_trip(c, i):
    c.sendall(f"{i}\n".encode())
    data = b""
    while not data.endswith(b"\n"):
        chunk = c.recv(64)
        if not chunk:
            raise ConnectionError("closed by the peer")
        data += chunk
    assert int(data) == i


def serve_echo(s, idle=None):
    c, peer = s.accept()
    print("PEER", peer[0], flush=True)
    c.settimeout(idle)
    try:
        while True:
            data = c.recv(4096)
            if not data:
                break
            c.sendall(data)
    except OSError as exc:
        print("LOST", exc, flush=True)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        serve_echo(listener(args[0]))
    elif cmd == "sink":
        s = listener(args[0])
        c, _ = s.accept()
        total, start = 0, time.monotonic()
        while True:
            data = c.recv(1 << 20)
            if not data:
                break
            total += len(data)
        print("RECEIVED", total, time.monotonic() - start, flush=True)
    elif cmd == "send":
        c = connect(args[0], args[1], timeout=120)
        block = b"x" * (1 << 16)
        left = int(args[2])
        while left:
            left -= c.send(block[:min(left, len(block))])
        c.close()
        print("SENT", args[2], flush=True)
    elif cmd == "connect":
        try:
            connect(args[0], args[1])
            print("CONNECTED", flush=True)
        except OSError as exc:
            print("FAILED", exc, flush=True)
    elif cmd == "echo":
        c = connect(args[0], args[1])
        round_trip(c, 1)
        print("ECHO 1", flush=True)
        for i, _ in enumerate(sys.stdin, 2):
            try:
                round_trip(c, i)
                print("ECHO", i, flush=True)
            except OSError as exc:
                print("FAILED", exc or type(exc).__name__, flush=True)
                return
    elif cmd == "cutwatch":
        rank = int(os.environ["FORESTCC_RANK"])
        addrs = {line.split()[1]: line.split()[0] for line in open("/etc/hosts")
                 if line.strip() and ":" not in line.split()[0]}  # IPv4 names
        port = 45678
        if rank == 1:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addrs["h1"], port))
            s.listen(1)
            s.settimeout(120)  # rank 0 may be cut off before it connects
            try:
                serve_echo(s, idle=8)
            except OSError as exc:
                print("LOST", exc, flush=True)
            return
        deadline = time.monotonic() + 120
        try:
            while True:  # h1 may not listen yet
                try:
                    c = connect(addrs["h1"], port)
                    break
                except ConnectionRefusedError:
                    time.sleep(0.1)
            i = 0
            while time.monotonic() < deadline:
                i += 1
                round_trip(c, i)
                time.sleep(0.2)
            print("NEVER LOST", flush=True)
        except OSError as exc:
            print("LOST", exc or type(exc).__name__, flush=True)
    else:
        sys.exit(f"unknown probe {cmd}")


main()
