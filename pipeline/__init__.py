"""The experiment pipeline: one module per entry point and the pieces they share."""

from pipeline.allocator import keep_freed_memory

# Every entry point (python -m pipeline.<step>, a study's workers, tune's trials) imports this
# package before it allocates its first tensor: the earlier glibc is told, the more it keeps.
keep_freed_memory()
