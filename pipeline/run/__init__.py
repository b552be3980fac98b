"""One training run under MLflow, what train_static, train_dynamic and tune's trials share.

``request`` (the ``TrainingRequest`` both training entry points build, and ``run_training``);
``plan`` (growth and curriculum as a ``TrainingPlan``; the growth options); ``length`` (how
long a run trains: epochs, or a FLOPs or seconds budget resolved to them); ``session`` (the
run's options and size limits, training inside the MLflow run and its logged artifacts);
``resume`` (the checks that a resumed run is the same run, its last checkpoint); ``outcome`` (what a finished run reports); ``exit_thresholds`` (a trained model's
early-exit thresholds); ``logged_model`` (the MLflow Model and the registry's champion);
``plots`` (the figures of one run).
"""
