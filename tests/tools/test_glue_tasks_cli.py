#!/usr/bin/env python3
"""train_mrpc on every GLUE task and on user CSV / JSON-lines files, end to end on the CPU.

Run by ctest:  test_glue_tasks_cli.py TRAIN_MRPC CASE
  task_<name>     (cola sst2 mrpc qqp stsb mnli qnli rte wnli): small files in the task's GLUE layout, written
                  here; a few training steps; the test file holds the dev sentences in the test layout, so the
                  submission file's predictions (made by the same final model, padded to max_length like the
                  last evaluation) give the dev metrics again. The printed metrics of the last epoch must
                  equal this script's own computation (formulas below, pure Python) on those predictions.
  learn_keyword   an SST-2-style task whose label is decided by a keyword: dev accuracy >= 0.9 after 4 epochs.
  learn_regression  STS-B-layout scores = 1 + number of "good" words: dev Pearson >= 0.8 after 8 epochs.
  user_csv_3class, user_jsonl_5class: string labels sorted into ids; the predictions file holds label strings
                  and its accuracy equals the printed one.
  bad_user_file   an unknown label in the validation file: exit 2 with one error line naming file and row.
  auto_plan_head  --auto_plan --estimate_memory on STS-B, MNLI and MRPC: the plan names the task's head and
                  loss, and its parameter count is that of the model the run prints.
  hf_checkpoint   --model_name_or_path a DeBERTa-v3-shaped HF checkpoint directory (FIXTURE_DIR/hf_tiny_v3):
                  converted on the first run, the cached copy used on the second; a user file whose labels are
                  the checkpoint's label2id names gets its ids; --task_name rte (2 labels) needs
                  --ignore_mismatched_sizes.
Prints "glue tasks cli: all checks passed" on success.
"""

import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

FILLER = "the a movie film story plot actor scene evening sunday night day week city old new small big".split()


def sentence(rng, words=6, extra=()):
    w = rng.sample(FILLER, words)
    for e in extra:
        w.insert(rng.randrange(len(w) + 1), e)
    return " ".join(w)


# ---- metrics, written from their definitions (independent of the C++ code) ----

def accuracy(pred, gold):
    return sum(p == g for p, g in zip(pred, gold)) / len(gold)


def f1(pred, gold):
    tp = sum(p == 1 and g == 1 for p, g in zip(pred, gold))
    fp = sum(p == 1 and g != 1 for p, g in zip(pred, gold))
    fn = sum(p != 1 and g == 1 for p, g in zip(pred, gold))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def matthews(pred, gold):
    tp = sum(p == 1 and g == 1 for p, g in zip(pred, gold))
    tn = sum(p == 0 and g == 0 for p, g in zip(pred, gold))
    fp = sum(p == 1 and g == 0 for p, g in zip(pred, gold))
    fn = sum(p == 0 and g == 1 for p, g in zip(pred, gold))
    den = math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if den == 0 else (tp * tn - fp * fn) / den


def pearson(x, y):
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return float("nan") if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(x, y):
    return pearson(ranks(x), ranks(y))


# ---- task files ----

MNLI_HEAD = "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\t" \
            "sentence2_parse\tsentence1\tsentence2"
STSB_HEAD = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"


def task_rows(task, rng, n):
    """n examples (text_a, text_b or None, label as written)."""
    labels = {"mnli": ["entailment", "neutral", "contradiction"], "qnli": ["entailment", "not_entailment"],
              "rte": ["entailment", "not_entailment"]}.get(task, ["0", "1"])
    rows = []
    for _ in range(n):
        a, b = sentence(rng), sentence(rng)
        if task == "stsb":
            # A learnable score, so that a few steps spread the predictions well past the file's 3 decimals.
            k = rng.randrange(5)
            rows.append((sentence(rng, extra=["good"] * k), b, "%.2f" % (k + rng.uniform(0, 0.5))))
        else:
            rows.append((a, None if task in ("cola", "sst2") else b, rng.choice(labels)))
    return rows


