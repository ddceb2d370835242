"""Per-step metrics: JSONL (the record), TensorBoard (live view) and a report (``report.png``, ``report.md``).

The files and their rows are the run folder's contract (`skillos.protocol.runs`): ``metrics.jsonl``
(`MetricsRow`), ``rollouts/step-*.jsonl`` (`RolloutRow`), ``tensorboard/``, ``report.png``, ``report.md``.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from pathlib import Path
from typing import Any

from skillos.models.store import converted_dir
from skillos.protocol.runs import (
    ROLLOUTS_FILE,
    MetricsRow,
    RolloutRow,
    RunFolder,
    read_jsonl,
    to_dict,
)
from skillos.textguard import without_lone_surrogates


class MetricsWriter:
    def __init__(self, output_dir: Path, tensorboard: bool = True):
        folder = RunFolder(output_dir)
        self.path = folder.metrics
        output_dir.mkdir(parents=True, exist_ok=True)
        self._tb = None
        if tensorboard:
            # imported here: torch (and its TensorBoard writer) is heavy, and a writer without it needs none
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(folder.tensorboard_dir))

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after the checkpoint (they will be redone)."""
        if not self.path.exists():
            return
        keep = [line for line in self.path.read_text().splitlines()
                if line.strip() and MetricsRow.model_validate_json(line).step <= step]
        self.path.write_text("".join(line + "\n" for line in keep))

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        line = to_dict(MetricsRow(step=step, **metrics))
        with self.path.open("a") as f:
            f.write(json.dumps(line, default=float) + "\n")
        if self._tb is not None:
            for key, value in _flatten(metrics).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [to_dict(m) for m in read_jsonl(path, MetricsRow)]


def write_rollouts(output_dir: Path, step: int, groups) -> Path:
    """rollouts/step-NNNNNN.jsonl: one line per rollout (`log_row`: for the curator its reward parts,
    advantage and, per decision, the completion, the calls with their verdicts and the scores; for the
    agent its tasks' outcomes and method records and its samples' credit), rewritten when a step is redone."""
    path = RunFolder(output_dir).rollouts(step)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for g in groups:
            for r in g.rollouts:
                line = to_dict(RolloutRow.model_validate({"group": g.group_id, **r.log_row()}))
                # a completion may end inside a character (a lone surrogate): UTF-8 cannot hold it, and the
                # record of a step must not stop the run (it did, at step 4 of the 0.5B learning run)
                f.write(without_lone_surrogates(json.dumps(line, ensure_ascii=False, default=str)) + "\n")
    return path


PANELS = [
    ("reward", ["reward/total", "reward/task", "reward/fc", "reward/cnt", "reward/comp"]),
    ("learning signal", ["signal/groups_nonzero_std_frac", "signal/adv_abs_mean", "signal/parse_rate",
                         "signal/call_valid_rate", "signal/task_groups_with_signal_frac"]),
    ("agent: outcome", ["reward/outcome", "success_rate"]),
    ("agent: |A| per segment", ["signal/adv_abs_mean/act", "signal/adv_abs_mean/query", "signal/adv_abs_mean/rerank",
                                "signal/adv_abs_mean/distill", "signal/adv_abs_mean/induce"]),
    ("op mix (Fig. 4)", ["ops/new_skill_insert", "ops/skill_update", "ops/skill_delete", "ops/invalid"]),
    ("repo size (skills)", ["repo/skills_mean"]),
    ("lengths (tokens)", ["lengths/prompt_mean", "lengths/completion_mean"]),
    ("update", ["update/grad_norm", "update/clip_fraction", "update/kl_ref"]),
    ("time split (s)", ["time/rollout_s", "time/update_s", "time/sync_s"]),
]


_GROUP_ID = re.compile(r"^[^-]+-(?P<family>.+)-\d+$")


def task_family(group_id: str) -> str | None:
    """The task family of a group id `<env>-<family>-<NNNN>` (group_by_family's and group_by_type's); None for
    other ids (`skillos group reasoning`'s chains are `<env>-<NNNNN>`: no family in them)."""
    m = _GROUP_ID.match(group_id)
    return m.group("family") if m else None


