"""odd_batches.py - a training loop over a torch DataLoader whose batches are not a tensor pair,
for the test that loaderd.diagnose never breaks the script it watches: a collate_fn makes, per
step in turn, a nested tensor (torch.nested), a dict of lists, None and a list of strings. A
tiny model trains on numbers drawn from each batch. Prints "loss STEP VALUE" per step and
"done"; nothing in it knows of loaderd.

    python odd_batches.py [--steps N] [--seed N]
"""
import argparse
import warnings

import torch
import torch.nn as nn
import torch.utils.data


class Numbers(torch.utils.data.Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return i


def collate(items):
    kind = items[0] % 4
    if kind == 0:
        with warnings.catch_warnings():   # torch 1.13: nested tensors are a prototype
            warnings.simplefilter("ignore")
            return torch.nested.nested_tensor([torch.full((1 + i % 3, 4), float(i))
                                               for i in items])
    if kind == 1:
        return {"x": [torch.full((4,), float(i)) for i in items], "tag": ["n%d" % i
                                                                        for i in items]}
    if kind == 2:
        return None
    return ["item %d" % i for i in items]


def numbers_of(batch, step):
    """Four numbers from any batch above."""
    if batch is None:
        return torch.full((1, 4), float(step))
    if isinstance(batch, dict):
        return torch.stack(batch["x"])
    if isinstance(batch, list):
        return torch.tensor([[float(len(s))] * 4 for s in batch])
    return torch.stack([t.mean(0) for t in batch.unbind()])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # batches in index order (shuffle off), so that the collate sees 4 items of one kind
    dl = torch.utils.data.DataLoader(Numbers(), batch_size=1, collate_fn=collate)
    step = 0
    while step < a.steps:
        for batch in dl:
            x = numbers_of(batch, step) / 10
            loss = ((model(x) - 1) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            print("loss %d %.6f %s" % (step, loss.item(), type(batch).__name__))
            step += 1
            if step == a.steps:
                break
    print("done")


if __name__ == "__main__":
    main()
