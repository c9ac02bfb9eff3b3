"""`stepahead train-drafter --model M --out DIR`: train an EAGLE-style drafter for a model by self-distillation."""

from __future__ import annotations

import argparse
import json


def add_train_drafter_parser(commands) -> None:
    """Register the `train-drafter` subcommand."""
    parser = commands.add_parser(
        "train-drafter", help="train an EAGLE-style drafter for a model from its own outputs (resumable)")
    parser.add_argument("--model", default=None, help="target model (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--out", required=True, help="directory to write config.json and model.safetensors to")
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="time budget; past it the run stops and the same command resumes it (0: none; default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the training (default 0)")
    parser.add_argument("--device", default="auto", help="cpu, cuda[:N] or auto (cuda when available; default auto)")
    parser.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    data = parser.add_argument_group("data")
    data.add_argument("--num-prompts", type=int, default=1024, help="training prompts (default 1024)")
    data.add_argument("--held-out-prompts", type=int, default=32, help="prompts of the acceptance check (default 32)")
    data.add_argument("--max-new-tokens", type=int, default=128, help="continuation length (default 128)")
    data.add_argument("--draft-vocab-size", type=int, default=4096,
                      help="tokens the drafter scores: the target's most frequent choices (default 4096)")
    train = parser.add_argument_group("training")
    train.add_argument("--epochs", type=int, default=3, help="passes over the data (default 3)")
    train.add_argument("--batch-entries", type=int, default=512, help="token positions per batch (default 512)")
    train.add_argument("--learning-rate", type=float, default=1e-3, help="peak AdamW learning rate (default 1e-3)")
    parser.add_argument("--keep-work", action="store_true", help="keep <out>/.train (data, checkpoint) at the end")


def run_train_drafter(args: argparse.Namespace) -> dict:
    """Resolve the model, run (or resume) the training, print the summary."""
    import torch

    from client.model_resolver import resolve_model
    from client.out_paths import writable_dir
    from executor_svc.drafter_training.run import DataSettings, TrainDrafterJob, train_drafter
    from executor_svc.drafter_training.trainer import TrainSettings

    if args.num_threads is not None:
        if args.num_threads < 1:
            raise ValueError(f"num_threads: must be >= 1, got {args.num_threads}")
        torch.set_num_threads(args.num_threads)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.minutes < 0:
        raise ValueError(f"minutes: must be >= 0, got {args.minutes}")
    writable_dir("out", args.out)
    data = DataSettings(num_prompts=args.num_prompts, held_out_prompts=args.held_out_prompts,
                        max_new_tokens=args.max_new_tokens, draft_vocab_size=args.draft_vocab_size)
    train = TrainSettings(epochs=args.epochs, batch_entries=args.batch_entries, learning_rate=args.learning_rate)
    job = TrainDrafterJob(model_dir=str(resolve_model(args.model)), out_dir=args.out, seed=args.seed,
                          minutes=args.minutes or None, data=data, train=train, device=device,
                          keep_work=args.keep_work)
    summary = train_drafter(job)
    if "stopped" not in summary:
        last = summary["history"][-1]["held_out"]
        print(json.dumps({"out": args.out, "held_out": last, "draft_vocab_coverage":
                          summary["data"]["draft_vocab_coverage"], "seconds": summary["last_run_seconds"]}))
    return summary
