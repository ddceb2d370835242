"""The harness: SkillOS's main job as an application over the services, not part of the core library.

The streaming loop (`loop.run_stream`), the main job (`runner.run_job`, `skillos run`), its report
and statistics, and the local stack of service processes (`stack`, `skillos up` / `skillos down`).
The curator and executor are pluggable (`loop.CuratorLike`, `loop.ExecutorLike`): the trainer passes
an in-process policy with ``async curate(CurateRequest)``. Methods other than SkillOS land here too.
"""
