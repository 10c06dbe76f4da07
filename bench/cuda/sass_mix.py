#!/usr/bin/env python3
"""A kernel's instruction mix from ncu's source page (ncu --page source --csv --print-source sass):
instructions executed (warp level) by opcode, with their share and the stall samples on them, and the
heaviest single instructions. One table per kernel in the file.

    sass_mix.py FILE.csv [TOP]"""
import csv
import sys
from collections import defaultdict


def kernels(path):
    """(name, header, rows) for each kernel block of the CSV."""
    name, header, rows = None, None, []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "Kernel Name":
                if header:
                    yield name, header, rows
                name, header, rows = rec[1] if len(rec) > 1 else "?", None, []
            elif rec[0] == "Address":
                header = rec
            elif header:
                rows.append(rec)
    if header:
        yield name, header, rows


def num(s):
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12
    for name, h, rows in kernels(path):
        ci, cs = h.index("Instructions Executed"), h.index("Warp Stall Sampling (All Samples)")
        by = defaultdict(lambda: [0.0, 0.0])
        tot_i = tot_s = 0.0
        for r in rows:
            op = r[1].split()
            if not op:
                continue
            o = op[1] if op[0].startswith("@") and len(op) > 1 else op[0]
            o = o.split(".")[0]
            by[o][0] += num(r[ci])
            by[o][1] += num(r[cs])
            tot_i += num(r[ci])
            tot_s += num(r[cs])
        print(f"== {name[:110]}\n   {tot_i:.0f} warp instructions, {tot_s:.0f} stall samples")
        for o, (i, s) in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"   {o:10s} {i:12.0f} {100 * i / max(tot_i, 1):5.1f} %  stalls {100 * s / max(tot_s, 1):5.1f} %")
        heavy = sorted(rows, key=lambda r: -num(r[cs]))[:top]
        print("   heaviest (stall samples):")
        for r in heavy:
            print(f"   {num(r[cs]):8.0f} {num(r[ci]):10.0f}  {r[1].strip()[:80]}")


if __name__ == "__main__":
    main()
