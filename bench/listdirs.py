#!/usr/bin/env python3
"""Lists every directory under ROOT with two threads, ROUNDS times, and
prints the entries listed per second: by name alone (MODE names, as ls
and find do) or with an lstat of each entry (MODE stat, as ls -l does).

    python3 bench/listdirs.py ROOT names|stat [ROUNDS=3]

Drop the caches first (echo 3 > /proc/sys/vm/drop_caches) to start cold.
"""
import os
import sys
import threading
import time

root, mode = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
dirs = [os.path.join(root, d) for d in sorted(os.listdir(root))]


def work(ds, out):
    n = 0
    for _ in range(rounds):
        for d in ds:
            if mode == "names":
                n += len(os.listdir(d))
            else:
                for e in os.scandir(d):
                    e.stat(follow_symlinks=False)
                    n += 1
    out.append(n)


outs = []
threads = [threading.Thread(target=work, args=(dirs[i::2], outs)) for i in range(2)]
t0 = time.time()
for t in threads:
    t.start()
for t in threads:
    t.join()
print(mode, round(sum(outs) / (time.time() - t0)), "entries/s")
