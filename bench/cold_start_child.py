"""One cold start, in a fresh process: import a handler module, invoke it once, report times.

Kept to the standard library so the process pays only for what the handler itself imports.
`python -I -S bench/cold_start_child.py MODE HANDLER_PATH EVENT.pickle OUT.json PATH...` where MODE
is `time` (measure), `record` (also log every AWS API call the handler makes, for the bare
baseline) or `imports` (run under `-X importtime`: every import is logged) and the PATHs (an
artifact's folders: the function's, then its layers') are the only places beside the standard
library that imports are found, as in Lambda.
"""

import time

T_MAIN = time.time()

import importlib.util  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402


class Context:
    """The attributes Powertools reads from Lambda's context object."""

    function_name = "bench"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:bench"
    aws_request_id = "00000000-0000-4000-8000-000000000000"
    function_version = "$LATEST"
    log_group_name = "/aws/lambda/bench"
    log_stream_name = "bench"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def record_calls(calls: list) -> None:
    from botocore.client import BaseClient

    original = BaseClient._make_api_call

    def recording(self, operation_name, api_params):  # type: ignore[no-untyped-def]
        calls.append((self.meta.service_model.service_name, operation_name, api_params))
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = recording


def log_lazy_imports() -> None:
    """Send `importlib.import_module` through the import statement's path, which `-X importtime`
    logs: pydantic loads its submodules (`pydantic.main`, `pydantic.types`, ...) by
    `import_module` from a module `__getattr__`, and those would otherwise count as the own time
    of whichever module first named them (`from pydantic import BaseModel` in ours)."""
    def import_module(name, package=None):  # type: ignore[no-untyped-def]
        absolute = importlib.util.resolve_name(name, package) if name.startswith(".") else name
        __import__(absolute)
        return sys.modules[absolute]

    importlib.import_module = import_module


def where_the_first_call_goes(profiler) -> list:  # type: ignore[no-untyped-def]
    """The project's own functions (and SDK client construction) by cumulative time."""
    import pstats

    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    rows = []
    for (path, line, name), (_, _, _, cum, _) in stats.items():
        if "/infercrane/" in path or (name == "create_client" and "session.py" in path):
            short = path.split("/python/")[-1]
            rows.append((cum, f"{short}:{line}({name})"))
    rows.sort(reverse=True)
    return [f"{label} {cum * 1000:.0f} ms" for cum, label in rows[:6]]


def libraries(layers: list[str]) -> list[str]:
    """The modules loaded from the artifact's layers other than infercrane, in import order: what
    a bare handler importing the same libraries imports (the bench's second floor)."""
    names = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and path.startswith(tuple(layers)) and name.split(".")[0] != "infercrane":
            names.append(name)
    return names


def main() -> None:
    mode, handler_path, event_path, out_path = sys.argv[1:5]
    sys.path[:0] = sys.argv[5:]
    with open(event_path, "rb") as f:
        event = pickle.load(f)  # noqa: S301 - written by the bench itself
    calls: list = []
    if mode == "record":
        record_calls(calls)
    if mode == "imports":
        log_lazy_imports()
    t0 = time.perf_counter()
    spec = importlib.util.spec_from_file_location("app", handler_path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["app"] = module
    spec.loader.exec_module(module)
    t1 = time.perf_counter()
    error = None
    profiler = None
    if mode == "record":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    try:
        result = module.handler(event, Context())
    except Exception as exc:  # reported, not hidden: the parent refuses a failing scenario
        result, error = None, f"{type(exc).__name__}: {exc}"
    t2 = time.perf_counter()
    first_call = []
    if profiler is not None:
        profiler.disable()
        first_call = where_the_first_call_goes(profiler)
    t_done = time.time()
    doc = {"t_main": T_MAIN, "t_done": t_done, "import_s": t1 - t0, "invoke_s": t2 - t1,
           "error": error, "result": json.loads(json.dumps(result, default=str)),
           "modules": len(sys.modules), "first_call_top": first_call,
           # Every module now loaded: the parent names what ours loads and the bare one does not.
           "module_names": list(sys.modules),
           "libraries": libraries(sys.argv[6:]) if mode == "record" else []}
    with open(out_path, "w") as f:
        json.dump(doc, f)
    if mode == "record":
        with open(out_path + ".calls", "wb") as f:
            pickle.dump(calls, f)


main()
