"""Datasets as in-memory tensors with fixed, stratified, seeded splits.

``config`` holds the options and ``DataError``; ``sources`` reads a dataset's files;
``sampling`` draws stratified samples; ``splits`` makes the train/validation/test splits
(``load_data``); ``label_noise`` flips labels; ``dataset`` is the loaded ``Data`` and its
``Split``s; ``augment`` augments batches; ``tiers`` names an example's difficulty tier (easy,
medium, hard), cuts tiers from scores and applies the cuts.
"""
