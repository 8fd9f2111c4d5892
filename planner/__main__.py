"""`python -m planner` and the `megaplan` script: the megaplan command line. ``megaplan --version``
alone is answered here, before click and the commands load (as click's ``version_option`` says it)."""

from __future__ import annotations

import os
import sys

# numpy's OpenBLAS starts a thread per core when numpy is imported, each spinning a while: the planner does
# no large linear algebra (calibration's least squares are a few dozen unknowns, below OpenBLAS's threading
# sizes), so the command line runs it on one thread unless the user set it. Measured on 2 cores: numpy's
# import 115-190 ms of CPU with the threads, 68-90 ms without (python -c "import numpy", 5 processes each).
BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def main() -> None:
    for name, value in BLAS_THREADS.items():
        os.environ.setdefault(name, value)  # before numpy is imported: it reads it once, at its import
    if sys.argv[1:] == ["--version"]:
        from planner import __version__

        print(f"megaplan, version {__version__}")
        return
    from planner.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
