"""Inclusive and self sample shares by function from py-spy --format raw (idle excluded)."""
import sys
from collections import Counter


def name_of(frame: str) -> str:
    """function (file) of a py-spy frame "function (path:line)"."""
    if " (" not in frame:
        return frame
    function, _, where = frame.partition(" (")
    return f"{function} ({where.split(':')[0].split('/')[-1]})"


incl: Counter[str] = Counter()
selfc: Counter[str] = Counter()
total = idle = 0
with open(sys.argv[1]) as lines:
    for line in lines:
        stack, _, count = line.rstrip().rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        leaf = frames[-1]
        waiting = "select (selectors.py" in leaf or "epoll" in leaf
        if waiting or "threading.py" in frames[0] or "Thread" in frames[0]:
            idle += n
            continue
        total += n
        names = [name_of(f) for f in frames]
        for name in set(names):
            incl[name] += n
        selfc[names[-1]] += n
print("busy samples", total, "idle", idle)
print("--- inclusive")
for name, n in incl.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60):
    print(f"{100 * n / total:5.1f}% {name}")
print("--- self")
for name, n in selfc.most_common(40):
    print(f"{100 * n / total:5.1f}% {name}")
