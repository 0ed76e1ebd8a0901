"""`python -m autotune.cli ...` runs the command line."""
from autotune.cli.app import main

if __name__ == "__main__":
    main()
