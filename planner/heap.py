"""The C heap a search allocates its arrays from: freed memory kept for the next array, not given back.

A search allocates and frees thousands of numpy arrays of 10 kB to a few MB. glibc's malloc serves a block above
its mmap threshold with a fresh mmap and unmaps it on free, and trims the heap's top above its trim threshold, so
the next array of that size touches new pages: each first touch is a minor page fault (the kernel zeroes a 4 kB
page). The GPT-3 175B / 64 A100 search took about 1,550 minor faults per search on glibc's defaults (rate12m,
`resource.getrusage(RUSAGE_SELF).ru_minflt` over 50 in-process searches) and about 1 with the settings below,
about 15 % of its CPU time (25-29 ms against 21-25 ms a search on this machine, same minute). mallopt(3):
M_MMAP_THRESHOLD fixed (glibc's dynamic threshold only rises once a mapped block is freed), M_TRIM_THRESHOLD and
M_TOP_PAD so the heap keeps what a search freed. What is kept is bounded: blocks above ``MMAP_THRESHOLD_BYTES``
(DeepSeek-V3's 65 MiB grid columns) are still mapped and unmapped, and the heap keeps at most
``TRIM_THRESHOLD_BYTES`` free at its top. Numbers do not change: only where the bytes come from.
"""

MMAP_THRESHOLD_BYTES = 4 << 20  # blocks of more are mapped (and unmapped on free) as before
TOP_PAD_BYTES = 16 << 20  # the heap grows by this much more than asked, so it grows rarely
TRIM_THRESHOLD_BYTES = 32 << 20  # free memory at the heap's top kept up to this (glibc's default: 128 kB, dynamic)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # malloc.h


def keep_freed_memory() -> bool:
    """Sets glibc malloc's thresholds (``mallopt``) so freed arrays are reused; True where it did. Elsewhere (macOS,
    musl: no ``mallopt``) nothing is changed and it returns False."""
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    settings = (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES),
        (_M_TOP_PAD, TOP_PAD_BYTES),
    )
    return all(mallopt(option, value) == 1 for option, value in settings)
