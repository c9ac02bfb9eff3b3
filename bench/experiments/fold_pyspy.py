"""Folds a py-spy raw profile: self and inclusive sample counts of busy frames (idle waits left out).
Args: profile_file."""
import collections
import re
import sys

path = sys.argv[1]; depth_filter = sys.argv[2] if len(sys.argv) > 2 else None
self_c = collections.Counter(); incl = collections.Counter(); total = 0; idle = 0
for line in open(path):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); frames = stack.split(";")
    if "select (selectors.py" in frames[-1] or "EpollSelector" in frames[-1] or frames[-1].startswith("Thread.run") or "wait (threading" in stack or "_poll" in frames[-1]:
        idle += n; continue
    total += n
    self_c[frames[-1]] += n
    for f in set(frames): incl[re.sub(r":\d+\)", ")", f)] += n
print("busy samples", total, "idle", idle)
print("-- self"); [print(f"{c:6d} {f}") for f, c in self_c.most_common(25)]
print("-- inclusive"); [print(f"{c:6d} {f}") for f, c in incl.most_common(45)]