def write_task(task, folder, rng, n_train=24, n_dev=12):
    """Writes train/dev/test in the task's layout; returns {split file: gold labels} for the dev splits and
    the names of (dev file, test file, submission file) triples."""
    os.makedirs(folder, exist_ok=True)
    train = task_rows(task, rng, n_train)
    devs = {"mnli": ["dev_matched.tsv", "dev_mismatched.tsv"]}.get(task, ["dev.tsv"])
    tests = {"mnli": ["test_matched.tsv", "test_mismatched.tsv"]}.get(task, ["test.tsv"])
    subs = {"cola": ["CoLA.tsv"], "sst2": ["SST-2.tsv"], "mrpc": ["MRPC.tsv"], "qqp": ["QQP.tsv"],
            "stsb": ["STS-B.tsv"], "mnli": ["MNLI-m.tsv", "MNLI-mm.tsv"], "qnli": ["QNLI.tsv"], "rte": ["RTE.tsv"],
            "wnli": ["WNLI.tsv"]}[task]

    def labeled_lines(rows):
        out = []
        if task == "cola":
            return ["src\t%s\t%s\t%s" % (l, "" if l == "1" else "*", a) for a, _, l in rows]
        if task == "sst2":
            return ["sentence\tlabel"] + ["%s\t%s" % (a, l) for a, _, l in rows]
        if task == "mrpc":
            return ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"] + \
                   ["%s\t%d\t%d\t%s\t%s" % (l, i, i + 1, a, b) for i, (a, b, l) in enumerate(rows)]
        if task == "qqp":
            out = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
            out += ["%d\t%d\t%d\t%s\t%s\t%s" % (i, 2 * i, 2 * i + 1, a, b, l) for i, (a, b, l) in enumerate(rows)]
            return out
        if task == "stsb":
            return [STSB_HEAD + "\tscore"] + ["%d\tg\tf\t2012\t%d\tnone\tnone\t%s\t%s\t%s" % (i, i, a, b, l)
                                              for i, (a, b, l) in enumerate(rows)]
        if task == "mnli":
            return [MNLI_HEAD + "\tlabel1\tgold_label"] + ["%d\t%d\t%d\tfiction\t.\t.\t.\t.\t%s\t%s\t%s\t%s" %
                                                           (i, i, i, a, b, l, l) for i, (a, b, l) in enumerate(rows)]
        head = "index\tquestion\tsentence\tlabel" if task == "qnli" else "index\tsentence1\tsentence2\tlabel"
        return [head] + ["%d\t%s\t%s\t%s" % (i, a, b, l) for i, (a, b, l) in enumerate(rows)]

    def test_lines(rows):
        base = 100  # GLUE's test index column, not the row number
        if task in ("cola", "sst2"):
            return ["index\tsentence"] + ["%d\t%s" % (base + i, a) for i, (a, _, _) in enumerate(rows)]
        if task == "mrpc":
            return ["index\t#1 ID\t#2 ID\t#1 String\t#2 String"] + \
                   ["%d\t%d\t%d\t%s\t%s" % (base + i, i, i, a, b) for i, (a, b, _) in enumerate(rows)]
        if task == "qqp":
            return ["id\tquestion1\tquestion2"] + ["%d\t%s\t%s" % (base + i, a, b) for i, (a, b, _) in enumerate(rows)]
        if task == "stsb":
            return [STSB_HEAD] + ["%d\tg\tf\t2012\t%d\tnone\tnone\t%s\t%s" % (base + i, i, a, b)
                                  for i, (a, b, _) in enumerate(rows)]
        if task == "mnli":
            return [MNLI_HEAD] + ["%d\t%d\t%d\tfiction\t.\t.\t.\t.\t%s\t%s" % (base + i, i, i, a, b)
                                  for i, (a, b, _) in enumerate(rows)]
        head = "index\tquestion\tsentence" if task == "qnli" else "index\tsentence1\tsentence2"
        return [head] + ["%d\t%s\t%s" % (base + i, a, b) for i, (a, b, _) in enumerate(rows)]

    def write(name, lines):
        with open(os.path.join(folder, name), "w") as f:
            f.write("\n".join(lines) + "\n")

    train_lines = labeled_lines(train)
    if task == "qqp":
        train_lines.insert(3, "999\t1\t2\ta question with no pair")  # missing fields: skipped as HF does
    write("train.tsv", train_lines)
    if task == "mnli":  # GLUE's diagnostic set: MNLI's model predicts it into AX.tsv
        write("diagnostic.tsv", ["index\tsentence1\tsentence2"] +
              ["%d\t%s\t%s" % (i, sentence(rng), sentence(rng)) for i in range(5)])
    gold = {}
    for dev, test, sub in zip(devs, tests, subs):
        rows = task_rows(task, rng, n_dev)
        write(dev, labeled_lines(rows))
        write(test, test_lines(rows))
        gold[sub] = [l for _, _, l in rows]
    return gold


