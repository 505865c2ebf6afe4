"""The operations of `desktop_execute`: typed steps, their config, and validating a whole call.

Each step is `{type, params}`; `Operation` is a union keyed by `type`, and the JSON schema the
model sees (`operations_schema()`, `config_schema()`) is generated from these same types.
`parse_call` checks every step before anything runs and raises `InvalidCall` naming each bad
step (its index in `operations` and its number, counted from 1), the field and what to do;
`check_on_screen` then checks every coordinate against the screen's current size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    model_validator,
)

from .desktop_keys import BUTTONS, KEYS, untypeable

MAX_SLEEP_MS = 30_000


class InvalidCall(ValueError):
    """The call was refused before any step ran; the message lists each problem."""


def _known_key(name: str) -> str:
    if name not in KEYS:
        raise ValueError(
            f"unknown key {name!r}; keys use nut.js names such as Enter, Escape, Tab, LeftControl, "
            f"LeftShift, LeftAlt, A to Z, Num0 to Num9, F1 to F24 (the tool description lists all)"
        )
    return name


KeyName = Annotated[str, AfterValidator(_known_key), Field(description="A nut.js key name")]
Button = Literal["LEFT", "MIDDLE", "RIGHT"]
assert set(Button.__args__) == set(BUTTONS)  # type: ignore[attr-defined]
Coordinate = Annotated[int, Field(ge=0, description="Screen pixels from the left or top edge")]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(_Params):
    pass


class Point(_Params):
    x: Coordinate
    y: Coordinate


class ClickParams(_Params):
    button: Button = "LEFT"
    x: Coordinate | None = Field(None, description="Moves here first when given with y")
    y: Coordinate | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> "ClickParams":
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither to act where the pointer is")
        return self


class ButtonParams(_Params):
    button: Button = "LEFT"


class DragParams(_Params):
    to: Point
    from_: Point | None = Field(None, alias="from", description="Default: where the pointer is")


class ScrollParams(_Params):
    amount: Annotated[int, Field(ge=1, le=1000, description="Wheel clicks")]
    x: Coordinate | None = Field(None, description="Moves here first when given with y")
    y: Coordinate | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> "ScrollParams":
        if (self.x is None) != (self.y is None):
            raise ValueError("give both x and y, or neither to scroll where the pointer is")
        return self


Keys = Annotated[list[KeyName], Field(min_length=1, max_length=16)]


def _us_typeable(text: str) -> str:
    bad = untypeable(text)
    if bad is not None:
        index, char = bad
        raise ValueError(
            f"character {char!r} (U+{ord(char):04X}) at position {index} has no key on a US "
            f"keyboard; put the text on the clipboard with clipboard.setContent {{text}} and paste "
            f'it with keyboard.type {{keys: ["LeftControl", "V"]}}'
        )
    return text


class TypeParams(_Params):
    """Either `text` (typed character by character on a US layout) or `keys` (pressed together)."""

    text: Annotated[str, AfterValidator(_us_typeable), Field(max_length=20_000)] | None = None
    keys: Keys | None = None

    @model_validator(mode="after")
    def _text_or_keys(self) -> "TypeParams":
        if (self.text is None) == (self.keys is None):
            raise ValueError("give either text or keys")
        return self


class KeysParams(_Params):
    keys: Keys


class RegionParams(_Params):
    left: Coordinate
    top: Coordinate
    width: Annotated[int, Field(ge=1)]
    height: Annotated[int, Field(ge=1)]


class ClipboardParams(_Params):
    text: Annotated[str, Field(max_length=10_000_000)]


class SleepParams(_Params):
    ms: Annotated[int, Field(ge=0, le=MAX_SLEEP_MS)]


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _step(name: str, params: type[_Params] | None, doc: str) -> type[_Step]:
    """One operation's model: `{type: name, params}`; params may be omitted when all optional."""
    fields: dict[str, Any] = {"type": (Literal[name], ...)}
    if params is None:
        fields["params"] = (NoParams, Field(default_factory=NoParams))
    elif all(not f.is_required() for f in params.model_fields.values()):
        fields["params"] = (params, Field(default_factory=params))
    else:
        fields["params"] = (params, ...)
    class_name = "".join(part[:1].upper() + part[1:] for part in name.split("."))
    return create_model(class_name, __base__=_Step, __doc__=doc, **fields)


