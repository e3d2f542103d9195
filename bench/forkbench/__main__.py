"""python3 -m forkbench: make bench (see cli)."""
from .cli import main

main()
