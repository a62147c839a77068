"""The upload itself: a multipart body streamed from disk with an exact Content-Length, retried
with backoff while the server is unreachable, failing (5xx) or busy (429, after Retry-After)."""
import http.client
import io
import json
import os
import pickle
import sys
import tempfile
import time
import urllib.parse

CHUNK = 1 << 20
BOUNDARY = "memlens-py-7c3e91a2"


class UploadError(Exception):
    """The server refused the upload, or could not be reached after every attempt."""


def _parts(files):
    """(head bytes, path, size) per file, and the closing bytes."""
    parts = []
    for path, name in files:
        name = name.replace('"', "_")
        head = (
            f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        parts.append((head, path, os.path.getsize(path)))
    return parts, f"--{BOUNDARY}--\r\n".encode()


def _body(parts, tail):
    for head, path, _ in parts:
        yield head
        with open(path, "rb") as f:
            while True:
                block = f.read(CHUNK)
                if not block:
                    break
                yield block
        yield b"\r\n"
    yield tail


def _connection(url, timeout):
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise UploadError(f"{url}: not an http(s) server address")
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    return cls(u.hostname, u.port, timeout=timeout), u.path.rstrip("/")


def _as_files(path_or_snapshot, name):
    """(path, name) pairs to send, and temporary files to remove afterwards."""
    items = path_or_snapshot if isinstance(path_or_snapshot, (list, tuple)) else [path_or_snapshot]
    files, temps = [], []
    for item in items:
        if isinstance(item, (str, os.PathLike)):
            files.append((os.fspath(item), os.path.basename(os.fspath(item))))
            continue
        # A snapshot dict (torch.cuda.memory._snapshot()) or its pickled bytes.
        data = item if isinstance(item, (bytes, bytearray)) else pickle.dumps(item, protocol=4)
        fd, tmp = tempfile.mkstemp(suffix=".pickle")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        temps.append(tmp)
        files.append((tmp, name or "snapshot.pickle"))
    return files, temps


def upload(path_or_snapshot, server=None, token=None, title=None, tags=None, run=None, notes=None,
           job=None, host=None, rank=None, world_size=None, name=None, attempts=4, timeout=120,
           quiet=True):
    """Uploads one or more snapshot files (paths), a snapshot dict or pickled bytes as one
    report; returns the share link. `run` groups the ranks of one job into one report
    (`rank`, `world_size` say which and how many). Raises `UploadError` on a refusal or when
    the server stays unreachable."""
    server = server or os.environ.get("MEMLENS_SERVER")
    if not server:
        raise UploadError("no server: pass server=… or set MEMLENS_SERVER")
    token = token or os.environ.get("MEMLENS_TOKEN")
    files, temps = _as_files(path_or_snapshot, name)
    try:
        query = {k: v for k, v in {
            "title": title, "notes": notes, "job": job, "host": host, "run": run,
            "tags": ",".join(tags) if isinstance(tags, (list, tuple)) else tags,
            "rank": rank, "world_size": world_size,
        }.items() if v is not None}
        parts, tail = _parts(files)
        length = sum(len(h) + size + 2 for h, _, size in parts) + len(tail)
        wait = 0.5
        for attempt in range(1, max(1, attempts) + 1):
            conn, base = _connection(server, timeout)
            path = f"{base}/api/reports" + (f"?{urllib.parse.urlencode(query)}" if query else "")
            headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(length)}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            retry_after = None
            try:
                conn.request("POST", path, body=_body(parts, tail), headers=headers)
                resp = conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
                if resp.status == 201:
                    created = json.loads(text)
                    return server.rstrip("/") + created["url"]
                try:
                    why = json.loads(text).get("error", text)
                except ValueError:
                    why = text
                message = f"{server} answered {resp.status}: {why}"
                if resp.status != 429 and resp.status < 500:
                    raise UploadError(message)
                retry_after = resp.getheader("Retry-After")
            except (OSError, http.client.HTTPException) as e:
                message = f"cannot reach {server}: {e}"
            finally:
                conn.close()
            if attempt == attempts:
                raise UploadError(message)
            pause = min(float(retry_after) if retry_after else wait, 60.0)
            if not quiet:
                print(f"memlens: {message}; retrying in {pause:g} s", file=sys.stderr)
            time.sleep(pause)
            wait *= 2
    finally:
        for t in temps:
            try:
                os.remove(t)
            except OSError:
                pass