# ---- running ----

def run(binary, args, work):
    out = subprocess.run([binary, "--device", "cpu", "--seed", "42"] + args, capture_output=True, text=True)
    with open(os.path.join(work, "run.log"), "w") as f:
        f.write(out.stdout + out.stderr)
    return out


def last_epoch_metrics(stdout):
    lines = [l for l in stdout.splitlines() if re.match(r"epoch \d+: train_loss", l)]
    check(lines, "no epoch line printed")
    return {k: float(v) for k, v in re.findall(r"dev_(\w+) (-?[\d.]+|nan)", lines[-1])}


def read_submission(path):
    with open(path) as f:
        lines = f.read().splitlines()
    check(lines[0] == "index\tprediction", "%s: header %r" % (path, lines[0]))
    return [tuple(l.split("\t")) for l in lines[1:]]


FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAILED:", what)
        raise SystemExit(1)


def close(printed, computed, tol, what):
    check(abs(printed - computed) <= tol, "%s: printed %.6f, computed %.6f" % (what, printed, computed))


def case_task(binary, task, work):
    rng = random.Random(sum(map(ord, task)))
    folder = os.path.join(work, task)
    gold = write_task(task, folder, rng, n_train=128 if task == "stsb" else 24)
    out = run(binary, ["--task_name", task, "--data_dir", folder, "--max_train_steps", "48" if task == "stsb" else "4",
                       "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "8",
                       "--pad_to_max_length", "--max_length", "32", "--output_dir", os.path.join(work, "out")] +
              # STS-B's file keeps 3 decimals: a larger step spreads the scores well past that rounding.
              (["--learning_rate", "1e-3"] if task == "stsb" else []), work)
    check(out.returncode == 0, "%s: exit %d: %s" % (task, out.returncode, out.stderr[-500:]))
    printed = last_epoch_metrics(out.stdout)
    if task == "qqp":
        check("skipped 1 rows with missing fields" in out.stdout, "qqp: the skipped row is not reported")
    labels = {"mnli": ["entailment", "neutral", "contradiction"], "qnli": ["entailment", "not_entailment"],
              "rte": ["entailment", "not_entailment"]}.get(task, ["0", "1"])
    for k, (sub, gold_labels) in enumerate(sorted(gold.items(), key=lambda kv: kv[0] != "MNLI-m.tsv")):
        rows = read_submission(os.path.join(work, "out", sub))
        check([int(i) for i, _ in rows] == list(range(100, 100 + len(gold_labels))), "%s: indices" % sub)
        suffix = "_mm" if sub == "MNLI-mm.tsv" else ""
        if task == "stsb":
            pred = [float(p) for _, p in rows]
            gold_scores = [float(g) for g in gold_labels]
            # The file holds scores to 3 decimals (as run_glue writes them); the printed value has 4.
            close(printed["pearson"], pearson(pred, gold_scores), 2e-3, "stsb pearson")
            close(printed["spearmanr"], spearman(pred, gold_scores), 2e-3, "stsb spearmanr")
            continue
        check(all(p in labels for _, p in rows), "%s: predictions outside %s" % (sub, labels))
        pred = [labels.index(p) for _, p in rows]
        gold_ids = [labels.index(g) for g in gold_labels]
        if task == "cola":
            close(printed["matthews_correlation"], matthews(pred, gold_ids), 6e-5, "cola mcc")
        else:
            close(printed["accuracy" + suffix], accuracy(pred, gold_ids), 6e-5, "%s accuracy%s" % (task, suffix))
        if task in ("mrpc", "qqp"):
            close(printed["f1"], f1(pred, gold_ids), 6e-5, "%s f1" % task)
    if task == "mnli":
        ax = read_submission(os.path.join(work, "out", "AX.tsv"))
        check([i for i, _ in ax] == [str(i) for i in range(5)] and all(p in labels for _, p in ax), "AX.tsv: %s" % ax)
    with open(os.path.join(work, "out", "metrics.jsonl")) as f:
        epochs = [json.loads(l) for l in f if '"type":"epoch"' in l]
    keys = {"cola": ["eval_matthews_correlation"], "stsb": ["eval_pearson", "eval_spearmanr"],
            "mnli": ["eval_accuracy", "eval_accuracy_mm", "eval_loss_mm"], "mrpc": ["eval_accuracy", "eval_f1"],
            "qqp": ["eval_accuracy", "eval_f1"]}.get(task, ["eval_accuracy"])
    for key in keys + ["eval_loss"]:
        check(key in epochs[-1], "%s: metrics.jsonl has no %s: %s" % (task, key, epochs[-1]))


