"""`python -m memlens upload FILE… --server URL [--token T]`: prints the share link."""
import argparse
import sys

from ._upload import UploadError, upload


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m memlens", description="Send snapshots to a memlens server.")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upload", help="upload files as one report and print its share link")
    up.add_argument("files", nargs="+")
    up.add_argument("--server", help="the memlens server (default: $MEMLENS_SERVER)")
    up.add_argument("--token", help="upload token (default: $MEMLENS_TOKEN)")
    up.add_argument("--title")
    up.add_argument("--notes")
    up.add_argument("--tags", help="comma-separated")
    up.add_argument("--job")
    up.add_argument("--run", help="groups the ranks of one job into one report")
    up.add_argument("--attempts", type=int, default=4)
    args = p.parse_args(argv)
    try:
        link = upload(args.files, server=args.server, token=args.token, title=args.title, notes=args.notes,
                      tags=args.tags, job=args.job, run=args.run, attempts=args.attempts, quiet=False)
    except (UploadError, OSError) as e:
        print(f"memlens: {e}", file=sys.stderr)
        return 2
    print(link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
