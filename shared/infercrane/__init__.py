"""InferCrane replay and capacity intelligence: the shared domain package (a Lambda layer)."""

from infercrane.logs import quiet_wire_logs

__version__ = "0.1.0"

# Every function, the CLI and the local stack import this package first: library wire logs
# (which carry request bodies) are off before any client exists, at any chosen log level.
quiet_wire_logs()
