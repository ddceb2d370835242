"""What eval.jsonl says about why (RESULTS-learning §2): success by task position, task 1 across the arms,
later tasks minus task 1 per group (bootstrap), r_task by family, the ops each arm's curator sent.

    python bench/evidence/eval-curator-0.5b/why.py bench/evidence/eval-curator-0.5b/eval.jsonl
"""
import json
import random
import statistics as st
import sys
from collections import Counter, defaultdict
from pathlib import Path

rows=[json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
rows=[r for r in rows if 'dropped' not in r]
by=defaultdict(dict)
for r in rows: by[r['group']][r['arm']]=r
both=[g for g in by if len(by[g])==2]
print('groups both', len(both))
# success by position
for arm in ('untrained','trained'):
    pos=defaultdict(list)
    for g in both:
        for ro in by[g][arm]['rollouts']:
            for i,s in enumerate(ro['successes']): pos[i].append(s)
    print(arm, 'success by task position', {i+1: f"{100*st.mean(v):.0f}% ({len(v)})" for i,v in sorted(pos.items())})
# task1 agreement across arms (same seed, empty repo)
agree=n=0
for g in both:
    for a,b in zip(by[g]['untrained']['rollouts'], by[g]['trained']['rollouts']):
        n+=1; agree+= a['successes'][0]==b['successes'][0]
print('task 1 same outcome across arms', agree, 'of', n)
# later tasks: per group mean success at tasks 2+ minus task 1, by arm
def later_minus_first(r):
    ro=r['rollouts']; return st.mean(st.mean(x['successes'][1:]) for x in ro)-st.mean(x['successes'][0] for x in ro)
for arm in ('untrained','trained'):
    d=[later_minus_first(by[g][arm]) for g in both]
    random.seed(0); B=10000; bs=sorted(st.mean(random.choices(d,k=len(d))) for _ in range(B))
    print(arm,'later-first', f"{100*st.mean(d):+.1f} [{100*bs[250]:+.1f}, {100*bs[9750]:+.1f}]")
# by family
fam=defaultdict(lambda: defaultdict(list))
for g in both:
    for arm in ('untrained','trained'):
        r=by[g][arm]; fam[r['family']][arm].append(st.mean(x['reward']['task'] for x in r['rollouts']))
for f,v in sorted(fam.items()): print(f, {a: [round(x,2) for x in xs] for a,xs in v.items()})
for arm in ('untrained','trained'):
    ops=Counter(); calls=valid=0; repo=[]
    for g in both:
        for ro in by[g][arm]['rollouts']:
            ops.update(ro['ops']); calls+=ro['calls']; valid+=ro['valid_calls']; repo.append(ro['repo_size'])
    print(arm, 'ops', dict(ops), 'calls', calls, 'valid', valid, f"{100*valid/max(1,calls):.1f}%", 'repo mean', st.mean(repo))
