#!/usr/bin/env python3
"""Each kernel's code size in instructions (16 bytes each on sm_90), from
the .text sections of cubins: `nvcc -cubin` of the .cu files, e.g.

    for f in src/kernels/cuda/*.cu; do
        nvcc -std=c++17 -O3 -arch=sm_90a -I src -I include -cubin -o /tmp/$(basename $f .cu).cubin $f
    done
    python3 bench/cuda/kernel_sizes.py /tmp/*.cubin | sort -n | tail -30

A single-block kernel on the decode step's chain runs once a layer, after
~20 MB of weights went through L2: how much code it executes may be what
it waits on (ncu's no_instruction stalls say)."""
import re
import struct
import sys

for fn in sys.argv[1:]:
    d = open(fn, 'rb').read()
    if d[:4] != b'\x7fELF' or d[4] != 2:
        sys.exit('%s: not a 64-bit ELF cubin' % fn)
    shoff = struct.unpack_from('<Q', d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', d, 0x3A)
    secs = [struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * shentsize) for i in range(shnum)]
    strtab = secs[shstrndx][4]
    for s in secs:
        name = d[strtab + s[0]:d.index(b'\0', strtab + s[0])].decode()
        if name.startswith('.text.'):
            short = re.sub(r'_ZN\d+_GLOBAL__N__\w+?_cu_\w{8}\d+', '', name[6:])
            print('%6d %s' % (s[5] // 16, short[:100]))
