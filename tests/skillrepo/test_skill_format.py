"""The skill format: parse/serialize round trip, names, how a curator call becomes a skill."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillos.skills import (
    SkillDoc,
    SkillFormatError,
    from_fields,
    normalize_name,
    parse,
    serialize,
    skill_from_call,
    validate_name,
)

names = st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,4}", fullmatch=True)
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=200)
# any text a skill may hold: everything but NUL, which the format refuses (test_nul_is_refused_anywhere)
# NUL and lone surrogates are refused by design (test below): not text a skill can hold
any_text = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
meta_values = st.one_of(st.integers(), st.booleans(), st.text(any_text, max_size=20),
                        st.lists(st.text(any_text, max_size=5), max_size=3))


@settings(max_examples=150, deadline=None)
@given(name=names, description=texts.filter(lambda s: s.strip()), body=st.text(any_text, max_size=500),
       metadata=st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True).filter(
           lambda k: k not in ("name", "description")), meta_values, max_size=3))
def test_parse_serialize_round_trip(name, description, body, metadata):
    doc = from_fields(name, description, body, metadata)
    text = serialize(doc)
    again = parse(text)
    assert again == doc
    assert serialize(again) == text


def test_nul_is_refused_anywhere():
    for args in (("a", "d", "x\x00y", {}), ("a", "d", "body", {"k": "x\x00"})):
        with pytest.raises(SkillFormatError) as e:
            from_fields(*args)
        assert "NUL" in e.value.message


def test_a_lone_surrogate_is_refused_anywhere():
    for args in (("a", "d", "x\ud800y", {}), ("a", "d", "body", {"k": "x\udfff"})):
        with pytest.raises(SkillFormatError):
            from_fields(*args)


def test_frontmatter_keys_kept_in_order_and_dates_stay_text():
    doc = parse("---\nname: a-b\ndescription: d\nversion: 3\ncreated: 2024-01-02\ntags: [x, y]\n---\n\nbody\n")
    assert doc.metadata == {"version": 3, "created": "2024-01-02", "tags": ["x", "y"]}
    assert list(doc.metadata) == ["version", "created", "tags"]
    assert "created: '2024-01-02'" in serialize(doc) or "created: 2024-01-02" in serialize(doc)
    assert parse(serialize(doc)) == doc


@pytest.mark.parametrize("bad", ["", "-a", "a-", "a--b", "A", "a_b", "a b", "é", "a" * 65])
def test_invalid_names_refused_with_reason(bad):
    with pytest.raises(SkillFormatError) as e:
        validate_name(bad)
    assert e.value.code == "invalid_name" and e.value.message


@pytest.mark.parametrize("raw,expected", [
    ("Clean Object Workflow", "clean-object-workflow"),
    ("  heat__the--MUG!! ", "heat-the-mug"),
    ("Crème Brûlée", "creme-brulee"),
    ("x" * 40 + " " + "y" * 40, "x" * 40),
    ("z" * 70, "z" * 64),
])
def test_normalize_name(raw, expected):
    assert normalize_name(raw) == expected
    validate_name(normalize_name(raw))


@pytest.mark.parametrize("raw", ["", "!!!", "日本語", None, 5])
def test_normalize_refuses_names_without_letters(raw):
    with pytest.raises(SkillFormatError) as e:
        normalize_name(raw)
    assert e.value.code == "invalid_name"


@pytest.mark.parametrize("text,code", [
    ("no frontmatter", "missing_frontmatter"),
    ("---\nname: a\ndescription: b\n", "malformed_frontmatter"),
    ("---\nname: [a\n---\n", "invalid_yaml"),
    ("---\n- a\n- b\n---\n", "invalid_yaml"),
    ("---\nname: Bad Name\ndescription: d\n---\n", "invalid_name"),
    ("---\nname: ok\n---\nbody", "invalid_description"),
    ("---\nname: ok\ndescription: " + "d" * 1025 + "\n---\n", "invalid_description"),
    ("---\nname: ok\ndescription: 5\n---\n", "invalid_description"),
])
def test_bad_documents_refused_with_code(text, code):
    with pytest.raises(SkillFormatError) as e:
        parse(text)
    assert e.value.code == code


def test_body_limit():
    with pytest.raises(SkillFormatError) as e:
        parse("---\nname: a\ndescription: d\n---\n" + "x" * 101, max_body_bytes=100)
    assert e.value.code == "body_too_large" and "100" in e.value.message


def test_call_with_body_only_derives_description():
    doc = skill_from_call("Heat Object", "## Heat things in the microwave\n\n1. take it\n2. heat it")
    assert doc == SkillDoc("heat-object", "Heat things in the microwave",
                           "## Heat things in the microwave\n\n1. take it\n2. heat it", {})


def test_call_skill_name_wins_over_frontmatter_name():
    doc = skill_from_call("cool-object", "---\nname: other\ndescription: use the fridge\nx: 1\n---\nsteps")
    assert (doc.name, doc.description, doc.body, doc.metadata) == ("cool-object", "use the fridge", "steps", {"x": 1})


@pytest.mark.parametrize("content,code", [("", "empty_content"), ("   \n", "empty_content"), (None, "empty_content"),
                                          ("---\ndescription: d\n", "malformed_frontmatter")])
def test_call_refusals(content, code):
    with pytest.raises(SkillFormatError) as e:
        skill_from_call("ok-name", content)
    assert e.value.code == code


@settings(max_examples=400, deadline=None)
@given(st.from_regex(r"[a-zA-Z0-9 -]{1,12}", fullmatch=True), st.from_regex(r"[a-zA-Z0-9 ]{1,40}", fullmatch=True))
def test_plain_frontmatter_is_what_yaml_writes(name, description):
    """The frontmatter written without the YAML emitter (plain names and descriptions, the bulk-import
    path) is byte for byte what yaml.dump writes: a skill's blob hash must not depend on the path it came by."""
    import yaml

    from skillos.skills import _plain_front

    want = yaml.dump({"name": name, "description": description}, Dumper=yaml.SafeDumper, sort_keys=False,
                     allow_unicode=True, width=1 << 30)
    assert _plain_front(name, description) == want


