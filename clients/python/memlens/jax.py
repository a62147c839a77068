"""JAX: save the device memory profile at an out-of-memory error and upload it with the error's
text, as one report. JAX has no allocator observer to hook: `on_oom` wraps the code that may run
out (a context manager or a decorator on the train step or loop); when XLA's
`RESOURCE_EXHAUSTED` error leaves it, it takes `jax.profiler.device_memory_profile()` (the live
buffers with their Python stacks, at that instant) and the error as the traceback prints it,
uploads both (`oom.prof`, `oom.txt`), prints the link and lets the error go on as it was.
`upload_profile` sends a profile taken now (two of one run compare in memlens' diff).

Every call into JAX goes through `_backend` (a thin seam), so the hooks are tested without JAX;
`_JaxBackend` is the real one.
"""
import contextlib
import os
import sys
import tempfile
import traceback

from ._upload import upload


class _JaxBackend:
    """JAX's profiler, imported when first used."""

    def profile(self):
        """The device memory profile now: pprof protobuf bytes, gzip-compressed as JAX writes them."""
        import jax

        return jax.profiler.device_memory_profile()


_backend = _JaxBackend()

# The wordings of XLA's out-of-memory status (jaxlib's XlaRuntimeError, jax's JaxRuntimeError,
# older RuntimeError): what memlens' text importer reads, too.
_OOM_MARKS = ("RESOURCE_EXHAUSTED", "Resource exhausted", "Out of memory")


def is_oom(exc):
    """Whether an exception is XLA running out of memory (by its message: the exception's class
    moved from jaxlib.xla_extension.XlaRuntimeError to jax.errors.JaxRuntimeError)."""
    text = str(exc)
    return any(mark in text for mark in _OOM_MARKS)


def _write_temp(data, suffix):
    fd, path = tempfile.mkstemp(suffix=suffix)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def _upload_files(items, server, upload_kw, say):
    """Writes `(name, bytes)` items to temporary files and uploads them as one report; the link,
    or None with the failure told on stderr (the job's own outcome matters more)."""
    paths = []
    try:
        for name, data in items:
            path = os.path.join(tempfile.mkdtemp(prefix="memlens-jax-"), name)
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
        link = upload(paths if len(paths) > 1 else paths[0], server=server, quiet=True, **upload_kw)
        if say:
            print(f"memlens: memory report at {link}", file=sys.stderr)
        return link
    except Exception as e:
        print(f"memlens: could not upload the device memory profile: {e}", file=sys.stderr)
        return None
    finally:
        for path in paths:
            try:
                os.remove(path)
                os.rmdir(os.path.dirname(path))
            except OSError:
                pass


def upload_profile(server=None, name="profile.prof", print_link=True, **upload_kw):
    """Takes the device memory profile now and uploads it; returns the link (None on failure)."""
    try:
        data = _backend.profile()
    except Exception as e:
        print(f"memlens: could not take the device memory profile: {e}", file=sys.stderr)
        return None
    return _upload_files([(name, data)], server, upload_kw, print_link)


class on_oom(contextlib.ContextDecorator):
    """Wraps code that may run out of device memory. When an XLA out-of-memory error leaves the
    block (or the decorated function), the device memory profile of that instant and the error's
    text are uploaded as one report, and the error goes on untouched; any other exception, or
    none, uploads nothing. `link` holds the report's link afterwards (None when nothing was sent)."""

    def __init__(self, server=None, print_link=True, **upload_kw):
        self.server, self.print_link, self.upload_kw, self.link = server, print_link, upload_kw, None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is None or not is_oom(exc):
            return False
        text = "".join(traceback.format_exception(exc_type, exc, tb)).encode()
        items = []
        try:
            items.append(("oom.prof", _backend.profile()))
        except Exception as e:  # the profile may fail too; the message alone still explains much
            print(f"memlens: could not take the device memory profile: {e}", file=sys.stderr)
        items.append(("oom.txt", text))
        self.link = _upload_files(items, self.server, dict(self.upload_kw), self.print_link)
        return False
