"""The operator's policy: which capability calls a script may make, which wait for a person's
yes, and how many calls a server gets per run.

It is the `policy` entry of the runtime's config file (beside `mcpServers`):

    "policy": {
      "default": "allow",
      "rules": {
        "exec": "ask",                                # every tool of a server
        "exec.stream_logs": "allow",                  # one tool
        "browser.browser_execute.evaluate": "deny",   # one operation type of a batch
        "browser.desktop_execute.keyboard.type": "ask",
        "exec.exec.curl": "deny"                      # exec: one program (its bin's base name)
      },
      "budgets": {"browser": 200, "exec": 20},        # calls per server per run
      "askTimeoutSeconds": 120
    }

Each part of a call is decided by its most specific rule (else `default`): the call itself by
`server.tool` or `server`, each operation of a `browser_execute` / `desktop_execute` batch by
`server.tool.<type>`, an `exec` by `server.exec.<program>`. The call gets the strictest of its
parts (deny over ask over allow), so a denied operation refuses its whole batch before any step
runs. A program rule names what `exec` starts, not what that starts in turn: a shell
(`sh -c "curl ..."`) is its own program, so a deny list of programs needs its shells denied too.

`ask` asks a person before the call runs: a person at one of the session's control viewers
(`runtime/oversight.py`) when one is open, else the client's user through MCP elicitation. What
runs is exactly what was shown, and on what was shown: the call's target is read when it is
shown and again after the yes (`runtime/approval.py`), and a change refuses it. Without a way to
ask (no viewer open and no elicitation, or a replay running) the call is denied. A refused
call is a failed result, not an exception: `kind` "denied" (a rule, a decline, a spent budget),
"approval_timeout", or "approval_stale" (the target changed), and its message names the rule.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.result import CALL_LINE

from .approval import ApprovalRequest, CallTool, changed, read_target

Decision = Literal["allow", "ask", "deny"]
_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}
BATCH_TOOLS = frozenset({"browser_execute", "desktop_execute"})

Ask = Callable[[ApprovalRequest], Awaitable[Literal["accept", "decline", "cancel", "timeout", "unasked"]]]
"""Asks a person to approve a call ("unasked": nobody could be asked); None where nobody can be."""


class PolicyError(ValueError):
    """The config's policy entry is malformed; the message names the field."""


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    default: Decision = "allow"
    rules: dict[str, Decision] = Field(default_factory=dict)
    budgets: dict[str, int] = Field(default_factory=dict)
    ask_timeout_seconds: float = Field(default=120.0, gt=0, le=3600, alias="askTimeoutSeconds")

    @classmethod
    def parse(cls, data: Any, source: str = "config") -> Policy:
        """The `policy` entry of a config document (the permissive default without one)."""
        entry = data.get("policy") if isinstance(data, dict) else None
        if entry is None:
            return cls()
        try:
            policy = cls.model_validate(entry)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            if error["type"] == "extra_forbidden":
                raise PolicyError(f"{source}: policy.{where} is not a policy field; its fields: default, rules, "
                                  f"budgets, askTimeoutSeconds") from exc
            raise PolicyError(f"{source}: policy.{where}: {error['msg']}") from exc
        for server, budget in policy.budgets.items():
            if budget < 0:
                raise PolicyError(f"{source}: policy.budgets.{server} must be 0 or more calls per run")
        for key in policy.rules:
            if not key or any(not part for part in key.split(".")):
                raise PolicyError(f"{source}: policy.rules: {key!r} is not server, server.tool or "
                                  f"server.tool.operation")
        return policy

    @property
    def permissive(self) -> bool:
        return self.default == "allow" and not self.budgets and all(d == "allow" for d in self.rules.values())

    def decide(self, server: str, tool: str, args: Any) -> tuple[Decision, str]:
        """The call's decision and the rule that made it (`default` when none matched)."""
        parts = [self._rule(server, tool)]
        for detail in _details(tool, args):
            parts.append(self._rule(server, tool, detail))
        return max(parts, key=lambda part: _STRICTNESS[part[0]])

    def _rule(self, server: str, tool: str, detail: str | None = None) -> tuple[Decision, str]:
        keys = ([f"{server}.{tool}.{detail}"] if detail is not None else []) + [f"{server}.{tool}", server]
        for key in keys:
            if key in self.rules:
                return self.rules[key], key
        return self.default, "default"

    def summary(self) -> str:
        """What a script's author must plan for, one line each (empty when nothing is limited)."""
        if self.permissive:
            return ""
        lines = []
        for decision, said in (("deny", "refused"), ("ask", "wait for a person's approval (refused when "
                                                       "none can be asked)")):
            keys = sorted(key for key, value in self.rules.items() if value == decision)
            if keys:
                lines.append(f"- {said}: {', '.join(keys)}")
        if self.default != "allow":
            lines.append(f"- every other call: {'refused' if self.default == 'deny' else 'waits for approval'}"
                         + (f" (allowed: {', '.join(sorted(k for k, v in self.rules.items() if v == 'allow'))})"
                            if any(v == "allow" for v in self.rules.values()) else ""))
        if self.budgets:
            lines.append("- calls per run at most: " + ", ".join(f"{s} {n}" for s, n in sorted(self.budgets.items())))
        return ("The operator's policy (a refused call is a failed result, kind \"denied\", "
                "\"approval_timeout\" or \"approval_stale\"):\n" + "\n".join(lines))

    def guard(self, call: CallTool, ask: Ask | None,
              on_answer: Callable[[str, str, str, str], None] | None = None) -> CallTool:
        """`call` for one run under this policy: refused calls answer a failed result.
        `on_answer(server, tool, rule, answer)` hears every ask's outcome (the timeline's)."""
        if self.permissive:
            return call
        spent: Counter[str] = Counter()

        async def policed(server: str, tool: str, args: Any) -> dict[str, Any]:
            decision, rule = self.decide(server, tool, args)
            if decision == "deny":
                return refused("denied", f"{server}.{tool} is refused by the operator's policy "
                               f"(rule {rule!r}: deny)", "do without it, or ask the operator to allow it")
            budget = self.budgets.get(server)
            if budget is not None and spent[server] >= budget:
                return refused("denied", f"the operator's policy allows {budget} calls to {server} per run, "
                               f"and this run has made them", "do more per call, or split the work into runs")
            if decision == "ask":
                target = await read_target(call, server, tool, args, preview=True) if ask is not None else {}
                answer = "unasked" if ask is None else await ask(
                    ApprovalRequest(server, tool, args, rule, target, line=CALL_LINE.get()))
                if on_answer is not None:
                    on_answer(server, tool, rule, answer)
                if answer == "unasked":
                    return refused("denied", f"{server}.{tool} needs a person's approval (rule {rule!r}: ask) "
                                   f"and nobody can be asked here (no control viewer is open, and the client "
                                   f"does not support elicitation)",
                                   "open the session's viewer, use a client that can ask its user, or ask the "
                                   "operator")
                if answer == "timeout":
                    return refused("approval_timeout", f"nobody answered the approval of {server}.{tool} within "
                                   f"{self.ask_timeout_seconds:g} s", "try again when a person is there")
                if answer != "accept":
                    return refused("denied", f"{server}.{tool} was {'declined' if answer == 'decline' else 'not approved'}"
                                   f" by the person asked", "do without it, or ask what they would allow")
                if target:
                    change = changed(target, await read_target(call, server, tool, args))
                    if change is not None:
                        return refused("approval_stale", f"{server}.{tool} was approved, but {change}",
                                       "call it again to ask about what is there now")
            spent[server] += 1
            return await call(server, tool, args)

        return policed


def _details(tool: str, args: Any) -> list[str]:
    """The parts of a call a rule may name below its tool: a batch's operation types, exec's program."""
    if not isinstance(args, dict):
        return []
    if tool in BATCH_TOOLS:
        ops = args.get("operations")
        return [op["type"] for op in ops if isinstance(op, dict) and isinstance(op.get("type"), str)] \
            if isinstance(ops, list) else []
    if tool == "exec" and isinstance(args.get("bin"), str):
        return [posixpath.basename(args["bin"])]
    return []


def refused(kind: str, message: str, hint: str) -> dict[str, Any]:
    """A failed result as the bridge answers one (the capability contract's own)."""
    from capabilities.contract import ToolError, failure

    from .bridge import result_to_dict

    return result_to_dict(failure(ToolError(kind, message, hint=hint)))  # type: ignore[arg-type]
