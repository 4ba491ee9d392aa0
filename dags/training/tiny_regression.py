"""A tiny regression trained with Hugging Face Accelerate: the example DAGs' training script.

It is small on purpose (a linear model on synthetic data, seconds on CPU), and shows the three
things a script does for ``AccelerateTrainOperator``:

* it uses ``Accelerator`` and ``prepare``, so the same code runs on 1 CPU, 8 GPUs or 2 machines;
* it checkpoints to ``--checkpoint-dir`` when given and resumes from there, so a run replaced after
  a spot reclaim goes on where it stopped (``AIRFLOW_GPU_ATTEMPT`` says which submission this is);
* its main process prints one ``::airflow-gpu-result::<json>`` line: the task's return value.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from torch.utils.data import DataLoader, TensorDataset

RESULT_MARKER = "::airflow-gpu-result::"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epoch-seconds", type=float, default=0.0, help="stretch each epoch (to watch a run)")
    parser.add_argument("--checkpoint-dir", default=None)
    return parser.parse_args()


def say(line: str) -> None:
    """One write per line: the ranks share the output, and a write this short is never split."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    args = arguments()
    accelerator = Accelerator()
    torch.manual_seed(0)  # the same data on every rank; each rank trains on its shard of it
    features = torch.randn(args.samples, 8)
    target = features @ torch.randn(8, 1) + 0.05 * torch.randn(args.samples, 1)
    loader = DataLoader(TensorDataset(features, target), batch_size=args.batch_size, shuffle=True)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    # The main process decides where training resumes and tells the others, so that every rank runs
    # the same epochs (a rank that trained one epoch more would wait forever in a collective). The
    # checkpoint directory must be storage every machine sees: a shared volume, EFS, FSx.
    checkpoint = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    decided = [0]
    if accelerator.is_main_process and checkpoint is not None and (checkpoint / "epoch.json").is_file():
        decided = [json.loads((checkpoint / "epoch.json").read_text())["next"]]
    start_epoch = int(broadcast_object_list(decided)[0])
    if start_epoch:
        accelerator.load_state(str(checkpoint))
        accelerator.print(f"resumed from {checkpoint} at epoch {start_epoch}")

    losses: list[float] = []
    for epoch in range(start_epoch, args.epochs):
        started, total, batches = time.monotonic(), torch.zeros(1, device=accelerator.device), 0
        for inputs, labels in loader:
            loss = torch.nn.functional.mse_loss(model(inputs), labels)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += loss.detach()
            batches += 1
        mean = accelerator.gather(total / max(batches, 1)).mean().item()  # over every rank
        losses.append(round(mean, 6))
        say(f"rank {accelerator.process_index} epoch {epoch} loss {mean:.4f}")
        time.sleep(max(0.0, args.epoch_seconds - (time.monotonic() - started)))
        if checkpoint is not None:
            accelerator.save_state(str(checkpoint))
            if accelerator.is_main_process:
                (checkpoint / "epoch.json").write_text(json.dumps({"next": epoch + 1}))
            accelerator.wait_for_everyone()

    # Which process ran on which machine (torchrun's GROUP_RANK is the machine rank).
    me = torch.tensor([[accelerator.process_index, int(os.environ.get("GROUP_RANK", "0"))]], device=accelerator.device)
    ranks = accelerator.gather(me).tolist()
    if accelerator.is_main_process:
        result = {
            "losses": losses,
            "ranks": sorted(int(rank) for rank, _ in ranks),
            "machines": sorted({int(machine) for _, machine in ranks}),
            "world_size": accelerator.num_processes,
            "device": accelerator.device.type,
            "start_epoch": start_epoch,
            "attempt": int(os.environ.get("AIRFLOW_GPU_ATTEMPT", "1")),
        }
        say(RESULT_MARKER + json.dumps(result))
    accelerator.end_training()


if __name__ == "__main__":
    main()
