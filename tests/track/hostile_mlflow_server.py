"""Two more behaviours around fake_mlflow_server.py's stand-in MLflow server, for the reliability tests:

  python3 hostile_mlflow_server.py --port-file F --mode flood|auth [--flood-mib N]

  flood  every API request is answered 200 with an endless body of N MiB (default 2048), declared by a
         Content-Length of 1e11 on GETs and not declared at all (the connection's end ends it) on POSTs;
         the bytes each connection took before the client dropped it are recorded
  auth   fake_mlflow_server's normal mode, recording each request's Authorization header
GET /wmtp-test/log returns what was recorded: {"sent": [bytes per flood answer], "auth": [headers]}.
"""
import argparse
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_mlflow_server as fake  # noqa: E402

RECORD = {"sent": [], "auth": []}
LOCK = threading.Lock()


def make_handler(mode, flood_bytes):
    base = fake.make_handler(fake.Store(7), "normal")

    class Handler(base):
        def handle_api(self, method):
            if self.path == "/wmtp-test/log":
                with LOCK:
                    return self.reply(200, RECORD)
            with LOCK:
                RECORD["auth"].append(self.headers.get("Authorization"))
            if mode == "auth":
                return super().handle_api(method)
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if method == "GET":
                self.send_header("Content-Length", str(10 ** 11))
            else:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            chunk, sent = b'{"x": "' + b"x" * (1 << 20), 0
            try:
                while sent < flood_bytes:
                    self.wfile.write(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the client dropped the connection
            with LOCK:
                RECORD["sent"].append(sent)
            self.close_connection = True

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", required=True, choices=["flood", "auth"])
    ap.add_argument("--flood-mib", type=int, default=2048)
    a = ap.parse_args()
    fake.serve(make_handler(a.mode, a.flood_mib << 20), a.port_file)


if __name__ == "__main__":
    main()
