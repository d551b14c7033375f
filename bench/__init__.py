"""`make bench`: measured ratios of the hot paths (not part of `make test`). See docs/bench.md."""
