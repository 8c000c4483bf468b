"""steady.py: runs taken in this machine's fast phase (tools/sim-validate, bench-anchors, bench-torch).

This VM has phases, a minute or two each, in which copies between its two cores run about ten times
slower while a core's own copies do not (a 2-rank ring all-reduce at 1 MiB: 40-70 us, then 500-1,200;
a 20-line producer/consumer of 256 KiB chunks through shared memory: 22-25 GB/s, then 2-5; memcpy on
one core unchanged). A run is kept when a probe (that ring) just before and just after it is within 2x
the fastest probe seen and faster than the same ring with both ranks on one core (which the phases do
not touch: 100-150 us; so a run that starts in a slow phase is not taken for the fast one). It has
phases too in which small ops alone are slow (the same ring at 8 B: 0.18-0.20 us, then 0.5 while 1 MiB
stays fast): a second probe, that ring at 8 B, must be within 1.5x of its fastest. Else the run waits
for the fast phase (probes every 10 s, up to `limit` seconds) and runs again; once that wait has run out,
a run that a probe finds slow is kept, and the header counts it. With a limit of 0 every run is taken as
it comes, unprobed.
"""
import os
import subprocess
import sys
import time


def bench_times(text):
    """zcoll-bench's table: {size in bytes: time in us}."""
    rows = {}
    for line in text.splitlines():
        cols = line.split()
        if cols and not line.startswith("#") and cols[0].isdigit():
            rows[int(cols[0])] = float(cols[4])
    return rows


class Steady:
    def __init__(self, bench, limit):
        self.cmd = [bench, "allreduce", "-p", "2", "-a", "ring", "-b", "1M", "-e", "1M", "-R", "1"]
        self.small = [bench, "allreduce", "-p", "2", "-a", "ring", "-b", "8", "-e", "8", "-n", "2000", "-R", "1"]
        self.on = limit > 0
        self.limit, self.best, self.best_small, self.slow, self.waited = limit, float("inf"), float("inf"), 0, 0.0
        self.kept_slow = 0  # runs taken in a slow phase, once the wait ran out
        if self.on:
            self.one_core = min(self.time(["taskset", "-c", str(min(os.sched_getaffinity(0)))] + self.cmd +
                                          ["--bind", "none"]) for _ in range(3))

    @staticmethod
    def time(cmd, size=1 << 20):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
        us = bench_times(out).get(size)
        if us is None:
            raise SystemExit(f"steady: no row in the probe's output:\n{out}")
        return us

    def fast(self):
        us, small = self.time(self.cmd), self.time(self.small, 8)
        self.best, self.best_small = min(self.best, us), min(self.best_small, small)
        return us <= 2 * self.best and us < self.one_core and small <= 1.5 * self.best_small

    def run(self, measure):
        """measure() in the fast phase (or, after `limit` seconds of slow probes, as it comes)."""
        if not self.on:
            return measure()
        deadline = time.monotonic() + self.limit
        while True:
            if self.fast():
                result = measure()
                if self.fast():
                    return result
            self.slow += 1
            if time.monotonic() > deadline:
                # Once is enough: a machine that never shows the fast phase is not waited for again.
                if self.limit > 0:
                    print(f"# still in a slow phase after {self.limit:.0f} s: kept a run measured in it, and no "
                          "more waiting in this run", file=sys.stderr)
                    self.limit = 0
                self.kept_slow += 1
                return measure()
            time.sleep(10)
            self.waited += 10

    def describe(self):
        """What the table's header says of it: "; ..." (empty when off)."""
        if not self.on:
            return ""
        return (f"; runs taken in the fast phase (probes: 2-rank ring at 1 MiB, fastest {self.best:.1f} us, "
                f"on one core {self.one_core:.1f} us; at 8 B, fastest {self.best_small:.2f} us; {self.slow} runs "
                f"redone or deferred, {self.waited:.0f} s waited" +
                (f"; {self.kept_slow} taken in a slow phase once the wait ran out" if self.kept_slow else "") + ")")
