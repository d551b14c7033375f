"""InferCrane replay and capacity intelligence: the shared domain package (a Lambda layer)."""

__version__ = "0.1.0"
