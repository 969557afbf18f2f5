"""Message classes in kio's style from Kafka message-schema JSON.

kio 0.6.5 ships its generated `kio.schema` modules but not its code generator, and knows api
keys only up to 92. KIP-1289's TxnShareAcknowledge (key 93) therefore comes from this small
generator: it reads Kafka's own message JSON (`json/*.json`, comments allowed as in
clients/src/main/resources/common/message) and writes one module per api and version with
frozen entity dataclasses whose field metadata (`kafka_type`, `tag`) kio's serializer and
parser read. No byte layout is written by hand.

Run `python -m reference_impl.protocol.schemas.codegen` to regenerate; a test checks that the
committed modules are what the generator produces.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
JSON_DIR = HERE / "json"
GENERATED_DIR = HERE / "generated"

_PRIMITIVES = {"int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "bool", "string": "str",
               "uuid": "uuid.UUID", "bytes": "bytes", "float64": "f64"}
_ENTITY_TYPES = {("string", "groupId"): "GroupId", ("string", "transactionalId"): "TransactionalId",
                 ("int64", "producerId"): "ProducerId", ("int32", "brokerId"): "BrokerId",
                 ("string", "topicName"): "TopicName"}


def load_schema(path: Path) -> dict:
    """Kafka's message JSON allows // comments."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


def parse_versions(spec: str | None) -> range:
    if spec in (None, "", "none"):
        return range(0)
    if spec.endswith("+"):
        return range(int(spec[:-1]), 1 << 15)
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def field_name(f: dict) -> str:
    """kio's naming: ThrottleTimeMs is a timedelta called throttle_time."""
    if f["name"] == "ThrottleTimeMs" and f["type"] == "int32":
        return "throttle_time"
    return snake(f["name"])


@dataclass
class _Ctx:
    version: int
    flexible: bool
    api_key: int
    kind: str  # "request" | "response"
    imports: set[str]
    classes: list[str]


def _field_type(f: dict, ctx: _Ctx) -> tuple[str, str | None]:
    """(annotation, kafka_type or None for entities) of one field."""
    t = f["type"]
    if t.startswith("[]"):
        inner = t[2:]
        if inner in _PRIMITIVES:
            ann, kt = _scalar(inner, f, ctx, in_array=True)
            return f"tuple[{ann}, ...]", kt
        return f"tuple[{_struct(f, inner, ctx)}, ...]", None
    if t in _PRIMITIVES:
        return _scalar(t, f, ctx)
    return _struct(f, t, ctx), None


def _scalar(t: str, f: dict, ctx: _Ctx, in_array: bool = False) -> tuple[str, str]:
    name = f["name"]
    if name == "ErrorCode" and t == "int16" and not in_array:
        ctx.imports.add("from kio.schema.errors import ErrorCode")
        return "ErrorCode", "error_code"
    if name == "ThrottleTimeMs" and t == "int32":
        ctx.imports.add("from kio.static.primitive import i32Timedelta")
        return "i32Timedelta", "timedelta_i32"
    entity = _ENTITY_TYPES.get((t, f.get("entityType", "")))
    if entity:
        ctx.imports.add(f"from kio.schema.types import {entity}")
        ann = entity
    elif t == "uuid":
        ctx.imports.add("import uuid")
        ann = "uuid.UUID | None"
    else:
        ann = _PRIMITIVES[t]
        if ann.startswith(("i", "f")):
            ctx.imports.add(f"from kio.static.primitive import {ann}")
    nullable = ctx.version in parse_versions(f.get("nullableVersions"))
    if nullable and not in_array and t in ("string", "bytes"):
        ann += " | None"
    return ann, t


def _struct(f: dict, type_name: str, ctx: _Ctx) -> str:
    _emit_class(type_name, f.get("fields", []), ctx, top=False)
    return type_name


