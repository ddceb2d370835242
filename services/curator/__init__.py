"""The skill curator service: HTTP around `skillos.curation` (the ops, prompt, parser, validation and
one decision, shared with the trainer) plus the content judge (`judge.py`)."""
