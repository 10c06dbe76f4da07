#!/usr/bin/env python3
"""The decode step's time a layer, launch by launch, from a LILAC_CUDA_TRACE
table (bench/cuda/trace-variants.sh writes them: OUT/trace-N.txt).

The step's chain is its main-path launches (the table's b column blank) in
order of start: each one's end minus the end before it is the time the step
took while that launch was last, whatever it waited for (a join with the
second branch, the launch before it, its own wait). Those advances are
averaged over the layers of each kind (DeltaNet: layers with a `deltanet`
launch; attention: the others), position by position, so that the table
reads as one layer's budget. The second branch's launches are listed with
their durations, for what the joins wait on.

    python3 bench/cuda/trace_budget.py OUT/trace-1.txt [OUT/trace-2.txt ...]
"""
import collections
import re
import sys

ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)?\s+(\S+)\s+(a?)\s*(\S+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+(?:([\d.]+)\s+\(([\d.]+)\)|-)\s+(-?[\d.]+)")


def rows_of(path):
    out = []
    for line in open(path):
        m = ROW.match(line)
        if not m or m.group(2) is None:
            continue
        out.append({
            "layer": int(m.group(2)), "op": m.group(3), "aux": m.group(4) == "a", "kernel": m.group(5),
            "blocks": int(m.group(6)), "start": float(m.group(7)), "dur": float(m.group(8)),
            "wait": float(m.group(9)) if m.group(9) else 0.0,
        })
    return out


def budget(path):
    rows = rows_of(path)
    if not rows:
        print(f"{path}: no trace rows")
        return
    layers = collections.defaultdict(list)
    for r in rows:
        layers[r["layer"]].append(r)
    main = sorted((r for r in rows if not r["aux"]), key=lambda r: r["start"])
    end_prev = None
    for r in main:
        end = r["start"] + r["dur"]
        r["adv"] = 0.0 if end_prev is None else max(0.0, end - end_prev)
        end_prev = end if end_prev is None else max(end_prev, end)
    kinds = collections.defaultdict(list)
    for il, rs in sorted(layers.items()):
        kind = "DeltaNet" if any(r["op"] == "deltanet" for r in rs) else "attention"
        kinds[kind].append(il)
    total = 0.0
    print(f"== {path}")
    for kind, ils in kinds.items():
        pos = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0, None])
        aux = collections.defaultdict(lambda: [0.0, 0, None])
        for il in ils:
            rs = sorted(layers[il], key=lambda r: r["start"])
            i = 0
            for r in rs:
                if r["aux"]:
                    a = aux[(r["op"], r["blocks"])]
                    a[0] += r["dur"]
                    a[1] += 1
                    continue
                p = pos[i]
                p[0] += r["adv"]
                p[1] += r["dur"] - r["wait"]
                p[2] += r["wait"]
                p[3] += 1
                p[4] = (r["op"], r["kernel"], r["blocks"])
                i += 1
        n = len(ils)
        layer_us = sum(p[0] for p in pos.values()) / n
        total += layer_us * n
        print(f"{kind}: {n} layers, {layer_us:.1f} us a layer on the chain")
        print(f"  {'op':16s} {'kernel':22s} {'blocks':>6s} {'advance':>8s} {'after wait':>10s} {'wait':>6s}")
        for i in sorted(pos):
            a, d, w, c, (op, kern, b) = pos[i]
            print(f"  {op:16s} {kern:22s} {b:6d} {a / c:8.2f} {d / c:10.2f} {w / c:6.2f}")
        for (op, b), (d, c, _) in sorted(aux.items()):
            print(f"  second branch: {op} ({b} blocks) {d / c:.2f} us")
    print(f"layers' chain {total:.0f} us of the step")


for path in sys.argv[1:]:
    budget(path)
