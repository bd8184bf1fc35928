"""Classification metrics beyond accuracy (Zhao et al. Figs. 2-7): precision, recall and F1, macro- and micro-averaged.

From the confusion matrix of one model's predictions on a test set. Macro: the per-class value averaged over the
classes (a class nobody predicts has precision 0, as scikit-learn's default ``zero_division``); micro: from the
pooled counts, which for single-label classification all equal the accuracy.
"""

from __future__ import annotations

import torch


def confusion(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(true class, predicted class) counts."""
    return torch.bincount(y * num_classes + pred, minlength=num_classes * num_classes).reshape(num_classes, num_classes)


def classification_metrics(pred: torch.Tensor, y: torch.Tensor, num_classes: int) -> dict[str, float]:
    """accuracy and {macro,micro}_{precision,recall,f1} of predictions ``pred`` for labels ``y``."""
    cm = confusion(pred, y, num_classes).double()
    tp, predicted, actual = cm.diag(), cm.sum(dim=0), cm.sum(dim=1)
    present = (actual > 0) | (predicted > 0)  # classes in y or in pred: scikit-learn's labels
    precision = torch.where(predicted > 0, tp / predicted.clamp_min(1), torch.zeros_like(tp))
    recall = torch.where(actual > 0, tp / actual.clamp_min(1), torch.zeros_like(tp))
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall).clamp_min(1e-300),
                     torch.zeros_like(tp))
    micro_p = float(tp.sum() / predicted.sum().clamp_min(1))
    micro_r = float(tp.sum() / actual.sum().clamp_min(1))
    out = {"accuracy": float(tp.sum() / cm.sum().clamp_min(1)),
           "micro_precision": micro_p, "micro_recall": micro_r,
           "micro_f1": 2 * micro_p * micro_r / (micro_p + micro_r) if micro_p + micro_r > 0 else 0.0}
    for name, values in (("precision", precision), ("recall", recall), ("f1", f1)):
        out[f"macro_{name}"] = float(values[present].mean())
    return out
