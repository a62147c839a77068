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
    (`rank`, `world_size` say which and how many); `job` lines the report up with the job's
    other runs. Raises `UploadError` on a refusal or when the server stays unreachable."""
    server = _server(server)
    query = {k: v for k, v in {
        "title": title, "notes": notes, "job": job, "host": host, "run": run,
        "tags": ",".join(tags) if isinstance(tags, (list, tuple)) else tags,
        "rank": rank, "world_size": world_size,
    }.items() if v is not None}
    created = _post(server, "/api/reports", query, path_or_snapshot, name, {}, token, attempts, timeout, quiet)
    return server.rstrip("/") + created["url"]


def _server(server):
    server = server or os.environ.get("MEMLENS_SERVER")
    if not server:
        raise UploadError("no server: pass server=… or set MEMLENS_SERVER")
    return server


def _post(server, path, query, path_or_snapshot, name, headers, token, attempts, timeout, quiet):
    """POSTs the files as multipart to `path?query`, retried with backoff; the JSON answer."""
    token = token or os.environ.get("MEMLENS_TOKEN")
    files, temps = _as_files(path_or_snapshot, name)
    try:
        parts, tail = _parts(files)
        length = sum(len(h) + size + 2 for h, _, size in parts) + len(tail)
        wait = 0.5
        for attempt in range(1, max(1, attempts) + 1):
            conn, base = _connection(server, timeout)
            target = f"{base}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
            sent = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}", "Content-Length": str(length),
                    **headers}
            if token:
                sent["Authorization"] = f"Bearer {token}"
            retry_after = None
            try:
                conn.request("POST", target, body=_body(parts, tail), headers=sent)
                resp = conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
                if 200 <= resp.status < 300:
                    return json.loads(text)
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


class Recording:
    """A report made window by window: window 0 creates it (`start`), each later window joins
    it (`add`), and the server analyses the windows as one snapshot."""

    def __init__(self, server=None, token=None, name="snapshot.pickle", attempts=4, timeout=120, **meta):
        self.server, self.token, self.name = _server(server), token, name
        self.attempts, self.timeout, self.meta = attempts, timeout, meta
        self.link = self.id = self._owner = None
        self.windows = 0

    def add(self, snapshot):
        """Sends the next window (a snapshot dict, pickled bytes or a path); returns the link."""
        if self.id is None:
            query = {k: v for k, v in self.meta.items() if v is not None}
            query["window"] = 0
            created = _post(self.server, "/api/reports", query, snapshot, self.name, {}, self.token,
                            self.attempts, self.timeout, True)
            self.id, self._owner = created["id"], created["delete_token"]
            self.link = self.server.rstrip("/") + created["url"]
        else:
            _post(self.server, f"/api/reports/{self.id}/windows", {"window": self.windows}, snapshot, self.name,
                  {"X-Delete-Token": self._owner}, self.token, self.attempts, self.timeout, True)
        self.windows += 1
        return self.link
