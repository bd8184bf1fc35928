"""Scoring a run's model(s) on the test data: the global model, a bank of models (best, owner-preferred, oracle),
each user's own split (FedGH's Acc_l readings) and the personalised protocol of MA/GA-FSVRG and Per-FedAvg."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import torch

from fedrun.algorithms.base import ClientContext
from fedrun.data import FedDataset
from fedrun.engine.execution.full_batch import full_losses_and_gradients
from fedrun.engine.run.metrics import classification_metrics
from fedrun.engine.run.sampling import plan_client
from fedrun.engine.run.state import ServerState
from fedrun.model.functional import FunctionalModel

if TYPE_CHECKING:
    from fedrun.algorithms import Algorithm
    from fedrun.algorithms.round import RoundOutput
    from fedrun.config.settings import RunSettings


@dataclass(frozen=True)
class TestUsers:
    """The natural clients' test samples: each sample's user row (``of_sample``), each row's sample indices
    (``samples``), the training users' ids in client order (``train_ids``) and each id's row (``position``)."""

    of_sample: torch.Tensor
    samples: list[torch.Tensor]
    train_ids: np.ndarray
    position: dict


class Evaluation:
    """A run's evaluations of a :class:`~fedrun.engine.run.state.ServerState`: the model, the data, the clients' samples
    and the evaluation settings are fixed for the run; the state is given to each call."""

    def __init__(self, model: FunctionalModel, data: FedDataset, client_indices: list, holdout: list | None,
                 algo: Algorithm, settings: RunSettings):
        rule = algo.local
        self.model, self.data, self.client_indices, self.holdout, self.rule = model, data, client_indices, holdout, rule
        self.preferences = algo.bank.preferences  # a bank's eq. 18: (losses, models, weight decay) -> client's model
        self.batch = settings.eval.batch_size
        self.class_metrics = settings.eval.class_metrics
        self.personalized = settings.eval.personalized or rule.personalizes
        # natural clients with their own test splits
        self.by_users = settings.partition.name == "natural" and data.test_users is not None
        self.weight_decay, self.train_batch, self.seed = settings.fl.weight_decay, settings.fl.batch_size, settings.seed
        self.device = data.x_train.device
        self._preferred = None  # (the bank's models tensor, its version, each client's preferred model)

    def evaluate(self, state: ServerState, step: RoundOutput | None = None) -> dict[str, float]:
        """``test_acc`` and ``test_loss`` of the global model on the pooled test set. With a bank of models
        (MA-/GA-FSVRG) every model is tested: ``bank{c}_acc``, their mean ``bank_mean_acc``, and
        ``test_acc``/``test_loss`` are the best model's. ``eval.class_metrics`` adds macro and micro precision,
        recall and F1 (of the best model). With natural (user) clients, the readings of :meth:`user_accuracies`."""
        bank = state.bank["models"]
        models = bank if bank is not None else state.params[None]
        scores = [self.model.evaluate_hits(w, state.buffers, self.data.x_test, self.data.y_test, self.batch)
                  for w in models]
        accs = [float(h.sum()) / max(1.0, float(u.sum())) for h, u, _ in scores]
        best = int(np.argmax(accs))
        hits, units, loss = scores[best]
        out = {"test_acc": accs[best], "test_loss": loss}
        if len(models) > 1:
            out |= {f"bank{c}_acc": a for c, a in enumerate(accs)} | {"bank_mean_acc": float(np.mean(accs)),
                                                                       "bank_best": best}
        if self.class_metrics:
            pred = self.predict(state, models[best], self.data.x_test)
            out |= {k: v for k, v in classification_metrics(pred, self.data.y_test, self.data.num_classes).items()
                    if k != "accuracy"}
        if len(models) > 1:  # an upper bound, not a model: a sample counts when any model of the bank gets it right
            out["oracle_acc"] = float(torch.stack([h for h, _, _ in scores]).amax(0).sum() / units.sum())
        if self.holdout is not None:
            out["owner_acc"] = self.owner_accuracy(state)
        if self.by_users:
            out |= self.user_accuracies(state, hits, units, step)
        return out

    def owner_accuracy(self, state: ServerState) -> float:
        """Accuracy over every client's held-out samples (``eval.holdout``), each scored by its owner's model: the
        global model, or with a bank the model the owner prefers (eq. 18 on its training data)."""
        bank = state.bank["models"]
        preferred = self.preferred_models(state) if bank is not None else None
        hits = units = 0.0
        for c, ix in enumerate(self.holdout):
            if len(ix) == 0:
                continue
            w = state.params if preferred is None else bank[int(preferred[c])]
            ix = torch.as_tensor(ix, device=self.device)
            h, u, _ = self.model.evaluate_hits(w, state.buffers, self.data.x_train[ix], self.data.y_train[ix],
                                               self.batch)
            hits, units = hits + float(h.sum()), units + float(u.sum())
        return hits / max(1.0, units)

    def user_accuracies(self, state: ServerState, hits: torch.Tensor, units: torch.Tensor, step: RoundOutput | None
                        ) -> dict[str, float]:
        """FedGH's Acc_l ("the mean accuracy of local clients", after LEAF), read every way its wording allows, each
        beside ``test_acc`` (Acc_g; the sample-weighted mean over all users of the global model equals it):
        ``local_acc``: the global model on each user's own test split, the mean over all users; ``local_acc_round``
        and ``local_acc_round_samples``: the same over the round's clients only, the mean over them and weighted by
        their test samples; ``local_model_acc`` and ``local_model_acc_samples``: each of the round's clients'
        model after its local training (before the server's aggregation) on its own test split, the two means."""
        users = self._users
        per_user = torch.zeros(2, len(users.samples), dtype=torch.float64, device=hits.device)
        per_user.index_add_(1, users.of_sample.to(hits.device), torch.stack([hits, units]).double())
        scored = per_user[1] > 0
        out = {"local_acc": float((per_user[0, scored] / per_user[1, scored]).mean())}
        if step is None:
            return out
        rows = [(k, users.position[users.train_ids[p.id]]) for k, p in enumerate(step.plans)
                if users.train_ids[p.id] in users.position]
        rows = [(k, u) for k, u in rows if per_user[1, u] > 0]
        if not rows:
            return out
        mine = torch.tensor([u for _, u in rows], device=hits.device)
        counts = per_user[1, mine]
        out["local_acc_round"] = float((per_user[0, mine] / counts).mean())
        out["local_acc_round_samples"] = float(per_user[0, mine].sum() / counts.sum())
        if step.start is not None:
            own = []
            for k, u in rows:
                ix = users.samples[u].to(self.data.x_test.device)
                h, n, _ = self.model.evaluate_hits(step.start + step.result.updates[k], state.buffers,
                                                   self.data.x_test[ix], self.data.y_test[ix], self.batch)
                own.append((float(h.sum()), float(n.sum())))
            own = np.array(own)
            out["local_model_acc"] = float((own[:, 0] / own[:, 1]).mean())
            out["local_model_acc_samples"] = float(own[:, 0].sum() / own[:, 1].sum())
        return out

    @cached_property
    def _users(self) -> TestUsers:
        """Who owns which test sample, worked out once per run (the sorts cost about as much as a small
        evaluation)."""
        data = self.data
        values, index = np.unique(data.test_users, return_inverse=True)
        bounds = np.cumsum(np.bincount(index, minlength=len(values)))[:-1]
        samples = [torch.as_tensor(ix) for ix in np.split(np.argsort(index, kind="stable"), bounds)]
        return TestUsers(torch.as_tensor(index), samples, np.unique(data.train_users),
                         {v: i for i, v in enumerate(values)})

    @torch.no_grad()
    def predict(self, state: ServerState, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.model.set_training(False)
        b = self.batch
        return torch.cat([self.model.forward(w, state.buffers, x[s : s + b]).argmax(dim=-1)
                          for s in range(0, len(x), b)])

    @torch.no_grad()
    def preferred_models(self, state: ServerState) -> torch.Tensor:
        """Each client's preferred model of the bank now: eq. 18 on its whole local training data, the same
        computation (losses and the bank's ``preferences``) as a bank round's, for every client and any loss. Computed
        once per state of the bank (the evaluations of a round share it)."""
        models = state.bank["models"]
        held = self._preferred
        if held is None or held[0] is not models or held[1] != models._version:
            indices = [torch.as_tensor(ix, device=self.device) for ix in self.client_indices]
            losses, _ = full_losses_and_gradients(self.model, state.buffers, self.data.x_train, self.data.y_train,
                                                  indices, models, self.batch)
            held = self._preferred = (models, models._version, self.preferences(losses, models, self.weight_decay))
        return held[2]

    @cached_property
    def _held_classes(self) -> torch.Tensor:
        """Which classes each client's training data holds (clients x classes, float64): the test samples of those
        classes are the client's in the personalised protocol."""
        held = torch.zeros(len(self.client_indices), self.data.num_classes, dtype=torch.float64)
        for c, indices in enumerate(self.client_indices):
            held[c, torch.unique(self.data.y_train[torch.as_tensor(indices, device=self.device)]).cpu()] = 1.0
        return held

    def evaluate_personalized(self, state: ServerState, rnd: int, lr: float) -> float:
        """Mean over clients of each client's model on the test samples of the classes it holds (Zhao et al.'s
        protocol): the global model, its preferred model of a bank (MA-/GA-FSVRG), or for a rule with ``personalize``
        (Per-FedAvg) the global model adapted on one batch of the client's data. A client whose classes have no test
        sample is left out of the mean."""
        if self.rule.personalizes:
            return self._evaluate_adapted(state, rnd, lr)
        # Every client of a shared model scores the same test samples alike: each model is tested once on the whole
        # test set, and a client's accuracy is the sum of its classes' hits over the sum of their counted predictions.
        bank = state.bank["models"]
        models = state.params[None] if bank is None else bank
        labels = self.data.y_test.cpu()
        hits, units = [], []
        for w in models:
            h, u, _ = self.model.evaluate_hits(w, state.buffers, self.data.x_test, self.data.y_test, self.batch)
            hits.append(torch.bincount(labels, h.cpu().double(), self.data.num_classes))
            units.append(torch.bincount(labels, u.cpu().double(), self.data.num_classes))
        chosen = torch.zeros(len(self.client_indices), dtype=torch.long) if bank is None else \
            self.preferred_models(state).cpu().long()
        held = self._held_classes
        has_samples = held @ torch.bincount(labels, minlength=self.data.num_classes).double() > 0
        own_hits = (held * torch.stack(hits)[chosen]).sum(1)
        own_units = (held * torch.stack(units)[chosen]).sum(1).clamp_min(1.0)
        return float(np.mean((own_hits / own_units)[has_samples].numpy()))

    def _evaluate_adapted(self, state: ServerState, rnd: int, lr: float) -> float:
        """The personalised protocol with each client's own adapted model (``personalize``), client by client."""
        test_labels = self.data.y_test
        ctx = ClientContext(rnd, state.params, state.buffers, lr)
        accs = []
        for c, indices in enumerate(self.client_indices):
            held = torch.unique(self.data.y_train[torch.as_tensor(indices, device=self.device)])
            mask = torch.isin(test_labels, held)
            if not bool(mask.any()):
                continue
            batch = plan_client(c, indices, 1, self.train_batch, self.seed, rnd, True, self.device).batches[0]
            w = self.rule.personalize(self.model, ctx, self.data.x_train[batch], self.data.y_train[batch])
            acc, _ = self.model.evaluate(w, state.buffers, self.data.x_test[mask], test_labels[mask], self.batch)
            accs.append(acc)
        return float(np.mean(accs))
