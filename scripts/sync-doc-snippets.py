#!/usr/bin/env python3
# Rewrites every `<!-- snippet: FILE TAG -->` code block in docs/*.md from the lines of FILE
# between its two `// [TAG]` markers (tests/unit/docs/test_doc_snippets.cpp checks they agree).
import os
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
import re, glob, textwrap
for doc in glob.glob('docs/*.md'):
    lines = open(doc).read().split('\n')
    out = []; i = 0; changed = False
    while i < len(lines):
        out.append(lines[i])
        m = re.search(r'<!-- snippet: (\S+) (\S+) -->', lines[i])
        if m and i + 1 < len(lines) and lines[i+1].startswith('```'):
            src = open(m.group(1)).read().split('\n')
            marker = '// [%s]' % m.group(2)
            at = [j for j, l in enumerate(src) if l.strip() == marker]
            assert len(at) == 2, (doc, m.group(0))
            code = textwrap.dedent('\n'.join(src[at[0]+1:at[1]])).rstrip('\n')
            out.append(lines[i+1])
            j = i + 2
            while not lines[j].startswith('```'): j += 1
            out.extend(code.split('\n'))
            out.append(lines[j])
            i = j + 1
            changed = True
            continue
        i += 1
    if changed: open(doc, 'w').write('\n'.join(out))
