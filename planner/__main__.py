"""`python -m planner` runs the megaplan command line."""

from planner.cli import main

main()
