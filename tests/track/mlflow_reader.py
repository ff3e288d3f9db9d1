"""Independent readers of what wmtp logged to MLflow, for the tests, and the checks both share.

  file_store(root)   MLflow's file store read the way mlflow/store/tracking/file_store.py reads it:
                     meta.yaml with yaml.safe_load, metrics/<key> lines "timestamp value step",
                     params/<key> and tags/<key> file contents (keys with '/' are subdirectories)
  server_state(url)  the same shape from the stand-in server's /wmtp-test/state
  check_points(run, jsonl, keep)   every (key, step) of metrics.jsonl is in the run exactly once,
                     steps increasing in the order logged, with the value and time of the record
                     that holds it: keep="last" (as metrics.jsonl's readers; what track-sync sends) or
                     "first" (live logging: a step recomputed after a resume is not sent again)
  check_params(run, config_toml)   params are the config flattened ("section.key"), same values
"""
import json
import math
import os
import tomllib
import urllib.request

import yaml

import metrics_jsonl


def _read(path):
    with open(path) as f:
        return f.read()


def _files(d):
    out = {}
    for base, _, names in os.walk(d):
        for n in names:
            p = os.path.join(base, n)
            out[os.path.relpath(p, d)] = _read(p)
    return out


def file_store(root):
    exps, runs = {}, {}
    for e in sorted(os.listdir(root)):
        if e in (".trash", "models") or not os.path.isdir(os.path.join(root, e)):
            continue
        meta = yaml.safe_load(_read(os.path.join(root, e, "meta.yaml")))
        assert meta["experiment_id"] == e, f"experiment {e}: meta.yaml says {meta['experiment_id']!r}"
        exps[e] = meta
        for r in sorted(os.listdir(os.path.join(root, e))):
            rdir = os.path.join(root, e, r)
            if r == "tags" or not os.path.isfile(os.path.join(rdir, "meta.yaml")):
                continue
            info = yaml.safe_load(_read(os.path.join(rdir, "meta.yaml")))
            metrics = {}
            for key, text in _files(os.path.join(rdir, "metrics")).items():
                pts = []
                for line in text.splitlines():
                    parts = line.split(" ")
                    assert len(parts) == 3, f"{key}: malformed line {line!r}"
                    pts.append((int(parts[0]), float(parts[1]), int(parts[2])))
                metrics[key] = pts
            runs[r] = {"experiment": e, "info": info, "metrics": metrics,
                       "params": _files(os.path.join(rdir, "params")), "tags": _files(os.path.join(rdir, "tags"))}
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
        assert ts == round(t * 1000), f"{k}: timestamp {ts} != {keep} record's time {t}"
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
