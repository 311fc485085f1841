"""``python -m portqueue.cli``: the console script without its wrapper."""

from portqueue.cli import main

main()
