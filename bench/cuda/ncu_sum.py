#!/usr/bin/env python3
"""Sum an `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum`
log by kernel: calls, total and mean time, share, and DRAM read rate.
ncu runs kernels one at a time with cold caches, so small kernels look
dearer than inside a graph; the ranking is what it is for."""
import collections
import csv
import sys

rows = list(csv.reader(open(sys.argv[1])))
hdr = None
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for r in rows:
    if 'Kernel Name' in r:
        hdr = r
        continue
    if not hdr or len(r) != len(hdr):
        continue
    k = dict(zip(hdr, r))
    name = k['Kernel Name'][:60]
    v = float(k['Metric Value'].replace(',', ''))
    if k['Metric Name'] == 'gpu__time_duration.sum':
        agg[name][0] += 1
        agg[name][1] += v
    else:
        agg[name][2] += v
tot = sum(v[1] for v in agg.values()) or 1
for n, (calls, ns, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{n:60s} n={calls:5d} {ns/1e3:9.1f}us {100*ns/tot:5.1f}% avg {ns/calls/1e3:7.2f}us {b/max(ns,1):7.1f}GB/s")
print(f"total {tot/1e3:.1f} us")
