"""metrics.jsonl as the tests read it: points(path) -> {(key, step): [(value, time) of every record that
holds it, in file order]} (null values skipped). Its readers keep the last; last(path) gives that."""
import json


def points(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        for k, v in r.items():
            if k not in ("step", "time") and v is not None:
                out.setdefault((k, r["step"]), []).append((v, r["time"]))
    return out


def last(path):
    return {k: v[-1][0] for k, v in points(path).items()}