#: Operation name -> (params model or None, one-line description), in the spec's order.
OPERATIONS: dict[str, tuple[type[_Params] | None, str]] = {
    "mouse.setPosition": (Point, "Put the pointer at {x, y} at once"),
    "mouse.move": (Point, "Move the pointer to {x, y}, animated at config.mouseSpeed px/s"),
    "mouse.getPosition": (None, "The pointer's position {x, y}"),
    "mouse.click": (ClickParams, "Click {button?, x?, y?}"),
    "mouse.doubleClick": (ClickParams, "Double-click {button?, x?, y?}"),
    "mouse.pressButton": (ButtonParams, "Press and hold {button?}"),
    "mouse.releaseButton": (ButtonParams, "Release {button?}"),
    "mouse.drag": (DragParams,
                   "{to, from?}: press LEFT at from (default: where the pointer is), glide to to, release"),
    "mouse.scrollUp": (ScrollParams, "Scroll {amount, x?, y?} wheel clicks up"),
    "mouse.scrollDown": (ScrollParams, "Scroll {amount, x?, y?} wheel clicks down"),
    "mouse.scrollLeft": (ScrollParams, "Scroll {amount, x?, y?} wheel clicks left"),
    "mouse.scrollRight": (ScrollParams, "Scroll {amount, x?, y?} wheel clicks right"),
    "keyboard.type": (TypeParams, "Type {text} (US layout) or press {keys} together"),
    "keyboard.pressKey": (KeysParams, "Press and hold {keys}"),
    "keyboard.releaseKey": (KeysParams, "Release {keys}"),
    "screen.width": (None, "The screen's width in pixels"),
    "screen.height": (None, "The screen's height in pixels"),
    "screen.grab": (None, "A PNG of the whole screen"),
    "screen.grabRegion": (RegionParams, "A PNG of {left, top, width, height}"),
    "screen.colorAt": (Point, "The pixel at {x, y}: {x, y, r, g, b, hex}"),
    "getActiveWindow": (None, "The focused window {id, title, pid, x, y, width, height}, or null"),
    "getWindows": (None, "The desktop's windows, each {id, title, pid, x, y, width, height}"),
    "clipboard.setContent": (ClipboardParams, "Put {text} on the clipboard"),
    "clipboard.getContent": (None, "The clipboard's text"),
    "sleep": (SleepParams, f"Wait {{ms}}, at most {MAX_SLEEP_MS}"),
}

STEP_MODELS: dict[str, type[_Step]] = {
    name: _step(name, params, doc) for name, (params, doc) in OPERATIONS.items()
}

Operation = Annotated[Union[tuple(STEP_MODELS.values())], Field(discriminator="type")]  # type: ignore[misc]


class DesktopConfig(BaseModel):
    """Pacing of the call's input, as a person at the screen would go."""

    model_config = ConfigDict(extra="forbid")

    keyboardDelayMs: Annotated[int, Field(ge=0, le=1000)] = Field(
        10, description="Pause after each key typed")
    mouseDelayMs: Annotated[int, Field(ge=0, le=5000)] = Field(
        50, description="Pause after each mouse action")
    mouseSpeed: Annotated[float, Field(gt=0, le=1_000_000)] = Field(
        2000, description="Pointer speed of mouse.move, drag and aimed clicks, in px/s")


_OPERATION = TypeAdapter(Operation)
_OPERATIONS = TypeAdapter(list[Operation])


@dataclass(frozen=True)
class Call:
    """A validated call: its steps and config."""

    operations: list[Any]
    config: DesktopConfig


