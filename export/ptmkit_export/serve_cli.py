"""``ptmkit-serve EXPORT_DIR [--name] [--host] [--port] ...``: :func:`ptmkit_export.server.serve`
from the command line.

This module imports only the standard library, so that without the ``serve`` extra the command
still starts and says, in one line, what to install (exit status 2).
"""

from __future__ import annotations

import argparse
import sys

from ptmkit_export.serve_defaults import DEFAULT_GENERATION_SLOTS, DEFAULT_MAX_BODY_BYTES, missing_extra_message


def parser() -> argparse.ArgumentParser:
    """The ``ptmkit-serve`` argument parser."""
    parser = argparse.ArgumentParser(prog="ptmkit-serve", description="Serve a ptmkit export over the Open Inference Protocol (KServe v2).")
    parser.add_argument("export_dir")
    parser.add_argument("--name", default=None, help="model name in URLs (default: the export's run name)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, loopback only; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-batch", type=int, default=32, help="most rows per model call; 1 turns batching off")
    parser.add_argument("--max-delay-ms", type=float, default=5.0, help="longest wait for requests on their way to join a batch")
    parser.add_argument("--variant", default=None, help="fp32 or int8 (default: int8 when it passed its checks)")
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    parser.add_argument("--task", default=None, help="a multi-task export: the head to serve (default: its first task)")
    parser.add_argument("--generation-slots", type=int, default=DEFAULT_GENERATION_SLOTS, help="text generations (decoder exports) that run at once; more wait")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``ptmkit-serve``; returns the exit status: 0 after a graceful stop, 2 for a missing
    ``serve`` extra, a broken export directory, an invalid option or an address that cannot be
    bound, each reported as one ``error: ...`` line on stderr."""
    args = parser().parse_args(argv)
    try:
        from ptmkit_export.errors import ExportDirError
        from ptmkit_export.server import serve
    except ImportError as error:
        print(f"error: {missing_extra_message(error)}", file=sys.stderr)
        return 2
    try:
        serve(
            args.export_dir, name=args.name, host=args.host, port=args.port, max_batch=args.max_batch,
            max_delay_ms=args.max_delay_ms, variant=args.variant, threads=args.threads, device=args.device,
            max_body_bytes=args.max_body_bytes, generation_slots=args.generation_slots, task=args.task,
        )
    except (ExportDirError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
