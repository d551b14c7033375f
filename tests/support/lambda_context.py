"""The Lambda context object a test hands a handler it invokes in-process (the local stack's
execution environments build their own, in `local/lambda_worker.py`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class LambdaContext:
    function_name: str
    memory_limit_in_mb: int = 512
    timeout_s: float = 30.0
    aws_request_id: str = ""
    invoked_function_arn: str = ""
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    _deadline: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))
