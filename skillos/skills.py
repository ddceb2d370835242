"""The skill format: a SKILL.md-compatible Markdown document with YAML frontmatter.

    ---
    name: clean-object-workflow          # 1-64 chars of a-z 0-9 '-', no leading/trailing/doubled '-'
    description: When a task asks ...    # 1-1024 chars, says when to use the skill
    any-other-key: kept as it is         # further frontmatter keys are metadata, preserved in order
    ---

    Markdown instructions (the body).

`parse` and `serialize` round-trip: ``parse(serialize(s)) == s`` and ``serialize(parse(t))`` is the
canonical text of ``t``. The body is kept as written except that blank lines before it and trailing
whitespace after it are dropped.

How a curator call becomes a skill (`skill_from_call`):
  * ``skill_name`` is normalized (`normalize_name`): lower-cased, accents folded to ASCII, every run of
    other characters becomes one '-', cut to 64 chars at a word boundary. "Clean Object Workflow" ->
    "clean-object-workflow". A name with no letter or digit left is refused (``invalid_name``).
  * ``content`` may be a whole document (frontmatter + body) or just the body. The call's ``skill_name``
    is authoritative: a different ``name`` in the frontmatter is replaced by it.
  * Without a ``description`` the first non-empty line of the body (Markdown heading marks removed)
    becomes the description, cut to 1024 chars.
  * Refused with a reason: empty content, malformed frontmatter or YAML, a body over the size limit.

What a document may not hold (refused with a reason, whatever the route): the key `EXAMPLES_KEY`
(a skill's worked examples are kept beside its document, written by the system: ``reserved_key``), frontmatter over
`FRONTMATTER_MAX_BYTES` or nested deeper than `METADATA_MAX_DEPTH`, YAML anchors and aliases (``&a``,
``*a``: a few hundred bytes of aliases expand to gigabytes), values that are not JSON (``!!binary``,
``!!set``, ``!!timestamp``), and NUL characters or lone surrogates anywhere (storage refuses them).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

import yaml

from skillos.textguard import bad_char, check_value

NAME_MAX = 64
DESCRIPTION_MAX = 1024
DEFAULT_MAX_BODY_BYTES = 64 * 1024
FRONTMATTER_MAX_BYTES = 16 * 1024  # name, description (<= 1024 chars) and the metadata, as YAML
# where the skill repo keeps a skill's worked examples in its stored metadata: never a frontmatter key
EXAMPLES_KEY = "x-skillos-examples"
METADATA_MAX_DEPTH = 32            # levels of the frontmatter mapping (itself level 1)
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FRONTMATTER_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)(?:\r?\n)?^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)


class SkillFormatError(ValueError):
    """A skill document or call that cannot become a skill; ``code`` is stable, ``message`` says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class SkillDoc:
    """A skill. ``examples``: its worked examples (`WorkedExample.model_dump(mode="json")` each), kept with it
    by the skill repo but never part of its SKILL.md text (`serialize` leaves them out)."""
    name: str
    description: str
    body: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_markdown(self) -> str:
        return serialize(self)


# libyaml's C parser/emitter when present (several times faster), the pure-Python ones otherwise
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Loader(_SafeLoader):
    """SafeLoader without the timestamp resolver: dates stay strings so metadata stays JSON-safe."""


_Loader.yaml_implicit_resolvers = {
    ch: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for ch, resolvers in _SafeLoader.yaml_implicit_resolvers.items()
}


def validate_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise SkillFormatError("invalid_name", "skill name is missing: give 1-64 chars of a-z, 0-9 and '-'")
    if len(name) > NAME_MAX:
        raise SkillFormatError("invalid_name", f"skill name is {len(name)} chars long; the limit is {NAME_MAX}")
    if not NAME_RE.fullmatch(name):  # (match with "$" would take a name ending in a newline)
        raise SkillFormatError(
            "invalid_name",
            f"skill name {name!r} is invalid: use only a-z, 0-9 and single '-' between words "
            f"(no leading, trailing or doubled '-'), e.g. {normalize_name(name, strict=False) or 'clean-object'!r}")
    return name


def validate_description(description: Any) -> str:
    if not isinstance(description, str) or not description.strip():
        raise SkillFormatError("invalid_description",
                               "description is missing: say in 1-1024 chars when the skill should be used")
    description = description.strip()
    if bad := bad_char(description):
        raise SkillFormatError("invalid_character", f"the description holds {bad}: remove it")
    if len(description) > DESCRIPTION_MAX:
        raise SkillFormatError("invalid_description",
                               f"description is {len(description)} chars long; the limit is {DESCRIPTION_MAX}")
    return description


