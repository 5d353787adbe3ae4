#!/usr/bin/python3
"""Runs a program and records its peak RSS: peak_rss.py [--bind] OUT_DIR PROGRAM [ARGS...]

Writes OUT_DIR/rank<R>.json, {"rank": R, "peak_rss_bytes": ...}, where R is the launcher's rank (DT_RANK under
dtrun, RANK under torchrun, else 0) and the peak is the program's ru_maxrss (wait4: the process and the children it
waited for). bench/train/run.py starts every rank of both sides through it (dtrun and torchrun --no-python start it
in place of the program), so that both sides' memory is measured the same way. Exits with the program's exit code
(128 + N when signal N ended it); SIGINT, SIGTERM and SIGHUP are passed on to the program. With --bind the program
runs on one core only: local rank L (DT_LOCAL_RANK, LOCAL_RANK) on the L-th core this process may use, modulo their
count.
"""
import json
import os
import signal
import sys


def main():
    argv = sys.argv[1:]
    bind = bool(argv) and argv[0] == "--bind"
    if bind:
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit("usage: peak_rss.py [--bind] OUT_DIR PROGRAM [ARGS...]")
    out_dir, cmd = argv[0], argv[1:]
    rank = int(os.environ.get("DT_RANK", os.environ.get("RANK", "0")))
    if bind:
        local_rank = int(os.environ.get("DT_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[local_rank % len(cores)]})
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            print(f"peak_rss.py: cannot run {cmd[0]}: {e}", file=sys.stderr)
            os._exit(127)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda n, _frame: os.kill(pid, n))
    _, status, usage = os.wait4(pid, 0)  # retried after a signal (PEP 475)
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "peak_rss_bytes": usage.ru_maxrss * 1024}, f)
    if os.WIFSIGNALED(status):
        sys.exit(128 + os.WTERMSIG(status))
    sys.exit(os.WEXITSTATUS(status))


if __name__ == "__main__":
    main()
