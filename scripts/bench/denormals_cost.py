"""What flushing denormal numbers saves a CPU training step (``hardware.denormals``), and what it changes.

    python scripts/bench/denormals_cost.py [--presets bherd_rnn_imdb,default] [--steps 10] [--repeats 3] [--out FILE]

For each preset (``default``: the default experiment) it builds the run's model and data as ``fedrun`` does (on this
machine's data), takes client 0's first ``--steps`` minibatches and times their loss and gradient at the initial
model on one thread, with denormals kept (IEEE gradual underflow) and flushed, in ``--repeats`` interleaved rounds
(the median of each); then the evaluation of 1000 test samples each way; and the largest difference between the two
modes' gradients, relative to the largest gradient entry.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch


def timed(work) -> tuple[float, object]:
    """Seconds ``work()`` took, and what it gave."""
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out


def measure(preset: str, cfg, steps: int, repeats: int) -> dict:
    """``cfg``'s model on client 0's first ``steps`` minibatches: each mode's step and evaluation times, and the
    largest difference of the two modes' gradients relative to the largest gradient entry."""
    from fedrun.engine.run.simulation import Simulation

    sim = Simulation.from_config(cfg)
    torch.set_num_threads(1)
    b = int(cfg.fl.batch_size)
    mine = torch.as_tensor(sim.partition.indices[0][: steps * b])
    batches = [(sim.data.x_train[i], sim.data.y_train[i]) for i in mine.split(b)]
    params, buffers = sim.state.params, sim.state.buffers
    test = sim.data.x_test[:1000]

    def steps_of():
        return [sim.model.loss_and_grad(params, buffers, x, y)[1] for x, y in batches]

    def evaluate():
        with torch.no_grad():
            sim.model.forward(params, buffers, test)

    times = {mode: {"step": [], "eval": []} for mode in ("keep", "flush")}
    grads = {}
    for _ in range(repeats):
        for mode in ("keep", "flush"):
            torch.set_flush_denormal(mode == "flush")
            steps_of()  # warm-up in this mode
            seconds, grads[mode] = timed(steps_of)
            times[mode]["step"].append(seconds / len(batches))
            times[mode]["eval"].append(timed(evaluate)[0])
    torch.set_flush_denormal(cfg.hardware.denormals == "flush")  # the config's own again
    grads = {mode: torch.stack(g) for mode, g in grads.items()}
    scale = grads["keep"].abs().max().item()
    return {"preset": preset, "model": cfg.model.name, "data": cfg.data.name, "batch": b, "steps": len(batches),
            **{f"{what}_{mode}": statistics.median(times[mode][what]) for mode in times for what in ("step", "eval")},
            "difference": (grads["keep"] - grads["flush"]).abs().max().item() / scale}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", default="bherd_rnn_imdb,default")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from fedrun.config.compose import compose_config
    from fedrun.rundir.files import device_name, git_commit

    rows = [measure(p, compose_config([] if p == "default" else [f"experiment={p}"]), args.steps, args.repeats)
            for p in args.presets.split(",")]
    command = "python scripts/bench/denormals_cost.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = ["| preset | model, data | step, kept (ms) | step, flushed (ms) | kept / flushed | evaluation of 1000, "
             "kept (ms) | flushed (ms) | gradients' largest difference (relative) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['preset']} | {r['model']}, {r['data']}, B = {r['batch']} | {1e3 * r['step_keep']:.1f} | "
                     f"{1e3 * r['step_flush']:.1f} | {r['step_keep'] / r['step_flush']:.2f}x | "
                     f"{1e3 * r['eval_keep']:.1f} | {1e3 * r['eval_flush']:.1f} | {r['difference']:.1e} |")
    text = (f"# Denormal numbers on a CPU: kept or flushed (`hardware.denormals`)\n\nMade by `{command.strip()}` at "
            f"commit {git_commit()} on {time.strftime('%Y-%m-%d')}, on {device_name(torch.device('cpu'))}: client 0's "
            f"first {args.steps} minibatches of each preset (seed 0, the preset's data on this machine) at the "
            f"initial model, each step's loss and gradient timed per step, the median of {args.repeats} interleaved "
            "repeats of both modes; the evaluation of 1000 test samples likewise.\n\n" + "\n".join(lines) + "\n")
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
