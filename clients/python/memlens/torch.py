"""Dump and upload from a training job: `record` (a context manager and decorator; with
`every_steps=`/`every_seconds=`, window by window into one growing report) and `on_oom`
(PyTorch's OOM observer). Neither ever masks the job's own exception: an OOM is still
raised as it was, whatever happens to the upload.

On a multi-rank job (`RANK`/`WORLD_SIZE` set by the launcher) each rank sends
`rank{N}.pickle` keyed by the job's run id (`TORCHELASTIC_RUN_ID`, or `run=`), so the ranks make
one report, and only rank 0 prints the link.

Every call into PyTorch goes through `_backend` (a thin seam), so the hooks are tested without
PyTorch; `_TorchBackend` is the real one.
"""
import contextlib
import os
import queue
import sys
import tempfile
import threading
import time

from ._upload import Recording, upload


class _TorchBackend:
    """PyTorch's allocator-history API, imported when first used."""

    def start(self, max_entries, stacks):
        import torch

        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=max_entries)

    def stop(self):
        import torch

        torch.cuda.memory._record_memory_history(enabled=None)

    def dump(self, path):
        import torch

        torch.cuda.memory._dump_snapshot(path)

    def window(self, max_entries, stacks):
        """The snapshot so far (the state now, the trace since the last window), and a fresh
        history for the next window."""
        import torch

        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks,
                                                 max_entries=max_entries, clear_history=True)
        return snapshot

    def on_step(self, fn):
        """Calls `fn()` after every optimizer step; returns what removes the hook."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        return register_optimizer_step_post_hook(lambda optimizer, args, kwargs: fn())

    def attach_oom_observer(self, fn):
        import torch

        torch._C._cuda_attach_out_of_memory_observer(fn)


_backend = _TorchBackend()


def _job():
    """(rank, world size, run id) from the launcher's environment."""
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    return rank, world, os.environ.get("TORCHELASTIC_RUN_ID")


def _dump_and_upload(server, run, upload_kw, say):
    """Dumps the allocator snapshot to a temporary file and uploads it; returns the link or
    None (the failure told on stderr)."""
    rank, world, env_run = _job()
    run = run or env_run
    name = f"rank{rank}.pickle" if world > 1 else "snapshot.pickle"
    fd, path = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    try:
        _backend.dump(path)
        several = world > 1
        link = upload(path, server=server, name=name, run=run if several else None,
                      rank=rank if several else None, world_size=world if several else None,
                      quiet=True, **upload_kw)
        if say and rank == 0:
            print(f"memlens: memory report at {link}", file=sys.stderr)
        return link
    except Exception as e:  # the job's own outcome matters more than the upload
        print(f"memlens: could not upload the memory snapshot: {e}", file=sys.stderr)
        return None
    finally:
        try:
            os.remove(path)
        except OSError:
            pass


