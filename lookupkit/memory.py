"""Peak memory of this process, measured the same way everywhere.

VmHWM (the high-water resident set of this process's own address space) rather than getrusage's
ru_maxrss: Linux carries the parent's peak across fork+exec into ru_maxrss, which overstates a small
child started by a large parent.
"""

from __future__ import annotations

import resource
import sys


def peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak if sys.platform == "darwin" else peak * 1024
