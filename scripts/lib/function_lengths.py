#!/usr/bin/env python3
"""The longest functions of C++ sources, for the "no function over about 80 lines" rule
(CONTRIBUTING.md): from the line whose '{' opens a function body (a ')' before it, outside any
other function) to its matching '}'. Lambdas count as part of their enclosing function.
Usage: scripts/lib/function_lengths.py include [more folders]; TOP=N lists N (default 15)."""
import re, sys, os
results = []
for root in sys.argv[1:]:
    for dirpath, _, files in os.walk(root):
        for name in files:
            if not name.endswith(('.hpp', '.cpp')): continue
            path = os.path.join(dirpath, name)
            lines = open(path).read().split('\n')
            # strip comments and strings crudely
            depth = 0; stack = []  # (kind, start_line)
            pending_sig = []
            for number, raw in enumerate(lines, 1):
                line = re.sub(r'//.*', '', raw)
                line = re.sub(r'"([^"\\]|\\.)*"', '""', line)
                line = re.sub(r"'([^'\\]|\\.)*'", "''", line)
                for ch_index, ch in enumerate(line):
                    if ch == '{':
                        before = line[:ch_index]
                        context = (' '.join(pending_sig) + ' ' + before).strip()
                        is_scope = re.search(r'\b(namespace|struct|class|union|enum)\b[^()]*$', context) is not None
                        is_func = (not is_scope) and re.search(r'\)\s*(const|noexcept|override|->[^{]*)?\s*(:.*)?$', context) is not None
                        in_func = any(k == 'func' for k, _ in stack)
                        if is_func and not in_func:
                            stack.append(('func', number))
                        else:
                            stack.append(('scope' if is_scope else 'block', number))
                        pending_sig = []
                    elif ch == '}':
                        if stack:
                            kind, start = stack.pop()
                            if kind == 'func':
                                results.append((number - start + 1, path, start))
                        pending_sig = []
                    elif ch == ';':
                        pending_sig = []
                rest = line.split('{')[-1].split('}')[-1].split(';')[-1]
                if rest.strip(): pending_sig.append(rest.strip())
                pending_sig = pending_sig[-6:]
results.sort(reverse=True)
for length, path, start in results[:int(os.environ.get('TOP', '15'))]:
    print(f'{length:4d}  {path}:{start}')
