"""Replay execution: an AIPerf run shaped by a trace. An *approximation*, never a reproduction.

`plan_execution` derives AIPerf's parameters from a trace document (the `mean` schedule: mean
input/output sizes with their standard deviations and the peak observed concurrency; the `trace`
schedule: the trace's own arrivals and prefix structure as mooncake rows). `build_evidence`
turns a run's outcome into the evidence document (`infercrane.replay.execution/v1`) that
`POST /v1/executions` stores; `ExecutionService` is what the routes call.

Prompt semantics and exact arrival timing are not reproduced: AIPerf sends synthetic prompts of
the right sizes. The evidence says so (`evidence_class: approximation`, `method`, `fidelity`).

The package, by concept: `revisions` (where a candidate answers), `plan` (a trace read into the
run's parameters), `evidence` (a run's outcome and the document built from it),
`evidence_schema` (the closed schema the service stores) and `service`.
"""

from infercrane.domain.execution.evidence import (
    DEFAULT_MAX_ERROR_RATE_PCT,
    NOTE,
    SCHEMA,
    FailureKind,
    RunOutcome,
    build_evidence,
    fidelity_line,
)
from infercrane.domain.execution.evidence_schema import (
    FAILURE_REASONS,
    MAX_EVIDENCE_BYTES,
    EvidenceIn,
    check_evidence,
    check_execution_id,
)
from infercrane.domain.execution.plan import (
    ExecutionPlan,
    Schedule,
    Target,
    TraceShape,
    new_execution_id,
    plan_execution,
    read_trace,
)
from infercrane.domain.execution.revisions import (
    Revision,
    check_revision_name,
    check_target_url,
    make_revision,
)
from infercrane.domain.execution.service import ExecutionService

__all__ = [
    "DEFAULT_MAX_ERROR_RATE_PCT", "FAILURE_REASONS", "MAX_EVIDENCE_BYTES", "NOTE", "SCHEMA",
    "EvidenceIn", "ExecutionPlan", "ExecutionService", "FailureKind", "Revision", "RunOutcome",
    "Schedule", "Target", "TraceShape", "build_evidence", "check_evidence", "check_execution_id",
    "check_revision_name", "check_target_url", "fidelity_line", "make_revision", "new_execution_id",
    "plan_execution", "read_trace",
]
