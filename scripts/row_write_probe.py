#!/usr/bin/python3
"""What one small scattered row write costs on a file system, three ways: the
question behind a cached table's write-backs (docs/cache.md, "Not built yet").

Writes ROWS random rows of ROW_BYTES each into a file of FILE_ROWS rows, a
new file for each case:
  fresh   pwrite into a new, sparse file (the page cache gets small pages)
  folios  pwrite into a file first written in 1 MiB pieces and synced (its
          pages came in as large folios, as a checkpoint loaded into the
          file leaves them)
  mapped  a copy into a shared mapping of a file written the same way (the
          kernel writes the dirty pages back later)
and prints microseconds a row for each. Python's own cost per call (about a
microsecond) is in every figure; the differences are the file system's.

usage: row_write_probe.py DIR [--rows N] [--file-rows N] [--row-bytes B]
"""
import argparse
import mmap
import os
import random
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", help="a directory on the file system to measure (the file is removed after)")
    p.add_argument("--rows", type=int, default=200_000, help="rows written in each case")
    p.add_argument("--file-rows", type=int, default=666_952, help="rows in the file")
    p.add_argument("--row-bytes", type=int, default=512, help="bytes a row")
    a = p.parse_args()
    if a.rows <= 0 or a.file_rows <= 0 or a.row_bytes <= 0:
        sys.exit("row_write_probe.py: --rows, --file-rows and --row-bytes must be positive")
    if not os.path.isdir(a.dir):
        sys.exit(f"row_write_probe.py: {a.dir} is not a directory")
    size = a.file_rows * a.row_bytes
    rng = random.Random(1)
    offsets = [rng.randrange(a.file_rows) * a.row_bytes for _ in range(a.rows)]
    row = b"\x03" * a.row_bytes
    chunk = b"\x01" * (1 << 20)

    def timed(case, written_first, mapped):
        # Each case on a file of its own: rows written into a file first
        # change how the page cache holds it.
        path = os.path.join(a.dir, f"row-write-probe-{os.getpid()}-{case}.rows")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
            if written_first:
                for off in range(0, size, len(chunk)):
                    os.pwrite(fd, chunk[: min(len(chunk), size - off)], off)
                os.fsync(fd)
            if mapped:
                with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as m:
                    start = time.perf_counter()
                    for off in offsets:
                        m[off:off + a.row_bytes] = row
                    return time.perf_counter() - start
            start = time.perf_counter()
            for off in offsets:
                os.pwrite(fd, row, off)
            return time.perf_counter() - start
        finally:
            os.close(fd)
            os.remove(path)

    results = {"fresh": timed("fresh", False, False), "folios": timed("folios", True, False),
               "mapped": timed("mapped", True, True)}
    print(f"{a.rows} random {a.row_bytes}-byte rows into a file of {a.file_rows} rows in {a.dir}:")
    for case, what in (("fresh", "pwrite, a new sparse file"),
                       ("folios", "pwrite, a file written in 1 MiB pieces and synced"),
                       ("mapped", "copy into a shared mapping of a file written so")):
        print(f"  {case:<7} {results[case] / a.rows * 1e6:8.2f} us a row  ({what})")


if __name__ == "__main__":
    main()
