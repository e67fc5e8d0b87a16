#!/usr/bin/env python3
"""Writes a C++ header holding one kernel file of ../../kernels (its prelude elem.cuh and its
#includes expanded, as src/backend/cuda/kernels/mod.rs does for NVRTC) inside `namespace NS`, the
entry points with C++ linkage; with --small0 the prelude's SMALL is 0, so every kernel takes its
64-bit index path.   gen.py NS FILE.cu OUT.h [--small0]"""
import os, sys

here = os.path.dirname(os.path.abspath(__file__))
kdir = os.path.join(here, "..", "..", "kernels")
ns, cu, out = sys.argv[1:4]
small0 = "--small0" in sys.argv[4:]


def expand(src):
    lines = []
    for line in src.splitlines():
        t = line.strip()
        if t.startswith('#include "'):
            lines.append(open(os.path.join(kdir, t[len('#include "'):-1])).read())
        else:
            lines.append(line)
    return "\n".join(lines)


prelude = open(os.path.join(kdir, "elem.cuh")).read()
if small0:
    prelude += "\n#undef SMALL\n#define SMALL 0LL\n"
src = prelude + "\n" + expand(open(os.path.join(kdir, cu)).read())
src = src.replace('extern "C" __global__ void ', "__global__ void ")
undef = "".join(f"#undef {m}\n" for m in
                ["GRID_STRIDE", "GRID_STRIDE_I", "SMALL", "BN_BLOCK", "BN_UNROLL",
                 "NHWC_THREADS", "WIDE_UNROLL", "DW_BLOCK", "DWN_THREADS"])
open(out, "w").write(undef + f"namespace {ns} {{\n{src}\n}}\n")
