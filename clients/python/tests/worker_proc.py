"""A worker process for the SIGTERM test: runs every task of QUEUE until told
to stop, and says so on stdout. Usage: worker_proc.py URL QUEUE"""

import sys

import norn


def main() -> None:
    url, queue = sys.argv[1], sys.argv[2]

    def handle(task: norn.ActiveTask) -> str:
        task.wait()  # until a cancel, a lost lease or the end of the shutdown grace
        print(f"handler saw {type(task.reason).__name__}", flush=True)
        return "ignored"

    with norn.Client(url) as client:
        norn.Worker(client, {queue: handle}, concurrency=2, shutdown_grace=0.2, wait=5).run()


if __name__ == "__main__":
    main()
