"""What a hand-off from the event loop to a thread costs, with nothing to
do there: the part of ``CtxlogSession.add_items`` (and of every async
call of the adapters) that is not the store's.

A function that does nothing is awaited ``--calls`` times through
``ctxlog._workers.Workers`` (the adapters' threads) and through
``asyncio.to_thread``; p50 and p99 of each.

    python handoff_bench.py [--calls 3000]
"""

import argparse
import asyncio
import time

from ctxlog._workers import Workers


def _nothing() -> None:
    return None


def _summary(name: str, seconds: list[float]) -> str:
    seconds.sort()
    p50 = seconds[len(seconds) // 2] * 1e6
    p99 = seconds[min(len(seconds) - 1, len(seconds) * 99 // 100)] * 1e6
    return f"{name}: p50 {p50:.1f} us, p99 {p99:.1f} us"


async def _timed(call, calls: int) -> list[float]:
    for _ in range(min(200, calls)):  # threads started, caches warm
        await call()
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        await call()
        seconds.append(time.perf_counter() - start)
    return seconds


async def main(calls: int) -> None:
    workers = Workers(2, "handoff-bench")
    try:
        print(_summary("Workers.run", await _timed(lambda: workers.run(_nothing), calls)))
    finally:
        workers.stop()
    print(_summary("asyncio.to_thread", await _timed(lambda: asyncio.to_thread(_nothing), calls)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    asyncio.run(main(parser.parse_args().calls))
