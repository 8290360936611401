"""anvil's protected unittest runner. Shipped with anvil and written into the grading
directory by the grader; never taken from the workspace.

It runs only the expected tests the task names, each in its own suite, and reports each
test's outcome over the channel the grader owns: the descriptor whose number is its only
argument (a socket the grader made for this run). The grader first sends one JSON line —
the run's nonce, the expected tests and the source directories — and every line sent back
carries that nonce. Standard output is the tests' own and decides nothing.

Python runs isolated and without the site module (-I -S: no PYTHONPATH, no user site, the
script's directory not on the path, no .pth file or sitecustomize run at start); the source
directories are added after the standard library and before the site-packages directories
(added here as plain directories, their .pth files unread), so the workspace cannot shadow
`unittest` or any other standard module. Before each test and after it, the runner
checks that its own machinery (assertion methods, result, suite, loader and case classes,
exit functions, import) is unchanged: a change is reported as a tamper finding.

Code under test runs in this process, so a determined program could still forge a line;
that is why tasks should call the code under test in a separate process where they can, and
why the grader also scans the workspace for tampering.
"""

import builtins
import json
import os
import sys
import traceback
import unittest
import unittest.case
import unittest.loader
import unittest.result
import unittest.suite

# Bound before any code under test is imported.
_write = os.write
_read = os.read
_dup = os.dup
_close = os.close
_exit = os._exit
_dumps = json.dumps
_loads = json.loads
_format_exc = traceback.format_exception


