"""Start-up time of the quick commands, as a ratio to a bare `python -c pass`.

Run: python bench/startup.py [--rounds 7]. Every round starts each command once, in
turn (interleaved, so a busy machine slows all of them alike), and the figure is the
median wall time over the rounds divided by the median of `python -c pass`. The
commands that need no tensors (probe norms, probe paths, anatomy --list) should stay
far below `python -c "import torch"`, printed beside them as the reference they avoid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "depthlab"]
# name -> (command, target ratio to `python -c pass` or None). The torch-free commands'
# target: a tenth of what importing torch alone costs on a laptop (about 90x).
COMMANDS = {
    "python -c pass": ([sys.executable, "-c", "pass"], None),
    'python -c "import torch"': ([sys.executable, "-c", "import torch"], None),
    "depthlab --help": ([*CLI, "--help"], 10),
    "depthlab probe norms 3 4": ([*CLI, "probe", "norms", "3", "4"], 10),
    "depthlab probe paths --depth 2": ([*CLI, "probe", "paths", "--depth", "2"], 10),
    "depthlab anatomy --list": ([*CLI, "anatomy", "--list"], 10),
    "depthlab anatomy gpt2 (counts on the model)": ([*CLI, "anatomy", "gpt2"], None),
    "depthlab probe gradflow --depth 32": ([*CLI, "probe", "gradflow", "--depth", "32"], None),
}
BASELINE = "python -c pass"


def wall_s(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command (default 7)")
    args = parser.parse_args(argv)
    env = os.environ | {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for cmd, _ in COMMANDS.values():  # warm the file cache; not timed
        wall_s(cmd, env)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.rounds):
        for name, (cmd, _) in COMMANDS.items():
            times[name].append(wall_s(cmd, env))
    base = statistics.median(times[BASELINE])
    print(f"{args.rounds} interleaved rounds, machine CPUs {os.cpu_count()}, load average "
          f"{os.getloadavg()[0]:.2f}; python -c pass: {1000 * base:.0f} ms")
    width = max(map(len, COMMANDS))
    print(f"{'command':<{width}}  {'median ms':>9}  {'x python -c pass':>16}  {'target':>6}")
    for name, values in times.items():
        median = statistics.median(values)
        target = COMMANDS[name][1]
        verdict = "" if target is None else f"<= {target}" + (
            "" if median / base <= target else "  MISSED")
        print(f"{name:<{width}}  {1000 * median:>9.0f}  {median / base:>16.1f}  {verdict:>6}")


if __name__ == "__main__":
    main()
