"""Per-call time of a reused WelchPeaks, this tree against the code at another commit, in one process.

The old tree is exported beside this one as the package ``welchpeaks_<rev>`` by
``bash docs/bench/export_tree.sh <rev> /tmp/oldwp`` (imports renamed). Both executors are built with the same
parameters, warmed up, then timed round robin, cell by cell (each round calls both once; half
the rounds call the old one first, and the executors are built twice, each tree first once),
for ``--repeats`` rounds in all; medians with min-max, and the ratio new / old per cell.

Both trees read one cost model: ``--cache DIR`` (a cache measured once, e.g. by
``WELCHPEAKS_CACHE_DIR=DIR welchpeaks calibrate --quick``; the file's form and key are the same in
both trees), copied to a private directory per tree (removed at the end) so that neither sees the
corrections the other writes back from its observed calls. A tree's own corrections can still
move its choice during the run; an ``auto`` cell is compared only where both trees ran the same
execution; a cell where they did not says so (``same_execution: false``) and its ratio
compares two executions, not two trees.

    bash docs/bench/export_tree.sh 7cb5f58 /tmp/oldwp
    WELCHPEAKS_CACHE_DIR=/tmp/wp-model welchpeaks calibrate --quick
    PYTHONPATH=/tmp/oldwp python docs/bench/overhead_vs.py --rev 7cb5f58 --cache /tmp/wp-model \
        --json docs/bench/overhead-vs-7cb5f58.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import tempfile
import warnings

import numpy as np

import welchpeaks
from welchpeaks.machine import machine_info
from welchpeaks.timing import round_robin, summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", required=True, help="the commit exported by docs/bench/export_tree.sh")
    ap.add_argument("--repeats", type=int, default=201)
    ap.add_argument("--json", default=None)
    ap.add_argument("--cache", required=True,
                    help="a cost-model cache directory both trees read (welchpeaks calibrate --quick writes one)")
    args = ap.parse_args()
    if not os.path.isdir(args.cache) or not any(name.startswith("cost-") for name in os.listdir(args.cache)):
        ap.error(f"--cache {args.cache}: no cost model there; run WELCHPEAKS_CACHE_DIR={args.cache} "
                 "welchpeaks calibrate --quick first")
    warnings.simplefilter("ignore")
    rev = args.rev
    old = importlib.import_module(f"welchpeaks_{rev}")
    cells = []
    for strategy in ("auto", "fused-cpu"):
        for batch in (32, 8192):
            for mode in ("peaks", "bins"):
                cells.append((strategy, batch, mode))
    out = []
    private = tempfile.mkdtemp(prefix="wp-overhead-")
    for tag in ("new", rev):
        shutil.copytree(args.cache, os.path.join(private, tag), ignore=shutil.ignore_patterns("*.lock"))
    for strategy, batch, mode in cells:
        x = np.random.default_rng(batch).standard_normal((batch, 384)).astype(np.float32)
        opts = dict(n_fft=256, k=16, segments=2, mode=mode, strategy=strategy)
        samples: dict[str, list[float]] = {"new": [], rev: []}
        runs = {}
        # Twice, with fresh executors built in the other order: where an executor's scratch lands
        # in memory moves its time by a few percent (the one built second ran faster here), so
        # each tree is built first once. Within a pass the two alternate which is called first.
        for order in ((("new", welchpeaks), (rev, old)), ((rev, old), ("new", welchpeaks))):
            rows = {}
            for tag, mod in order:
                os.environ["WELCHPEAKS_CACHE_DIR"] = os.path.join(private, tag)
                wp = mod.WelchPeaks(**opts)
                wp(x)
                rows[tag] = lambda wp=wp, x=x: wp(x)
                runs[tag] = wp.strategy
            n = args.repeats // 4 + 1
            for timed in (round_robin(rows, n, warmup=5), round_robin(dict(reversed(list(rows.items()))), n, warmup=5)):
                for tag in samples:
                    samples[tag] += timed[tag]
        new, ref = summary(samples["new"]), summary(samples[rev])
        base = f"{strategy} b{batch} {mode}"
        same = runs["new"] == runs[rev]
        out.append({"strategy": strategy, "batch": batch, "mode": mode, "runs": runs["new"],
                    "runs_old": runs[rev], "same_execution": same, "new": new, "old": ref,
                    "ratio_new_over_old": new["median_ms"] / ref["median_ms"]})
        print(f"{base:28s} new {new['median_ms']:8.4f} ms ({new['min_ms']:.4f}-{new['max_ms']:.4f})  "
              f"{rev} {ref['median_ms']:8.4f} ms ({ref['min_ms']:.4f}-{ref['max_ms']:.4f})  "
              f"ratio {new['median_ms'] / ref['median_ms']:.3f}  [{runs['new']}"
              + ("]" if same else f" vs {runs[rev]}: different executions]"))
    shutil.rmtree(private, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine_info(), "old": rev, "repeats": args.repeats, "cells": out}, fh, indent=1)


if __name__ == "__main__":
    main()