class _Collect(unittest.TestResult):
    """Keeps the outcome of the one test it runs."""

    def __init__(self):
        super().__init__()
        self.outcome = None
        self.detail = ""

    def _set(self, outcome, err=None, detail=""):
        if self.outcome in (None, "passed"):
            self.outcome = outcome
            if err is not None:
                self.detail = "".join(_format_exc(*err))[-2000:]
            else:
                self.detail = detail

    # Each also does TestResult's own bookkeeping, which the verdict cross-checks.
    def addSuccess(self, test):
        super().addSuccess(test)
        self._set("passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set("failed", err)

    def addError(self, test, err):
        super().addError(test, err)
        self._set("error", err)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set("skipped", detail=str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set("expected_failure", err)

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set("unexpected_success")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failure = issubclass(err[0], test.failureException)
            self._set("failed" if failure else "error", err)


def _verdict(result):
    """The test's outcome, cross-checked against TestResult's own lists, and whether the
    result object itself was tampered with (an instance attribute over a method, a foreign
    type)."""
    if type(result) is not _Collect:
        return "error", "the result object was replaced", True
    shadowed = [k for k in vars(result) if hasattr(_Collect, k) and callable(getattr(_Collect, k))]
    if shadowed:
        return "error", "methods of the result were replaced: " + ", ".join(shadowed), True
    outcome = result.outcome or "error"
    clean = (
        result.testsRun == 1
        and not result.failures
        and not result.errors
        and not result.skipped
        and not result.expectedFailures
        and not result.unexpectedSuccesses
    )
    if outcome == "passed" and not clean:
        return "error", "the result's own record disagrees with a pass", True
    return outcome, result.detail or ("" if result.outcome else "the test reported nothing"), False


_WATCHED_CLASSES = (
    unittest.TestCase,
    unittest.TestResult,
    unittest.TestSuite,
    unittest.TestLoader,
    unittest.case._Outcome,
    unittest.suite.BaseTestSuite,
    _Collect,
)
_WATCHED_MODULES = (unittest, unittest.case, unittest.result, unittest.suite, unittest.loader)
_WATCHED_FUNCTIONS = (
    (sys, "exit"),
    (os, "_exit"),
    (os, "write"),
    (os, "read"),
    (builtins, "__import__"),
    (builtins, "isinstance"),
    (builtins, "getattr"),
    (builtins, "issubclass"),
    (json, "dumps"),
)


def _snapshot():
    snap = {}
    for cls in _WATCHED_CLASSES:
        for name, value in vars(cls).items():
            snap[(cls.__qualname__, name)] = value
    for mod in _WATCHED_MODULES:
        for name, value in vars(mod).items():
            if not name.startswith("__"):
                snap[(mod.__name__, name)] = value
    for owner, name in _WATCHED_FUNCTIONS:
        snap[(getattr(owner, "__name__", "?"), name)] = getattr(owner, name, None)
    # Every builtin (`__build_class__` builds the test classes themselves).
    for name, value in vars(builtins).items():
        snap[("builtins", name)] = value
    snap[("sys.modules", "unittest")] = sys.modules.get("unittest")
    snap[("sys", "gettrace")] = sys.gettrace()
    snap[("sys", "getprofile")] = sys.getprofile()
    return snap


# Names the unittest package adds to itself on demand: its submodules when first imported
# (`from unittest import mock`) and the lazily imported IsolatedAsyncioTestCase.
_LAZY = {"IsolatedAsyncioTestCase"}


def _expected_addition(key, value):
    owner, name = key
    if owner.startswith("unittest") and name in _LAZY:
        return True
    return isinstance(value, type(sys)) and value.__name__.startswith("unittest.")


def _changes(before, after):
    changed = [k for k in before if k not in after or after[k] is not before[k]]
    added = [k for k in after if k not in before and not _expected_addition(k, after[k])]
    return [".".join(k) for k in changed + added]


# What unittest itself keeps on a test class while running it.
_UNITTEST_CLASS_STATE = {"tearDown_exceptions", "_classSetupFailed", "_class_cleanups"}


def _test_snapshot(modules):
    """The protected test modules' globals and their classes' attributes: code under test that
    rewrites a test's helpers (`type`, a checking function) changes these."""
    snap = {}
    for file_part, (module, _) in modules.items():
        if module is None:
            continue
        for name, value in vars(module).items():
            snap[(file_part, name)] = value
            if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
                for attr, v in vars(value).items():
                    if attr not in _UNITTEST_CLASS_STATE:
                        snap[(file_part, name + "." + attr)] = v
    return snap


class _Channel:
    def __init__(self, fd):
        # A private, non-inheritable copy; the number the grader used is closed so that
        # processes the tests start do not inherit it.
        self.fd = _dup(fd)
        _close(fd)
        self.nonce = None

    def read_line(self):
        data = b""
        while not data.endswith(b"\n"):
            chunk = _read(self.fd, 65536)
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8")

    def send(self, **event):
        event["nonce"] = self.nonce
        line = (_dumps(event) + "\n").encode("utf-8")
        while line:
            n = _write(self.fd, line)
            line = line[n:]


# The modules the runner itself stands on. A workspace file by one of these names is an
# attempt on the runner (it cannot work: the workspace comes after the standard library);
# other standard names (`types.py`, `queue.py`, `code.py`) are ordinary project files.
_RUNNER_MODULES = {
    "unittest", "importlib", "json", "os", "sys", "builtins", "traceback", "site",
    "encodings", "io", "abc", "codecs", "ctypes", "posix", "gc", "inspect", "linecache",
}


def _shadow_findings(sources, loaded):
    """Top-level names in the source directories that would shadow a module the runner
    stands on, had they been ahead of it on the path."""
    found = []
    for src in sources:
        try:
            entries = sorted(os.listdir(src))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(src, entry)
            if entry.endswith(".py"):
                name = entry[:-3]
            elif os.path.isdir(path) and entry.isidentifier():
                name = entry
            elif ".cpython-" in entry or entry.endswith(".so"):
                name = entry.split(".")[0]
            else:
                continue
            if name in _RUNNER_MODULES:
                shown = os.path.relpath(path, src).encode("utf-8", "replace").decode("utf-8")
                found.append((shown, name))
    return found


def _load(path, name, source):
    """Runs a protected test file from `source`, read before any code under test ran (which
    could otherwise move the protected file's directory away and put another in its place)."""
    if source is None:
        raise ImportError("cannot read " + path)
    module = type(sys)(name)
    module.__file__ = path
    sys.modules[name] = module
    exec(compile(source, path, "exec"), module.__dict__)
    return module


def _not_dumpable():
    """No other process of the sandbox (a child the tests start) may read this one's memory
    (/proc/PID/mem, process_vm_readv), trace it, or take its descriptors (pidfd_getfd): the
    channel and its nonce stay here."""
    import ctypes

    PR_SET_DUMPABLE = 4
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.stderr.write("cannot make the runner undumpable\n")
        _exit(3)


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        sys.stderr.write("usage: python_unittest.py RESULTS_FD\n")
        _exit(2)
    _not_dumpable()
    chan = _Channel(int(sys.argv[1]))
    request = _loads(chan.read_line())
    chan.nonce = request["nonce"]
    sources = request["sources"]
    tests = request["tests"]
    root = sources[0]
    # Heard before any code under test runs: a run that ends after this is the tests' doing.
    chan.send(event="started")

    for rel, name in _shadow_findings(sources, None):
        chan.send(
            event="tamper",
            kind="shadows_module",
            path=rel,
            detail="shadows the standard or runner module '%s'" % name,
        )

    # The sources go after the standard library, then site-packages (as plain directories).
    import site

    sys.path.extend(list(sources))
    sys.path.extend(d for d in site.getsitepackages() if d not in sys.path)

    # Every protected test file is read now, before any of them (and the code under test they
    # import) runs.
    texts = {}
    for test_id in tests:
        file_part = test_id.partition("::")[0]
        if file_part not in texts:
            try:
                with open(os.path.join(root, file_part), "rb") as f:
                    texts[file_part] = f.read()
            except OSError:
                texts[file_part] = None

    baseline = _snapshot()
    modules = {}
    for test_id in tests:
        file_part, _, name = test_id.partition("::")
        if file_part in modules:
            continue
        module_name = file_part[:-3].replace("/", ".") if file_part.endswith(".py") else file_part
        try:
            modules[file_part] = (
                _load(os.path.join(root, file_part), module_name, texts[file_part]),
                None,
            )
        except BaseException as e:  # noqa: BLE001 - a module that raises or exits on import
            modules[file_part] = (None, "".join(_format_exc(type(e), e, e.__traceback__))[-2000:])
        changed = _changes(baseline, _snapshot())
        if changed:
            chan.send(
                event="tamper",
                kind="runner_patched",
                path=file_part,
                detail="importing it changed the runner: " + ", ".join(changed[:10]),
            )
            baseline = _snapshot()

    for test_id in tests:
        file_part, _, name = test_id.partition("::")
        module, error = modules[file_part]
        if module is None:
            chan.send(event="test", id=test_id, outcome="error", detail=error)
            continue
        cls_name, _, method = name.partition("::")
        cls = getattr(module, cls_name, None)
        if not (isinstance(cls, type) and issubclass(cls, unittest.TestCase)) or not hasattr(
            cls, method
        ):
            chan.send(event="test", id=test_id, outcome="missing", detail="no such test")
            continue
        before = _snapshot()
        before_tests = _test_snapshot(modules)
        result = _Collect()
        returned = []
        try:
            case = cls(method)
            original = getattr(case, method)

            def _run_and_note(*args, **kwargs):
                # unittest can swallow some exceptions (its private _ShouldStop) and report
                # success; a pass needs the test method itself to have returned.
                value = original(*args, **kwargs)
                returned.append(True)
                return value

            setattr(case, method, _run_and_note)
            unittest.TestSuite([case]).run(result)
        except BaseException as e:  # noqa: BLE001
            result._set("error", (type(e), e, e.__traceback__))
        if result.outcome in (None, "passed") and not returned:
            result.outcome = "error"
            result.detail = "the test method never returned (its run was cut short)"
        changed = _changes(before, _snapshot()) + _changes(before_tests, _test_snapshot(modules))
        if changed:
            chan.send(
                event="tamper",
                kind="runner_patched",
                path=file_part,
                detail="%s changed the runner: %s" % (test_id, ", ".join(changed[:10])),
            )
        outcome, detail, tampered = _verdict(result)
        if tampered:
            chan.send(event="tamper", kind="runner_patched", path=file_part, detail=detail)
        chan.send(event="test", id=test_id, outcome=outcome, detail=detail)
    chan.send(event="done")
    sys.stdout.flush()
    _exit(0)


if __name__ == "__main__":
    main()
