"""Settings of the console (environment variables ``SKILLOS_<FIELD>``).

The console reaches the skill repo at ``SKILLOS_SKILLREPO_URL`` with the token each user logs in with
(never with ``SKILLOS_API_TOKEN``: a read token must see a read-only console).
"""

from __future__ import annotations

from pathlib import Path

from skillos.settings import SkillRepoAddress


class ConsoleSettings(SkillRepoAddress):
    # report folders of `skillos run` (runs/<timestamp>/) and `skillos train` (output_dir), one level deep
    console_runs_dir: Path = Path("runs")
    # how long a login lasts without use (seconds); sessions live in the console's memory
    console_session_ttl_s: int = 43200
    # mark the session cookie Secure (set it when the console is served over HTTPS)
    console_cookie_secure: bool = False
    # rows per page (skills, tasks, timeline entries)
    console_page_size: int = 50
