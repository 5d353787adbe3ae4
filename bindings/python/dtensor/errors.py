"""dtensor's exceptions: one class per dt_status_t, each carrying .status (the code), .status_name and the message
of dt_last_error(). They also derive from the nearest built-in exception (ValueError, TimeoutError, ...), so
`except ValueError` catches a bad argument."""


class Error(Exception):
    """A failed dtensor call: .status (dt_status_t code), .status_name ("DT_ERR_..."), .message, .function."""
    status = -1
    status_name = "DT_ERR_UNKNOWN"

    def __init__(self, message, function=None, status=None):
        if status is not None:
            self.status = status
        self.message = message
        self.function = function
        super().__init__(f"{message} [{self.status_name}]")  # the library's message names the function


class InvalidArgumentError(Error, ValueError):
    status, status_name = 1, "DT_ERR_INVALID_ARGUMENT"


class UnsupportedError(Error, NotImplementedError):
    status, status_name = 2, "DT_ERR_UNSUPPORTED"


class DTensorTimeoutError(Error, TimeoutError):
    status, status_name = 3, "DT_ERR_TIMEOUT"


TimeoutError_ = DTensorTimeoutError


class RemoteError(Error):
    status, status_name = 4, "DT_ERR_REMOTE"


class SystemError_(Error, OSError):
    status, status_name = 5, "DT_ERR_SYSTEM"


class CudaError(Error):
    status, status_name = 6, "DT_ERR_CUDA"


class InternalError(Error):
    status, status_name = 7, "DT_ERR_INTERNAL"


class InvalidHandleError(Error):
    status, status_name = 8, "DT_ERR_INVALID_HANDLE"


_BY_STATUS = {c.status: c for c in (InvalidArgumentError, UnsupportedError, DTensorTimeoutError, RemoteError,
                                    SystemError_, CudaError, InternalError, InvalidHandleError)}


def raise_for_status(status, message, function=None):
    cls = _BY_STATUS.get(status)
    if cls is None:
        raise Error(message, function, status)
    raise cls(message, function)
