#!/usr/bin/env python3
"""Independent reference for the sampler tests: weighted_mtp's selection (docs/data.md) written in Python as
weighted_mtp does it (global `random` seeded once, dict order = problem order), except that
length-balanced labels are visited in sorted order (weighted_mtp's set order was hash-seed
dependent). Usage: reference_sampler.py IN.json OUT.json
IN: {"problems": [{"id", "difficulty" (int|null), "correct", "incorrect", "correct_lengths",
     "incorrect_lengths"}], "mode": "difficulty"|"length_balanced", "bins": [[lo, hi], ...],
     "weights": [...], "length_bins": [...], "n_samples": int, "max_pairs": int (0 = none), "seed": int}
OUT: [[correct, incorrect, problem_row], ...]
"""
import json
import random
import sys


def unique_pairs(problems, bins, weights, n_samples, max_pairs, seed):
    random.seed(seed)
    names = ["bin%d" % b for b in range(len(bins))]
    bin_range = dict(zip(names, bins))
    bin_weight = dict(zip(names, weights))
    bin_problems = {name: [] for name in names}
    for row, p in enumerate(problems):
        if not p["correct"] or not p["incorrect"] or p["difficulty"] is None:
            continue
        for name in names:
            lo, hi = bin_range[name]
            if lo <= p["difficulty"] <= hi:
                bin_problems[name].append(row)
                break
    bin_pairs = {}
    for name in names:
        pairs = []
        for row in bin_problems[name]:
            c = list(problems[row]["correct"])
            i = list(problems[row]["incorrect"])
            random.shuffle(c)
            random.shuffle(i)
            n = min(len(c), len(i))
            if max_pairs:
                n = min(n, max_pairs)
            pairs += [[c[k], i[k], row] for k in range(n)]
        bin_pairs[name] = pairs
    active = {k: bin_weight[k] for k in names if bin_weight[k] > 0 and bin_pairs[k]}
    total = sum(active.values())
    norm = {k: v / total for k, v in active.items()}
    targets = {k: int(n_samples * w) for k, w in norm.items()}
    remainder = n_samples - sum(targets.values())
    order = sorted(norm, key=lambda k: len(bin_pairs[k]), reverse=True)
    for k in range(remainder):
        targets[order[k % len(order)]] += 1
    selected = []
    for name in norm:
        p = bin_pairs[name]
        random.shuffle(p)
        selected += p[:min(targets[name], len(p))]
    random.shuffle(selected)
    if len(selected) < n_samples:
        raise SystemExit("not enough pairs")
    return selected[:n_samples]


def length_balanced(problems, bins, length_bins, n_samples, max_pairs, seed):
    random.seed(seed)

    def label(length):
        for k, edge in enumerate(length_bins):
            if length < edge:
                return k
        return len(length_bins)

    all_pairs = []
    for row, p in enumerate(problems):
        if not p["correct"] or not p["incorrect"]:
            continue
        d = p["difficulty"]
        if d is None or not any(lo <= d <= hi for lo, hi in bins):
            continue
        good, bad = {}, {}
        for idx, length in zip(p["correct"], p["correct_lengths"]):
            good.setdefault(label(length), []).append(idx)
        for idx, length in zip(p["incorrect"], p["incorrect_lengths"]):
            bad.setdefault(label(length), []).append(idx)
        mine = []
        for lab in sorted(set(good) & set(bad)):
            a, b = good[lab], bad[lab]
            random.shuffle(a)
            random.shuffle(b)
            mine += [[a[k], b[k], row] for k in range(min(len(a), len(b)))]
        if max_pairs and len(mine) > max_pairs:
            random.shuffle(mine)
            mine = mine[:max_pairs]
        all_pairs += mine
    random.shuffle(all_pairs)
    if len(all_pairs) < n_samples:
        raise SystemExit("not enough pairs")
    return all_pairs[:n_samples]


def main():
    spec = json.load(open(sys.argv[1]))
    if spec["mode"] == "difficulty":
        out = unique_pairs(spec["problems"], spec["bins"], spec["weights"], spec["n_samples"], spec["max_pairs"],
                           spec["seed"])
    else:
        out = length_balanced(spec["problems"], spec["bins"], spec["length_bins"], spec["n_samples"],
                              spec["max_pairs"], spec["seed"])
    json.dump(out, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
