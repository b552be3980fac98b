"""MLflow glue, one module per job.

``runs`` opens and closes a step's run; ``guard`` wraps each entry point's command; ``errors``
says which errors are bad input; ``params`` spells and logs parameters; ``artifacts`` logs the
dataset, the label-noise mask and files; ``processes`` tells which process owns a RUNNING run;
``resume_lock`` lets one ``--resume`` at a time reopen a run; ``stores`` checks the stores answer.
"""
