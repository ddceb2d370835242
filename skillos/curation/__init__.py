"""Curation: what a curator op is, how it is read from a completion, and when it is refused.

**An op** is one function call of the curator on the skill repo, one of three (`ops.py`, a
discriminated pydantic union on ``name``):

    new_skill_insert(skill_name, content)                add a skill; refused if the name exists
    skill_update(skill_name, new_name?, new_content?)    rewrite and/or rename; the skill must exist
    skill_delete(skill_name)                             remove; the skill must exist

**A decision** is one completion of the curator after one task: zero or more calls. Each call gets
one `OpVerdict` (`verdict.py`):

1. `parse.parse_curator_output` reads the calls (tools API, ``<tool_call>`` tags, JSON, Python-style
   text). It never raises: an unreadable call is still a call, with ``error`` set.
2. `validate.validate` refuses, before anything is sent, a call that is unreadable, names no op,
   lacks a required string argument, is a ``skill_update`` with neither ``new_content`` nor
   ``new_name``, or whose name or content is not a well-formed skill (`skillos.skills`).
3. The calls that pass go to the skill repo as one batch **applied op by op, not atomically**
   (`decision.ATOMIC`): each valid op is applied in order and sees the ones before it; an op the
   repo refuses for its state (the skill exists / does not exist) writes nothing and does not stop
   the others. `verdict.settle` copies the repo's answer onto the call, a refusal making it invalid.

**Invariant**: every call of a decision has exactly one verdict, and ``valid`` is true iff the call
was well-formed *and* (when the decision was applied) executed by the repo. r_fc of a decision is
valid calls / calls (`verdict.validity_rate`; no call at all counts 1.0, abstaining is a valid
decision), which is the paper's "fraction of generated function calls that are valid and
successfully executed". That per-call fraction is why the batch is not atomic: all-or-nothing would
turn one bad call into zero executed calls and r_fc into a yes/no per decision.

No I/O: `schema` makes what the LLM is asked for (the tools definition and the JSON-mode schema),
`prompt` the messages; `decision.curate` runs one decision through a `ChatLLM` (`llm.py`: the HTTP
client and the trainer's policy both satisfy it) and an `OpsPort` (the skill repo client) that the
caller passes in.

**Its own types**: `curate` takes a `DecisionRequest` and returns a `Decision` (`types.py`, plain
dataclasses), and refuses the caller's mistakes with `CurationRequestError`, which carries no HTTP
status. The curator service and the trainer map them to the wire (`skillos.protocol.curator`, which
imports this package's leaf modules; nothing here imports a wire schema) and to HTTP errors.
"""

from skillos.curation.decision import ATOMIC, OpsPort, curate, token_trace
from skillos.curation.llm import ChatLLM
from skillos.curation.ops import (
    CURATOR_OP,
    OP_NAMES,
    OP_TYPES,
    CuratorOp,
    NewSkillInsert,
    OpName,
    SkillDelete,
    SkillUpdate,
)
from skillos.curation.options import CurationOptions, llm_arguments, response_format_for
from skillos.curation.parse import ParsedCall, content_from_fields, parse_curator_output
from skillos.curation.prompt import build_curator_messages
from skillos.curation.schema import CURATOR_JSON_SCHEMA, CURATOR_TOOLS, MAX_TEXT, curator_json_schema
from skillos.curation.types import CurationRequestError, Decision, DecisionRequest, DecisionUsage, TokenTrace
from skillos.curation.validate import validate
from skillos.curation.verdict import OpVerdict, settle, validity_rate

__all__ = [
    "ATOMIC", "CURATOR_JSON_SCHEMA", "CURATOR_OP", "CURATOR_TOOLS", "MAX_TEXT", "OP_NAMES", "OP_TYPES",
    "ChatLLM", "CurationOptions", "CurationRequestError", "CuratorOp", "Decision", "DecisionRequest",
    "DecisionUsage", "NewSkillInsert", "OpName", "OpVerdict", "OpsPort", "ParsedCall", "SkillDelete",
    "SkillUpdate", "TokenTrace", "build_curator_messages", "content_from_fields", "curate",
    "curator_json_schema", "llm_arguments", "parse_curator_output", "response_format_for", "settle",
    "token_trace", "validate", "validity_rate",
]
