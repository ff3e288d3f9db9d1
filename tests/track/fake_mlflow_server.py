"""A stand-in MLflow tracking server for the tests (a real one cannot be installed here): the REST
API 2.0 endpoints wmtp uses, with the request checks, limits and error codes of MLflow's REST API
documentation (docs/api_reference/source/rest-api.rst) and the HTTP status MLflow maps each code to.

  python3 fake_mlflow_server.py --port-file F [--mode normal|flaky|refuse|slow] [--page-size N]

  normal  every documented endpoint
  flaky   every 3rd runs/log-batch that carries metrics writes the first half of them and then answers
          503 TEMPORARILY_UNAVAILABLE (the docs allow partial writes on error); one request in five, drawn
          from a seeded generator (not periodic, so no retry pattern can resonate with it), is 429
  refuse  403 PERMISSION_DENIED to everything
  slow    answers after 30 s
GET /wmtp-test/state returns everything stored and the request log (for the test's assertions).
"""
import argparse
import json
import random
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

STATUS = {"RESOURCE_DOES_NOT_EXIST": 404, "RESOURCE_ALREADY_EXISTS": 400, "INVALID_PARAMETER_VALUE": 400,
          "INVALID_STATE": 400, "PERMISSION_DENIED": 403, "TEMPORARILY_UNAVAILABLE": 503,
          "REQUEST_LIMIT_EXCEEDED": 429, "BAD_REQUEST": 400, "ENDPOINT_NOT_FOUND": 404}
RUN_STATUSES = ("RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED")


class ApiError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


class Store:
    def __init__(self, page_size):
        self.lock = threading.Lock()
        self.experiments = {"0": {"experiment_id": "0", "name": "Default", "lifecycle_stage": "active"}}
        self.runs = {}
        self.log = []  # (method, endpoint, http status)
        self.batches = 0
        self.requests = 0
        self.page_size = page_size
        self.rng = random.Random(1)

    def state(self):
        return {"experiments": self.experiments, "runs": self.runs, "log": self.log}


def need(body, key, kind=str):
    if key not in body or body[key] is None:
        raise ApiError("INVALID_PARAMETER_VALUE", f"Missing value for required parameter '{key}'.")
    if kind is str and not isinstance(body[key], str):
        raise ApiError("INVALID_PARAMETER_VALUE", f"Invalid value for parameter '{key}': expected a string")
    return body[key]


def check_key(key):
    if not isinstance(key, str) or not key or len(key) > 250:
        raise ApiError("INVALID_PARAMETER_VALUE", f"Invalid key {key!r}: 1 to 250 characters")


def run_of(store, run_id):
    run = store.runs.get(run_id)
    if run is None:
        raise ApiError("RESOURCE_DOES_NOT_EXIST", f"Run '{run_id}' not found")
    return run


def run_json(run):
    latest = {}
    for key, pts in run["metrics"].items():
        ts, v, s = max(pts, key=lambda p: (p[0], p[1]))  # latest timestamp, then the largest value
        latest[key] = {"key": key, "value": v, "timestamp": ts, "step": s}
    return {"info": run["info"], "data": {"metrics": list(latest.values()),
                                          "params": [{"key": k, "value": v} for k, v in run["params"].items()],
                                          "tags": [{"key": k, "value": v} for k, v in run["tags"].items()]}}


def get_by_name(store, q, body):
    name = need(q, "experiment_name")
    for e in store.experiments.values():
        if e["name"] == name:
            return {"experiment": e}
    raise ApiError("RESOURCE_DOES_NOT_EXIST", f"Could not find experiment with name '{name}'")


def create_experiment(store, q, body):
    name = need(body, "name")
    if not name:
        raise ApiError("INVALID_PARAMETER_VALUE", "Invalid experiment name: ''")
    if any(e["name"] == name for e in store.experiments.values()):
        raise ApiError("RESOURCE_ALREADY_EXISTS", f"Experiment '{name}' already exists.")
    eid = str(len(store.experiments) * 1000 + 17)
    store.experiments[eid] = {"experiment_id": eid, "name": name, "lifecycle_stage": "active"}
    return {"experiment_id": eid}


def create_run(store, q, body):
    eid = need(body, "experiment_id")
    if eid not in store.experiments:
        raise ApiError("RESOURCE_DOES_NOT_EXIST", f"No experiment with id {eid}")
    tags = {}
    for t in body.get("tags", []):
        check_key(t.get("key"))
        tags[t["key"]] = t.get("value", "")
    rid = uuid.uuid4().hex
    name = body.get("run_name") or tags.get("mlflow.runName", "")
    tags.setdefault("mlflow.runName", name)
    info = {"run_id": rid, "run_uuid": rid, "run_name": name, "experiment_id": eid, "status": "RUNNING",
            "start_time": int(body.get("start_time", 0)), "lifecycle_stage": "active"}
    store.runs[rid] = {"info": info, "params": {}, "tags": tags, "metrics": {}}
    return {"run": run_json(store.runs[rid])}


def get_run(store, q, body):
    return {"run": run_json(run_of(store, need(q, "run_id")))}


