#!/usr/bin/env python3
"""tests/conformance/run.py on made-up node tests and a made-up runner:

  - a listed case that fails on the listed data is a tpfuse failure (DROPPED);
  - a listed case that fails on data that differs from the listed digest is
    a changed reference (REFERENCE CHANGED, naming the case and the package
    versions of the list and of this run), not a DROPPED case;
  - --update refuses to drop a failing listed case that is not named, and
    leaves the list as it was; named with --drop (or TPF_CONFORMANCE_DROP) it
    is dropped, and the newly passing cases are added with their digests;
  - --drop naming a case that is not a listed failure is refused.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run.py")
failures = []

RUNNER = r"""#!/usr/bin/env python3
import os, sys
data, results = sys.argv[1], sys.argv[sys.argv.index("--results") + 1]
fail = set(os.environ.get("FAKE_FAIL", "").split(","))
unsupported = set(os.environ.get("FAKE_UNSUPPORTED", "").split(","))
with open(results, "w") as f:
    for name in sorted(os.listdir(data)):
        if name in unsupported:
            f.write("%s\tunsupported\tcast to dtype 99 not supported\n" % name)
        elif name.startswith("test_"):
            ok = name not in fail
            f.write("%s\t%s\t%s\n" % (name, "pass" if ok else "fail", "" if ok else "element 0 is 7, expected 0"))
sys.exit(1 if fail & set(os.listdir(data)) else 0)
"""


def expect(cond, what, out=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        print(out)


def main():
    spec = importlib.util.spec_from_file_location("gen", os.path.join(HERE, "gen-node-data.py"))
    gen = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(gen)
    except ImportError as e:
        print("skipped: %s" % e)
        return 77
    tmp = tempfile.mkdtemp()
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        for name in ("test_a", "test_b", "test_c", "test_new"):
            os.makedirs(os.path.join(data, name, "test_data_set_0"))
            with open(os.path.join(data, name, "model.onnx"), "wb") as f:
                f.write(name.encode())
            with open(os.path.join(data, name, "test_data_set_0", "output_0.pb"), "wb") as f:
                f.write(b"expected " + name.encode())
        with open(os.path.join(data, ".complete"), "w") as f:
            f.write(gen.reference_versions() + "\n")  # generation is skipped
        runner = os.path.join(tmp, "runner.py")
        with open(runner, "w") as f:
            f.write(RUNNER)
        os.chmod(runner, 0o755)
        lst = os.path.join(tmp, "passing.txt")

        def run(*args, fail="", unsupported="", env_drop=None):
            env = dict(os.environ, FAKE_FAIL=fail, FAKE_UNSUPPORTED=unsupported)
            env.pop("TPF_CONFORMANCE_UPDATE", None)
            env.pop("TPF_CONFORMANCE_DROP", None)
            if env_drop is not None:
                env["TPF_CONFORMANCE_DROP"] = env_drop
            p = subprocess.run([sys.executable, RUN, "--runner", runner, "--data", data, "--list", lst,
                                "--min-total", "1", "--min-pass", "1"] + list(args),
                               capture_output=True, text=True, env=env)
            return p.returncode, p.stdout + p.stderr

        # a list of a, b, c made by --update (test_new fails for now)
        rc, out = run("--update", unsupported="test_new")
        text = open(lst).read() if os.path.exists(lst) else ""
        expect(rc == 0 and "test_a " in text and "test_new" not in text and "# reference: onnx" in text,
               "--update writes the passing cases with digests and the reference versions", out + text)
        listed = text

        rc, out = run()
        expect(rc == 0 and "newly passing: test_new" in out, "all listed pass; a new case is reported", out)

        rc, out = run(fail="test_b")
        expect(rc == 1 and "DROPPED test_b" in out and "REFERENCE CHANGED" not in out,
               "a listed case failing on the listed data is a tpfuse failure", out)

        with open(os.path.join(data, "test_c", "test_data_set_0", "output_0.pb"), "wb") as f:
            f.write(b"another reference")
        rc, out = run(fail="test_c")
        expect(rc == 1 and "REFERENCE CHANGED test_c" in out and "DROPPED test_c" not in out
               and "onnx " in out.split("REFERENCE CHANGED test_c", 1)[1].splitlines()[0],
               "a listed case failing on changed data names the case and the versions", out)

        rc, out = run("--update", fail="test_c")
        expect(rc == 1 and "NOT DROPPED test_c" in out and open(lst).read() == listed,
               "--update refuses to drop an unnamed failing case and leaves the list", out)

        rc, out = run("--update", "--drop", "test_a", fail="test_c")
        expect(rc == 1 and "test_a" in out and open(lst).read() == listed,
               "--drop of a case that passes is refused", out)

        rc, out = run("--update", fail="test_c", env_drop="test_c")
        text = open(lst).read()
        expect("wrote 3 passing cases" in out and "test_c" not in text and "test_new " in text
               and "test_a " in text,
               "a failing case named in TPF_CONFORMANCE_DROP is dropped; new cases are added "
               "(the run still fails: a case failed)", out + text)
    finally:
        shutil.rmtree(tmp)
    if failures:
        print("%d failed" % len(failures))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
