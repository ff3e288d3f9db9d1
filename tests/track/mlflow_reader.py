"""What wmtp logged to MLflow, read back for the tests, and the checks the tests share.

  client_state(uri)  through MLflow's own client, MlflowClient(tracking_uri=uri): a real tracking
                     server (http://...) or wmtp's file store (file://...); every experiment and
                     every run with its info, params, tags and each metric's whole history
                     (get_metric_history: (timestamp, value, step) in the order the store returns)
  server_state(url)  the same shape from the stand-in server's /wmtp-test/state (fake_mlflow_server.py:
                     the failures a real server cannot be made to produce)
  check_points(run, jsonl, keep)   every (key, step) of metrics.jsonl is in the run exactly once,
                     steps increasing in the order logged, with the value and time of the record
                     that holds it: keep="last" (as metrics.jsonl's readers; what track-sync sends) or
                     "first" (live logging: a step recomputed after a resume is not sent again)
  check_params(run, config_toml)   params are the config flattened ("section.key"), same values
Runs and experiments are plain dicts; a run's info holds RunRecord's fields, status by name ("FINISHED").
"""
import json
import math
import os
import tomllib
import urllib.request

import metrics_jsonl


def client_state(uri):
    # MLflow 3 refuses the file store unless this is set (docs/tracking.md); wmtp writes one.
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exps, runs = {}, {}
    for e in client.search_experiments(view_type=ViewType.ALL):
        exps[e.experiment_id] = {"experiment_id": e.experiment_id, "name": e.name,
                                 "lifecycle_stage": e.lifecycle_stage, "artifact_location": e.artifact_location}
        for r in client.search_runs([e.experiment_id], run_view_type=ViewType.ALL, max_results=10000):
            i = r.info
            info = {k: getattr(i, k) for k in ("run_id", "experiment_id", "run_name", "status", "start_time",
                                               "end_time", "lifecycle_stage", "artifact_uri")}
            metrics = {k: [(m.timestamp, m.value, m.step) for m in client.get_metric_history(i.run_id, k)]
                       for k in r.data.metrics}
            runs[i.run_id] = {"experiment": e.experiment_id, "info": info, "metrics": metrics,
                              "params": dict(r.data.params), "tags": dict(r.data.tags)}
    return {"experiments": exps, "runs": runs}


def server_state(url):
    st = json.load(urllib.request.urlopen(url + "/wmtp-test/state"))
    runs = {}
    for rid, r in st["runs"].items():
        runs[rid] = {"experiment": r["info"]["experiment_id"], "info": r["info"], "params": r["params"],
                     "tags": r["tags"], "metrics": {k: [tuple(p) for p in v] for k, v in r["metrics"].items()}}
    return {"experiments": st["experiments"], "runs": runs, "log": st["log"]}


def check_points(run, jsonl, keep):
    want = {k: (v[-1] if keep == "last" else v[0]) for k, v in metrics_jsonl.points(jsonl).items()}
    got = {}
    for key, pts in run["metrics"].items():
        steps = [s for _, _, s in pts]
        assert steps == sorted(set(steps)), f"{key}: steps not strictly increasing in log order: {steps}"
        for ts, v, s in pts:
            got[(key, s)] = (ts, v)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    assert not missing, f"{len(missing)} points missing, e.g. {missing[:5]}"
    assert not extra, f"{len(extra)} points not in metrics.jsonl, e.g. {extra[:5]}"
    for k, (v, t) in want.items():
        ts, x = got[k]
        assert x == v, f"{k}: {x!r} != metrics.jsonl's {keep} value {v!r}"
        # wmtp rounds half away from zero (std::llround); Python's round() would take the even one
        assert ts == math.floor(t * 1000 + 0.5), f"{k}: timestamp {ts} != {keep} record's time {t}"
    return len(want)


def _flat(table, prefix=""):
    for k, v in table.items():
        key = prefix + k
        if isinstance(v, dict):
            yield from _flat(v, key + ".")
        else:
            yield key, v


def check_params(run, config_toml):
    want = dict(_flat(tomllib.loads(config_toml)))
    got = run["params"]
    assert set(got) == set(want), f"params differ: missing {set(want) - set(got)}, extra {set(got) - set(want)}"
    for k, v in want.items():
        text = got[k]
        back = text if isinstance(v, str) else tomllib.loads("v = " + text)["v"]
        same = (math.isclose(back, v, rel_tol=0, abs_tol=0) if isinstance(v, float) else back == v)
        assert same, f"param {k}: {text!r} does not read back to {v!r}"
    return len(want)
