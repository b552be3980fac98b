"""``python -m pipeline.study``: the study command (pipeline/study/command.py)."""

from pipeline.study.command import main

if __name__ == "__main__":
    main()
