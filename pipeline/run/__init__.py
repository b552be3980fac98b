"""One training run under MLflow, what train_static, train_dynamic and tune's trials share.

``request`` (the ``TrainingRequest`` both training entry points build, and ``run_training``);
``plan`` (where growth and the data diet meet: one ``TrainingPlan``); ``length`` (how long a run
trains: what the budget package needs from MLflow and the training loop); ``session`` (the run's
options and size limits, and the pieces around ``fit``: the run opened, the state started or
resumed, epochs logged with checkpoints, the final artifacts); ``resume``
(the checks that a resumed run is the same run, its last checkpoint); ``outcome`` (what a
finished run reports); ``exit_thresholds`` (a trained model's early-exit thresholds);
``logged_model`` (the MLflow Model and the registry's champion); ``plots`` (the figures of one
run).
"""