class record(contextlib.ContextDecorator):
    """Records allocator history inside the block (or decorated function); on leaving it —
    normally or by any exception, an OOM above all — dumps the snapshot and uploads it, then
    lets the exception go on untouched. `link` holds the share link afterwards.

    With `every_steps=N` (optimizer steps) or `every_seconds=S` the recording goes window by
    window: after each window the snapshot is taken and the history cleared, so each upload
    holds one window and stays small; the windows make one report that grows as they arrive
    (its link is printed with the first). Snapshots are pickled and sent on a thread of their
    own, in order; leaving the block sends the last window (with the OOM, if one ended it) and
    waits for the uploads."""

    def __init__(self, server=None, max_entries=1_000_000, stacks="python", run=None, print_link=True,
                 every_steps=None, every_seconds=None, **upload_kw):
        self.server, self.max_entries, self.stacks, self.run = server, max_entries, stacks, run
        self.print_link, self.upload_kw, self.link = print_link, upload_kw, None
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self._windows = None

    def __enter__(self):
        _backend.start(self.max_entries, self.stacks)
        if self.every_steps or self.every_seconds:
            self._windows = _Windows(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self._windows is not None:
                self.link = self._windows.finish()
                self._windows = None
            else:
                self.link = _dump_and_upload(self.server, self.run, dict(self.upload_kw), self.print_link)
        finally:
            try:
                _backend.stop()
            except Exception:
                pass
        return False


class _Windows:
    """One process's windows: taken on the training thread after an optimizer step, pickled and
    uploaded in order by a thread of their own."""

    def __init__(self, rec):
        self.rec, self.steps, self.last = rec, 0, time.monotonic()
        rank, world, _ = _job()
        name = f"rank{rank}.pickle" if world > 1 else "snapshot.pickle"
        kw = dict(rec.upload_kw)
        self.say = rec.print_link and rank == 0
        self.recording = None
        try:
            self.recording = Recording(server=rec.server, token=kw.pop("token", None), name=name,
                                       attempts=kw.pop("attempts", 4), timeout=kw.pop("timeout", 120), **kw)
        except Exception as e:
            print(f"memlens: cannot record window by window: {e}", file=sys.stderr)
        self.queue = queue.Queue()
        self.sender = threading.Thread(target=self._send_all, name="memlens-windows", daemon=True)
        self.sender.start()
        self.hook = _backend.on_step(self._after_step)

    def _after_step(self):
        self.steps += 1
        r = self.rec
        due = (r.every_steps and self.steps % r.every_steps == 0) or (
            r.every_seconds and time.monotonic() - self.last >= r.every_seconds)
        if due:
            self._take()

    def _take(self):
        self.last = time.monotonic()
        try:
            self.queue.put(_backend.window(self.rec.max_entries, self.rec.stacks))
        except Exception as e:  # the job goes on whatever the recording does
            print(f"memlens: could not take a memory window: {e}", file=sys.stderr)

    def _send_all(self):
        failed = False
        while True:
            snapshot = self.queue.get()
            if snapshot is None:
                return
            if failed or self.recording is None:
                continue
            try:
                first = self.recording.id is None
                link = self.recording.add(snapshot)
                if first and self.say:
                    print(f"memlens: memory report at {link} (it grows as the job runs)", file=sys.stderr)
            except Exception as e:
                # A window lost would leave a hole in the timeline: the later ones are not sent.
                print(f"memlens: could not upload a memory window: {e}; the report stops there",
                      file=sys.stderr)
                failed = True

    def finish(self):
        """Sends the last window, waits for every upload; the report's link."""
        try:
            self.hook.remove()
        except Exception:
            pass
        self._take()
        self.queue.put(None)
        self.sender.join()
        return self.recording.link if self.recording is not None else None


class _OomHook:
    def __init__(self, server, run, timeout, print_link, upload_kw):
        self.server, self.run, self.timeout, self.print_link = server, run, timeout, print_link
        self.upload_kw, self.links, self._busy = upload_kw, [], threading.Lock()

    def __call__(self, device, alloc, device_alloc, device_free):
        # Called inside the allocator as the OOM happens: never raise, never block for long.
        if not self._busy.acquire(blocking=False):
            return
        try:
            done = []
            worker = threading.Thread(
                target=lambda: done.append(_dump_and_upload(self.server, self.run, dict(self.upload_kw), self.print_link)),
                daemon=True,
            )
            worker.start()
            worker.join(self.timeout)
            if done and done[0]:
                self.links.append(done[0])
            elif worker.is_alive():
                print(f"memlens: the snapshot upload took over {self.timeout} s; the job goes on", file=sys.stderr)
        except Exception as e:
            print(f"memlens: OOM hook failed: {e}", file=sys.stderr)
        finally:
            self._busy.release()


def on_oom(server=None, run=None, timeout=60, max_entries=1_000_000, stacks="python", start=True, print_link=True,
           **upload_kw):
    """Attaches PyTorch's OOM observer: when an allocation fails, the snapshot (with the failed
    request in it) is dumped and uploaded — bounded by `timeout` seconds — before PyTorch raises
    its `OutOfMemoryError` as usual. Starts allocator history first unless `start=False`.
    Returns the hook (its `links` lists what was uploaded)."""
    if start:
        _backend.start(max_entries, stacks)
    hook = _OomHook(server, run, timeout, print_link, upload_kw)
    _backend.attach_oom_observer(hook)
    return hook
