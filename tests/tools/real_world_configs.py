#!/usr/bin/env python3
"""The real-world DeepSpeed / Accelerate configs of tests/configs/real_world through train_mrpc on the CPU.

  real_world_configs.py TRAIN_MRPC DATA_DIR CONFIG_DIR    # exit 0 and "real_world_configs: all checks passed"

Each file (run from its own folder, as an Accelerate YAML names its JSON relative to it) goes through
`--estimate_memory` and a 2-step run on 300 training rows (twenty to evaluate). Each either runs, or ends with exactly one line that
names a key of the file and why. A run prints the resolution; every key of the file must be in it, each as
honoured or explained (DeepSpeed JSON keys under "deepspeed config keys", Accelerate YAML keys as
accelerate.<key>). A file refused because the CPU backend computes in f32 only (fp16 enabled: a GPU config)
is run once more as its CPU twin (fp16/bf16 "enabled": "auto", mixed_precision 'no'), which must run and
list every key. The verdicts must equal verdicts.json beside the files (printed on a mismatch).
"""
import json, os, re, shutil, subprocess, sys, tempfile

BIN, DATA, CONFIGS = (os.path.abspath(a) for a in sys.argv[1:4])
failures = []


def check(cond, what):
    if not cond: failures.append(what)
    print(("ok   " if cond else "FAIL ") + what)


