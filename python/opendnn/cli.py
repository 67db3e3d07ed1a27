# SPDX-License-Identifier: Apache-2.0
"""The ``opendnn`` command: runs the bundled C++ tool when the wheel has one (opendnn/bin/opendnn),
else a Python fallback with the same ``validate`` and ``print`` subcommands on Graph JSON files."""

import os
import sys


def _bundled():
    p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "opendnn")
    return p if os.path.isfile(p) and os.access(p, os.X_OK) else None


_MAX_DOCUMENT_BYTES = 64 << 20  # the library's limit on a Graph JSON document


def _read_document(path):
    """The file's text ("-": stdin), at most _MAX_DOCUMENT_BYTES: an endless stream stops there."""
    if path == "-":
        data = sys.stdin.buffer.read(_MAX_DOCUMENT_BYTES + 1)
    else:
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_DOCUMENT_BYTES + 1)
        except OSError as e:
            raise OSError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > _MAX_DOCUMENT_BYTES:
        raise ValueError(f"{path}: Graph JSON document larger than {_MAX_DOCUMENT_BYTES >> 20} MiB (the limit)")
    return data.decode("utf-8", errors="replace")


def _fallback(argv):
    import argparse

    from . import __version__, pygraph

    ap = argparse.ArgumentParser(prog="opendnn", description="opendnn graph tool (Python fallback)")
    ap.add_argument("--version", action="version", version=f"opendnn {__version__}")
    sub = ap.add_subparsers(dest="cmd")
    for name, help_ in (("validate", "validate a Graph JSON file"), ("print", "print a validated Graph JSON file")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("file")
    sub.add_parser("env", help="print the environment report (python -m opendnn.collect_env)")
    args = ap.parse_args(argv)
    if args.cmd is None:
        ap.print_help()
        return 0
    if args.cmd == "env":
        from .collect_env import main as env_main

        env_main()
        return 0
    try:
        text = _read_document(args.file)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    g = pygraph()
    try:
        g.deserialize(text)
        g.validate()
    except Exception as e:  # noqa: BLE001 - report any failure as the tool would
        print(f"{args.file}: {e}", file=sys.stderr)
        return 1
    if args.cmd == "validate":
        print(f"{args.file}: ok ({len(g.nodes_info())} nodes, {len(g.tensors())} tensors)")
    else:
        print(g.to_json())
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    exe = _bundled()
    if exe and os.environ.get("OPENDNN_CLI_PYTHON") != "1":
        os.execv(exe, [exe] + list(argv))
    return _fallback(argv)


if __name__ == "__main__":
    sys.exit(main())