def _inline_refs(schema: dict) -> dict:
    """The schema with `$defs` references replaced by their definitions (no recursion here),
    so it can sit inside the tool's argument schema; titles and the discriminator's mapping
    (which point into `$defs`) are dropped."""
    defs = schema.pop("$defs", {})

    def walk(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {
                key: walk(value, key == "properties" and not in_properties)
                for key, value in node.items()
                # titles repeat the names; the discriminator's mapping points into $defs
                if in_properties or key not in ("title", "discriminator")
            }
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(schema)


def operations_schema() -> dict:
    """JSON schema of `operations`, generated from the operation models."""
    schema = _inline_refs(_OPERATIONS.json_schema(by_alias=True))
    schema["description"] = "Steps, each {type, params}, run in order"
    return schema


def config_schema() -> dict:
    """JSON schema of `config`, generated from `DesktopConfig`."""
    return _inline_refs(DesktopConfig.model_json_schema())


def _describe(error: dict, step: str | None) -> str:
    """One pydantic error as a sentence naming the field and what to do."""
    loc = [str(part) for part in error["loc"]]
    if step is not None and loc and loc[0] == step:
        loc = loc[1:]  # the discriminator's tag
    field = ".".join(part if part != "from_" else "from" for part in loc)
    kind = error["type"]
    if kind == "union_tag_invalid":
        return (f"unknown operation {error['input'].get('type')!r}; operations are: "
                f"{', '.join(OPERATIONS)}")
    if kind == "union_tag_not_found":
        return "missing field 'type' (the operation's name, e.g. \"mouse.click\")"
    if kind == "extra_forbidden":
        allowed = _allowed_fields(step, loc)
        return f"unknown field {field!r}" + (f"; allowed: {allowed}" if allowed else "")
    if kind == "missing":
        return f"missing field {field!r}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{field}: {message}" if field else message


def _allowed_fields(step: str | None, loc: list[str]) -> str:
    if step is None or not loc:
        return ""
    if len(loc) == 1:
        return "type, params"
    params = OPERATIONS.get(step, (None, ""))[0]
    if loc[0] == "params" and len(loc) == 2:
        if params is None:
            return "none (this operation takes no params)"
        return ", ".join(f.alias or name for name, f in params.model_fields.items())
    return ""


def parse_call(operations: Any, config: Any) -> Call:
    """Validate a whole call; raises `InvalidCall` listing every bad step and field."""
    problems: list[str] = []
    steps: list[Any] = []
    if not isinstance(operations, list) or not operations:
        raise InvalidCall("operations must be a non-empty array of steps, each {type, params}")
    for index, raw in enumerate(operations):
        where = f"operations[{index}] (step {index + 1}"
        name = raw.get("type") if isinstance(raw, dict) else None
        where += f", {name})" if isinstance(name, str) else ")"
        try:
            steps.append(_OPERATION.validate_python(raw))
        except ValidationError as exc:
            tag = name if isinstance(name, str) and name in OPERATIONS else None
            for error in exc.errors():
                problems.append(f"{where}: {_describe(error, tag)}")
    try:
        parsed_config = DesktopConfig.model_validate(config or {})
    except ValidationError as exc:
        for error in exc.errors():
            problems.append(f"config: {_describe(error, None)}")
        parsed_config = DesktopConfig()
    if problems:
        raise InvalidCall("nothing was run; fix these and call again:\n" + "\n".join(problems))
    return Call(operations=steps, config=parsed_config)


def _points(step: Any) -> list[tuple[str, int | None, int | None]]:
    """The (field, x, y) screen points a step aims at."""
    params = step.params
    if isinstance(params, (Point, ClickParams, ScrollParams)):
        return [("params", params.x, params.y)]
    if isinstance(params, DragParams):
        points = [("params.to", params.to.x, params.to.y)]
        if params.from_ is not None:
            points.append(("params.from", params.from_.x, params.from_.y))
        return points
    return []


def check_on_screen(steps: list[Any], width: int, height: int) -> None:
    """Raise `InvalidCall` for any coordinate outside a `width` x `height` screen."""
    problems: list[str] = []
    for index, step in enumerate(steps):
        where = f"operations[{index}] (step {index + 1}, {step.type})"
        for field, x, y in _points(step):
            if x is not None and x >= width:
                problems.append(f"{where}: {field}.x={x} is off the screen (0 to {width - 1})")
            if y is not None and y >= height:
                problems.append(f"{where}: {field}.y={y} is off the screen (0 to {height - 1})")
        params = step.params
        if isinstance(params, RegionParams):
            if params.left + params.width > width or params.top + params.height > height:
                problems.append(
                    f"{where}: region {params.left},{params.top} {params.width}x{params.height} "
                    f"goes past the screen's edge ({width}x{height})")
    if problems:
        raise InvalidCall(
            f"nothing was run; the screen is {width}x{height} now (it follows the viewer's "
            f"window, so read screen.width/height before aiming):\n" + "\n".join(problems))
