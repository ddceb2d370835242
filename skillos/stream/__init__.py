"""The stream: SkillOS's unit of evaluation and training, as a core the application and the trainer share.

- `types`: a task (`TaskSpec`), the stream's configuration (`StreamConfig`), the record of one task
  (`TaskRecord`, `OpRecord`), the parts it plays with (`ExecutorLike`, `CuratorLike`, `RepoLike`);
- `step`: one streaming step in pieces (`play_episode`, `verdict`, `curate`, `curate_trajectory`);
- `loop`: `run_stream`, a stream of tasks played with a built method (`skillos.methods`).

No I/O of its own: the executor, the curator and the repo are passed in.
"""

from skillos.stream.loop import StreamMethod, TaskSlots, run_stream
from skillos.stream.step import (
    curate,
    curate_trajectory,
    new_record,
    play_episode,
    skills_used,
    trajectory_of,
    verdict,
)
from skillos.stream.types import (
    TASK_POSITION,
    CuratorLike,
    ExecutorLike,
    OpRecord,
    RepoLike,
    StreamConfig,
    TaskRecord,
    TaskSpec,
)

__all__ = ["TASK_POSITION", "CuratorLike", "ExecutorLike", "OpRecord", "RepoLike", "StreamConfig", "StreamMethod",
           "TaskRecord", "TaskSlots", "TaskSpec", "curate", "curate_trajectory", "new_record", "play_episode", "run_stream",
           "skills_used", "trajectory_of", "verdict"]