def json_paths(value, prefix=""):
    """Every key path of a JSON document, as train_mrpc lists them: leaves, and empty objects."""
    if isinstance(value, dict) and (value or not prefix):
        for key, child in value.items():
            yield from json_paths(child, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix


def yaml_keys(text):
    """The top-level keys of an Accelerate YAML (the files here are flat `key: value` with one nested map)."""
    return [m.group(1) for m in re.finditer(r"^([A-Za-z_][A-Za-z0-9_]*):", text, re.M)]


def run(args, cwd):
    proc = subprocess.run([BIN, "--device", "cpu", *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def printed_keys(stdout):
    """path -> verdict line of the "deepspeed config keys" group."""
    keys, inside = {}, False
    for line in stdout.splitlines():
        if line == "deepspeed config keys":
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)  (honoured|explained)(: .*)?$", line)
            if not m:
                break
            keys[m.group(1)] = m.group(2)
    return keys


def refusal(stderr):
    """The one error line of a refused run, or None when the run did not end with exactly one line."""
    lines = [l for l in stderr.splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("train_mrpc: error: ")]
    return errors[0] if len(errors) == 1 and lines[-1] == errors[0] else None


def cpu_twin(text, is_yaml):
    if is_yaml:
        return re.sub(r"^mixed_precision:.*$", "mixed_precision: 'no'", text, flags=re.M)
    doc = json.loads(text)
    for section in ("fp16", "bf16", "bfloat16"):
        if isinstance(doc.get(section), dict) and doc[section].get("enabled") is True:
            doc[section]["enabled"] = "auto"
    return json.dumps(doc, indent=2)


def check_keys_listed(name, path, text, is_yaml, stdout):
    listed = printed_keys(stdout)
    if is_yaml:
        for key in yaml_keys(text):
            check(re.search(rf"^  accelerate\.{key}[ .]", stdout, re.M) is not None,
                  f"{name}: YAML key '{key}' in the printed resolution")
        inner = re.search(r"deepspeed_config_file:\s*(\S+)", text)
        if inner:
            with open(os.path.join(os.path.dirname(path), inner.group(1))) as f:
                text, is_yaml = f.read(), False
        else:
            return
    missing = [p for p in json_paths(json.loads(text)) if p not in listed]
    check(not missing, f"{name}: every JSON key honoured or explained in the printed resolution"
          + (f" (missing: {missing})" if missing else ""))


def verdict_of(name, path, text, is_yaml, work):
    folder, file = os.path.dirname(path), os.path.basename(path)
    flag = "--config_file" if is_yaml else "--deepspeed_config"
    rc, out, err = run([flag, file, "--estimate_memory"], folder)
    line = refusal(err)
    check(rc == 0 or line is not None, f"{name}: --estimate_memory runs or ends with one error line")
    small, train = os.path.join(work, "small.tsv"), os.path.join(work, "train.tsv")
    out_dir = os.path.join(work, re.sub(r"\W", "_", name))
    rc2, out2, err2 = run([flag, file, "--max_train_steps", "2", "--train_file", train, "--validation_file", small,
                           "--test_file", small, "--output_dir", out_dir], folder)
    line2 = refusal(err2)
    check(rc2 == 0 or line2 is not None, f"{name}: the 2-step run runs or ends with one error line"
          + ("" if rc2 == 0 or line2 else f" (rc {rc2}: {err2.strip().splitlines()[-3:]})"))
    check((rc == 0) == (rc2 == 0), f"{name}: --estimate_memory and the run agree")
    if rc2 == 0:
        check_keys_listed(name, path, text, is_yaml, out2)
        return "runs"
    message = line2 or ""
    # The refusal names a key or setting of the file.
    keys = set(yaml_keys(text)) if is_yaml else {part for p in json_paths(json.loads(text)) for part in p.split(".")}
    check(any(k in message for k in keys) or "--dtype" in message,
          f"{name}: the refusal names a key of the file ({message})")
    if "computes in f32 only" in message:
        twin = os.path.join(folder, "cpu_twin_" + file)
        twin_text, written = cpu_twin(text, is_yaml), [twin]
        inner = re.search(r"deepspeed_config_file:\s*(\S+)", text) if is_yaml else None
        if inner:  # the JSON the YAML names gets its own twin beside it
            json_path = os.path.join(folder, inner.group(1))
            json_twin = os.path.join(os.path.dirname(json_path), "cpu_twin_" + os.path.basename(json_path))
            with open(json_path) as f:
                json_text = cpu_twin(f.read(), False)
            with open(json_twin, "w") as f:
                f.write(json_text)
            written.append(json_twin)
            twin_text = twin_text.replace(inner.group(1), os.path.relpath(json_twin, folder))
        try:
            with open(twin, "w") as f:
                f.write(twin_text)
            rc3, out3, err3 = run([flag, os.path.basename(twin), "--max_train_steps", "2", "--train_file", train,
                                   "--validation_file", small, "--test_file", small, "--output_dir", out_dir + "_twin"],
                                  folder)
            twin_line = refusal(err3)
            if rc3 == 0:
                check_keys_listed(name + " (CPU twin)", twin, twin_text, is_yaml, out3)
                return "refused on the CPU: " + message.removeprefix("train_mrpc: error: ") + " | CPU twin runs"
            check(twin_line is not None, f"{name} (CPU twin): ends with one error line")
            return ("refused on the CPU: " + message.removeprefix("train_mrpc: error: ") + " | CPU twin refused: "
                    + (twin_line or "").removeprefix("train_mrpc: error: "))
        finally:
            for written_file in written:
                os.remove(written_file)
    return "refused: " + message.removeprefix("train_mrpc: error: ")


def main():
    with open(os.path.join(CONFIGS, "verdicts.json")) as f:
        expected = json.load(f)
    work = tempfile.mkdtemp(prefix="zt_real_world_")
    try:
        with open(os.path.join(DATA, "dev.tsv")) as f:
            rows = f.readlines()[:21]
        with open(os.path.join(work, "small.tsv"), "w") as f:
            f.writelines(rows)
        # Training rows for 8 ranks (trl's num_processes) of a 32-row micro-batch to each take a step.
        with open(os.path.join(DATA, "train.tsv")) as f:
            rows = f.readlines()[:301]
        with open(os.path.join(work, "train.tsv"), "w") as f:
            f.writelines(rows)
        verdicts = {}
        for root, _, files in sorted(os.walk(CONFIGS)):
            for file in sorted(files):
                if not file.endswith((".json", ".yaml")) or file == "verdicts.json":
                    continue
                path = os.path.join(root, file)
                name = os.path.relpath(path, CONFIGS)
                with open(path) as f:
                    text = f.read()
                verdicts[name] = verdict_of(name, path, text, file.endswith(".yaml"), work)
                print(f"     {name}: {verdicts[name]}")
        check(len(verdicts) >= 15, f"at least 15 configs ({len(verdicts)})")
        for name in sorted(set(expected) | set(verdicts)):
            check(expected.get(name) == verdicts.get(name), f"{name}: verdict as in verdicts.json")
        if verdicts != expected:
            print("verdicts now:\n" + json.dumps(verdicts, indent=2, sort_keys=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"real_world_configs: {len(failures)} checks failed")
        sys.exit(1)
    print("real_world_configs: all checks passed")


main()
