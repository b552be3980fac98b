"""The pieces of main, the whole study in one command (``pipeline/main.py``: its options, their
checks, and ``run``).

``presets`` (which runs each preset makes); ``variants`` (one data setting's training runs, their
options and names); ``steps`` (launching a step through ``mlflow run``, or reusing a finished
run with the same inputs); ``conclusion`` (the steps table, the champion, the tags and the
report's Conclusion).
"""