def log_batch(store, q, body, flaky):
    run = run_of(store, need(body, "run_id"))
    metrics, params, tags = body.get("metrics", []), body.get("params", []), body.get("tags", [])
    if len(metrics) > 1000 or len(params) > 100 or len(tags) > 100 or len(metrics) + len(params) + len(tags) > 1000:
        raise ApiError("INVALID_PARAMETER_VALUE", "A batch logging request can contain at most 1000 metrics, "
                       f"100 params, 100 tags; got {len(metrics)}, {len(params)}, {len(tags)}")
    for m in metrics:
        check_key(m.get("key"))
        for f in ("value", "timestamp"):
            if not isinstance(m.get(f), (int, float)) or isinstance(m.get(f), bool):
                raise ApiError("INVALID_PARAMETER_VALUE", f"Invalid value for metric '{m.get('key')}' field {f}")
        if "step" in m and not isinstance(m["step"], int):
            raise ApiError("INVALID_PARAMETER_VALUE", "metric step must be an integer")
    for p in params:
        check_key(p.get("key"))
        if not isinstance(p.get("value"), str) or len(p["value"]) > 6000:
            raise ApiError("INVALID_PARAMETER_VALUE", f"Param '{p.get('key')}' value must be a string of <= 6000")
        old = run["params"].get(p["key"])
        if old is not None and old != p["value"]:
            raise ApiError("INVALID_PARAMETER_VALUE", f"Changing param values is not allowed. Param with key="
                           f"'{p['key']}' was already logged with value='{old}'")
    for t in tags:
        check_key(t.get("key"))
    for p in params:
        run["params"][p["key"]] = p["value"]
    if metrics:
        store.batches += 1
    cut = len(metrics) // 2 if flaky and metrics and store.batches % 3 == 0 else None
    for m in metrics[:cut]:
        run["metrics"].setdefault(m["key"], []).append((m["timestamp"], float(m["value"]), m.get("step", 0)))
    if cut is not None:
        raise ApiError("TEMPORARILY_UNAVAILABLE", "the store is busy (the first half of the batch was written)")
    for t in tags:
        run["tags"][t["key"]] = t.get("value", "")
    return {}


def update_run(store, q, body):
    run = run_of(store, need(body, "run_id"))
    status = body.get("status")
    if status is not None and status not in RUN_STATUSES:
        raise ApiError("INVALID_PARAMETER_VALUE", f"Invalid run status {status!r}")
    if status:
        run["info"]["status"] = status
    if "end_time" in body:
        run["info"]["end_time"] = int(body["end_time"])
    if body.get("run_name"):
        run["info"]["run_name"] = body["run_name"]
    return {"run_info": run["info"]}


def get_history(store, q, body):
    run = run_of(store, need(q, "run_id"))
    pts = run["metrics"].get(need(q, "metric_key"), [])
    n = min(int(q.get("max_results", 25000)), store.page_size)
    start = int(q.get("page_token") or 0)
    page = pts[start:start + n]
    out = {"metrics": [{"key": q["metric_key"], "value": v, "timestamp": ts, "step": s} for ts, v, s in page]}
    if start + n < len(pts):
        out["next_page_token"] = str(start + n)
    return out


ROUTES = {("GET", "experiments/get-by-name"): get_by_name, ("POST", "experiments/create"): create_experiment,
          ("POST", "runs/create"): create_run, ("GET", "runs/get"): get_run, ("POST", "runs/log-batch"): log_batch,
          ("POST", "runs/update"): update_run, ("GET", "metrics/get-history"): get_history}


def make_handler(store, mode):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_api(self, method):
            url = urlparse(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if url.path == "/wmtp-test/state":
                with store.lock:
                    return self.reply(200, store.state())
            if mode == "slow":
                time.sleep(30)
            endpoint = url.path[len("/api/2.0/mlflow/"):] if url.path.startswith("/api/2.0/mlflow/") else None
            with store.lock:
                store.requests += 1
                try:
                    if mode == "refuse":
                        raise ApiError("PERMISSION_DENIED", "Permission denied")
                    if mode == "flaky" and store.rng.random() < 0.2:
                        raise ApiError("REQUEST_LIMIT_EXCEEDED", "Too many requests")
                    fn = ROUTES.get((method, endpoint))
                    if fn is None:
                        raise ApiError("ENDPOINT_NOT_FOUND", f"No endpoint {method} {url.path}")
                    q = {k: v[0] for k, v in parse_qs(url.query).items()}
                    body = {}
                    if method == "POST":
                        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                            raise ApiError("BAD_REQUEST", "Content-Type must be application/json")
                        body = json.loads(raw or b"{}")
                    out = fn(store, q, body, mode == "flaky") if fn is log_batch else fn(store, q, body)
                    store.log.append((method, endpoint, 200))
                    status, obj = 200, out
                except ApiError as e:
                    store.log.append((method, endpoint, STATUS[e.code]))
                    status, obj = STATUS[e.code], {"error_code": e.code, "message": e.message}
            self.reply(status, obj)

        def do_GET(self):
            self.handle_api("GET")

        def do_POST(self):
            self.handle_api("POST")

    return Handler


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", default="normal", choices=["normal", "flaky", "refuse", "slow"])
    ap.add_argument("--page-size", type=int, default=7)  # small: get-history pagination is exercised
    a = ap.parse_args()
    serve(make_handler(Store(a.page_size), a.mode), a.port_file)


def serve(handler, port_file):
    """Serves on a free port of 127.0.0.1, written to port_file once listening (renamed into place)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os
    os.rename(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
