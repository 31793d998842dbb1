"""``python -m mdbench``: the ``mdbench`` command line (same as the installed ``mdbench`` script)."""

from mdbench.cli import main

if __name__ == "__main__":
    main()