def _rollout_rows(rollouts_dir: Path, steps: set[int] | None) -> dict[int, list[RolloutRow]]:
    """step -> its rollout rows (a torn last line of a live file skipped), for ``steps`` (those in metrics.jsonl:
    a resume redoes the steps after its checkpoint, and their files stay until then) or all."""
    out: dict[int, list[RolloutRow]] = {}
    for path in sorted(rollouts_dir.glob("step-*.jsonl")) if rollouts_dir.is_dir() else []:
        m = ROLLOUTS_FILE.match(path.name)
        if m and (steps is None or int(m["step"]) in steps):
            out[int(m["step"])] = list(read_jsonl(path, RolloutRow))
    return out


def reward_by_family(rollouts_dir: Path, steps: set[int] | None = None) -> dict[str, list[tuple[int, float]]]:
    """family -> [(step, a group's mean reward over its rollouts)]: Eq. 1's total for the curator, the outcome for
    the agent; groups whose id names no family are left out."""
    return _families(_rollout_rows(rollouts_dir, steps))


def _families(rollouts: dict[int, list[RolloutRow]]) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for step, group, played in _drawn_groups(rollouts):
        values = [v for v in ((r.get("reward") or {}).get("total", r.get("outcome")) for r in played)
                  if isinstance(v, (int, float))]
        family = task_family(group)
        if values and family is not None:
            out.setdefault(family, []).append((step, sum(values) / len(values)))
    return out