def case_learn_keyword(binary, work):
    rng = random.Random(2)
    folder = os.path.join(work, "SST-2")
    os.makedirs(folder)
    pos, neg = ["great", "wonderful", "superb"], ["awful", "terrible", "boring"]

    def lines(n):
        out = ["sentence\tlabel"]
        for _ in range(n):
            y = rng.randrange(2)
            out.append("%s\t%d" % (sentence(rng, extra=[rng.choice(pos if y else neg)]), y))
        return out

    for name, n in (("train.tsv", 256), ("dev.tsv", 64)):
        with open(os.path.join(folder, name), "w") as f:
            f.write("\n".join(lines(n)) + "\n")
    out = run(binary, ["--task_name", "sst2", "--data_dir", folder, "--num_train_epochs", "4", "--learning_rate",
                       "1e-3", "--max_length", "32"], work)
    check(out.returncode == 0, "learn_keyword: exit %d: %s" % (out.returncode, out.stderr[-500:]))
    acc = last_epoch_metrics(out.stdout)["accuracy"]
    print("learn_keyword: dev accuracy %.4f after 4 epochs (bar 0.9)" % acc)
    check(acc >= 0.9, "learn_keyword: dev accuracy %.4f < 0.9" % acc)


def case_learn_regression(binary, work):
    rng = random.Random(3)
    folder = os.path.join(work, "STS-B")
    os.makedirs(folder)

    def lines(n):
        out = [STSB_HEAD + "\tscore"]
        for i in range(n):
            k = rng.randrange(5)
            out.append("%d\tg\tf\t2012\t%d\tnone\tnone\t%s\t%s\t%.1f" % (
                i, i, sentence(rng, extra=["good"] * k), sentence(rng), 1.0 + k))
        return out

    for name, n in (("train.tsv", 256), ("dev.tsv", 64)):
        with open(os.path.join(folder, name), "w") as f:
            f.write("\n".join(lines(n)) + "\n")
    out = run(binary, ["--task_name", "stsb", "--data_dir", folder, "--num_train_epochs", "8", "--learning_rate",
                       "1e-3", "--max_length", "48"], work)
    check(out.returncode == 0, "learn_regression: exit %d: %s" % (out.returncode, out.stderr[-500:]))
    r = last_epoch_metrics(out.stdout)["pearson"]
    print("learn_regression: dev pearson %.4f after 8 epochs (bar 0.8)" % r)
    check(r >= 0.8, "learn_regression: dev pearson %.4f < 0.8" % r)


