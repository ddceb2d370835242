"""The review gate: a repo's policy for curator op batches, and the proposals that wait for a person.

Skills written from traffic (op batches, ``POST /ops``) are served to every caller of the repo, so a repo
can make them wait: with ``review`` on, a batch from a writer that is not trusted, or whose content the scan
flags, is checked as it would apply and kept as a `Proposal` instead; an rw token other than the writer
approves it (the batch is applied then, as that reviewer's write) or rejects it. REST writes are a
person's and are never gated. Pinned skills are refused to every op batch.
"""