def normalize_name(raw: Any, *, strict: bool = True) -> str:
    """Turn a free-form name into a valid one; raise (strict) or return '' when nothing is left."""
    text = raw if isinstance(raw, str) else ""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    name = re.sub(r"[^a-z0-9]+", "-", folded).strip("-")
    if len(name) > NAME_MAX:
        cut = name[:NAME_MAX]
        if name[NAME_MAX] != "-" and "-" in cut:  # do not cut a word in half
            cut = cut[:cut.rfind("-")]
        name = cut.strip("-")
    if not name and strict:
        raise SkillFormatError("invalid_name",
                               f"skill name {raw!r} has no letters or digits: give a short name such as "
                               "'clean-object-workflow'")
    return name


def _clean_body(body: str) -> str:
    return body.lstrip("\r\n").rstrip()


def _check_text(text: str, what: str) -> str:
    if bad := bad_char(text):
        raise SkillFormatError("invalid_character", f"{what} holds {bad}: remove it")
    return text


def _check_body(body: str, max_body_bytes: int) -> str:
    _check_text(body, "the body")
    size = len(body.encode("utf-8"))
    if size > max_body_bytes:
        raise SkillFormatError("body_too_large",
                               f"skill body is {size} bytes; the limit is {max_body_bytes}: shorten it")
    return body


def split_frontmatter(text: str, *, max_bytes: int = FRONTMATTER_MAX_BYTES) -> tuple[dict[str, Any] | None, str]:
    """(frontmatter mapping or None when there is none, body). ``max_bytes``: the frontmatter's bound (a
    worked example's file has its own, `skillos.worked_examples` bounds every field)."""
    if not text.startswith("---"):
        return None, text
    m = _FRONTMATTER_RE.match(text)
    if not m:
        raise SkillFormatError("malformed_frontmatter",
                               "the document starts with '---' but the frontmatter is never closed: "
                               "end it with a line '---'")
    data = _load_frontmatter(m.group(1), max_bytes)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SkillFormatError("invalid_yaml", "the frontmatter must be a YAML mapping of keys to values")
    front = {str(k): v for k, v in data.items()}
    _check_metadata(front)
    return front, text[m.end():]


