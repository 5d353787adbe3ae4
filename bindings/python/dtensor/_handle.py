"""The base of every object that owns a C API handle: destroyed once, by close() or when collected."""
import sys


class Handle:
    _destroy = None  # the dt_*_destroy function of the subclass

    def __init__(self, handle):
        self._h = handle

    @property
    def handle(self):
        """The raw C handle (an int), for other C API callers."""
        return self._h

    def close(self):
        """Releases the handle (idempotent). Using the object afterwards raises InvalidHandleError."""
        h, self._h = self._h, None
        if h is not None:
            type(self)._destroy(h)

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h is None or sys.is_finalizing():
            return  # at interpreter exit the process is going away: the library need not release anything
        try:
            type(self)._destroy(h)
        except Exception:  # noqa: BLE001 - a destructor must not raise
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