def _drawn_groups(rollouts: dict[int, list[RolloutRow]]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """(step, group id, its rollouts' rows as dicts) for each group played, in step order: a group drawn twice
    in one step (across an epoch's end) is two groups, told apart by its rollout 0 coming again."""
    out: list[tuple[int, str, list[dict[str, Any]]]] = []
    for step, rows in sorted(rollouts.items()):
        current: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            if row.rollout == 0 or row.group not in current:
                current[row.group] = []
                out.append((step, row.group, current[row.group]))
            current[row.group].append(to_dict(row))
    return out


def spread_by_family(rollouts: dict[int, list[RolloutRow]], weights: dict[str, float]) -> dict[str, dict[str, Any]]:
    """family -> where the reward's spread within its groups comes from. A rollout's advantage is its reward
    minus its group's mean (no std normalization, as in the paper), so GRPO learns from that spread alone and
    its size sets the update's: a term every rollout of a group shares adds nothing however large it is.
    Per family: the groups (of two rollouts or more: one alone has no spread), the mean r_task, how many groups
    had the same r_task in every rollout, the mean over groups of the total's standard deviation across the
    group's rollouts, and each term's part of it: cov(weight x term, total) / std(total), parts that add up to
    the total's std (a term that offsets another has a negative part). ``weights``: Eq. 1's, r_task's 1."""
    out: dict[str, dict[str, Any]] = {}
    for _, group, played in _drawn_groups(rollouts):
        rewards = [r["reward"] for r in played
                   if isinstance(r.get("reward"), dict) and isinstance(r["reward"].get("total"), (int, float))]
        family = task_family(group)
        if family is None or len(rewards) < 2:
            continue
        f = out.setdefault(family, {"groups": 0, "task": 0.0, "flat_task": 0, "std": 0.0, "parts": {}})
        f["groups"] += 1
        tasks = [r.get("task", 0.0) for r in rewards]
        f["task"] += sum(tasks) / len(tasks)
        f["flat_task"] += max(tasks) == min(tasks)
        n = len(rewards)
        total = [r["total"] for r in rewards]
        t_mean = sum(total) / n
        std = math.sqrt(sum((t - t_mean) ** 2 for t in total) / n)
        f["std"] += std
        for term, weight in weights.items():
            values = [weight * r.get(term, 0.0) for r in rewards]
            v_mean = sum(values) / n
            cov = sum((v - v_mean) * (t - t_mean) for v, t in zip(values, total, strict=True)) / n
            f["parts"][term] = f["parts"].get(term, 0.0) + (cov / std if std > 0 else 0.0)
    for f in out.values():
        f["task"] /= f["groups"]
        f["std"] /= f["groups"]
        f["parts"] = {term: part / f["groups"] for term, part in f["parts"].items()}
    return out


def disagreement_by_position(rollouts: dict[int, list[RolloutRow]]) -> list[dict[str, Any]]:
    """Per task position in a curator run's groups (1 = the first task, played on the repo each rollout starts
    from): the groups that reached it, how many of them had rollouts that disagreed on its success, and the mean
    success. The first task's prompt is the same in every rollout, so its disagreements are the executor's own
    noise; a later task's prompts differ by the skills the rollout's curator wrote, so its disagreements are the
    credit r_task (tasks 2..|G|) can give the curator: a rate near the first task's says the skills move the
    executor no more than its noise does, and a higher one that they move it (to a win or a loss: a changed
    prompt can flip a greedy answer either way)."""
    out: list[dict[str, Any]] = []
    for _, _, played in _drawn_groups(rollouts):
        # a curator's rows (Eq. 1's r_task in the reward): an agent's successes are its own episodes'
        runs = [[bool(s) for s in r["successes"]] for r in played
                if isinstance(r.get("successes"), list) and "task" in (r.get("reward") or {})]
        if len(runs) < 2:
            continue
        for j in range(min(map(len, runs))):
            while len(out) <= j:
                out.append({"position": len(out) + 1, "groups": 0, "disagreed": 0, "wins": 0, "plays": 0})
            col = [run[j] for run in runs]
            out[j]["groups"] += 1
            out[j]["disagreed"] += len(set(col)) > 1
            out[j]["wins"] += sum(col)
            out[j]["plays"] += len(col)
    for row in out:
        row["success"] = row.pop("wins") / row.pop("plays")
    return out


def adapter_drift(adapter_dir: Path, base_dir: Path | None = None) -> dict[str, Any] | None:
    """How far a LoRA adapter moves the weights it adapts: per module ||scale * B A||_F / ||W||_F (peft's scale:
    alpha over the module's rank, or its square root with rsLoRA), the mean and max over the modules found in
    the base, and how many were not. ``base_dir``: the safetensors of the model it was trained on (default the
    adapter's ``base_model_name_or_path``, or the torch copy converted from the GGUF there). None when there is
    nothing to compare: no adapter files, no base on
    this machine, no module of the base's shape, or an adapter this does not read (DoRA, per-module alphas).
    The scale against which a trained-vs-untrained comparison is read: how much the policy was changed at all.
    Raises what reading a damaged file raises (the report says so)."""
    cfg_path, weights = adapter_dir / "adapter_config.json", adapter_dir / "adapter_model.safetensors"
    if not (cfg_path.is_file() and weights.is_file()):
        return None
    cfg = json.loads(cfg_path.read_text())
    if cfg.get("use_dora") or cfg.get("alpha_pattern") or "lora_alpha" not in cfg:
        return None
    base = Path(base_dir or cfg.get("base_model_name_or_path") or "/nonexistent")
    base_files = sorted(base.glob("*.safetensors"))
    if not base_files and base_dir is None:
        # trained on a GGUF read directly (the first load on a machine): the torch copy converted from it
        for gguf in sorted(base.glob("*.gguf")):
            base_files = sorted((converted_dir(base, gguf.name) / "torch").glob("*.safetensors"))
            if base_files:
                break
    if not base_files:
        return None
    from safetensors import safe_open  # here: torch's, which a report without adapters does not load

    ratios, missing = [], 0
    with contextlib.ExitStack() as files:
        bases = [files.enter_context(safe_open(str(f), framework="pt")) for f in base_files]
        base_of = {k: b for b in bases for k in b.keys()}  # noqa: SIM118 (a safetensors handle, not a dict)
        lora = files.enter_context(safe_open(str(weights), framework="pt"))
        for key in sorted(k for k in lora.keys() if k.endswith("lora_A.weight")):  # noqa: SIM118
            module = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
            a = lora.get_tensor(key).double()
            b = lora.get_tensor(key.replace("lora_A", "lora_B")).double()
            w = base_of[module].get_tensor(module).double() if module in base_of else None
            if w is None or w.shape != (b.shape[0], a.shape[1]):
                missing += 1   # not in this base (a tied head, another model's names or sizes)
                continue
            rank = a.shape[0]
            scale = cfg["lora_alpha"] / (math.sqrt(rank) if cfg.get("use_rslora") else rank)
            ratios.append(float((scale * (b @ a)).norm() / w.norm()))
    if not ratios:
        return None
    return {"modules": len(ratios), "missing": missing, "mean": sum(ratios) / len(ratios), "max": max(ratios)}


def plot_report(metrics_path: Path, out_png: Path,
                families: dict[str, list[tuple[int, float]]] | None = None) -> Path:
    """One figure with a panel per metric family, from metrics.jsonl; and, for a curator run, the reward of each
    step's groups by task family (rollouts/): one group a step makes the plain reward curve mostly a record of
    which family was drawn, so a trend is read within a family."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [_flatten(r) for r in read_metrics(metrics_path)]
    # the panels this run has numbers for (a curator run has no agent panels, and the reverse)
    panels = [(t, keys) for t, keys in PANELS if any(isinstance(r.get(k), (int, float)) for r in rows for k in keys)]
    panels = panels or PANELS[:1]
    if families is None:
        families = reward_by_family(RunFolder(metrics_path.parent).rollouts_dir, {int(r["step"]) for r in rows})
    if families:
        panels.insert(1, ("reward by task family", families))
    cols = 4
    n_rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(n_rows, cols, figsize=(20, 4 * n_rows), squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        if isinstance(keys, dict):   # the family panel: family -> points
            for family, pts in sorted(keys.items()):
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=family)
            keys = []
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=key.split("/", 1)[-1])
        ax.set_title(title)
        ax.set_xlabel("step")
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=80)
    plt.close(fig)
    return out_png


def _num(v: Any, fmt: str = ".3f") -> str:
    return format(v, fmt) if isinstance(v, (int, float)) and math.isfinite(v) else "-"


def render_report(folder: RunFolder, rows: list[dict[str, Any]], rollouts: dict[int, list[RolloutRow]]) -> str:
    """report.md of a training run: what was trained, the figure, one row per step and the reward by family."""
    cfg = json.loads(folder.train_config.read_text()) if folder.train_config.is_file() else {}
    model, data, rollout = cfg.get("model", {}), cfg.get("data", {}), cfg.get("rollout", {})
    groups = {step: sorted({r.group for r in kept}) for step, kept in rollouts.items()}
    lines = [f"# Training run `{folder.path.name}`: {len(rows)} GRPO steps", ""]
    if cfg:
        blocks = f"the last {model['lora_layers']} blocks" if model.get("lora_layers") else "every block"
        lines += [(f"Policy `{model.get('path')}`" + (f" with LoRA on {blocks}" if model.get("lora") else "")
                   + f", {cfg.get('policy', 'curator')} policy; {data.get('env')} `{data.get('split')}`, "
                   f"{cfg.get('groups_per_step')} group(s) a step, {cfg.get('rollouts_per_group')} rollouts each; "
                   f"lr {cfg.get('lr')}, {cfg.get('steps')} steps planned; sync `{cfg.get('sync', {}).get('backend')}`"
                   + (f", episodes of at most {rollout.get('max_turns')} turns" if data.get("env") != "reasoning"
                      else "") + "."), ""]
    lines += [f"![metrics]({folder.train_report.name})", "",
              "| step | groups | reward | terms | valid calls | executor success | grad norm | rollout s | update s |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        reward = r.get("reward") or {}
        total = reward.get("total", reward.get("outcome"))
        terms = ", ".join(f"{k} {_num(v)}" for k, v in reward.items() if k not in ("total", "outcome"))
        t, sig = r.get("time") or {}, r.get("signal") or {}
        lines.append(f"| {r['step']} | {', '.join(groups.get(r['step'], [])) or '-'} | {_num(total)} | {terms or '-'} "
                     f"| {_num(sig.get('call_valid_rate'), '.0%')} | {_num(r.get('success_rate'), '.0%')} "
                     f"| {_num((r.get('update') or {}).get('grad_norm'), '.4f')} | {_num(t.get('rollout_s'), '.0f')} "
                     f"| {_num(t.get('update_s'), '.0f')} |")
    families = _families(rollouts)
    if families:
        lines += ["", ("Reward by task family (each group's mean over its rollouts, in step order: with a few groups "
                       "a step, the plain curve mostly records which families were drawn, so a trend is read within "
                       "one):"), "", "| family | steps | first | last | mean |", "|---|---|---|---|---|"]
        for family, pts in sorted(families.items()):
            vals = [v for _, v in pts]
            lines.append(f"| {family} | {', '.join(str(s) for s, _ in pts)} | {_num(vals[0])} | {_num(vals[-1])} "
                         f"| {_num(sum(vals) / len(vals))} |")
    known = all(f"lambda_{term}" in cfg for term in ("fc", "cnt", "comp"))
    weights = {"task": 1.0, **{term: cfg.get(f"lambda_{term}", 1.0) for term in ("fc", "cnt", "comp")}}
    spread = spread_by_family(rollouts, weights)
    if spread:
        said = (", ".join(f"{t} {w:g}" for t, w in weights.items()) if known
                else "not in config.json: each term unweighted, so the parts do not add up to the total's std")
        lines += ["", ("Where the reward's spread within a group comes from. A rollout's advantage is its reward "
                       "minus its group's mean, so GRPO learns from that spread alone: a term every rollout of a "
                       "group shares teaches nothing. Per family, over its groups of two rollouts or more: the "
                       "mean standard deviation of the total across a group's rollouts, and each term's part of it "
                       "(its weighted value's covariance with the total over the total's std: the parts add up to "
                       "the std, and a term that offsets another has a negative part; weights " + said + "); and "
                       "the groups whose rollouts all had the same r_task:"), "",
                  "| family | groups | mean r_task | groups with one r_task | std of total | "
                  + " | ".join(f"part of {t}" for t in weights) + " |",
                  "|---|---|---|---|---|" + "---|" * len(weights)]
        for family, f in sorted(spread.items()):
            lines.append(f"| {family} | {f['groups']} | {_num(f['task'])} | {f['flat_task']} of {f['groups']} "
                         f"| {_num(f['std'])} | " + " | ".join(_num(f["parts"].get(t)) for t in weights) + " |")
    drifts = []
    for path in folder.adapter_dirs():
        try:
            drifts.append((path.name, adapter_drift(path), None))
        except Exception as e:  # noqa: BLE001 (a damaged file must not cost the run its report, nor `skillos train` its end)
            drifts.append((path.name, None, f"{type(e).__name__}: {str(e)[:120]}"))
    if any(d or err for _, d, err in drifts):
        lines += ["", ("How far each kept adapter moved the weights it adapts (per module ||scale B A|| / ||W||, "
                       "Frobenius norms, over the adapted modules found in the base):"), "",
                  "| adapter | modules | mean | max |", "|---|---|---|---|"]
        for name, d, err in drifts:
            if err:
                lines.append(f"| {name} | left out, unreadable ({err}) | - | - |")
            elif d:
                missing = f" ({d['missing']} not in the base)" if d["missing"] else ""
                lines.append(f"| {name} | {d['modules']}{missing} | {d['mean']:.2e} | {d['max']:.2e} |")
    positions = disagreement_by_position(rollouts)
    if len(positions) > 1:
        start = "the repo it is seeded with" if (cfg.get("rollout") or {}).get("seed_repo") else "the empty repo"
        lines += ["", ("Credit on later tasks: per task position in a group, the groups whose rollouts disagreed on "
                       f"its success. Task 1 runs on {start} with the same prompt in every rollout (its "
                       "disagreements are the executor's own noise, and r_task leaves it out); a later task's "
                       "prompts differ by the skills each rollout's curator wrote, so its disagreements beyond "
                       "that noise are the only credit r_task can give (to a win or a loss alike):"), "",
                  "| task in the group | groups | rollouts disagreed | mean success |", "|---|---|---|---|"]
        for row in positions:
            first = f" ({start.removeprefix('the ')})" if row["position"] == 1 else ""
            lines.append(f"| {row['position']}{first} | {row['groups']} "
                         f"| {row['disagreed']} ({row['disagreed'] / row['groups']:.0%}) | {row['success']:.0%} |")
    return "\n".join(lines) + "\n"


def write_report(output_dir: Path) -> tuple[Path, Path]:
    """report.png and report.md of a training run folder (`skillos train` at its end, `skillos train-report`)."""
    folder = RunFolder(output_dir)
    rows = read_metrics(folder.metrics)
    rollouts = _rollout_rows(folder.rollouts_dir, {r["step"] for r in rows})   # read once for both files
    png = plot_report(folder.metrics, folder.train_report, _families(rollouts))
    folder.train_report_md.write_text(render_report(folder, rows, rollouts))
    return png, folder.train_report_md