_OPEN_EVENTS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSE_EVENTS = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _load_frontmatter(text: str, max_bytes: int = FRONTMATTER_MAX_BYTES) -> Any:
    """The frontmatter's YAML, refused before it is built when it is too big, too deep or uses aliases."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise SkillFormatError("frontmatter_too_large", f"the frontmatter is {size} bytes; the limit is "
                                                        f"{max_bytes}: move long text into the body")
    _check_text(text, "the frontmatter")
    try:
        # every level of nesting takes an indicator ('-', '?', ':', '[', '{') and an alias a '*': without
        # enough of them (the usual frontmatter) the YAML is loaded at once; otherwise its events are read
        # first (libyaml's parser keeps its own stack, it does not recurse), so that an alias is refused
        # before anything expands it and deep nesting before the recursive composer and constructor see it
        if "*" in text or "&" in text or sum(map(text.count, "-?:[{")) > METADATA_MAX_DEPTH:
            _scan_events(text)
        return yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as e:
        raise SkillFormatError("invalid_yaml", f"the frontmatter is not valid YAML: {e}".replace("\n", " ")) from e


def _scan_events(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise SkillFormatError("yaml_alias", "the frontmatter uses YAML anchors or aliases (&name, *name): "
                                                 "write each value out instead")
        if isinstance(event, _OPEN_EVENTS):
            depth += 1
            if depth > METADATA_MAX_DEPTH:
                raise SkillFormatError("frontmatter_too_deep", f"the frontmatter is nested deeper than "
                                                               f"{METADATA_MAX_DEPTH} levels")
        elif isinstance(event, _CLOSE_EVENTS):
            depth -= 1


def _check_metadata(meta: dict[str, Any]) -> None:
    """Metadata is stored as JSON and written back as YAML: JSON values only, bounded depth, clean text."""
    problem = check_value(meta, max_depth=METADATA_MAX_DEPTH, json_only=True, what="the frontmatter")
    if problem is not None:
        code = {"too_deep": "frontmatter_too_deep", "invalid_character": "invalid_character"}.get(
            problem.code, "invalid_metadata")
        raise SkillFormatError(code, problem.message)


def _check_reserved(meta: dict[str, Any]) -> None:
    if EXAMPLES_KEY in meta:
        raise SkillFormatError("reserved_key", f"the key {EXAMPLES_KEY!r} is reserved: a skill's worked examples "
                                               "are set through its examples route (POST /v1/repos/{repo}/skills/"
                                               "{name}/examples) or an archive's <name>/examples/ folder")


def parse(text: str, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> SkillDoc:
    """Parse a whole SKILL.md document (frontmatter required)."""
    if not isinstance(text, str):
        raise SkillFormatError("invalid_document", "a skill document must be text")
    front, body = split_frontmatter(text)
    if front is None:
        raise SkillFormatError("missing_frontmatter",
                               "a skill document starts with YAML frontmatter: '---', 'name: ...', "
                               "'description: ...', '---', then the body")
    _check_reserved(front)
    name = validate_name(front.pop("name", None))
    description = validate_description(front.pop("description", None))
    return SkillDoc(name, description, _check_body(_clean_body(body), max_body_bytes), front)


def _front_yaml(doc: SkillDoc) -> str:
    if not doc.metadata:
        return _plain_front(doc.name, doc.description)
    front = {"name": doc.name, "description": doc.description, **doc.metadata}
    return yaml.dump(front, Dumper=_SafeDumper, sort_keys=False, allow_unicode=True, width=1 << 30)


# What YAML writes as it is (a plain scalar): a letter first, then letters, digits, single spaces (names:
# hyphens), and not a word YAML reads as a boolean or null. For those the frontmatter is written without
# the emitter (tests/skillrepo/test_skill_format.py checks it byte for byte against yaml.dump): a third of
# a bulk import's time was YAML.
_PLAIN_NAME = re.compile(r"[a-z][a-z0-9-]*")
_PLAIN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9]*(?: [A-Za-z0-9]+)*")
_YAML_WORDS = frozenset(["yes", "no", "true", "false", "on", "off", "null", "y", "n"])


def _plain_front(name: str, description: str) -> str:
    if (_PLAIN_NAME.fullmatch(name) and _PLAIN_TEXT.fullmatch(description)
            and name.lower() not in _YAML_WORDS and description.lower() not in _YAML_WORDS):
        return f"name: {name}\ndescription: {description}\n"
    return yaml.dump({"name": name, "description": description}, Dumper=_SafeDumper, sort_keys=False,
                     allow_unicode=True, width=1 << 30)


def serialize(doc: SkillDoc) -> str:
    head = _front_yaml(doc)
    body = _clean_body(doc.body)
    return f"---\n{head}---\n" + (f"\n{body}\n" if body else "")


def from_fields(name: Any, description: Any, body: Any = "", metadata: dict[str, Any] | None = None, *,
                max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> SkillDoc:
    if not isinstance(body, str):
        raise SkillFormatError("invalid_body", "body must be text")
    meta = dict(metadata or {})
    for reserved in ("name", "description"):
        if reserved in meta:
            raise SkillFormatError("invalid_metadata", f"metadata must not contain {reserved!r}: "
                                                       "give it as its own field")
    _check_reserved(meta)
    if meta:
        # the same rules as a document's frontmatter (depth first: the YAML emitter recurses)
        _check_metadata({"name": "", "description": "", **meta})
    doc = SkillDoc(validate_name(name), validate_description(description),
                   _check_body(_clean_body(body), max_body_bytes), meta)
    if not meta:
        # nothing more to check: a name and a description alone are always YAML, and within the bound (every
        # character escaped, the widest as \UXXXXXXXX, is 10,327 bytes; tests/skillrepo/test_skill_format.py)
        return doc
    # metadata must survive the YAML round trip unchanged (e.g. no Python objects)
    try:
        head = _front_yaml(doc)
    except yaml.YAMLError as e:
        raise SkillFormatError("invalid_metadata", f"metadata cannot be written as YAML: {e}") from e
    size = len(head.encode("utf-8"))
    if size > FRONTMATTER_MAX_BYTES:
        raise SkillFormatError("frontmatter_too_large", f"the frontmatter (name, description, metadata) is {size} "
                                                        f"bytes as YAML; the limit is {FRONTMATTER_MAX_BYTES}")
    return doc


def _first_line(body: str) -> str:
    for line in body.splitlines():
        line = line.strip().lstrip("#").strip().strip("*_").strip()
        if line and line != "---":
            return line[:DESCRIPTION_MAX]
    return ""


def skill_from_call(skill_name: Any, content: Any, *,
                    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> SkillDoc:
    """Build a skill from a curator call's ``skill_name`` and ``content`` (rules in the module doc)."""
    name = normalize_name(skill_name)
    if not isinstance(content, str) or not content.strip():
        raise SkillFormatError("empty_content", "content is empty: give the skill's Markdown instructions")
    front, body = split_frontmatter(content.strip("\ufeff"))
    front = dict(front or {})
    _check_reserved(front)
    front.pop("name", None)  # the call's skill_name is authoritative
    body = _clean_body(body)
    description = front.pop("description", None)
    if description is None or (isinstance(description, str) and not description.strip()):
        description = _first_line(body)
        if not description:
            raise SkillFormatError("empty_content",
                                   "content has no body and no description: write the skill's instructions")
    return SkillDoc(name, validate_description(description), _check_body(body, max_body_bytes), front)
