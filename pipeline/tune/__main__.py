"""``python -m pipeline.tune``: the tune command (pipeline/tune/command.py)."""

from pipeline.tune.command import main

if __name__ == "__main__":
    main()