def _default(f: dict, ann: str, kt: str | None) -> str | None:
    """Python default for the field, None when it has none (required keyword)."""
    tagged = "tag" in f
    if "default" not in f and not tagged:
        return None
    d = f.get("default")
    if f["type"].startswith("[]"):
        return "()"
    if kt is None:  # struct
        return f"{ann}()"
    if d == "null" or (d is None and "None" in ann):
        return "None"
    if kt in ("int8", "int16", "int32", "int64"):
        base = ann.split(" ")[0]
        return f"{base}({int(d or 0)})"
    if kt == "bool":
        return str(str(d).lower() == "true")
    if kt == "string":
        return repr(d or "")
    raise ValueError(f"no default rule for {f['name']}")


def _emit_class(name: str, fields: list[dict], ctx: _Ctx, *, top: bool) -> None:
    header = "RequestHeader" if ctx.kind == "request" else "ResponseHeader"
    entity = ctx.kind if top else "nested"
    lines = [
        "@dataclass(frozen=True, slots=True, kw_only=True)",
        f"class {name}:",
        f"    __type__: ClassVar = EntityType.{entity}",
        f"    __version__: ClassVar[i16] = i16({ctx.version})",
        f"    __flexible__: ClassVar[bool] = {ctx.flexible}",
        f"    __api_key__: ClassVar[i16] = i16({ctx.api_key})",
        f"    __header_schema__: ClassVar[type[{header}]] = {header}",
    ]
    for f in fields:
        if ctx.version not in parse_versions(f.get("versions")):
            continue
        ann, kt = _field_type(f, ctx)
        meta = {}
        if kt is not None:
            meta["kafka_type"] = kt
        if "tag" in f and ctx.version in parse_versions(f.get("taggedVersions")):
            meta["tag"] = int(f["tag"])
        default = _default(f, ann, kt)
        parts = []
        if meta:
            parts.append(f"metadata={meta!r}")
        if default is not None:
            parts.append(f"default={default}")
        rhs = f" = field({', '.join(parts)})" if parts else ""
        lines.append(f"    {field_name(f)}: {ann}{rhs}")
        lines.append(f'    """{f.get("about", "")}"""')
    ctx.classes.append("\n".join(lines))


def render(schema: dict, source: str, version: int) -> str:
    kind = schema["type"]
    ctx = _Ctx(version, version in parse_versions(schema.get("flexibleVersions")), int(schema["apiKey"]), kind, set(), [])
    _emit_class(schema["name"], schema["fields"], ctx, top=True)
    ctx.imports.add("from kio.static.primitive import i16")
    if kind == "request":
        hv = 2 if ctx.flexible else 1
        ctx.imports.add(f"from kio.schema.request_header.v{hv}.header import RequestHeader")
    else:
        hv = 1 if ctx.flexible else 0
        ctx.imports.add(f"from kio.schema.response_header.v{hv}.header import ResponseHeader")
    plain = sorted(i for i in ctx.imports if i.startswith("import "))
    froms = sorted(i for i in ctx.imports if i.startswith("from "))
    head = [
        '"""',
        f"Generated by reference_impl.protocol.schemas.codegen from ``{source}``; do not edit.",
        '"""',
        "",
        *plain,
        "",
        "from dataclasses import dataclass",
        "from dataclasses import field",
        "from typing import ClassVar",
        "",
        "from kio.static.constants import EntityType",
        *froms,
    ]
    return "\n".join(head) + "\n\n\n" + "\n\n\n".join(ctx.classes) + "\n"


def module_name(schema: dict) -> str:
    return snake(schema["name"].removesuffix("Request").removesuffix("Response"))


def outputs() -> dict[Path, str]:
    """Every generated file, path -> text."""
    out: dict[Path, str] = {}
    for path in sorted(JSON_DIR.glob("*.json")):
        schema = load_schema(path)
        versions = parse_versions(schema["validVersions"])
        pkg = GENERATED_DIR / module_name(schema)
        for v in versions:
            out[pkg / f"v{v}" / f"{schema['type']}.py"] = render(schema, f"json/{path.name}", v)
            out[pkg / f"v{v}" / "__init__.py"] = ""
        out[pkg / "__init__.py"] = ""
    out[GENERATED_DIR / "__init__.py"] = '"""Generated message classes (see ../codegen.py)."""\n'
    return out


def main() -> int:
    for path, text in outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