@pytest.mark.parametrize("text", ["yes", "No", "TRUE", "off", "null", "y", "Use when apple", "a  b", "a b ",
                                  " a", "x1", "e5", "inf", "nan", "a-b", "Null", "On the desk"])
def test_plain_frontmatter_edge_cases(text):
    import yaml

    from skillos.skills import _plain_front

    for name, desc in (("mug-heat", text), (text.lower().replace(" ", "-"), "d")):
        want = yaml.dump({"name": name, "description": desc}, Dumper=yaml.SafeDumper, sort_keys=False,
                         allow_unicode=True, width=1 << 30)
        assert _plain_front(name, desc) == want


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=1024))
def test_a_name_and_description_alone_fit_the_frontmatter_bound(text):
    """`from_fields` skips the YAML size check when there is no metadata: a longest name and any
    description of at most 1,024 characters must be within FRONTMATTER_MAX_BYTES as YAML."""
    from skillos.skills import FRONTMATTER_MAX_BYTES, _front_yaml

    try:
        doc = from_fields("a" * 64, text, "b")
    except SkillFormatError as e:
        assert e.code in {"invalid_description", "invalid_character"}  # blank, too long, a NUL, a surrogate
        return
    assert len(_front_yaml(doc).encode("utf-8")) <= FRONTMATTER_MAX_BYTES


def test_the_widest_escapes_fit_the_frontmatter_bound():
    """Every character repeated to the description's limit (a sample of every plane; with libyaml an escaped
    one takes up to 10 bytes as YAML, \\UXXXXXXXX): the frontmatter of a name and description alone stays
    within the bound."""
    import yaml

    from skillos.skills import DESCRIPTION_MAX, FRONTMATTER_MAX_BYTES, NAME_MAX, _front_yaml, _SafeDumper

    widest = 0
    for cp in [*range(0x800), *range(0x800, 0x110000, 251), 0x1F600, 0xF0000]:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        try:
            doc = from_fields("a" * NAME_MAX, chr(cp) * DESCRIPTION_MAX, "b")
        except SkillFormatError:
            continue  # blank once stripped, or a NUL
        widest = max(widest, len(_front_yaml(doc).encode("utf-8")))
    # libyaml escapes astral characters (10 bytes each); PyYAML's own emitter writes them as UTF-8 (4)
    assert (10_300 if _SafeDumper is getattr(yaml, "CSafeDumper", None) else 4_000) < widest <= FRONTMATTER_MAX_BYTES


@pytest.mark.parametrize("name", ["abc\n", "abc\n\n", "\nabc", "abc\r"])
def test_a_name_with_a_newline_is_refused(name):
    with pytest.raises(SkillFormatError) as e:
        from_fields(name, "d", "b")
    assert e.value.code == "invalid_name"