def case_user(binary, work, kind):
    rng = random.Random(4 if kind == "csv" else 5)
    classes = ["billing", "bug", "praise"] if kind == "csv" else ["a_low", "b_mid", "c_high", "d_top", "e_max"]
    keyword = {c: "kw%d" % i for i, c in enumerate(classes)}

    def rows(n):
        out = []
        for _ in range(n):
            c = rng.choice(classes)
            out.append({"text": sentence(rng, extra=[keyword[c]]) + (', "quoted", text' if kind == "csv" else ""),
                        "label": c})
        return out

    train, dev = rows(96), rows(24)
    ext = "csv" if kind == "csv" else "jsonl"

    def write(name, data):
        path = os.path.join(work, name + "." + ext)
        with open(path, "w") as f:
            if kind == "csv":
                f.write("text,label\n")
                for r in data:
                    f.write('"%s",%s\n' % (r["text"].replace('"', '""'), r["label"]))
            else:
                for r in data:
                    f.write(json.dumps(r) + "\n")
        return path

    tr, dv = write("train", train), write("dev", dev)
    te = write("test", [{"text": r["text"], "label": r["label"]} for r in dev])
    out = run(binary, ["--train_file", tr, "--validation_file", dv, "--test_file", te, "--num_train_epochs", "2",
                       "--pad_to_max_length", "--max_length", "32", "--output_dir", os.path.join(work, "out")], work)
    check(out.returncode == 0, "user %s: exit %d: %s" % (kind, out.returncode, out.stderr[-500:]))
    check("%d classes" % len(classes) in out.stdout, "user %s: the class count is not reported" % kind)
    printed = last_epoch_metrics(out.stdout)
    rows_out = read_submission(os.path.join(work, "out", "predictions.tsv"))
    check(all(p in classes for _, p in rows_out), "user %s: predictions outside the labels" % kind)
    close(printed["accuracy"], accuracy([p for _, p in rows_out], [r["label"] for r in dev]), 6e-5,
          "user %s accuracy" % kind)


def case_bad_user_file(binary, work):
    tr = os.path.join(work, "train.csv")
    dv = os.path.join(work, "dev.csv")
    with open(tr, "w") as f:
        f.write("text,label\na b,x\nc d,y\n")
    with open(dv, "w") as f:
        f.write("text,label\na b,x\nc d,z\n")
    out = run(binary, ["--train_file", tr, "--validation_file", dv], work)
    check(out.returncode == 2, "bad_user_file: exit %d, expected 2" % out.returncode)
    errors = [l for l in out.stderr.splitlines() if "error" in l]
    check(len(errors) == 1, "bad_user_file: %d error lines: %s" % (len(errors), out.stderr))
    check("%s: row 2 (line 3): label 'z' is not one of the training file's labels" % dv in errors[0],
          "bad_user_file: %s" % errors[0])


