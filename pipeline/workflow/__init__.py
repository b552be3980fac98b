"""The pieces of main, the whole study in one command (``pipeline/main.py``: its options, their
checks, and ``run``).

``presets`` (the study each preset runs); ``studies`` (one data setting's ``study`` steps, one a
growth schedule, and the training runs their cells made); ``steps`` (launching a step through
``mlflow run``, or reusing a finished run with the same inputs); ``conclusion`` (the steps table,
the champion, the tags and the report's Conclusion).
"""
