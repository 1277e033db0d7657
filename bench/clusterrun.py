"""One run of bench/cluster.sh: readers on several sluice mounts of one
cluster, each a fio process as its host's uid, started together, whose
jobs read in the phases where their host is busy; the hosts' /metrics
sampled every second. Writes the run's figures as JSON.

usage: clusterrun.py SPEC.json OUT.json

SPEC: {"phase_s": 4, "cap": bytes a second, "phases": [[host, ...], ...],
       "hosts": [{"mnt": dir, "metrics": "host:port", "uid": n, "file":
       path, "rate": bytes a second or 0}], "group": name}
A host reads in phase k where k's list names it; "rate" paces its fio.
OUT: per second the aggregate as a fraction of the cap ("seconds"); per
phase the bytes fio read over the phase as a fraction of the cap
("phases"); per host its lease requests a second and the longest read
("hosts"); over the run the median and longest read ("p50_us", "max_us").
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request


def scrape(addr, group):
    """The group's application read bytes and the host's lease requests."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=2) as r:
        text = r.read().decode()
    app, reqs = 0, 0
    for line in text.splitlines():
        if line.startswith("sluice_app_bytes_total{") and f'group="{group}"' in line and 'direction="read"' in line:
            app = float(line.rsplit(" ", 1)[1])
        elif line.startswith("sluice_cluster_requests_total{"):
            reqs += float(line.rsplit(" ", 1)[1])
    return app, reqs


def fio_args(spec, i, h):
    """fio's command line for host i: one job per phase it reads in, each
    at its own offset of the file, so no phase reads what sluice cached."""
    ps = spec["phase_s"]
    args = ["setpriv", f"--reuid={h['uid']}", f"--regid={h['uid']}", "--clear-groups",
            "fio", "--output-format=json", f"--filename={h['file']}", "--rw=read", "--bs=64k",
            "--direct=1", "--ioengine=psync", "--time_based", f"--runtime={ps}", "--size=1g"]
    if h.get("rate"):
        args.append(f"--rate={h['rate']}")
    n = 0
    for k, busy in enumerate(spec["phases"]):
        if i in busy:
            args += [f"--name=p{k}", f"--startdelay={k * ps}", f"--offset={k}g"]
            n += 1
    return args if n else None


def main():
    spec = json.load(open(sys.argv[1]))
    hosts, ps, cap, group = spec["hosts"], spec["phase_s"], spec["cap"], spec["group"]
    length = ps * len(spec["phases"])
    procs = []
    for i, h in enumerate(hosts):
        a = fio_args(spec, i, h)
        procs.append(subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/") if a else None)
    t0 = time.monotonic()
    samples = []  # (t, [(app, reqs) per host])

    def sample():
        out = [None] * len(hosts)

        def one(i):
            out[i] = scrape(hosts[i]["metrics"], group)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(len(hosts))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        samples.append((time.monotonic() - t0, out))

    sample()
    for k in range(1, length + 1):
        time.sleep(max(0, t0 + k - time.monotonic()))
        sample()
    res = {"seconds": [], "phases": [0.0] * len(spec["phases"]), "hosts": []}
    for (ta, a), (tb, b) in zip(samples, samples[1:]):
        res["seconds"].append(sum(y[0] - x[0] for x, y in zip(a, b)) / (tb - ta) / cap)
    lat = []
    for i, p in enumerate(procs):
        longest = 0
        if p is not None:
            out, err = p.communicate()
            if p.returncode != 0:
                sys.exit(f"fio of host {i} failed ({p.returncode}): {err.decode()}")
            text = out.decode()
            d = json.loads(text[text.index("{"):])
            for j in d["jobs"]:
                k = int(j["jobname"][1:])
                r = j["read"]
                res["phases"][k] += r["io_bytes"] / ps / cap
                longest = max(longest, r["clat_ns"]["max"] / 1e3)
                if r["total_ios"]:
                    lat.append((r["clat_ns"]["percentile"]["50.000000"] / 1e3, r["total_ios"]))
        dt = samples[-1][0] - samples[0][0]
        res["hosts"].append({"trips_per_s": (samples[-1][1][i][1] - samples[0][1][i][1]) / dt, "max_us": longest})
    # The run's median read, weighting each job's median by its reads.
    lat.sort()
    half, n = sum(c for _, c in lat) / 2, 0
    res["p50_us"] = 0
    for v, c in lat:
        n += c
        if n >= half:
            res["p50_us"] = v
            break
    res["max_us"] = max((h["max_us"] for h in res["hosts"]), default=0)
    json.dump(res, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