def case_hf_checkpoint(binary, work, fixtures):
    ckpt = os.path.join(work, "deberta-v3-tiny")
    shutil.copytree(os.path.join(fixtures, "hf_tiny_v3"), ckpt)
    os.environ["ZT_HF_CACHE"] = os.path.join(work, "cache")
    rng = random.Random(6)
    labels = ["contradiction", "entailment", "neutral"]
    path = os.path.join(work, "nli.csv")
    with open(path, "w") as f:
        f.write("premise,hypothesis,label\n")
        for _ in range(16):
            f.write("%s,%s,%s\n" % (sentence(rng), sentence(rng), rng.choice(labels)))
    args = ["--model_name_or_path", ckpt, "--train_file", path, "--validation_file", path, "--max_train_steps", "2",
            "--max_length", "32"]
    first = run(binary, args, work)
    check(first.returncode == 0, "hf_checkpoint: exit %d: %s" % (first.returncode, first.stderr[-500:]))
    check("HF checkpoint %s: converted to" % ckpt in first.stdout, "hf_checkpoint: no conversion line")
    check("from the model's label2id" in first.stdout, "hf_checkpoint: the checkpoint's label ids are not used")
    check("0 = entailment, 1 = neutral, 2 = contradiction" in first.stdout, "hf_checkpoint: label order")
    second = run(binary, args, work)
    check(second.returncode == 0 and "using the converted copy" in second.stdout, "hf_checkpoint: cache not used")
    rte = os.path.join(work, "RTE")
    os.makedirs(rte)
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(rte, name), "w") as f:
            f.write("index\tsentence1\tsentence2\tlabel\n")
            for i in range(8):
                f.write("%d\t%s\t%s\t%s\n" % (i, sentence(rng), sentence(rng), rng.choice(["entailment", "not_entailment"])))
    refused = run(binary, ["--model_name_or_path", ckpt, "--task_name", "rte", "--data_dir", rte,
                           "--max_train_steps", "1"], work)
    check(refused.returncode == 2 and "--ignore_mismatched_sizes" in refused.stderr,
          "hf_checkpoint: a 3-label head for rte was not refused: %s" % refused.stderr[-300:])
    replaced = run(binary, ["--model_name_or_path", ckpt, "--task_name", "rte", "--data_dir", rte,
                            "--max_train_steps", "1", "--ignore_mismatched_sizes"], work)
    check(replaced.returncode == 0, "hf_checkpoint: rte with a new head: %s" % replaced.stderr[-300:])


def case_auto_plan_head(binary, work):
    """--auto_plan plans the model the task trains: STS-B's one-output MSE head, MNLI's three labels, with the
    same parameter count the run then prints for its model."""
    rng = random.Random(5)
    for task, head in (("stsb", "head 1 output (MSE regression)"), ("mnli", "head 3 labels (cross-entropy)"),
                       ("mrpc", "head 2 labels (cross-entropy)")):
        folder = os.path.join(work, task)
        write_task(task, folder, rng)
        out = run(binary, ["--task_name", task, "--data_dir", folder, "--estimate_memory", "--auto_plan",
                           "--gpu_memory_limit", "4GiB", "--per_device_train_batch_size", "8"], work)
        check(out.returncode == 0, "auto_plan %s: exit %d: %s" % (task, out.returncode, out.stderr[-500:]))
        planned = re.search(r"planned for: .*?, (\d+) parameters, (head [^;]*);", out.stdout)
        check(planned, "auto_plan %s: no 'planned for' line in: %s" % (task, out.stdout[-800:]))
        check(planned.group(2) == head, "auto_plan %s: planned for '%s', expected '%s'" % (task, planned.group(2), head))
        trained = re.search(r"^model: .*?, (\d+) parameters", out.stdout, re.M)
        check(trained and trained.group(1) == planned.group(1),
              "auto_plan %s: planned for %s parameters, the run's model has %s" %
              (task, planned.group(1), trained.group(1) if trained else "?"))
        print("auto_plan %s: %s, %s parameters" % (task, head, planned.group(1)))


def main():
    binary, case = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="zt_glue_tasks_")
    try:
        if case.startswith("task_"):
            case_task(binary, case[len("task_"):], work)
        elif case == "learn_keyword":
            case_learn_keyword(binary, work)
        elif case == "learn_regression":
            case_learn_regression(binary, work)
        elif case == "user_csv_3class":
            case_user(binary, work, "csv")
        elif case == "user_jsonl_5class":
            case_user(binary, work, "jsonl")
        elif case == "bad_user_file":
            case_bad_user_file(binary, work)
        elif case == "auto_plan_head":
            case_auto_plan_head(binary, work)
        elif case == "hf_checkpoint":
            case_hf_checkpoint(binary, work, sys.argv[3])
        else:
            check(False, "unknown case " + case)
    except SystemExit:
        log = os.path.join(work, "run.log")
        if os.path.exists(log):
            print("".join(open(log).readlines()[-15:]))
        shutil.rmtree(work, ignore_errors=True)
        raise
    shutil.rmtree(work, ignore_errors=True)
    print("glue tasks cli: all checks passed")


if __name__ == "__main__":
    main()
