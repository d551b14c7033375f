"""CloudFormation's intrinsic functions over the local resources (Ref, Fn::GetAtt, Fn::Sub,
Fn::Join, Fn::If with the template's Conditions, AWS::NoValue): what the template's environment
variables and role policies resolve to locally."""

from __future__ import annotations

import re
from typing import Any

ACCOUNT = "123456789012"  # moto's default account
PARTITION = "aws"
STACK_NAME = "infercrane-local"
_SUB = re.compile(r"\$\{([^}!][^}]*)\}")
_NO_VALUE = object()  # Ref AWS::NoValue: the property or list item is left out


class Resolver:
    def __init__(self, refs: dict[str, str], arns: dict[str, str], names: dict[str, str],
                 parameters: dict[str, Any], region: str,
                 conditions: dict[str, Any] | None = None):
        # Parameters without a default resolve to "" (the local stack passes none).
        self.refs = {**{k: "" if v is None else str(v) for k, v in parameters.items()}, **refs,
                     "AWS::Region": region, "AWS::AccountId": ACCOUNT,
                     "AWS::Partition": PARTITION, "AWS::StackName": STACK_NAME,
                     "AWS::URLSuffix": "amazonaws.com"}
        self.arns = arns
        self.names = names  # every other attribute (QueueName, ...)
        self.conditions = conditions or {}

    def __call__(self, node: Any) -> Any:
        if isinstance(node, list):
            return [v for v in (self(x) for x in node) if v is not _NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                return _NO_VALUE if arg == "AWS::NoValue" else self.refs[arg]
            if key == "Fn::GetAtt":
                target, attr = arg if isinstance(arg, list) else str(arg).split(".", 1)
                return self.attr(target, attr)
            if key == "Fn::Sub":
                text, names = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])
                values = {k: str(self(v)) for k, v in names.items()}
                return _SUB.sub(lambda m: values[m.group(1)] if m.group(1) in values
                                else self._sub_name(m.group(1)), text)
            if key == "Fn::Join":
                return str(arg[0]).join(str(self(v)) for v in arg[1])
            if key == "Fn::If":
                return self(arg[1] if self.condition(arg[0]) else arg[2])
            if key.startswith("Fn::"):
                raise ValueError(f"the local stack does not resolve {key}")
        return {k: v for k, v in ((k, self(x)) for k, x in node.items()) if v is not _NO_VALUE}

    def condition(self, name: str) -> bool:
        return self._holds(self.conditions[name])

    def _holds(self, node: Any) -> bool:
        (key, arg), = node.items()
        if key == "Condition":
            return self.condition(arg)
        if key == "Fn::Equals":
            return str(self(arg[0])) == str(self(arg[1]))
        if key == "Fn::Not":
            return not self._holds(arg[0])
        if key == "Fn::And":
            return all(self._holds(x) for x in arg)
        if key == "Fn::Or":
            return any(self._holds(x) for x in arg)
        raise ValueError(f"the local stack does not evaluate {key} in a condition")

    def attr(self, target: str, attr: str) -> str:
        return self.arns[target] if attr == "Arn" else self.names[target]

    def _sub_name(self, name: str) -> str:
        if "." in name:
            target, attr = name.split(".", 1)
            return self.attr(target, attr)
        return self.refs[name]
