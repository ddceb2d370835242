"""The web console: pages over the skill repo's public API and the report folders of runs."""
