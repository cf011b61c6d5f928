import json, math, re, sys
import numpy as np
txt = open(sys.argv[1]).read()
m = re.search(r"forward \+ backward / forward / checkpointed forward \+ backward ms: (.*?) \(", txt)
pts = {}
for tok in m.group(1).split("; "):
    L_, shape, vals = tok.split(" ")
    layers = int(L_[:-1]); b, l = map(int, shape.split("x")); pair, fwd, ck = map(float, vals.split("/"))
    pts.setdefault((b, l), {})[layers] = (pair, fwd, ck)
nodes = [128, 512, 1024, 2048]; H = 24
rows, ys, yf, yr = [], [], [], []
for (b, l), d in sorted(pts.items()):
    one = (d[4][0] - d[2][0]) * 1e3 / 2; onef = (d[4][1] - d[2][1]) * 1e3 / 2
    onec = (d[4][2] - d[2][2]) * 1e3 / 2 - one
    row = [1, b * l * 1e-3] + [0] * len(nodes)
    sc = b * H * l * l * 1e-6
    if l <= nodes[0]: row[2] = sc
    elif l >= nodes[-1]: row[-1] = sc
    else:
        i = 1
        while nodes[i] < l: i += 1
        t = math.log(l / nodes[i - 1]) / math.log(nodes[i] / nodes[i - 1]); row[2 + i - 1] = (1 - t) * sc; row[2 + i] = t * sc
    rows.append(row); ys.append(one); yf.append(onef); yr.append(onec)
A = np.array(rows); y = np.array(ys)
for name, w in [("absolute", np.ones(len(y))), ("relative", 1 / y)]:
    x = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)[0]
    pred = A @ x
    print(name, "fixed %.1f us token %.1f ns scores" % (x[0], x[1]), np.round(x[2:], 2), "residuals %", np.round((pred / y - 1) * 100, 1))
    if name == "relative" and len(sys.argv) > 3:
        f = json.load(open(sys.argv[2]))
        f["layer_fixed_us"], f["layer_token_ns"] = max(0, x[0]), max(0, x[1])
        f["layer_score_ps"] = [[n, v] for n, v in zip(nodes, x[2:])]
        for key, yy in [("layer_forward", yf), ("layer_recompute", yr)]:
            yy = np.array(yy); ww = 1 / yy
            xx = np.linalg.lstsq(A * ww[:, None], yy * ww, rcond=None)[0]
            f[key + "_fixed_us"], f[key + "_token_ns"] = max(0, xx[0]), max(0, xx[1])
            f[key + "_score_ps"] = [[n, max(0, v)] for n, v in zip(nodes, xx[2:])]
        json.dump(f, open(sys.argv[3], "w"))
