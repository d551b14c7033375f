"""Observations as segments: immutable gzip JSON Lines objects on S3, one DynamoDB index item
each (docs/capture.md, Storage). `layout` says where a segment lives and what it holds, `reading`
merges and deduplicates a window, `store` is the `ObservationStore` over both."""
