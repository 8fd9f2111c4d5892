"""`python -m planner` and the `megaplan` script: the megaplan command line. ``megaplan --version``
alone is answered here, before click and the commands load (as click's ``version_option`` says it)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from planner import __version__

        print(f"megaplan, version {__version__}")
        return
    from planner.cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
