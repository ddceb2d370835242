"""`skillos run`'s options to a `RunOptions` (`harness.runner.run_options`), without the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner import RunOptions, run_options

DEFAULTS = {"env": "reasoning", "split": None, "method": "skillos", "param": [], "baseline": True,
            "from_repo": None, "limit": None, "task_type": None, "per_type": None, "seeds": 3, "order": "grouped",
            "concurrency": 1, "k": 5, "retrieval": "bm25", "max_turns": 30, "history_len": 30, "acting": [],
            "oracle_judge": False}


def test_the_options_as_run_options():
    opts = run_options(**{**DEFAULTS, "method": "skillos, sapo,skillos", "param": ["sapo.promote_every=3"],
                          "oracle_judge": True, "acting": ["demos=generic"]})
    assert isinstance(opts, RunOptions) and opts.methods == ["skillos", "sapo", "none"]
    assert opts.params["sapo"]["promote_every"] == 3 and opts.self_judge is False
    assert opts.acting is not None and opts.acting.demos == "generic"
    assert opts.urls == {} and opts.out == Path("runs")    # the command's, once it knows the stack
    bare = run_options(**{**DEFAULTS, "baseline": False})
    assert bare.methods == ["skillos"] and bare.acting is None and bare.self_judge is True


@pytest.mark.parametrize(("change", "says"), [
    ({"env": "minecraft"}, "unknown env 'minecraft'"), ({"method": " , "}, "--method is empty"),
    ({"method": "memgpt"}, "unknown method"), ({"order": "random"}, "unknown order"),
    ({"retrieval": "semantic"}, "unknown retrieval"), ({"acting": ["demos"]}, "demos")])
def test_what_is_refused_says_what_to_fix(change, says):
    with pytest.raises(ValueError, match=says):
        run_options(**{**DEFAULTS, **change})
